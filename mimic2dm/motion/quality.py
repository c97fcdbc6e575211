"""Which 2D keypoints and frames of a clip a fit can trust (pure numpy).

``mimic2dm preprocess`` fits only what this module trusts; ``mimic2dm data check`` prints
its problems as warnings. Per view ``v``, frame ``t`` and keypoint ``k``:

- *observed*: confidence >= the threshold and finite (:meth:`Motion2D.mask`);
- *outside*: observed but more than ``margin`` image heights beyond the image border. A
  pose estimator reports a limb slightly outside the frame (its crop is padded), never
  thousands of pixels beyond it with high confidence: such points come from a broken
  track, a wrong crop transform or another image size;
- *usable*: observed and not outside;
- *trusted frame*: at least ``min_fraction`` of the set's keypoints usable (fewer do not
  constrain a body's pose, camera distance and heading; such frames are filled in from the
  trusted ones);
- *missing stretch*: a run of untrusted frames lasting at least ``max_gap_s`` seconds.

:func:`assess` returns all of these; :attr:`Quality.problems` lists what deserves a
warning (outside keypoints, untrusted frames, missing stretches), one sentence each.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from mimic2dm.motion.format import CONFIDENCE_THRESHOLD, Motion2D, load_motion2d, read_kind

OUTSIDE_MARGIN = 0.25
"""Image heights beyond the border (270 px at 1080p) past which an observed keypoint is flagged."""

MIN_USABLE_FRACTION = 0.5
"""A frame is trusted with at least this fraction of the keypoint set usable (9 of COCO's 17)."""

MAX_GAP_S = 0.5
"""Untrusted runs at least this long (seconds) are reported as missing stretches."""


@dataclass
class Quality:
    """Per-keypoint and per-frame trust of a clip (``V`` views, ``T`` frames, ``K`` keypoints).

    Attributes:
        observed, outside, usable: ``[V, T, K]`` bool (see the module docstring).
        trusted: ``[V, T]`` bool; stretches: per view, ``(start, end)`` frame ranges
            (end exclusive) of missing stretches.
        margin_px: the outside margin in pixels; min_usable: usable keypoints a trusted
            frame needs; fps, image_size: of the clip; view_ids: the views' names in messages.
    """

    observed: np.ndarray
    outside: np.ndarray
    usable: np.ndarray
    trusted: np.ndarray
    stretches: list[list[tuple[int, int]]]
    margin_px: float
    min_usable: int
    fps: float
    image_size: tuple[int, int]
    view_ids: list[int]

    @property
    def problems(self) -> list[str]:
        """One sentence per flagged issue and view; empty when the clip can be trusted whole."""
        out = []
        V, T, _ = self.usable.shape
        w, h = self.image_size
        for v in range(V):
            tag = f"view {self.view_ids[v]}: " if V > 1 else ""
            n_out = int(self.outside[v].sum())
            if n_out:
                frames = np.flatnonzero(self.outside[v].any(-1))
                out.append(f"{tag}{n_out} observed keypoint(s) in {len(frames)} frame(s) lie more than "
                           f"{self.margin_px:.0f} px outside the {w}x{h} image (frames {_ranges(frames)})")  # fmt: skip
            bad = np.flatnonzero(~self.trusted[v])
            if len(bad):
                out.append(f"{tag}{len(bad)} of {T} frame(s) have fewer than {self.min_usable} usable "
                           f"keypoints (frames {_ranges(bad)})")  # fmt: skip
            for s, e in self.stretches[v]:
                out.append(
                    f"{tag}keypoints missing for {(e - s) / self.fps:.2f} s (frames {s}-{e - 1})"
                )
        return out

    def report(self) -> dict[str, Any]:
        """JSON-ready summary with per-frame counts (lists of ``T`` per view)."""
        return {
            "margin_px": self.margin_px,
            "min_usable_keypoints": self.min_usable,
            "trusted_frames": [int(x) for x in self.trusted.sum(1)],
            "problems": self.problems,
            "views": [
                {
                    "untrusted_frames": _ranges(np.flatnonzero(~self.trusted[v])),
                    "missing_stretches": [[s, e - 1] for s, e in self.stretches[v]],
                    "per_frame": {
                        "trusted": [int(x) for x in self.trusted[v]],
                        "usable_keypoints": [int(x) for x in self.usable[v].sum(-1)],
                        "outside_keypoints": [int(x) for x in self.outside[v].sum(-1)],
                    },
                }
                for v in range(self.usable.shape[0])
            ],
        }


def _ranges(frames: np.ndarray, limit: int = 6) -> str:
    """``"3-7, 12, 40-51"`` for sorted frame indices (the first ``limit`` runs)."""
    runs = _runs(np.isin(np.arange(frames.max() + 1), frames)) if len(frames) else []
    text = [f"{s}" if e - s == 1 else f"{s}-{e - 1}" for s, e in runs[:limit]]
    return ", ".join(text) + (f", ... ({len(runs)} runs)" if len(runs) > limit else "")


def _runs(flag: np.ndarray) -> list[tuple[int, int]]:
    """``(start, end)`` of the runs of True in ``flag [T]`` (end exclusive)."""
    d = np.diff(np.concatenate([[0], flag.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(d == 1).tolist(), np.flatnonzero(d == -1).tolist(), strict=True))


def assess(
    m: Motion2D,
    threshold: float = CONFIDENCE_THRESHOLD,
    margin: float = OUTSIDE_MARGIN,
    min_fraction: float = MIN_USABLE_FRACTION,
    max_gap_s: float = MAX_GAP_S,
    view_ids: list[int] | None = None,
) -> Quality:
    """Flag the keypoints and frames of ``m`` that a fit should not trust.

    Args:
        m: the clip (any number of views).
        threshold: confidence below which a keypoint is not observed.
        margin: image heights beyond the border that count as outside the image.
        min_fraction: fraction of the keypoint set a trusted frame has usable.
        max_gap_s: shortest untrusted run (s) reported as a missing stretch.
        view_ids: how messages name the views (default 0..V-1; a clip cut to some views
            of another names them as there).
    """
    w, h = m.image_size
    observed = m.mask(threshold)
    pad = margin * h
    kp = np.nan_to_num(m.keypoints)
    inside = (
        (kp[..., 0] >= -pad)
        & (kp[..., 0] <= w + pad)
        & (kp[..., 1] >= -pad)
        & (kp[..., 1] <= h + pad)
    )
    outside = observed & ~inside
    usable = observed & inside
    need = max(1, math.ceil(min_fraction * m.num_keypoints))
    trusted = usable.sum(-1) >= need
    gap = max(1, math.ceil(max_gap_s * m.fps - 1e-9))
    stretches = [[(s, e) for s, e in _runs(~tv) if e - s >= gap] for tv in trusted]
    ids = list(range(m.num_views)) if view_ids is None else list(view_ids)
    return Quality(observed, outside, usable, trusted, stretches, pad, need, m.fps, (w, h), ids)


def file_problems(path: str | os.PathLike, threshold: float = CONFIDENCE_THRESHOLD) -> list[str]:
    """:attr:`Quality.problems` of a 2D-motion file, each prefixed with the file (``data
    check``); none for a 3D motion. The file must be valid (it is loaded again)."""
    if read_kind(path) != "motion2d":
        return []
    return [f"{path}: {p}" for p in assess(load_motion2d(path), threshold).problems]
