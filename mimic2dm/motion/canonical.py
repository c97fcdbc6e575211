"""Canonical 2D motion ``G`` and its inverse (paper 3.4, docs/design.md section 9).

Global 2D motion ``x [T, K, 2]`` (pixels) is split into
- a per-frame root ``r_t`` (mean of the keypoint set's root keypoints) and a robust
  body size ``s_t`` (windowed median of the mean length of the set's scale segments);
- the local pose ``(x_t - r_t) / s_t``, free of image translation and scale;
- the global motion ``(r_{t+1} - r_t) / s_t`` and ``log(s_{t+1} / s_t)``.
``G^-1`` integrates the global motion from the first root and size back to pixels, so
``G^-1(G(x)) == x`` up to float precision on every visible keypoint.

Masked keypoints (confidence below threshold) never enter the root or size; their
local coordinates are set to zero and carried with the mask.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mimic2dm.motion.keypoint_sets import KeypointSet


@dataclass
class CanonicalMotion:
    """Output of :func:`to_canonical` for one clip (all ``float32`` unless noted).

    Attributes:
        local: ``[T, K, 2]`` local pose ``(x - r) / s``; zero where masked.
        mask: ``[T, K]`` bool, True where the keypoint is observed.
        root_vel: ``[T - 1, 2]`` ``(r_{t+1} - r_t) / s_t``.
        log_scale_vel: ``[T - 1]`` ``log(s_{t+1} / s_t)``.
        root0: ``[2]`` first-frame root (pixels).
        scale0: ``[]`` first-frame body size (pixels).
    """

    local: torch.Tensor
    mask: torch.Tensor
    root_vel: torch.Tensor
    log_scale_vel: torch.Tensor
    root0: torch.Tensor
    scale0: torch.Tensor

    def features(self) -> torch.Tensor:
        """Per-frame feature vectors ``[T, 2K + 3]``: local pose, then global motion.

        The last frame's global motion is unknown and padded with zeros.
        """
        T = self.local.shape[0]
        glob = torch.zeros(T, 3, dtype=self.local.dtype)
        glob[:-1, 0:2] = self.root_vel
        glob[:-1, 2] = self.log_scale_vel
        return torch.cat([self.local.reshape(T, -1), glob], dim=-1)

    @classmethod
    def from_features(
        cls, feats: torch.Tensor, root0, scale0, mask: torch.Tensor | None = None
    ) -> CanonicalMotion:
        """Inverse of :meth:`features` for ``feats [T, 2K + 3]``."""
        T = feats.shape[0]
        K = (feats.shape[1] - 3) // 2
        local = feats[:, : 2 * K].reshape(T, K, 2)
        m = torch.ones(T, K, dtype=torch.bool) if mask is None else mask.bool()
        return cls(local, m, feats[:-1, 2 * K : 2 * K + 2], feats[:-1, 2 * K + 2],
                   torch.as_tensor(root0, dtype=feats.dtype), torch.as_tensor(scale0, dtype=feats.dtype))  # fmt: skip


def _group_mean(
    x: torch.Tensor, m: torch.Tensor, idx: tuple[int, ...]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean of keypoints ``idx`` per frame, valid only when all of them are observed."""
    pts = x[:, list(idx)]
    ok = m[:, list(idx)].all(dim=1)
    return pts.mean(dim=1), ok


def fill_by_interpolation(v: torch.Tensor, ok: torch.Tensor) -> torch.Tensor:
    """Linearly interpolate rows of ``v [T, D]`` where ``ok [T]`` is False; hold the ends."""
    good = torch.nonzero(ok).flatten().numpy()
    if good.size in (0, v.shape[0]):
        return v
    t = np.arange(v.shape[0])
    vals = v.detach().numpy()
    filled = np.stack([np.interp(t, good, vals[good, d]) for d in range(v.shape[1])], axis=1)
    return torch.where(ok[:, None], v, torch.from_numpy(filled).to(v.dtype))


def root_2d(x: torch.Tensor, m: torch.Tensor, kset: KeypointSet) -> torch.Tensor:
    """Per-frame 2D root ``[T, 2]`` of ``x [T, K, 2]`` with mask ``m [T, K]``: mean of the root
    keypoints where all are visible, interpolated in time elsewhere (never zero)."""
    r, ok = _group_mean(x, m, kset.root)
    if not ok.any():
        # no frame sees the root keypoints: fall back to the mean of what is visible
        w = m.to(x.dtype)[..., None]
        r = (x * w).sum(1) / w.sum(1).clamp_min(1.0)
        ok = m.any(dim=1)
    return fill_by_interpolation(r, ok)


def _windowed_median(v: torch.Tensor, ok: torch.Tensor, window: int) -> torch.Tensor:
    """Median of the valid values of ``v [T]`` in a centred window; NaN-free if any is valid."""
    T = v.shape[0]
    half = window // 2
    vals = torch.where(ok, v, torch.full_like(v, float("nan")))
    padded = torch.cat(
        [vals.new_full((half,), float("nan")), vals, vals.new_full((half,), float("nan"))]
    )
    med = padded.unfold(0, 2 * half + 1, 1).nanmedian(dim=1).values[:T]
    has = ~torch.isnan(med)
    return fill_by_interpolation(torch.nan_to_num(med)[:, None], has)[:, 0]


def body_scale(
    x: torch.Tensor, mask: torch.Tensor, kset: KeypointSet, window: int = 15
) -> torch.Tensor:
    """Robust per-frame 2D body size ``[T]`` (pixels) of ``x [T, K, 2]``."""
    lengths, oks = [], []
    for a, b in kset.scale_segments:
        pa, oka = _group_mean(x, mask, a)
        pb, okb = _group_mean(x, mask, b)
        lengths.append((pa - pb).norm(dim=-1))
        oks.append(oka & okb)
    seg_len, seg_ok = torch.stack(lengths, 1), torch.stack(oks, 1).to(x.dtype)
    per_frame = (seg_len * seg_ok).sum(1) / seg_ok.sum(1).clamp_min(1.0)
    ok = seg_ok.sum(1) > 0
    if not ok.any():
        # nothing measurable: use the extent of the visible keypoints
        big = torch.where(mask[..., None], x, torch.nan)
        ext = (big.nan_to_num(-1e9).amax(1) - big.nan_to_num(1e9).amin(1)).amax(-1)
        per_frame, ok = ext, mask.sum(1) >= 2
    s = _windowed_median(per_frame, ok & (per_frame > 1e-6), window)
    return s.clamp_min(1e-3)


def to_canonical(
    x: torch.Tensor, kset: KeypointSet, mask: torch.Tensor | None = None, window: int = 15
) -> CanonicalMotion:
    """``G``: global 2D motion ``x [T, K, 2]`` (pixels) -> :class:`CanonicalMotion`.

    Args:
        x: keypoints in pixels.
        kset: the keypoint set (root and size definitions).
        mask: ``[T, K]`` observed keypoints (default: all).
        window: frames of the body-size median filter.
    """
    x = torch.as_tensor(x)
    if x.ndim != 3 or x.shape[-1] != 2 or x.shape[1] != kset.num_keypoints:
        raise ValueError(
            f"to_canonical: expected keypoints [T, {kset.num_keypoints}, 2], got {list(x.shape)}"
        )
    m = torch.ones(x.shape[:2], dtype=torch.bool) if mask is None else torch.as_tensor(mask).bool()
    m = m & torch.isfinite(x).all(-1)
    x = torch.where(m[..., None], x, torch.zeros_like(x))
    r = root_2d(x, m, kset)
    s = body_scale(x, m, kset, window)
    local = torch.where(m[..., None], (x - r[:, None]) / s[:, None, None], torch.zeros_like(x))
    return CanonicalMotion(
        local=local,
        mask=m,
        root_vel=(r[1:] - r[:-1]) / s[:-1, None],
        log_scale_vel=torch.log(s[1:] / s[:-1]),
        root0=r[0],
        scale0=s[0],
    )


def from_canonical(c: CanonicalMotion) -> tuple[torch.Tensor, torch.Tensor]:
    """``G^-1``: integrate back to pixels.

    Returns:
        keypoints ``[T, K, 2]`` (pixels; masked ones are the root position) and the
        per-frame ``(root [T, 2], scale [T])`` in a tuple ``(x, (r, s))``.
    """
    # integrate in float64 so long clips do not drift
    dt = c.local.dtype
    s0, r0 = c.scale0.double().reshape(1), c.root0.double().reshape(1, 2)
    s = torch.cat([s0, s0 * torch.exp(torch.cumsum(c.log_scale_vel.double(), 0))])
    r = torch.cat([r0, r0 + torch.cumsum(c.root_vel.double() * s[:-1, None], 0)])
    x = (c.local.double() * s[:, None, None] + r[:, None]).to(dt)
    r, s = r.to(dt), s.to(dt)
    return x, (r, s)
