"""Camera parameterisation and initialisation for preprocessing (B.1).

Gauge: the world is z-up with the ground at ``z = 0``; a rotation about z and a
horizontal translation of camera and motion together change no projection, so the
(first) camera is fixed at ``(0, 0, height)`` with yaw 0, looking along world +x; its
free parameters are the height, the pitch (positive looks down) and the roll. A
dynamic camera adds smooth per-frame pan / tilt / roll and position offsets.

Initialisation (the usual monocular traps): the focal is ``--focal`` or
:func:`default_focal`; the camera distance comes from the 2D body size against the
character's own bone lengths; the character's heading is tried at several angles
around the vertical (:func:`heading_hypotheses`), the 180-degree turn included (a
body facing the camera and one facing away differ in 2D only by which side is
labelled left).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from mimic2dm.motion.canonical import root_2d
from mimic2dm.motion.keypoint_sets import KeypointSet

DEFAULT_FOV_DEG = 69.0
"""Horizontal field of view assumed when the focal is unknown: a phone's main camera
(26 mm equivalent). At 1920x1080 it gives 1398 px, the middle of the range of docs/design.md section 1."""


def default_focal(width: int, height: int, fov_deg: float = DEFAULT_FOV_DEG) -> float:
    """Focal length (px) of a camera with ``fov_deg`` across the longer image side."""
    return max(width, height) / (2.0 * math.tan(math.radians(fov_deg) / 2.0))


def camera_rotation(
    pitch: torch.Tensor, roll: torch.Tensor, yaw: torch.Tensor | None = None
) -> torch.Tensor:
    """World-to-camera rotations ``[..., 3, 3]`` (OpenCV camera) of a camera looking along
    world +x turned by ``yaw`` about z, tilted down by ``pitch`` and rolled by ``roll`` (rad)."""
    if yaw is None:
        yaw = torch.zeros_like(pitch)
    cy, sy, cp, sp = torch.cos(yaw), torch.sin(yaw), torch.cos(pitch), torch.sin(pitch)
    zero = torch.zeros_like(pitch)
    fwd = torch.stack([cp * cy, cp * sy, -sp], -1)
    right = torch.stack([sy, -cy, zero], -1)
    down = torch.stack([-sp * cy, -sp * sy, -cp], -1)
    cr, sr = torch.cos(roll)[..., None], torch.sin(roll)[..., None]
    return torch.stack([cr * right + sr * down, -sr * right + cr * down, fwd], dim=-2)


def bone_scale(
    uv: torch.Tensor, mask: torch.Tensor, kset: KeypointSet, rest: torch.Tensor
) -> torch.Tensor:
    """Pixels per metre ``[T]`` of the body in each frame: 2D bone lengths over the
    character's 3D ones, summed over the visible bones of ``kset.edges``.

    Foreshortening only shortens bones, so the ratio is a lower bound; callers take a
    running maximum. Frames that see no bone get the median of the others.

    Args:
        uv: ``[T, K, 2]`` pixels; mask: ``[T, K]``; rest: ``[K, 3]`` keypoints of the
            character's default pose (metres).
    """
    a, b = (torch.as_tensor(x) for x in zip(*kset.edges, strict=True))
    seen = (mask[:, a] & mask[:, b]).float()
    l2 = torch.nan_to_num((uv[:, a] - uv[:, b]).norm(dim=-1)) * seen
    l3 = (rest[a] - rest[b]).norm(dim=-1) * seen
    ratio = l2.sum(1) / l3.sum(1).clamp_min(1e-6)
    ok = seen.sum(1) > 0
    fill = ratio[ok].median() if ok.any() else ratio.new_tensor(1.0)
    return torch.where(ok, ratio, fill)


def running_max(x: torch.Tensor, window: int) -> torch.Tensor:
    """Centred running maximum of ``x [T]`` over ``window`` frames."""
    half = max(window // 2, 0)
    xp = torch.cat([x[:1].expand(half), x, x[-1:].expand(half)])
    return xp.unfold(0, 2 * half + 1, 1).max(dim=1).values


def initial_depths(uv, mask, kset, rest, focal: float, fps: float, static: bool) -> torch.Tensor:
    """Camera-to-body distance ``[T]`` (m): ``focal / pixels-per-metre``.

    A static camera uses one robust distance for the whole clip when the body size
    hardly changes, otherwise a 1 s running maximum of the scale (bodies walking in
    depth change size); a dynamic camera always uses the running maximum.
    """
    s = running_max(bone_scale(uv, mask, kset, rest), max(int(fps), 1))
    if static and s.max() < 1.3 * s.min():
        s = torch.full_like(s, float(torch.quantile(s, 0.9)))
    return focal / s.clamp_min(1e-6)


def heading_hypotheses(n: int) -> torch.Tensor:
    """``[n]`` yaw angles (rad) of the character, the first facing the camera (world -x)."""
    return math.pi + 2.0 * math.pi * torch.arange(n, dtype=torch.float32) / max(n, 1)


def initial_root_path(
    uv: torch.Tensor,
    mask: torch.Tensor,
    kset: KeypointSet,
    depth: torch.Tensor,
    intrinsics: torch.Tensor,
    root_height: float,
) -> tuple[torch.Tensor, float]:
    """Back-project the 2D root at ``depth`` through a level camera at the origin.

    Returns:
        ``(root [T, 3]`` world keypoint-root positions, camera height (m)) with the camera
        height chosen so that the median root is at ``root_height``.
    """
    r = root_2d(torch.nan_to_num(uv), mask, kset)
    fx, fy, cx, cy = intrinsics.unbind(-1)
    x_cam = (r[:, 0] - cx) / fx * depth
    y_cam = (r[:, 1] - cy) / fy * depth
    height = root_height + float(y_cam.median())
    return torch.stack([depth, -x_cam, height - y_cam], dim=-1), height


def static_camera_init(height: float) -> dict[str, float]:
    """Initial static-camera parameters: level, no roll, at ``height``."""
    return {"height": height, "pitch": 0.0, "roll": 0.0}


def numpy_rotation_angle(Ra: np.ndarray, Rb: np.ndarray) -> np.ndarray:
    """Angle (deg) of ``Ra^T Rb`` for ``[..., 3, 3]`` rotations."""
    tr = np.einsum("...ij,...ij->...", Ra, Rb)
    return np.degrees(np.arccos(np.clip((tr - 1.0) / 2.0, -1.0, 1.0)))
