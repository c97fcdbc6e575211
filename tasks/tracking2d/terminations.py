"""Early termination (docs/design.md section 6) as pure tensor functions."""

from __future__ import annotations

import math

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


def tilted(root_rot: torch.Tensor, up_local: torch.Tensor, max_tilt_deg: float) -> torch.Tensor:
    """``[N]`` True where the root's up axis leans more than ``max_tilt_deg`` from vertical.

    A quadruped's root stays high when it rolls onto its side or back (its legs keep the
    trunk off the ground), so a height floor alone misses those falls.

    Args:
        root_rot: ``[N, 4]`` xyzw root orientations.
        up_local: ``[3]`` the root-frame axis that points up in the default pose.
        max_tilt_deg: largest tilt (degrees) that is not a fall.
    """
    from mimic2dm.geometry import rotations as rot

    up = rot.quat_rotate(root_rot, up_local.to(root_rot).expand(root_rot.shape[0], 3))
    cos = up[:, 2] / up.norm(dim=-1).clamp_min(1e-9)
    return cos < math.cos(math.radians(max_tilt_deg))
