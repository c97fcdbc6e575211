"""Drawing 2D keypoints for previews and overlays (Pillow, no GUI).

Skeletons come in as bone lists (``KeypointSet.edges``), not keypoint sets: ``utils`` sits
below ``motion`` (docs/layout.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageDraw

REF_COLOR = (40, 160, 255)
SIM_COLOR = (255, 90, 40)
LEGEND_HEIGHT = 22  # pixels under the tiles of :func:`overlay_grid`


def draw_skeleton(
    draw: ImageDraw.ImageDraw,
    kp: np.ndarray,
    mask: np.ndarray,
    edges: Sequence[tuple[int, int]],
    color: tuple[int, int, int],
    scale: float = 1.0,
    offset: tuple[float, float] = (0.0, 0.0),
    width: int = 3,
) -> None:
    """Draw one pose ``kp [K, 2]`` (pixels) with visibility ``mask [K]`` and bones ``edges``
    (pairs of keypoint indices) onto ``draw``."""
    pts = kp * scale + np.asarray(offset)
    for a, b in edges:
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
    edges: Sequence[tuple[int, int]],
    image_size: tuple[int, int],
    frames: Sequence[int],
    tile_height: int = 270,
) -> Image.Image:
    """A row of tiles, one per frame, reference (blue) vs simulated (orange) keypoints, over
    a legend strip naming the colours.

    Args:
        ref: ``[T, K, 2]`` reference pixels; ``sim``: the same for the character or None.
        mask: ``[T, K]`` visible reference keypoints.
        edges: bones as keypoint index pairs (``KeypointSet.edges``).
        image_size: ``(width, height)`` of the pixel space.
        frames: frame indices to draw.

    Returns:
        An RGB image ``(len(frames) * tile width) x (tile_height + LEGEND_HEIGHT)``.
    """
    w, h = image_size
    s = tile_height / h
    tw = int(round(w * s))
    img = Image.new("RGB", (tw * len(frames), tile_height + LEGEND_HEIGHT), (250, 250, 250))
    d = ImageDraw.Draw(img)
    for i, t in enumerate(frames):
        off = (i * tw, 0)
        d.rectangle([off[0], 0, off[0] + tw - 1, tile_height - 1], outline=(200, 200, 200))
        draw_skeleton(d, ref[t], mask[t], edges, REF_COLOR, s, off, width=2)
        if sim is not None:
            draw_skeleton(d, sim[t], np.ones(sim.shape[1], bool), edges, SIM_COLOR, s, off, width=2)
        d.text((off[0] + 5, 5), f"frame {t}", fill=(0, 0, 0))
    entries = [("reference (2D keypoints)", REF_COLOR)]
    if sim is not None:
        entries.append(("simulated (projected)", SIM_COLOR))
    draw_legend(d, entries, (5, tile_height))
    return img


def draw_legend(
    draw: ImageDraw.ImageDraw,
    entries: Sequence[tuple[str, tuple[int, int, int]]],
    origin: tuple[int, int],
) -> None:
    """One row of ``(label, colour)`` entries, each a short line then its label, in a strip
    ``LEGEND_HEIGHT`` tall whose top-left corner is ``origin``."""
    x, y = origin
    mid = y + LEGEND_HEIGHT // 2
    for label, color in entries:
        draw.line([(x, mid), (x + 24, mid)], fill=color, width=4)
        draw.ellipse([x + 9, mid - 3, x + 15, mid + 3], fill=color)
        draw.text((x + 30, mid - 6), label, fill=(0, 0, 0))
        x += 30 + int(draw.textlength(label)) + 20
