"""The Newton backend (mimic2dm/engines/newton_engine.py) against the MuJoCo engine, on the CPU.

Skipped when the optional extra is missing (``pip install -e .[newton]``). Every Newton
build costs ~10-30 s here (Warp loads its compiled kernels; a cold ``~/.cache/warp``
compiles them for minutes), so one engine per character is shared and the module is slow.
Keypoint parity over rollouts lives in tests/test_engine_parity.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from engine_parity import make_case
from rl_helpers import TINY

from mimic2dm.engines import load_engine

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("newton") is None or importlib.util.find_spec("warp") is None,
        reason="engine 'newton' needs the optional extra: pip install -e .[newton]",
    ),
]

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pair():
    """A Newton and a MuJoCo engine, 4 humanoids each."""
    newton_engine = load_engine("newton", "humanoid", 4)
    mujoco_engine = load_engine("mujoco", "humanoid", 4, num_threads=1)
    yield newton_engine, mujoco_engine
    newton_engine.close()
    mujoco_engine.close()


def test_layout_and_read_outs_match_mujoco_at_rest(pair):
    nt, mj = pair
    assert (nt.dof_names, nt.body_names, nt.keypoint_names, nt.contact_names) == (
        mj.dof_names, mj.body_names, mj.keypoint_names, mj.contact_names,
    )  # fmt: skip
    assert nt.order_map.quat == "xyzw" and sorted(nt.order_map.backend_dof_names) == sorted(
        nt.dof_names
    )
    nt.reset()
    mj.reset()
    torch.testing.assert_close(nt.get_keypoints(), mj.get_keypoints(), atol=1e-5, rtol=0)
    for a, b in zip(nt.get_body_poses(), mj.get_body_poses(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    lo, hi = nt.get_dof_limits()
    assert lo.shape == (nt.num_dofs,) and bool((lo < hi).all())


def test_reset_state_round_trips_and_leaves_other_envs_alone(pair):
    nt, _ = pair
    nt.reset()
    before = nt.get_state()
    case = make_case("humanoid", num_envs=2, steps=1, seed=3)
    ids = torch.tensor([1, 3])
    nt.reset(ids, case.states)
    after = nt.get_state()
    for f in ("root_pos", "root_rot", "root_lin_vel", "root_ang_vel", "dof_pos", "dof_vel"):
        torch.testing.assert_close(
            getattr(after, f)[ids], getattr(case.states, f), atol=1e-5, rtol=0
        )
        torch.testing.assert_close(
            getattr(after, f)[[0, 2]], getattr(before, f)[[0, 2]], atol=0, rtol=0
        )


def test_same_state_gives_the_same_keypoints_as_mujoco(pair):
    """Order map and quaternion convention: a tilted, bent pose reads the same in both engines."""
    nt, mj = pair
    case = make_case("humanoid", num_envs=4, steps=1, seed=4)
    nt.reset(None, case.states)
    mj.reset(None, case.states)
    torch.testing.assert_close(nt.get_keypoints(), mj.get_keypoints(), atol=1e-5, rtol=0)


def test_contact_flags_feet_on_the_floor_and_in_the_air(pair):
    nt, mj = pair
    nt.reset()
    mj.reset()
    for _ in range(3):
        nt.step(nt.default_state().dof_pos)
        mj.step(mj.default_state().dof_pos)
    assert nt.get_contacts().shape == (4, nt.num_contacts)
    torch.testing.assert_close(nt.get_contacts(), mj.get_contacts())
    assert float(nt.get_contacts().min()) == 1.0
    lifted = nt.default_state()
    lifted.root_pos[:, 2] += 1.0
    nt.reset(None, lifted)
    nt.step()
    assert float(nt.get_contacts().max()) == 0.0


def test_nonfinite_env_is_flagged_and_reset(pair):
    nt, _ = pair
    nt.reset()
    nt._q[2, 0] = float("nan")  # a diverged simulation, as the solver would leave it
    assert nt.nonfinite_envs().tolist() == [False, False, True, False]
    assert nt.reset_nonfinite().tolist() == [2]
    assert not bool(nt.nonfinite_envs().any())
    torch.testing.assert_close(nt.get_state().root_pos[2], nt.default_state().root_pos[2])


def test_a_ball_spawns_where_mujoco_puts_it():
    with (
        load_engine("newton", "dog", 2, ("ball",)) as nt,
        load_engine("mujoco", "dog", 2, ("ball",)) as mj,
    ):
        a, b = nt.default_state(), mj.default_state()
        torch.testing.assert_close(a.object_pos, b.object_pos, atol=1e-6, rtol=0)
        torch.testing.assert_close(a.object_rot, b.object_rot, atol=1e-6, rtol=0)
        moving = b.clone()
        moving.object_lin_vel[:] = torch.tensor([1.0, 0.0, 0.0])
        moving.object_ang_vel[:] = torch.tensor([0.0, 2.0, 0.0])
        nt.reset(None, moving)
        got = nt.get_state()
        torch.testing.assert_close(got.object_lin_vel, moving.object_lin_vel, atol=1e-5, rtol=0)
        torch.testing.assert_close(got.object_ang_vel, moving.object_ang_vel, atol=1e-5, rtol=0)


def test_bad_device_is_refused_with_its_name():
    with pytest.raises(ValueError, match="engine.device='meta': expected cpu or cuda"):
        load_engine("newton", "humanoid", 1, device="meta")


def test_bench_prints_throughput_and_parity(tmp_path):
    out = tmp_path / "bench.json"
    cmd = [sys.executable, "-m", "mimic2dm.cli", "bench", "engine", "--engine", "newton",
           "--num-envs", "4", "--seconds", "0.5", "--threads", "1", "--json", str(out)]  # fmt: skip
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "newton / MuJoCo" in res.stdout and "1 s standing" in res.stdout
    r = json.loads(out.read_text())
    assert r["engine"] == "newton" and r["engine_env_steps_per_s"] > 0
    assert r["parity_standing_1s_m"] < 0.02 and r["parity_targets_0.2s_m"] < 0.02


def test_short_training_run_on_newton(tmp_path):
    """``mimic2dm-train engine=newton`` for 2 epochs, as CI runs it."""
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "mimic2dm.train", f"hydra.run.dir={run}", "engine=newton", *TINY,
           "data.clips.0.make.seconds=1.5", "train.max_epochs=2", "logger.tensorboard=false"]  # fmt: skip
    env = {**os.environ, "WANDB_MODE": "offline"}
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["epochs"] == 2
    assert (run / "checkpoints" / "last.pt").is_file()
