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

from mimic2dm.geometry.camera import DEG, Camera, look_at, project_points, spherical_offset

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


def _inside(
    uv: torch.Tensor, z: torch.Tensor, width: int, height: int, margin: float
) -> torch.Tensor:
    """Which points ``uv [..., 2]`` (depth ``z [...]``) are at least ``margin`` (a fraction of
    the image) inside a ``width`` x ``height`` image and more than 0.5 m in front of the camera."""
    lo_u, hi_u = margin * width, (1 - margin) * width
    lo_v, hi_v = margin * height, (1 - margin) * height
    u, v = uv[..., 0], uv[..., 1]
    return (u > lo_u) & (u < hi_u) & (v > lo_v) & (v < hi_v) & (z > 0.5)


def _root_in_view(cam: Camera, root: torch.Tensor, margin: float) -> bool:
    uv, z = cam.project(root[:, None, :] if cam.is_dynamic else root[None])
    return bool(_inside(uv, z, cam.width, cam.height, margin).all())


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


STATIC_TRIES = 20
"""How many distances a ``static`` camera tries (each 1.25 x the last) until the root path
stays in view; the last one is kept if none does."""


def _draw_ranges(
    n: int, generator: torch.Generator, cfg: VirtualCameraConfig
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``n`` draws of azimuth, elevation (radians), distance and focal, each uniform in its range."""
    u = torch.rand(n, 4, generator=generator, dtype=torch.float64).float()
    ranges = (cfg.azimuth_range_deg, cfg.elevation_range_deg, cfg.distance_range, cfg.focal_range)
    lo = torch.tensor([r[0] for r in ranges])
    hi = torch.tensor([r[1] for r in ranges])
    az, el, dist, focal = (lo + (hi - lo) * u).unbind(-1)
    return az * DEG, el * DEG, dist, focal


def _intrinsics(focal: torch.Tensor, cfg: VirtualCameraConfig) -> torch.Tensor:
    """``(fx, fy, cx, cy) [n, 4]`` of square pixels ``focal [n]`` centred in the image."""
    return torch.stack(
        [
            focal,
            focal,
            torch.full_like(focal, cfg.width / 2),
            torch.full_like(focal, cfg.height / 2),
        ],
        -1,
    )


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
    az, el, dist, focal = _draw_ranges(n, generator, cfg)
    eye = root[None] + spherical_offset(az, el, dist)[:, None]  # [n, T, 3]
    R, t = look_at(eye, root.expand_as(eye))
    return R, t, _intrinsics(focal, cfg)


def static_cameras(
    root: torch.Tensor,
    n: int,
    generator: torch.Generator,
    config: VirtualCameraConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``n`` independent ``static`` cameras for one root path ``[T, 3]`` at once (the batched
    form of :func:`sample_camera` in ``static`` mode, same ranges, for the tracker's resets):
    each aimed at the middle of the root path, its distance grown 1.25 x at a time (at most
    :data:`STATIC_TRIES` distances) until the whole path stays ``margin`` inside the image.

    Returns:
        ``R [n, 3, 3]``, ``t [n, 3]`` and intrinsics ``[n, 4]``.
    """
    cfg = config or VirtualCameraConfig()
    root = torch.as_tensor(root, dtype=torch.float32).reshape(-1, 3)
    az, el, dist, focal = _draw_ranges(n, generator, cfg)
    k = _intrinsics(focal, cfg)
    centre = 0.5 * (root.min(dim=0).values + root.max(dim=0).values)
    R, t = torch.empty(n, 3, 3), torch.empty(n, 3)
    todo = torch.arange(n)  # the cameras whose root path is not yet in view
    for i in range(STATIC_TRIES):
        eye = centre + spherical_offset(az[todo], el[todo], dist[todo])
        R[todo], t[todo] = look_at(eye, centre.expand_as(eye))
        if i == STATIC_TRIES - 1:
            break
        uv, z = project_points(R[todo], t[todo], k[todo], root.expand(todo.shape[0], -1, 3))
        todo = todo[~_inside(uv, z, cfg.width, cfg.height, cfg.margin).all(-1)]
        if todo.numel() == 0:
            break
        dist[todo] = dist[todo] * 1.25
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
