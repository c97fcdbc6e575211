"""Reward terms on real motion (cmu_walk seen by a static virtual camera) and Yu et al.
2021's two 2D cues. Values measured when the defaults were set, seed-0 camera:

    case        pos    vel    (vel with the old per-frame alpha 400)
    reference   1.00   1.00   1.00
    frozen      0.13   0.32   0.97
    reversed    0.08   0.02   0.90
    delayed 5   0.54   0.46   0.98
    mirrored    0.07   0.62   0.99
"""

import math

import pytest
import torch
from mimic2dm.tasks.tracking2d.rewards import (
    RewardConfig,
    contact_reward,
    foot_ball_reward,
    orientation_reward,
    reward_terms,
    scale_reward,
)

from mimic2dm.utils.paths import mocap_dir

MOCAP = mocap_dir()
PAIRS = torch.tensor([[5, 6], [11, 12]])  # COCO-17 (left, right) shoulders, hips
H = 1080.0


@pytest.fixture(scope="module")
def walk():
    """cmu_walk at 30 fps seen by one static virtual camera: ``uv [T, 17, 2]``, ``mask``, and the
    normalised actions that would hold the retargeted reference pose ``[T, 28]``."""
    if not (MOCAP / "cmu_walk.npz").is_file():
        pytest.skip(f"no cmu_walk.npz in {MOCAP}")
    from mimic2dm.characters import load_character, mocap
    from mimic2dm.characters.retarget import retarget_human
    from mimic2dm.motion.synth import synthesize_views

    clip = mocap.load_cmu_clip(MOCAP / "cmu_walk.npz")
    m = synthesize_views(
        mocap.human_keypoints(clip).numpy()[::2], "coco17", 30.0, camera="static", seed=0
    )
    spec = load_character("humanoid")
    lo, hi = torch.tensor(spec.joint_range, dtype=torch.float32).T
    q = retarget_human(clip, spec)[::2, 7:].float()
    act = (
        (q - torch.tensor(spec.default_pose.dof_pos, dtype=torch.float32)) / (0.5 * (hi - lo))
    ).clamp(-1, 1)
    uv = torch.tensor(m.keypoints[0], dtype=torch.float32)
    assert m.image_size[1] == H
    return uv, torch.tensor(m.confidence[0] > 0.5), act


def case_terms(uv, mask, act, sim, sim_act=None, cfg=None):
    """Mean of every term over the clip for a simulated keypoint track ``sim [T, K, 2]``."""
    a = act if sim_act is None else sim_act
    T = uv.shape[0]
    t = reward_terms(sim[1:], uv[1:], mask[1:], sim[:-1], uv[:-1], mask[:-1], torch.full((T - 1,), H),
                     a[1:], a[:-1], cfg or RewardConfig(), control_hz=30.0, ori_pairs=PAIRS)  # fmt: skip
    return {k: float(v.mean()) for k, v in t.items()}


def test_reference_scores_one_and_wrong_motions_score_well_below(walk):
    uv, mask, act = walk
    T = uv.shape[0]
    idx = torch.arange(T)
    root_u = uv[:, 11:13, 0].mean(1, keepdim=True)
    mirrored = uv.clone()
    # reflected about the hips' vertical: facing the other way
    mirrored[..., 0] = 2 * root_u - uv[..., 0]
    ref = case_terms(uv, mask, act, uv)
    assert ref["pos"] > 0.999 and ref["vel"] > 0.999 and ref["ori"] == 1.0
    assert ref["reg"] > 0.95  # the reference's own joint targets change smoothly
    bounds = {  # case: (sim, max pos, max vel)
        "frozen": (uv[:1].expand(T, -1, -1), 0.3, 0.5),
        "reversed": (uv.flip(0), 0.2, 0.1),
        "delayed 5": (uv[(idx - 5).clamp_min(0)], 0.7, 0.65),
        "mirrored": (mirrored, 0.3, 0.75),
    }
    for name, (sim, max_pos, max_vel) in bounds.items():
        got = case_terms(uv, mask, act, sim)
        assert got["pos"] < max_pos and got["vel"] < max_vel, (name, got)
    assert case_terms(uv, mask, act, mirrored)["ori"] < 0.05  # the facing hint sees the mirror


def test_velocity_is_per_second_and_old_scale_was_flat(walk):
    """Velocities in image heights / s: the same clip at another control rate keeps its
    score; the old per-frame sharpness (400 on per-frame errors) rated a frozen body 0.97."""
    uv, mask, act = walk
    frozen = uv[:1].expand(uv.shape[0], -1, -1)
    # per-frame alpha 400 at 30 Hz, in per-second units
    old = RewardConfig(alpha_vel=400.0 / 30.0**2)
    assert case_terms(uv, mask, act, frozen, cfg=old)["vel"] > 0.95
    slow = uv[::2]  # the same motion sampled at 15 Hz
    t = reward_terms(slow[:1].expand(slow.shape[0] - 1, -1, -1), slow[1:], mask[::2][1:], slow[:1].expand(slow.shape[0] - 1, -1, -1),
                     slow[:-1], mask[::2][:-1], torch.full((slow.shape[0] - 1,), H), act[::2][1:], act[::2][:-1],
                     RewardConfig(), control_hz=15.0)  # fmt: skip
    assert float(t["vel"].mean()) == pytest.approx(
        case_terms(uv, mask, act, frozen)["vel"], abs=0.08
    )


def test_regulariser_spans_its_range_across_action_noise(walk):
    uv, mask, act = walk
    g = torch.Generator().manual_seed(0)
    reg = {s: case_terms(uv, mask, act, uv, act + s * torch.randn(act.shape, generator=g))["reg"]
           for s in (0.05, 0.2)}  # fmt: skip
    rand = case_terms(uv, mask, act, uv, torch.rand(act.shape, generator=g) * 2 - 1)["reg"]
    assert 0.85 < reg[0.05] < 0.97  # training's default exploration noise is visible
    assert 0.3 < reg[0.2] < 0.6
    assert rand < 0.05


def test_orientation_hint_known_answers():
    ref = torch.zeros(4, 17, 2)
    # shoulders: the right one left in the image (facing the camera)
    ref[:, 5, 0], ref[:, 6, 0] = 600.0, 500.0
    ref[:, 11, 0], ref[:, 12, 0] = 580.0, 520.0
    mask = torch.ones(4, 17, dtype=torch.bool)
    sim = ref.clone()
    sim[1, [5, 6, 11, 12], 0] = sim[1, [6, 5, 12, 11], 0]  # turned away: both pairs swapped
    sim[2, [5, 6], 0] = sim[2, [6, 5], 0]  # shoulders swapped only
    mask[3, 5] = False  # shoulder pair unobserved; hips swapped
    sim[3, [11, 12], 0] = sim[3, [12, 11], 0]
    h = torch.full((4,), H)
    r = orientation_reward(sim, ref, mask, PAIRS, h, 0.02)
    assert r.tolist() == pytest.approx([1.0, 0.0, 0.5, 0.0])
    # a side view: a pair closer than the margin counts only in proportion
    side = ref.clone()
    side[:, 6, 0] = 600.0 - 0.005 * H
    swapped = side.clone()
    swapped[:, [5, 6], 0] = side[:, [6, 5], 0]
    r = orientation_reward(swapped, side, mask, PAIRS[:1], h, 0.02)
    assert r[0].item() == pytest.approx(1.0 - 0.25, abs=1e-5)
    none = torch.zeros(1, 17, dtype=torch.bool)
    assert orientation_reward(sim[:1], ref[:1], none, PAIRS, h[:1], 0.02).item() == 1.0


def test_contact_cue_known_answers():
    speed = torch.tensor([[0.0, 1.0], [0.0, 1.0], [0.5, 1.0], [0.01, 0.02], [0.01, 0.02]])
    ok = torch.tensor([[True, True]] * 4 + [[False, True]])
    contact = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    r = contact_reward(speed, ok, contact, 0.07)
    # still foot touching; still foot in the air (the moving one's contact does not count);
    # no still foot; one of two still feet touching; the unobserved still foot ignored
    assert r.tolist() == pytest.approx([1.0, 0.0, 1.0, 0.5, 1.0])


def test_contact_term_through_reward_terms():
    """The term reads the reference foot's speed in image heights / s from the two frames."""
    prev = torch.zeros(2, 17, 2)
    ref = prev.clone()
    ref[:, 16, 0] = 0.5 * H / 30.0  # right ankle moves 0.5 H/s, the left one stands still
    mask = torch.ones(2, 17, dtype=torch.bool)
    a = torch.zeros(2, 3)
    flags = torch.tensor([[0.0, 1.0], [1.0, 0.0]])  # contact columns: (left foot, right foot)
    t = reward_terms(ref, ref, mask, prev, prev, mask, torch.full((2,), H), a, a, RewardConfig(),
                     control_hz=30.0, contact=(torch.tensor([15, 16]), flags))  # fmt: skip
    assert t["contact"].tolist() == [0.0, 1.0]
    assert math.isclose(t["pos"][0].item(), 1.0)


def test_scale_term_sees_a_depth_error_that_pos_barely_does(walk):
    """The walk seen 5 % smaller about its root (the body ~0.3 m further away at 6 m):
    within a few pixels per keypoint, so ``pos`` stays near 1, while ``scale`` drops to ~0.6;
    the reference scores 1, and a mirrored body of the right size keeps ``scale`` at 1."""
    uv, mask, act = walk
    root = uv[:, 11:13].mean(1, keepdim=True)
    smaller = root + 0.95 * (uv - root)
    ref = case_terms(uv, mask, act, uv)
    got = case_terms(uv, mask, act, smaller)
    assert ref["scale"] > 0.999
    assert got["pos"] > 0.95 and 0.5 < got["scale"] < 0.7, got
    larger = root + 1.05 * (uv - root)
    assert 0.5 < case_terms(uv, mask, act, larger)["scale"] < 0.7  # symmetric in the log ratio
    mirrored = uv.clone()
    mirrored[..., 0] = 2 * root[..., 0] - uv[..., 0]
    assert case_terms(uv, mask, act, mirrored)["scale"] > 0.999  # a size cue, not a pose cue
    none = torch.zeros_like(mask)
    assert torch.equal(scale_reward(smaller, uv, none, 200.0), torch.ones(uv.shape[0]))


def test_foot_ball_term_scores_the_ball_seen_from_the_feet_near_it():
    """``foot_ball``: the error of the ball's offset from a foot whose reference is near the
    reference ball; a foot far from it, or an unseen ball, scores 1."""
    ref = torch.zeros(4, 17, 2)
    ref[:, 15] = torch.tensor([100.0, 900.0])  # left ankle
    ref[:, 16] = torch.tensor([600.0, 900.0])  # right ankle, far from the ball
    sim = ref.clone()
    ball = torch.tensor([[150.0, 950.0]]).expand(4, 2).clone()  # 71 px from the left ankle
    sim_ball = ball.clone()
    sim_ball[1, 0] += 54.0  # 0.05 H off -> exp(-400 * 0.0025) = e^-1
    sim[2, 15, 0] -= 54.0  # the foot off by as much: the same offset error
    valid = torch.tensor([True, True, True, False])
    sim_ball[3, 0] += 500.0  # unseen: no score
    feet, h = torch.tensor([15, 16]), torch.full((4,), H)
    mask = torch.ones(4, 17, dtype=torch.bool)
    r = foot_ball_reward(sim, ref, mask, (sim_ball, ball, valid), feet, h, 0.1, 400.0)
    assert r.tolist() == pytest.approx([1.0, math.exp(-1), math.exp(-1), 1.0], rel=1e-5)
    far = foot_ball_reward(sim, ref, mask, (sim_ball, ball, valid), feet, h, 0.05, 400.0)
    assert far.tolist() == pytest.approx([1.0] * 4)  # 71 px is beyond 0.05 H: no foot near
    a = torch.zeros(4, 3)
    flags = torch.zeros(4, 2)
    t = reward_terms(sim, ref, mask, sim, ref, mask, h, a, a, RewardConfig(), (sim_ball, ball, valid),
                     contact=(feet, flags))  # fmt: skip
    assert torch.allclose(t["foot_ball"], r)
    assert "foot_ball" not in reward_terms(sim, ref, mask, sim, ref, mask, h, a, a, RewardConfig(),
                                           (sim_ball, ball, valid))  # fmt: skip
