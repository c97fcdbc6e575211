"""The synthetic dribble (characters/dribble_clip.py, ``data dribble``) on the real cmu_run clip, ball simulated in MuJoCo."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from mimic2dm.characters.clips import load_mocap_keypoints
from mimic2dm.characters.dribble_clip import BALL_AHEAD, ball_distance, compose_dribble
from mimic2dm.characters.objects import BALL_RADIUS
from mimic2dm.cli import app
from mimic2dm.motion.format import load_motion2d
from mimic2dm.motion.synth import root_trajectory
from mimic2dm.utils.paths import mocap_dir

MOCAP = mocap_dir()
pytestmark = pytest.mark.skipif(not MOCAP.is_dir(), reason=f"{MOCAP} not found")


@pytest.fixture(scope="module")
def run_dribble():
    clip = load_mocap_keypoints(MOCAP / "cmu_run.npz")
    return clip, compose_dribble(clip.keypoints, clip.keypoint_set, clip.fps, seconds=10.0)


def test_ball_stays_with_the_runner(run_dribble):
    clip, d = run_dribble
    T = 601
    assert d.keypoints3d.shape == (T, 17, 3) and d.ball.shape == (T, 3) and d.radius == BALL_RADIUS
    assert (ball_distance(d) < 1.5).mean() >= 0.9
    # never below the ground (MuJoCo's soft contact lets it sink by a fraction of a millimetre)
    assert d.ball[:, 2].min() >= BALL_RADIUS - 2e-3
    # ahead of the character: positive lead along the direction of travel
    root = root_trajectory(d.keypoints3d.astype(np.float64), "coco17")
    heading = np.gradient(root[:, :2], axis=0)
    heading /= np.linalg.norm(heading, axis=1, keepdims=True)
    lead = ((d.ball[:, :2] - root[:, :2]) * heading).sum(1)
    assert (lead > 0).mean() >= 0.9
    # frame 0: the ball lies ahead of both feet (not between them), clear of the leading foot
    feet = d.keypoints3d[0, [15, 16], :2]
    ahead = (d.ball[0, :2] - feet) @ heading[0]
    assert (ahead > BALL_RADIUS).all(), ahead
    # a kick every gait cycle, each at that foot's landing, with the ball just ahead of the foot
    assert len(d.kicks) >= 10 and np.diff(d.kicks).min() > 0.3 * clip.fps
    ankle = 15 if d.info["kick_foot"] == "left" else 16
    gap = np.linalg.norm(d.ball[d.kicks, :2] - d.keypoints3d[d.kicks, ankle, :2], axis=1)
    assert np.abs(gap - BALL_AHEAD).max() < 0.02  # lands where aimed (spin set in the ball's frame)
    # the ball moves by the simulation between kicks: no teleports (speed bounded and continuous)
    speed = np.linalg.norm(np.diff(d.ball[:, :2], axis=0), axis=1) * clip.fps
    assert speed.max() < 8.0
    assert np.abs(np.diff(speed)).max() * clip.fps < 60.0  # m/s^2, only kicks change it fast


def test_dribble_cli(tmp_path: Path):
    out = tmp_path / "dribble.npz"
    args = [
        "data",
        "dribble",
        str(MOCAP / "cmu_run.npz"),
        "--out",
        str(out),
        "--views",
        "2",
        "--seed",
        "1",
    ]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert CliRunner().invoke(app, ["data", "check", str(out)]).exit_code == 0
    m = load_motion2d(out)
    assert m.num_views == 2 and m.num_frames == 601 and m.labels == {"skill": "dribble"}
    assert m.object3d.shape == (601, 3) and m.meta["dribble"]["kicks"]
    vis = m.object_confidence > 0
    assert vis.mean() >= 0.9
    w, h = m.image_size
    c = m.object_center[vis]
    assert ((c >= 0) & (c <= np.array([w, h]))).all()
    # box: centred on the ball, about f r / depth wide
    box = m.object_box[vis]
    np.testing.assert_allclose((box[:, :2] + box[:, 2:]) / 2, c, atol=1e-2)
    assert ((box[:, 2:] - box[:, :2]) > 10).all()
    # the ball is projected through the same cameras as the body
    cam = m.cameras()[0]

    uv, _ = cam.project(torch.as_tensor(m.object3d)[:, None])
    np.testing.assert_allclose(uv[:, 0].numpy()[vis[0]], m.object_center[0][vis[0]], atol=0.5)
    bad = CliRunner().invoke(
        app, ["data", "dribble", str(MOCAP / "dog_trot.npz"), "--out", str(tmp_path / "x.npz")]
    )
    assert bad.exit_code == 1 and "coco17" in bad.output
