"""``--preview``: the extracted keypoints and ball box drawn over the video."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from mimic2dm.motion.format import CONFIDENCE_THRESHOLD, Motion2D
from mimic2dm.motion.keypoint_sets import load_keypoint_set
from mimic2dm.utils.draw import REF_COLOR, draw_skeleton
from mimic2dm.video.io import VideoWriter, iter_frames

BALL_COLOR = (255, 200, 0)


def preview_path(preview: str | os.PathLike, clip: str, single: bool) -> Path:
    """``OUT.mp4`` for a single video, ``OUT_<clip>.mp4`` beside it for a batch."""
    p = Path(preview)
    return p if single else p.with_name(f"{p.stem}_{clip}{p.suffix or '.mp4'}")


def draw_frame(
    img: np.ndarray, m: Motion2D, t: int, threshold: float = CONFIDENCE_THRESHOLD
) -> np.ndarray:
    """Frame ``img [H, W, 3]`` with view 0, frame ``t`` of ``m`` drawn on it (a copy)."""
    kset = load_keypoint_set(m.keypoint_set)
    pil = Image.fromarray(img)
    d = ImageDraw.Draw(pil)
    width = max(2, int(round(img.shape[0] / 270)))
    mask = m.mask(threshold)[0, t]
    draw_skeleton(d, np.nan_to_num(m.keypoints[0, t]), mask, kset.edges, REF_COLOR, width=width)
    if m.has_object and m.object_box is not None and m.object_confidence[0, t] > 0:
        x1, y1, x2, y2 = (float(v) for v in m.object_box[0, t])
        d.rectangle([x1, y1, x2, y2], outline=BALL_COLOR, width=width)
    d.text((6, 6), f"frame {t}  mean conf {m.confidence[0, t].mean():.2f}", fill=(255, 255, 255))
    return np.asarray(pil)


def render_preview(
    video: str | os.PathLike, m: Motion2D, out: str | os.PathLike, batch: int = 8
) -> Path:
    """Write ``out`` (.mp4): every frame of ``video`` with the clip ``m`` drawn over it.

    Frames beyond the clip's length (there should be none) are written undrawn.
    """
    out = Path(out)
    w, h = m.image_size
    with VideoWriter(out, m.fps, w, h) as writer:
        t = 0
        for frames in iter_frames(video, batch):
            for img in frames:
                writer.write(draw_frame(img, m, t) if t < m.num_frames else img)
                t += 1
    return out
