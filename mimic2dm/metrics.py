"""Evaluation metrics of paper 4.1 (DESIGN section 10), as pure tensor functions.

Pixel metrics are reported at 1920x1080: errors measured on an image of height ``H``
are rescaled by ``1080 / H`` so thresholds and numbers compare across resolutions.
"""

from __future__ import annotations

import torch

SUCCESS_THRESHOLD_PX = 100.0  # at 1080p


def reprojection_errors(
    pred: torch.Tensor, ref: torch.Tensor, mask: torch.Tensor, image_height: int
) -> torch.Tensor:
    """Per-keypoint 2D distance in pixels at 1080p; NaN where masked.

    Args:
        pred: ``[..., K, 2]`` projected keypoints of the character (pixels).
        ref: ``[..., K, 2]`` reference keypoints (pixels).
        mask: ``[..., K]`` bool, observed reference keypoints.
        image_height: height of the image the pixels live in.

    Returns:
        ``[..., K]`` errors (pixels at 1080p).
    """
    err = (pred - ref).norm(dim=-1) * (1080.0 / image_height)
    return torch.where(mask, err, torch.full_like(err, float("nan")))


def mean_error_2d(errors: torch.Tensor) -> torch.Tensor:
    """Mean over observed keypoints and frames of ``errors [..., T, K]`` -> ``[...]``."""
    return errors.nanmean(dim=(-2, -1))


def max_error_per_frame(errors: torch.Tensor) -> torch.Tensor:
    """Max over observed keypoints ``[..., T, K]`` -> ``[..., T]`` (0 where nothing is observed)."""
    return torch.nan_to_num(errors, nan=0.0).amax(dim=-1)


def success(errors: torch.Tensor, threshold_px: float = SUCCESS_THRESHOLD_PX) -> torch.Tensor:
    """A clip succeeds when its max reprojection error never exceeds the threshold.

    Args:
        errors: ``[..., T, K]`` errors at 1080p (NaN = masked).

    Returns:
        ``[...]`` bool.
    """
    return (max_error_per_frame(errors) <= threshold_px).all(dim=-1)


def mpjpe_mm(
    pred: torch.Tensor, gt: torch.Tensor, mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean per-joint position error in millimetres of ``[..., T, K, 3]`` metre positions -> ``[...]``."""
    err = (pred - gt).norm(dim=-1) * 1000.0
    if mask is not None:
        err = torch.where(mask, err, torch.full_like(err, float("nan")))
    return err.nanmean(dim=(-2, -1))


def jitter(positions: torch.Tensor, fps: float) -> torch.Tensor:
    """Mean norm of the third time derivative (units/s^3) of ``[..., T, K, D]`` -> ``[...]``.

    Needs ``T >= 4``.
    """
    if positions.shape[-3] < 4:
        raise ValueError(f"jitter needs at least 4 frames, got {positions.shape[-3]}")
    d3 = (
        positions[..., 3:, :, :]
        - 3 * positions[..., 2:-1, :, :]
        + 3 * positions[..., 1:-2, :, :]
        - positions[..., :-3, :, :]
    )
    return (d3 * fps**3).norm(dim=-1).mean(dim=(-2, -1))
