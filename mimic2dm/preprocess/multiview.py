"""Several uncalibrated views of one performance: all cameras and one 3D motion, jointly.

The person is the calibration object. :func:`fit_views`:

1. fits every view alone (:func:`~mimic2dm.preprocess.optimize.fit_clip`: its camera and
   a 3D motion in that view's own gauge, the ground at ``z = 0``);
2. puts each view's camera into view 0's world: the rotation about z and horizontal shift
   that best align its 3D keypoints with view 0's (:func:`~mimic2dm.preprocess.report.align_ground`;
   the ground plane is shared, so heights and the up axis need no alignment). View 0
   thereby defines the azimuth and the horizontal origin, the ground defines up;
3. optimises the 3D motion (from view 0's fit) and every camera (rotation, centre, focal)
   together on the confidence-weighted reprojection error summed over the views, with the
   single-view priors (ground, contacts, smoothness, pose): Levenberg-Marquardt on each
   frame's pose through all cameras, then Adam on cameras and motion, twice. View 0's yaw
   and horizontal position stay fixed (the gauge).

:func:`heldout_errors` projects any 3D keypoints (an estimate from a subset of the views, a
simulated character's) into views that were not used and returns the 2D error per view.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

import numpy as np
import torch

from mimic2dm.characters.base import CharacterSpec
from mimic2dm.geometry import rotations as rot
from mimic2dm.geometry.camera import project_points
from mimic2dm.motion.format import Motion2D
from mimic2dm.preprocess import losses
from mimic2dm.preprocess.kinematics import CharacterModel
from mimic2dm.preprocess.lm import fit_poses
from mimic2dm.preprocess.optimize import (
    FitResult,
    PreprocessConfig,
    _continuous,
    _pairs_ok,
    _Problem,
    expand_frames,
    fit_clip,
)
from mimic2dm.preprocess.report import align_ground, camera_projection, pixel_errors

JOINT_ROUNDS = 2
"""Rounds of (poses by Levenberg-Marquardt through all cameras, then joint Adam)."""


class _Joint(_Problem):
    """One motion (``H = 1``) seen by ``V`` static cameras, each a rotation and centre
    updated from its initial value, and a focal; view 0's yaw and x, y are the gauge."""

    def __init__(self, model, cfg, uv, weight, fps, size, focal0, R0, c0):
        super().__init__(model, cfg, uv, weight, fps, size, focal0)
        V = R0.shape[0]
        self.R0, self.c0 = R0, c0
        self.rot_mask = torch.ones(V, 3)
        self.rot_mask[0, 2] = 0.0  # view 0 keeps its yaw (world z)
        self.pos_mask = torch.ones(V, 3)
        self.pos_mask[0, :2] = 0.0  # and its horizontal position

    def cameras(self):
        """``R [V, 1, 3, 3]``, ``t [V, 1, 3]``, intrinsics ``[V, 1, 4]``."""
        v = self.v
        # (w/2, 1) normalised: smooth at 0, where the exp map's gradient vanishes
        w = v["cam_rot"] * self.rot_mask
        Q = rot.quat_to_matrix(
            rot.quat_normalize(torch.cat([0.5 * w, torch.ones_like(w[:, :1])], -1))
        )
        R = self.R0 @ Q.transpose(-1, -2)  # the camera turned by Q in the world
        c = self.c0 + v["cam_pos"] * self.pos_mask
        t = -(R @ c[..., None])[..., 0]
        f = self.focal0 * torch.exp(v["log_focal"])
        k = torch.stack(
            [f, f, torch.full_like(f, self.width / 2), torch.full_like(f, self.height / 2)], -1
        )
        return R[:, None], t[:, None], k[:, None]

    def loss(self):
        """Total ``[1]`` and weighted terms ``{name: [1]}``: reprojection summed over views."""
        cfg, v = self.cfg, self.v
        kp, contact = self.model.forward(v["root_pos"], v["root_quat"], v["dof_pos"])
        R, t, k = self.cameras()
        uv, _ = project_points(R, t, k, kp)  # [V, T, K, 2]
        rep = losses.robust_reprojection(uv, self.uv, self.weight, self.sigma).sum()
        terms = {"reproj": cfg.w_reproj * rep[None]}
        terms |= self.motion_terms(kp, contact)
        terms["focal"] = cfg.w_focal_prior * v["log_focal"].square().sum()[None]
        return sum(terms.values()), terms

    def camera_groups(self, lr, focal):
        groups = [{"params": [self.v["cam_rot"], self.v["cam_pos"]], "lr": 0.5 * lr}]
        if focal:
            groups.append({"params": [self.v["log_focal"]], "lr": 0.3 * lr})
        return groups

    def project_(self, upright: bool = False) -> None:
        v = self.v
        with torch.no_grad():
            v["dof_pos"].copy_(self.model.clamp(v["dof_pos"]))
            v["root_quat"].div_(v["root_quat"].norm(dim=-1, keepdim=True))
            v["log_focal"].clamp_(-1.0, 1.0)

    def fit_poses(self, iters: int, progress=None, free: bool = False) -> None:
        """Levenberg-Marquardt on every frame's pose through all ``V`` cameras at once."""
        v, cfg = self.v, self.cfg
        T = v["root_pos"].shape[1]
        with torch.no_grad():
            R, t, k = (x[:, 0][None].expand(T, *x[:, 0].shape) for x in self.cameras())
        V, K = self.uv.shape[0], self.uv.shape[2]
        obs = self.uv.permute(1, 0, 2, 3).reshape(T, V * K, 2)
        w = self.weight.permute(1, 0, 2).reshape(T, V * K)
        weights = {"upright": cfg.w_upright, "prior": cfg.w_prior, "ground": cfg.w_ground,
                   "temporal": cfg.w_temporal}  # fmt: skip
        pos, quat, dof = fit_poses(
            self.model, obs, w, (R, t, k), v["root_pos"].detach()[0], v["root_quat"].detach()[0],
            v["dof_pos"].detach()[0], self.sigma, weights, (1, T), iters=iters, progress=progress,
        )  # fmt: skip
        with torch.no_grad():
            v["root_pos"].copy_(pos[None])
            v["root_quat"].copy_(quat[None])
            v["dof_pos"].copy_(dof[None])


def _camera_centre(R: np.ndarray, t: np.ndarray) -> np.ndarray:
    return -np.einsum("...ji,...j->...i", R, t)


def place_cameras(
    fits: list[FitResult], trusted: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each single-view fit's camera in view 0's world: ``R [V, 3, 3]``, centres ``[V, 3]``
    and focals ``[V]``, aligning each fit's 3D keypoints with view 0's (rotation about z and
    horizontal shift) on the frames both views trust (all frames if fewer than 3)."""
    ref = fits[0].keypoints3d.astype(np.float64)
    Rs, cs, fs = [], [], []
    for v, fit in enumerate(fits):
        R, t = fit.camera_R[0].astype(np.float64), fit.camera_t[0].astype(np.float64)
        c = _camera_centre(R, t)
        if v:
            both = trusted[0] & trusted[v]
            sel = both if both.sum() >= 3 else np.ones_like(both)
            A, b = align_ground(fit.keypoints3d[sel].astype(np.float64), ref[sel])
            R, c = R @ A.T, A @ c + b  # world points p0 = A p_v + b
        Rs.append(R), cs.append(c), fs.append(float(fit.camera_intrinsics[0, 0]))
    return np.stack(Rs), np.stack(cs), np.array(fs)


def fit_views(
    spec: CharacterSpec,
    keypoints: np.ndarray,
    confidence: np.ndarray,
    usable: np.ndarray,
    trusted: np.ndarray,
    fps: float,
    image_size: tuple[int, int],
    cfg: PreprocessConfig | None = None,
    progress=None,
) -> FitResult:
    """Estimate ``V`` static cameras and one motion from ``V`` synchronised views (module docstring).

    Args:
        keypoints: ``[V, T, K, 2]`` pixels; confidence, usable: ``[V, T, K]`` (usable: the
            keypoints to fit, e.g. :attr:`mimic2dm.motion.quality.Quality.usable`).
        trusted: ``[V, T]`` frames each view's own fit may use; the joint fit uses every frame
            some view trusts, and fills in the others as :func:`fit_clip` does.
        fps, image_size: of the clip; cfg: settings (``camera`` must be ``"static"``).

    Returns:
        :class:`FitResult` with ``camera_R [V, 1, 3, 3]``, ``camera_t [V, 1, 3]``,
        ``camera_intrinsics [V, 1, 4]``; ``info["view_fits"]``: each view's own fit (its info, without the config).
    """
    cfg = cfg or PreprocessConfig()
    if cfg.camera != "static":
        raise ValueError("several views are fitted with static cameras only (camera='static')")
    t0 = time.perf_counter()
    V, T = keypoints.shape[:2]
    fits = []
    for v in range(V):
        if trusted[v].sum() < 3:
            raise ValueError(
                f"view {v}: {int(trusted[v].sum())} trusted frame(s), at least 3 needed"
            )
        fits.append(fit_clip(spec, keypoints[v], confidence[v], usable[v], fps, image_size, cfg,
                             progress, trusted[v]))  # fmt: skip
    R0, c0, f0 = place_cameras(fits, trusted)
    frames = np.flatnonzero(trusted.any(0))
    focal0 = float(fits[0].info["focal_init"])
    model = CharacterModel(spec)
    uv = torch.as_tensor(np.nan_to_num(keypoints[:, frames]), dtype=torch.float32)
    weight = torch.as_tensor(confidence[:, frames] * usable[:, frames], dtype=torch.float32)
    f32 = lambda x: torch.as_tensor(x, dtype=torch.float32)  # noqa: E731
    prob = _Joint(model, cfg, uv, weight, fps, image_size, focal0, f32(R0), f32(c0))
    prob.pair_ok = _pairs_ok(frames, np.arange(len(frames)))
    f0v = fits[0]
    prob.v = {
        "root_pos": f32(f0v.root_pos[frames])[None].clone(),
        "root_quat": f32(f0v.root_quat[frames])[None].clone(),
        "dof_pos": f32(f0v.dof_pos[frames])[None].clone(),
        "cam_rot": torch.zeros(V, 3),
        "cam_pos": torch.zeros(V, 3),
        "log_focal": f32(np.log(f0 / focal0)),
    }
    for _ in range(JOINT_ROUNDS):
        prob.fit_poses(cfg.lm_iters)
        prob.run(cfg.iters, 0, cfg.refine_focal, lr=cfg.polish_lr)
    info = {
        "view_fits": [{k: x for k, x in f.info.items() if k != "config"} for f in fits],
        "fitted_frames": len(frames),
        "focal_init": focal0,
    }
    return _joint_result(model, prob, frames, T, fps, cfg, info, t0)


def _joint_result(model, prob: _Joint, frames, T, fps, cfg, info, t0) -> FitResult:
    """The joint fit at ``frames`` expanded to all ``T`` frames."""
    with torch.no_grad():
        total, terms = prob.loss()
        v = {n: x.detach() for n, x in prob.v.items()}
        pos = expand_frames(v["root_pos"][0], frames, T)
        q = rot.quat_normalize(_continuous(expand_frames(v["root_quat"][0], frames, T, quat=True)))
        dof = expand_frames(v["dof_pos"][0], frames, T)
        R, t, k = prob.cameras()
        kp, _ = model.forward(pos, q, dof)
        lin, ang, dvel = rot.state_velocities(pos, q, dof, fps)
    info |= {
        "loss": float(total[0]),
        "terms": {n: round(float(x[0]), 5) for n, x in terms.items()},
        "focal": [float(x) for x in k[:, 0, 0]],
        "heading_deg": info["view_fits"][0]["heading_deg"],
        "seconds": time.perf_counter() - t0,
        "config": asdict(cfg),
    }
    npy = lambda x: x.detach().numpy().astype(np.float32)  # noqa: E731
    return FitResult(
        root_pos=npy(pos), root_quat=npy(q), dof_pos=npy(dof), root_lin_vel=npy(lin),
        root_ang_vel=npy(ang), dof_vel=npy(dvel), keypoints3d=npy(kp), camera_R=npy(R),
        camera_t=npy(t), camera_intrinsics=npy(k), info=info,
    )  # fmt: skip


def heldout_errors(
    keypoints3d: np.ndarray,
    reference: Motion2D,
    views: list[int],
    usable: np.ndarray | None = None,
    world_keypoints3d: np.ndarray | None = None,
) -> list[dict[str, Any]]:
    """2D error of 3D keypoints seen through cameras that did not produce them.

    Args:
        keypoints3d: ``[T, K, 3]`` world keypoints at the reference's frames (an estimate
            from other views, a simulated character's keypoints resampled to the clip's fps).
        reference: a clip with cameras for its views and the observed 2D keypoints (e.g. the
            preprocessed clip of all views); its ``est_keypoints3d`` define its world.
        views: indices into ``reference``'s views to score (the held-out ones).
        usable: ``[V, T, K]`` the reference keypoints to score (default: its mask).
        world_keypoints3d: ``[T, K, 3]`` an estimate in the same world as ``keypoints3d``
            (the estimate a tracker was trained on): ``keypoints3d`` is first moved by the
            rotation about z and horizontal shift that align it with ``reference.est_keypoints3d``
            (each estimate fixes its own azimuth and origin). None: already in that world.

    Returns:
        Per view: ``{"view": v, **pixel_errors}`` (mean / median / max px, raw and at 1080p).

    Raises:
        ValueError: a keypoint array does not have the reference's frame count.
    """
    T = reference.num_frames
    for name, x in (("keypoints3d", keypoints3d), ("world_keypoints3d", world_keypoints3d)):
        if x is not None and x.shape[0] != T:
            raise ValueError(f"{name} has {x.shape[0]} frames, expected the reference's {T} "
                             f"(resample it to {reference.fps:g} fps first)")  # fmt: skip
    p = keypoints3d.astype(np.float64)
    if world_keypoints3d is not None:
        A, b = align_ground(
            world_keypoints3d.astype(np.float64), reference.est_keypoints3d.astype(np.float64)
        )
        p = p @ A.T + b
    mask = reference.mask() if usable is None else usable
    h = reference.image_size[1]
    return [
        {
            "view": v,
            **pixel_errors(camera_projection(reference, v, p), reference.keypoints[v], mask[v], h),
        }
        for v in views
    ]
