"""RSMT evaluation metrics (paper sec. 5.1) on frame features ``[..., T, 180]``.

A frame holds global joint positions ``[0:45]`` (15x3, metres, z-up), joint velocities
``[45:90]`` (m/s) and global joint rotations ``[90:180]`` (15x6D, the first two columns of
the rotation matrix). Every metric accepts leading batch dimensions and returns a Python
float averaged over them, except :func:`foot_contact_prob`, which is elementwise.
"""

from __future__ import annotations

import numpy as np
import torch
from mimic2dm.generators.rsmt.features import FEET, FPS, POS, ROT, VEL, D, J, positions, rotations6d

__all__ = [
    "D", "FEET", "FPS", "J", "POS", "ROT", "VEL",
    "positions", "rotations6d", "l2_global_positions", "mean_joint_error", "last_frame_error",
    "npss", "foot_skating", "foot_contact_prob", "diversity", "joint_speeds",
    "joint_speed_percentile", "speed_within",
]  # fmt: skip


def _check_frames(x: torch.Tensor, name: str = "x", min_frames: int = 1) -> None:
    if x.ndim < 2 or x.shape[-1] != D or x.shape[-2] < min_frames:
        raise ValueError(f"{name}: expected [..., T >= {min_frames}, {D}], got {list(x.shape)}")


def _check_pair(pred: torch.Tensor, gt: torch.Tensor) -> None:
    if pred.shape != gt.shape or pred.shape[-1] != D:
        raise ValueError(f"pred {list(pred.shape)} and gt {list(gt.shape)}: expected [..., {D}]")


def l2_global_positions(pred: torch.Tensor, gt: torch.Tensor) -> float:
    """L2 of global positions (Harvey et al. 2020 / RSMT tables), metres.

    ``mean_{batch, t} || p_pred[t] - p_gt[t] ||_2`` where ``p[t]`` is the concatenation of
    all 15x3 global joint positions of frame ``t``. A uniform offset ``d`` of every joint
    gives ``sqrt(15) * |d|``.

    Args:
        pred, gt: motions ``[..., T, 180]`` of the same shape.
    """
    _check_pair(pred, gt)
    return (pred[..., POS] - gt[..., POS]).norm(dim=-1).mean().item()


def mean_joint_error(pred: torch.Tensor, gt: torch.Tensor) -> float:
    """Mean per-joint position error, metres: ``mean_{batch, t, j} ||p_pred - p_gt||_2``.

    Args:
        pred, gt: motions ``[..., T, 180]`` (or single frames ``[..., 180]``) of one shape.
    """
    _check_pair(pred, gt)
    return (positions(pred) - positions(gt)).norm(dim=-1).mean().item()


def last_frame_error(pred_last: torch.Tensor, target: torch.Tensor) -> float:
    """Controllability: ``mean_{batch, j} ||p_pred_last[j] - p_target[j]||_2``, metres.

    Args:
        pred_last, target: frames ``[..., 180]`` (the generated last frame and the target).
    """
    return mean_joint_error(pred_last, target)


def npss(pred: torch.Tensor, gt: torch.Tensor) -> float:
    """Normalized Power Spectrum Similarity (Gopalakrishnan et al. 2019; Harvey et al. 2020).

    Computed on the 90 rotation channels ``[90:180]`` (the joint-angle space) over time.
    Per sequence and channel ``c``: ``P_c = |rfft(x_c)|^2``, ``p_c = P_c / sum_f P_c``,
    ``EMD_c = sum_f |cumsum(p_gt,c) - cumsum(p_pred,c)|``; weights
    ``w_c = sum_f P_gt,c / sum_c' sum_f P_gt,c'``; ``NPSS = sum_c w_c EMD_c``, then the mean
    over the batch. Unitless, 0 for identical spectra (shape, not scale: a motion scaled in
    amplitude scores 0). This is the raw value; the RSMT tables report ``100 x NPSS``. The
    weights are per sequence (Harvey et al. weight over the whole batch at once).

    Args:
        pred, gt: motions ``[..., T, 180]`` of the same shape, ``T >= 2``.
    """
    _check_pair(pred, gt)
    _check_frames(gt, "gt", min_frames=2)
    eps = 1e-12
    power_gt = torch.fft.rfft(gt[..., ROT].double(), dim=-2).abs().square()  # [..., F, 90]
    power_pred = torch.fft.rfft(pred[..., ROT].double(), dim=-2).abs().square()
    total_gt = power_gt.sum(-2)  # [..., 90]
    cdf_gt = (power_gt / total_gt.unsqueeze(-2).clamp_min(eps)).cumsum(-2)
    cdf_pred = (power_pred / power_pred.sum(-2, keepdim=True).clamp_min(eps)).cumsum(-2)
    emd = (cdf_gt - cdf_pred).abs().sum(-2)  # [..., 90]
    weights = total_gt / total_gt.sum(-1, keepdim=True).clamp_min(eps)
    return (weights * emd).sum(-1).mean().item()


def joint_speeds(x: torch.Tensor, fps: float = FPS) -> torch.Tensor:
    """Joint speeds ``[..., T-1, 15]`` (m/s): ``||p[t+1] - p[t]||_2 * fps`` from positions."""
    _check_frames(x, min_frames=2)
    p = positions(x)
    return (p[..., 1:, :, :] - p[..., :-1, :, :]).norm(dim=-1) * fps


def foot_skating(
    x: torch.Tensor,
    fps: float = FPS,
    height_threshold: float = 0.025,
    ground: float | torch.Tensor | None = None,
) -> float:
    """Foot skating (Zhang et al. 2018, RSMT sec. 5.1), m/s.

    For each foot joint (ankles 11, 14) and frame step: ``L_f = v_f * clamp(2 - 2^(h/H), 0, 1)``
    with ``v_f = ||p_xy[t+1] - p_xy[t]||_2 * fps`` the horizontal foot speed, ``h`` the foot
    height above ``ground`` (mean of the two frames' heights) and ``H = height_threshold``.
    The weight is 1 at or below the ground and 0 from ``h >= H`` up. Mean over feet,
    frames and batch. The paper's ``H = 2.5`` is in centimetres.

    Args:
        x: motions ``[..., T, 180]``, ``T >= 2``.
        fps: frame rate.
        height_threshold: ``H`` in metres.
        ground: ankle height when standing, a float or a tensor broadcastable to the batch
            dims ``[...]``; default: per sequence, the 5th percentile of both ankles'
            heights over all frames.
    """
    _check_frames(x, min_frames=2)
    feet = positions(x)[..., list(FEET), :].double()  # [..., T, 2, 3]
    z = feet[..., 2]
    if ground is None:
        ground = torch.quantile(z.flatten(-2), 0.05, dim=-1)
    ground = torch.as_tensor(ground, dtype=z.dtype, device=z.device)[..., None, None]
    step = feet[..., 1:, :, :2] - feet[..., :-1, :, :2]
    speed = step.norm(dim=-1) * fps  # [..., T-1, 2]
    h = 0.5 * (z[..., 1:, :] + z[..., :-1, :]) - ground
    weight = (2.0 - torch.pow(2.0, h / height_threshold)).clamp(0.0, 1.0)
    return (speed * weight).mean().item()


def foot_contact_prob(foot_speed: torch.Tensor | float) -> torch.Tensor:
    """Foot contact probability of RSMT eq. 5, elementwise on speeds in m/s.

    ``1`` for ``v <= 0.5``, ``0`` for ``v >= 1.0``, ``2t^3 - 3t^2 + 1`` with
    ``t = 2 (v - 0.5)`` in between (smooth, 0.5 at ``v = 0.75``).
    """
    v = torch.as_tensor(foot_speed, dtype=torch.get_default_dtype())
    t = (2.0 * (v - 0.5)).clamp(0.0, 1.0)
    return 2.0 * t**3 - 3.0 * t**2 + 1.0


def diversity(samples: torch.Tensor) -> float:
    """Diversity of ``S`` samples of one transition (RSMT sec. 5.1), metres.

    ``mean_{i < k} mean_{t, j} ||p_i[t, j] - p_k[t, j]||_2`` over the unordered pairs of
    samples ``(i, k)``, on global joint positions; then the mean over any batch dims.

    Args:
        samples: ``[..., S, T, 180]`` with ``S >= 2``.
    """
    _check_frames(samples)
    if samples.ndim < 3 or samples.shape[-3] < 2:
        raise ValueError(f"samples: expected [..., S >= 2, T, {D}], got {list(samples.shape)}")
    p = positions(samples)  # [..., S, T, J, 3]
    i, k = torch.triu_indices(p.shape[-4], p.shape[-4], offset=1, device=p.device)
    dist = (p.index_select(-4, i) - p.index_select(-4, k)).norm(dim=-1)  # [..., P, T, J]
    return dist.mean().item()


def joint_speed_percentile(x: torch.Tensor, q: float = 99.0, fps: float = FPS) -> float:
    """The ``q``-th percentile (0-100) of all joint speeds (m/s) over joints, frames, batch."""
    speeds = joint_speeds(x, fps).detach().flatten().cpu().double().numpy()
    return float(np.percentile(speeds, q))


def speed_within(x: torch.Tensor, limit: float, fps: float = FPS) -> float:
    """Fraction of frame steps whose fastest joint moves at most ``limit`` m/s (0-1)."""
    return (joint_speeds(x, fps).amax(dim=-1) <= limit).double().mean().item()
