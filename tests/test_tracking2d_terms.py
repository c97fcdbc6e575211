"""Pure tensor functions of the tracking task: observations, rewards, terminations, ASI."""

import math

import pytest
import torch
from mimic2dm.tasks.common.terms import combine, fallen, proprioception
from mimic2dm.tasks.tracking2d import observations
from mimic2dm.tasks.tracking2d.asi import ASIConfig, StateBuffers
from mimic2dm.tasks.tracking2d.rewards import RewardConfig, masked_sq_error, reward_terms
from mimic2dm.tasks.tracking2d.terminations import reprojection_exceeded

from mimic2dm.engines.base import SimState
from mimic2dm.geometry import rotations as rot

ROOT = torch.tensor([11, 12])


def rand_uv(N=4, K=17, seed=0):
    g = torch.Generator().manual_seed(seed)
    return 400 + 300 * torch.rand(N, K, 2, generator=g)


# --- observations ------------------------------------------------------------------------


def test_normalize_pixels_known_answer():
    uv = torch.tensor([[[960.0 + 150.0, 540.0 - 60.0]]])
    k = torch.tensor([[1500.0, 1200.0, 960.0, 540.0]])
    assert torch.allclose(observations.normalize_pixels(uv, k), torch.tensor([[[0.1, -0.05]]]))


def view_obs(sim, valid, ref, mask, k):
    from mimic2dm.motion.canonical import root_2d
    from mimic2dm.motion.keypoint_sets import COCO17

    roots = torch.stack(
        [
            torch.stack([root_2d(r[None], m[None], COCO17)[0] for r, m in zip(rr, mm, strict=True)])
            for rr, mm in zip(ref, mask, strict=True)
        ]
    )
    return observations.observation_2d(sim, valid, ref, mask, roots, k, ROOT)


def test_view_observation_ignores_resolution_focal_and_principal_point():
    """Resizing the image (pixels and intrinsics scaled, principal point moved) changes nothing."""
    sim, N = rand_uv(), 4
    ref = torch.stack([rand_uv(seed=1), rand_uv(seed=2)], 1)  # [N, n=2, K, 2]
    valid = torch.ones(N, 17, dtype=torch.bool)
    mask = torch.ones(N, 2, 17, dtype=torch.bool)
    k = torch.tensor([1500.0, 1500.0, 960.0, 540.0]).expand(N, 4)
    a = view_obs(sim, valid, ref, mask, k)
    s, shift = 0.37, torch.tensor([13.0, -7.0])
    k2 = torch.cat([k[:, :2] * s, k[:, 2:] * s + shift], -1)
    b = view_obs(sim * s + shift, valid, ref * s + shift, mask, k2)
    assert a.shape == (N, observations.observation_2d_size(17, 2))
    assert torch.allclose(a, b, atol=1e-5)


def test_view_observation_masks_reference_keypoints():
    sim, N = rand_uv(), 4
    ref = torch.stack([rand_uv(seed=1), rand_uv(seed=2)], 1)
    valid = torch.ones(N, 17, dtype=torch.bool)
    mask = torch.ones(N, 2, 17, dtype=torch.bool)
    mask[:, 0, 3] = False
    k = torch.tensor([1500.0, 1500.0, 960.0, 540.0]).expand(N, 4)
    a = view_obs(sim, valid, ref, mask, k)
    ref2 = ref.clone()
    ref2[:, 0, 3] = 1e6  # garbage under the mask
    b = view_obs(sim, valid, ref2, mask, k)
    assert torch.equal(a, b)
    K = 17
    local0 = a[:, 2 * K : 2 * K + 2 * K].reshape(N, K, 2)
    assert (local0[:, 3] == 0).all()
    masks = a[:, 2 * K + 2 * (2 * K) : 2 * K + 2 * (2 * K) + 2 * K].reshape(N, 2, K)
    assert (masks[:, 0, 3] == 0).all() and masks.sum() == N * (2 * K - 1)


def test_proprioception_is_heading_invariant():
    N, B, J = 3, 4, 5
    g = torch.Generator().manual_seed(0)
    pos = torch.randn(N, 3, generator=g)
    q = rot.quat_normalize(torch.randn(N, 4, generator=g))
    v, w = torch.randn(N, 3, generator=g), torch.randn(N, 3, generator=g)
    brot = rot.quat_normalize(torch.randn(N, B, 4, generator=g))
    brot[:, 0] = q
    parents = torch.tensor([-1, 0, 1, 1])
    key = torch.randn(N, 2, 3, generator=g)
    dv = torch.randn(N, J, generator=g)
    a = proprioception(pos, q, v, w, brot, parents, dv, key)
    yaw = rot.quat_from_axis_angle(torch.tensor([0.0, 0, 1]).expand(N, 3), torch.full((N,), 1.3))

    def turn(x):
        return rot.quat_rotate(yaw.reshape(N, *([1] * (x.ndim - 2)), 4).expand(*x.shape[:-1], 4), x)

    qb = rot.quat_mul(yaw[:, None].expand(N, B, 4), brot)
    pos2 = turn(pos) + torch.tensor([5.0, -2.0, 0.0])
    b = proprioception(
        pos2,
        qb[:, 0],
        turn(v),
        turn(w),
        qb,
        parents,
        dv,
        turn(key) + torch.tensor([5.0, -2.0, 0.0]),
    )
    assert a.shape == (N, 1 + 3 + 3 + 6 + 6 * (B - 1) + J + 6)
    assert torch.allclose(a, b, atol=1e-5)


# --- rewards -----------------------------------------------------------------------------


def test_position_reward_known_answers():
    cfg = RewardConfig()
    ref = rand_uv(N=2)
    mask = torch.ones(2, 17, dtype=torch.bool)
    H = torch.full((2,), 1080.0)
    sim = ref.clone()
    sim[1, :, 0] += 0.05 * 1080  # every keypoint off by 5 % of H
    a = torch.zeros(2, 3)
    t = reward_terms(sim, ref, mask, sim, ref, mask, H, a, a, cfg)
    assert t["pos"][0] == pytest.approx(1.0)
    assert t["pos"][1] == pytest.approx(math.exp(-400 * 0.05**2), rel=1e-5)
    assert t["vel"].tolist() == pytest.approx([1.0, 1.0])
    assert t["reg"].tolist() == pytest.approx([1.0, 1.0])
    assert set(t) == {"pos", "vel", "reg", "scale"}
    assert t["scale"].tolist() == pytest.approx([1.0, 1.0])  # a shift keeps the body's size


def test_rewards_ignore_masked_keypoints_and_resolution():
    ref = rand_uv(N=1)
    sim = ref + 10.0
    mask = torch.ones(1, 17, dtype=torch.bool)
    mask[0, 5] = False
    sim_bad = sim.clone()
    sim_bad[0, 5] += 5000.0
    H = torch.tensor([1080.0])
    e1 = masked_sq_error(sim, ref, mask, H)
    assert torch.equal(e1, masked_sq_error(sim_bad, ref, mask, H))
    assert torch.allclose(masked_sq_error(sim * 0.5, ref * 0.5, mask, H * 0.5), e1)
    none = torch.zeros(1, 17, dtype=torch.bool)
    assert masked_sq_error(sim, ref, none, H) == 0.0


def test_combine_renormalises_weights_over_present_terms():
    scales = RewardConfig().scales
    t = {"pos": torch.tensor([1.0]), "vel": torch.tensor([0.0]), "reg": torch.tensor([0.0])}
    assert combine(t, scales).item() == pytest.approx(0.6 / 0.8)  # no object: obj left out
    t["obj"] = torch.tensor([1.0])
    assert combine(t, scales).item() == pytest.approx(0.8)
    # a zero-weight term is still a term (logged) but adds nothing
    assert combine(t, {**scales, "vel": 0.0}).item() == pytest.approx(0.8 / 0.9)
    assert combine({"pos": torch.tensor([0.5])}, {"pos": 2.0}).item() == pytest.approx(0.5)
    with pytest.raises(ValueError, match="no weight"):
        combine({"vel": torch.tensor([1.0])}, {"pos": 1.0})


def test_reward_scales_are_checked():
    with pytest.raises(ValueError, match="scales=\\['post'\\]: expected terms among"):
        RewardConfig(scales={"post": 1.0})
    with pytest.raises(ValueError, match=">= 0"):
        RewardConfig(scales={"pos": -1.0})


def test_object_reward_term():
    cfg = RewardConfig()
    ref = rand_uv(N=2)
    mask = torch.ones(2, 17, dtype=torch.bool)
    a = torch.zeros(2, 3)
    obj = (
        torch.tensor([[100.0, 100.0], [100.0, 100.0]]),
        torch.tensor([[100.0, 100.0], [100.0 + 54.0, 100.0]]),
        torch.tensor([True, True]),
    )
    t = reward_terms(ref, ref, mask, ref, ref, mask, torch.full((2,), 1080.0), a, a, cfg, obj)
    assert t["obj"][0] == pytest.approx(1.0)
    assert t["obj"][1] == pytest.approx(math.exp(-400 * 0.05**2), rel=1e-5)


# --- terminations ------------------------------------------------------------------------


def test_reprojection_termination_threshold_and_mask():
    ref = torch.zeros(3, 17, 2)
    sim = ref.clone()
    sim[1, 4, 0] = 0.12 * 1080 + 1.0
    sim[2, 4, 0] = 0.12 * 1080 + 1.0
    mask = torch.ones(3, 17, dtype=torch.bool)
    mask[2, 4] = False
    out = reprojection_exceeded(sim, ref, mask, torch.full((3,), 1080.0), 0.12)
    assert out.tolist() == [False, True, False]
    assert fallen(torch.tensor([0.1, 0.9]), 0.3).tolist() == [True, False]


# --- ASI buffers -------------------------------------------------------------------------


def toy_states(F: int, value: float = 0.0) -> SimState:
    z = lambda *s: torch.full((F, *s), value)  # noqa: E731
    return SimState(z(3), z(4), z(3), z(3), z(2), z(2), z(0, 3), z(0, 4), z(0, 3), z(0, 3))


def test_asi_replaces_lowest_score_and_prefers_high_scores():
    buf = StateBuffers(
        toy_states(5),
        torch.ones(5, dtype=torch.bool),
        ASIConfig(capacity=3, temperature=0.1, start_sampling="uniform"),
    )
    frames = torch.tensor([2, 2, 2, 2, 4])
    states = toy_states(5)
    states.root_pos[:, 0] = torch.tensor([1.0, 2.0, 3.0, 4.0, 9.0])
    n = buf.update(frames, states, torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]))
    assert n == 4  # frame 2 keeps its three best, frame 4 takes its one; value 1.0 beats nothing
    assert sorted(buf.scores[2].tolist()) == [2.0, 3.0, 4.0]
    assert buf.scores[4].max() == 5.0
    assert sorted(buf.states["root_pos"][2, :, 0].tolist()) == [2.0, 3.0, 4.0]
    g = torch.Generator().manual_seed(0)
    picks = buf.sample_states(torch.full((200,), 2), g).root_pos[:, 0]
    assert (picks == 4.0).float().mean() > 0.9  # exp(score / 0.1): the best state dominates
    n = buf.update(torch.tensor([2]), toy_states(1), torch.tensor([0.5]))
    assert n == 0


def test_asi_inverse_count_start_sampling_and_state_dict():
    cfg = ASIConfig(capacity=2, start_sampling="inverse_count")
    valid = torch.tensor([True, True, True, False])
    buf = StateBuffers(toy_states(4), valid, cfg)
    g = torch.Generator().manual_seed(0)
    buf.sample_counts[0] = 1000.0  # samples collected at frame 0 this iteration
    frames = buf.sample_frames(300, g)
    assert not (frames == 3).any()
    assert (frames == 0).float().mean() < 0.05
    buf.update(torch.tensor([1]), toy_states(1, 7.0), torch.tensor([3.0]))
    other = StateBuffers(toy_states(4), valid, cfg)
    other.load_state_dict(buf.state_dict())
    assert torch.equal(other.scores, buf.scores) and torch.equal(
        other.states["root_pos"], buf.states["root_pos"]
    )
    with pytest.raises(ValueError, match="frames x capacity"):
        StateBuffers(toy_states(5), torch.ones(5, dtype=torch.bool), cfg).load_state_dict(
            buf.state_dict()
        )
    with pytest.raises(ValueError, match="inverse_count, failure"):
        StateBuffers(
            toy_states(2), torch.ones(2, dtype=torch.bool), ASIConfig(start_sampling="sometimes")
        )


def test_asi_ignores_nonfinite_states_and_values():
    buf = StateBuffers(
        toy_states(2),
        torch.ones(2, dtype=torch.bool),
        ASIConfig(capacity=2, start_sampling="uniform"),
    )
    s = toy_states(2)
    s.root_pos[0, 0] = float("nan")
    assert buf.update(torch.tensor([0, 1]), s, torch.tensor([1.0, float("nan")])) == 0
