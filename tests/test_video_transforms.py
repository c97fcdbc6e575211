"""Top-down pre-processing and heatmap decoding: known answers and round trips."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing is downloaded in tests

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mimic2dm.video.decode import decode_heatmaps
from mimic2dm.video.transforms import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    apply_affine,
    box_to_center_scale,
    crop_affine,
    crop_images,
    heatmap_to_image,
    image_to_heatmap,
    invert_affine,
    normalize,
)

IN = (256, 192)  # ViTPose input (height, width)
HM = (64, 48)  # its heatmap


def gaussians(centers, size=HM, sigma=2.0) -> torch.Tensor:
    """``[1, K, h, w]`` unit-peak Gaussians at ``centers [(x, y)]`` (heatmap pixels)."""
    h, w = size
    y, x = torch.meshgrid(
        torch.arange(h, dtype=torch.float64), torch.arange(w, dtype=torch.float64), indexing="ij"
    )
    return torch.stack(
        [torch.exp(-((x - a) ** 2 + (y - b) ** 2) / (2 * sigma**2)) for a, b in centers]
    )[None]


# ----------------------------------------------------------------------------- box -> centre/scale
def test_box_to_center_scale_known_answers():
    # tall box: width grows to the 3:4 aspect, then 1.25 padding
    c, s = box_to_center_scale(np.array([[100, 50, 160, 250]]), 192 / 256, padding=1.25)
    np.testing.assert_allclose(c, [[130, 150]])
    np.testing.assert_allclose(s, [[150 * 1.25, 200 * 1.25]])
    # wide box: height grows instead
    c, s = box_to_center_scale(np.array([[0, 0, 300, 30]]), 192 / 256, padding=1.0)
    np.testing.assert_allclose(s, [[300, 400]])
    # rotated by 90 degrees the tall box is wide: 200 x 60 -> 200 x 266.7
    _, s = box_to_center_scale(np.array([[100, 50, 160, 250]]), 192 / 256, padding=1.0, rotation=90)
    np.testing.assert_allclose(s, [[200, 800 / 3]])
    assert np.allclose(s[:, 0] / s[:, 1], 0.75)


def test_crop_affine_maps_box_corners_and_centre():
    center, scale = np.array([[130.0, 150.0]]), np.array([[150.0, 200.0]])
    A = crop_affine(center, scale, IN)
    # UDP: centre -> middle pixel; the region centre +- scale/2 -> [0, W-1] x [0, H-1]
    pts = np.array([[[130, 150], [55, 50], [205, 250]]], float)
    np.testing.assert_allclose(
        apply_affine(A, pts), [[[95.5, 127.5], [0, 0], [191, 255]]], atol=1e-9
    )
    # 180 degrees: the top-left of the region lands at the bottom-right of the crop
    A180 = crop_affine(center, scale, IN, 180.0)
    np.testing.assert_allclose(apply_affine(A180, pts[:, 1:2]), [[[191, 255]]], atol=1e-9)
    # 90 degrees counter-clockwise on screen: a point right of the centre moves up
    A90 = crop_affine(center, np.array([[200.0, 200.0 * 256 / 192]]), IN, 90.0)
    right = apply_affine(A90, np.array([[[140.0, 150.0]]]))[0, 0]
    mid = apply_affine(A90, np.array([[[130.0, 150.0]]]))[0, 0]
    assert right[1] < mid[1] and abs(right[0] - mid[0]) < 1e-9


@settings(max_examples=40, deadline=None)
@given(
    st.floats(20, 600), st.floats(20, 600), st.floats(5, 300), st.floats(5, 300),
    st.sampled_from([0.0, 90.0, 180.0, 270.0, 33.0]),
)  # fmt: skip
def test_image_crop_heatmap_round_trip(x1, y1, w, h, rot):
    boxes = np.array([[x1, y1, x1 + w, y1 + h]])
    c, s = box_to_center_scale(boxes, IN[1] / IN[0], rotation=rot)
    A = crop_affine(c, s, IN, rot)
    pts = np.random.default_rng(0).uniform(0, 700, (1, 9, 2))
    np.testing.assert_allclose(apply_affine(invert_affine(A), apply_affine(A, pts)), pts, atol=1e-8)
    back = heatmap_to_image(image_to_heatmap(pts, A, IN, HM), A, IN, HM)
    np.testing.assert_allclose(back, pts, atol=1e-8)


def test_crop_images_samples_the_affine():
    # image whose pixel value encodes its own coordinates: R = x, G = y (exact in float)
    H, W = 240, 320
    yy, xx = np.mgrid[0:H, 0:W]
    img = np.stack([xx % 256, yy, np.zeros_like(xx)], -1).astype(np.uint8)[None]
    c, s = box_to_center_scale(np.array([[40, 30, 120, 200]]), 0.75, padding=1.0)
    A = crop_affine(c, s, (64, 48))
    crop = crop_images(img, np.array([0]), A, (64, 48))[0]
    assert crop.shape == (3, 64, 48) and crop.dtype == torch.float32
    # every crop pixel shows the image pixel the inverse affine points to (bilinear on a
    # linear ramp is exact); stay inside the image to avoid the black border
    v, u = np.mgrid[0:64, 0:48]
    src = apply_affine(invert_affine(A), np.stack([u, v], -1).reshape(1, -1, 2).astype(float))[0]
    inside = (
        (src[:, 0] >= 0)
        & (src[:, 0] <= W - 1)
        & (src[:, 1] >= 0)
        & (src[:, 1] <= H - 1)
        & (src[:, 0] < 255)
    )
    got = crop.numpy().reshape(3, -1).T[inside]
    np.testing.assert_allclose(got[:, 0], src[inside, 0], atol=1e-3)
    np.testing.assert_allclose(got[:, 1], src[inside, 1], atol=1e-3)
    # outside the image the crop is black
    far = crop_images(
        img, np.array([0]), crop_affine(np.array([[-500.0, -500.0]]), s, (64, 48)), (64, 48)
    )
    assert float(far.abs().max()) == 0.0


def test_crop_images_several_crops_per_frame_and_frames():
    frames = np.random.default_rng(1).integers(0, 255, (3, 50, 60, 3), dtype=np.uint8)
    boxes = np.array([[5, 5, 30, 40], [10, 0, 50, 45], [0, 0, 59, 49]], float)
    c, s = box_to_center_scale(boxes, 0.75)
    A = crop_affine(c, s, (32, 24))
    idx = np.array([2, 0, 2])
    both = crop_images(frames, idx, A, (32, 24))
    for i in range(3):
        one = crop_images(frames[idx[i] : idx[i] + 1], np.array([0]), A[i : i + 1], (32, 24))
        torch.testing.assert_close(both[i], one[0])


def test_normalize_imagenet():
    x = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1).expand(2, 3, 4, 4)
    assert float(normalize(x).abs().max()) < 1e-6
    y = normalize(x + torch.tensor(IMAGENET_STD).view(1, 3, 1, 1))
    torch.testing.assert_close(y, torch.ones_like(y))


# ----------------------------------------------------------------------------- heatmap decoding
CENTERS = [(20.3, 30.7), (5.9, 50.2), (40.5, 10.45), (12.0, 12.0)]


def test_decode_dark_exact_on_gaussians():
    coords, scores = decode_heatmaps(gaussians(CENTERS), "dark", blur_kernel=0)
    np.testing.assert_allclose(coords[0], CENTERS, atol=1e-9)
    assert scores.shape == (1, 4) and np.all(scores > 0.9) and np.all(scores <= 1.0)


def test_decode_dark_with_blur_and_noise():
    hm = gaussians(CENTERS)
    coords, _ = decode_heatmaps(hm, "dark", blur_kernel=11)
    np.testing.assert_allclose(coords[0], CENTERS, atol=0.01)
    noisy = hm + 0.01 * torch.randn(
        hm.shape, generator=torch.Generator().manual_seed(0), dtype=hm.dtype
    )
    coords, _ = decode_heatmaps(noisy, "dark", blur_kernel=11)
    np.testing.assert_allclose(coords[0], CENTERS, atol=0.15)


def test_decode_quarter_and_none():
    c_none, _ = decode_heatmaps(gaussians([(20.3, 30.7)]), "none")
    np.testing.assert_allclose(c_none[0], [[20, 31]])
    c_q, _ = decode_heatmaps(gaussians([(20.3, 30.7)]), "quarter")
    np.testing.assert_allclose(c_q[0], [[20.25, 30.75]])


def test_decode_border_and_flat_maps_stay_finite():
    hm = torch.zeros(2, 2, 16, 12, dtype=torch.float64)
    hm[0, 0, 0, 0] = 1.0  # peak in the corner: no neighbours on one side
    hm[1, 1] = -0.5  # flat negative map (random weights can do this)
    coords, scores = decode_heatmaps(hm, "dark")
    assert np.isfinite(coords).all()
    np.testing.assert_allclose(coords[0, 0], [0, 0])
    assert scores[1, 1] == pytest.approx(-0.5)
    with pytest.raises(ValueError, match="refine"):
        decode_heatmaps(hm, "bogus")
    with pytest.raises(ValueError, match=r"\[N, K, h, w\]"):
        decode_heatmaps(hm[0], "dark")


def test_known_answer_heatmap_to_image_pixels():
    # a person box; the keypoint sits at image pixel (130, 100); where does its heatmap peak
    # land, and does decoding that synthetic heatmap return (130, 100) in image pixels?
    box = np.array([[80, 40, 180, 300]], float)
    c, s = box_to_center_scale(box, 0.75)
    A = crop_affine(c, s, IN)
    target = np.array([[[130.0, 100.0], [95.5, 260.25]]])
    hm_xy = image_to_heatmap(target, A, IN, HM)[0]
    coords, _ = decode_heatmaps(gaussians([tuple(p) for p in hm_xy]), "dark", blur_kernel=0)
    np.testing.assert_allclose(heatmap_to_image(coords, A, IN, HM), target, atol=1e-6)
    # and by hand for the centre: the box centre is the middle of the heatmap ((w-1)/2, (h-1)/2)
    mid = image_to_heatmap(c[:, None], A, IN, HM)[0, 0]
    np.testing.assert_allclose(mid, [23.5, 31.5], atol=1e-9)
