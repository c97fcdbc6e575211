"""The PPO agent on the real stack: ASI values, exact resume, a Ray actor killed mid-training."""

import pytest
import ray
import torch
from rl_helpers import ensure_ray, straight_and_resumed, tiny_config, write_demo

from mimic2dm.rl.agent import TrackerAgent
from mimic2dm.rl.envstate import states_equal
from mimic2dm.rl.policy import load_policy
from mimic2dm.rl.vecenv import TaskVecEnv
from mimic2dm.train import compose_config, train
from mimic2dm.utils.checkpoint import load_checkpoint


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return write_demo(tmp_path_factory.mktemp("clip") / "demo.npz")


@pytest.fixture(scope="module")
def ray_session():
    return ensure_ray()


def test_agent_hands_critic_values_to_the_asi_buffers(tmp_path, clip):
    seen = []

    def after_epoch(agent):
        asi = agent.vec_env.task.asi
        seen.append((agent.epoch_num, int(torch.isfinite(asi.scores).sum()), asi.replacements))

    s = train(
        tiny_config(tmp_path / "run", clip, "train.max_epochs=2", "logger.tensorboard=false"),
        epoch_callback=after_epoch,
    )
    assert s["epochs"] == 2 and [e for e, _, _ in seen] == [1, 2]
    assert (
        seen[0][1] > 0 and seen[-1][2] > 0
    )  # buffers start unscored (-inf); the critic scored visited states
    assert s["history"][-1]["asi/scored_fraction"] > 0


def test_linear_schedule_decays_the_learning_rate_over_the_time_budget(tmp_path, clip):
    lrs = []
    s = train(
        tiny_config(tmp_path / "run", clip, "train.max_epochs=100000", "train.max_seconds=4",
                    "train.lr_schedule=linear", "train.learning_rate=1e-3", "logger.tensorboard=false"),
        epoch_callback=lambda agent: lrs.append((agent.train_seconds(), agent.last_lr)),
    )  # fmt: skip
    assert s["epochs"] >= 3 and len(lrs) >= 3
    # lr = 1e-3 (1 - t / 4 s), falling epoch by epoch, near zero at the end of the budget
    for t, lr in lrs[1:]:
        assert lr == pytest.approx(1e-3 * max(0.0, 1 - t / 4.0), abs=1e-4)
    assert lrs[-1][1] < 0.3e-3 < lrs[0][1] and all(
        a[1] >= b[1] for a, b in zip(lrs, lrs[1:], strict=False)
    )
    ck = load_checkpoint(s["last_checkpoint"])
    assert ck["train_seconds"] >= 4.0 and ck["last_lr"] < 0.3e-3
    # the time budget spans resumes (as max_epochs does): the spent budget ends at once,
    # a larger one continues the decay from where it was
    r = train(compose_config([f"resume={tmp_path / 'run'}"]))
    assert r["epochs"] == s["epochs"] + 1
    spent = []
    r = train(
        compose_config([f"resume={tmp_path / 'run'}"]),
        resume_overrides=["train.max_seconds=6"],
        epoch_callback=lambda agent: spent.append(agent.budget_checked_at),
    )
    ck2 = load_checkpoint(r["last_checkpoint"])
    # it stops at the first epoch that ends past the 6 s budget (not a timed bound: how long
    # one epoch takes depends on the machine)
    assert r["epochs"] >= s["epochs"] + 2 and len(spent) >= 2
    assert spent[-2] < 6.0 <= spent[-1] <= ck2["train_seconds"]


@pytest.mark.parametrize("overlap", [False, True])
def test_rollouts_run_on_collect_threads_and_the_update_on_torch_threads(
    tmp_path, clip, monkeypatch, overlap
):
    """``train.collect_threads`` sets torch's threads for the rollout only (env steps see
    1); the update, and everything after the rollout, run on ``train.torch_threads`` (2).
    With ``train.overlap`` the update runs beside the rollout on ``collect_threads`` too,
    and the run's own threads come back after each epoch."""
    seen = {"step": set(), "update": set()}
    step, update = TaskVecEnv.step, TrackerAgent.train_actor_critic

    def spy_step(self, actions):
        seen["step"].add(torch.get_num_threads())
        return step(self, actions)

    def spy_update(self, minibatch):
        seen["update"].add(torch.get_num_threads())
        return update(self, minibatch)

    monkeypatch.setattr(TaskVecEnv, "step", spy_step)
    monkeypatch.setattr(TrackerAgent, "train_actor_critic", spy_update)
    before = torch.get_num_threads()
    try:
        train(tiny_config(tmp_path / "run", clip, "train.max_epochs=2", "train.torch_threads=2",
                          "train.collect_threads=1", f"train.overlap={overlap}", "logger.tensorboard=false"))  # fmt: skip
    finally:
        after = torch.get_num_threads()
        torch.set_num_threads(before)
    assert seen == {"step": {1}, "update": {1 if overlap else 2}} and after == 2


def test_exact_resume_gives_identical_weights(tmp_path, clip):
    k = 2
    a, b, _ = straight_and_resumed(tmp_path, clip, k, "logger.tensorboard=false")
    assert a["model"].keys() == b["model"].keys()
    for name in a["model"]:
        assert torch.equal(a["model"][name], b["model"][name]), name
    assert states_equal(a["optimizer"]["state"], b["optimizer"]["state"])
    assert states_equal(a["env_state"], b["env_state"])  # ASI buffers, episodes and physics
    assert states_equal(a["rng"]["torch"], b["rng"]["torch"])
    policy = load_policy(tmp_path / "split")
    assert policy.epoch == 2 * k and policy.env_spec.character == "humanoid"
    # trained with one view, the policy acts on two (view aggregation, zero-shot)
    spec = policy.env_spec
    env = TaskVecEnv(spec.with_config(num_views=2), 3)
    obs = env.reset()
    layout = env.obs_layout()
    assert layout["views"] == 2 and obs.shape == (3, layout["prop"] + 2 * layout["view"])
    act = policy.act(obs)
    assert act.shape == (3, env.task.action_dim) and act.abs().max() <= 1.0
    env.step(act)
    env.close()


def test_resume_rejects_a_changed_config_group(tmp_path, clip):
    train(tiny_config(tmp_path / "r", clip, "train.max_epochs=1", "logger.tensorboard=false"))
    with pytest.raises(ValueError, match="config group 'ray' cannot change"):
        train(compose_config([f"resume={tmp_path / 'r'}"]), resume_overrides=["ray=local"])


@pytest.mark.parametrize("pipeline", [False, True])
def test_killed_ray_actor_is_replaced_and_training_continues(tmp_path, clip, ray_session, pipeline):
    killed = []

    def kill_one(agent):
        if agent.epoch_num == 1:
            killed.append(agent.vec_env.actors[0])
            ray.kill(agent.vec_env.actors[0])

    cfg = tiny_config(
        tmp_path / "ray",
        clip,
        "ray=local",
        "ray.actor_cpus=0.5",
        f"ray.pipeline={str(pipeline).lower()}",
        "ray.actor_policy=false",
        "train.max_epochs=3",
        "logger.tensorboard=false",
    )
    s = train(cfg, epoch_callback=kill_one)
    assert killed and s["actor_restarts"] == 1 and s["epochs"] == 3
    assert [h["ray/actor_restarts"] for h in s["history"]] == [0.0, 1.0, 0.0]
    assert s["history"][-1]["perf/samples_per_s"] > 0


def test_non_finite_losses_stop_the_run_keeping_the_last_checkpoint(tmp_path, clip, monkeypatch):
    from mimic2dm.rl.agent import TrainingDiverged

    update = TrackerAgent.train_actor_critic

    def diverging(self, minibatch):
        out = list(update(self, minibatch))
        if self.epoch_num == 3:
            out[0] = torch.tensor(float("nan"))
        return tuple(out)

    monkeypatch.setattr(TrackerAgent, "train_actor_critic", diverging)
    with pytest.raises(
        TrainingDiverged, match=r"epoch 3: the PPO losses are not finite.*last\.pt \(epoch 2\)"
    ):
        train(tiny_config(tmp_path / "run", clip, "train.max_epochs=5", "logger.tensorboard=false"))
    ck = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")
    assert ck["epoch"] == 2 and all(
        torch.isfinite(v).all() for v in ck["model"].values() if v.is_floating_point()
    )
