"""Heatmap decoding: argmax with sub-pixel refinement.

The refinement ``"dark"`` (Zhang et al. 2020, "Distribution-Aware coordinate
Representation of Keypoints") takes one Newton step on the log heatmap around the
argmax: for a Gaussian peak the log is a quadratic, so the step lands on the true centre
(exactly without blur, to a few hundredths of a pixel with the default blur that tames
noisy real heatmaps). ``"quarter"`` is the classic quarter-pixel shift towards the higher
neighbour; ``"none"`` returns the integer argmax. Coordinates are heatmap pixels with
pixel centres at integers; :func:`mimic2dm.video.transforms.heatmap_to_image` takes them
to image pixels.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

REFINEMENTS = ("dark", "quarter", "none")
_LOG_FLOOR = 1e-3  # as mmpose's DARK: keeps log() finite on flat or negative heatmap tails


def gaussian_blur(heatmaps: torch.Tensor, kernel: int) -> torch.Tensor:
    """Blur ``[N, K, h, w]`` with a normalised Gaussian (OpenCV's sigma for ``kernel``),
    reflecting at the border; the kernel shrinks on heatmaps smaller than it."""
    h, w = heatmaps.shape[-2:]
    kernel = min(kernel, 2 * (min(h, w) - 1) - 1)  # reflect padding needs pad < size
    if kernel < 3:
        return heatmaps
    kernel += 1 - kernel % 2
    sigma = 0.3 * ((kernel - 1) * 0.5 - 1) + 0.8
    x = torch.arange(kernel, dtype=heatmaps.dtype, device=heatmaps.device) - kernel // 2
    g = torch.exp(-(x**2) / (2 * sigma**2))
    g = g / g.sum()
    N, K = heatmaps.shape[:2]
    y = F.pad(heatmaps.reshape(N * K, 1, h, w), (kernel // 2,) * 4, mode="reflect")
    y = F.conv2d(y, g.view(1, 1, 1, -1))
    y = F.conv2d(y, g.view(1, 1, -1, 1))
    return y.reshape(N, K, h, w)


def _gather3x3(maps: torch.Tensor, ix: torch.Tensor, iy: torch.Tensor) -> torch.Tensor:
    """Values ``[N, K, 3, 3]`` of ``maps [N, K, h, w]`` around ``(ix, iy)`` (clamped)."""
    h, w = maps.shape[-2:]
    d = torch.arange(-1, 2, device=maps.device)
    xs = (ix[..., None] + d).clamp(0, w - 1)  # [N, K, 3]
    ys = (iy[..., None] + d).clamp(0, h - 1)
    flat = maps.flatten(2)  # [N, K, h*w]
    idx = (ys[..., :, None] * w + xs[..., None, :]).flatten(2)  # [N, K, 9] rows = y
    return flat.gather(2, idx).view(*ix.shape, 3, 3)


def _dark_offsets(logv: torch.Tensor) -> torch.Tensor:
    """Newton step ``[N, K, 2]`` from 3x3 log values ``[N, K, 3, 3]`` (rows y, cols x)."""
    dx = 0.5 * (logv[..., 1, 2] - logv[..., 1, 0])
    dy = 0.5 * (logv[..., 2, 1] - logv[..., 0, 1])
    dxx = logv[..., 1, 2] - 2 * logv[..., 1, 1] + logv[..., 1, 0]
    dyy = logv[..., 2, 1] - 2 * logv[..., 1, 1] + logv[..., 0, 1]
    dxy = 0.25 * (logv[..., 2, 2] - logv[..., 2, 0] - logv[..., 0, 2] + logv[..., 0, 0])
    det = dxx * dyy - dxy**2
    # only at a proper maximum (negative-definite Hessian); elsewhere keep the argmax
    ok = (dxx < 0) & (det > 1e-12)
    safe = torch.where(ok, det, torch.ones_like(det))
    ox = -(dyy * dx - dxy * dy) / safe
    oy = -(dxx * dy - dxy * dx) / safe
    off = torch.stack([ox, oy], -1)
    ok = ok & (off.abs() <= 1.0).all(-1)  # a longer step means the quadratic model is wrong
    return torch.where(ok[..., None], off, torch.zeros_like(off))


def decode_heatmaps(
    heatmaps: torch.Tensor, refine: str = "dark", blur_kernel: int = 11
) -> tuple[np.ndarray, np.ndarray]:
    """Keypoint locations and scores from heatmaps.

    Args:
        heatmaps: ``[N, K, h, w]``.
        refine: ``"dark"`` | ``"quarter"`` | ``"none"``.
        blur_kernel: Gaussian blur before the DARK step (odd; 0 or 1 = no blur).

    Returns:
        ``coords [N, K, 2]`` float64 ``(x, y)`` heatmap pixels and ``scores [N, K]`` float64
        = the heatmap maximum (not clipped; may exceed 1 or be negative).
    """
    if refine not in REFINEMENTS:
        raise ValueError(f"refine must be one of {', '.join(REFINEMENTS)}, got {refine!r}")
    if heatmaps.ndim != 4:
        raise ValueError(f"heatmaps must be [N, K, h, w], got shape {list(heatmaps.shape)}")
    hm = heatmaps.detach().to(torch.float64)
    N, K, h, w = hm.shape
    scores, arg = hm.flatten(2).max(dim=2)
    ix, iy = arg % w, torch.div(arg, w, rounding_mode="floor")
    coords = torch.stack([ix, iy], -1).to(torch.float64)
    if refine == "quarter":
        v = _gather3x3(hm, ix, iy)
        sx = torch.sign(v[..., 1, 2] - v[..., 1, 0])
        sy = torch.sign(v[..., 2, 1] - v[..., 0, 1])
        inner = torch.stack([(ix > 0) & (ix < w - 1), (iy > 0) & (iy < h - 1)], -1)
        coords = coords + 0.25 * torch.stack([sx, sy], -1) * inner
    elif refine == "dark" and h >= 3 and w >= 3:
        src = gaussian_blur(hm, blur_kernel) if blur_kernel > 1 else hm
        logv = torch.log(_gather3x3(src, ix, iy).clamp_min(_LOG_FLOOR))
        inner = ((ix > 0) & (ix < w - 1) & (iy > 0) & (iy < h - 1))[..., None]
        coords = coords + _dark_offsets(logv) * inner
    return coords.cpu().numpy(), scores.cpu().numpy()
