"""Terms every task on a character shares, as pure tensor functions: proprioception, the
fall / tilt terminations, the weighted reward sum and the PD action mapping."""

from __future__ import annotations

import math

import torch

from mimic2dm.geometry import rotations as rot


def proprioception(
    root_pos: torch.Tensor,
    root_rot: torch.Tensor,
    root_lin_vel: torch.Tensor,
    root_ang_vel: torch.Tensor,
    body_rot: torch.Tensor,
    parents: torch.Tensor,
    dof_vel: torch.Tensor,
    key_body_pos: torch.Tensor,
) -> torch.Tensor:
    """Proprioception in the character's heading frame (paper B.2).

    Args:
        root_pos: ``[N, 3]`` world root position; root_rot ``[N, 4]`` xyzw.
        root_lin_vel, root_ang_vel: ``[N, 3]`` world-frame velocities.
        body_rot: ``[N, B, 4]`` world body rotations, root first.
        parents: ``[B]`` parent body index (root: -1).
        dof_vel: ``[N, J]`` joint velocities.
        key_body_pos: ``[N, Kb, 3]`` world positions of key bodies.

    Returns:
        ``[N, 1 + 3 + 3 + 6 + 6 (B - 1) + J + 3 Kb]``: root height, local linear and
        angular velocity, root tilt (6D, heading removed), local rotation of every
        non-root body relative to its parent (6D), joint velocities, key-body positions
        relative to the root in the heading frame (:func:`proprioception_size`).
    """
    hinv = rot.heading_quat_inv(root_rot)
    v = rot.quat_rotate(hinv, root_lin_vel)
    w = rot.quat_rotate(hinv, root_ang_vel)
    tilt = rot.quat_to_rot6d(rot.quat_mul(hinv, root_rot))
    child = body_rot[:, 1:]
    parent = body_rot[:, parents[1:]]
    local = rot.quat_to_rot6d(rot.quat_mul(rot.quat_conjugate(parent), child)).flatten(1)
    rel = key_body_pos - root_pos[:, None]
    key = rot.quat_rotate(hinv[:, None].expand(-1, rel.shape[1], -1), rel).flatten(1)
    return torch.cat([root_pos[:, 2:3], v, w, tilt, local, dof_vel, key], dim=-1)


def proprioception_size(num_bodies: int, num_dofs: int, num_key_bodies: int) -> int:
    """Width of :func:`proprioception` for ``B`` bodies, ``J`` DoFs and ``Kb`` key bodies."""
    return 1 + 3 + 3 + 6 + 6 * (num_bodies - 1) + num_dofs + 3 * num_key_bodies


def fallen(root_height: torch.Tensor, floor: float) -> torch.Tensor:
    """``[N]`` True where the root is below ``floor`` metres."""
    return root_height < floor


def tilted(root_rot: torch.Tensor, up_local: torch.Tensor, max_tilt_deg: float) -> torch.Tensor:
    """``[N]`` True where the root's up axis leans more than ``max_tilt_deg`` from vertical.

    A quadruped's root stays high when it rolls onto its side or back (its legs keep the
    trunk off the ground), so a height floor alone misses those falls.

    Args:
        root_rot: ``[N, 4]`` xyzw root orientations.
        up_local: ``[3]`` the root-frame axis that points up in the default pose.
        max_tilt_deg: largest tilt (degrees) that is not a fall.
    """
    up = rot.quat_rotate(root_rot, up_local.to(root_rot).expand(root_rot.shape[0], 3))
    cos = up[:, 2] / up.norm(dim=-1).clamp_min(1e-9)
    return cos < math.cos(math.radians(max_tilt_deg))


def up_axis(root_quat: torch.Tensor) -> torch.Tensor:
    """The root-frame axis ``[3]`` that is vertical when the root has orientation
    ``root_quat [4]`` (xyzw; the default pose's): what :func:`tilted` measures against."""
    return rot.quat_rotate_inverse(
        root_quat, torch.tensor([0.0, 0.0, 1.0], device=root_quat.device)
    )


def check_scales(scales: dict[str, float], terms) -> None:
    """Reward ``scales`` name only known ``terms`` and weigh each ``>= 0``.

    Raises:
        ConfigError: naming ``task.reward.scales`` (or the term) and what is allowed.
    """
    from mimic2dm.utils.validate import ConfigError, check

    unknown = sorted(set(scales) - set(terms))
    if unknown:
        raise ConfigError("task.reward.scales", unknown, f"terms among {list(terms)}")
    for name, weight in scales.items():
        check(f"task.reward.scales.{name}", weight, ge=0)


def check_reward(cfg, terms, positive: tuple[str, ...], weighted: bool = False) -> None:
    """A reward config's checks: ``cfg.scales`` (:func:`check_scales` over ``terms``), with
    ``weighted`` a positive total weight (for a task whose terms are always present), and
    every field named in ``positive`` (``alpha_*`` sharpness, margins) ``> 0``.

    Raises:
        ConfigError: naming ``task.reward.<field>`` and what is allowed.
    """
    from mimic2dm.utils.validate import ConfigError, check

    check_scales(cfg.scales, terms)
    if weighted and sum(cfg.scales.values()) <= 0:
        raise ConfigError("task.reward.scales", dict(cfg.scales), "a positive total weight")
    for name in positive:
        check(f"task.reward.{name}", getattr(cfg, name), gt=0)


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


def pd_targets(offset: torch.Tensor, scale: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """PD targets ``[N, J]`` of normalised ``actions [N, J]``: ``offset + scale * a`` with
    ``a`` clamped to [-1, 1] (``offset, scale [J]``: zero holds ``offset``)."""
    return offset + scale * actions.clamp(-1.0, 1.0)
