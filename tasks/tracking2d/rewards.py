"""Reprojection rewards (DESIGN section 3) as pure tensor functions.

Errors are normalised by the image height ``H`` so the rewards are resolution-free;
masked keypoints (confidence < threshold) are excluded from every term.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

TERMS = ("pos", "vel", "obj", "reg")
"""Every reward term the task can produce (``obj`` only with an object and its 2D track)."""


def _default_scales() -> dict[str, float]:
    return {"pos": 0.6, "vel": 0.1, "obj": 0.2, "reg": 0.1}


@dataclass
class RewardConfig:
    """Term weights (``scales``) and sharpness of the reward terms (DESIGN 3 defaults).

    A term missing from ``scales`` has weight 0 (it is still computed and logged).
    """

    scales: dict[str, float] = field(default_factory=_default_scales)
    alpha_pos: float = 400.0
    alpha_vel: float = 400.0
    alpha_obj: float = 400.0
    alpha_reg: float = 0.05

    def __post_init__(self) -> None:
        from mimic2dm.utils.validate import ConfigError, check

        unknown = sorted(set(self.scales) - set(TERMS))
        if unknown:
            raise ConfigError("task.reward.scales", unknown, f"terms among {list(TERMS)}")
        for name, weight in self.scales.items():
            check(f"task.reward.scales.{name}", weight, ge=0)
        for name in ("alpha_pos", "alpha_vel", "alpha_obj", "alpha_reg"):
            check(f"task.reward.{name}", getattr(self, name), gt=0)


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
) -> dict[str, torch.Tensor]:
    """Named reward terms, each ``[N]`` in [0, 1].

    Args:
        sim_uv, ref_uv, mask: this control step's projected keypoints, reference, mask.
        prev_*: the same at the previous step (velocities are finite differences).
        height: ``[N]`` image heights (pixels).
        action, prev_action: ``[N, J]`` normalised actions, for the regulariser.
        obj: optional ``(sim_centre [N, 2], ref_centre [N, 2], ref_valid [N])`` of the ball.

    Returns:
        ``{"pos", "vel", "reg"[, "obj"]}``.
    """
    e_pos = masked_sq_error(sim_uv, ref_uv, mask, height)
    both = mask & prev_mask
    e_vel = masked_sq_error(sim_uv - prev_sim_uv, ref_uv - prev_ref_uv, both, height)
    e_reg = ((action - prev_action) ** 2).mean(-1)
    terms = {
        "pos": torch.exp(-cfg.alpha_pos * e_pos),
        "vel": torch.exp(-cfg.alpha_vel * e_vel),
        "reg": torch.exp(-cfg.alpha_reg * e_reg),
    }
    if obj is not None:
        sim_c, ref_c, valid = obj
        e_obj = masked_sq_error(sim_c[:, None], ref_c[:, None], valid[:, None], height)
        terms["obj"] = torch.exp(-cfg.alpha_obj * e_obj)
    return terms


def combine(terms: dict[str, torch.Tensor], scales: dict[str, float]) -> torch.Tensor:
    """Weighted sum of ``terms`` (each ``[N]``) with ``scales``, re-normalised over the terms
    present (a term that does not apply, such as ``obj`` without an object, is absent) -> ``[N]``."""
    weights = {name: float(scales.get(name, 0.0)) for name in terms}
    total = sum(weights.values())
    if total <= 0:
        raise ValueError(
            f"reward scales {dict(scales)} give no weight to the terms present {list(terms)}"
        )
    return sum(terms[name] * (w / total) for name, w in weights.items() if w > 0)
