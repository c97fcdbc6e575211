"""Rewards and terminations of the 3D tracker (DeepMimic / PHC style) as pure tensor functions.

Every term is ``exp(-alpha * error)`` in [0, 1]; the terms are combined with
:func:`mimic2dm.tasks.common.terms.combine` (the scales re-normalised).
"""

from __future__ import annotations

import torch
from mimic2dm.tasks.tracking3d.config import Reward3DConfig

from mimic2dm.motion.keypoint_sets import KeypointSet


def body_frame(kp: torch.Tensor, kset: KeypointSet) -> torch.Tensor:
    """An orthonormal body frame ``[..., 3, 3]`` (columns: forward, left, up) from keypoints
    ``[..., K, 3]``, so that a reference with keypoints only has a root orientation.

    Humans: left = left hip - right hip, up = shoulders - hips. Dogs: forward = neck - root
    of the tail, left = left - right hips and shoulders.
    """
    if kset.name == "coco17":
        i = kset.index
        hip_l, hip_r = kp[..., i("left_hip"), :], kp[..., i("right_hip"), :]
        sh = (kp[..., i("left_shoulder"), :] + kp[..., i("right_shoulder"), :]) / 2
        left, up = hip_l - hip_r, sh - (hip_l + hip_r) / 2
        fwd = torch.cross(left, up, dim=-1)
    else:
        i = kset.index
        fwd = kp[..., i("neck"), :] - kp[..., i("root_of_tail"), :]
        left = (kp[..., i("left_hip"), :] + kp[..., i("left_shoulder"), :]
                - kp[..., i("right_hip"), :] - kp[..., i("right_shoulder"), :])  # fmt: skip
    f = fwd / fwd.norm(dim=-1, keepdim=True).clamp_min(1e-9)
    u = torch.cross(f, left, dim=-1)
    u = u / u.norm(dim=-1, keepdim=True).clamp_min(1e-9)
    return torch.stack([f, torch.cross(u, f, dim=-1), u], dim=-1)


def frame_angle(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Angle (rad) of the rotation between frames ``a, b [..., 3, 3]`` -> ``[...]``."""
    tr = (a.transpose(-1, -2) @ b).diagonal(dim1=-2, dim2=-1).sum(-1)
    return torch.acos(((tr - 1) / 2).clamp(-1.0, 1.0))


def keypoint_error(sim: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Mean keypoint distance (m) of ``[..., K, 3]`` positions -> ``[...]``."""
    return (sim - ref).norm(dim=-1).mean(-1)


def reward_terms_3d(
    sim_kp: torch.Tensor,
    ref_kp: torch.Tensor,
    prev_sim_kp: torch.Tensor,
    prev_ref_kp: torch.Tensor,
    action: torch.Tensor,
    prev_action: torch.Tensor,
    kset: KeypointSet,
    cfg: Reward3DConfig,
    control_hz: float,
) -> dict[str, torch.Tensor]:
    """Named reward terms, each ``[N]`` in [0, 1].

    Args:
        sim_kp, ref_kp: ``[N, K, 3]`` world keypoints of the character and the reference.
        prev_sim_kp, prev_ref_kp: the same one control step earlier (velocities).
        action, prev_action: ``[N, J]`` normalised actions (regulariser).
        kset: the keypoint set (root keypoints, body frame).
        control_hz: steps per second (velocities in m/s).

    Returns:
        ``{"pos", "vel", "root", "rot", "reg"}``.
    """
    root = list(kset.root)
    e_pos = ((sim_kp - ref_kp) ** 2).sum(-1).mean(-1)
    v_sim, v_ref = (sim_kp - prev_sim_kp) * control_hz, (ref_kp - prev_ref_kp) * control_hz
    e_vel = ((v_sim - v_ref) ** 2).sum(-1).mean(-1)
    e_root = ((sim_kp[:, root].mean(1) - ref_kp[:, root].mean(1)) ** 2).sum(-1)
    e_rot = frame_angle(body_frame(sim_kp, kset), body_frame(ref_kp, kset)) ** 2
    e_reg = ((action - prev_action) ** 2).mean(-1)
    return {
        "pos": torch.exp(-cfg.alpha_pos * e_pos),
        "vel": torch.exp(-cfg.alpha_vel * e_vel),
        "root": torch.exp(-cfg.alpha_root * e_root),
        "rot": torch.exp(-cfg.alpha_rot * e_rot),
        "reg": torch.exp(-cfg.alpha_reg * e_reg),
    }


def error_exceeded(sim_kp: torch.Tensor, ref_kp: torch.Tensor, bound: float) -> torch.Tensor:
    """``[N]`` True where the mean 3D keypoint error exceeds ``bound`` metres."""
    return keypoint_error(sim_kp, ref_kp) > bound
