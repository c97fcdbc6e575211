"""Loss terms of preprocessing (B.1): pure tensor functions, batched over hypotheses.

Shapes: ``[H, T, ...]`` with ``H`` hypotheses (or 1) and ``T`` frames. Every term is
dimensionless (errors divided by a scale in their own unit) and averaged, so the
weights in :class:`mimic2dm.preprocess.optimize.PreprocessConfig` compare directly.
Each returns ``[H]`` so that hypotheses can be ranked by their own loss.
"""

from __future__ import annotations

import torch


def robust_reprojection(
    uv: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor,
    sigma_px: float,
    delta: float = 2.0,
) -> torch.Tensor:
    """Confidence-weighted pseudo-Huber reprojection loss ``[H]``.

    Args:
        uv: ``[H, T, K, 2]`` projected keypoints (px).
        target: ``[T, K, 2]`` observed keypoints (px; any value where weight is 0).
        weight: ``[T, K]`` confidence, 0 for masked keypoints (never treated as zeros).
        sigma_px: pixel error that counts as 1.
        delta: where the loss turns from quadratic to linear (in units of ``sigma_px``).
    """
    e2 = ((uv - target) / sigma_px).square().sum(-1)
    rho = delta**2 * (torch.sqrt(1.0 + e2 / delta**2) - 1.0)
    return (rho * weight).sum((-1, -2)) / weight.sum().clamp_min(1e-6)


def ground_penetration(
    kp_z: torch.Tensor, contact_z: torch.Tensor, scale: float = 0.01
) -> torch.Tensor:
    """``[H]``: squared depth below the ground of keypoints ``[H, T, K]`` and contact
    surfaces ``[H, T, C]`` (heights already minus their radius), per ``scale`` metres."""
    pen = torch.relu(-kp_z).square().mean((-1, -2)) + torch.relu(-contact_z).square().mean((-1, -2))
    return pen / scale**2


def lowest_contact_per_frame(
    contact_z: torch.Tensor, scale: float = 0.05, temperature: float = 0.01
) -> torch.Tensor:
    """``[..., T]``: the lowest foot near the ground, per frame: the soft minimum ``m`` over
    contact surfaces ``[..., T, C]``, ``x = (m / scale)^2``, robust: ``x / (1 + x)``
    (Geman-McClure, at most 1 per frame), because people jump: a quadratic cost made a
    hop's flight frames pull the body down along the camera rays."""
    low = -temperature * torch.logsumexp(-contact_z / temperature, dim=-1)
    x = (low / scale).square()
    return x / (1.0 + x)


def lowest_contact(
    contact_z: torch.Tensor, scale: float = 0.05, temperature: float = 0.01
) -> torch.Tensor:
    """``[H]``: :func:`lowest_contact_per_frame` of ``[H, T, C]``, averaged over frames."""
    return lowest_contact_per_frame(contact_z, scale, temperature).mean(-1)


def foot_skate(
    contact: torch.Tensor,
    radius: torch.Tensor,
    fps: float,
    speed: float = 0.2,
    height: float = 0.03,
    pair_ok: torch.Tensor | None = None,
):
    """``[H]``: horizontal speed of contact points ``[H, T, C, 3]`` near the ground (a foot
    on the ground does not slide), per ``speed`` m/s, weighted by ``exp(-h / height)``.
    ``pair_ok [T - 1]``: which consecutive frames are adjacent in time (untrusted frames
    cut out of a fit leave jumps that are no motion); None: all."""
    if contact.shape[1] < 2:
        return contact.new_zeros(contact.shape[0])
    v = (contact[:, 1:, :, :2] - contact[:, :-1, :, :2]) * fps / speed
    h = 0.5 * (contact[:, 1:, :, 2] + contact[:, :-1, :, 2]) - radius
    w = torch.exp(-torch.relu(h).detach() / height)
    return _masked_mean((w * v.square().sum(-1)).mean(-1), pair_ok)


def _masked_mean(x: torch.Tensor, ok: torch.Tensor | None) -> torch.Tensor:
    """Mean of ``x [H, N]`` over the ``N`` entries where ``ok [N]`` (all where None) -> ``[H]``."""
    if ok is None:
        return x.mean(-1)
    ok = ok.to(x.dtype)
    return (x * ok).sum(-1) / ok.sum().clamp_min(1.0)


def smoothness(
    x: torch.Tensor, fps: float, scale: float, pair_ok: torch.Tensor | None = None
) -> torch.Tensor:
    """``[H]``: squared second differences of ``x [H, T, ...]`` as accelerations per ``scale``
    (units of x per s^2); ``pair_ok [T - 1]`` as in :func:`foot_skate` (a triple of frames
    counts where both of its steps are adjacent)."""
    if x.shape[1] < 3:
        return x.new_zeros(x.shape[0])
    acc = (x[:, 2:] - 2 * x[:, 1:-1] + x[:, :-2]) * fps**2 / scale
    ok = None if pair_ok is None else pair_ok[1:] & pair_ok[:-1]
    return _masked_mean(acc.square().flatten(2).mean(-1), ok)


def pose_prior(dof_pos: torch.Tensor, dof_scale: float = 1.0) -> torch.Tensor:
    """``[H]``: weak prior towards the default pose: joint angles ``[H, T, J]`` per ``dof_scale`` rad."""
    return (dof_pos / dof_scale).square().mean((-1, -2))


def upright(root_up_z: torch.Tensor) -> torch.Tensor:
    """``[H]``: ``1 - cos(tilt)`` of the root's up axis (``root_up_z [H, T]``: its world z).

    A level camera and a tilted body look alike to a pitched camera and an upright
    body; this prior picks the second, which fixes the camera's pitch and roll."""
    return (1.0 - root_up_z).mean(-1)


def joint_limits(dof_pos: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor) -> torch.Tensor:
    """``[H]``: squared excursion beyond the joint limits (rad). The optimiser also projects
    onto the limits after each step, so this is ~0 at the end; it keeps the gradient
    pointing inside during a step."""
    out = torch.relu(lower - dof_pos) + torch.relu(dof_pos - upper)
    return out.square().mean((-1, -2))
