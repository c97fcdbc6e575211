"""``mimic2dm bench pose``: frames/s of detection + pose (one subject per frame).

Two paths are timed in the same run: detection on every frame (at each batch size), and
detection on every K-th frame with the subject and ball followed in between
(:mod:`mimic2dm.video.follow`); the ratio of their frames/s is reported. Models are built
with random weights (the cost of a network does not depend on its weights) and the
detector threshold is 0 so that every frame has a person box to crop. Frames are synthetic
1280x720 images with a drawn figure and ball over a fixed noise background; nothing is
read or downloaded.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image, ImageDraw

from mimic2dm.video.follow import ClipFollower
from mimic2dm.video.pipeline import torch_threads


def synthetic_scene(
    n: int, width: int = 1280, height: int = 720, seed: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A stick figure walking and a ball bouncing over a fixed noise background.

    Returns:
        ``frames uint8 [n, height, width, 3]``, the figure's box ``[n, 4]`` and the ball's
        box ``[n, 4]`` (xyxy pixels).
    """
    rng = np.random.default_rng(seed)
    background = Image.fromarray(rng.integers(0, 60, (height, width, 3), dtype=np.uint8))
    out = np.empty((n, height, width, 3), dtype=np.uint8)
    people, balls = np.zeros((n, 4)), np.zeros((n, 4))
    top, s = 0.2 * height, 0.6 * height
    r = 0.065 * s  # a basketball (24 cm) next to a 1.8 m person
    for t in range(n):
        img = background.copy()
        d = ImageDraw.Draw(img)
        # walks 1% of the width per frame (~1.5 m/s at 30 fps), back and forth
        cx = width * (0.3 + 0.4 * (1 - abs(1 - (t / 40) % 2)))
        d.ellipse([cx - 0.06 * s, top, cx + 0.06 * s, top + 0.12 * s], fill=(230, 200, 180))
        for a, b in (((0, 0.12), (0, 0.55)), ((0, 0.2), (-0.2, 0.4)), ((0, 0.2), (0.2, 0.4)),
                     ((0, 0.55), (-0.12, 1.0)), ((0, 0.55), (0.12, 1.0))):  # fmt: skip
            d.line(
                [(cx + a[0] * s, top + a[1] * s), (cx + b[0] * s, top + b[1] * s)],
                fill=(230, 200, 180),
                width=12,
            )
        people[t] = (cx - 0.2 * s - 6, top, cx + 0.2 * s + 6, top + s + 6)
        bx = cx + 0.25 * s
        by = top + s - r - 0.3 * s * abs(np.sin(t / 4))  # dribbled, ~2.4 bounces per second
        d.ellipse([bx - r, by - r, bx + r, by + r], fill=(240, 120, 30))
        balls[t] = (bx - r, by - r, bx + r, by + r)
        out[t] = np.asarray(img)
    return out, people, balls


def synthetic_frames(n: int, width: int = 1280, height: int = 720, seed: int = 0) -> np.ndarray:
    """``uint8 [n, height, width, 3]`` frames of :func:`synthetic_scene`."""
    return synthetic_scene(n, width, height, seed)[0]


def _run(frames: np.ndarray, batch: int, detect, predict) -> tuple[float, float]:
    """Seconds spent in detection and in pose over ``frames`` in batches of ``batch``."""
    t_det = t_pose = 0.0
    for s in range(0, len(frames), batch):
        chunk = frames[s : s + batch]
        t0 = time.perf_counter()
        dets = detect(chunk)
        t1 = time.perf_counter()
        boxes = np.array(
            [d["person"][0][0] if len(d["person"][0]) else [0, 0, 10, 10] for d in dets], float
        )
        predict(chunk, boxes, np.arange(len(chunk)))
        t_det, t_pose = t_det + t1 - t0, t_pose + time.perf_counter() - t1
    return t_det, t_pose


def _run_follow(
    frames: np.ndarray,
    people: np.ndarray,
    balls: np.ndarray,
    every: int,
    batch: int,
    detect_fn,
    predict,
) -> dict:
    """Seconds of the detect-every-K path: detection of every K-th frame (``batch`` of
    them per forward), following in between (re-detections included), pose on every frame.

    The followed boxes start from the scene's true boxes (random-weight detections are
    meaningless); the detector still runs on every frame it would run on.
    """
    n = len(frames)
    t = {"detect": 0.0, "follow": 0.0, "pose": 0.0}

    def detect(x: np.ndarray):
        t0 = time.perf_counter()
        out = detect_fn(x)
        t["detect"] += time.perf_counter() - t0
        return out

    keys = list(range(0, n, every))
    for s in range(0, len(keys), batch):
        detect(frames[keys[s : s + batch]])
    follower = ClipFollower(
        n,
        {k: (people[k], 0.9) for k in keys},
        {k: (balls[k], 0.9) for k in keys},
        "person",
        detect,
    )
    for s in range(0, n, batch):
        chunk = frames[s : s + batch]
        t0, det0 = time.perf_counter(), t["detect"]
        follower.fill(chunk, s)
        t["follow"] += time.perf_counter() - t0 - (t["detect"] - det0)
        boxes = follower.subject_boxes[s : s + len(chunk)]
        boxes = np.where(np.isfinite(boxes), boxes, people[s : s + len(chunk)])  # pose every frame
        t0 = time.perf_counter()
        predict(chunk, boxes, np.arange(len(chunk)))
        t["pose"] += time.perf_counter() - t0
    err = np.abs(follower.subject_boxes - people).max(1)
    return {
        **t,
        "redetections": follower.redetections,
        "subject_error_px": round(float(np.nanmax(err)), 2) if np.isfinite(err).any() else None,
    }


def bench_pose(
    frames: int = 4,
    batch_sizes: Sequence[int] = (1, 8),
    pose_model: str = "vitpose-b",
    detector: str = "rtdetr-r50",
    width: int = 1280,
    height: int = 720,
    device: str = "cpu",
    threads: int | None = None,
    detect_every: int | None = None,
    det_threads: int | None = None,
    pose_threads: int | None = None,
) -> dict:
    """Measure detection + pose throughput at each batch size, and the detect-every-K path.

    Args:
        frames: frames timed per batch size (at least one full batch is run).
        batch_sizes: frames per forward pass.
        pose_model, detector: registry names (built with random weights).
        width, height: frame size.
        device: ``cpu`` or ``cuda``.
        threads: torch CPU threads (None = torch's default).
        detect_every: K of the following path (None: the default for ``device``); it is
            timed over ``max(frames, 2 K, batch)`` frames at the largest batch size.
        det_threads, pose_threads: torch threads per stage (None = ``threads``).

    Returns:
        ``{"device", "threads", "det_threads", "pose_threads", "pose_model", "detector",
        "frame_size", "results": [{"batch", "frames", "seconds", "frames_per_s",
        "detect_ms_per_frame", "pose_ms_per_frame"}], "follow": {"detect_every", "batch",
        "frames", "seconds", "frames_per_s", "detect_ms_per_frame", "follow_ms_per_frame",
        "pose_ms_per_frame", "redetections", "subject_error_px", "per_frame_frames_per_s",
        "speedup"}}``.
    """
    from mimic2dm.video.detector import load_detector
    from mimic2dm.video.pipeline import default_detect_every
    from mimic2dm.video.pose import load_pose_estimator

    if threads:
        torch.set_num_threads(threads)
    every = detect_every or default_detect_every(device)
    det = load_detector(detector, random_weights=True, threshold=0.0, device=device)
    pose = load_pose_estimator(pose_model, "coco17", random_weights=True, device=device)

    def detect(x):
        with torch_threads(det_threads):
            return det.detect(x)

    def predict(*args):
        with torch_threads(pose_threads):
            return pose.predict(*args)

    b_follow = max(batch_sizes)
    n_follow = max(frames, 2 * every, b_follow)
    imgs, people, balls = synthetic_scene(max(frames, max(batch_sizes), n_follow), width, height)
    _run(imgs[:1], 1, detect, predict)  # warm-up: allocator, anchors, thread pools
    results = []
    for b in batch_sizes:
        n = max(frames, b)
        t_det, t_pose = _run(imgs[:n], b, detect, predict)
        total = t_det + t_pose
        results.append({
            "batch": b, "frames": n, "seconds": round(total, 3), "frames_per_s": round(n / total, 3),
            "detect_ms_per_frame": round(1000 * t_det / n, 1), "pose_ms_per_frame": round(1000 * t_pose / n, 1),
        })  # fmt: skip
    f = _run_follow(imgs[:n_follow], people, balls, every, b_follow, detect, predict)
    total = f["detect"] + f["follow"] + f["pose"]
    base = next(r for r in results if r["batch"] == b_follow)["frames_per_s"]
    ms = lambda x: round(1000 * x / n_follow, 1)  # noqa: E731
    follow = {
        "detect_every": every, "batch": b_follow, "frames": n_follow, "seconds": round(total, 3),
        "frames_per_s": round(n_follow / total, 3), "detect_ms_per_frame": ms(f["detect"]),
        "follow_ms_per_frame": ms(f["follow"]), "pose_ms_per_frame": ms(f["pose"]),
        "redetections": f["redetections"], "subject_error_px": f["subject_error_px"],
        "per_frame_frames_per_s": base, "speedup": round(n_follow / total / base, 2),
    }  # fmt: skip
    return {
        "device": device,
        "threads": torch.get_num_threads(),
        "det_threads": det_threads or torch.get_num_threads(),
        "pose_threads": pose_threads or torch.get_num_threads(),
        "pose_model": pose_model,
        "pose_params": pose.info.get("pose_params"),
        "detector": detector,
        "detector_params": det.info.get("detector_params"),
        "frame_size": [width, height],
        "results": results,
        "follow": follow,
    }
