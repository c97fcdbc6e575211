"""Batched rotation utilities in torch.

Conventions used everywhere in Mimic2DM:
- quaternions are ``xyzw`` (scalar last), float32 unless the caller passes float64;
- rotation matrices act on column vectors: ``v_world = R @ v_local``;
- the world is z-up; a character's *heading* is the yaw of its local x axis.

MuJoCo stores quaternions as ``wxyz``: convert at the engine boundary only, with
:func:`wxyz_to_xyzw` / :func:`xyzw_to_wxyz`.
All functions broadcast over leading dimensions ``[...]``.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import torch

_EPS = 1e-9

# the two order converters index, so they serve numpy arrays (file formats) as well
QuatArray = TypeVar("QuatArray", torch.Tensor, np.ndarray)


_WXYZ_TO_XYZW = [1, 2, 3, 0]
_XYZW_TO_WXYZ = [3, 0, 1, 2]


def wxyz_to_xyzw(q: QuatArray) -> QuatArray:
    """``[..., 4]`` wxyz -> xyzw (a new torch tensor or numpy array, like ``q``)."""
    return q[..., _WXYZ_TO_XYZW]


def xyzw_to_wxyz(q: QuatArray) -> QuatArray:
    """``[..., 4]`` xyzw -> wxyz (a new torch tensor or numpy array, like ``q``)."""
    return q[..., _XYZW_TO_WXYZ]


def quat_identity(shape: tuple[int, ...] = (), dtype=torch.float32, device=None) -> torch.Tensor:
    """Identity quaternions of shape ``[*shape, 4]``."""
    q = torch.zeros(*shape, 4, dtype=dtype, device=device)
    q[..., 3] = 1.0
    return q


def quat_normalize(q: torch.Tensor) -> torch.Tensor:
    """Unit quaternions ``[..., 4]``."""
    return q / q.norm(dim=-1, keepdim=True).clamp_min(_EPS)


def quat_conjugate(q: torch.Tensor) -> torch.Tensor:
    """Conjugate (= inverse for unit quaternions) ``[..., 4]``."""
    return torch.cat([-q[..., :3], q[..., 3:4]], dim=-1)


def quat_mul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Hamilton product ``a * b`` (apply ``b`` first, then ``a``); ``[..., 4]``."""
    ax, ay, az, aw = a.unbind(-1)
    bx, by, bz, bw = b.unbind(-1)
    return torch.stack(
        [
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw,
            aw * bw - ax * bx - ay * by - az * bz,
        ],
        dim=-1,
    )


def quat_rotate(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Rotate vectors ``v [..., 3]`` by unit quaternions ``q [..., 4]``."""
    u, v = torch.broadcast_tensors(q[..., :3], v)
    t = 2.0 * torch.cross(u, v, dim=-1)
    return v + q[..., 3:4] * t + torch.cross(u, t, dim=-1)


def quat_rotate_inverse(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Rotate vectors ``v [..., 3]`` by the inverse of ``q [..., 4]``."""
    return quat_rotate(quat_conjugate(q), v)


def quat_from_axis_angle(axis: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """Quaternion from unit ``axis [..., 3]`` and ``angle [...]`` (radians)."""
    half = 0.5 * angle.unsqueeze(-1)
    return torch.cat([axis * torch.sin(half), torch.cos(half)], dim=-1)


def exp_map_to_quat(e: torch.Tensor) -> torch.Tensor:
    """Axis-angle vector ``[..., 3]`` (angle = norm) -> quaternion ``[..., 4]``."""
    angle = e.norm(dim=-1)
    axis = e / angle.unsqueeze(-1).clamp_min(_EPS)
    q = quat_from_axis_angle(axis, angle)
    return torch.where(
        (angle < _EPS).unsqueeze(-1), quat_identity(e.shape[:-1], e.dtype, e.device), q
    )


def quat_to_exp_map(q: torch.Tensor) -> torch.Tensor:
    """Quaternion ``[..., 4]`` -> axis-angle vector ``[..., 3]`` with angle in [0, pi]."""
    q = torch.where(q[..., 3:4] < 0, -q, q)  # shortest rotation
    sin_half = q[..., :3].norm(dim=-1)
    angle = 2.0 * torch.atan2(sin_half, q[..., 3])
    axis = q[..., :3] / sin_half.unsqueeze(-1).clamp_min(_EPS)
    return axis * angle.unsqueeze(-1)


def quat_to_matrix(q: torch.Tensor) -> torch.Tensor:
    """Unit quaternion ``[..., 4]`` -> rotation matrix ``[..., 3, 3]``."""
    x, y, z, w = q.unbind(-1)
    xx, yy, zz = x * x, y * y, z * z
    xy, xz, yz = x * y, x * z, y * z
    wx, wy, wz = w * x, w * y, w * z
    m = torch.stack(
        [
            1 - 2 * (yy + zz), 2 * (xy - wz), 2 * (xz + wy),
            2 * (xy + wz), 1 - 2 * (xx + zz), 2 * (yz - wx),
            2 * (xz - wy), 2 * (yz + wx), 1 - 2 * (xx + yy),
        ],
        dim=-1,
    )  # fmt: skip
    return m.reshape(q.shape[:-1] + (3, 3))


def matrix_to_quat(m: torch.Tensor) -> torch.Tensor:
    """Rotation matrix ``[..., 3, 3]`` -> unit quaternion ``[..., 4]`` with w >= 0.

    Uses the numerically stable branch on the largest of (w, x, y, z).
    """
    m00, m11, m22 = m[..., 0, 0], m[..., 1, 1], m[..., 2, 2]
    trace = m00 + m11 + m22
    cands = torch.stack(
        [
            torch.stack(
                [
                    m[..., 2, 1] - m[..., 1, 2],
                    m[..., 0, 2] - m[..., 2, 0],
                    m[..., 1, 0] - m[..., 0, 1],
                    1 + trace,
                ],
                -1,
            ),
            torch.stack(
                [
                    1 + m00 - m11 - m22,
                    m[..., 0, 1] + m[..., 1, 0],
                    m[..., 0, 2] + m[..., 2, 0],
                    m[..., 2, 1] - m[..., 1, 2],
                ],
                -1,
            ),
            torch.stack(
                [
                    m[..., 0, 1] + m[..., 1, 0],
                    1 + m11 - m00 - m22,
                    m[..., 1, 2] + m[..., 2, 1],
                    m[..., 0, 2] - m[..., 2, 0],
                ],
                -1,
            ),
            torch.stack(
                [
                    m[..., 0, 2] + m[..., 2, 0],
                    m[..., 1, 2] + m[..., 2, 1],
                    1 + m22 - m00 - m11,
                    m[..., 1, 0] - m[..., 0, 1],
                ],
                -1,
            ),
        ],
        dim=-2,
    )  # [..., 4 candidates, xyzw]
    choice = torch.stack([trace, m00, m11, m22], dim=-1).argmax(dim=-1)
    q = torch.gather(cands, -2, choice[..., None, None].expand(*choice.shape, 1, 4)).squeeze(-2)
    q = quat_normalize(q)
    return torch.where(q[..., 3:4] < 0, -q, q)


def quat_to_rot6d(q: torch.Tensor) -> torch.Tensor:
    """Quaternion ``[..., 4]`` -> 6D rotation ``[..., 6]`` (first two matrix columns)."""
    m = quat_to_matrix(q)
    return torch.cat([m[..., :, 0], m[..., :, 1]], dim=-1)


def rot6d_to_matrix(r: torch.Tensor) -> torch.Tensor:
    """6D rotation ``[..., 6]`` -> rotation matrix ``[..., 3, 3]`` (Gram-Schmidt)."""
    a1, a2 = r[..., 0:3], r[..., 3:6]
    b1 = a1 / a1.norm(dim=-1, keepdim=True).clamp_min(_EPS)
    b2 = a2 - (b1 * a2).sum(-1, keepdim=True) * b1
    b2 = b2 / b2.norm(dim=-1, keepdim=True).clamp_min(_EPS)
    b3 = torch.cross(b1, b2, dim=-1)
    return torch.stack([b1, b2, b3], dim=-1)


def rot6d_to_quat(r: torch.Tensor) -> torch.Tensor:
    """6D rotation ``[..., 6]`` -> quaternion ``[..., 4]``."""
    return matrix_to_quat(rot6d_to_matrix(r))


def quat_from_euler_xyz(angles: torch.Tensor) -> torch.Tensor:
    """Intrinsic x-y-z Euler angles ``[..., 3]`` -> quaternion ``Rx(a) Ry(b) Rz(c)``.

    This is the rotation of a MuJoCo body with three hinge joints about its local x, y
    and z axes declared in that order.
    """
    ex = torch.zeros_like(angles)
    ex[..., 0] = 1.0
    ey = torch.zeros_like(angles)
    ey[..., 1] = 1.0
    ez = torch.zeros_like(angles)
    ez[..., 2] = 1.0
    qx = quat_from_axis_angle(ex, angles[..., 0])
    qy = quat_from_axis_angle(ey, angles[..., 1])
    qz = quat_from_axis_angle(ez, angles[..., 2])
    return quat_mul(quat_mul(qx, qy), qz)


def quat_to_euler_xyz(q: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`quat_from_euler_xyz`: ``[..., 4]`` -> ``[..., 3]``, b in [-pi/2, pi/2].

    For ``R = Rx(a) Ry(b) Rz(c)``: ``R[0,2] = sin b``, ``R[1,2] = -sin a cos b``,
    ``R[2,2] = cos a cos b``, ``R[0,1] = -cos b sin c``, ``R[0,0] = cos b cos c``.
    """
    m = quat_to_matrix(q)
    b = torch.asin(m[..., 0, 2].clamp(-1.0, 1.0))
    a = torch.atan2(-m[..., 1, 2], m[..., 2, 2])
    c = torch.atan2(-m[..., 0, 1], m[..., 0, 0])
    return torch.stack([a, b, c], dim=-1)


def heading_angle(q: torch.Tensor) -> torch.Tensor:
    """Yaw ``[...]`` of the local x axis of rotations ``q [..., 4]`` (radians, z-up)."""
    fwd = torch.zeros(q.shape[:-1] + (3,), dtype=q.dtype, device=q.device)
    fwd[..., 0] = 1.0
    fwd = quat_rotate(q, fwd)
    return torch.atan2(fwd[..., 1], fwd[..., 0])


def heading_quat(q: torch.Tensor) -> torch.Tensor:
    """Rotation about world z by the heading of ``q``; ``[..., 4]``."""
    axis = torch.zeros(q.shape[:-1] + (3,), dtype=q.dtype, device=q.device)
    axis[..., 2] = 1.0
    return quat_from_axis_angle(axis, heading_angle(q))


def heading_quat_inv(q: torch.Tensor) -> torch.Tensor:
    """Inverse heading rotation: maps world vectors into the heading frame; ``[..., 4]``."""
    return quat_conjugate(heading_quat(q))


def quat_angle_between(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Rotation angle ``[...]`` (radians, in [0, pi]) of ``a^-1 b``."""
    d = quat_mul(quat_conjugate(a), b)
    return 2.0 * torch.atan2(d[..., :3].norm(dim=-1), d[..., 3].abs())


def state_velocities(root_pos, root_quat, dof_pos, fps: float):
    """Finite-difference ``(root_lin_vel [T, 3], root_ang_vel [T, 3] world, dof_vel [T, J])``."""
    T = root_pos.shape[0]
    if T < 2:
        z = torch.zeros_like
        return z(root_pos), z(root_pos), z(dof_pos)
    lin = torch.gradient(root_pos, spacing=1.0 / fps, dim=0)[0]
    dof_vel = torch.gradient(dof_pos, spacing=1.0 / fps, dim=0)[0]
    nxt = torch.cat([root_quat[1:], root_quat[-1:]])
    prv = torch.cat([root_quat[:1], root_quat[:-1]])
    steps = torch.full((T, 1), 2.0, dtype=root_pos.dtype)
    steps[0], steps[-1] = 1.0, 1.0
    ang = quat_to_exp_map(quat_mul(nxt, quat_conjugate(prv))) * fps / steps
    return lin, ang, dof_vel
