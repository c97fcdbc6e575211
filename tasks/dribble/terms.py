"""The ball's observation, termination and metric terms (pure tensor functions)."""

from __future__ import annotations

import torch

from mimic2dm.geometry import rotations as rot

BALL_STATE_DIM = 6  # :func:`ball_state`'s width


def ball_state(root_pos: torch.Tensor, root_rot: torch.Tensor, ball_pos: torch.Tensor,
               ball_vel: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """The ball relative to the character in its heading frame.

    Args:
        root_pos ``[N, 3]``, root_rot ``[N, 4]`` xyzw; ball_pos, ball_vel ``[N, 3]`` world.

    Returns:
        ``[N, 6]``: ball position relative to the root, ball velocity (heading frame).
    """
    hinv = rot.heading_quat_inv(root_rot)
    return torch.cat(
        [rot.quat_rotate(hinv, ball_pos - root_pos), rot.quat_rotate(hinv, ball_vel)], -1
    )


def ball_far(
    sim_c: torch.Tensor, ref_c: torch.Tensor, height: torch.Tensor, frac: float
) -> torch.Tensor:
    """``[N, V]`` True where the simulated ball's 2D centre is more than ``frac x H`` from the
    reference's (``sim_c, ref_c [N, V, 2]`` pixels, ``height [N]``)."""
    return (sim_c - ref_c).norm(dim=-1) > frac * height[:, None]


def count_lost(lost: torch.Tensor, far: torch.Tensor, seen: torch.Tensor) -> torch.Tensor:
    """Consecutive lost steps ``[N]``: +1 where the ball is seen and far in any view, 0 where
    it is seen and close in every view, unchanged where no view sees it (no evidence).

    Args:
        lost: ``[N]`` counts; far, seen: ``[N, V]`` bool.
    """
    any_far = (far & seen).any(1)
    return torch.where(any_far, lost + 1, torch.where(seen.any(1), torch.zeros_like(lost), lost))


def within_reach(ball_pos: torch.Tensor, root_pos: torch.Tensor, radius: float) -> torch.Tensor:
    """``[...]`` True where the ball's ground-plane distance to the root is at most ``radius``
    (``[..., 3]`` positions, metres)."""
    return (ball_pos[..., :2] - root_pos[..., :2]).norm(dim=-1) <= radius
