"""Evaluation metrics of paper 4.1 (docs/design.md section 10), as pure tensor functions.

Pixel metrics are reported at 1920x1080: errors measured on an image of height ``H``
are rescaled by ``1080 / H`` so thresholds and numbers compare across resolutions.
"""

from __future__ import annotations

import torch

REFERENCE_HEIGHT = 1080.0
"""Image height (px) that every reported pixel error is scaled to."""
SUCCESS_THRESHOLD_PX = 100.0  # at 1080p
ERROR_CAP_PX = 2160.0
"""The most one keypoint's 2D error counts (px at 1080p: two image heights). A point that far
off, or behind the camera, is lost either way; without the cap a point projected from just
in front of the camera plane (a character left behind by a tracking camera) puts millions of
pixels into a mean. Success (max error <= 100 px) does not change."""


def reprojection_errors(
    pred: torch.Tensor,
    ref: torch.Tensor,
    mask: torch.Tensor,
    image_height: int,
    front: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-keypoint 2D distance in pixels at 1080p, at most :data:`ERROR_CAP_PX`; NaN where masked.

    Args:
        pred: ``[..., K, 2]`` projected keypoints of the character (pixels).
        ref: ``[..., K, 2]`` reference keypoints (pixels).
        mask: ``[..., K]`` bool, observed reference keypoints.
        image_height: height of the image the pixels live in.
        front: ``[..., K]`` bool, predicted points in front of the camera (default: all);
            a point behind it has no image position and counts as :data:`ERROR_CAP_PX`.

    Returns:
        ``[..., K]`` errors (pixels at 1080p).
    """
    err = ((pred - ref).norm(dim=-1) * (REFERENCE_HEIGHT / image_height)).clamp_max(ERROR_CAP_PX)
    if front is not None:
        err = torch.where(front, err, torch.full_like(err, ERROR_CAP_PX))
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


# ----------------------------------------------------------------------------- physical plausibility
CONTACT_HEIGHT_M = 0.05
"""A foot is in contact when its keypoint is less than this above its standing height (m)."""


def foot_contact(heights: torch.Tensor, threshold: float = CONTACT_HEIGHT_M) -> torch.Tensor:
    """``[..., T, F]`` bool: feet whose height above the ground ``heights [..., T, F]`` (m) is
    below ``threshold``."""
    return heights < threshold


def foot_skating(
    feet: torch.Tensor, heights: torch.Tensor, fps: float, threshold: float = CONTACT_HEIGHT_M
) -> torch.Tensor:
    """Mean horizontal speed (m/s) of feet in contact at both ends of a frame step.

    Args:
        feet: ``[..., T, F, 3]`` world foot positions (m, z-up); heights: ``[..., T, F]``
            their heights above the ground (m); fps: frame rate.

    Returns:
        ``[...]`` m/s; 0 where no foot is ever in contact on two successive frames.
    """
    c = foot_contact(heights, threshold)
    both = (c[..., 1:, :] & c[..., :-1, :]).to(feet.dtype)
    speed = (feet[..., 1:, :, :2] - feet[..., :-1, :, :2]).norm(dim=-1) * fps
    return (speed * both).sum((-2, -1)) / both.sum((-2, -1)).clamp_min(1.0)


def ground_penetration_mm(heights: torch.Tensor) -> torch.Tensor:
    """Mean over frames of how deep the lowest foot is below the ground (mm; 0 above it).

    Args:
        heights: ``[..., T, F]`` foot heights above the ground (m).

    Returns:
        ``[...]`` mm.
    """
    return (-heights.amin(-1)).clamp_min(0.0).mean(-1) * 1000.0


def floating_mm(heights: torch.Tensor, threshold: float = CONTACT_HEIGHT_M) -> torch.Tensor:
    """Mean height (mm) of the lowest foot over the frames where no foot is in contact.

    Args:
        heights: ``[..., T, F]`` foot heights above the ground (m).

    Returns:
        ``[...]`` mm; 0 where some foot touches the ground in every frame.
    """
    low = heights.amin(-1)
    air = (low >= threshold).to(heights.dtype)
    return (low * air).sum(-1) / air.sum(-1).clamp_min(1.0) * 1000.0


def plausibility(
    keypoints: torch.Tensor,
    feet: tuple[list[int], torch.Tensor],
    fps: float,
    threshold: float = CONTACT_HEIGHT_M,
) -> dict[str, float]:
    """Foot skating (m/s), ground penetration (mm) and floating (mm) of one motion.

    Args:
        keypoints: ``[T, K, 3]`` world keypoints (m, z-up, ground at z = 0).
        feet: ``(indices [F], standing heights [F])`` of the foot keypoints
            (:func:`mimic2dm.characters.feet.character_feet`).
        fps: frame rate of ``keypoints``.
    """
    idx, rest = feet
    feet = keypoints[..., idx, :].float()
    h = feet[..., 2] - rest.to(feet.device)
    return {
        "foot_skating_m_s": float(foot_skating(feet, h, fps, threshold)),
        "ground_penetration_mm": float(ground_penetration_mm(h)),
        "floating_mm": float(floating_mm(h, threshold)),
    }
