"""``mimic2dm bench pose``: frames/s of detection + pose (one subject per frame).

Models are built with random weights (the cost of a network does not depend on its
weights) and the detector threshold is 0 so that every frame has a person box to crop.
Frames are synthetic 1280x720 images with a drawn figure; nothing is read or downloaded.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image, ImageDraw


def synthetic_frames(n: int, width: int = 1280, height: int = 720, seed: int = 0) -> np.ndarray:
    """``uint8 [n, height, width, 3]``: noise background and a stick figure that walks."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, height, width, 3), dtype=np.uint8)
    for t in range(n):
        img = Image.fromarray(rng.integers(0, 60, (height, width, 3), dtype=np.uint8))
        d = ImageDraw.Draw(img)
        cx, top, s = width * (0.3 + 0.4 * t / max(n, 1)), 0.2 * height, 0.6 * height
        d.ellipse([cx - 0.06 * s, top, cx + 0.06 * s, top + 0.12 * s], fill=(230, 200, 180))
        for a, b in (((0, 0.12), (0, 0.55)), ((0, 0.2), (-0.2, 0.4)), ((0, 0.2), (0.2, 0.4)),
                     ((0, 0.55), (-0.12, 1.0)), ((0, 0.55), (0.12, 1.0))):  # fmt: skip
            d.line(
                [(cx + a[0] * s, top + a[1] * s), (cx + b[0] * s, top + b[1] * s)],
                fill=(230, 200, 180),
                width=12,
            )
        out[t] = np.asarray(img)
    return out


def _run(frames: np.ndarray, batch: int, detector, pose) -> tuple[float, float]:
    """Seconds spent in detection and in pose over ``frames`` in batches of ``batch``."""
    t_det = t_pose = 0.0
    for s in range(0, len(frames), batch):
        chunk = frames[s : s + batch]
        t0 = time.perf_counter()
        dets = detector.detect(chunk)
        t1 = time.perf_counter()
        boxes = np.array(
            [d["person"][0][0] if len(d["person"][0]) else [0, 0, 10, 10] for d in dets], float
        )
        pose.predict(chunk, boxes, np.arange(len(chunk)))
        t_det, t_pose = t_det + t1 - t0, t_pose + time.perf_counter() - t1
    return t_det, t_pose


def bench_pose(
    frames: int = 4,
    batch_sizes: Sequence[int] = (1, 8),
    pose_model: str = "vitpose-b",
    detector: str = "rtdetr-r50",
    width: int = 1280,
    height: int = 720,
    device: str = "cpu",
    threads: int | None = None,
) -> dict:
    """Measure detection + pose throughput at each batch size.

    Args:
        frames: frames timed per batch size (at least one full batch is run).
        batch_sizes: frames per forward pass.
        pose_model, detector: registry names (built with random weights).
        width, height: frame size.
        device: ``cpu`` or ``cuda``.
        threads: torch CPU threads (None = torch's default).

    Returns:
        ``{"device", "threads", "pose_model", "detector", "frame_size", "results": [
        {"batch", "frames", "seconds", "frames_per_s", "detect_ms_per_frame",
        "pose_ms_per_frame"}]}``.
    """
    from mimic2dm.video.detector import load_detector
    from mimic2dm.video.pose import load_pose_estimator

    if threads:
        torch.set_num_threads(threads)
    det = load_detector(detector, random_weights=True, threshold=0.0, device=device)
    pose = load_pose_estimator(pose_model, "coco17", random_weights=True, device=device)
    imgs = synthetic_frames(max(frames, max(batch_sizes)), width, height)
    _run(imgs[:1], 1, det, pose)  # warm-up: allocator, anchors, thread pools
    results = []
    for b in batch_sizes:
        n = max(frames, b)
        t_det, t_pose = _run(imgs[:n], b, det, pose)
        total = t_det + t_pose
        results.append({
            "batch": b, "frames": n, "seconds": round(total, 3), "frames_per_s": round(n / total, 3),
            "detect_ms_per_frame": round(1000 * t_det / n, 1), "pose_ms_per_frame": round(1000 * t_pose / n, 1),
        })  # fmt: skip
    return {
        "device": device,
        "threads": torch.get_num_threads(),
        "pose_model": pose_model,
        "pose_params": pose.info.get("pose_params"),
        "detector": detector,
        "detector_params": det.info.get("detector_params"),
        "frame_size": [width, height],
        "results": results,
    }
