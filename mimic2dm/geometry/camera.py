"""Pinhole cameras with static or per-frame (dynamic) parameters (docs/design.md section 1).

World frame is z-up; camera frame is OpenCV (x right, y down, z forward).
A camera maps world points ``p`` to camera points ``R p + t`` and then to pixels
``(fx x/z + cx, fy y/z + cy)``.

Parameters carry a leading frame axis ``F``: ``F == 1`` is a static camera, ``F == T``
is one camera per frame (pan, tilt, zoom, tracking shots). The same functions serve
per-environment cameras in the tracker (``F`` = number of envs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

# Depth below which a point counts as behind the camera (metres).
MIN_DEPTH = 1e-3


def project_points(
    R: torch.Tensor, t: torch.Tensor, intrinsics: torch.Tensor, points: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Project world points to pixels.

    Args:
        R: ``[..., 3, 3]`` world-to-camera rotations.
        t: ``[..., 3]`` world-to-camera translations.
        intrinsics: ``[..., 4]`` as ``(fx, fy, cx, cy)`` in pixels.
        points: ``[..., K, 3]`` world points; leading dims broadcast with the camera's.

    Returns:
        uv ``[..., K, 2]`` pixels and depth ``[..., K]`` (camera z, metres). Points with
        depth below :data:`MIN_DEPTH` are projected with the depth clamped; callers mask
        them with ``depth > MIN_DEPTH``.
    """
    pc = torch.einsum("...ij,...kj->...ki", R, points) + t.unsqueeze(-2)
    z = pc[..., 2]
    zc = z.clamp_min(MIN_DEPTH)
    f = intrinsics[..., None, 0:2]
    c = intrinsics[..., None, 2:4]
    uv = pc[..., 0:2] / zc.unsqueeze(-1) * f + c
    return uv, z


def look_at(eye: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """World-to-camera ``(R [..., 3, 3], t [..., 3])`` for a camera at ``eye`` looking at ``target``.

    The image's up direction follows world +z (no roll). ``eye`` must not lie straight
    above or below ``target``.
    """
    fwd = target - eye
    fwd = fwd / fwd.norm(dim=-1, keepdim=True).clamp_min(1e-9)
    up = torch.zeros_like(fwd)
    up[..., 2] = 1.0
    right = torch.cross(fwd, up, dim=-1)
    right = right / right.norm(dim=-1, keepdim=True).clamp_min(1e-9)
    down = torch.cross(fwd, right, dim=-1)
    R = torch.stack([right, down, fwd], dim=-2)
    t = -torch.einsum("...ij,...j->...i", R, eye)
    return R, t


@dataclass
class Camera:
    """A pinhole camera; static when ``F == 1``, one set of parameters per frame otherwise.

    Attributes:
        R: ``[F, 3, 3]`` world-to-camera rotation.
        t: ``[F, 3]`` world-to-camera translation (metres).
        intrinsics: ``[F, 4]`` ``(fx, fy, cx, cy)`` in pixels (``F`` may be 1 when only
            the extrinsics move).
        width, height: image size in pixels.
    """

    R: torch.Tensor
    t: torch.Tensor
    intrinsics: torch.Tensor
    width: int
    height: int

    def __post_init__(self) -> None:
        self.R = torch.as_tensor(self.R, dtype=torch.float32)
        self.t = torch.as_tensor(self.t, dtype=torch.float32)
        self.intrinsics = torch.as_tensor(self.intrinsics, dtype=torch.float32)
        if self.R.ndim == 2:
            self.R = self.R[None]
        if self.t.ndim == 1:
            self.t = self.t[None]
        if self.intrinsics.ndim == 1:
            self.intrinsics = self.intrinsics[None]
        checks = [("R", self.R, (3, 3)), ("t", self.t, (3,)), ("intrinsics", self.intrinsics, (4,))]
        for name, x, tail in checks:
            if x.ndim != len(tail) + 1 or tuple(x.shape[1:]) != tail:
                raise ValueError(
                    f"Camera.{name}: expected shape [F, {', '.join(map(str, tail))}], got {list(x.shape)}"
                )
        frames = {self.R.shape[0], self.t.shape[0], self.intrinsics.shape[0]} - {1}
        if len(frames) > 1:
            raise ValueError(
                f"Camera: R, t and intrinsics disagree on the frame count: {sorted(frames)}"
            )
        if self.width <= 0 or self.height <= 0:
            raise ValueError(f"Camera: image size must be positive, got {self.width}x{self.height}")

    @property
    def num_frames(self) -> int:
        """``F``: 1 for a static camera."""
        return max(self.R.shape[0], self.t.shape[0], self.intrinsics.shape[0])

    @property
    def is_dynamic(self) -> bool:
        return self.num_frames > 1

    def params(
        self, frames: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(R [F', 3, 3], t [F', 3], intrinsics [F', 4])``, optionally at ``frames`` ``[F']``.

        Frame indices beyond a dynamic camera's last frame are clamped to it; a static
        camera repeats its only frame.
        """
        if frames is None:
            F = self.num_frames
            return self.R.expand(F, 3, 3), self.t.expand(F, 3), self.intrinsics.expand(F, 4)
        frames = torch.as_tensor(frames, dtype=torch.long)

        def pick(x: torch.Tensor) -> torch.Tensor:
            return x[frames.clamp(0, x.shape[0] - 1)]

        return pick(self.R), pick(self.t), pick(self.intrinsics)

    def project(self, points: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Project ``points [..., F, K, 3]`` (``F`` = num_frames or 1) -> ``uv [..., F, K, 2]``, depth ``[..., F, K]``."""
        R, t, k = self.params()
        return project_points(R, t, k, points)

    def center(self) -> torch.Tensor:
        """Camera centres in world coordinates ``[F, 3]``."""
        R, t, _ = self.params()
        return -torch.einsum("fji,fj->fi", R, t)

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Plain arrays for serialisation (keys ``R``, ``t``, ``intrinsics``, ``image_size``)."""
        return {
            "R": self.R.numpy().astype(np.float32),
            "t": self.t.numpy().astype(np.float32),
            "intrinsics": self.intrinsics.numpy().astype(np.float32),
            "image_size": np.array([self.width, self.height], dtype=np.int64),
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> Camera:
        """Inverse of :meth:`to_arrays`."""
        w, h = (int(v) for v in np.asarray(arrays["image_size"]).reshape(2))
        return cls(torch.from_numpy(np.asarray(arrays["R"])), torch.from_numpy(np.asarray(arrays["t"])),
                   torch.from_numpy(np.asarray(arrays["intrinsics"])), w, h)  # fmt: skip

    @classmethod
    def look_at(
        cls, eye, target, focal: float | torch.Tensor, width: int = 1920, height: int = 1080
    ) -> Camera:
        """Camera(s) at ``eye [F, 3]`` looking at ``target [F, 3]`` with square pixels ``focal`` (``[]`` or ``[F]``)."""
        eye = torch.as_tensor(eye, dtype=torch.float32).reshape(-1, 3)
        target = torch.as_tensor(target, dtype=torch.float32).reshape(-1, 3)
        R, t = look_at(*torch.broadcast_tensors(eye, target))
        f = torch.as_tensor(focal, dtype=torch.float32).reshape(-1)
        k = torch.stack(
            [f, f, torch.full_like(f, width / 2), torch.full_like(f, height / 2)], dim=-1
        )
        return cls(R, t, k, width, height)


def pixel_threshold(threshold_px_at_1080: float, image_height: int) -> float:
    """Rescale a pixel threshold stated at 1920x1080 to an image of ``image_height`` (docs/design.md section 1)."""
    return threshold_px_at_1080 * image_height / 1080.0


def spherical_offset(
    azimuth: torch.Tensor, elevation: torch.Tensor, distance: torch.Tensor
) -> torch.Tensor:
    """Offset ``[..., 3]`` from a target to a camera at ``azimuth``/``elevation`` (radians), ``distance`` (m)."""
    ce = torch.cos(elevation)
    return torch.stack(
        [
            distance * ce * torch.cos(azimuth),
            distance * ce * torch.sin(azimuth),
            distance * torch.sin(elevation),
        ],
        dim=-1,
    )


DEG = math.pi / 180.0
