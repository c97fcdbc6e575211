"""Box following between detections (``--detect-every K``), on rendered scenes with known boxes.

Random-weight detectors give meaningless boxes, so the follower is tested on synthetic
videos whose subject (a textured rectangle) and ball (a disc) boxes are known: the true
boxes are fed as the detections of every K-th frame (and of re-detections) and the
followed boxes must stay within ``TOL_PX`` of the truth.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import ndimage
from typer.testing import CliRunner

from mimic2dm.video.follow import ClipFollower, FollowConfig, ncc_map, subpixel_peak
from mimic2dm.video.tracking import track_boxes

W, H, T, K = 640, 360, 60, 5
TOL_PX = 1.0
"""Largest corner error of a followed box (pixels), subject and ball, on every frame."""
HIDDEN = range(30, 34)  # the ball is not drawn (held / occluded)
KICK = range(42, 45)  # the ball flies at 2 of its diameters per frame
R = 8  # ball radius


def person_corner(t: int) -> np.ndarray:
    """Top-left corner of the 50 x 120 "person" (walks right, bobs)."""
    return np.round([100 + 4 * t + 15 * np.sin(t / 6), 120 + 12 * np.sin(t / 4)])


def ball_corner(t: int) -> np.ndarray | None:
    if t in HIDDEN:
        return None
    kick = 2 * (2 * R + 1) * (min(t, KICK[-1]) - KICK[0] + 1) if t >= KICK[0] else 0
    return np.round([500 - 5 * t + kick - R, 250 - 120 * abs(np.sin(t / 8)) - R])


def person_box(t: int) -> np.ndarray:
    x, y = person_corner(t)
    return np.array([x, y, x + 50, y + 120])


def ball_box(t: int) -> np.ndarray | None:
    c = ball_corner(t)
    return None if c is None else np.array([c[0], c[1], c[0] + 2 * R + 1, c[1] + 2 * R + 1])


@pytest.fixture(scope="module")
def scene() -> np.ndarray:
    """``uint8 [T, H, W, 3]``: noise background, smooth-textured person, white ball."""
    rng = np.random.default_rng(0)
    bg = rng.integers(0, 70, (H, W, 3), dtype=np.uint8)
    tex = ndimage.gaussian_filter(rng.normal(0, 1, (120, 50, 3)), (2, 2, 0))
    tex = np.clip(170 + 85 * tex / tex.std(), 90, 255).astype(np.uint8)
    yy, xx = np.mgrid[-R : R + 1, -R : R + 1]
    disc = xx**2 + yy**2 <= R * R
    frames = np.repeat(bg[None], T, 0)
    for t in range(T):
        x, y = person_corner(t).astype(int)
        frames[t, y : y + 120, x : x + 50] = tex
        c = ball_corner(t)
        if c is not None:
            bx, by = c.astype(int)
            frames[t, by : by + 2 * R + 1, bx : bx + 2 * R + 1][disc] = 250
    return frames


class TruthDetector:
    """Returns the true boxes of the frame it is given (recognised by its bytes)."""

    def __init__(self, frames: np.ndarray):
        self.index = {f.tobytes(): t for t, f in enumerate(frames)}
        self.calls: list[int] = []

    def __call__(self, frames: np.ndarray):
        out = []
        for f in frames:
            t = self.index[f.tobytes()]
            self.calls.append(t)
            b = ball_box(t)
            balls = (np.zeros((0, 4)), np.zeros(0)) if b is None else (b[None], np.full(1, 0.9))
            out.append({"person": (person_box(t)[None], np.ones(1)), "sports ball": balls})
        return out


def keyframes(every: int = K):
    subject = {t: (person_box(t), 0.9) for t in range(0, T, every)}
    ball = {t: (ball_box(t), 0.9) for t in range(0, T, every) if ball_box(t) is not None}
    return subject, ball


def follow(frames: np.ndarray, detect=None, chunk: int = 8, **cfg) -> ClipFollower:
    subject, ball = keyframes()
    f = ClipFollower(T, subject, ball, "person", detect, FollowConfig(**cfg))
    for s in range(0, T, chunk):
        f.fill(frames[s : s + chunk], s)
    return f


def test_ncc_finds_a_shifted_patch_with_subpixel_refinement():
    rng = np.random.default_rng(1)
    img = ndimage.gaussian_filter(rng.normal(size=(80, 80)), 2.0)
    m = ncc_map(img, img[30:50, 21:45])
    r, c, v = subpixel_peak(m)
    assert (round(r), round(c)) == (30, 21) and v == pytest.approx(1.0, abs=1e-6)
    assert abs(r - 30) < 0.05 and abs(c - 21) < 0.05
    # half a pixel to the right (linear interpolation): the parabola lands between pixels
    half = 0.5 * (img[:, :-1] + img[:, 1:])
    r, c, _ = subpixel_peak(ncc_map(half, img[30:50, 21:45]))
    assert abs(r - 30) < 0.1 and 20.3 < c < 20.7
    assert np.all(ncc_map(img, np.ones((5, 5))) == 0.0)  # a flat template carries no evidence


def test_followed_boxes_stay_within_tolerance_of_the_truth(scene):
    det = TruthDetector(scene)
    f = follow(scene, det)
    truth_p = np.stack([person_box(t) for t in range(T)])
    err_p = np.abs(f.subject_boxes - truth_p).max(1)
    assert np.isfinite(err_p).all() and err_p.max() <= TOL_PX, err_p.round(2)
    # hidden ball: the score drops, one re-detection finds no ball: lost until the next
    # scheduled detection (35), also in frame 34 where it is back
    lost = range(HIDDEN[0], 35)
    assert np.isnan(f.ball_boxes[list(lost)]).all() and (f.ball_scores[list(lost)] == 0).all()
    seen = [t for t in range(T) if t not in lost]
    err_b = np.abs(f.ball_boxes[seen] - np.stack([ball_box(t) for t in seen])).max(1)
    assert np.isfinite(err_b).all() and err_b.max() <= TOL_PX, err_b.round(2)
    # the kick: the jump trigger re-detects on each of its frames
    assert det.calls[0] == HIDDEN[0] and set(KICK) <= set(det.calls)
    assert f.redetections == len(det.calls) <= 4, det.calls  # few: following mostly holds
    # every subject box is a scheduled detection, a re-detection or followed (30 is a
    # scheduled frame: the re-detection there was the ball's)
    assert f.followed["subject"] == T - len(range(0, T, K)) - len(set(det.calls) - {30})
    assert (f.source["subject"] > 0).all()
    assert (f.subject_scores > 0.5).all() and f.summary()["redetections"] == f.redetections


def test_without_a_detector_a_doubtful_box_is_dropped(scene):
    f = follow(scene, None)
    assert np.isnan(f.ball_boxes[30:35]).all()  # hidden at 30 -> lost until 35
    assert np.isfinite(f.ball_boxes[35]).all()
    assert np.isnan(f.ball_boxes[KICK[0]]).all()  # the kick cannot be confirmed either
    assert f.redetections == 0
    # a higher jump threshold lets the follower take the kick itself (its window is wide)
    g = follow(scene, None, ball_jump=5.0)
    err = np.abs(g.ball_boxes[list(KICK)] - np.stack([ball_box(t) for t in KICK])).max()
    assert err <= TOL_PX


def test_a_box_cut_by_the_image_border_is_followed():
    rng = np.random.default_rng(2)
    bg = rng.integers(0, 70, (120, 200, 3), dtype=np.uint8)
    tex = ndimage.gaussian_filter(rng.normal(0, 1, (80, 40, 3)), (2, 2, 0))
    tex = np.clip(170 + 85 * tex / tex.std(), 90, 255).astype(np.uint8)
    frames, boxes = [], []
    for t in range(8):  # walks right with its lower 30 px below the image
        x, img = 20 + 5 * t, bg.copy()
        img[70:, x : x + 40] = tex[:50]
        frames.append(img)
        boxes.append([x, 70, x + 40, 150])
    f = ClipFollower(8, {0: (np.array(boxes[0], float), 0.9)}, None, "person")
    f.fill(np.stack(frames), 0)
    assert np.abs(f.subject_boxes - np.array(boxes)).max() <= TOL_PX
    assert f.followed["subject"] == 7


def test_chunking_does_not_change_the_result(scene):
    a, b = (
        follow(scene, TruthDetector(scene), chunk=1),
        follow(scene, TruthDetector(scene), chunk=13),
    )
    np.testing.assert_array_equal(a.subject_boxes, b.subject_boxes)
    np.testing.assert_array_equal(a.ball_boxes, b.ball_boxes)


def test_track_boxes_counts_gaps_in_video_frames():
    box = np.array([[0.0, 0, 10, 10]])
    dets = [(box + 6 * i, np.ones(1)) for i in range(4)]  # moves 6 px per detected frame
    # every 5th frame: each step is a 5-frame gap, inside the centre gate of 3 sizes per frame
    tr = track_boxes(dets, "center", frames=[0, 5, 10, 15], max_missing=10)
    assert len(tr) == 1 and tr[0].frames == [0, 5, 10, 15]
    assert len(track_boxes(dets, "center", frames=[0, 5, 30, 35], max_missing=10)) == 2
    with pytest.raises(ValueError, match="2 frame indices for 4 detections"):
        track_boxes(dets, frames=[0, 1])


# ----------------------------------------------------------------------------- pipeline


def test_extract_clip_detect_every_matches_the_per_frame_path(tmp_path: Path):
    from test_video_pipeline import FPS, BlobDetector, colour_pose, draw, scene, truth

    from mimic2dm.video.io import write_video
    from mimic2dm.video.pipeline import ExtractOptions, extract_clip

    video = tmp_path / "walk.mkv"
    frames = [draw([f for f in scene(t)[:2] if f is not None], scene(t)[2]) for t in range(20)]
    write_video(video, frames, FPS, lossless=True)

    class Counting(BlobDetector):
        frames = 0

        def detect(self, x):
            Counting.frames += len(x)
            return super().detect(x)

    m = extract_clip(video, Counting(), colour_pose(), ExtractOptions(detect_every=5, batch=3))
    gt = np.stack([truth(t) for t in range(20)])
    err = np.linalg.norm(m.keypoints[0] - gt, axis=-1)
    assert err.max() < 1.5, err.max()  # hidden in 8-9: lost on re-detection, then filled
    assert m.meta["detect_every"] == 5 and m.meta["detected_frames"] == Counting.frames
    # 4 scheduled (0, 5, 10, 15) + re-detections (subject hidden at 8, ball gone at 12)
    assert Counting.frames <= 4 + 3, Counting.frames
    assert m.meta["follow"]["followed_frames"]["subject"] >= 12
    c = m.object_confidence[0]
    assert (c[:12] > 0).all() and (c[12:] == 0).all()
    ball_gt = np.array([(300 - 6 * t, 15.0) for t in range(12)])
    assert np.abs(m.object_center[0, :12] - ball_gt).max() < 1.5
    with pytest.raises(ValueError, match="detect_every must be >= 1"):
        ExtractOptions(detect_every=0)


def test_cli_bench_pose_reports_the_detect_every_k_ratio(tmp_path: Path, monkeypatch):
    from test_video_models import TINY_POSE, tiny_detector_model
    from test_video_pipeline import _app

    import mimic2dm.video.detector as det_mod
    import mimic2dm.video.pose as pose_mod
    from mimic2dm.video.detector import Detector, class_ids
    from mimic2dm.video.pose import estimator_from_model, pose_config, random_vitpose

    def tiny_det(name, random_weights=False, threshold=0.3, device="cpu", **kw):
        m = tiny_detector_model()
        return Detector(
            m, class_ids(m.config.id2label), threshold, input_size=(128, 128), device=device
        )

    def tiny_pose(name, keypoint_set, random_weights=False, device="cpu", **kw):
        return estimator_from_model(random_vitpose(pose_config(**TINY_POSE)), keypoint_set, device)

    monkeypatch.setattr(det_mod, "load_detector", tiny_det)  # the real ones take ~30 s on a CPU
    monkeypatch.setattr(pose_mod, "load_pose_estimator", tiny_pose)
    out = tmp_path / "b.json"
    res = CliRunner().invoke(_app(), ["bench", "pose", "--frames", "2", "--batch", "2", "--detect-every", "4",
                                      "--det-threads", "1", "--pose-threads", "1", "--json", str(out)])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "detect every 4 + follow" in res.output and "x;" in res.output
    f = json.loads(out.read_text())["follow"]
    assert f["detect_every"] == 4 and f["frames"] == 8 and f["frames_per_s"] > 0
    assert f["speedup"] == pytest.approx(f["frames_per_s"] / f["per_frame_frames_per_s"], rel=0.02)
    assert f["subject_error_px"] is not None and f["subject_error_px"] < 2.0


def test_cli_extract_detect_every_default_and_option(tmp_path: Path):
    from test_video_pipeline import _app, _tiny_models, draw, figure

    from mimic2dm.motion.format import load_motion2d
    from mimic2dm.video.io import write_video

    pose_dir, det_dir = _tiny_models(tmp_path)
    small = tmp_path / "small.mp4"
    write_video(small, [draw([figure(60 + 3 * t, 10, 60)], size=(128, 96)) for t in range(6)], 10.0)
    base = ["extract", str(small), "--pose-model", str(pose_dir), "--detector", str(det_dir),
            "--det-threshold", "0", "--no-progress"]  # fmt: skip
    runner = CliRunner()
    res = runner.invoke(_app(), [*base, "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    meta = load_motion2d(tmp_path / "a/small.npz").meta
    assert meta["detect_every"] == 10 and "follow" in meta  # the CPU default
    res = runner.invoke(_app(), [*base, "--out", str(tmp_path / "b"), "--detect-every", "1",
                                 "--det-threads", "1", "--pose-threads", "1"])  # fmt: skip
    assert res.exit_code == 0, res.output
    meta = load_motion2d(tmp_path / "b/small.npz").meta
    assert meta["detect_every"] == 1 and meta["detected_frames"] == 6 and "follow" not in meta
    res = runner.invoke(_app(), [*base, "--out", str(tmp_path / "c"), "--detect-every", "0"])
    assert res.exit_code == 2 and "--detect-every" in res.output
