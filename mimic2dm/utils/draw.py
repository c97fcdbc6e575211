"""Drawing 2D keypoints for previews and overlays (Pillow, no GUI)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageDraw

from mimic2dm.motion.keypoint_sets import KeypointSet

REF_COLOR = (40, 160, 255)
SIM_COLOR = (255, 90, 40)


def draw_skeleton(
    draw: ImageDraw.ImageDraw,
    kp: np.ndarray,
    mask: np.ndarray,
    kset: KeypointSet,
    color: tuple[int, int, int],
    scale: float = 1.0,
    offset: tuple[float, float] = (0.0, 0.0),
    width: int = 3,
) -> None:
    """Draw one pose ``kp [K, 2]`` (pixels) with visibility ``mask [K]`` onto ``draw``."""
    pts = kp * scale + np.asarray(offset)
    for a, b in kset.edges:
        if mask[a] and mask[b]:
            draw.line([tuple(pts[a]), tuple(pts[b])], fill=color, width=width)
    r = max(2, width)
    for k in np.flatnonzero(mask):
        x, y = pts[k]
        draw.ellipse([x - r, y - r, x + r, y + r], fill=color)


def overlay_grid(
    ref: np.ndarray,
    sim: np.ndarray | None,
    mask: np.ndarray,
    kset: KeypointSet,
    image_size: tuple[int, int],
    frames: Sequence[int],
    tile_height: int = 270,
) -> Image.Image:
    """A row of tiles, one per frame, reference (blue) vs simulated (orange) keypoints.

    Args:
        ref: ``[T, K, 2]`` reference pixels; ``sim``: the same for the character or None.
        mask: ``[T, K]`` visible reference keypoints.
        image_size: ``(width, height)`` of the pixel space.
        frames: frame indices to draw.
    """
    w, h = image_size
    s = tile_height / h
    tw = int(round(w * s))
    img = Image.new("RGB", (tw * len(frames), tile_height), (250, 250, 250))
    d = ImageDraw.Draw(img)
    for i, t in enumerate(frames):
        off = (i * tw, 0)
        d.rectangle([off[0], 0, off[0] + tw - 1, tile_height - 1], outline=(200, 200, 200))
        draw_skeleton(d, ref[t], mask[t], kset, REF_COLOR, s, off, width=2)
        if sim is not None:
            draw_skeleton(d, sim[t], np.ones(sim.shape[1], bool), kset, SIM_COLOR, s, off, width=2)
        d.text((off[0] + 5, 5), f"frame {t}", fill=(0, 0, 0))
    return img
