"""Known-answer tests of the evaluation metrics (DESIGN section 10)."""

import math

import pytest
import torch

from mimic2dm import metrics


def test_reprojection_error_rescales_to_1080p_and_masks():
    pred = torch.tensor([[[3.0, 4.0], [0.0, 0.0]]])  # [T=1, K=2, 2]
    ref = torch.zeros(1, 2, 2)
    mask = torch.tensor([[True, False]])
    err = metrics.reprojection_errors(pred, ref, mask, image_height=540)
    assert err[0, 0] == pytest.approx(10.0)  # 5 px at 540p = 10 px at 1080p
    assert math.isnan(err[0, 1])
    assert metrics.mean_error_2d(err) == pytest.approx(10.0)


def test_success_fails_when_any_frame_exceeds_threshold():
    err = torch.tensor(
        [[[10.0, 20.0], [30.0, float("nan")]], [[10.0, 20.0], [101.0, 5.0]]]
    )  # [2 clips, T=2, K=2]
    ok = metrics.success(err)
    assert ok.tolist() == [True, False]
    assert metrics.success(err, threshold_px=150.0).tolist() == [True, True]
    assert metrics.max_error_per_frame(err)[1].tolist() == [20.0, 101.0]


def test_mpjpe_mm_known_answer():
    gt = torch.zeros(2, 3, 3)
    pred = gt.clone()
    pred[..., 0] = 0.01  # 1 cm everywhere
    assert metrics.mpjpe_mm(pred, gt) == pytest.approx(10.0)
    mask = torch.ones(2, 3, dtype=torch.bool)
    pred[0, 0, 0] = 5.0
    mask[0, 0] = False
    assert metrics.mpjpe_mm(pred, gt, mask) == pytest.approx(10.0)


def test_jitter_zero_for_quadratic_and_known_for_cubic():
    t = torch.arange(10, dtype=torch.float64)
    quad = torch.stack([t**2, 2 * t, torch.ones_like(t)], -1)[:, None, :]  # [T, K=1, 3]
    assert metrics.jitter(quad, fps=30.0) == pytest.approx(0.0, abs=1e-6)
    cubic = (t**3)[:, None, None].expand(10, 1, 1)
    # third difference of t^3 is 6 per frame^3 -> 6 * fps^3 per s^3
    assert metrics.jitter(cubic, fps=2.0) == pytest.approx(6.0 * 8.0)
    with pytest.raises(ValueError, match="4 frames"):
        metrics.jitter(quad[:3], fps=30.0)
