"""Video -> 2D motion on videos these tests draw themselves (stick figures with coloured
joints and a white ball, written with PyAV): IO, tracking, clean-up, the rotation trick,
the writer, the batch (resume, failures, manifest, preview) and the CLI.

Known answers come from two stand-ins that work on the pixels of the video: a blob
detector (connected components) and a "pose network" whose heatmap of keypoint ``k`` is
the similarity of each crop pixel to joint ``k``'s colour. Everything between them and
the file (crops, decoding, tracking, filling, writing) is the real pipeline. The real
architectures (tiny configs) go through the same CLI at the end.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded in tests

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import typer
from PIL import Image, ImageDraw
from scipy import ndimage
from typer.testing import CliRunner

from mimic2dm.motion.format import load_motion2d, save_motion2d
from mimic2dm.motion.keypoint_sets import COCO17
from mimic2dm.video.filtering import fill_and_smooth, select_rotations
from mimic2dm.video.io import VideoError, iter_frames, probe_video, write_video
from mimic2dm.video.pipeline import ExtractionError, ExtractOptions, extract_clip, extract_videos
from mimic2dm.video.pose import PoseEstimator
from mimic2dm.video.tracking import iou, select_ball, select_track, track_boxes
from mimic2dm.video.transforms import IMAGENET_MEAN, IMAGENET_STD

W, H, FPS, T = 320, 240, 25.0, 20
COLORS = np.array([
    (255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0), (255, 0, 255), (0, 255, 255),
    (255, 128, 0), (128, 255, 0), (0, 128, 255), (255, 0, 128), (128, 0, 255), (0, 255, 128),
    (128, 0, 0), (0, 128, 0), (0, 0, 128), (128, 128, 0), (128, 0, 128),
], dtype=np.float32)  # fmt: skip
# COCO-17 stick figure in units of its height, origin at the top of the head
SHAPE = np.array([
    (0, 0.08), (-0.05, 0.03), (0.05, 0.03), (-0.1, 0.06), (0.1, 0.06),
    (-0.13, 0.2), (0.13, 0.2), (-0.2, 0.36), (0.2, 0.36), (-0.24, 0.5), (0.24, 0.5),
    (-0.09, 0.52), (0.09, 0.52), (-0.1, 0.75), (0.1, 0.75), (-0.1, 0.97), (0.1, 0.97),
])  # fmt: skip
EDGES = COCO17.edges + ((3, 5), (4, 6))  # ears to shoulders: the head joins the body


def figure(cx: float, top: float, height: float, inverted: bool = False) -> np.ndarray:
    """``[17, 2]`` keypoints of a stick figure (upside down: head at the bottom)."""
    xy = SHAPE * height
    if inverted:
        xy = np.array([1, -1]) * xy + np.array([0, height])
    return xy + np.array([cx, top])


def draw(
    figures: list[np.ndarray], ball: tuple[float, float] | None = None, size=(W, H)
) -> np.ndarray:
    img = Image.new("RGB", size, (10, 10, 10))
    d = ImageDraw.Draw(img)
    for kp in figures:
        for a, b in EDGES:
            d.line([tuple(kp[a]), tuple(kp[b])], fill=(90, 90, 90), width=3)
        r = max(2, int(round(np.linalg.norm(kp[16] - kp[0]) * 0.025)))  # joints do not overlap
        for k, (x, y) in enumerate(kp):
            d.ellipse([x - r, y - r, x + r, y + r], fill=tuple(int(c) for c in COLORS[k]))
    if ball is not None:
        d.ellipse([ball[0] - 7, ball[1] - 7, ball[0] + 7, ball[1] + 7], fill=(255, 255, 255))
    return np.asarray(img)


def scene(t: int) -> tuple[np.ndarray | None, np.ndarray, tuple[float, float] | None]:
    """Subject (walks right; hidden in frames 8-9), bystander (small, still), ball (frames 0-11)."""
    subject = None if t in (8, 9) else figure(80 + 4 * t, 40, 150)
    bystander = figure(285, 140, 80)
    ball = (300 - 6 * t, 15.0) if t < 12 else None
    return subject, bystander, ball


def truth(t: int) -> np.ndarray:
    return figure(80 + 4 * t, 40, 150)


@pytest.fixture(scope="module")
def videos(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("videos")
    frames = []
    for t in range(T):
        subj, bys, ball = scene(t)
        frames.append(draw([f for f in (subj, bys) if f is not None], ball))
    write_video(d / "walk.mp4", frames, FPS)  # H.264, as videos from the web
    write_video(d / "walk.mkv", frames, FPS, lossless=True)  # for the known answers
    write_video(
        d / "inverted.mp4", [draw([figure(160, 40, 150, inverted=True)]) for _ in range(4)], FPS
    )
    (d / "garbage.mp4").write_bytes(b"\x00\x01 not a video " * 50)
    (d / "empty.mp4").write_bytes(b"")
    (d / "truncated.mp4").write_bytes((d / "walk.mp4").read_bytes()[:1500])
    return {p.name.replace(".mp4", ""): p for p in d.iterdir()}


# ----------------------------------------------------------------------------- stand-ins
class BlobDetector:
    """Boxes of connected non-background blobs: white ones are balls, the rest people."""

    threshold = 0.5
    info = {"detector": "blobs", "detector_weights": "none"}

    def detect(self, frames: np.ndarray):
        out = []
        for img in frames.astype(np.int16):
            white = (img > 200).all(-1)
            fg = (img.max(-1) > 60) & ~ndimage.binary_dilation(white, iterations=2)
            dets = {}
            for name, mask, grow in (
                ("person", ndimage.binary_dilation(fg, iterations=4), 0),
                ("sports ball", white, 1),
            ):
                lab, _ = ndimage.label(mask)
                boxes = [[s[1].start - grow, s[0].start - grow, s[1].stop + grow, s[0].stop + grow]
                         for s in ndimage.find_objects(lab) if (s[0].stop - s[0].start) * (s[1].stop - s[1].start) > 30]  # fmt: skip
                dets[name] = (np.array(boxes, float).reshape(-1, 4), np.full(len(boxes), 0.9))
            dets["dog"] = dets["person"]  # blobs are whatever the character needs
            out.append(dets)
        return out


def colour_heatmaps(pixel_values: torch.Tensor, upright_only: bool = False) -> torch.Tensor:
    """``[N, 17, h, w]``: per keypoint, closeness of each pixel to the joint's colour.

    ``upright_only`` mimics a real model on people upside down or lying: unless the nose is
    well above the hips in the crop, the heatmaps are scaled down to 0.2 (under the 0.3
    mask threshold).
    """
    mean = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)
    rgb = pixel_values * torch.tensor(IMAGENET_STD).view(1, 3, 1, 1) + mean  # back to 0-255
    d2 = ((rgb[:, None] - torch.as_tensor(COLORS).view(1, 17, 3, 1, 1)) ** 2).sum(2)
    sim = F.avg_pool2d(torch.exp(-d2 / (2 * 30.0**2)), 5, stride=1, padding=2)  # smooth, centred
    # heatmap pixel j sits on crop pixel j * (W - 1) / (w - 1) (UDP), as in ViTPose's training
    hm = F.interpolate(
        sim, size=(sim.shape[-2] // 4, sim.shape[-1] // 4), mode="bilinear", align_corners=True
    )
    hm = hm / hm.flatten(2).amax(-1).clamp_min(1e-6)[..., None, None]  # unit peaks
    if upright_only:
        rows = hm.flatten(2).argmax(-1) // hm.shape[-1]  # [N, 17] peak rows
        upright = rows[:, 0] < rows[:, 11:13].float().mean(-1) - 0.15 * hm.shape[-2]
        hm = hm * torch.where(upright, 1.0, 0.2).view(-1, 1, 1, 1)
    return hm


def colour_pose(upright_only: bool = False) -> PoseEstimator:
    est = PoseEstimator(
        lambda x: colour_heatmaps(x, upright_only), (256, 192), "coco17", np.arange(17)
    )
    est.info = {"pose_model": "colours", "pose_weights": "none"}
    return est


# ----------------------------------------------------------------------------- IO
def test_video_io_round_trip(videos, tmp_path: Path):
    info = probe_video(videos["walk"])
    assert (info.fps, info.width, info.height, info.num_frames) == (FPS, W, H, T)
    batches = list(iter_frames(videos["walk"], batch=8))
    assert [len(b) for b in batches] == [8, 8, 4] and batches[0].shape[1:] == (H, W, 3)
    ref = draw([f for f in scene(3)[:2] if f is not None], scene(3)[2])
    assert np.abs(batches[0][3].astype(int) - ref).mean() < 6  # lossy, but the same picture
    lossless = np.concatenate(list(iter_frames(videos["walk.mkv"], batch=7)))
    assert lossless.shape == (T, H, W, 3) and np.array_equal(lossless[3], ref)
    write_video(tmp_path / "odd.mp4", [np.zeros((41, 61, 3), np.uint8)] * 2, 30000 / 1001)
    odd = probe_video(tmp_path / "odd.mp4")
    assert (odd.width, odd.height) == (62, 42) and odd.fps == pytest.approx(29.97, abs=1e-3)


@pytest.mark.parametrize("name, problem", [
    ("garbage", "could not be opened as a video"), ("empty", "is empty"),
    ("truncated", "could not be opened|decoding failed|no decodable"), ("missing", "does not exist"),
])  # fmt: skip
def test_bad_videos_fail_clearly(videos, tmp_path, name, problem):
    path = videos.get(name, tmp_path / "missing.mp4")
    with pytest.raises(VideoError, match=problem) as e:
        probe_video(path)
        list(iter_frames(path))
    assert str(path) in str(e.value)


# ----------------------------------------------------------------------------- tracking, filtering
def test_tracking_largest_consistent_track_and_track_id():
    big = lambda t: [20 + 3 * t, 10, 80 + 3 * t, 150]  # noqa: E731
    small = [200, 100, 230, 150]
    brief_huge = [0, 0, 200, 230]
    dets = []
    for t in range(12):
        boxes = [small] + ([] if t in (4, 5) else [big(t)]) + ([brief_huge] if t == 11 else [])
        dets.append((np.array(boxes, float), np.full(len(boxes), 0.9)))
    tracks = track_boxes(dets)
    assert [len(tr.frames) for tr in tracks] == [12, 10, 1]  # ids in order of first appearance
    assert tracks[1].frames == [0, 1, 2, 3, 6, 7, 8, 9, 10, 11]  # kept through the 2-frame gap
    assert select_track(tracks).id == 1 and select_track(tracks, 0).id == 0
    with pytest.raises(
        ValueError, match=r"track id 7 not found; tracks: 0 \(12 frames\), 1 \(10 frames\)"
    ):
        select_track(tracks, 7)
    boxes, scores = tracks[1].dense(12)
    assert np.isnan(boxes[4]).all() and scores[4] == 0 and scores[3] == pytest.approx(0.9)
    np.testing.assert_allclose(
        iou(np.array([[0, 0, 2, 2]]), np.array([[1, 1, 3, 3], [5, 5, 6, 6]])), [[1 / 7, 0]]
    )


def test_ball_tracking_follows_a_fast_small_ball():
    dets = []
    for t in range(10):
        x = 10 + 25 * t  # moves ~2 diameters per frame: no box overlap between frames
        boxes = [[x, 50, x + 12, 62], [300, 5, 306, 11]] if t != 5 else [[300, 5, 306, 11]]
        dets.append((np.array(boxes, float), np.array([0.8, 0.3])[: len(boxes)]))
    ball = select_ball(track_boxes(dets, "center"))
    assert ball.frames == [0, 1, 2, 3, 4, 6, 7, 8, 9]


def test_fill_and_smooth_linear_gaps_and_weights():
    t = np.arange(40, dtype=float)
    x = np.stack([3 * t + 5, 100 - 2 * t], -1)[:, None]
    conf = np.ones((40, 1))
    conf[10:13] = 0.1  # short gap (3 frames): filled on the line
    conf[20:30] = 0.0  # long gap (10 frames): masked
    out, c, filled = fill_and_smooth(x, conf, max_gap=5, sigma=1.5)
    # smoothing keeps straight lines exactly
    np.testing.assert_allclose(out[:20], x[:20], atol=1e-9)
    assert filled[10:13].all() and c[10:13].min() == 1.0 and not filled[20:30].any()
    assert np.isnan(out[20:30]).all() and (c[20:30] == 0).all() and np.isfinite(out[30:]).all()
    # an outlier pulls less when it is less sure; smoothing lowers noise
    spike = x.copy()
    spike[5, 0, 0] += 20
    for cs, limit in ((1.0, 6.0), (0.31, 3.0)):
        cc = np.ones((40, 1))
        cc[5] = cs
        o, _, _ = fill_and_smooth(spike, cc, 5, 1.5)
        assert abs(o[6, 0, 0] - x[6, 0, 0]) < limit
    cc = np.ones((40, 1))
    cc[5] = 0.31
    assert abs(fill_and_smooth(spike, cc, 5, 1.5)[0][6, 0, 0] - x[6, 0, 0]) < abs(
        fill_and_smooth(spike, np.ones((40, 1)), 5, 1.5)[0][6, 0, 0] - x[6, 0, 0]
    )
    noisy = x + np.random.default_rng(0).normal(0, 2, x.shape)
    assert (
        np.abs(fill_and_smooth(noisy, np.ones((40, 1)), 5, 1.5)[0] - x).mean()
        < 0.7 * np.abs(noisy - x).mean()
    )


def test_select_rotations_prefers_coherent_confident_estimates():
    T, R, K = 8, 4, 5
    rng = np.random.default_rng(0)
    kps = rng.uniform(0, 300, (T, R, K, 2))
    kps[:, 2] = np.linspace(100, 120, T)[:, None, None]  # rotation 2: smooth track
    conf = np.full((T, R, K), 0.5)
    conf[:, 2] = 0.8
    conf[4, 1] = 0.9  # one frame where another rotation is more confident but far away
    choice = select_rotations(kps, conf, np.full(T, 100.0), coherence=1.0)
    assert (choice == 2).all()
    assert select_rotations(kps, conf, np.full(T, 100.0), coherence=0.0)[4] == 1


# ----------------------------------------------------------------------------- pipeline
def test_colour_pose_known_answer_on_a_drawn_frame():
    kp = figure(150, 40, 160)
    frame = draw([kp])[None]
    box = np.array([[kp[:, 0].min() - 8, 32, kp[:, 0].max() + 8, 208]])
    est = colour_pose()
    for rot in (0.0, 90.0, 180.0):
        got, conf = est.predict(frame, box, np.array([0]), rotation=rot)
        np.testing.assert_allclose(got[0], kp, atol=1.5)
        assert conf.min() > 0.9


def test_extract_clip_round_trip(videos, tmp_path: Path):
    m = extract_clip(
        videos["walk.mkv"], BlobDetector(), colour_pose(), ExtractOptions(max_gap_s=0.25)
    )
    assert (m.num_views, m.num_frames, m.fps, m.image_size, m.keypoint_set) == (
        1,
        T,
        FPS,
        (W, H),
        "coco17",
    )
    gt = np.stack([truth(t) for t in range(T)])
    err = np.linalg.norm(m.keypoints[0] - gt, axis=-1)
    assert err.max() < 1.5, err.max()  # through IO, crops, decoding, smoothing and filling
    assert (m.confidence[0] > 0.8).all()
    assert m.meta["filled_fraction"] == pytest.approx(2 / T)  # frames 8-9: the subject was hidden
    assert m.meta["subject_track"]["frames"] == T - 2 and m.meta["num_tracks"] >= 2
    assert m.meta["random_weights"] is False and m.meta["source"] == str(videos["walk.mkv"])
    # the ball: seen in frames 0-11, then gone for 8 frames (> 6 = 0.25 s): masked, not invented
    c = m.object_confidence[0]
    assert (c[:12] > 0).all() and (c[12:] == 0).all() and np.isnan(m.object_center[0, 12:]).all()
    ball_gt = np.array([(300 - 6 * t, 15.0) for t in range(12)])
    assert np.abs(m.object_center[0, :12] - ball_gt).max() < 1.5
    save_motion2d(m, tmp_path / "walk.npz")
    back = load_motion2d(tmp_path / "walk.npz")
    np.testing.assert_allclose(back.keypoints, m.keypoints)
    assert back.meta["ball_found"] is True
    # the bystander on request (track ids are listed in meta.tracks)
    other = [tr["id"] for tr in m.meta["tracks"] if tr["id"] != m.meta["subject_track"]["id"]][0]
    m2 = extract_clip(
        videos["walk.mkv"],
        BlobDetector(),
        colour_pose(),
        ExtractOptions(track_id=other, ball=False),
    )
    assert np.median(np.linalg.norm(m2.keypoints[0, 0] - figure(285, 140, 80), axis=-1)) < 3.0
    assert not m2.has_object
    with pytest.raises(ExtractionError, match="track id 99 not found"):
        extract_clip(videos["inverted"], BlobDetector(), colour_pose(), ExtractOptions(track_id=99))


def test_rotation_trick_recovers_an_inverted_person(videos):
    plain = extract_clip(
        videos["inverted"], BlobDetector(), colour_pose(upright_only=True), ExtractOptions()
    )
    assert plain.mask().mean() == 0.0  # the "model" fails upside down: everything masked
    m = extract_clip(
        videos["inverted"],
        BlobDetector(),
        colour_pose(upright_only=True),
        ExtractOptions(rotations=True),
    )
    assert m.meta["rotation_counts"] == {"0": 0, "90": 0, "180": 4, "270": 0}
    np.testing.assert_allclose(
        m.keypoints[0], np.broadcast_to(figure(160, 40, 150, True), (4, 17, 2)), atol=3.0
    )


def test_dog_character_follows_dog_boxes_in_dog17(videos):
    est = PoseEstimator(colour_heatmaps, (256, 192), "dog17", np.arange(17))
    m = extract_clip(videos["inverted"], BlobDetector(), est, ExtractOptions(character="dog"))
    assert m.keypoint_set == "dog17" and m.meta["character"] == "dog" and m.num_frames == 4
    with pytest.raises(ValueError, match="character dog needs dog17"):
        extract_clip(
            videos["inverted"], BlobDetector(), colour_pose(), ExtractOptions(character="dog")
        )


def test_batch_resume_failures_manifest_and_preview(videos, tmp_path: Path):
    out, prev = tmp_path / "out", tmp_path / "prev.mp4"
    batch = [videos["walk"], videos["garbage"], videos["empty"], videos["inverted"]]
    reports = extract_videos(
        batch,
        out,
        BlobDetector(),
        colour_pose(),
        ExtractOptions(),
        preview=prev,
        show_progress=False,
    )
    assert [r.status for r in reports] == ["ok", "failed", "failed", "ok"]
    assert "garbage.mp4: could not be opened as a video" in reports[1].error
    assert "empty.mp4: is empty" in reports[2].error
    manifest = json.loads((out / "manifest.json").read_text())
    rows = {r["clip"]: r for r in manifest["clips"]}
    assert rows["walk"]["frames"] == T and rows["walk"]["masked_fraction"] == 0.0
    assert rows["walk"]["mean_confidence"] > 0.8 and rows["garbage"]["status"] == "failed"
    assert probe_video(tmp_path / "prev_walk.mp4").num_frames == T  # one preview per clip
    # resume: done clips are skipped, failed ones tried again, a damaged output redone
    (out / "inverted.npz").write_bytes(b"truncated")
    again = extract_videos(
        batch, out, BlobDetector(), colour_pose(), ExtractOptions(), show_progress=False
    )
    assert [r.status for r in again] == ["skipped", "failed", "failed", "ok"]
    assert again[0].frames == T and again[0].mean_confidence == pytest.approx(
        rows["walk"]["mean_confidence"]
    )
    with pytest.raises(ValueError, match="would both write walk.npz"):
        extract_videos(
            [videos["walk"], tmp_path / "x/walk.mp4"],
            out,
            BlobDetector(),
            colour_pose(),
            ExtractOptions(),
        )


# ----------------------------------------------------------------------------- CLI (real tiny models)
def _app() -> typer.Typer:
    from mimic2dm.video.cli import bench_pose, extract, pose_app

    app = typer.Typer()
    app.add_typer(pose_app, name="pose")
    app.command("extract")(extract)
    bench = typer.Typer()
    bench.command("pose")(bench_pose)
    app.add_typer(bench, name="bench")
    return app


def _tiny_models(d: Path) -> tuple[Path, Path]:
    from test_video_models import TINY_POSE, tiny_detector_model
    from transformers import VitPoseForPoseEstimation

    from mimic2dm.video.pose import pose_config

    torch.manual_seed(0)
    VitPoseForPoseEstimation(pose_config(**TINY_POSE)).save_pretrained(d / "pose")
    tiny_detector_model().save_pretrained(d / "det")
    (d / "det/preprocessor_config.json").write_text(
        json.dumps({"size": {"height": 128, "width": 128}})
    )
    return d / "pose", d / "det"


def test_cli_extract_with_tiny_real_models(videos, tmp_path: Path):
    pose_dir, det_dir = _tiny_models(tmp_path)
    small = tmp_path / "small.mp4"
    write_video(small, [draw([figure(60 + 3 * t, 10, 60)], size=(128, 96)) for t in range(5)], 10.0)
    runner = CliRunner()
    args = ["extract", str(small), str(videos["garbage"]), "--out", str(tmp_path / "out"), "--pose-model", str(pose_dir),
            "--detector", str(det_dir), "--det-threshold", "0", "--batch", "3", "--no-progress"]  # fmt: skip
    res = runner.invoke(_app(), args)
    # one clip failed: non-zero at the end, and the other clip is written
    assert res.exit_code == 1, res.output
    assert "1 extracted, 0 skipped (already done), 1 failed" in res.output
    assert "garbage.mp4: could not be opened as a video" in res.output
    m = load_motion2d(tmp_path / "out/small.npz")
    assert m.num_frames == 5 and m.keypoint_set == "coco17" and m.meta["random_weights"] is False
    assert m.meta["pose_weights"] == str(pose_dir) and m.meta["pose_params"] > 0
    res = runner.invoke(_app(), args)
    assert "0 extracted, 1 skipped (already done), 1 failed" in res.output
    res = runner.invoke(_app(), ["extract", str(small), "--out", str(tmp_path / "rnd"), "--pose-model", str(pose_dir),
                                 "--detector", str(det_dir), "--random-weights", "--no-progress"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert load_motion2d(tmp_path / "rnd/small.npz").meta["random_weights"] is True
    res = runner.invoke(
        _app(), ["extract", str(small), "--out", str(tmp_path / "x"), "--character", "cat"]
    )
    assert (
        res.exit_code == 2 and "dog, dog_spine, humanoid" in res.output
    )  # the registered characters
    if not torch.cuda.is_available():
        res = runner.invoke(
            _app(), ["extract", str(small), "--out", str(tmp_path / "x"), "--device", "cuda"]
        )
        assert res.exit_code == 2 and "CUDA is not available" in res.output


def test_cli_bench_pose_prints_frames_per_second(tmp_path: Path, monkeypatch):
    from test_video_models import TINY_POSE, tiny_detector_model

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
    res = CliRunner().invoke(_app(), ["bench", "pose", "--frames", "2", "--batch", "1", "--batch", "2",
                                      "--json", str(tmp_path / "b.json")])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "frames/s" in res.output
    result = json.loads((tmp_path / "b.json").read_text())
    assert [r["batch"] for r in result["results"]] == [1, 2]
    assert all(r["frames_per_s"] > 0 for r in result["results"])
