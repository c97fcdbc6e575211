"""RSMT's frame features: global joint positions, velocities and 6D orientations (paper sec. 4).

A frame of the 15-body humanoid is a vector of :data:`D` = 180 numbers, z-up, metres:

- ``[0:45]`` global joint positions (15 x 3, joint-major, in ``humanoid.BODY_NAMES`` order);
- ``[45:90]`` joint velocities (m/s, backward differences; the first frame copies the second);
- ``[90:180]`` global joint orientations as 6D (15 x 6: the rotation matrix's first two
  columns, :func:`~mimic2dm.geometry.rotations.quat_to_rot6d`), the paper's forward and up
  vectors.

Windows are *canonical*: rotated about z and shifted so that their first frame's pelvis is at
x = y = 0 and faces +x (the pelvis's local x axis), as the paper orients its clips. The start
and the target of a transition live in that one frame (the paper keeps them in the same
coordinate system rather than in local space).

Mirroring reflects the world's y axis and swaps left and right bodies: positions and
velocities get ``y -> -y``; an orientation ``R`` becomes ``S R S`` with ``S = diag(1, -1, 1)``,
i.e. column 0 becomes ``S c0`` and column 1 becomes ``-S c1``. The humanoid's bodies are
mirror images of each other in their local y, so the mirrored orientations drive the same
skeleton (checked by forward kinematics in tests/test_rsmt.py).
"""

from __future__ import annotations

import math

import torch

from mimic2dm.characters import humanoid
from mimic2dm.geometry.rotations import matrix_to_quat, quat_to_rot6d, rot6d_to_matrix

J = 15
"""Joints (bodies) of the humanoid."""
D = J * 12
"""Numbers per frame."""
POS, VEL, ROT = slice(0, 3 * J), slice(3 * J, 6 * J), slice(6 * J, 12 * J)
"""Slices of a frame: positions, velocities, 6D orientations."""
FEET = (11, 14)
"""The ankles (right_foot, left_foot)."""
FPS = 30.0
"""The model's frame rate (the paper's 30 fps)."""
HIP = 9
"""Numbers of the hip feature ``v_h``: the pelvis's velocity (3) and 6D orientation (6)."""

_LEFT_RIGHT = {"right": "left", "left": "right"}
MIRROR_PERM = tuple(
    humanoid.BODY_NAMES.index(
        "_".join(_LEFT_RIGHT.get(w, w) for w in n.split("_")) if "_" in n else n
    )
    for n in humanoid.BODY_NAMES
)
"""Joint permutation that swaps left and right bodies."""


def positions(x: torch.Tensor) -> torch.Tensor:
    """``[..., 180]`` -> global joint positions ``[..., 15, 3]``."""
    return x[..., POS].unflatten(-1, (J, 3))


def velocities(x: torch.Tensor) -> torch.Tensor:
    """``[..., 180]`` -> joint velocities ``[..., 15, 3]``."""
    return x[..., VEL].unflatten(-1, (J, 3))


def rotations6d(x: torch.Tensor) -> torch.Tensor:
    """``[..., 180]`` -> 6D orientations ``[..., 15, 6]``."""
    return x[..., ROT].unflatten(-1, (J, 6))


def pack(pos: torch.Tensor, vel: torch.Tensor, rot6: torch.Tensor) -> torch.Tensor:
    """Positions, velocities ``[..., 15, 3]`` and 6D orientations ``[..., 15, 6]`` -> ``[..., 180]``."""
    return torch.cat([pos.flatten(-2), vel.flatten(-2), rot6.flatten(-2)], dim=-1)


def finite_velocity(pos: torch.Tensor, fps: float = FPS) -> torch.Tensor:
    """Backward-difference velocities of positions ``[..., T, 15, 3]``; frame 0 copies frame 1."""
    if pos.shape[-3] < 2:
        return torch.zeros_like(pos)
    v = (pos[..., 1:, :, :] - pos[..., :-1, :, :]) * fps
    return torch.cat([v[..., :1, :, :], v], dim=-3)


def clip_features(pos: torch.Tensor, quat: torch.Tensor, fps: float = FPS) -> torch.Tensor:
    """Frames ``[T, 180]`` from global positions ``[T, 15, 3]`` and orientations ``[T, 15, 4]`` (xyzw)."""
    return pack(pos, finite_velocity(pos, fps), quat_to_rot6d(quat))


def heading(x: torch.Tensor) -> torch.Tensor:
    """Yaw ``[...]`` of the pelvis's local x axis in frames ``[..., 180]`` (radians)."""
    c0 = x[..., ROT.start : ROT.start + 3]
    return torch.atan2(c0[..., 1], c0[..., 0])


def _rotate_z(v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate vectors ``[..., 3]`` about z; ``cos``/``sin`` broadcast to ``v[..., 0]``."""
    x, y = v[..., 0], v[..., 1]
    return torch.stack([cos * x - sin * y, sin * x + cos * y, v[..., 2]], dim=-1)


def transform(x: torch.Tensor, yaw: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """Frames ``[..., T, 180]`` rotated about z by ``yaw [...]`` then shifted by ``shift [..., 2]`` (x, y)."""
    cos, sin = torch.cos(yaw)[..., None, None], torch.sin(yaw)[..., None, None]
    pos = _rotate_z(positions(x), cos, sin)
    pos = pos + torch.cat([shift, torch.zeros_like(shift[..., :1])], -1)[..., None, None, :]
    vel = _rotate_z(velocities(x), cos, sin)
    r = rotations6d(x)
    rot = torch.cat([_rotate_z(r[..., :3], cos, sin), _rotate_z(r[..., 3:], cos, sin)], -1)
    return pack(pos, vel, rot)


def canonical_transform(frame: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(yaw, shift)`` that bring ``frame [..., 180]``'s pelvis to x = y = 0 facing +x."""
    yaw = -heading(frame)
    root = frame[..., 0:2]
    cos, sin = torch.cos(yaw), torch.sin(yaw)
    shift = -torch.stack([cos * root[..., 0] - sin * root[..., 1], sin * root[..., 0] + cos * root[..., 1]], -1)  # fmt: skip
    return yaw, shift


def canonicalise(x: torch.Tensor, frame: int = 0) -> torch.Tensor:
    """Windows ``[..., T, 180]`` in the canonical frame of their frame ``frame``."""
    yaw, shift = canonical_transform(x[..., frame, :])
    return transform(x, yaw, shift)


def mirror(x: torch.Tensor) -> torch.Tensor:
    """Frames ``[..., 180]`` reflected in the world's xz plane, left and right swapped."""
    perm = list(MIRROR_PERM)
    s = torch.tensor([1.0, -1.0, 1.0], dtype=x.dtype, device=x.device)
    pos, vel, r = (
        positions(x)[..., perm, :],
        velocities(x)[..., perm, :],
        rotations6d(x)[..., perm, :],
    )
    rot = torch.cat([r[..., :3] * s, -r[..., 3:] * s], -1)
    return pack(pos * s, vel * s, rot)


def hip(x: torch.Tensor) -> torch.Tensor:
    """The hip feature ``v_h [..., 9]``: the pelvis's velocity and 6D orientation."""
    return torch.cat([x[..., VEL.start : VEL.start + 3], x[..., ROT.start : ROT.start + 6]], -1)


def to_local(x: torch.Tensor, parents: tuple[int, ...] = humanoid.PARENTS) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Frames ``[T, 180]`` -> ``(root_translation [T, 3], local_rotation [T, 15, 4] xyzw)``, the
    ``cmu_*.npz`` layout (orientations re-orthonormalised by Gram-Schmidt)."""
    g = rot6d_to_matrix(rotations6d(x))
    local = [g[:, 0]]
    for j in range(1, J):
        local.append(g[:, parents[j]].transpose(-1, -2) @ g[:, j])
    q = matrix_to_quat(torch.stack(local, 1))
    return positions(x)[:, 0].clone(), q


def to_mocap(x: torch.Tensor, source: str = "rsmt"):
    """Frames ``[T, 180]`` as a :class:`~mimic2dm.characters.mocap.HumanMocap` on the humanoid's
    skeleton (:func:`to_local`; bone lengths the humanoid's), for ``human_fk`` / ``human_keypoints``."""
    from mimic2dm.characters.mocap import HumanMocap

    root, q = to_local(x)
    offsets = torch.tensor(humanoid.OFFSETS, dtype=torch.float32)
    return HumanMocap(FPS, root, q, offsets, humanoid.PARENTS, humanoid.BODY_NAMES, source)


def time_embedding(dt: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal embedding ``[..., dim]`` of frames-to-go ``dt [...]`` (paper eq. 7)."""
    i = torch.arange(dim // 2, dtype=torch.float32, device=dt.device)
    freq = torch.exp(-math.log(10000.0) * 2.0 * i / dim)
    a = dt.float()[..., None] * freq
    return torch.stack([torch.sin(a), torch.cos(a)], -1).flatten(-2)
