"""Overlapping physics with the learner's work: ``Engine.step_async``, ``Task.step_begin`` /
``step_end``, env groups in the in-process vecenv, and the pipelined rollout of the agent.

Each pipelined piece is checked against the plain one it replaces, bit for bit."""

import pytest
import torch
from fake_engine import KinematicEngine
from mimic2dm.tasks.base import TaskSpec
from mimic2dm.tasks.registry import make_task
from rl_helpers import ensure_ray, spec_for, tiny_config, write_demo

from mimic2dm.engines.base import EngineOptions
from mimic2dm.engines.mujoco_engine import MujocoEngine
from mimic2dm.rl.agent import TrackerAgent
from mimic2dm.rl.envstate import states_equal
from mimic2dm.rl.vecenv import TaskVecEnv
from mimic2dm.train import train


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return write_demo(tmp_path_factory.mktemp("clip") / "demo.npz")


def _targets(engine, gen):
    lo, hi = engine.get_dof_limits()
    return lo + (hi - lo) * torch.rand(engine.num_envs, engine.num_dofs, generator=gen)


def test_step_async_equals_step_and_read_outs_wait_for_it():
    opts = EngineOptions(num_threads=1)
    a, b = MujocoEngine("humanoid", 3, options=opts), MujocoEngine("humanoid", 3, options=opts)
    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        t = _targets(a, gen)
        a.step(t)
        b.step_async(t)
        assert b.stepping  # returned before the physics is waited for
        kp = b.get_keypoints()  # waits first
        assert not b.stepping and torch.equal(kp, a.get_keypoints())
    assert states_equal(a.state_dict(), b.state_dict())
    assert b.physics_seconds > 0 and b.wait_seconds >= 0
    # a second step_async waits for the first; close() waits for the last one
    b.step_async(_targets(b, gen))
    b.step_async(_targets(b, gen))
    b.close()
    a.close()


class _FailingEngine(KinematicEngine):
    fail = False

    def _step(self):
        if self.fail:
            raise RuntimeError("solver blew up")
        super()._step()


def test_step_async_raises_the_steps_error_at_the_next_wait_and_keeps_working():
    e = _FailingEngine("humanoid", 2)
    e.fail = True
    e.step_async()
    with pytest.raises(RuntimeError, match="solver blew up"):
        e.get_state()
    assert not e.stepping
    e.fail = False
    lo, hi = e.get_dof_limits()
    mid = ((lo + hi) / 2).expand(2, -1).clone()
    e.step_async(mid)
    assert torch.allclose(e.get_state().dof_pos, mid)  # the worker thread survived the error
    e.close()


@pytest.mark.parametrize("task", ["tracking2d", "stand"])
def test_step_begin_then_step_end_equals_step(clip, task):
    spec = spec_for(clip) if task == "tracking2d" else TaskSpec(task="stand", character="humanoid",
                                                                engine={"name": "mujoco", "num_threads": 1})  # fmt: skip
    a, b = make_task(spec, 4, seed=5), make_task(spec, 4, seed=5)
    gen = torch.Generator().manual_seed(1)
    for _ in range(25):  # past episode ends: resets happen inside step_end
        act = 0.4 * torch.randn(4, a.action_dim, generator=gen)
        ra = a.step(act)
        b.step_begin(act)
        with pytest.raises(RuntimeError, match="step_begin called twice"):
            b.step_begin(act)
        rb = b.step_end()
        assert torch.equal(ra.obs, rb.obs) and torch.equal(ra.reward, rb.reward)
        assert torch.equal(ra.terminated, rb.terminated) and torch.equal(ra.truncated, rb.truncated)
    with pytest.raises(RuntimeError, match="step_end called without step_begin"):
        b.step_end()
    a.close()
    b.close()


def test_env_groups_step_as_one_task_per_group_and_restore_exactly(clip):
    spec = spec_for(clip, max_episode_steps=6)
    env = TaskVecEnv(spec.with_engine(num_threads=2), 8, seed=3, groups=2)
    assert env.num_groups == 2 and env.bounds == [(0, 4), (4, 8)]
    assert all(t.engine.num_threads == 1 for t in env.tasks)  # the threads are shared out
    ref = [make_task(spec, 4, 3), make_task(spec, 4, 1003)]  # group g is seeded seed + 1000 g
    for t in ref:
        t.reset(torch.arange(4))
    assert torch.equal(env.reset(), torch.cat([t.observe() for t in ref]))
    gen = torch.Generator().manual_seed(0)
    acts = [0.3 * torch.randn(8, env.task.action_dim, generator=gen) for _ in range(30)]
    dones = 0
    for i, a in enumerate(acts[:20]):
        vals = torch.randn(8, generator=gen)
        for g, t in enumerate(ref):
            t.observe_values(vals[4 * g : 4 * g + 4])
        if i % 2:  # both ways of stepping the groups: all at once, or launched and finished in turn
            env.observe_values(vals)
            obs, rew, done, infos = env.step(a)
        else:
            for g in range(2):
                env.launch(g, a[4 * g : 4 * g + 4], vals[4 * g : 4 * g + 4])
            parts = [env.finish(g) for g in range(2)]
            obs, rew, done = (torch.cat([p[j] for p in parts]) for j in range(3))
            assert all(p[3]["physics_busy_s"] > 0 for p in parts)
        rr = [t.step(a[4 * g : 4 * g + 4]) for g, t in enumerate(ref)]
        assert torch.equal(obs, torch.cat([r.obs for r in rr])), i
        assert torch.equal(rew, torch.cat([r.reward for r in rr])), i
        assert torch.equal(done, torch.cat([r.done for r in rr]).to(torch.uint8)), i
        dones += int(done.sum())
    assert dones > 0
    # a checkpoint of the groups continues bit for bit in a new vecenv of the same shape
    other = TaskVecEnv(spec, 8, seed=99, groups=2)
    other.set_env_state(env.get_env_state())
    assert torch.equal(other.reset(), torch.cat([t.observe() for t in env.tasks]))
    for a in acts[20:]:
        oa, ra, da, _ = env.step(a)
        ob, rb, db, _ = other.step(a)
        assert torch.equal(oa, ob) and torch.equal(ra, rb) and torch.equal(da, db)
    # another shape restores the buffers only (and says so)
    single = TaskVecEnv(spec, 8, seed=0)
    single.set_env_state(env.get_env_state())
    assert not single._restored
    for e in (env, other, single, *ref):
        e.close()


def test_env_groups_must_split_the_envs(clip):
    with pytest.raises(ValueError, match="env_groups=3 does not split train.num_envs=8"):
        TaskVecEnv(spec_for(clip), 8, groups=3)


@pytest.mark.parametrize("where", ["in-process", "ray"])
def test_pipelined_rollout_collects_the_same_batch_as_rl_games_rollout(
    tmp_path, clip, monkeypatch, where
):
    """With the action noise at 1e-30 (actions = the policy's mean), the pipelined rollout
    over 2 env groups (in-process groups, or 2 Ray actors) must fill the experience buffer
    exactly as rl-games' own rollout does when it steps the same groups all at once."""
    groups = (
        ["train.env_groups=2"]
        if where == "in-process"
        else ["ray=local", "ray.actor_cpus=0.5", "ray.pipeline=true", "ray.actor_policy=false"]
    )
    if where == "ray":
        ensure_ray()
    batches, seen_groups = {}, {}
    play = TrackerAgent.play_steps

    def capture(name):
        def wrapped(self):
            batch = play(self)
            seen_groups[name] = self.vec_env.num_groups
            batches.setdefault(name, {k: v.clone() for k, v in batch.items() if torch.is_tensor(v)})
            return batch

        return wrapped

    for name, pipelined in (("pipelined", True), ("plain", False)):
        monkeypatch.setattr(TrackerAgent, "play_steps", capture(name))
        monkeypatch.setattr(TrackerAgent, "_pipelined", lambda self, p=pipelined: p)
        train(tiny_config(tmp_path / name, clip, "train.max_epochs=1", *groups,
                          "train.network.sigma_init=1e-30", "logger.tensorboard=false",
                          "train.checkpoint.enabled=false"))  # fmt: skip
    assert seen_groups == {"pipelined": 2, "plain": 2}
    a, b = batches["pipelined"], batches["plain"]
    assert (
        a.keys() == b.keys()
        and {"obses", "actions", "dones", "returns", "values", "neglogpacs"} <= a.keys()
    )
    for k in a:
        assert torch.equal(a[k], b[k]), k
    assert a["dones"].any()  # episodes ended and restarted inside the rollout


@pytest.mark.parametrize("groups", [2])
def test_exact_resume_with_env_groups(tmp_path, clip, groups):
    from mimic2dm.train import compose_config
    from mimic2dm.utils.checkpoint import load_checkpoint

    common = ("logger.tensorboard=false", f"train.env_groups={groups}")
    train(tiny_config(tmp_path / "straight", clip, "train.max_epochs=4", *common))
    train(tiny_config(tmp_path / "split", clip, "train.max_epochs=2", *common))
    s = train(
        compose_config([f"resume={tmp_path / 'split'}"]), resume_overrides=["train.max_epochs=4"]
    )
    assert s["resumed_from_epoch"] == 2 and s["epochs"] == 4
    a = load_checkpoint(tmp_path / "straight" / "checkpoints" / "last.pt")
    b = load_checkpoint(tmp_path / "split" / "checkpoints" / "last.pt")
    for name in a["model"]:
        assert torch.equal(a["model"][name], b["model"][name]), name
    assert len(a["env_state"]["tasks"]) == groups and states_equal(a["env_state"], b["env_state"])
    assert s["history"][-1]["perf/physics_busy_s"] > 0
