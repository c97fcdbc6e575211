"""Looping gait clips (motion/looping.py) on the real shared dog and CMU clips, and ``data synth --seconds``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from mimic2dm.characters.clips import load_mocap_keypoints
from mimic2dm.cli import app
from mimic2dm.motion.format import load_motion2d
from mimic2dm.motion.looping import find_cycle, loop_keypoints
from mimic2dm.motion.synth import root_trajectory
from mimic2dm.utils.paths import mocap_dir

MOCAP = mocap_dir()
pytestmark = pytest.mark.skipif(not MOCAP.is_dir(), reason=f"{MOCAP} not found")


def _jumps(kp: np.ndarray) -> np.ndarray:
    """``[T - 1]`` max per-frame keypoint displacement."""
    return np.linalg.norm(np.diff(kp, axis=0), axis=-1).max(-1)


@pytest.mark.parametrize("name", ["dog_trot", "dog_pace", "cmu_run"])
def test_loop_to_ten_seconds(name):
    clip = load_mocap_keypoints(MOCAP / f"{name}.npz")
    cyc = find_cycle(clip.keypoints, clip.keypoint_set)
    kp, obj, info = loop_keypoints(clip.keypoints, clip.keypoint_set, clip.fps, seconds=10.0)
    assert obj is None and info["period"] == cyc.period
    # length: the first frame at or past 10 s
    assert kp.shape == (601, *clip.keypoints.shape[1:]) and (kp.shape[0] - 1) / clip.fps >= 10.0
    assert np.isfinite(kp).all()
    # seams (last frame of a loop -> first of the next) move no more than the clip itself does
    P = cyc.period
    seams = np.arange(P - 1, kp.shape[0] - 1, P)
    assert len(seams) >= 9
    own = _jumps(clip.keypoints).max()
    assert _jumps(kp)[seams].max() <= 1.5 * own
    # velocities stay continuous: the second difference at a seam is within the clip's own
    acc = np.linalg.norm(np.diff(kp, n=2, axis=0), axis=-1).max(-1)
    own_acc = np.linalg.norm(np.diff(clip.keypoints, n=2, axis=0), axis=-1).max(-1).max()
    assert acc[np.concatenate([seams - 1, seams])].max() <= 1.5 * own_acc
    # root progress per loop is the cycle's displacement (a rigid move, so same length each loop)
    root = root_trajectory(kp.astype(np.float64), clip.keypoint_set)
    src = root_trajectory(clip.keypoints.astype(np.float64), clip.keypoint_set)
    disp = (src[cyc.start + P] - src[cyc.start])[:2]
    np.testing.assert_allclose((root[P] - root[0])[:2], disp, atol=1e-4)
    for k in range(1, kp.shape[0] // P):
        step = np.linalg.norm((root[k * P] - root[(k - 1) * P])[:2])
        assert step == pytest.approx(np.linalg.norm(disp), abs=1e-4)
    # heading carried forward: the ground path keeps going (net progress ~ loops x displacement)
    travelled = np.linalg.norm((root[-1] - root[0])[:2])
    assert travelled > 0.8 * (kp.shape[0] / P - 1) * np.linalg.norm(disp)
    # the height does not drift from loop to loop
    assert abs(root[-1, 2] - root[:P, 2].mean()) < 0.1


def test_loops_option_and_errors():
    clip = load_mocap_keypoints(MOCAP / "dog_trot.npz")
    cyc = find_cycle(clip.keypoints, clip.keypoint_set)
    kp, _, info = loop_keypoints(clip.keypoints, clip.keypoint_set, clip.fps, loops=3)
    assert kp.shape[0] == 3 * cyc.period and info["loops"] == 3
    obj = clip.keypoints[:, 0] + np.array([0.5, 0.0, 0.0], dtype=np.float32)
    kp, o, _ = loop_keypoints(clip.keypoints, clip.keypoint_set, clip.fps, loops=2, object3d=obj)
    assert o.shape == (kp.shape[0], 3)  # an object track rides along like a keypoint
    with pytest.raises(ValueError, match="exactly one"):
        loop_keypoints(clip.keypoints, clip.keypoint_set, clip.fps, loops=2, seconds=3.0)
    with pytest.raises(ValueError, match="T >= 4"):
        find_cycle(clip.keypoints[:3], clip.keypoint_set)


def test_synth_seconds_cli(tmp_path: Path):
    out = tmp_path / "pace.npz"
    args = ["data", "synth", str(MOCAP / "dog_pace.npz"), "--out", str(out), "--character", "dog",
            "--seconds", "10", "--fps", "30", "--camera", "tracking"]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    m = load_motion2d(out)
    assert m.num_frames == 301 and m.meta["loop"]["period"] >= 30
    assert CliRunner().invoke(app, ["data", "check", str(out)]).exit_code == 0
    both = CliRunner().invoke(app, [*args, "--loops", "2"])
    assert both.exit_code == 2 and "not both" in both.output
