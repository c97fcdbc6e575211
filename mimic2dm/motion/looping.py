"""Loop a gait clip: repeat its cycle with the root displacement (and heading) carried forward.

The shared dog clips are single gait cycles and the CMU clips hold one or two; tracking
needs longer references. :func:`find_cycle` picks the seam ``(s, e)`` whose poses match
best after a rigid yaw + ground-plane motion ``G`` (``G`` maps frame ``s`` onto frame
``e``); :func:`loop_keypoints` plays frames ``s .. e-1`` again and again, each loop moved
by ``G`` once more, so every loop starts where the previous one ended, heading included.

The small pose and velocity mismatch left at the seam is spread over the whole cycle by a
quadratic offset per keypoint ``c(t) = a t + b t^2`` with ``c(0) = 0``: it closes the
position gap (``c(P)`` = gap) and the velocity gap (``c'(P) - R c'(0)`` = gap), so the
looped clip is C1 at every seam while the root still advances exactly ``G`` per loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mimic2dm.motion.keypoint_sets import load_keypoint_set

VELOCITY_WEIGHT = 4.0
"""Seam cost = mean pose gap (m) + this many frames x mean velocity gap (m/frame)."""


@dataclass(frozen=True)
class Cycle:
    """A loopable cycle of a clip.

    Attributes:
        start: first frame ``s``.
        period: ``P = e - s`` frames per loop.
        yaw: heading change per loop (rad, about +z).
        origin: ``[3]`` root ground point at ``s`` (z = 0); ``G`` rotates about it.
        displacement: ``[3]`` root ground displacement per loop (z = 0), ``root[e] - root[s]``.
        seam_cost: the matched cost (m), see :data:`VELOCITY_WEIGHT`.
    """

    start: int
    period: int
    yaw: float
    origin: np.ndarray
    displacement: np.ndarray
    seam_cost: float

    def rotation(self, k: int = 1) -> np.ndarray:
        """``[3, 3]`` rotation of ``G^k``."""
        c, s = math.cos(k * self.yaw), math.sin(k * self.yaw)
        return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])

    def apply(self, points: np.ndarray, k: int = 1) -> np.ndarray:
        """``G^k`` applied to ``points [..., 3]``."""
        out = np.asarray(points, dtype=np.float64)
        R = self.rotation()
        for _ in range(k):
            out = (out - self.origin) @ R.T + self.origin + self.displacement
        return out


def _ground(root: np.ndarray) -> np.ndarray:
    return root * np.array([1.0, 1.0, 0.0])


def _yaw_fit(a: np.ndarray, b: np.ndarray) -> float:
    """Yaw ``psi`` minimising ``|R_psi a - b|^2`` over points ``a, b [K, 3]`` (ground plane)."""
    cross = (a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0]).sum()
    dot = (a[:, 0] * b[:, 0] + a[:, 1] * b[:, 1]).sum()
    return math.atan2(cross, dot)


def _velocity(x: np.ndarray) -> np.ndarray:
    """Central-difference velocity ``[T, K, 3]`` (per frame); robust to duplicated frames."""
    return np.gradient(x, axis=0, edge_order=1)


def _rot(yaw: float) -> np.ndarray:
    c, s = math.cos(yaw), math.sin(yaw)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def find_cycle(keypoints3d: np.ndarray, keypoint_set: str, min_period: int | None = None) -> Cycle:
    """The best loop seam of a clip.

    Args:
        keypoints3d: ``[T, K, 3]`` world keypoints (metres, z-up), ``T >= 4``.
        keypoint_set: set of the keypoints (its ``root`` gives the root).
        min_period: shortest cycle considered (default ``T // 2``: any periodic clip holding
            one full period has a whole number of periods in ``[T/2, T)``).

    Returns:
        The :class:`Cycle` of least seam cost.
    """
    x = np.asarray(keypoints3d, dtype=np.float64)
    T = x.shape[0]
    if x.ndim != 3 or x.shape[2] != 3 or T < 4:
        raise ValueError(f"find_cycle: need keypoints [T >= 4, K, 3], got {list(x.shape)}")
    root = _ground(x[:, list(load_keypoint_set(keypoint_set).root)].mean(axis=1))
    local = x - root[:, None]
    vel = _velocity(x)
    pmin = max(2, T // 2 if min_period is None else int(min_period))
    best: tuple[float, int, int, float] | None = None
    for s in range(T - pmin):
        for e in range(s + pmin, T):
            yaw = _yaw_fit(local[s], local[e])
            R = _rot(yaw)
            gap = np.linalg.norm(local[s] @ R.T - local[e], axis=-1).mean()
            vgap = np.linalg.norm(vel[s] @ R.T - vel[e], axis=-1).mean()
            cost = float(gap + VELOCITY_WEIGHT * vgap)
            if best is None or cost < best[0]:
                best = (cost, s, e, yaw)
    if best is None:
        raise ValueError(f"find_cycle: no cycle of >= {pmin} frames in a {T}-frame clip")
    cost, s, e, yaw = best
    return Cycle(s, e - s, yaw, root[s].copy(), root[e] - root[s], cost)


def _seam_offsets(x: np.ndarray, cyc: Cycle) -> np.ndarray:
    """``c(t) [P, K, 3]``: the C1 quadratic offsets closing the seam (module docstring)."""
    s, P = cyc.start, cyc.period
    e = s + P
    R = cyc.rotation()
    vel = _velocity(x)
    delta = cyc.apply(x[s]) - x[e]  # where the next loop starts minus where the data went
    dv = vel[s] @ R.T - vel[e]
    # c(P) = delta and c'(P) - R c'(0) = dv with c = a t + b t^2  =>  (I + R) a = 2 delta / P - dv
    a = np.linalg.solve(np.eye(3) + R, (2.0 * delta / P - dv).reshape(-1, 3).T).T.reshape(
        delta.shape
    )
    b = (delta - a * P) / P**2
    t = np.arange(P, dtype=np.float64).reshape(-1, *([1] * delta.ndim))
    return a * t + b * t**2


def loop_keypoints(
    keypoints3d: np.ndarray,
    keypoint_set: str,
    fps: float,
    *,
    loops: int | None = None,
    seconds: float | None = None,
    object3d: np.ndarray | None = None,
    cycle: Cycle | None = None,
) -> tuple[np.ndarray, np.ndarray | None, dict]:
    """Repeat a clip's cycle ``loops`` times, or until it lasts ``seconds``.

    Args:
        keypoints3d: ``[T, K, 3]`` world keypoints (metres, z-up).
        keypoint_set: their set.
        fps: frame rate.
        loops: number of cycles (``>= 1``); exclusive with ``seconds``.
        seconds: length of the output, ``(T' - 1) / fps >= seconds`` (cut to the first
            frame past it).
        object3d: optional ``[T, 3]`` object track, moved and blended like a keypoint.
        cycle: a cycle from :func:`find_cycle` (default: found here).

    Returns:
        ``(keypoints [T', K, 3], object3d [T', 3] | None, info)`` with ``info`` the loop
        settings for the clip's ``meta`` (start, period, loops, displacement, yaw).
    """
    if (loops is None) == (seconds is None):
        raise ValueError("loop_keypoints: give exactly one of loops or seconds")
    if loops is not None and loops < 1:
        raise ValueError(f"loop_keypoints: loops must be >= 1, got {loops}")
    if seconds is not None and not seconds > 0:
        raise ValueError(f"loop_keypoints: seconds must be > 0, got {seconds}")
    x = np.asarray(keypoints3d, dtype=np.float64)
    cyc = cycle or find_cycle(x, keypoint_set)
    K = x.shape[1]
    if object3d is not None:
        x = np.concatenate([x, np.asarray(object3d, dtype=np.float64)[:, None]], axis=1)
    s, P = cyc.start, cyc.period
    one = x[s : s + P] + _seam_offsets(x, cyc)
    frames = P * loops if loops is not None else int(math.ceil(seconds * fps - 1e-9)) + 1
    n_loops = int(math.ceil(frames / P))
    out = np.concatenate([cyc.apply(one, k) for k in range(n_loops)])[:frames]
    info = {
        "start": s,
        "period": P,
        "loops": frames / P,
        "displacement": [float(v) for v in cyc.displacement[:2]],
        "yaw_deg": math.degrees(cyc.yaw),
        "seam_cost": cyc.seam_cost,
    }
    obj = out[:, K].astype(np.float32) if object3d is not None else None
    return out[:, :K].astype(np.float32), obj, info
