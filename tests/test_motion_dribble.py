"""The synthetic dribble (characters/dribble_clip.py, ``data dribble``) on the real cmu_run clip, ball simulated in MuJoCo."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from mimic2dm.characters.clips import load_mocap_keypoints
from mimic2dm.characters.dribble_clip import (
    REPLAY_BOUND,
    ball_distance,
    compose_dribble,
    replay_error,
    rolling_deceleration,
)
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


def _check_dribble(d, within: float = 1.0) -> np.ndarray:
    """What every composed dribble must hold; returns the root path."""
    T = d.keypoints3d.shape[0]
    assert d.ball.shape == (T, 3) and d.radius == BALL_RADIUS and d.fps == 60.0
    root = root_trajectory(d.keypoints3d.astype(np.float64), "coco17")
    # the ball keeps up with the runner: it travels >= 80 % of the root's distance and stays
    # near (the task's reach radius is 1.5 m)
    travel = np.linalg.norm(d.ball[-1, :2] - d.ball[0, :2]) / np.linalg.norm(
        root[-1, :2] - root[0, :2]
    )
    assert 0.8 <= travel <= 1.2, travel
    assert d.info["ball_travel_ratio"] == pytest.approx(travel, rel=1e-4)
    assert (ball_distance(d) < within).mean() >= 0.95, ball_distance(d).max()
    # never below the ground (MuJoCo's soft contact lets it sink by a fraction of a millimetre)
    assert d.ball[:, 2].min() >= BALL_RADIUS - 2e-3
    # the kicking foot touches it at least once every two of its strides
    assert len(d.touches) >= d.info["strides"] // 2 - 1, (d.touches, d.info["strides"])
    assert np.diff(d.touches).max() <= 2.3 * T / d.info["strides"], d.touches
    # moved only by the simulation: no teleports (speed bounded and continuous)
    speed = np.linalg.norm(np.diff(d.ball[:, :2], axis=0), axis=1) * d.fps
    assert speed.max() < 8.0
    return root


def test_ball_moved_by_the_runners_legs(run_dribble):
    clip, d = run_dribble
    assert d.keypoints3d.shape == (601, 17, 3)
    root = _check_dribble(d)
    # frame 0: the ball lies ahead of both feet (not between them), clear of the leading foot
    heading = np.gradient(root[:, :2], axis=0)
    heading /= np.linalg.norm(heading, axis=1, keepdims=True)
    ahead = (d.ball[0, :2] - d.keypoints3d[0, [15, 16], :2]) @ heading[0]
    assert (ahead > BALL_RADIUS).all(), ahead
    # the ball stays ahead of the character: positive lead along the direction of travel
    lead = ((d.ball[:, :2] - root[:, :2]) * heading).sum(1)
    assert (lead > 0).mean() >= 0.9
    # a small touch every stride of the kicking foot on cmu_run
    assert len(d.touches) >= 10 and d.planned == d.kicks
    # between touches nothing pushes it: it slows down by the turf's rolling resistance alone
    speed = np.linalg.norm(np.diff(d.ball[:, :2], axis=0), axis=1) * d.fps
    a, b = d.touches[3] + 5, d.touches[4] - 2
    assert (np.diff(speed[a:b]) <= 1e-3).all()
    decel = (speed[a] - speed[b - 1]) / ((b - 1 - a) / d.fps)
    assert 0.3 < decel < 1.0 and 0.3 < rolling_deceleration() < 1.0, decel  # m/s^2, grass


def test_replay_reproduces_the_ball_and_catches_a_wrong_one(run_dribble):
    _, d = run_dribble
    mean, worst = replay_error(d)
    assert mean < 1e-3 and worst < 1e-3  # the written body moves the written ball
    # a ball path that the body does not produce is caught
    moved = dataclasses.replace(d, ball=d.ball.copy())
    moved.ball[300:, 0] += 0.2
    mean, worst = replay_error(moved)
    assert worst > REPLAY_BOUND[1] and mean > 0.05
    # from a start the body does not play from, the ball leaves the path
    kicked = dataclasses.replace(d, ball_state0=d.ball_state0.copy())
    kicked.ball_state0[7] += 1.0
    assert replay_error(kicked)[1] > REPLAY_BOUND[1]


def test_dribble_cli_refuses_a_clip_above_the_replay_bound(
    tmp_path: Path, monkeypatch, run_dribble
):
    import mimic2dm.characters.dribble_clip as dc

    _, d = run_dribble
    wrong = dataclasses.replace(d, ball=d.ball.copy())
    wrong.ball[200:, 1] += 0.3
    monkeypatch.setattr(dc, "compose_dribble", lambda *a, **k: wrong)
    out = tmp_path / "dribble.npz"
    res = CliRunner().invoke(
        app, ["data", "dribble", str(MOCAP / "cmu_run.npz"), "--out", str(out)]
    )
    assert res.exit_code == 1 and "replayed ball" in res.output and "cmu_run.npz" in res.output
    assert not out.exists()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["humanoid3d_run.txt", "humanoid3d_jog.txt"])
def test_deepmimic_run_and_jog_keep_the_ball(name):
    path = MOCAP / "deepmimic" / name
    if not path.is_file():
        pytest.skip(f"{path} not found")
    clip = load_mocap_keypoints(path)
    d = compose_dribble(clip.keypoints, clip.keypoint_set, clip.fps, seconds=10.0)
    _check_dribble(d)
    assert replay_error(d)[1] < 1e-3


def _dribble_args(out: Path, *extra: str) -> list[str]:
    """``data dribble`` of the shared cmu_run clip into ``out``."""
    return ["data", "dribble", str(MOCAP / "cmu_run.npz"), "--out", str(out), *extra]


def test_dribble_cli(tmp_path: Path):
    out = tmp_path / "dribble.npz"
    args = _dribble_args(out, "--views", "2", "--seed", "1", "--seconds", "3")
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert CliRunner().invoke(app, ["data", "check", str(out)]).exit_code == 0
    m = load_motion2d(out)
    assert m.num_views == 2 and m.num_frames == 181 and m.labels == {"skill": "dribble"}
    assert m.object3d.shape == (181, 3) and m.meta["dribble"]["touches"]
    assert m.meta["dribble"]["replay_error_m"]["max"] < 1e-3
    assert "touches in" in res.output and "replay error" in res.output
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


def test_dribble_cli_touch_every(tmp_path: Path):
    out = tmp_path / "every2.npz"
    args = _dribble_args(out, "--seconds", "4", "--touch-every", "2")
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    meta = load_motion2d(out).meta["dribble"]
    assert meta["touch_every"] == 2 and len(meta["planned"]) <= 3 and meta["touches"]
    bad = CliRunner().invoke(app, _dribble_args(tmp_path / "x.npz", "--touch-every", "0"))
    assert bad.exit_code != 0 and not (tmp_path / "x.npz").exists()
