"""Top-down pre-processing: box -> centre/scale -> affine crop -> normalised model input,
and the way back from heatmap pixels to image pixels.

Coordinates are continuous pixels with pixel *centres* at integers (x right, y down), in
the image, in the crop and in the heatmap alike. The crop follows ViTPose's unbiased data
processing (UDP, Huang et al. 2020): the region ``centre +- scale / 2`` of the image maps
onto ``[0, W_in - 1] x [0, H_in - 1]`` of the crop, and heatmap pixel ``j`` maps onto crop
pixel ``j * (W_in - 1) / (W_hm - 1)``. With these conventions image -> crop -> heatmap ->
image is exact (a test checks the round trip).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

IMAGENET_MEAN = (123.675, 116.28, 103.53)
"""RGB mean (0-255 units) ViTPose was trained with."""
IMAGENET_STD = (58.395, 57.12, 57.375)
"""RGB std (0-255 units) ViTPose was trained with."""
BOX_PADDING = 1.25
"""Box enlargement before cropping (mmpose / ViTPose top-down default)."""


def box_to_center_scale(
    boxes: np.ndarray,
    aspect: float,
    padding: float = BOX_PADDING,
    rotation: np.ndarray | float = 0.0,
) -> tuple[np.ndarray, np.ndarray]:
    """Centre and crop size of boxes, enlarged to the model's aspect ratio.

    Args:
        boxes: ``[N, 4]`` boxes ``(x1, y1, x2, y2)`` in image pixels.
        aspect: model input width / height (e.g. 192 / 256).
        padding: enlargement factor applied after matching the aspect ratio.
        rotation: degrees (scalar or ``[N]``) the crop will be rotated by; the crop is
            sized to hold the box after rotation (a tall box at 90 degrees is wide).

    Returns:
        ``center [N, 2]`` and ``scale [N, 2]`` = crop ``(width, height)`` in image pixels,
        with ``scale[:, 0] / scale[:, 1] == aspect``.
    """
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    if aspect <= 0:
        raise ValueError(f"aspect must be > 0, got {aspect}")
    center = 0.5 * (boxes[:, :2] + boxes[:, 2:])
    w = np.maximum(boxes[:, 2] - boxes[:, 0], 1.0)
    h = np.maximum(boxes[:, 3] - boxes[:, 1], 1.0)
    th = np.deg2rad(np.broadcast_to(np.asarray(rotation, dtype=np.float64), w.shape))
    c, s = np.abs(np.cos(th)), np.abs(np.sin(th))
    w, h = c * w + s * h, s * w + c * h  # extent of the rotated box
    h = np.maximum(h, w / aspect)
    w = h * aspect
    return center, np.stack([w, h], axis=1) * padding


def crop_affine(
    center: np.ndarray,
    scale: np.ndarray,
    out_size: tuple[int, int],
    rotation: np.ndarray | float = 0.0,
) -> np.ndarray:
    """Affine maps image pixels -> crop pixels (UDP convention).

    ``p_crop = S R (p - center) + ((W - 1) / 2, (H - 1) / 2)`` with
    ``S = diag((W - 1) / scale_w, (H - 1) / scale_h)``; ``R`` turns the image content by
    ``rotation`` degrees counter-clockwise as seen on screen (y down), so a person upside
    down in the image stands upright in the crop rotated by 180.

    Args:
        center: ``[N, 2]`` image pixels.
        scale: ``[N, 2]`` crop ``(width, height)`` in image pixels.
        out_size: model input ``(height, width)``.
        rotation: degrees, scalar or ``[N]``.

    Returns:
        ``[N, 2, 3]`` float64 matrices.
    """
    center = np.asarray(center, dtype=np.float64).reshape(-1, 2)
    scale = np.asarray(scale, dtype=np.float64).reshape(-1, 2)
    H, W = out_size
    th = np.deg2rad(np.broadcast_to(np.asarray(rotation, dtype=np.float64), center.shape[:1]))
    c, s = np.cos(th), np.sin(th)
    R = np.stack([np.stack([c, s], -1), np.stack([-s, c], -1)], -2)  # [N, 2, 2]
    S = np.stack([(W - 1) / scale[:, 0], (H - 1) / scale[:, 1]], -1)[:, :, None]
    M = S * R
    t = np.array([(W - 1) / 2, (H - 1) / 2]) - np.einsum("nij,nj->ni", M, center)
    return np.concatenate([M, t[:, :, None]], axis=2)


def invert_affine(A: np.ndarray) -> np.ndarray:
    """Inverse of affine maps ``[N, 2, 3]``."""
    M_inv = np.linalg.inv(A[:, :, :2])
    return np.concatenate([M_inv, -np.einsum("nij,nj->ni", M_inv, A[:, :, 2])[:, :, None]], 2)


def apply_affine(A: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Map ``points [N, K, 2]`` by ``A [N, 2, 3]``."""
    return np.einsum("nij,nkj->nki", A[:, :, :2], points) + A[:, None, :, 2]


def as_tensor_frames(frames: np.ndarray | torch.Tensor) -> torch.Tensor:
    """Frames as a tensor without a copy, unless numpy marks them read-only (e.g. from PIL)."""
    if isinstance(frames, np.ndarray) and not frames.flags.writeable:
        frames = frames.copy()  # torch refuses to wrap read-only memory without a warning
    return torch.as_tensor(frames)


def crop_images(
    frames: np.ndarray | torch.Tensor,
    frame_index: np.ndarray,
    A: np.ndarray,
    out_size: tuple[int, int],
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """Warp crops out of frames (bilinear, black outside the image).

    Each frame is converted to float once and all its crops are sampled in one
    ``grid_sample`` call (the grids are stacked along the height), so a batch of large
    frames is never copied once per crop.

    Args:
        frames: ``uint8 [B, H, W, 3]`` RGB frames (numpy or torch).
        frame_index: ``[N]`` frame of each crop.
        A: ``[N, 2, 3]`` image -> crop affines from :func:`crop_affine`.
        out_size: ``(height, width)`` of the crops.
        device: where to sample.

    Returns:
        ``float32 [N, 3, height, width]`` in 0-255 units.
    """
    Hc, Wc = out_size
    frame_index = np.asarray(frame_index, dtype=np.int64)
    N = len(frame_index)
    out = torch.zeros(N, 3, Hc, Wc, dtype=torch.float32, device=device)
    if N == 0:
        return out
    frames_t = as_tensor_frames(frames)
    Hi, Wi = frames_t.shape[1:3]
    A_inv = torch.as_tensor(invert_affine(A), dtype=torch.float64)
    v, u = torch.meshgrid(
        torch.arange(Hc, dtype=torch.float64), torch.arange(Wc, dtype=torch.float64), indexing="ij"
    )
    uv1 = torch.stack([u, v, torch.ones_like(u)], -1)  # [Hc, Wc, 3]
    src = torch.einsum("nij,hwj->nhwi", A_inv, uv1)  # crop pixel -> image pixel
    # align_corners=True: -1 and +1 are the centres of the first and last pixels
    norm = torch.tensor([2.0 / max(Wi - 1, 1), 2.0 / max(Hi - 1, 1)], dtype=torch.float64)
    grid = (src * norm - 1.0).to(torch.float32).to(device)
    for b in np.unique(frame_index):
        sel = np.flatnonzero(frame_index == b)
        img = frames_t[int(b)].to(device).permute(2, 0, 1)[None].float()
        g = grid[torch.as_tensor(sel, device=device)].reshape(1, len(sel) * Hc, Wc, 2)
        res = F.grid_sample(img, g, mode="bilinear", padding_mode="zeros", align_corners=True)
        out[torch.as_tensor(sel, device=device)] = res.reshape(3, len(sel), Hc, Wc).transpose(0, 1)
    return out


def normalize(
    crops: torch.Tensor,
    mean: tuple[float, float, float] = IMAGENET_MEAN,
    std: tuple[float, float, float] = IMAGENET_STD,
) -> torch.Tensor:
    """``(crops - mean) / std`` per RGB channel; ``crops [N, 3, H, W]`` in 0-255 units."""
    m = torch.as_tensor(mean, dtype=crops.dtype, device=crops.device).view(1, 3, 1, 1)
    s = torch.as_tensor(std, dtype=crops.dtype, device=crops.device).view(1, 3, 1, 1)
    return (crops - m) / s


def heatmap_to_image(
    coords: np.ndarray,
    A: np.ndarray,
    in_size: tuple[int, int],
    heatmap_size: tuple[int, int],
) -> np.ndarray:
    """Heatmap pixels -> image pixels.

    Args:
        coords: ``[N, K, 2]`` ``(x, y)`` in heatmap pixels.
        A: ``[N, 2, 3]`` image -> crop affines used to make the crops.
        in_size: model input ``(height, width)``.
        heatmap_size: heatmap ``(height, width)``.

    Returns:
        ``[N, K, 2]`` image pixels.
    """
    (H, W), (h, w) = in_size, heatmap_size
    stride = np.array([(W - 1) / max(w - 1, 1), (H - 1) / max(h - 1, 1)])
    return apply_affine(invert_affine(A), np.asarray(coords, dtype=np.float64) * stride)


def image_to_heatmap(
    points: np.ndarray,
    A: np.ndarray,
    in_size: tuple[int, int],
    heatmap_size: tuple[int, int],
) -> np.ndarray:
    """Image pixels ``[N, K, 2]`` -> heatmap pixels (inverse of :func:`heatmap_to_image`)."""
    (H, W), (h, w) = in_size, heatmap_size
    stride = np.array([(W - 1) / max(w - 1, 1), (H - 1) / max(h - 1, 1)])
    return apply_affine(A, np.asarray(points, dtype=np.float64)) / stride
