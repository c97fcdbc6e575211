"""Adaptive state initialisation (docs/design.md section 7): normalised scores with a
diverse softmax, first-fill states kept until replaced, rescoring, start-frame rules."""

import math

import pytest
import torch
from fake_engine import KinematicEngine
from mimic2dm.tasks.tracking2d.asi import ASIConfig, StateBuffers
from mimic2dm.tasks.tracking2d.config import TrackingConfig
from mimic2dm.tasks.tracking2d.reference import ReferenceLibrary, clip_from_motion
from mimic2dm.tasks.tracking2d.source import ClipReference
from mimic2dm.tasks.tracking2d.task import Tracking2DTask
from task_helpers import standing_clip

from mimic2dm.engines.base import SimState


def toy_states(F: int, value: float = 0.0) -> SimState:
    z = lambda *s: torch.full((F, *s), value)  # noqa: E731
    return SimState(z(3), z(4), z(3), z(3), z(2), z(2), z(0, 3), z(0, 4), z(0, 3), z(0, 3))


def buffers(F=4, M=8, **cfg) -> StateBuffers:
    return StateBuffers(
        toy_states(F),
        torch.ones(F, dtype=torch.bool),
        ASIConfig(capacity=M, **{"start_sampling": "uniform", **cfg}),
    )


def fill(buf: StateBuffers, frame: int, values: torch.Tensor) -> None:
    """Score every slot of ``frame``'s buffer with ``values [M]``."""
    M = buf.scores.shape[1]
    buf.rescore(torch.full((M,), frame), torch.arange(M), values)


def test_scores_are_normalised_so_scale_does_not_matter_and_sampling_stays_diverse():
    g = torch.Generator().manual_seed(0)
    spread = torch.randn(8, generator=g)
    probs = {}
    for scale in (1.0, 1000.0):  # returns of any magnitude (rl-games hands de-normalised values)
        buf = buffers(F=2)
        for f in range(2):
            # frames differ a lot; slots within a frame by about one std
            fill(buf, f, scale * spread + 50.0 * scale * f)
        probs[scale] = buf.probabilities(torch.tensor([0, 1]))
        eff = buf.effective_states()
        assert buf.stats()["asi/effective_states"] == pytest.approx(eff)
        # the std of all values is dominated by the frame gap: within a buffer, T = 1 is near uniform
        assert 6.0 < eff <= 8.0
    assert torch.allclose(probs[1.0], probs[1000.0], atol=1e-5)
    greedy = buffers(F=1, temperature=0.01)
    fill(greedy, 0, spread)
    assert greedy.effective_states() < 1.5  # a cold softmax is (nearly) greedy


def test_first_fill_states_are_kept_and_sampled_until_replaced():
    buf = buffers(F=1, M=4)
    buf.states["root_pos"][0, :, 0] = torch.tensor([0.0, 1.0, 2.0, 3.0])
    buf.rescore(torch.tensor([0, 0]), torch.tensor([0, 1]), torch.tensor([5.0, -5.0]))
    p = buf.probabilities(torch.tensor([0]))[0]
    # unscored slots 2, 3 weigh as the best scored one: they are still drawn
    assert p[2] == pytest.approx(p[0]) and p[3] == pytest.approx(p[0]) and p[1] < p[0]
    g = torch.Generator().manual_seed(0)
    picks = buf.sample_states(torch.zeros(400, dtype=torch.long), g).root_pos[:, 0]
    assert (picks == 2.0).any() and (picks == 3.0).any()
    # a visited state takes an unscored slot first, then the lowest score
    s = toy_states(1, 9.0)
    assert int(buf.update(torch.tensor([0]), s, torch.tensor([0.0]))) == 1
    assert torch.isfinite(buf.scores[0]).sum() == 3


def test_rescoring_on_sample_and_periodic_sweep():
    buf = buffers(F=1, M=4, iteration_steps=2, rescore_every=3)
    fill(buf, 0, torch.tensor([1.0, 2.0, 3.0, 4.0]))
    # the critic changed its mind about slot 3
    buf.rescore(torch.tensor([0]), torch.tensor([3]), torch.tensor([-10.0]))
    assert buf.scores[0, 3] == -10.0 and buf.stats()["asi/rescored"] == 5
    g = torch.Generator().manual_seed(0)
    for _ in range(3 * 2):  # three iterations of two steps
        assert not buf.rescoring
        buf.note_step(torch.zeros(1, dtype=torch.long), torch.zeros(1, dtype=torch.bool))
    assert buf.iteration == 3 and buf.rescoring
    # in a sweep iteration each draw takes the least recently scored slot
    buf.scored_at[0] = torch.tensor([2, 0, 1, 2])
    _, slot = buf.sample(torch.tensor([0]), g)
    assert slot.item() == 1
    buf.rescore(torch.tensor([0]), slot, torch.tensor([7.0]))
    _, slot = buf.sample(torch.tensor([0]), g)
    assert slot.item() == 2 and buf.scored_at[0, 1] == 3


def test_inverse_count_uses_samples_of_the_current_iteration():
    buf = buffers(F=3, M=2, start_sampling="inverse_count", iteration_steps=2)
    frames = torch.tensor([0, 0, 0, 1])
    buf.note_step(frames, torch.zeros(4, dtype=torch.bool))
    assert buf.sample_counts.tolist() == [3.0, 1.0, 0.0]
    w = buf.frame_weights()
    assert (w / w.sum()).tolist() == pytest.approx(
        torch.tensor([1 / 4, 1 / 2, 1.0]).div(1.75).tolist()
    )
    g = torch.Generator().manual_seed(0)
    starts = buf.sample_frames(2000, g)
    assert (starts == 2).float().mean() == pytest.approx(1 / 1.75, abs=0.04)
    # the iteration ends: counts start afresh
    buf.note_step(frames, torch.zeros(4, dtype=torch.bool))
    assert buf.sample_counts.sum() == 0 and buf.iteration == 1
    assert torch.allclose(buf.frame_weights(), torch.ones(3))


def test_failure_prioritised_start_frames():
    buf = buffers(
        F=4, M=2, start_sampling="failure", failure_mix=0.5, failure_decay=0.5, iteration_steps=1
    )
    assert torch.allclose(buf.frame_weights(), torch.full((4,), 0.25))  # no failure yet: uniform
    frames = torch.tensor([0, 2, 2, 3])
    failed = torch.tensor([False, True, True, False])
    buf.note_step(frames, failed)  # two episodes terminated early at frame 2
    assert buf.failure_counts.tolist() == [0.0, 0.0, 1.0, 0.0]  # 2, decayed by the iteration's end
    assert buf.frame_weights().tolist() == pytest.approx([0.125, 0.125, 0.625, 0.125])
    buf.valid_starts[2] = False  # a frame episodes may not start at never draws failures
    assert buf.frame_weights()[2] == 0.0


def test_failure_lead_spreads_each_failure_over_the_frames_before_it_within_its_clip():
    # two clips of 4 and 5 frames: the last frame of each has no future (not a start)
    valid = torch.tensor([1, 1, 1, 0, 1, 1, 1, 1, 0], dtype=torch.bool)
    cfg = ASIConfig(capacity=2, start_sampling="failure", failure_mix=1.0, failure_lead=2)
    buf = StateBuffers(toy_states(9), valid, cfg)
    counts = torch.zeros(9)
    counts[2], counts[5], counts[7] = 3.0, 2.0, 6.0
    spread = buf.spread_failures(counts)
    # frame 2 -> 0, 1, 2; frame 5 (second frame of clip 2) -> 4, 5 only, never into clip 1;
    # frame 7 -> 5, 6, 7
    assert spread.tolist() == pytest.approx([1, 1, 1, 0, 1, 1 + 2, 2, 2, 0])
    assert spread.sum() == pytest.approx(counts.sum())  # nothing lost or invented
    buf.failure_counts = counts
    w = buf.frame_weights()
    assert w[3] == 0 and w[8] == 0 and w[4] > 0  # clip ends never start an episode
    assert torch.equal(
        StateBuffers(
            toy_states(9), valid, ASIConfig(capacity=2, start_sampling="uniform")
        ).spread_failures(counts),
        counts,
    )
    with pytest.raises(ValueError, match="failure_lead"):
        ASIConfig(failure_lead=-1)


def test_state_dict_round_trip_and_older_checkpoints():
    buf = buffers(F=3, M=2, start_sampling="inverse_count", iteration_steps=3)
    fill(buf, 1, torch.tensor([2.0, 3.0]))
    buf.note_step(torch.tensor([1, 2]), torch.tensor([True, False]))
    other = buffers(F=3, M=2, start_sampling="inverse_count", iteration_steps=3)
    other.load_state_dict(buf.state_dict())
    for k in (
        "scores",
        "scored_at",
        "sample_counts",
        "failure_counts",
        "value_stats",
        "start_counts",
    ):
        assert torch.equal(getattr(other, k), getattr(buf, k)), k
    assert other.iteration_step == 1 and other.value_std() == pytest.approx(buf.value_std())
    old = {k: buf.state_dict()[k] for k in ("states", "scores", "start_counts")} | {
        "replacements": 4
    }
    other.load_state_dict(old)  # older checkpoints stored only these
    assert (
        other.replacements == 4 and other.iteration == 0 and other.scored_at[1].tolist() == [0, 0]
    )
    assert math.isclose(other.value_std(), 1.0)


def test_task_rescores_the_start_state_and_counts_samples():
    m2 = standing_clip("humanoid", frames=20)
    lib = ReferenceLibrary([clip_from_motion(m2, 30.0, "c")], m2.keypoint_set)
    cfg = TrackingConfig(
        initial_state="default_pose",
        initial_ground=False,
        asi=ASIConfig(start_sampling="inverse_count", iteration_steps=100),
    )
    task = Tracking2DTask(KinematicEngine("humanoid", 4), ClipReference(lib, 4, 1), cfg)
    task.observe()
    assert (task.start_slot >= 0).all() and (task.steps == 0).all()
    g = task.source.global_frame(torch.arange(4), task.frame)
    task.observe_values(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    assert (
        task.asi.scores[g, task.start_slot].tolist() == [1.0, 2.0, 3.0, 4.0]
        or len(set(g.tolist())) < 4
    )
    assert torch.isfinite(task.asi.scores[g, task.start_slot]).all()
    task.step(torch.zeros(4, task.action_dim))
    assert task.asi.sample_counts.sum() == 4 and task.asi.iteration_step == 1
    ep = task.episode_state()
    assert "start_slot" in ep["tensors"]
    del ep["tensors"]["start_slot"]  # an older checkpoint
    task.load_episode_state(ep)
    assert (task.start_slot == -1).all()


def test_update_keeps_the_best_of_stored_and_new_and_matches_one_by_one_insertion():
    buf = buffers(F=3, M=2)
    fill(buf, 0, torch.tensor([1.0, 2.0]))
    fill(buf, 1, torch.tensor([1.0, 2.0]))
    fill(buf, 2, torch.tensor([1.0, 2.0]))
    states = toy_states(6)
    states.root_pos[:, 0] = torch.arange(6.0)
    frames = torch.tensor([0, 0, 1, 2, 2, 0])
    values = torch.tensor([3.0, 5.0, 0.5, 4.0, float("nan"), 2.0])
    assert int(buf.update(frames, states, values)) == 3
    # frame 0: 5 and 3 displace 1 and 2 (a new 2.0 does not displace a stored 2.0)
    assert sorted(buf.scores[0].tolist()) == [3.0, 5.0]
    assert sorted(buf.states["root_pos"][0, :, 0].tolist()) == [0.0, 1.0]
    # frame 1: 0.5 beats nothing; frame 2: the non-finite value is ignored, 4.0 goes in
    assert sorted(buf.scores[1].tolist()) == [1.0, 2.0]
    assert sorted(buf.scores[2].tolist()) == [2.0, 4.0]
    assert 3.0 in buf.states["root_pos"][2, :, 0].tolist()
    # random batches: the same buffers as inserting one by one, best first, over the lowest
    g = torch.Generator().manual_seed(1)
    for _ in range(20):
        fast, slow = buffers(F=4, M=3), buffers(F=4, M=3)
        fill(fast, 1, torch.tensor([0.0, 1.0, 2.0]))
        fill(slow, 1, torch.tensor([0.0, 1.0, 2.0]))
        n = 12
        fr = torch.randint(0, 4, (n,), generator=g)
        val = torch.randn(n, generator=g).round(decimals=1)
        st = toy_states(n)
        st.root_pos[:, 0] = torch.arange(float(n))
        fast.update(fr, st, val)
        for i in torch.argsort(val, descending=True, stable=True).tolist():
            low, s = slow.scores[fr[i]].min(0)
            if val[i] > low:
                slow.scores[fr[i], s] = val[i]
                slow.states["root_pos"][fr[i], s] = st.root_pos[i]
        for f in range(4):
            a = sorted(
                zip(fast.scores[f].tolist(), fast.states["root_pos"][f, :, 0].tolist(), strict=True)
            )
            b = sorted(
                zip(slow.scores[f].tolist(), slow.states["root_pos"][f, :, 0].tolist(), strict=True)
            )
            assert [x for x, _ in a] == [x for x, _ in b]
