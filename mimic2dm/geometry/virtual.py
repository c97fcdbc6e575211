"""Random virtual cameras for synthetic views (docs/design.md section 1).

Three kinds, all looking at the character's root:
- ``static``: one extrinsic for the whole clip, aimed at the middle of the root path;
  the distance grows until the whole root path stays in the image.
- ``tracking``: a camera that keeps a fixed offset from the root (a dolly shot).
- ``dynamic``: a camera that stays in place but pans and tilts to follow a smoothed
  root, and zooms smoothly (the moving-camera case of Yu et al. 2021).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mimic2dm.geometry.camera import DEG, Camera, look_at, spherical_offset

CAMERA_MODES = ("static", "tracking", "dynamic")


@dataclass
class VirtualCameraConfig:
    """Sampling ranges; defaults are docs/design.md section 1."""

    width: int = 1920
    height: int = 1080
    focal_range: tuple[float, float] = (1000.0, 1800.0)
    azimuth_range_deg: tuple[float, float] = (0.0, 360.0)
    elevation_range_deg: tuple[float, float] = (-10.0, 35.0)
    distance_range: tuple[float, float] = (3.0, 8.0)
    # dynamic cameras: relative zoom amplitude and smoothing window of the pan target (frames)
    zoom_amplitude: float = 0.2
    pan_smoothing: int = 15
    # static cameras: the projected root path must stay this far inside the image (fraction)
    margin: float = 0.1

    def __post_init__(self) -> None:
        from mimic2dm.utils.validate import check

        key = "task.camera"
        check(f"{key}.width", self.width, ge=1, integer=True)
        check(f"{key}.height", self.height, ge=1, integer=True)
        for name in ("focal_range", "distance_range"):
            lo, hi = getattr(self, name)
            check(f"{key}.{name}[0]", lo, gt=0)
            check(f"{key}.{name}[1]", hi, ge=lo)
        for name in ("azimuth_range_deg", "elevation_range_deg"):
            lo, hi = getattr(self, name)
            check(f"{key}.{name}[1]", hi, ge=lo)
        check(f"{key}.zoom_amplitude", self.zoom_amplitude, ge=0, lt=1)
        check(f"{key}.pan_smoothing", self.pan_smoothing, ge=1, integer=True)
        check(f"{key}.margin", self.margin, ge=0, lt=0.5)


def _uniform(lo: float, hi: float, gen: torch.Generator) -> torch.Tensor:
    return lo + (hi - lo) * torch.rand((), generator=gen, dtype=torch.float64).float()


def _smooth(x: torch.Tensor, window: int) -> torch.Tensor:
    """Moving average of ``x [T, D]`` over ``window`` frames with edge padding."""
    if window <= 1 or x.shape[0] < 2:
        return x
    pad = window // 2
    xp = torch.cat([x[:1].expand(pad, -1), x, x[-1:].expand(pad, -1)], dim=0)
    kernel = torch.ones(x.shape[1], 1, 2 * pad + 1, dtype=x.dtype) / (2 * pad + 1)
    return torch.nn.functional.conv1d(xp.T[None], kernel, groups=x.shape[1])[0].T


def _root_in_view(cam: Camera, root: torch.Tensor, margin: float) -> bool:
    uv, z = cam.project(root[:, None, :] if cam.is_dynamic else root[None])
    uv, z = uv.reshape(-1, 2), z.reshape(-1)
    lo_u, hi_u = margin * cam.width, (1 - margin) * cam.width
    lo_v, hi_v = margin * cam.height, (1 - margin) * cam.height
    inside = (uv[:, 0] > lo_u) & (uv[:, 0] < hi_u) & (uv[:, 1] > lo_v) & (uv[:, 1] < hi_v)
    return bool((inside & (z > 0.5)).all())


def sample_camera(
    root: torch.Tensor,
    mode: str = "static",
    generator: torch.Generator | None = None,
    config: VirtualCameraConfig | None = None,
) -> Camera:
    """Sample one virtual camera for a root trajectory.

    Args:
        root: ``[T, 3]`` character root positions (world, metres).
        mode: one of :data:`CAMERA_MODES`.
        generator: torch RNG for reproducible sampling.
        config: sampling ranges.

    Returns:
        A :class:`Camera` with ``F = 1`` (static) or ``F = T`` (tracking, dynamic).
    """
    if mode not in CAMERA_MODES:
        raise ValueError(f"camera mode {mode!r} is not one of {', '.join(CAMERA_MODES)}")
    cfg = config or VirtualCameraConfig()
    gen = generator or torch.Generator().manual_seed(0)
    root = torch.as_tensor(root, dtype=torch.float32).reshape(-1, 3)
    az = _uniform(*cfg.azimuth_range_deg, gen) * DEG
    el = _uniform(*cfg.elevation_range_deg, gen) * DEG
    dist = _uniform(*cfg.distance_range, gen)
    focal = _uniform(*cfg.focal_range, gen)
    if mode == "tracking":
        eye = root + spherical_offset(az, el, dist)
        return Camera.look_at(eye, root, focal, cfg.width, cfg.height)
    centre = 0.5 * (root.min(dim=0).values + root.max(dim=0).values)
    if mode == "static":
        for _ in range(20):
            cam = Camera.look_at(
                centre + spherical_offset(az, el, dist), centre, focal, cfg.width, cfg.height
            )
            if _root_in_view(cam, root, cfg.margin):
                break
            dist = dist * 1.25
        return cam
    # dynamic: fixed position, pans/tilts after a smoothed root, smooth zoom
    eye = centre + spherical_offset(az, el, dist)
    target = _smooth(root, cfg.pan_smoothing)
    T = root.shape[0]
    phase = _uniform(0.0, 2 * torch.pi, gen)
    zoom = 1.0 + cfg.zoom_amplitude * torch.sin(torch.linspace(0, 2 * torch.pi, T) + phase)
    f_lo, f_hi = cfg.focal_range
    focals = (focal * zoom).clamp(f_lo * (1 - cfg.zoom_amplitude), f_hi * (1 + cfg.zoom_amplitude))
    return Camera.look_at(eye.expand(T, 3), target, focals, cfg.width, cfg.height)


def tracking_cameras(
    root: torch.Tensor,
    n: int,
    generator: torch.Generator,
    config: VirtualCameraConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``n`` independent ``tracking`` cameras for one root path ``[T, 3]`` at once (the batched
    form of :func:`sample_camera` in ``tracking`` mode, same ranges, for the tracker's resets).

    Returns:
        ``R [n, T, 3, 3]``, ``t [n, T, 3]`` and intrinsics ``[n, 4]``.
    """
    cfg = config or VirtualCameraConfig()
    root = torch.as_tensor(root, dtype=torch.float32).reshape(-1, 3)
    u = torch.rand(n, 4, generator=generator, dtype=torch.float64).float()
    lo = torch.tensor(
        [
            cfg.azimuth_range_deg[0],
            cfg.elevation_range_deg[0],
            cfg.distance_range[0],
            cfg.focal_range[0],
        ]
    )
    hi = torch.tensor(
        [
            cfg.azimuth_range_deg[1],
            cfg.elevation_range_deg[1],
            cfg.distance_range[1],
            cfg.focal_range[1],
        ]
    )
    az, el, dist, focal = (lo + (hi - lo) * u).unbind(-1)
    eye = root[None] + spherical_offset(az * DEG, el * DEG, dist)[:, None]  # [n, T, 3]
    R, t = look_at(eye, root.expand_as(eye))
    k = torch.stack(
        [
            focal,
            focal,
            torch.full_like(focal, cfg.width / 2),
            torch.full_like(focal, cfg.height / 2),
        ],
        -1,
    )
    return R, t, k


def sample_cameras(
    root: torch.Tensor,
    num_views: int,
    mode: str = "static",
    seed: int = 0,
    config: VirtualCameraConfig | None = None,
) -> list[Camera]:
    """``num_views`` independent virtual cameras for one root trajectory ``[T, 3]``."""
    gen = torch.Generator().manual_seed(seed)
    return [sample_camera(root, mode, gen, config) for _ in range(num_views)]
