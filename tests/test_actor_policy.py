"""``ray.actor_policy``: each Ray actor runs the epoch's policy and collects its part of the
rollout in one call, on the real stack (rl-games, MuJoCo, a local Ray cluster)."""

import math

import pytest
import torch
from rl_helpers import ensure_ray, straight_and_resumed, tiny_config, write_demo

from mimic2dm.rl.agent import TrackerAgent
from mimic2dm.rl.config import RayConfig
from mimic2dm.rl.envstate import states_equal
from mimic2dm.train import train
from mimic2dm.utils.validate import ConfigError

RAY = ["ray=local", "ray.num_actors=2", "ray.actor_cpus=0.5", "ray.actor_policy=true",
       "logger.tensorboard=false"]  # fmt: skip


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    """The demo clip, with a local Ray cluster for this module only: a cluster left running
    would die with the next ``ray stop`` of another test (tests/test_cluster.py), and this
    process with it."""
    import ray

    started = not ray.is_initialized()
    ensure_ray()
    yield write_demo(tmp_path_factory.mktemp("clip") / "demo.npz")
    if started:
        ray.shutdown()


def test_the_actors_batch_is_what_the_learners_policy_gives_for_it(tmp_path, clip):
    seen = {}

    def after_epoch(agent: TrackerAgent):
        if agent.epoch_num != 2:
            return
        ended_before = agent.game_lengths.current_size
        batch = agent._play_steps_in_actors()  # a third rollout, by the weights of now
        model = agent.model
        model.eval()
        with torch.no_grad():
            res = model({"is_train": False, "prev_actions": None, "obs": batch["obses"]})
        seen.update(batch=batch, res=res, ended_before=ended_before, model=model,
                    ended=int(batch["dones"].sum()), stats=agent.vec_env.stats())  # fmt: skip

    s = train(
        tiny_config(tmp_path / "run", clip, "train.max_epochs=2", *RAY), epoch_callback=after_epoch
    )
    assert s["epochs"] == 2 and s["actor_restarts"] == 0
    batch, res = seen["batch"], seen["res"]
    n = 8 * 8
    assert batch["obses"].shape[0] == n and batch["actions"].shape[0] == n
    assert batch["played_frames"] == n and batch["step_time"] > 0
    # each sample's observation, action mean, value and log-probability line up: the actors
    # ran the learner's weights, normalisers and value scale on the observations stored
    assert torch.allclose(res["mus"], batch["mus"], atol=1e-5)
    assert torch.allclose(res["values"], batch["values"], atol=1e-4)
    logstd = torch.log(res["sigmas"])
    neglogp = seen["model"].neglogp(batch["actions"], res["mus"], res["sigmas"], logstd)
    assert torch.allclose(neglogp, batch["neglogpacs"], atol=1e-3)
    # sampled with the policy's std around its mean (the stored actions are not clamped)
    z = (batch["actions"] - batch["mus"]) / batch["sigmas"]
    assert 0.7 < float(z.std()) < 1.3 and math.isclose(
        float(batch["sigmas"][0, 0]), 0.05, rel_tol=1e-5
    )
    assert torch.isfinite(batch["returns"]).all()
    # the actors handed the values to their tasks (ASI scores the states they start from)
    assert seen["stats"]["asi/scored_fraction"] > 0


@pytest.mark.parametrize("overlap", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_exact_resume_with_the_policy_in_the_actors(tmp_path, clip, overlap):
    a, b, s = straight_and_resumed(tmp_path, clip, 2, *RAY, f"train.overlap={str(overlap).lower()}")
    for name in a["model"]:
        assert torch.equal(a["model"][name], b["model"][name]), name
    assert states_equal(a["optimizer"]["state"], b["optimizer"]["state"])
    # every actor's task and the RNG of its action noise
    assert all("actor_torch_rng" in t for t in a["env_state"]["tasks"])
    assert states_equal(a["env_state"], b["env_state"])


def test_a_dead_actor_is_replaced_and_its_part_of_the_rollout_collected_again(tmp_path, clip):
    import ray

    killed = []

    def after_epoch(agent: TrackerAgent):
        if agent.epoch_num == 1:
            killed.append(agent.vec_env.actors[0])
            ray.kill(agent.vec_env.actors[0])

    s = train(
        tiny_config(tmp_path / "run", clip, "train.max_epochs=3", *RAY), epoch_callback=after_epoch
    )
    assert killed and s["epochs"] == 3 and s["frames"] == 3 * 64
    assert s["actor_restarts"] == 1
    assert [h["ray/actor_restarts"] for h in s["history"]] == [0.0, 1.0, 0.0]


def test_the_actors_policy_and_the_pipeline_exclude_each_other():
    with pytest.raises(ConfigError, match="ray.pipeline"):
        RayConfig(enabled=True, actor_policy=True, pipeline=True)


def test_the_actors_collect_the_batch_that_rl_games_rollout_collects_over_them(
    tmp_path, clip, monkeypatch
):
    """With the action noise at 1e-30 (actions = the policy's mean), the actors' own rollouts
    fill the experience buffer as rl-games' rollout does when it steps the same 2 actors once
    per call (the same episodes, rewards, dones and bookkeeping; the policy's matrix products
    over 4 envs instead of 8 may differ in the last bits)."""
    batches, lengths = {}, {}
    play = TrackerAgent.play_steps

    def capture(name):
        def wrapped(self):
            batch = play(self)
            batches.setdefault(name, {k: v.clone() for k, v in batch.items() if torch.is_tensor(v)})
            return batch

        return wrapped

    for name, in_actors in (("actors", True), ("learner", False)):
        monkeypatch.setattr(TrackerAgent, "play_steps", capture(name))
        s = train(tiny_config(tmp_path / name, clip, "train.max_epochs=1", *RAY,
                              f"ray.actor_policy={str(in_actors).lower()}", "train.network.sigma_init=1e-30",
                              "train.checkpoint.enabled=false"))  # fmt: skip
        lengths[name] = s["reward"]
    a, b = batches["actors"], batches["learner"]
    assert (
        a.keys() == b.keys()
        and {"obses", "actions", "dones", "returns", "values", "neglogpacs"} <= a.keys()
    )
    for k in a:
        if (
            a[k].is_floating_point() and k != "neglogpacs"
        ):  # log-probabilities at sigma 1e-30 magnify bits
            assert torch.allclose(a[k], b[k], atol=1e-4, rtol=1e-4), k
        elif k != "neglogpacs":
            assert torch.equal(a[k], b[k]), k
    assert a["dones"].any()  # episodes ended and restarted inside the rollout
    assert lengths["actors"] == pytest.approx(
        lengths["learner"], rel=1e-4
    )  # the epoch's mean reward


def test_the_actors_give_the_critic_its_columns(tmp_path, clip):
    """The dribble with ``task.ball_in_critic``: the actors' observations carry the ball state
    after the views, and their values are the learner's critic on them."""
    from task_helpers import standing_clip

    from mimic2dm.motion.format import save_motion2d

    ball = tmp_path / "ball.npz"
    save_motion2d(standing_clip("humanoid", frames=40, ball=True), ball)
    seen = {}

    def after_epoch(agent: TrackerAgent):
        if agent.epoch_num == 2:
            batch = agent._play_steps_in_actors()
            agent.model.eval()
            with torch.no_grad():
                res = agent.model({"is_train": False, "prev_actions": None, "obs": batch["obses"]})
            seen.update(batch=batch, res=res, layout=agent.vec_env.obs_layout())

    cfg = tiny_config(tmp_path / "run", ball, "task=dribble", "task.ball_in_critic=true",
                      "train.max_epochs=2", *RAY)  # fmt: skip
    assert train(cfg, epoch_callback=after_epoch)["epochs"] == 2
    batch, res, lay = seen["batch"], seen["res"], seen["layout"]
    assert lay["critic"] == 6
    assert batch["obses"].shape[1] == lay["prop"] + lay["views"] * lay["view"] + 6
    assert torch.allclose(res["values"], batch["values"], atol=1e-4)
    assert torch.allclose(res["mus"], batch["mus"], atol=1e-5)
