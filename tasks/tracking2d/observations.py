"""Observations of the view-agnostic tracker (docs/design.md section 4) as pure tensor functions.

No camera parameter ever reaches the policy: 2D coordinates are normalised image
coordinates ``((u - cx) / fx, (v - cy) / fy)`` taken relative to the character's own
projected root, so resolution, focal length and camera pose cancel out.
"""

from __future__ import annotations

import torch


def normalize_pixels(uv: torch.Tensor, intrinsics: torch.Tensor) -> torch.Tensor:
    """Pixels ``[N, ..., K, 2]`` -> normalised image coordinates with ``intrinsics [N, 4]``."""
    shape = (intrinsics.shape[0],) + (1,) * (uv.ndim - 2) + (4,)
    k = intrinsics.reshape(shape)
    return (uv - k[..., 2:4]) / k[..., 0:2]


def masked_root(x: torch.Tensor, mask: torch.Tensor, root_idx: torch.Tensor) -> torch.Tensor:
    """Mean of the visible root keypoints of ``x [..., K, 2]`` (``mask [..., K]``) -> ``[..., 2]``.

    Falls back to the mean of all visible keypoints where no root keypoint is visible.
    """
    m = mask[..., root_idx].to(x.dtype)
    r = (x[..., root_idx, :] * m[..., None]).sum(-2) / m.sum(-1, keepdim=True).clamp_min(1.0)
    ma = mask.to(x.dtype)
    r_all = (x * ma[..., None]).sum(-2) / ma.sum(-1, keepdim=True).clamp_min(1.0)
    return torch.where((m.sum(-1) > 0)[..., None], r, r_all)


def observation_2d(
    sim_uv: torch.Tensor,
    sim_valid: torch.Tensor,
    ref_uv: torch.Tensor,
    ref_mask: torch.Tensor,
    ref_root: torch.Tensor,
    intrinsics: torch.Tensor,
    root_idx: torch.Tensor,
) -> torch.Tensor:
    """View-agnostic 2D observation of one view.

    Args:
        sim_uv: ``[N, K, 2]`` the character's own keypoints projected (pixels).
        sim_valid: ``[N, K]`` keypoints in front of the camera.
        ref_uv: ``[N, n, K, 2]`` future reference frames ``t+1..t+n`` (pixels).
        ref_mask: ``[N, n, K]`` observed reference keypoints.
        ref_root: ``[N, n, 2]`` reference root per future frame (pixels, gap-filled).
        intrinsics: ``[N, 4]`` ``(fx, fy, cx, cy)`` of the reference camera.
        root_idx: ``[R]`` indices of the keypoint set's root keypoints.

    Returns:
        ``[N, 2K + n (2K + K + 2)]``: own pose relative to own projected root; per future
        frame, the reference pose relative to the reference root (zero where masked),
        its mask (0/1), and the reference root relative to the own projected root.
    """
    own = normalize_pixels(sim_uv, intrinsics)
    own_root = masked_root(own, sim_valid, root_idx)
    own_local = torch.where(sim_valid[..., None], own - own_root[:, None], 0.0)
    ref = normalize_pixels(ref_uv, intrinsics)
    rroot = normalize_pixels(ref_root[:, :, None], intrinsics)[:, :, 0]
    ref_local = torch.where(ref_mask[..., None], ref - rroot[:, :, None], 0.0)
    offset = rroot - own_root[:, None]
    N = sim_uv.shape[0]
    return torch.cat(
        [
            own_local.reshape(N, -1),
            ref_local.reshape(N, -1),
            ref_mask.to(own.dtype).reshape(N, -1),
            offset.reshape(N, -1),
        ],
        dim=-1,
    )


def observation_2d_size(num_keypoints: int, num_future: int) -> int:
    """Width of :func:`observation_2d`."""
    return 2 * num_keypoints + num_future * (3 * num_keypoints + 2)
