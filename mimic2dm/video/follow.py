"""Following the subject's and the ball's boxes between detections (``--detect-every K``).

On a CPU the detector costs 3-5 pose crops per frame, so the pipeline can run it only on
every K-th frame and follow the two boxes in between. Following is template matching:
the box's content at its last detection (the central part of a person box, whose
corners are mostly background; the whole ball box) is searched for by normalised
cross-correlation (NCC, FFT-based) in a window around the position predicted by the last
velocity, on a block-averaged grey image so that a large person costs no more than a
ball. The peak is refined to sub-pixel by a parabola through its neighbours and the box
keeps the size it had when detected.

The NCC peak is the followed box's confidence. The detector is run again on the current
frame (a *re-detection*) when that confidence falls under ``min_score``, when the ball
moved more than ``ball_jump`` of its diameters in one frame (motion blur, a kick), or when
the box left the image; the detection that matches the followed box (IoU >= 0.3 for the
subject, within the centre gate for the ball) restarts the follower, and if none does the
object is lost until its next scheduled detection. Only numpy / scipy are used.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from scipy.signal import fftconvolve

from mimic2dm.video.detector import Detections
from mimic2dm.video.tracking import center_similarity, iou

GRAY = np.array([0.299, 0.587, 0.114], dtype=np.float32)
SUBJECT_INNER = (0.6, 0.9)
"""Template = this fraction (width, height) of a person box around its centre."""


def gray_region(frame: np.ndarray, x0: int, y0: int, w: int, h: int, f: int) -> np.ndarray:
    """Grey ``float32 [h // f, w // f]`` of ``frame[y0:y0+h, x0:x0+w]`` averaged over f x f blocks.

    The region must lie inside the frame (``uint8 [H, W, 3]``); ``w`` and ``h`` are
    multiples of ``f``.
    """
    g = frame[y0 : y0 + h, x0 : x0 + w].astype(np.float32) @ GRAY
    if f > 1:
        g = g.reshape(h // f, f, w // f, f).mean(axis=(1, 3))
    return g


def ncc_map(search: np.ndarray, template: np.ndarray) -> np.ndarray:
    """Normalised cross-correlation of ``template [h, w]`` at every position of ``search``.

    Returns:
        ``[Hs - h + 1, Ws - w + 1]`` in [-1, 1]; 0 where the search patch is flat.
    """
    h, w = template.shape
    t0 = template - template.mean()
    tn = float(np.sqrt((t0 * t0).sum()))
    num = fftconvolve(search, t0[::-1, ::-1], mode="valid")
    # local sums of the search image and its square by integral images
    s = np.pad(search.astype(np.float64), ((1, 0), (1, 0))).cumsum(0).cumsum(1)
    s2 = np.pad(search.astype(np.float64) ** 2, ((1, 0), (1, 0))).cumsum(0).cumsum(1)
    box = lambda c: c[h:, w:] - c[:-h, w:] - c[h:, :-w] + c[:-h, :-w]  # noqa: E731
    var = np.clip(box(s2) - box(s) ** 2 / (h * w), 0.0, None)
    den = np.sqrt(var) * tn
    # flat patches (and a flat template) carry no evidence: score 0, not a division blow-up
    return np.where(den > 1e-3 * h * w, num / np.maximum(den, 1e-12), 0.0)


def subpixel_peak(m: np.ndarray) -> tuple[float, float, float]:
    """``(row, col, value)`` of the maximum of ``m``, refined by a parabola on each axis."""
    r, c = np.unravel_index(int(np.argmax(m)), m.shape)
    out = [float(r), float(c)]
    for axis, (i, n) in enumerate(((r, m.shape[0]), (c, m.shape[1]))):
        if 0 < i < n - 1:
            if axis == 0:
                lo, mid, hi = m[i - 1, c], m[r, c], m[i + 1, c]
            else:
                lo, mid, hi = m[r, i - 1], m[r, c], m[r, i + 1]
            d = lo - 2 * mid + hi
            if d < 0:
                out[axis] += float(np.clip(0.5 * (lo - hi) / d, -0.5, 0.5))
    return out[0], out[1], float(m[r, c])


@dataclass
class FollowStep:
    """Result of following one box into a new frame.

    Attributes:
        box: ``[4]`` xyxy pixels (NaN when lost).
        score: NCC peak in [0, 1] (0 when lost).
        jump: centre displacement since the previous frame in box diameters.
    """

    box: np.ndarray
    score: float
    jump: float


class BoxFollower:
    """Follows one box by template matching (module docstring).

    Args:
        inner: ``(width, height)`` fraction of the box used as the template.
        search: search radius around the predicted position, in box sizes (larger side).
        max_side: templates are block-averaged until their larger side is at most this.
    """

    def __init__(
        self, inner: tuple[float, float] = (1.0, 1.0), search: float = 0.25, max_side: int = 64
    ):
        self.inner, self.search, self.max_side = inner, float(search), int(max_side)
        self.active = False
        self.box = np.full(4, np.nan)
        self.velocity = np.zeros(2)

    def start(self, frame: np.ndarray, box: np.ndarray, gap: int = 1) -> None:
        """(Re)start at a detected ``box`` in ``frame``.

        Args:
            gap: frames since the follower's last box (its velocity becomes the mean motion
                over them); 0 for a box of the same frame (the velocity is kept).
        """
        box = np.asarray(box, dtype=np.float64)
        if gap == 0:
            pass
        elif self.active and np.isfinite(self.box).all():
            self.velocity = (_center(box) - _center(self.box)) / gap
        else:
            self.velocity = np.zeros(2)
        H, W = frame.shape[:2]
        bw, bh = box[2] - box[0], box[3] - box[1]
        tw, th = max(bw * self.inner[0], 4.0), max(bh * self.inner[1], 4.0)
        self.f = max(1, int(np.ceil(max(tw, th) / self.max_side)))
        tw, th = _multiple(tw, self.f), _multiple(th, self.f)
        cx, cy = _center(box)
        x0, y0 = int(round(cx - tw / 2)), int(round(cy - th / 2))
        # a box cut by the image border (feet out of the frame) keeps the part inside
        if x0 < 0 or y0 < 0:
            tw, th = tw - _up(max(0, -x0), self.f), th - _up(max(0, -y0), self.f)
            x0, y0 = x0 + _up(max(0, -x0), self.f), y0 + _up(max(0, -y0), self.f)
        tw -= _up(max(0, x0 + tw - W), self.f)
        th -= _up(max(0, y0 + th - H), self.f)
        self.box = box
        self.active = min(tw, th) >= 4 and bw > 0 and bh > 0
        if not self.active:
            return
        self.template = gray_region(frame, x0, y0, tw, th, self.f)
        self.tw, self.th = tw, th
        self.offset = box - np.array([x0, y0, x0, y0], dtype=np.float64)  # box relative to template
        self.active = self.template.std() > 1e-3

    def stop(self) -> None:
        self.active = False
        self.box = np.full(4, np.nan)

    def step(self, frame: np.ndarray) -> FollowStep:
        """Follow the box into ``frame``; lost (NaN box, score 0) when it left the image."""
        if not self.active:
            return FollowStep(np.full(4, np.nan), 0.0, 0.0)
        H, W = frame.shape[:2]
        f, tw, th = self.f, self.tw, self.th
        size = max(self.box[2] - self.box[0], self.box[3] - self.box[1])
        radius = self.search * size + float(np.linalg.norm(self.velocity)) + 2 * f
        r = _multiple(radius, f)
        tl = self.box[:2] - self.offset[:2] + self.velocity  # predicted template corner
        x0, y0 = int(round(tl[0])) - r, int(round(tl[1])) - r
        x1, y1 = x0 + tw + 2 * r, y0 + th + 2 * r
        # keep the window inside the image, on the same block grid
        x0 += _up(max(0, -x0), f)
        y0 += _up(max(0, -y0), f)
        x1 -= _up(max(0, x1 - W), f)
        y1 -= _up(max(0, y1 - H), f)
        if x1 - x0 < tw or y1 - y0 < th:
            self.stop()
            return FollowStep(self.box.copy(), 0.0, 0.0)
        search = gray_region(frame, x0, y0, x1 - x0, y1 - y0, f)
        row, col, score = subpixel_peak(ncc_map(search, self.template))
        corner = np.array([x0 + col * f, y0 + row * f])
        box = np.concatenate([corner, corner]) + self.offset
        jump = float(np.linalg.norm(_center(box) - _center(self.box)) / max(size, 1.0))
        self.velocity = _center(box) - _center(self.box)
        self.box = box
        return FollowStep(box.copy(), float(np.clip(score, 0.0, 1.0)), jump)


def _center(box: np.ndarray) -> np.ndarray:
    return 0.5 * (box[:2] + box[2:])


def _up(x: float, f: int) -> int:
    """Smallest multiple of ``f`` that is >= ``x``."""
    return int(np.ceil(x / f)) * f


def _multiple(x: float, f: int) -> int:
    """Smallest multiple of ``f`` that is >= ``x`` and >= ``f`` (a size)."""
    return max(f, _up(x, f))


@dataclass
class FollowConfig:
    """Settings of :class:`ClipFollower`.

    Attributes:
        min_score: re-detect when a followed box's NCC falls under this.
        ball_jump: re-detect when the ball moved more than this many diameters in a frame.
        subject_search, ball_search: search radius in box sizes (plus the last velocity).
        match_iou: IoU a re-detected person needs with the followed box.
    """

    min_score: float = 0.5
    ball_jump: float = 1.5
    subject_search: float = 0.25
    ball_search: float = 1.5
    match_iou: float = 0.3


Keyframes = dict[int, tuple[np.ndarray, float]]
"""Frame index -> (``box [4]``, score) of an object's scheduled detections."""


@dataclass
class ClipFollower:
    """Dense subject and ball boxes of a clip from detections on some frames.

    Call :meth:`fill` on consecutive chunks of frames; the results accumulate in
    ``subject_boxes [T, 4]``, ``subject_scores [T]``, ``ball_boxes``, ``ball_scores`` (NaN /
    0 where lost).

    Args:
        num_frames: T.
        subject_keys, ball_keys: the subject's and the ball's scheduled detections.
        subject_class: detector class of the subject (``person`` / ``dog``).
        detect: ``frames [B, H, W, 3] -> [Detections]`` for re-detections (None: never).
        cfg: thresholds.
    """

    num_frames: int
    subject_keys: Keyframes
    ball_keys: Keyframes | None
    subject_class: str
    detect: Callable[[np.ndarray], list[Detections]] | None = None
    cfg: FollowConfig = field(default_factory=FollowConfig)

    def __post_init__(self) -> None:
        T = self.num_frames
        self.subject_boxes, self.subject_scores = np.full((T, 4), np.nan), np.zeros(T)
        self.ball_boxes, self.ball_scores = np.full((T, 4), np.nan), np.zeros(T)
        self.subject = BoxFollower(SUBJECT_INNER, self.cfg.subject_search)
        self.ball = BoxFollower((1.0, 1.0), self.cfg.ball_search)
        self.redetections = 0
        # per frame, where each box came from: 0 none (lost), 1 a detection, 2 following
        self.source = {"subject": np.zeros(T, np.int8), "ball": np.zeros(T, np.int8)}
        self._last = {"subject": -1, "ball": -1}  # last frame with a box
        self._good = {
            "subject": (np.full(4, np.nan), 0),
            "ball": (np.full(4, np.nan), 0),
        }  # last sure box, frame
        self._det_score = {"subject": 0.0, "ball": 0.0}

    def fill(self, frames: np.ndarray, t0: int) -> None:
        """Boxes of frames ``t0 .. t0 + len(frames) - 1`` (``uint8 [B, H, W, 3]``)."""
        for i, frame in enumerate(frames):
            self._frame(frame, t0 + i)

    def _frame(self, frame: np.ndarray, t: int) -> None:
        objs = [
            ("subject", self.subject, self.subject_keys, self.subject_boxes, self.subject_scores)
        ]
        if self.ball_keys is not None:
            objs.append(("ball", self.ball, self.ball_keys, self.ball_boxes, self.ball_scores))
        triggered: dict[str, bool] = {}
        for name, fol, keys, boxes, scores in objs:
            if t in keys:
                box, score = keys[t]
                fol.start(frame, box, t - self._last[name])
                boxes[t], scores[t] = box, score
                self.source[name][t] = 1
                self._det_score[name], self._last[name] = score, t
                self._good[name] = (np.asarray(box, dtype=np.float64), t)
                continue
            if not fol.active:
                continue
            step = fol.step(frame)
            lost = not np.isfinite(step.box).all() or not fol.active
            jump = name == "ball" and step.jump > self.cfg.ball_jump
            triggered[name] = lost or step.score < self.cfg.min_score or jump
            if not lost:
                boxes[t], scores[t] = step.box, min(step.score, self._det_score[name])
                self.source[name][t] = 2
                self._last[name] = t
                if not triggered[name]:
                    self._good[name] = (step.box, t)
        if any(triggered.values()) and self.detect is not None:
            self.redetections += 1
            self._redetect(frame, t, self.detect(frame[None])[0], triggered, objs)
        else:
            for name, fol, _, boxes, scores in objs:
                if triggered.get(name):  # no detector to confirm: trust no more
                    fol.stop()
                    boxes[t], scores[t] = np.nan, 0.0
                    self.source[name][t] = 0

    def _redetect(self, frame, t, dets: Detections, triggered, objs) -> None:
        for name, fol, _, boxes, scores in objs:
            if name not in triggered:
                continue
            cand, cs = dets.get(
                self.subject_class if name == "subject" else "sports ball",
                (np.zeros((0, 4)), np.zeros(0)),
            )
            # match against the followed box and the last sure one: a box that drifted
            # (occlusion) should not lose a subject the detector still sees where it was
            good, t_good = self._good[name]
            refs, gaps = np.stack([fol.box, good]), np.array([1.0, max(t - t_good, 1)])
            keep = np.isfinite(refs).all(1)
            refs, gaps = refs[keep], gaps[keep]
            best = None
            if len(cand) and len(refs):
                if name == "subject":
                    sim = iou(refs, cand).max(0)
                    ok = sim >= self.cfg.match_iou
                else:
                    sim = center_similarity(refs, cand, gaps).max(0)
                    ok = sim >= 0.0
                if ok.any():
                    best = int(np.argmax(np.where(ok, sim, -np.inf)))
            if best is not None:
                fol.start(frame, cand[best], 0)
                boxes[t], scores[t] = cand[best], float(cs[best])
                self.source[name][t] = 1
                self._det_score[name], self._last[name] = float(cs[best]), t
                self._good[name] = (np.asarray(cand[best], dtype=np.float64), t)
            elif triggered[name]:
                fol.stop()
                boxes[t], scores[t] = np.nan, 0.0
                self.source[name][t] = 0

    @property
    def followed(self) -> dict[str, int]:
        """Frames whose final box came from following, per object."""
        return {k: int((v == 2).sum()) for k, v in self.source.items()}

    def summary(self) -> dict:
        """Counts for the clip's ``meta.follow``."""
        return {
            "followed_frames": self.followed,
            "detected_frames": {k: int((v == 1).sum()) for k, v in self.source.items()},
            "redetections": self.redetections,
            "min_score": self.cfg.min_score,
            "ball_jump": self.cfg.ball_jump,
        }
