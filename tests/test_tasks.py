"""Every registered task with every character it supports: created, reset and stepped on
the fake engine (task logic) and on MuJoCo (the real thing); shapes and finiteness."""

from __future__ import annotations

import pytest
import torch
from fake_engine import KinematicEngine
from mimic2dm.tasks.base import StepResult, Task, TaskSpec
from mimic2dm.tasks.registry import TASKS, load_task, make_task, supported_characters
from mimic2dm.tasks.stats import StepStats
from task_helpers import standing_clip

from mimic2dm.motion.format import save_motion2d

N, STEPS = 3, 6
OBJECTS = {"dribble": ("ball",)}
"""Props a task needs in every env (the others run without)."""
CASES = [(t, c) for t in TASKS.names() for c in supported_characters(load_task(t))]


DEFAULT_POSE_TASKS = ("tracking2d", "tracking3d", "dribble")
DEFAULT_POSE_START = {
    "initial_state": "default_pose",
    "initial_ground": False,
    "asi": {"start_sampling": "uniform"},
}


def spec_for(task: str, character: str, tmp_path) -> TaskSpec:
    data = ()
    if load_task(task).needs_data:
        path = tmp_path / f"{character}.npz"
        save_motion2d(standing_clip(character, ball=bool(OBJECTS.get(task))), path)
        data = (str(path),)
    # the tracking tasks start from the default pose (their config's auto starts run an IK)
    config = DEFAULT_POSE_START if task in DEFAULT_POSE_TASKS else {}
    return TaskSpec(task, character, engine={"name": "mujoco", "num_threads": 1}, data=data,
                    objects=OBJECTS.get(task, ()), config=config)  # fmt: skip


def check_task(task: Task, steps: int = STEPS) -> StepStats:
    assert isinstance(task, Task) and task.num_envs == N
    lay = task.obs_layout()
    assert task.obs_dim == lay["prop"] + lay["views"] * lay["view"] > 0
    task.reset(torch.arange(N, device=task.device))
    obs = task.observe()
    assert obs.shape == (N, task.obs_dim) and torch.isfinite(obs).all()
    g = torch.Generator().manual_seed(0)
    stats = StepStats()
    for _ in range(steps):
        r = task.step(0.2 * torch.randn(N, task.action_dim, generator=g))
        assert isinstance(r, StepResult)
        assert r.obs.shape == (N, task.obs_dim) and torch.isfinite(r.obs).all()
        assert r.reward.shape == (N,) and torch.isfinite(r.reward).all()
        assert (
            r.terminated.dtype == r.truncated.dtype == torch.bool
            and not (r.terminated & r.truncated).any()
        )
        assert r.terms and all(
            v.shape == (N,) and torch.isfinite(v).all() for v in r.terms.values()
        )
        assert "timeout" in r.causes and torch.equal(r.causes["timeout"], r.truncated)
        stats.add(r)
    assert task.observe_values(torch.zeros(N)) >= 0
    assert all(isinstance(v, float) for v in task.stats().values())
    m = stats.metrics()
    assert set(m) >= {f"reward/{k}" for k in r.terms} | {"reward/total"}
    return stats


def test_every_task_is_registered_with_a_description():
    assert {"tracking2d", "stand", "dribble"} <= set(TASKS.names())
    for name in TASKS.names():
        entry = load_task(name)
        assert entry.name == name and entry.description and "\n" not in entry.description
    with pytest.raises(KeyError, match="unknown task 'nope'; valid names: .*stand.*tracking2d"):
        load_task("nope")


@pytest.mark.parametrize("task,character", CASES)
def test_task_on_the_fake_engine(task, character, tmp_path):
    spec = spec_for(task, character, tmp_path)
    t = load_task(task).build(spec, KinematicEngine(character, N, objects=spec.objects), 0)
    check_task(t)
    t.close()


@pytest.mark.parametrize("task,character", CASES)
def test_task_on_mujoco(task, character, tmp_path):
    t = make_task(spec_for(task, character, tmp_path), N, seed=0)
    check_task(t)
    t.close()


def test_exact_resume_of_every_task(tmp_path):
    """state_dict + episode_state continue a task bit for bit (fake engine)."""
    for task in TASKS.names():
        spec = spec_for(task, "humanoid", tmp_path)
        entry = load_task(task)
        a, b = (
            entry.build(spec, KinematicEngine("humanoid", N, objects=spec.objects), s)
            for s in (1, 2)
        )
        for _ in range(3):
            a.step(torch.full((N, a.action_dim), 0.1))
        b.load_state_dict(a.state_dict())
        b.load_episode_state(a.episode_state())
        for _ in range(4):
            ra, rb = (
                a.step(torch.full((N, a.action_dim), -0.1)),
                b.step(torch.full((N, a.action_dim), -0.1)),
            )
            assert torch.equal(ra.obs, rb.obs) and torch.equal(ra.reward, rb.reward), task


def test_unsupported_input_is_named():
    with pytest.raises(ValueError, match="task 'tracking2d': no reference file"):
        make_task(TaskSpec("tracking2d", "humanoid"), 2)
    with pytest.raises(ValueError, match="unknown keys \\['bogus'\\]"):
        TaskSpec.from_dict({"task": "stand", "character": "humanoid", "bogus": 1})
    with pytest.raises(ValueError, match="task.jump=1: expected a known key .*StandConfig"):
        make_task(TaskSpec("stand", "humanoid", config={"jump": 1}), 2)


def _plain(x) -> bool:
    if isinstance(x, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in x.items())
    if isinstance(x, (list, tuple)):
        return all(_plain(v) for v in x)
    return x is None or isinstance(x, (str, int, float, bool))


def test_the_learner_trains_a_second_task(tmp_path):
    """``task=stand`` goes through the same learner, checkpoints and policy loading."""
    from rl_helpers import tiny_config, write_demo

    from mimic2dm.rl.policy import load_policy
    from mimic2dm.train import train
    from mimic2dm.utils.checkpoint import load_checkpoint

    clip = write_demo(tmp_path / "clip.npz", seconds=1.0)
    s = train(
        tiny_config(
            tmp_path / "run", clip, "task=stand", "train.max_epochs=2", "logger.tensorboard=false"
        )
    )
    assert s["epochs"] == 2
    last = s["history"][-1]
    assert {"reward/pose", "reward/height", "reward/reg", "reward/total"} <= set(last)
    assert not any(k.startswith("asi/") for k in last)  # no tracking statistics
    meta = load_checkpoint(tmp_path / "run" / "checkpoints" / "last.pt")["meta"]
    assert meta["task_spec"]["task"] == "stand" and _plain(meta["task_spec"])
    p = load_policy(tmp_path / "run")
    assert p.env_spec.task == "stand" and p.env_spec.data == ()
