"""Observations of the view-agnostic tracker (docs/design.md section 4) as pure tensor functions.

No camera parameter ever reaches the policy: 2D coordinates are normalised image
coordinates ``((u - cx) / fx, (v - cy) / fy)`` taken relative to the character's own
projected root, so resolution, focal length and camera pose cancel out.
"""

from __future__ import annotations

import torch

from mimic2dm.geometry import rotations as rot


def normalize_pixels(uv: torch.Tensor, intrinsics: torch.Tensor) -> torch.Tensor:
    """Pixels ``[N, ..., K, 2]`` -> normalised image coordinates with ``intrinsics [N, 4]``."""
    shape = (intrinsics.shape[0],) + (1,) * (uv.ndim - 2) + (4,)
    k = intrinsics.reshape(shape)
    return (uv - k[..., 2:4]) / k[..., 0:2]


def proprioception(
    root_pos: torch.Tensor,
    root_rot: torch.Tensor,
    root_lin_vel: torch.Tensor,
    root_ang_vel: torch.Tensor,
    body_rot: torch.Tensor,
    parents: torch.Tensor,
    dof_vel: torch.Tensor,
    key_body_pos: torch.Tensor,
) -> torch.Tensor:
    """Proprioception in the character's heading frame (paper B.2).

    Args:
        root_pos: ``[N, 3]`` world root position; root_rot ``[N, 4]`` xyzw.
        root_lin_vel, root_ang_vel: ``[N, 3]`` world-frame velocities.
        body_rot: ``[N, B, 4]`` world body rotations, root first.
        parents: ``[B]`` parent body index (root: -1).
        dof_vel: ``[N, J]`` joint velocities.
        key_body_pos: ``[N, Kb, 3]`` world positions of key bodies.

    Returns:
        ``[N, 1 + 3 + 3 + 6 + 6 (B - 1) + J + 3 Kb]``: root height, local linear and
        angular velocity, root tilt (6D, heading removed), local rotation of every
        non-root body relative to its parent (6D), joint velocities, key-body positions
        relative to the root in the heading frame.
    """
    hinv = rot.heading_quat_inv(root_rot)
    v = rot.quat_rotate(hinv, root_lin_vel)
    w = rot.quat_rotate(hinv, root_ang_vel)
    tilt = rot.quat_to_rot6d(rot.quat_mul(hinv, root_rot))
    child = body_rot[:, 1:]
    parent = body_rot[:, parents[1:]]
    local = rot.quat_to_rot6d(rot.quat_mul(rot.quat_conjugate(parent), child)).flatten(1)
    rel = key_body_pos - root_pos[:, None]
    key = rot.quat_rotate(hinv[:, None].expand(-1, rel.shape[1], -1), rel).flatten(1)
    return torch.cat([root_pos[:, 2:3], v, w, tilt, local, dof_vel, key], dim=-1)


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
