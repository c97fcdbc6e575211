"""Every task on the shared skeleton (``tasks/common``) reproduces pinned numbers: 30 steps of
fixed actions from seeded starts, with the settings that matter given explicitly (not the
shipped defaults), so that a change of the skeleton that changes what a task computes fails
here. The numbers were measured on the code before the tasks shared a skeleton."""

from __future__ import annotations

import pytest
import torch
from mimic2dm.tasks.base import TaskSpec
from mimic2dm.tasks.registry import make_task
from task_helpers import standing_clip

from mimic2dm.motion.format import save_motion2d

STARTS = {"initial_state": "auto", "initial_ground": True, "asi": {"start_sampling": "failure"}}
CONFIGS = {
    "tracking2d": {**STARTS, "num_views": 2, "fall_tilt_deg": 30.0, "max_episode_steps": 12},
    "tracking3d": {**STARTS, "fall_tilt_deg": 30.0, "max_episode_steps": 12},
    "dribble": {**STARTS, "ball_in_proprioception": True, "max_episode_steps": 12},
    "stand": {"max_episode_steps": 12},
}
PINNED: dict[str, dict[str, float]] = {
    "dribble": {
        "obs0": 261.5177,
        "reward": 71.85014,
        "return": 64.64493,
        "term/pos": 78.84462,
        "term/vel": 4.098808,
        "term/reg": 1.335515,
        "term/scale": 89.91474,
        "term/obj": 119.9996,
        "term/ori": 119.5,
        "term/contact": 78.0,
        "term/foot_ball": 120.0,  # no foot within foot_ball_near of the ball 1 m ahead: 1 per step
        "cause/reprojection": 17.0,
        "cause/fall": 0.0,
        "cause/nonfinite": 0.0,
        "cause/ball_lost": 0.0,
        "cause/timeout": 7.0,
        "obs": 329.9837,
    },
    "stand": {
        "obs0": 0.4411838,
        "reward": 81.64394,
        "return": 64.38645,
        "term/pose": 57.6658,
        "term/height": 98.66417,
        "term/reg": 116.0589,
        "cause/fall": 0.0,
        "cause/nonfinite": 0.0,
        "cause/timeout": 8.0,
        "obs": 29.48539,
    },
    "tracking2d": {
        "obs0": 378.769,
        "reward": 59.97689,
        "return": 54.07387,
        "term/pos": 79.08542,
        "term/vel": 3.855156,
        "term/reg": 1.447418,
        "term/scale": 92.5842,
        "term/ori": 116.25,
        "term/contact": 79.0,
        "cause/reprojection": 22.0,
        "cause/fall": 2.0,
        "cause/nonfinite": 0.0,
        "cause/timeout": 4.0,
        "obs": 533.7428,
    },
    "tracking3d": {
        "obs0": 143.0678,
        "reward": 48.73602,
        "return": 37.89349,
        "term/pos": 40.27385,
        "term/vel": 2.656725,
        "term/root": 110.0426,
        "term/rot": 78.22996,
        "term/reg": 0.9253614,
        "cause/distance": 0.0,
        "cause/fall": 9.0,
        "cause/nonfinite": 0.0,
        "cause/timeout": 4.0,
        "obs": 199.4637,
    },
}


def rollout_numbers(task, steps: int = 30) -> dict[str, float]:
    """Summed reward, terms and ended episodes' returns, counts per cause, observation sum."""
    g = torch.Generator().manual_seed(7)
    out: dict[str, float] = {"obs0": float(task.observe().sum())}
    for t in range(steps):
        r = task.step(torch.rand(task.num_envs, task.action_dim, generator=g) * 2 - 1)
        if t == steps // 2:
            task.observe_values(torch.linspace(0.0, 1.0, task.num_envs))
        out["reward"] = out.get("reward", 0.0) + float(r.reward.sum())
        out["return"] = out.get("return", 0.0) + float(r.episode_return.sum())
        for k, v in r.terms.items():
            out[f"term/{k}"] = out.get(f"term/{k}", 0.0) + float(v.sum())
        for k, v in r.causes.items():
            out[f"cause/{k}"] = out.get(f"cause/{k}", 0.0) + float(v.sum())
    out["obs"] = float(r.obs.sum())
    return out


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_task_reproduces_its_pinned_rollout(tmp_path, name):
    data = ()
    if name != "stand":
        path = tmp_path / "clip.npz"
        save_motion2d(standing_clip("humanoid", frames=20, views=2, ball=name == "dribble"), path)
        data = (str(path),)
    spec = TaskSpec(name, "humanoid", {"name": "mujoco", "num_threads": 1}, data=data,
                    objects=("ball",) if name == "dribble" else (), config=CONFIGS[name])  # fmt: skip
    task = make_task(spec, 4, seed=3)
    got = rollout_numbers(task)
    task.close()
    want = PINNED[name]
    assert set(got) == set(want)
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-5, abs=1e-5), k
