"""Following one subject and the ball through per-frame detections.

Tracks are built greedily frame by frame: each detection joins the live track whose last
box matches it best (IoU for people and dogs; centre distance relative to the box size
for the ball, whose small box rarely overlaps between frames), else starts a new track. A
track survives ``max_missing`` frames without a detection. Track ids count up in order of
first appearance, so ``--track-id`` is stable for a given video and detector.

The subject is the *largest consistent* track: the one with the largest sum over its
frames of ``sqrt(box area)``, i.e. size times duration, so a big person seen for the whole
clip beats both a brief close-up and a small bystander seen throughout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Track:
    """One object followed through a clip.

    Attributes:
        id: order of first appearance (0, 1, ...).
        frames: frame indices with a detection (increasing).
        boxes: ``[n, 4]`` xyxy image pixels, one per entry of ``frames``.
        scores: ``[n]`` detection scores.
    """

    id: int
    frames: list[int] = field(default_factory=list)
    boxes: list[np.ndarray] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)

    @property
    def size_score(self) -> float:
        """Sum over frames of ``sqrt(area)``: the subject-selection criterion."""
        b = np.asarray(self.boxes).reshape(-1, 4)
        return float(np.sqrt(np.clip((b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]), 0, None)).sum())

    def summary(self) -> dict:
        """JSON-friendly description (stored in the clip's ``meta.tracks``)."""
        return {
            "id": self.id,
            "first_frame": self.frames[0],
            "last_frame": self.frames[-1],
            "frames": len(self.frames),
            "size_score": round(self.size_score, 1),
            "mean_score": round(float(np.mean(self.scores)), 3),
        }

    def dense(self, num_frames: int) -> tuple[np.ndarray, np.ndarray]:
        """``boxes [T, 4]`` (NaN where the track has no detection) and ``scores [T]`` (0 there)."""
        boxes = np.full((num_frames, 4), np.nan)
        scores = np.zeros(num_frames)
        if self.frames:
            boxes[self.frames] = np.asarray(self.boxes)
            scores[self.frames] = self.scores
        return boxes, scores


def iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise IoU of boxes ``a [n, 4]`` and ``b [m, 4]`` (xyxy) -> ``[n, m]``."""
    a, b = np.asarray(a, float).reshape(-1, 4), np.asarray(b, float).reshape(-1, 4)
    lt = np.maximum(a[:, None, :2], b[None, :, :2])
    rb = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(rb - lt, 0, None), axis=2)
    area = lambda x: np.prod(np.clip(x[:, 2:] - x[:, :2], 0, None), axis=1)  # noqa: E731
    union = area(a)[:, None] + area(b)[None, :] - inter
    return np.where(union > 0, inter / np.maximum(union, 1e-12), 0.0)


def center_similarity(a: np.ndarray, b: np.ndarray, gaps: np.ndarray) -> np.ndarray:
    """``1 - d / gate`` between box centres (``[n, m]``, negative beyond the gate).

    The gate is 3 box sizes (the larger of the two boxes' diagonal) per frame elapsed, so a
    fast ball may move a few of its diameters per frame and still be followed.
    """
    a, b = np.asarray(a, float).reshape(-1, 4), np.asarray(b, float).reshape(-1, 4)
    ca, cb = 0.5 * (a[:, :2] + a[:, 2:]), 0.5 * (b[:, :2] + b[:, 2:])
    d = np.linalg.norm(ca[:, None] - cb[None], axis=2)
    diag = lambda x: np.linalg.norm(x[:, 2:] - x[:, :2], axis=1)  # noqa: E731
    size = np.maximum(diag(a)[:, None], diag(b)[None, :])
    gate = 3.0 * np.maximum(size, 1.0) * np.asarray(gaps, float).reshape(-1, 1)
    return 1.0 - d / gate


def track_boxes(
    detections: list[tuple[np.ndarray, np.ndarray]],
    match: str = "iou",
    min_similarity: float = 0.3,
    max_missing: int = 10,
    frames: Sequence[int] | None = None,
) -> list[Track]:
    """Link per-frame detections into tracks.

    Args:
        detections: per frame ``(boxes [n, 4], scores [n])``.
        match: ``"iou"`` (people, dogs) or ``"center"`` (ball).
        min_similarity: minimum IoU / centre similarity to join a track.
        max_missing: frames a track may go without a detection and still be continued.
        frames: increasing frame index of each entry of ``detections`` when only some
            frames were detected (default 0, 1, 2, ...); gaps and ``max_missing`` count
            video frames.

    Returns:
        Tracks ordered by id (first appearance).
    """
    if match not in ("iou", "center"):
        raise ValueError(f"match must be 'iou' or 'center', got {match!r}")
    if frames is not None and len(frames) != len(detections):
        raise ValueError(
            f"track_boxes: {len(frames)} frame indices for {len(detections)} detections"
        )
    tracks: list[Track] = []
    for i, (boxes, scores) in enumerate(detections):
        t = int(frames[i]) if frames is not None else i
        boxes = np.asarray(boxes, float).reshape(-1, 4)
        live = [tr for tr in tracks if t - tr.frames[-1] <= max_missing + 1]
        free = list(range(len(boxes)))
        if live and len(boxes):
            last = np.stack([tr.boxes[-1] for tr in live])
            if match == "iou":
                sim = iou(last, boxes)
            else:
                sim = center_similarity(last, boxes, np.array([t - tr.frames[-1] for tr in live]))
            # greedy on the best pairs first: adequate for a few objects per frame
            for flat in np.argsort(-sim, axis=None):
                i, j = np.unravel_index(flat, sim.shape)
                if sim[i, j] < min_similarity:
                    break
                if j in free and live[i].frames[-1] != t:
                    live[i].frames.append(t)
                    live[i].boxes.append(boxes[j])
                    live[i].scores.append(float(scores[j]))
                    free.remove(j)
        for j in free:
            tracks.append(Track(len(tracks), [t], [boxes[j]], [float(scores[j])]))
    return tracks


def select_track(tracks: list[Track], track_id: int | None = None) -> Track | None:
    """The subject: ``track_id`` if given, else the largest consistent track (None if no track).

    Raises:
        ValueError: ``track_id`` does not exist (the message lists the tracks).
    """
    if track_id is not None:
        for tr in tracks:
            if tr.id == track_id:
                return tr
        listing = ", ".join(f"{tr.id} ({len(tr.frames)} frames)" for tr in tracks[:20]) or "none"
        raise ValueError(f"track id {track_id} not found; tracks: {listing}")
    if not tracks:
        return None
    return max(tracks, key=lambda tr: tr.size_score)


def select_ball(tracks: list[Track]) -> Track | None:
    """The ball track with the largest total detection score (the most persistent sure ball)."""
    return max(tracks, key=lambda tr: float(np.sum(tr.scores)), default=None)
