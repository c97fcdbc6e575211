"""The preprocessing optimiser (B.1): camera and 3D motion of a character from 2D keypoints.

Two stages, batched over frames and hypotheses in torch:

1. hypotheses, on at most ``hypothesis_frames`` evenly spaced frames: for every heading
   (:func:`~mimic2dm.preprocess.camera_init.heading_hypotheses`), Levenberg-Marquardt fits
   each frame's pose through a level camera (:mod:`mimic2dm.preprocess.lm`); the world is
   then levelled on the plane of the feet's lowest points (:meth:`_Problem.level_`, which
   gives the camera's pitch, roll and height); Levenberg-Marquardt again with the upright
   and ground priors, and a short joint Adam run with the full loss. The ``finalists``
   hypotheses with the lowest losses are kept;
2. refinement on every frame, of each finalist: interpolated in time, every
   pose refitted by Levenberg-Marquardt, each limb's depth pattern chosen per frame
   (:mod:`mimic2dm.preprocess.flips`) and the poses refitted from it, then Adam polishes
   camera (focal included when ``refine_focal``) and motion jointly. The finalist with the
   lowest final loss is the result (ranking on a subset of frames alone picked mirrored
   headings on some views).

After each step the joint angles are projected onto the MJCF's limits and the camera
kept in range. The loss is :mod:`mimic2dm.preprocess.losses` weighted by the config.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from mimic2dm.characters.base import CharacterSpec
from mimic2dm.geometry import rotations as rot
from mimic2dm.geometry.camera import project_points
from mimic2dm.motion.keypoint_sets import load_keypoint_set
from mimic2dm.preprocess import camera_init, flips, losses
from mimic2dm.preprocess.kinematics import CharacterModel
from mimic2dm.preprocess.lm import fit_poses

CAMERA_KINDS = ("static", "dynamic")
STANCE_WEIGHTS = {"w_balance": 1.0, "w_flat": 1.0, "w_stance": 1.0}
"""The stance terms' weights that ``mimic2dm preprocess --stance`` turns on."""
LIMB_FLIPS = ("refine", "both", "none")


@dataclass
class PreprocessConfig:
    """Settings of :func:`fit_clip` (defaults used by ``mimic2dm preprocess``).

    Scales: ``sigma_px`` is stated at 1080 px image height and rescaled (docs/design.md section 1).
    """

    camera: str = "static"
    focal: float | None = None  # pixels; None: default_focal(image size)
    refine_focal: bool = True
    headings: int = 8
    hypothesis_frames: int = 40
    # Levenberg-Marquardt iterations on the poses (each stage); 20: all views of the grid in
    # docs/preprocess.md under 80 mm, lower error than 10 on held-out views (15, 30: 3 over 80)
    lm_iters: int = 20
    hypothesis_iters: int = 30  # stage 1: joint Adam before ranking hypotheses
    # stage 2 fits this many of the best hypotheses on every frame and keeps the lowest loss
    finalists: int = 2
    iters: int = 100  # stage 2: joint Adam on every frame
    lr: float = 0.03
    polish_lr: float = 0.005
    sigma_px: float = 5.0
    w_reproj: float = 1.0
    w_ground: float = 0.1
    w_lowest: float = 1.0
    w_skate: float = 0.005
    w_smooth: float = 0.02
    smooth_scale: float = 100.0  # m/s^2
    # the root's horizontal path: monocular depth along the viewing ray is what 2D constrains
    # least, so without this a run's root stalls and jumps; off by default: 0.5 cuts the root
    # velocity error but costs MPJPE on some views (docs/preprocess.md)
    w_root_smooth: float = 0.0
    root_smooth_scale: float = 10.0  # m/s^2
    w_prior: float = 0.005
    w_upright: float = 0.1
    # stance terms (off by default; STANCE_WEIGHTS, `preprocess --stance`): poses a body can
    # hold. The centre of mass over the standing feet (losses.balance, per 0.1 m past a
    # 0.1 m margin): depth along the camera rays is free in 2D, and without it the fitted
    # poses of real clips leaned past their feet and fell when simulated (docs/preprocess.md)
    w_balance: float = 0.0
    balance_margin_m: float = 0.1  # the centre of mass this far from the standing feet is free
    # standing feet flat (losses.flat_feet, per 0.2 rad of tilt): see level_roll's docs
    w_flat: float = 0.0
    # standing feet on the ground (losses.stance_contact, per 2 cm)
    w_stance: float = 0.0
    stance_height_m: float = 0.05  # a foot this close to the ground when labelled stands
    # static cameras: a foot whose keypoint stays still in the image stands (losses.image_stance)
    image_stance: bool = True
    w_temporal: float = 5.0  # Levenberg-Marquardt: joint angles towards their neighbours' mean
    w_limits: float = 10.0
    level_prior_m: float = 0.1  # levelling: feet spread below this defers to the body's up axis
    # levelling keeps the camera's roll at 0 (a level horizon, as in most footage): the feet's
    # plane alone rolled a side-view squat's world by 29 deg; off by default: on the
    # synthetic grid it halves the camera rotation error but loses two hop views (docs/preprocess.md)
    level_roll: bool = False
    w_roll: float = 0.0  # Adam: the camera's roll, per 0.1 rad
    # per-limb depth-flip hypotheses (flips.py): "refine" (stage 2), "both" (also stage 1), "none"
    limb_flips: str = "refine"
    flip_margin: float = 0.01  # limb flips: loss gain per frame a flipped pattern needs
    w_flip_speed: float = 0.01  # limb flips: per (m/s)^2 of a limb point about its pivot
    w_focal_prior: float = 0.1  # on log(f / f0)
    w_camera_motion: float = 0.1  # dynamic cameras: position offsets per metre
    w_camera_smooth: float = (
        0.05  # dynamic cameras: angular (rad/s^2 / 5) and linear (m/s^2 / 2) accelerations
    )
    seed: int = 0

    def __post_init__(self) -> None:
        if self.camera not in CAMERA_KINDS:
            raise ValueError(f"camera {self.camera!r} is not one of {', '.join(CAMERA_KINDS)}")
        if self.limb_flips not in LIMB_FLIPS:
            raise ValueError(
                f"limb_flips {self.limb_flips!r} is not one of {', '.join(LIMB_FLIPS)}"
            )
        if self.focal is not None and not (math.isfinite(self.focal) and self.focal > 0):
            raise ValueError(f"focal must be a finite number of pixels > 0, got {self.focal}")
        if (
            self.headings < 1
            or self.finalists < 1
            or self.iters < 0
            or self.hypothesis_iters < 0
            or self.hypothesis_frames < 2
        ):
            raise ValueError(
                "headings >= 1, finalists >= 1, iters >= 0, hypothesis_iters >= 0, hypothesis_frames >= 2 required"
            )


@dataclass
class FitResult:
    """Output of :func:`fit_clip` for a clip of ``T`` frames (float32 numpy).

    Attributes:
        root_pos ``[T, 3]``, root_quat ``[T, 4]`` xyzw, dof_pos ``[T, J]`` (canonical DoF order);
        root_lin_vel ``[T, 3]``, root_ang_vel ``[T, 3]`` (world frame), dof_vel ``[T, J]``;
        keypoints3d ``[T, K, 3]`` estimated world keypoints;
        camera_R ``[F, 3, 3]``, camera_t ``[F, 3]``, camera_intrinsics ``[F, 4]`` (F = 1 static, T dynamic);
        info: hypothesis losses, chosen heading, final loss terms, timings.
    """

    root_pos: np.ndarray
    root_quat: np.ndarray
    dof_pos: np.ndarray
    root_lin_vel: np.ndarray
    root_ang_vel: np.ndarray
    dof_vel: np.ndarray
    keypoints3d: np.ndarray
    camera_R: np.ndarray
    camera_t: np.ndarray
    camera_intrinsics: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)


class _Problem:
    """Variables ``[H, T, ...]`` of one optimisation stage and its loss."""

    def __init__(self, model: CharacterModel, cfg: PreprocessConfig, uv, weight, fps, size, focal0):
        self.model, self.cfg = model, cfg
        self.uv, self.weight, self.fps = uv, weight, fps
        self.width, self.height = size
        self.focal0 = focal0
        self.sigma = cfg.sigma_px * self.height / 1080.0
        self.v: dict[str, torch.Tensor] = {}
        # [T - 1] bool: consecutive frames adjacent in time (False across cut-out frames)
        self.pair_ok: torch.Tensor | None = None
        # [H, T, G] how much each contact body stands, fixed while a stage runs
        # (:meth:`label_stance_`); None: the stance terms are off
        self.stance: torch.Tensor | None = None
        # [T, G] feet whose keypoint stands still in the image (losses.image_stance), or None
        self.still: torch.Tensor | None = None

    # ---------------------------------------------------------------- camera
    def cameras(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``R [H, F, 3, 3]``, ``t [H, F, 3]``, intrinsics ``[H, F, 4]``."""
        v = self.v
        pitch, roll, yaw = v["pitch"][:, None], v["roll"][:, None], None
        centre = torch.stack(
            [torch.zeros_like(v["height"]), torch.zeros_like(v["height"]), v["height"]], -1
        )[:, None]
        if self.cfg.camera == "dynamic":
            pitch, roll, yaw = pitch + v["d_pitch"], roll + v["d_roll"], v["d_yaw"]
            centre = centre + v["d_pos"]
        R = camera_init.camera_rotation(pitch, roll, yaw)
        t = -(R @ centre[..., None])[..., 0]
        f = self.focal0 * torch.exp(v["log_focal"])[:, None]
        k = torch.stack(
            [f, f, torch.full_like(f, self.width / 2), torch.full_like(f, self.height / 2)], -1
        )
        return R, t, k

    # ---------------------------------------------------------------- loss
    def loss(self) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Total loss ``[H]`` and its weighted terms ``{name: [H]}``."""
        cfg, v = self.cfg, self.v
        kp, contact = self.model.forward(v["root_pos"], v["root_quat"], v["dof_pos"])
        R, t, k = self.cameras()
        uv, _ = project_points(R, t, k, kp)
        terms = {
            "reproj": cfg.w_reproj
            * losses.robust_reprojection(uv, self.uv, self.weight, self.sigma)
        }
        terms |= self.motion_terms(kp, contact)
        terms["focal"] = cfg.w_focal_prior * v["log_focal"].square()
        if cfg.w_roll:
            terms["roll"] = cfg.w_roll * (v["roll"] / 0.1).square()
        if cfg.camera == "dynamic":
            ang = torch.stack([v["d_yaw"], v["d_pitch"], v["d_roll"]], -1)
            ok = self.pair_ok
            terms["camera"] = (
                cfg.w_camera_motion * v["d_pos"].square().sum(-1).mean(-1)
                + cfg.w_camera_smooth
                * (
                    losses.smoothness(ang, self.fps, 5.0, ok)
                    + losses.smoothness(v["d_pos"], self.fps, 2.0, ok)
                )
                + 10.0 * (ang[:, 0].square().sum(-1) + v["d_pos"][:, 0].square().sum(-1))
            )
        return sum(terms.values()), terms

    def motion_terms(self, kp: torch.Tensor, contact: torch.Tensor) -> dict[str, torch.Tensor]:
        """The weighted terms ``{name: [H]}`` that need no camera: ground, contacts, smoothness,
        pose priors (``kp [H, T, K, 3]``, ``contact [H, T, C, 3]`` of the current motion)."""
        cfg, v, m, ok = self.cfg, self.v, self.model, self.pair_ok
        cz = contact[..., 2] - m.contact_radius
        q = v["root_quat"] / v["root_quat"].norm(dim=-1, keepdim=True)
        up_z = 1.0 - 2.0 * (q[..., 0].square() + q[..., 1].square())
        return {
            "ground": cfg.w_ground * losses.ground_penetration(kp[..., 2], cz),
            "lowest": cfg.w_lowest * losses.lowest_contact(cz),
            "skate": cfg.w_skate
            * losses.foot_skate(contact, m.contact_radius, self.fps, pair_ok=ok),
            "smooth": cfg.w_smooth * losses.smoothness(kp, self.fps, cfg.smooth_scale, ok),
            "root_smooth": cfg.w_root_smooth
            * losses.smoothness(v["root_pos"][..., :2], self.fps, cfg.root_smooth_scale, ok),
            "prior": cfg.w_prior * losses.pose_prior(v["dof_pos"]),
            "upright": cfg.w_upright * losses.upright(up_z),
            "limits": cfg.w_limits * losses.joint_limits(v["dof_pos"], m.lower, m.upper),
        } | self.stance_terms(cz, contact)

    def label_stance_(self) -> None:
        """Fix which feet stand in each frame for the stance terms that follow: those near
        the ground in the current motion (:func:`losses.standing_weights`, ``stance_height_m``)
        and those still in the image (:attr:`still`). Fixed, because weights recomputed as the
        fit moves let it escape the terms by lifting the feet."""
        m, v, cfg = self.model, self.v, self.cfg
        if not (cfg.w_balance or cfg.w_flat or cfg.w_stance):
            return
        with torch.no_grad():
            _, contact = m.forward(v["root_pos"], v["root_quat"], v["dof_pos"])
            cz = contact[..., 2] - m.contact_radius
            self.stance = losses.standing_weights(cz, m.contact_group, self.cfg.stance_height_m)
            if self.still is not None:  # a foot still in the image stands, however high
                self.stance = torch.maximum(self.stance, self.still.to(self.stance))

    def stance_terms(self, cz: torch.Tensor, contact: torch.Tensor) -> dict[str, torch.Tensor]:
        """The weighted ``balance``, ``flat`` and ``stance`` terms ``{name: [H]}``
        (:func:`losses.balance`, :func:`losses.flat_feet`, :func:`losses.stance_contact`) of
        the labelled stance; zeros before :meth:`label_stance_` or when off."""
        cfg, v, m = self.cfg, self.v, self.model
        zero = torch.zeros(cz.shape[0], dtype=cz.dtype)
        out = {"balance": zero, "flat": zero, "stance": zero}
        if self.stance is None:
            return out
        stance = self.stance
        pos, rot = m.bodies(v["root_pos"], v["root_quat"], v["dof_pos"])
        if cfg.w_balance:
            com = m.com_of(m.body_coms(pos, rot))
            out["balance"] = cfg.w_balance * losses.balance(
                com[..., :2], contact, cz, m.contact_group, cfg.balance_margin_m, stance=stance
            )
        if cfg.w_flat and len(m.flat_feet):
            up_xy = rot[..., m.flat_feet, :2, 2]  # the feet's z axes, horizontal part
            out["flat"] = cfg.w_flat * losses.flat_feet(up_xy, stance[..., m.flat_group])
        if cfg.w_stance:
            out["stance"] = cfg.w_stance * losses.stance_contact(cz, m.contact_group, stance)
        return out

    def project_(self, upright: bool = False) -> None:
        """Keep the variables feasible (after an optimiser step); ``upright``: turn the
        root about the vertical only, so that the camera's pitch and roll explain the view."""
        v = self.v
        with torch.no_grad():
            v["dof_pos"].copy_(self.model.clamp(v["dof_pos"]))
            v["root_quat"].div_(v["root_quat"].norm(dim=-1, keepdim=True))
            if upright:
                v["root_quat"].copy_(rot.heading_quat(v["root_quat"]))
            v["pitch"].clamp_(-1.4, 1.4)
            v["height"].clamp_(min=0.05)
            v["log_focal"].clamp_(-1.0, 1.0)

    # ---------------------------------------------------------------- loop
    def run(
        self, iters: int, rigid: int, focal: bool, progress=None, lr: float | None = None
    ) -> torch.Tensor:
        """Adam for ``iters`` steps (joint angles frozen for the first ``rigid``); final loss ``[H]``."""
        lr = lr or self.cfg.lr
        groups = [
            {"params": [self.v["root_pos"]], "lr": lr},
            {"params": [self.v["root_quat"]], "lr": lr},
            {"params": [self.v["dof_pos"]], "lr": 2 * lr},
        ] + self.camera_groups(lr, focal)
        for g in groups:
            for p in g["params"]:
                p.requires_grad_(True)
        opt = torch.optim.Adam(groups)
        base = [g["lr"] for g in groups]
        for i in range(iters):
            decay = 0.5 * (1 + math.cos(math.pi * i / max(iters, 1)))  # cosine to 0.05 of the rate
            for g, b in zip(opt.param_groups, base, strict=True):
                g["lr"] = b * (0.05 + 0.95 * decay)
            opt.zero_grad(set_to_none=True)
            total, _ = self.loss()
            total.sum().backward()
            if i < rigid:
                self.v["dof_pos"].grad = None
            opt.step()
            self.project_(upright=i < rigid)
            if progress is not None:
                progress()
        with torch.no_grad():
            total, _ = self.loss()
        return total

    def camera_groups(self, lr: float, focal: bool) -> list[dict[str, Any]]:
        """Adam parameter groups of the camera variables (learning rate ``lr``)."""
        groups = [{"params": [self.v["height"], self.v["pitch"], self.v["roll"]], "lr": 0.5 * lr}]
        if focal:
            groups.append({"params": [self.v["log_focal"]], "lr": 0.3 * lr})
        if self.cfg.camera == "dynamic":
            names = ("d_yaw", "d_pitch", "d_roll", "d_pos")
            groups.append({"params": [self.v[n] for n in names], "lr": 0.5 * lr})
        return groups

    def fit_poses(self, iters: int, progress=None, free: bool = False) -> None:
        """Levenberg-Marquardt on every frame's pose through the current cameras;
        ``free``: without the upright prior and the ground (the camera is not levelled yet)."""
        v, cfg = self.v, self.cfg
        H, T = v["root_pos"].shape[:2]
        with torch.no_grad():
            R, t, k = (
                x.expand(H, T, *x.shape[2:]).reshape(H * T, *x.shape[2:]) for x in self.cameras()
            )
        weights = {
            "upright": cfg.w_upright,
            "prior": cfg.w_prior,
            "ground": cfg.w_ground,
            "temporal": cfg.w_temporal,
        }
        if free:
            weights |= {"upright": 0.0, "ground": 0.0}
        stance = None
        if not free and self.stance is not None:
            weights |= {"balance": cfg.w_balance, "flat": cfg.w_flat, "stance": cfg.w_stance,
                        "balance_margin": cfg.balance_margin_m}  # fmt: skip
            stance = self.stance.reshape(H * T, -1)
        obs, w = (
            self.uv.expand(H, *self.uv.shape).reshape(H * T, -1, 2),
            self.weight.expand(H, *self.weight.shape).reshape(H * T, -1),
        )
        pos, quat, dof = fit_poses(
            self.model, obs, w, (R, t, k), v["root_pos"].detach().reshape(H * T, 3),
            v["root_quat"].detach().reshape(H * T, 4), v["dof_pos"].detach().reshape(H * T, -1),
            self.sigma, weights, (H, T), iters=iters, progress=progress, stance=stance,
        )  # fmt: skip
        with torch.no_grad():
            v["root_pos"].copy_(pos.reshape(H, T, 3))
            v["root_quat"].copy_(quat.reshape(H, T, 4))
            v["dof_pos"].copy_(dof.reshape(H, T, -1))

    def flip_limbs_(self, progress=None) -> dict[str, int]:
        """Per-limb depth-flip hypotheses (:func:`~mimic2dm.preprocess.flips.flip_limbs`),
        then Levenberg-Marquardt again from the chosen patterns."""
        cfg = self.cfg
        with torch.no_grad():
            changed = flips.flip_limbs(
                self.model, self.v, self.cameras(), self.uv, self.weight, self.sigma, self.fps,
                {"reproj": cfg.w_reproj, "ground": cfg.w_ground, "lowest": cfg.w_lowest,
                 "prior": cfg.w_prior, "skate": cfg.w_skate, "speed": cfg.w_flip_speed,
                 "balance": cfg.w_balance, "balance_margin": cfg.balance_margin_m,
                 "margin": cfg.flip_margin},
                flips.limb_chains(self.model),
            )  # fmt: skip
        self.fit_poses(self.cfg.lm_iters, progress)
        return changed

    def _ground_normal(self, body_up: torch.Tensor, prior_m: float = 0.1) -> torch.Tensor:
        """``[H, 3]`` unit normal of the plane through each frame's lowest contact point
        (where the feet touch the ground), regularised towards ``body_up [H, 3]`` (the root's
        mean up axis) in the directions the points do not span (``prior_m`` metres of spread)."""
        m, v = self.model, self.v
        _, contact = m.forward(v["root_pos"], v["root_quat"], v["dof_pos"])
        low = (contact[..., 2] - m.contact_radius).argmin(-1)  # [H, T]
        pts = torch.gather(contact, 2, low[..., None, None].expand(*low.shape, 1, 3))[:, :, 0]
        d = pts - pts.mean(1, keepdim=True)
        cov = d.transpose(1, 2) @ d / d.shape[1]
        eye = torch.eye(3).expand_as(cov)
        cov = cov + prior_m**2 * (eye - body_up[:, :, None] * body_up[:, None, :])
        n = torch.linalg.eigh(cov).eigenvectors[..., 0]
        return n * torch.sign((n * body_up).sum(-1, keepdim=True))

    def level_(self) -> None:
        """Gravity from the ground: turn the world (camera and motion, about the camera
        centre) so that the plane of the feet's lowest points (:meth:`_ground_normal`) is
        horizontal, take the camera's pitch and roll from the result, then put the ground
        under the feet (a low quantile of each frame's lowest contact). Per hypothesis."""
        v, m = self.v, self.model
        with torch.no_grad():
            H = v["root_pos"].shape[0]
            q = rot.quat_normalize(v["root_quat"])
            body_up = rot.quat_rotate(
                q, torch.tensor([0.0, 0.0, 1.0]).expand(q.shape[:-1] + (3,))
            ).mean(1)
            up = self._ground_normal(
                body_up / body_up.norm(dim=-1, keepdim=True), self.cfg.level_prior_m
            )
            R = self.cameras()[0][:, 0]
            if self.cfg.level_roll:
                # the up closest to the ground's normal that leaves the camera's x axis level
                x_cam = R[:, 0]
                up = up - (up * x_cam).sum(-1, keepdim=True) * x_cam
                up = up / up.norm(dim=-1, keepdim=True)
            z = torch.tensor([0.0, 0.0, 1.0]).expand(H, 3)
            axis = torch.cross(up, z, dim=-1)
            angle = torch.atan2(axis.norm(dim=-1), (up * z).sum(-1))
            Q = rot.quat_from_axis_angle(
                axis / axis.norm(dim=-1, keepdim=True).clamp_min(1e-9), angle
            )
            fwd = (R @ rot.quat_to_matrix(Q).transpose(-1, -2))[:, 2]
            Qt = rot.quat_mul(
                rot.quat_from_axis_angle(z, -torch.atan2(fwd[:, 1], fwd[:, 0])), Q
            )  # camera yaw 0
            c = torch.stack([torch.zeros(H), torch.zeros(H), v["height"]], -1)[:, None]
            v["root_pos"].copy_(rot.quat_rotate(Qt[:, None], v["root_pos"] - c) + c)
            v["root_quat"].copy_(rot.quat_mul(Qt[:, None].expand_as(q), q))
            Rn = R @ rot.quat_to_matrix(Qt).transpose(-1, -2)
            fwd, right = Rn[:, 2], Rn[:, 0]
            pitch = -torch.asin(fwd[:, 2].clamp(-1, 1))
            right0 = torch.stack([torch.zeros(H), -torch.ones(H), torch.zeros(H)], -1)
            down0 = torch.stack([-torch.sin(pitch), torch.zeros(H), -torch.cos(pitch)], -1)
            v["pitch"].copy_(pitch)
            v["roll"].copy_(torch.atan2((right * down0).sum(-1), (right * right0).sum(-1)))
            _, contact = m.forward(v["root_pos"], v["root_quat"], v["dof_pos"])
            low = (contact[..., 2] - m.contact_radius).min(-1).values  # [H, T]
            shift = torch.quantile(low, 0.2, dim=1)
            v["root_pos"][..., 2] -= shift[:, None]
            v["height"].sub_(shift)


def foot_keypoints(spec: CharacterSpec) -> list[int]:
    """Per contact body, the keypoint on it farthest from its origin (the ankle, the paw),
    or -1 when none is."""
    out = []
    for body in spec.contact_bodies:
        on = [
            (float(np.linalg.norm(off)), k)
            for k, (b, off) in enumerate(spec.site_offsets)
            if b == body
        ]
        out.append(max(on)[1] if on else -1)
    return out


def _interp(x: torch.Tensor, src: np.ndarray, T: int) -> torch.Tensor:
    """Linear interpolation of ``x [S, ...]`` known at frames ``src [S]`` to ``[T, ...]``."""
    flat = x.detach().reshape(x.shape[0], -1).numpy()
    out = np.stack([np.interp(np.arange(T), src, flat[:, j]) for j in range(flat.shape[1])], -1)
    return torch.as_tensor(out, dtype=x.dtype).reshape(T, *x.shape[1:])


def _continuous(q: torch.Tensor) -> torch.Tensor:
    """Flip quaternion signs ``[T, 4]`` so that consecutive ones have a positive dot product."""
    q = q.clone()
    for i in range(1, q.shape[0]):
        if (q[i] * q[i - 1]).sum() < 0:
            q[i] = -q[i]
    return q


def _init_variables(model, spec, kset, uv, mask, fps, size, focal0, cfg, headings):
    """Initial variables ``[H, T, ...]`` for each heading in ``headings [H]``."""
    T = uv.shape[0]
    pose = spec.default_pose
    p0 = torch.tensor(pose.root_pos, dtype=torch.float32)
    q_id = torch.tensor([0.0, 0.0, 0.0, 1.0])
    dof0 = torch.tensor(pose.dof_pos, dtype=torch.float32)
    rest, _ = model.forward(torch.zeros(3), q_id, dof0)
    rk0 = rest[list(kset.root)].mean(0)  # root keypoint of the rest pose, root body at origin
    k0 = torch.tensor([focal0, focal0, size[0] / 2, size[1] / 2])
    depth = camera_init.initial_depths(uv, mask, kset, rest, focal0, fps, cfg.camera == "static")
    root_kp, height = camera_init.initial_root_path(
        uv, mask, kset, depth, k0, float(rk0[2] + p0[2])
    )
    H = headings.shape[0]
    z = torch.tensor([0.0, 0.0, 1.0])
    q = rot.quat_from_axis_angle(z.expand(H, 3), headings)  # [H, 4]
    off = rot.quat_rotate(q, -rk0.expand(H, 3))  # root keypoint -> root body
    off[:, 2] = -rk0[2]
    v = {
        "root_pos": (root_kp[None] + off[:, None]).clone(),
        "root_quat": q[:, None].expand(H, T, 4).clone(),
        "dof_pos": dof0.expand(H, T, -1).clone(),
        "height": torch.full((H,), height),
        "pitch": torch.zeros(H),
        "roll": torch.zeros(H),
        "log_focal": torch.zeros(H),
    }
    if cfg.camera == "dynamic":
        v |= {n: torch.zeros(H, T) for n in ("d_yaw", "d_pitch", "d_roll")} | {
            "d_pos": torch.zeros(H, T, 3)
        }
    return v


def _pairs_ok(frames: np.ndarray, idx: np.ndarray) -> torch.Tensor:
    """``[len(idx) - 1]``: whether each step between the fitted frames ``frames[idx]`` spans no
    cut-out frame (``frames``: the fitted frames' indices in the clip, sorted)."""
    cuts = np.concatenate([[0], np.cumsum(np.diff(frames) > 1)])
    return torch.as_tensor(cuts[idx[1:]] == cuts[idx[:-1]])


def expand_frames(x: torch.Tensor, frames: np.ndarray, T: int, quat: bool = False) -> torch.Tensor:
    """Per-frame variables ``x [S, ...]`` known at frames ``frames [S]`` to all ``T`` frames:
    linear interpolation between fitted frames, the first / last held before / after them
    (quaternions ``[S, 4]``: sign-continuous, interpolated and normalised)."""
    if len(frames) == T:
        return x
    if quat:
        return rot.quat_normalize(_interp(_continuous(x), frames, T))
    return _interp(x, frames, T)


def fit_clip(
    spec: CharacterSpec,
    keypoints: np.ndarray,
    confidence: np.ndarray,
    mask: np.ndarray,
    fps: float,
    image_size: tuple[int, int],
    cfg: PreprocessConfig | None = None,
    progress=None,
    trusted: np.ndarray | None = None,
) -> FitResult:
    """Estimate the camera and the character's motion from one view of 2D keypoints.

    Args:
        spec: the character (its keypoint set must be the clip's).
        keypoints: ``[T, K, 2]`` pixels (NaN allowed where masked); confidence, mask: ``[T, K]``.
        fps: frame rate; image_size: ``(width, height)``.
        cfg: settings; progress: callable ``(advance, total)`` or None.
        trusted: ``[T]`` bool, the frames to fit (None: all; at least 3). The others are
            filled in: joint angles, root and dynamic-camera offsets interpolated linearly
            between fitted frames and held before the first / after the last one.

    Returns:
        :class:`FitResult` for all ``T`` frames; ``info["fitted_frames"]``: how many were fitted.
    """
    cfg = cfg or PreprocessConfig()
    t0 = time.perf_counter()
    torch.manual_seed(cfg.seed)
    model = CharacterModel(spec)
    T = keypoints.shape[0]
    frames = np.arange(T) if trusted is None else np.flatnonzero(trusted)
    if len(frames) < 3:
        raise ValueError(f"{len(frames)} trusted frame(s), at least 3 needed to fit")
    mask_t = torch.as_tensor(mask[frames], dtype=torch.bool)
    uv = torch.as_tensor(np.nan_to_num(keypoints[frames]), dtype=torch.float32)
    weight = torch.as_tensor(confidence[frames], dtype=torch.float32) * mask_t
    focal0 = cfg.focal or camera_init.default_focal(*image_size)
    info: dict[str, Any] = {"focal_init": focal0, "fitted_frames": len(frames)}
    prob, keep = _fit_stages(model, spec, uv, weight, mask_t, frames, fps, image_size, focal0,
                             cfg, info, progress)  # fmt: skip
    return _result(model, prob, keep, frames, T, fps, cfg, info, t0)


def _fit_stages(model, spec, uv, weight, mask_t, frames, fps, size, focal0, cfg, info, progress):
    """Both stages on the fitted frames; returns the stage-2 problem and its finalists' indices."""
    t0 = time.perf_counter()
    kset = load_keypoint_set(spec.keypoint_set)
    T = uv.shape[0]
    headings = camera_init.heading_hypotheses(cfg.headings)
    S = min(T, cfg.hypothesis_frames)
    sub = np.unique(np.round(np.linspace(0, T - 1, S)).astype(int))
    total_iters = cfg.hypothesis_iters + cfg.iters + cfg.lm_iters * (2 + int(len(sub) < T))
    total_iters += cfg.lm_iters * {"both": 2, "refine": 1}.get(cfg.limb_flips, 0)
    tick = (lambda: progress(1, total_iters)) if progress else None
    v_all = _init_variables(model, spec, kset, uv, mask_t, fps, size, focal0, cfg, headings)
    still = None
    stance_on = cfg.w_balance or cfg.w_flat or cfg.w_stance
    if stance_on and cfg.image_stance and cfg.camera == "static":
        still = losses.image_stance(uv, mask_t, foot_keypoints(spec), fps)
        info["still_feet_fraction"] = round(float(still.mean()), 3)
    info["headings_deg"] = [round(math.degrees(h) % 360, 1) for h in headings]
    # stage 1: every hypothesis on a subset of frames: poses, levelling, poses, joint polish
    sub_fps = fps * (len(sub) - 1) / max(T - 1, 1)
    prob = _Problem(model, cfg, uv[sub], weight[sub], sub_fps, size, focal0)
    prob.pair_ok = _pairs_ok(frames, sub)
    prob.still = None if still is None else still[sub]
    prob.v = {
        n: (x[:, sub] if x.ndim >= 2 and x.shape[1] == T else x).clone() for n, x in v_all.items()
    }
    prob.fit_poses(cfg.lm_iters, tick, free=True)
    prob.level_()
    prob.label_stance_()
    prob.fit_poses(cfg.lm_iters, tick)
    if cfg.limb_flips == "both":
        info["flipped_frames_hypotheses"] = prob.flip_limbs_(tick)
    hypothesis_loss = prob.run(cfg.hypothesis_iters, 0, False, tick)
    info["seconds_hypotheses"] = time.perf_counter() - t0
    info["hypothesis_loss"] = [round(float(x), 4) for x in hypothesis_loss]
    keep = torch.argsort(hypothesis_loss)[: max(1, min(cfg.finalists, len(hypothesis_loss)))]
    v_all = {}
    for n, x in prob.v.items():  # the best hypotheses, interpolated to every frame
        x = x.detach()[keep]
        if x.ndim >= 2 and x.shape[1] == len(sub):
            if n == "root_quat":
                x = torch.stack([_continuous(h) for h in x])
            x = torch.stack([_interp(h, sub, T) for h in x])
        v_all[n] = x.clone()
    # stage 2: every frame: poses through the chosen camera, then everything jointly
    prob = _Problem(model, cfg, uv, weight, fps, size, focal0)
    prob.pair_ok = _pairs_ok(frames, np.arange(T))
    prob.still = still
    prob.v = v_all
    prob.label_stance_()
    if len(sub) < T:
        prob.fit_poses(cfg.lm_iters, tick)
    if cfg.limb_flips in ("both", "refine"):
        info["flipped_frames"] = prob.flip_limbs_(tick)
    info["seconds_lm"] = time.perf_counter() - t0 - info["seconds_hypotheses"]
    prob.run(cfg.iters, 0, cfg.refine_focal, tick, lr=cfg.polish_lr)
    return prob, keep


def _result(model, prob, keep, frames, T, fps, cfg, info, t0) -> FitResult:
    """The best finalist of ``prob`` (fitted at ``frames``) expanded to all ``T`` frames."""
    with torch.no_grad():
        total, terms = prob.loss()
        best = int(torch.argmin(total))  # among the finalists, on every frame
        info["finalist_headings_deg"] = [info["headings_deg"][int(i)] for i in keep]
        info["finalist_loss"] = [round(float(x), 4) for x in total]
        info["heading_deg"] = info["headings_deg"][int(keep[best])]
        S = len(frames)
        v = {n: x.detach()[best : best + 1] for n, x in prob.v.items()}
        for n, x in v.items():
            if x.ndim >= 2 and x.shape[1] == S:
                v[n] = expand_frames(x[0], frames, T, quat=n == "root_quat")[None]
        prob.v = v
        R, t, k = (x[0] for x in prob.cameras())
        v = {n: x[0] for n, x in v.items()}
        q = rot.quat_normalize(_continuous(v["root_quat"]))
        kp, _ = model.forward(v["root_pos"], q, v["dof_pos"])
        lin, ang, dvel = rot.state_velocities(v["root_pos"], q, v["dof_pos"], fps)
    info |= {
        "loss": float(total[best]),
        "terms": {n: round(float(x[best]), 5) for n, x in terms.items()},
        "focal": float(k[0, 0]),
        "seconds": time.perf_counter() - t0,
        "config": asdict(cfg),
    }
    npy = lambda x: x.detach().numpy().astype(np.float32)  # noqa: E731
    return FitResult(
        root_pos=npy(v["root_pos"]), root_quat=npy(q), dof_pos=npy(v["dof_pos"]),
        root_lin_vel=npy(lin), root_ang_vel=npy(ang), dof_vel=npy(dvel), keypoints3d=npy(kp),
        camera_R=npy(R), camera_t=npy(t), camera_intrinsics=npy(k), info=info,
    )  # fmt: skip
