"""Early termination of the 2D tracker (docs/design.md section 6) as pure tensor functions;
the fall terminations every task shares are in :mod:`mimic2dm.tasks.common.terms`."""

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
