"""Early termination (DESIGN section 6) as pure tensor functions."""

from __future__ import annotations

import torch


def reprojection_exceeded(
    sim_uv: torch.Tensor, ref_uv: torch.Tensor, mask: torch.Tensor, height: torch.Tensor, tau: float
) -> torch.Tensor:
    """``[N]`` True where the max masked reprojection error exceeds ``tau * H``.

    Args:
        sim_uv, ref_uv: ``[N, K, 2]`` pixels; mask ``[N, K]``; height ``[N]``; tau: fraction of H.
    """
    err = (sim_uv - ref_uv).norm(dim=-1)
    err = torch.where(mask, err, torch.zeros_like(err))
    return err.amax(dim=-1) > tau * height


def fallen(root_height: torch.Tensor, floor: float) -> torch.Tensor:
    """``[N]`` True where the root is below ``floor`` metres."""
    return root_height < floor
