"""Plain in-between baseline for RSMT comparisons: interpolate from the start to the target."""

from __future__ import annotations

import torch
from mimic2dm.generators.rsmt.features import FPS, POS, ROT, VEL, D, rotations6d

from mimic2dm.geometry.rotations import (
    exp_map_to_quat,
    quat_conjugate,
    quat_mul,
    quat_to_exp_map,
    quat_to_rot6d,
    rot6d_to_quat,
)


def slerp(a: torch.Tensor, b: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Shortest-arc spherical interpolation ``a * exp(w * log(a^-1 b))``.

    Args:
        a, b: unit quaternions ``[..., 4]`` (xyzw).
        w: weights broadcastable to ``[...]`` (0 -> ``a``, 1 -> ``b``).

    Returns:
        ``[..., 4]`` unit quaternions.
    """
    delta = quat_to_exp_map(quat_mul(quat_conjugate(a), b))
    return quat_mul(a, exp_map_to_quat(w.unsqueeze(-1) * delta))


def linear_transition(
    start: torch.Tensor, target: torch.Tensor, frames: int, fps: float = FPS
) -> torch.Tensor:
    """The frames after ``start`` up to ``target``, by plain interpolation.

    Output frame ``i`` (0-based) lies ``w_i = (i + 1) / frames`` of the way from ``start``
    to ``target``: the first output frame is one step after ``start`` (``start`` itself is
    not repeated) and the last one has exactly the target's pose. Global positions are
    interpolated linearly, each joint's global rotation is slerped (6D -> quaternion ->
    shortest-arc slerp -> 6D), and velocities are finite differences of the output
    positions, ``(p_i - p_{i-1}) * fps`` (m/s), except output frame 0, which keeps the
    start's velocity.

    Args:
        start, target: frames ``[..., 180]``.
        frames: number of output frames, ``>= 1``.
        fps: frame rate of the velocities.

    Returns:
        ``[..., frames, 180]``.
    """
    if start.shape != target.shape or start.shape[-1] != D:
        raise ValueError(f"start {list(start.shape)}, target {list(target.shape)}: need [..., {D}]")
    if frames < 1:
        raise ValueError(f"frames: expected >= 1, got {frames}")
    w = torch.arange(1, frames + 1, dtype=start.dtype, device=start.device) / frames
    pos = torch.lerp(start[..., None, POS], target[..., None, POS], w[:, None])
    q0 = rot6d_to_quat(rotations6d(start))[..., None, :, :]  # [..., 1, J, 4]
    q1 = rot6d_to_quat(rotations6d(target))[..., None, :, :]
    rot = quat_to_rot6d(slerp(q0, q1, w[:, None])).flatten(-2)  # [..., frames, 90]
    vel = torch.cat([start[..., None, VEL], (pos[..., 1:, :] - pos[..., :-1, :]) * fps], dim=-2)
    out = start.new_zeros(*start.shape[:-1], frames, D)
    out[..., POS], out[..., VEL], out[..., ROT] = pos, vel, rot
    return out
