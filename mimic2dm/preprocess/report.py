"""Accuracy of preprocessing against ground truth (``mimic2dm preprocess --gt``).

The estimate lives in its own gauge (camera at the origin, yaw 0; see
:mod:`mimic2dm.preprocess.camera_init`). Before comparing cameras it is brought into
the ground truth's by the rotation about z and the horizontal translation that best
align the estimated 3D keypoints with the true ones (the ground plane is shared, so
heights are not aligned). Pose errors need no such alignment:

- ``mpjpe_mm``: root-aligned MPJPE in the camera frame (each camera's view of the body,
  with each frame's keypoint root, the set's ``root`` keypoints' mean, subtracted);
- ``pa_mpjpe_mm``: MPJPE after a per-frame similarity Procrustes alignment;
- ``reprojection_px``: mean distance between the estimate projected through the
  estimated camera and the observed keypoints the optimiser saw (masked ones skipped);
  ``reprojection_gt_px``: the same against the noise-free projection of the ground truth;
- ``camera_rotation_deg`` / ``camera_position_m``: mean over frames of the angle of
  ``R_gt^T R_est`` and of the distance between camera centres, after the alignment;
- ``focal_error_pct``: relative error of the focal length;
- ``root_trajectory_mm``: mean distance between the estimated and the true root (the set's
  ``root`` keypoints' mean), after the same alignment. Root-aligned MPJPE cannot see it: a
  root that stalls and jumps along the viewing ray, or a path shrunk by a wrong focal length,
  shows here;
- ``root_velocity_error_m_s``: mean norm of the difference of the horizontal root
  velocities (central differences, the estimate turned by the alignment), what the tracker's
  initial states inherit.
"""

from __future__ import annotations

import numpy as np
import torch

from mimic2dm.geometry.camera import project_points
from mimic2dm.motion.format import Motion2D
from mimic2dm.motion.keypoint_sets import load_keypoint_set
from mimic2dm.preprocess.camera_init import numpy_rotation_angle


def align_ground(est: np.ndarray, gt: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rotation about z ``A [3, 3]`` and translation ``b [3]`` (z = 0) minimising
    ``|A est + b - gt|`` over the x, y coordinates of all points ``[..., 3]``."""
    e, g = est.reshape(-1, 3)[:, :2], gt.reshape(-1, 3)[:, :2]
    ec, gc = e - e.mean(0), g - g.mean(0)
    theta = np.arctan2((ec[:, 0] * gc[:, 1] - ec[:, 1] * gc[:, 0]).sum(), (ec * gc).sum())
    c, s = np.cos(theta), np.sin(theta)
    A = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
    b = np.zeros(3)
    b[:2] = g.mean(0) - A[:2, :2] @ e.mean(0)
    return A, b


def root_aligned_mpjpe(est: np.ndarray, gt: np.ndarray, root: tuple[int, ...]) -> float:
    """Mean per-joint position error (mm) of ``[T, K, 3]`` poses after subtracting each
    frame's root (mean of keypoints ``root``); pass camera-frame poses (the world's yaw
    is a gauge of monocular estimates, the camera's view of the body is not)."""
    e = est - est[:, list(root)].mean(1, keepdims=True)
    g = gt - gt[:, list(root)].mean(1, keepdims=True)
    return float(np.linalg.norm(e - g, axis=-1).mean() * 1000.0)


def pa_mpjpe(est: np.ndarray, gt: np.ndarray) -> float:
    """MPJPE (mm) after a per-frame similarity (rotation, translation, scale) alignment."""
    e = est - est.mean(1, keepdims=True)
    g = gt - gt.mean(1, keepdims=True)
    u, s, vt = np.linalg.svd(np.einsum("tki,tkj->tij", e, g))
    d = np.sign(np.linalg.det(np.einsum("tij,tjk->tik", u, vt)))
    s[:, 2] *= d
    u[:, :, 2] *= d[:, None]
    R = np.einsum("tij,tjk->tik", u, vt)  # e @ R ~ g
    scale = s.sum(1) / np.square(e).sum((1, 2)).clip(1e-12)
    aligned = scale[:, None, None] * np.einsum("tki,tij->tkj", e, R)
    return float(np.linalg.norm(aligned - g, axis=-1).mean() * 1000.0)


def _project(R, t, k, points: np.ndarray) -> np.ndarray:
    f = lambda x: torch.tensor(np.array(x), dtype=torch.float64)  # noqa: E731
    uv, _ = project_points(f(R), f(t), f(k), f(points))
    return uv.numpy()


def _to_camera(R: np.ndarray, t: np.ndarray, p: np.ndarray) -> np.ndarray:
    """World points ``[T, K, 3]`` in the camera frame of each frame (``R [T, 3, 3]``, ``t [T, 3]``)."""
    return np.einsum("tij,tkj->tki", R, p) + t[:, None]


def _per_frame(x: np.ndarray, T: int) -> np.ndarray:
    return np.broadcast_to(x, (T, *x.shape[1:])) if x.shape[0] == 1 else x


def pixel_errors(
    uv: np.ndarray, target: np.ndarray, mask: np.ndarray, image_height: int
) -> dict[str, float]:
    """Mean, median and max distance (px) between ``uv`` and ``target [..., K, 2]`` over the
    keypoints where ``mask [..., K]``, raw and scaled to a 1080-px-high image (``*_1080``, the
    scale of the project's 2D errors and thresholds); NaN where nothing is masked in."""
    err = np.linalg.norm(uv - np.nan_to_num(target), axis=-1)[mask]
    stats = {"mean": np.mean, "median": np.median, "max": np.max}
    out = {}
    for name, f in stats.items():
        out[f"reprojection_{name}_px"] = float(f(err)) if err.size else float("nan")
    for name in stats:
        out[f"reprojection_{name}_px_1080"] = out[f"reprojection_{name}_px"] * 1080.0 / image_height
    return out


def camera_projection(m: Motion2D, view: int, points: np.ndarray) -> np.ndarray:
    """``[T, K, 2]`` pixels of world ``points [T, K, 3]`` through view ``view``'s camera of ``m``."""
    T = points.shape[0]
    R, t, k = (_per_frame(x[view].astype(np.float64), T)
               for x in (m.camera_R, m.camera_t, m.camera_intrinsics))  # fmt: skip
    return _project(R, t, k, points.astype(np.float64))


def accuracy(
    clip: Motion2D,
    est: Motion2D,
    gt: Motion2D,
    view: int = 0,
    mask: np.ndarray | None = None,
    frames: np.ndarray | None = None,
) -> dict[str, float]:
    """Errors of the estimate ``est`` (a preprocessed clip: cameras + ``est_keypoints3d``)
    against ``gt`` (the unstripped clip: cameras + ``keypoints3d``), view ``view`` of ``gt``.

    Args:
        clip: the input the optimiser saw (its 2D keypoints and mask), one view; its view
            is ``est``'s first.
        mask: ``[T, K]`` the keypoints the optimiser fitted (default: the clip's mask).
        frames: ``[T]`` bool, the frames it fitted (default: all): every error is over these
            (the others were filled in, not fitted); ``mpjpe_all_frames_mm`` covers all.
    """
    T = clip.num_frames
    sel = np.ones(T, bool) if frames is None else np.asarray(frames, bool)
    kset = load_keypoint_set(clip.keypoint_set)
    e3, g3 = est.est_keypoints3d.astype(np.float64), gt.keypoints3d.astype(np.float64)
    Re, te, ke = (
        _per_frame(x[0].astype(np.float64), T)
        for x in (est.camera_R, est.camera_t, est.camera_intrinsics)
    )
    Rg, tg, kg = (
        _per_frame(x[view].astype(np.float64), T)
        for x in (gt.camera_R, gt.camera_t, gt.camera_intrinsics)
    )
    mask = (clip.mask()[0] if mask is None else mask) & sel[:, None]
    uv = _project(Re, te, ke, e3)
    err = np.linalg.norm(uv - np.nan_to_num(clip.keypoints[0]), axis=-1)
    err_gt = np.linalg.norm(uv - _project(Rg, tg, kg, g3), axis=-1)
    A, b = align_ground(e3[sel], g3[sel])
    # world points p_gt = A p_est + b, so the estimated camera in the GT frame is
    # R' = R_est A^T and centre c' = A c_est + b
    Ra = np.einsum("tij,kj->tik", Re, A)
    ce = -np.einsum("tji,tj->ti", Re, te)
    ca = ce @ A.T + b
    cg = -np.einsum("tji,tj->ti", Rg, tg)
    root = list(kset.root)
    re_, rg = e3[:, root].mean(1) @ A.T + b, g3[:, root].mean(1)
    fps = float(clip.fps)
    ve, vg = (np.gradient(x[:, :2], axis=0) * fps for x in (re_, rg))
    ec, gc = _to_camera(Re, te, e3), _to_camera(Rg, tg, g3)
    return {
        "frames": T,
        "reprojection_px": float(err[mask].mean()) if mask.any() else float("nan"),
        "reprojection_gt_px": float(err_gt[sel].mean()),
        "mpjpe_mm": root_aligned_mpjpe(ec[sel], gc[sel], kset.root),
        "mpjpe_all_frames_mm": root_aligned_mpjpe(ec, gc, kset.root),
        "pa_mpjpe_mm": pa_mpjpe(e3[sel], g3[sel]),
        "camera_rotation_deg": float(numpy_rotation_angle(Rg, Ra)[sel].mean()),
        "camera_position_m": float(np.linalg.norm(ca - cg, axis=-1)[sel].mean()),
        "focal_error_pct": float(100.0 * np.abs(ke[:, 0] / kg[:, 0] - 1.0)[sel].mean()),
        "root_trajectory_mm": float(np.linalg.norm(re_ - rg, axis=-1)[sel].mean() * 1000.0),
        "root_velocity_error_m_s": float(np.linalg.norm(ve - vg, axis=-1)[sel].mean()),
    }
