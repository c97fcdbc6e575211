"""Temporal clean-up of keypoint tracks, and the choice among rotated pose estimates.

:func:`fill_and_smooth` works per keypoint on ``[T, K, D]`` tracks with confidences:

1. *observed* = confidence >= threshold (0.3, docs/design.md section 2) and finite;
2. observed frames are smoothed by confidence-weighted local linear regression with a
   Gaussian window: a low-confidence detection pulls less, and constant-velocity motion
   is kept exactly (also at the ends of a run, where a plain average would lag);
3. a gap of at most ``max_gap`` frames between observed frames is filled by linear
   interpolation between the smoothed neighbours; a filled keypoint gets the smaller of
   the two neighbours' confidences;
4. longer gaps and unobserved starts/ends are never invented: NaN with confidence 0.

:func:`select_rotations` picks, per frame, one of ``R`` pose estimates made on rotated
crops (Yu et al. 2021: 0/90/180/270 degrees) by dynamic programming over the clip: it
maximises the summed mean confidence minus a penalty on the jump of the keypoints between
consecutive frames, so a single confident but incoherent frame does not flip the pose.
"""

from __future__ import annotations

import math

import numpy as np

from mimic2dm.motion.format import CONFIDENCE_THRESHOLD


def _weighted_local_linear(x: np.ndarray, w: np.ndarray, sigma: float) -> np.ndarray:
    """Local linear fit at every frame: ``x [T, K, D]`` with weights ``w [T, K]``.

    Frames whose window has no weight keep their value; windows with a single weighted
    frame (or all at one offset) fall back to the weighted mean.
    """
    T = x.shape[0]
    R = max(1, int(math.ceil(3 * sigma)))
    xz = np.where(w[..., None] > 0, np.nan_to_num(x), 0.0)
    S0, S1, S2 = (np.zeros(w.shape) for _ in range(3))
    Sx, Sxd = np.zeros(x.shape), np.zeros(x.shape)
    for d in range(-R, R + 1):
        lo, hi = max(0, -d), min(T, T - d)  # frames t whose neighbour t + d exists
        if lo >= hi:
            continue
        g = math.exp(-0.5 * (d / sigma) ** 2)
        wd = g * w[lo + d : hi + d]
        xd = xz[lo + d : hi + d]
        S0[lo:hi] += wd
        S1[lo:hi] += wd * d
        S2[lo:hi] += wd * d * d
        Sx[lo:hi] += wd[..., None] * xd
        Sxd[lo:hi] += (wd * d)[..., None] * xd
    den = S0 * S2 - S1 * S1
    ok = den > 1e-9 * np.maximum(S0 * S2, 1e-30)
    lin = (S2[..., None] * Sx - S1[..., None] * Sxd) / np.where(ok, den, 1.0)[..., None]
    mean = Sx / np.maximum(S0, 1e-12)[..., None]
    out = np.where(ok[..., None], lin, mean)
    return np.where((S0 > 0)[..., None], out, x)


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """``[start, end)`` runs of True in a 1D bool array."""
    m = np.concatenate([[False], mask, [False]]).astype(np.int8)
    d = np.diff(m)
    return list(zip(np.flatnonzero(d == 1), np.flatnonzero(d == -1), strict=True))


def fill_and_smooth(
    x: np.ndarray,
    conf: np.ndarray,
    max_gap: int,
    sigma: float = 1.0,
    threshold: float = CONFIDENCE_THRESHOLD,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Smooth observed keypoints, fill short gaps, mask long ones (module docstring).

    Args:
        x: ``[T, K, D]`` positions (pixels); NaN allowed where unobserved.
        conf: ``[T, K]`` confidences in [0, 1].
        max_gap: longest run of unobserved frames that is interpolated.
        sigma: Gaussian window in frames (0 = no smoothing).
        threshold: confidence below which a keypoint is unobserved.

    Returns:
        ``x [T, K, D]``, ``conf [T, K]`` (0 and NaN where masked) and ``filled [T, K]`` bool.
    """
    x = np.asarray(x, dtype=np.float64)
    conf = np.asarray(conf, dtype=np.float64)
    if x.ndim != 3 or conf.shape != x.shape[:2]:
        raise ValueError(
            f"fill_and_smooth: x must be [T, K, D] and conf [T, K], got {list(x.shape)} and {list(conf.shape)}"
        )
    obs = (conf >= threshold) & np.isfinite(x).all(-1)
    w = np.where(obs, conf, 0.0)
    xs = _weighted_local_linear(x, w, sigma) if sigma > 0 else x.copy()
    out = np.where(obs[..., None], xs, np.nan)
    out_conf = np.where(obs, conf, 0.0)
    filled = np.zeros(obs.shape, dtype=bool)
    for k in range(x.shape[1]):
        for a, b in _runs(~obs[:, k]):
            if a == 0 or b == x.shape[0] or b - a > max_gap:
                continue  # open-ended or long: stays masked
            s = (np.arange(a, b) - (a - 1)) / (b - (a - 1))
            out[a:b, k] = (1 - s)[:, None] * out[a - 1, k] + s[:, None] * out[b, k]
            out_conf[a:b, k] = min(conf[a - 1, k], conf[b, k])
            filled[a:b, k] = True
    return out, out_conf, filled


def select_rotations(
    keypoints: np.ndarray,
    conf: np.ndarray,
    body_size: np.ndarray,
    coherence: float = 1.0,
    threshold: float = CONFIDENCE_THRESHOLD,
) -> np.ndarray:
    """Per frame, the rotation whose estimate is confident and temporally coherent.

    Maximises ``sum_t mean_k conf[t, r_t] - coherence * sum_t jump(t, r_{t-1}, r_t)``
    with ``jump`` = mean distance of the keypoints observed in both frames, divided by the
    body size (the box diagonal), by Viterbi.

    Args:
        keypoints: ``[T, R, K, 2]`` image pixels, one estimate per rotation.
        conf: ``[T, R, K]``.
        body_size: ``[T]`` pixels (frames without a subject may hold anything).
        coherence: weight of the temporal term.

    Returns:
        ``[T]`` int index of the chosen rotation.
    """
    T, R = conf.shape[:2]
    if T == 0:
        return np.zeros(0, dtype=np.int64)
    unary = conf.mean(-1)  # [T, R]
    score = unary[0].copy()
    back = np.zeros((T, R), dtype=np.int64)
    for t in range(1, T):
        prev, cur = keypoints[t - 1], keypoints[t]  # [R, K, 2]
        seen = (conf[t - 1] >= threshold)[:, None, :] & (conf[t] >= threshold)[
            None, :, :
        ]  # [R', R, K]
        d = np.linalg.norm(np.nan_to_num(prev[:, None] - cur[None]), axis=-1)  # [R', R, K]
        n = seen.sum(-1)
        jump = np.where(n > 0, (d * seen).sum(-1) / np.maximum(n, 1), 0.0)
        size = body_size[t] if np.isfinite(body_size[t]) and body_size[t] > 0 else 1.0
        total = score[:, None] - coherence * jump / size  # [R', R]
        back[t] = total.argmax(0)
        score = total.max(0) + unary[t]
    path = np.zeros(T, dtype=np.int64)
    path[-1] = int(score.argmax())
    for t in range(T - 1, 0, -1):
        path[t - 1] = back[t, path[t]]
    return path
