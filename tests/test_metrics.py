"""Known-answer tests of the evaluation metrics (docs/design.md section 10)."""

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


def test_reprojection_error_is_capped_and_counts_points_behind_the_camera_at_the_cap():
    pred = torch.tensor([[[1e7, 0.0], [3.0, 4.0], [3.0, 4.0]]])  # [T=1, K=3, 2] at 1080p
    ref = torch.zeros(1, 3, 2)
    mask = torch.ones(1, 3, dtype=torch.bool)
    front = torch.tensor([[True, True, False]])
    err = metrics.reprojection_errors(pred, ref, mask, image_height=1080, front=front)
    assert err[0].tolist() == [metrics.ERROR_CAP_PX, 5.0, metrics.ERROR_CAP_PX]
    assert metrics.reprojection_errors(pred, ref, mask, 1080)[0, 2] == pytest.approx(5.0)


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


def test_foot_skating_counts_only_feet_in_contact():
    # two feet over 3 frames at 10 fps: foot 0 on the ground sliding 2 cm/frame in x,
    # foot 1 lifted (0.2 m) and moving fast: only foot 0 counts -> 0.02 m * 10 / s
    feet = torch.zeros(3, 2, 3)
    feet[:, 0, 0] = torch.tensor([0.0, 0.02, 0.04])
    feet[:, 1, 0] = torch.tensor([0.0, 1.0, 2.0])
    feet[:, 1, 2] = 0.2
    h = feet[..., 2]
    assert metrics.foot_skating(feet, h, fps=10.0) == pytest.approx(0.2)
    feet[:, 0, 2] = 0.3  # both feet in the air: no skating at all
    assert metrics.foot_skating(feet, feet[..., 2], fps=10.0) == pytest.approx(0.0)
    # a vertical move of a grounded foot is not skating
    still = torch.zeros(2, 1, 3)
    still[1, 0, 2] = 0.01
    assert metrics.foot_skating(still, still[..., 2], fps=30.0) == pytest.approx(0.0)


def test_ground_penetration_and_floating_known_answers():
    # frames: lowest foot at -0.01, +0.1 (no contact), 0.0, +0.3 (no contact)
    h = torch.tensor([[-0.01, 0.2], [0.1, 0.4], [0.0, 0.5], [0.3, 0.3]])
    assert metrics.ground_penetration_mm(h) == pytest.approx(10.0 / 4)
    assert metrics.floating_mm(h) == pytest.approx((100.0 + 300.0) / 2)
    grounded = torch.zeros(5, 2)
    assert metrics.floating_mm(grounded) == 0.0 and metrics.ground_penetration_mm(grounded) == 0.0
    assert metrics.foot_contact(h).tolist() == [
        [True, False],
        [False, False],
        [True, False],
        [False, False],
    ]


def test_plausibility_of_a_standing_character_is_clean_and_sinking_shows():
    from mimic2dm.characters import load_character

    spec = load_character("humanoid")
    from mimic2dm.characters.feet import character_feet

    feet = character_feet(spec)
    idx, rest = feet
    assert len(idx) == 2 and ((rest > 0.02) & (rest < 0.2)).all()  # ankles above the sole
    p = spec.default_pose
    d = lambda x: torch.tensor(x, dtype=torch.float64)[None]  # noqa: E731
    kp = spec.tree.keypoints(spec.site_offsets, d(p.root_pos), d(p.root_quat), d(p.dof_pos)).float()
    still = kp.expand(10, -1, -1).clone()
    m = metrics.plausibility(still, feet, fps=30.0)
    assert m == pytest.approx(
        {"foot_skating_m_s": 0.0, "ground_penetration_mm": 0.0, "floating_mm": 0.0}
    )
    sunk = still.clone()
    sunk[..., 2] -= 0.02  # 2 cm into the floor
    assert metrics.plausibility(sunk, feet, 30.0)["ground_penetration_mm"] == pytest.approx(
        20.0, abs=1e-3
    )
    up = still.clone()
    up[..., 2] += 0.5  # hovering half a metre
    assert metrics.plausibility(up, feet, 30.0)["floating_mm"] == pytest.approx(500.0, abs=1e-3)
    slide = still.clone()
    slide[..., 0] += torch.arange(10.0)[:, None] * 0.01  # 1 cm/frame at 30 fps
    assert metrics.plausibility(slide, feet, 30.0)["foot_skating_m_s"] == pytest.approx(
        0.3, abs=1e-4
    )
