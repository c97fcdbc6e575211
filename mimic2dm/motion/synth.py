"""Synthetic 2D clips: 3D keypoints seen through virtual cameras (docs/design.md section 1).

Used by ``mimic2dm data synth`` and the demo clip. The output keeps the 3D ground truth
and the cameras, so every synthetic clip can be reprojected and scored in 3D.

Confidence model (documented in ``docs/data.md``):
- a point behind the camera is NaN with confidence 0;
- a point outside the image keeps its position, with confidence 0 (no detector sees it);
- with pixel noise ``n ~ N(0, sigma^2)`` per coordinate, confidence is
  ``exp(-|n|^2 / (2 (NOISE_CONF_SCALE * H)^2))`` (an OKS-like score: it falls with the
  keypoint's own error relative to the image height ``H``);
- dropped keypoints (probability ``drop_prob``) keep their position, with confidence 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from mimic2dm.geometry.camera import MIN_DEPTH, Camera
from mimic2dm.geometry.virtual import VirtualCameraConfig, sample_cameras
from mimic2dm.motion.format import Motion2D, camera_arrays
from mimic2dm.motion.keypoint_sets import load_keypoint_set

NOISE_CONF_SCALE = 0.02
"""Pixel noise of 2% of the image height gives confidence exp(-1/2) ~ 0.61."""


def resample(x: np.ndarray, src_fps: float, dst_fps: float) -> np.ndarray:
    """Linearly resample a clip ``x [T, ...]`` from ``src_fps`` to ``dst_fps``.

    Returns:
        ``[T', ...]`` with ``T' = floor((T - 1) * dst / src) + 1`` frames; the first
        frame is kept.
    """
    if src_fps <= 0 or dst_fps <= 0:
        raise ValueError(f"resample: fps must be > 0, got {src_fps} -> {dst_fps}")
    T = x.shape[0]
    if T == 1 or src_fps == dst_fps:
        return x.copy()
    n = int(np.floor((T - 1) * dst_fps / src_fps + 1e-9)) + 1
    s = np.arange(n) * (src_fps / dst_fps)
    i0 = np.clip(np.floor(s).astype(int), 0, T - 1)
    i1 = np.clip(i0 + 1, 0, T - 1)
    w = (s - i0).reshape(-1, *([1] * (x.ndim - 1)))
    return (1 - w) * x[i0] + w * x[i1]


def root_trajectory(keypoints3d: np.ndarray, keypoint_set: str) -> np.ndarray:
    """``[T, 3]`` root of ``keypoints3d [T, K, 3]``: mean of the set's root keypoints."""
    kset = load_keypoint_set(keypoint_set)
    return keypoints3d[:, list(kset.root)].mean(axis=1)


def project_view(cam: Camera, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Project ``points [T, K, 3]`` through ``cam`` (F in {1, T}).

    Returns:
        ``uv [T, K, 2]`` pixels (NaN behind the camera) and a visibility mask
        ``[T, K]`` (in front of the camera and inside the image).
    """
    uv, z = cam.project(torch.as_tensor(points, dtype=torch.float32))
    uv, z = uv.numpy().astype(np.float64), z.numpy()
    front = z > MIN_DEPTH
    uv[~front] = np.nan
    with np.errstate(invalid="ignore"):
        inside = (
            (uv[..., 0] >= 0)
            & (uv[..., 0] <= cam.width)
            & (uv[..., 1] >= 0)
            & (uv[..., 1] <= cam.height)
        )
    return uv, front & inside


def _noisy(
    uv: np.ndarray,
    visible: np.ndarray,
    noise_px: float,
    drop_prob: float,
    height: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Add pixel noise and drops to ``uv [T, K, 2]``; returns ``(uv, confidence [T, K])``."""
    conf = visible.astype(np.float64)
    if noise_px > 0:
        n = rng.normal(0.0, noise_px, size=uv.shape)
        uv = uv + n
        conf = conf * np.exp(-(n**2).sum(-1) / (2 * (NOISE_CONF_SCALE * height) ** 2))
    if drop_prob > 0:
        conf = np.where(rng.random(conf.shape) < drop_prob, 0.0, conf)
    return uv, conf


def synthesize_views(
    keypoints3d: np.ndarray,
    keypoint_set: str,
    fps: float,
    *,
    num_views: int = 1,
    camera: str = "static",
    seed: int = 0,
    noise_px: float = 0.0,
    drop_prob: float = 0.0,
    object3d: np.ndarray | None = None,
    object_radius: float | None = None,
    camera_config: VirtualCameraConfig | None = None,
    labels: dict[str, str] | None = None,
    meta: dict[str, Any] | None = None,
) -> Motion2D:
    """Project a 3D clip through ``num_views`` random virtual cameras.

    Args:
        keypoints3d: ``[T, K, 3]`` world keypoints (metres, z-up).
        keypoint_set: name of the set of ``keypoints3d``.
        fps: frame rate of the clip.
        num_views: ``V`` cameras, sampled with :func:`sample_cameras` looking at the root.
        camera: ``static``, ``tracking`` or ``dynamic``.
        seed: seeds the cameras and the noise.
        noise_px: std of the Gaussian pixel noise per coordinate.
        drop_prob: probability of dropping a keypoint (confidence 0).
        object3d: optional ``[T, 3]`` object (ball) positions, projected to ``object_center``.
        object_radius: the object is a sphere of this radius (m): also write ``object_box``.
        camera_config: sampling ranges (default docs/design.md section 1: 1920x1080).
        labels, meta: stored in the clip (``meta`` gains the synthesis settings).

    Returns:
        :class:`Motion2D` with ``V`` views, cameras and 3D ground truth.
    """
    if noise_px < 0 or not 0 <= drop_prob <= 1 or num_views < 1:
        got = f"noise_px={noise_px}, drop_prob={drop_prob}, num_views={num_views}"
        raise ValueError(
            f"synthesize_views: need noise_px >= 0, drop_prob in [0, 1], num_views >= 1; {got}"
        )
    kp3 = np.asarray(keypoints3d, dtype=np.float64)
    cfg = camera_config or VirtualCameraConfig()
    root = torch.as_tensor(root_trajectory(kp3, keypoint_set))
    cams = sample_cameras(root, num_views, camera, seed, cfg)
    rng = np.random.default_rng([seed, 2024])
    uvs, confs = [], []
    for cam in cams:
        uv, vis = project_view(cam, kp3)
        uv, conf = _noisy(uv, vis, noise_px, drop_prob, cfg.height, rng)
        uvs.append(uv)
        confs.append(conf)
    info = {"generator": "mimic2dm.motion.synth", "camera_mode": camera, "seed": seed}
    info |= {"noise_px": noise_px, "drop_prob": drop_prob, "random_weights": False}
    return Motion2D(
        keypoints=np.stack(uvs).astype(np.float32),
        confidence=np.stack(confs).astype(np.float32),
        keypoint_set=keypoint_set,
        fps=float(fps),
        image_size=(cfg.width, cfg.height),
        keypoints3d=kp3.astype(np.float32),
        labels=dict(labels or {}),
        meta={**(meta or {}), **info},
        **camera_arrays(cams, kp3.shape[0]),
        **_object_track(cams, object3d, object_radius),
    )


def _object_track(
    cams: list[Camera], object3d: np.ndarray | None, radius: float | None = None
) -> dict[str, np.ndarray]:
    """``object_center [V, T, 2]``, ``object_confidence [V, T]``, ``object3d [T, 3]`` and, for
    a sphere of ``radius``, ``object_box [V, T, 4]`` (or {} without an object)."""
    if object3d is None:
        return {}
    pos = np.asarray(object3d, dtype=np.float64)
    tracks = [project_view(cam, pos[:, None]) for cam in cams]
    out = {
        "object_center": np.stack([uv[:, 0] for uv, _ in tracks]).astype(np.float32),
        "object_confidence": np.stack([vis[:, 0] for _, vis in tracks]).astype(np.float32),
        "object3d": pos.astype(np.float32),
    }
    if radius is not None:
        boxes = []
        for cam, (uv, _) in zip(cams, tracks, strict=True):
            _, z = cam.project(torch.as_tensor(pos[:, None], dtype=torch.float32))
            # a sphere's image is about f r / depth pixels in radius (pinhole, away from the border)
            depth = np.maximum(z.numpy()[:, 0].astype(np.float64), MIN_DEPTH)
            f = cam.intrinsics.detach().cpu().numpy().astype(np.float64)[:, :2]
            half = radius * np.broadcast_to(f, (pos.shape[0], 2)) / depth[:, None]
            boxes.append(np.concatenate([uv[:, 0] - half, uv[:, 0] + half], axis=1))
        out["object_box"] = np.stack(boxes).astype(np.float32)
    return out
