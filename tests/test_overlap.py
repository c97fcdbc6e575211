"""``train.overlap``: the next rollout is collected while the PPO update runs, by a copy of
the policy taken before the update, on the real stack (rl-games, MuJoCo, a Ray cluster)."""

import pytest
import torch
from rl_helpers import ensure_ray, straight_and_resumed, tiny_config, write_demo

from mimic2dm.rl.agent import TrackerAgent
from mimic2dm.rl.envstate import states_equal
from mimic2dm.rl.vecenv import TaskVecEnv
from mimic2dm.train import train
from mimic2dm.utils.checkpoint import load_checkpoint


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return write_demo(tmp_path_factory.mktemp("clip") / "demo.npz")


def _weights(model) -> dict[str, torch.Tensor]:
    """The network's trained tensors (not the running normalisers)."""
    return {k: v.clone() for k, v in model.state_dict().items() if k.endswith((".weight", ".bias"))}


def test_each_batch_is_collected_by_the_policy_one_update_behind(tmp_path, clip):
    seen = []

    def after_epoch(agent: TrackerAgent):
        seen.append((_weights(agent._acting_model), _weights(agent.model)))

    s = train(tiny_config(tmp_path / "run", clip, "train.max_epochs=4", "train.overlap=true",
                          "logger.tensorboard=false"), epoch_callback=after_epoch)  # fmt: skip
    assert s["epochs"] == 4 and len(seen) == 4
    for (acting, trained), (acting_next, _) in zip(seen, seen[1:], strict=False):
        # the rollout of epoch k + 1 ran with the weights epoch k's update started from ...
        assert not all(torch.equal(acting[k], trained[k]) for k in trained)
        # ... and the next one with the weights that update produced
        assert all(torch.equal(acting_next[k], trained[k]) for k in trained)
    # the batch collected for the next epoch waits in the checkpoint
    ck = load_checkpoint(s["last_checkpoint"])
    pending = ck["runtime"]["pending_batch"]
    assert pending["obses"].shape[0] == 8 * 8 and pending["played_frames"] == 64
    assert ck["frame"] == 4 * 64  # frames count the batches trained on


@pytest.mark.parametrize("ray_actors", [0, 2])
def test_exact_resume_with_overlap(tmp_path, clip, ray_actors):
    k = 2
    extra = ["train.overlap=true", "logger.tensorboard=false"]
    if ray_actors:
        ensure_ray()
        extra += ["ray=local", f"ray.num_actors={ray_actors}", "ray.actor_cpus=0.5"]
    a, b, _ = straight_and_resumed(tmp_path, clip, k, *extra)
    for name in a["model"]:
        assert torch.equal(a["model"][name], b["model"][name]), name
    assert states_equal(a["optimizer"]["state"], b["optimizer"]["state"])
    assert states_equal(a["env_state"], b["env_state"])
    assert states_equal(a["runtime"]["pending_batch"], b["runtime"]["pending_batch"])
    assert states_equal(a["rng"]["torch"], b["rng"]["torch"])


def test_a_failure_while_collecting_in_the_background_ends_the_run_with_it(
    tmp_path, clip, monkeypatch
):
    calls = {"n": 0}
    step = TaskVecEnv.step

    def failing_step(self, actions):
        calls["n"] += 1
        if calls["n"] == 20:  # in the second epoch's background rollout (8 steps per rollout)
            raise RuntimeError("engine lost")
        return step(self, actions)

    monkeypatch.setattr(TaskVecEnv, "step", failing_step)
    with pytest.raises(RuntimeError, match="engine lost"):
        train(tiny_config(tmp_path / "run", clip, "train.max_epochs=5", "train.overlap=true",
                          "logger.tensorboard=false"))  # fmt: skip
    assert calls["n"] == 20


def test_the_update_clips_around_the_policy_it_starts_from(tmp_path, clip, monkeypatch):
    """Decoupled PPO: the stored log-probabilities are the proximal policy's (the update's
    starting point), so the first minibatch of every epoch starts at ratio 1, although the
    batch was collected by the policy one update before."""
    seen = []
    grads = TrackerAgent.calc_gradients

    def spy(self, input_dict):
        if not seen or seen[-1][0] != self.epoch_num:
            with torch.no_grad():
                now = self.model({"is_train": True, "prev_actions": input_dict["actions"],
                                  "obs": input_dict["obs"]})["prev_neglogp"]  # fmt: skip
            seen.append((self.epoch_num, input_dict["old_logp_actions"].clone(), now))
        return grads(self, input_dict)

    monkeypatch.setattr(TrackerAgent, "calc_gradients", spy)
    train(tiny_config(tmp_path / "run", clip, "train.max_epochs=3", "train.overlap=true",
                      "logger.tensorboard=false"))  # fmt: skip
    assert [e for e, _, _ in seen] == [1, 2, 3]
    for _, stored, now in seen:
        torch.testing.assert_close(stored, now, rtol=0, atol=1e-4)
