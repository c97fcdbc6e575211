"""Reprojection rewards (docs/design.md section 3) as pure tensor functions.

Errors are normalised by the image height ``H`` so the rewards are resolution-free;
masked keypoints (confidence < threshold) are excluded from every term. Velocities are
in image heights per second, so ``alpha_vel`` does not depend on the control rate.
The sharpness defaults are set on real motion (cmu_walk / run / hop seen by static
virtual cameras, numbers in ``docs/tracker.md``): the reference scores 1 on ``pos`` and
``vel``, a frozen, reversed, 5-frame-late or mirrored character well below.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from mimic2dm.tasks.common.config import TermRewardConfig

TERMS = ("pos", "vel", "obj", "reg", "ori", "contact", "scale", "foot_ball")
"""Every reward term the task can produce (``obj`` only with an object and its 2D track;
``ori`` with left/right shoulder or hip keypoints; ``contact`` with contact bodies;
``foot_ball`` with both an object track and contact bodies)."""


def _default_scales() -> dict[str, float]:
    # ori / contact (Yu et al. 2021) are off by default but still computed and logged
    return {
        "pos": 0.6,
        "vel": 0.1,
        "obj": 0.2,
        "reg": 0.1,
        "ori": 0.0,
        "contact": 0.0,
        "scale": 0.0,
        "foot_ball": 0.0,
    }


@dataclass
class RewardConfig(TermRewardConfig):
    """Term weights (``scales``) and sharpness of the reward terms (docs/design.md section 3);
    ``alpha_reg`` comes from :class:`~mimic2dm.tasks.common.config.TermRewardConfig`.

    A term missing from ``scales`` has weight 0 (it is still computed and logged).

    Attributes:
        alpha_pos, alpha_obj: sharpness on squared errors in image heights.
        alpha_vel: sharpness on squared velocity errors in image heights per second.
        ori_margin: ``ori`` demands the reference's left/right order of a shoulder / hip
            pair fully once the pair is this far apart (fraction of H); closer pairs
            (side views) count less.
        contact_still: a reference foot keypoint slower than this (image heights / s) is
            still, and its foot should touch the ground.
        alpha_scale: sharpness of ``scale`` on the squared log ratio of the simulated and
            the reference body's size in the image (200: 5 % too small or large -> 0.61).
        alpha_foot_ball: sharpness of ``foot_ball`` on the squared error of the ball's 2D
            offset from each foot keypoint (image heights).
        foot_ball_near: ``foot_ball`` scores a foot while its reference keypoint is within
            this fraction of H of the reference ball (the approach to a touch and the touch).
    """

    scales: dict[str, float] = field(default_factory=_default_scales)
    alpha_pos: float = 400.0
    alpha_vel: float = 20.0
    alpha_obj: float = 400.0
    ori_margin: float = 0.02
    contact_still: float = 0.07
    alpha_scale: float = 200.0
    alpha_foot_ball: float = 400.0
    foot_ball_near: float = 0.1

    terms = TERMS
    positive = ("alpha_pos", "alpha_vel", "alpha_obj", "alpha_reg", "ori_margin", "contact_still",
                "alpha_scale", "alpha_foot_ball", "foot_ball_near")  # fmt: skip


def masked_sq_error(
    x: torch.Tensor, xhat: torch.Tensor, mask: torch.Tensor, height: torch.Tensor
) -> torch.Tensor:
    """``e = sum_k m_k ||x_k - xhat_k||^2 / (H^2 sum_k m_k)``.

    Args:
        x, xhat: ``[N, K, 2]`` pixels; mask ``[N, K]``; height ``[N]`` image heights.

    Returns:
        ``[N]``; 0 where no keypoint is observed.
    """
    m = mask.to(x.dtype)
    se = ((x - xhat) ** 2).sum(-1)
    return (se * m).sum(-1) / (height**2 * m.sum(-1).clamp_min(1.0))


def orientation_reward(
    sim_uv: torch.Tensor,
    ref_uv: torch.Tensor,
    mask: torch.Tensor,
    pairs: torch.Tensor,
    height: torch.Tensor,
    margin: float,
) -> torch.Tensor:
    """Yu et al. 2021's facing hint: the image's left/right order of shoulders and hips.

    Which of a left/right pair appears further right in the image tells whether the body
    faces the camera or turns away; the simulated pair should keep the reference's order.

    Args:
        sim_uv, ref_uv: ``[N, K, 2]`` pixels; mask ``[N, K]``.
        pairs: ``[P, 2]`` keypoint indices ``(left, right)``.
        height: ``[N]``; margin: pair separation (fraction of H) where the order counts fully.

    Returns:
        ``[N]`` in [0, 1]: mean over the observed pairs of ``1 - w (1 - agree)``, with
        ``w = min(|d_ref| / margin, 1)`` and ``d = (u_right - u_left) / H``; 1 without pairs.
    """
    left, right = pairs[:, 0], pairs[:, 1]
    d_sim = (sim_uv[:, right, 0] - sim_uv[:, left, 0]) / height[:, None]
    d_ref = (ref_uv[:, right, 0] - ref_uv[:, left, 0]) / height[:, None]
    ok = (mask[:, left] & mask[:, right]).to(sim_uv.dtype)
    w = (d_ref.abs() / margin).clamp(max=1.0)
    agree = (torch.sign(d_sim) == torch.sign(d_ref)).to(sim_uv.dtype)
    r = 1.0 - w * (1.0 - agree)
    return torch.where(ok.sum(-1) > 0, (r * ok).sum(-1) / ok.sum(-1).clamp_min(1.0), 1.0)


def body_size(uv: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """RMS distance of the masked keypoints ``uv [N, K, 2]`` from their centroid -> ``[N]``
    (0 where fewer than two are observed): the body's size in the image."""
    m = mask.to(uv.dtype)[..., None]
    n = m.sum(-2).clamp_min(1.0)
    c = (uv * m).sum(-2, keepdim=True) / n[..., None]
    return (((uv - c) ** 2 * m).sum((-2, -1)) / n[..., 0]).sqrt()


def scale_reward(
    sim_uv: torch.Tensor, ref_uv: torch.Tensor, mask: torch.Tensor, alpha: float
) -> torch.Tensor:
    """The body's apparent size against the reference's: ``exp(-alpha log(s_sim / s_ref)^2)``.

    A character at the wrong depth (lagging behind a runner who comes towards the camera,
    say) looks smaller or larger than the reference while its keypoints stay within a few
    pixels of it relative to the root: 5 % of size is ~5 px on a 400 px body, which ``pos``
    barely sees (0.99) and this term does (0.61 at ``alpha`` 200). Both sizes are taken over
    the same keypoints (``mask``); ``[N]`` in [0, 1], 1 where fewer than two are observed.
    """
    s_sim, s_ref = body_size(sim_uv, mask), body_size(ref_uv, mask)
    ok = (mask.sum(-1) >= 2) & (s_ref > 0) & (s_sim > 0)
    r = torch.log(s_sim.clamp_min(1e-6) / s_ref.clamp_min(1e-6))
    return torch.where(ok, torch.exp(-alpha * r**2), torch.ones_like(r))


def contact_reward(
    ref_speed: torch.Tensor, ref_ok: torch.Tensor, contact: torch.Tensor, still: float
) -> torch.Tensor:
    """Yu et al. 2021's contact cue: a foot still in the reference should touch the ground.

    Args:
        ref_speed: ``[N, C]`` speed of each foot's reference keypoint (image heights / s).
        ref_ok: ``[N, C]`` that keypoint observed at both frames.
        contact: ``[N, C]`` simulated contact flags (1.0 = touching).
        still: speed below which a reference foot counts as still.

    Returns:
        ``[N]``: the fraction of still reference feet in contact; 1 where none is still.
    """
    s = (ref_ok & (ref_speed < still)).to(contact.dtype)
    n = s.sum(-1)
    return torch.where(n > 0, (s * contact).sum(-1) / n.clamp_min(1.0), 1.0)


def foot_ball_reward(sim_uv: torch.Tensor, ref_uv: torch.Tensor, mask: torch.Tensor,
                     obj: tuple[torch.Tensor, torch.Tensor, torch.Tensor], feet: torch.Tensor,
                     height: torch.Tensor, near: float, alpha: float) -> torch.Tensor:  # fmt: skip
    """The ball as the feet see it (an interaction term, 2D only): for each foot keypoint
    whose reference is within ``near x H`` of the reference ball, the squared error between
    the simulated and the reference offset ``ball - foot``, in image heights.

    Args:
        sim_uv, ref_uv: ``[N, K, 2]`` pixels; mask ``[N, K]``.
        obj: ``(sim_centre [N, 2], ref_centre [N, 2], ref_valid [N])``.
        feet: ``[F]`` foot keypoint indices; height ``[N]``.

    Returns:
        ``[N]`` ``exp(-alpha * e)``; 1 where no foot is near the reference ball.
    """
    sim_c, ref_c, valid = obj
    d_sim = sim_c[:, None] - sim_uv[:, feet]
    d_ref = ref_c[:, None] - ref_uv[:, feet]
    close = (d_ref.norm(dim=-1) < near * height[:, None]) & mask[:, feet] & valid[:, None]
    return torch.exp(-alpha * masked_sq_error(d_sim, d_ref, close, height))


def reward_terms(
    sim_uv: torch.Tensor,
    ref_uv: torch.Tensor,
    mask: torch.Tensor,
    prev_sim_uv: torch.Tensor,
    prev_ref_uv: torch.Tensor,
    prev_mask: torch.Tensor,
    height: torch.Tensor,
    action: torch.Tensor,
    prev_action: torch.Tensor,
    cfg: RewardConfig,
    obj: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    *,
    control_hz: float = 30.0,
    ori_pairs: torch.Tensor | None = None,
    contact: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> dict[str, torch.Tensor]:
    """Named reward terms, each ``[N]`` in [0, 1].

    Args:
        sim_uv, ref_uv, mask: this control step's projected keypoints, reference, mask.
        prev_*: the same at the previous step (velocities are finite differences).
        height: ``[N]`` image heights (pixels).
        action, prev_action: ``[N, J]`` normalised actions, for the regulariser.
        obj: optional ``(sim_centre [N, 2], ref_centre [N, 2], ref_valid [N])`` of the ball.
        control_hz: steps per second (velocities are per second).
        ori_pairs: optional ``[P, 2]`` (left, right) shoulder / hip indices: adds ``ori``.
        contact: optional ``(keypoint [C], flags [N, C])``: each contact body's keypoint and
            its simulated contact flag: adds ``contact``.

    Returns:
        ``{"pos", "vel", "reg", "scale"[, "obj"][, "ori"][, "contact"][, "foot_ball"]}``
        (``foot_ball``: with ``obj`` and ``contact``, whose keypoints are the feet).
    """
    e_pos = masked_sq_error(sim_uv, ref_uv, mask, height)
    both = mask & prev_mask
    hz = float(control_hz)
    e_vel = masked_sq_error((sim_uv - prev_sim_uv) * hz, (ref_uv - prev_ref_uv) * hz, both, height)
    e_reg = ((action - prev_action) ** 2).mean(-1)
    terms = {
        "pos": torch.exp(-cfg.alpha_pos * e_pos),
        "vel": torch.exp(-cfg.alpha_vel * e_vel),
        "reg": torch.exp(-cfg.alpha_reg * e_reg),
        "scale": scale_reward(sim_uv, ref_uv, mask, cfg.alpha_scale),
    }
    if obj is not None:
        sim_c, ref_c, valid = obj
        e_obj = masked_sq_error(sim_c[:, None], ref_c[:, None], valid[:, None], height)
        terms["obj"] = torch.exp(-cfg.alpha_obj * e_obj)
        if contact is not None:
            terms["foot_ball"] = foot_ball_reward(sim_uv, ref_uv, mask, obj, contact[0], height,
                                                  cfg.foot_ball_near, cfg.alpha_foot_ball)  # fmt: skip
    if ori_pairs is not None and ori_pairs.numel():
        terms["ori"] = orientation_reward(sim_uv, ref_uv, mask, ori_pairs, height, cfg.ori_margin)
    if contact is not None:
        kp, flags = contact
        speed = (ref_uv[:, kp] - prev_ref_uv[:, kp]).norm(dim=-1) * hz / height[:, None]
        terms["contact"] = contact_reward(
            speed, both[:, kp], flags.to(sim_uv.dtype), cfg.contact_still
        )
    return terms
