"""Tasks beyond the 2D tracker: the ``dribble`` task (ball observed, rewarded, lost), dog fall detection
on the real engine, multi-view evaluation and ``init_from`` fine-tuning with more views."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from fake_engine import KinematicEngine
from mimic2dm.tasks.base import TaskSpec
from mimic2dm.tasks.common.terms import tilted
from mimic2dm.tasks.dribble import terms as ball_terms
from mimic2dm.tasks.registry import load_task, make_task
from task_helpers import standing_clip

from mimic2dm.geometry import rotations as rot
from mimic2dm.motion.format import save_motion2d

FAST = {"initial_state": "default_pose", "initial_ground": False, "asi": {"enabled": False}}


def _dribble_spec(tmp_path, clip=None, **config) -> TaskSpec:
    path = tmp_path / "ball.npz"
    save_motion2d(
        clip if clip is not None else standing_clip("humanoid", frames=40, ball=True), path
    )
    return TaskSpec("dribble", "humanoid", engine={"name": "mujoco", "num_threads": 1}, objects=("ball",),
                    data=(str(path),), config={**FAST, **config})  # fmt: skip


# ----------------------------------------------------------------------------- pure terms
def test_ball_terms():
    lost = torch.tensor([0, 3, 5])
    far = torch.tensor([[True], [False], [True]])
    seen = torch.tensor([[True], [True], [False]])
    assert ball_terms.count_lost(lost, far, seen).tolist() == [1, 0, 5]  # unseen: unchanged
    h = torch.tensor([1000.0])
    assert ball_terms.ball_far(
        torch.tensor([[[0.0, 0.0]]]), torch.tensor([[[0.0, 201.0]]]), h, 0.2
    ).item()
    assert not ball_terms.ball_far(
        torch.tensor([[[0.0, 0.0]]]), torch.tensor([[[0.0, 199.0]]]), h, 0.2
    ).item()
    p = torch.tensor([[1.4, 0.0, 0.1], [1.0, 1.2, 0.1]])
    assert ball_terms.within_reach(p, torch.tensor([0.0, 0.0, 0.9]), 1.5).tolist() == [True, False]
    q = rot.quat_from_axis_angle(torch.tensor([[0.0, 0, 1]]), torch.tensor([math.pi / 2]))
    s = ball_terms.ball_state(
        torch.zeros(1, 3), q, torch.tensor([[0.0, 2.0, 0.1]]), torch.zeros(1, 3)
    )
    assert torch.allclose(
        s[0, :3], torch.tensor([2.0, 0.0, 0.1]), atol=1e-5
    )  # ahead in the heading frame


def test_tilt_fall_term():
    up = torch.tensor([0.0, 0.0, 1.0])
    x = torch.tensor([[1.0, 0.0, 0.0]]).expand(3, 3)
    q = rot.quat_from_axis_angle(x, torch.tensor([0.0, math.radians(50), math.pi]))
    assert tilted(q, up, 60.0).tolist() == [False, False, True]


# ----------------------------------------------------------------------------- dribble task
def test_dribble_observes_the_ball_and_masks_it_when_undetected(tmp_path):
    clip = standing_clip("humanoid", frames=40, ball=True)
    clip.object_confidence[:, 20:] = 0.0  # not detected from frame 20 on
    spec = _dribble_spec(tmp_path, clip)
    task = load_task("dribble").build(spec, KinematicEngine("humanoid", 2, objects=("ball",)), 0)
    plain = load_task("tracking2d").build(
        TaskSpec("tracking2d", "humanoid", data=spec.data, config=FAST),
        KinematicEngine("humanoid", 2),
        0,
    )
    K, n = task.K, task.cfg.num_future
    assert task.view_dim == plain.view_dim + 2 + n * 3  # one more point: own + reference + mask
    uv, valid, ref_uv, ref_mask, _ = task.view_points()
    assert uv.shape[2] == K + 1 and ref_uv.shape[3] == K + 1 and valid[:, :, K].all()
    starts = torch.tensor([0, 25])
    task.start_episodes(torch.arange(2), starts, task.asi.sample_states(starts, task.gen))
    _, _, _, ref_mask, _ = task.view_points()
    assert ref_mask[0, 0, :, K].all() and not ref_mask[1, 0, :, K].any()
    obs = task.observe()
    assert obs.shape == (2, task.obs_dim) and torch.isfinite(obs).all()
    r = task.step(torch.zeros(2, task.action_dim))
    assert "obj" in r.terms and "foot_ball" in r.terms and "ball_lost" in r.causes


def test_dribble_refuses_a_run_without_a_ball(tmp_path):
    spec = _dribble_spec(tmp_path)
    with pytest.raises(ValueError, match="needs a simulated ball"):
        load_task("dribble").build(spec, KinematicEngine("humanoid", 2), 0)
    path = tmp_path / "noball.npz"
    save_motion2d(standing_clip("humanoid", frames=20), path)
    with pytest.raises(ValueError, match="no ball track"):
        load_task("dribble").build(TaskSpec("dribble", "humanoid", objects=("ball",), data=(str(path),),
                                            config=FAST), KinematicEngine("humanoid", 2, objects=("ball",)), 0)  # fmt: skip


def test_ball_lost_ends_the_episode_on_mujoco(tmp_path):
    """A ball 4 m from where the reference has it ends the episode after ball_lost_steps."""
    task = make_task(_dribble_spec(tmp_path, ball_lost_steps=5, tau_term=50.0), 2)
    states = task.asi.sample_states(torch.zeros(2, dtype=torch.long), task.gen)
    assert torch.allclose(
        states.object_pos[0, 0], torch.tensor([1.0, 0.0, 0.11])
    )  # placed from the 3D track
    states.object_pos[1, 0, :2] += torch.tensor([4.0, 0.0])
    task.start_episodes(torch.arange(2), torch.zeros(2, dtype=torch.long), states)
    ended = []
    for i in range(8):
        r = task.step(torch.zeros(2, task.action_dim))
        ended += [(i, e) for e in range(2) if r.causes["ball_lost"][e]]
    task.close()
    assert ended == [(4, 1)]


def test_reset_ball_rolls_along_its_track(tmp_path):
    """A ball placed at a reset between two kicks stays on its 3D track (its simulation is the
    track's); measured: 0.29-0.30 m off after 8 steps without spin, < 0.005 m with rolling spin."""
    from generator_helpers import MOCAP

    from mimic2dm.characters.dribble_clip import dribble_clip

    if not (MOCAP / "cmu_run.npz").is_file():
        pytest.skip(f"CMU clips not found in {MOCAP}")
    m, d = dribble_clip(MOCAP / "cmu_run.npz", seconds=3.0)
    path = tmp_path / "dribble.npz"
    save_motion2d(m, path)
    spec = TaskSpec("dribble", "humanoid", engine={"name": "mujoco", "num_threads": 1}, objects=("ball",),
                    data=(str(path),), config={**FAST, "early_termination": False})  # fmt: skip
    # two control steps after each kick but the last: the next kick is > 8 steps away
    starts = torch.tensor([int(k * 30.0 / m.fps) + 2 for k in d.kicks[:-1]])
    task = make_task(spec, len(starts))
    track = task.source.lib.clips[0].object3d  # [T, 3] at the control rate
    task.start_episodes(torch.arange(len(starts)), starts, task.asi.sample_states(starts, task.gen))
    for _ in range(8):  # zero actions: the character stands off the ball's path
        task.step(torch.zeros(len(starts), task.action_dim))
    off = (task.engine.get_state().object_pos[:, 0, :2] - track[starts + 8, :2]).norm(dim=-1)
    task.close()
    assert len(starts) >= 2 and off.max() < 0.05, off.tolist()


@pytest.mark.slow
def test_dribble_eval_reports_object_metrics(tmp_path):
    from mimic2dm.tasks.dribble import ENTRY

    from mimic2dm.rl.policy import Policy

    spec = _dribble_spec(tmp_path)
    probe = make_task(spec, 1)
    dims = probe.obs_dim, probe.action_dim
    probe.close()

    class Still:  # holds the default pose: the ball stays 1 m ahead
        env_spec = spec

        def act(self, obs, deterministic=True):
            assert obs.shape[1] == dims[0]
            return torch.zeros(obs.shape[0], dims[1])

    assert Policy  # the real policy class exists; a still policy suffices for the metrics
    rep = ENTRY.evaluate(Still(), list(spec.data), 1, None, None, None, name="still")
    assert rep["object_error_2d_px"] < 20.0 and rep["ball_within_reach"] == 1.0
    # standing still never plays the ball: no touch over the whole clip
    n = rep["sequences"][0]
    assert rep["ball_touches"] == 0 and n["ball_touch_max_gap_s"] > 0.5


# ----------------------------------------------------------------------------- the dog
@pytest.mark.parametrize("character", ["dog", "dog_spine"])
def test_dog_standing_does_not_fall_and_flipped_does(character, tmp_path):
    path = tmp_path / "dog.npz"
    save_motion2d(standing_clip(character, frames=60), path)
    spec = TaskSpec("tracking2d", character, engine={"name": "mujoco", "num_threads": 1}, data=(str(path),),
                    config={**FAST, "fall_height": 0.15, "fall_tilt_deg": 60.0, "tau_term": 50.0})  # fmt: skip
    task = make_task(spec, 2)
    st = task.engine.default_state(2)
    st.root_rot[1] = rot.quat_from_axis_angle(torch.tensor([[1.0, 0, 0]]), torch.tensor([math.pi]))[
        0
    ]
    st.root_pos[1, 2] = 0.3  # on its back, above the height floor
    task.start_episodes(torch.arange(2), torch.zeros(2, dtype=torch.long), st)
    falls = torch.zeros(2, dtype=torch.long)
    for _ in range(40):
        r = task.step(torch.zeros(2, task.action_dim))
        falls += r.causes["fall"].long()
        if r.done[1]:  # stop the flipped env from restarting upright
            break
    task.close()
    assert falls[0] == 0 and falls[1] == 1 and r.causes["fall"][1]


def test_dog_configs_enable_the_tilt_test():
    from mimic2dm.train import compose_config

    for ch, tilt in (("dog", 60.0), ("dog_spine", 60.0), ("humanoid", 0.0)):
        cfg = compose_config([f"character={ch}"])
        assert float(cfg.task.fall_tilt_deg) == tilt


# ----------------------------------------------------------------------------- views
def test_parse_views():
    from mimic2dm.eval import parse_views

    assert (
        parse_views("1,2,4") == [1, 2, 4]
        and parse_views(3) == [3]
        and parse_views([2, 1]) == [2, 1]
    )
    for bad in ("0", "1,1", "a", ""):
        with pytest.raises(ValueError, match="--views"):
            parse_views(bad)


@pytest.mark.slow
def test_eval_several_view_counts_and_init_from_with_more_views(tmp_path, caplog):
    """A 1-view run, then a 2-view run started from its weights (init_from); `eval --views 1,2`
    reports every metric per view count; resume= refuses a new view count."""
    from rl_helpers import tiny_config

    from mimic2dm.eval import evaluate
    from mimic2dm.train import train
    from mimic2dm.utils.checkpoint import load_checkpoint

    path = tmp_path / "clip.npz"
    save_motion2d(standing_clip("humanoid", frames=20, views=2), path)
    one = tmp_path / "one"
    train(
        tiny_config(
            one,
            path,
            "train.max_epochs=1",
            "logger.tensorboard=false",
            "task.initial_state=default_pose",
        )
    )
    two = tmp_path / "two"
    s = train(tiny_config(two, path, "train.max_epochs=1", "logger.tensorboard=false", "task.num_views=2",
                          "task.initial_state=default_pose", f"init_from={one}"))  # fmt: skip
    assert s["epochs"] == 1
    assert "fine-tune at train.learning_rate=0.0001" in caplog.text  # the default rate is too high
    w1 = load_checkpoint(one / "checkpoints" / "last.pt")["model"]
    assert (
        load_checkpoint(two / "checkpoints" / "last.pt")["meta"]["task_spec"]["config"]["num_views"]
        == 2
    )
    key = next(k for k in w1 if k.endswith("actor.encoder.0.weight"))
    assert w1[key].shape == load_checkpoint(two / "checkpoints" / "last.pt")["model"][key].shape
    rep = evaluate(two / "checkpoints" / "last.pt", [path], "1,2")
    assert rep["views"] == [1, 2] and set(rep["by_views"]) == {"1", "2"}
    for v, r in rep["by_views"].items():
        assert r["views"] == int(v) and np.isfinite(r["error_2d_px"]) and "mpjpe_mm" in r
    with pytest.raises(ValueError, match="num_views cannot change on resume.*init_from"):
        train(tiny_config(one, path, f"resume={one}"), resume_overrides=["task.num_views=2"])
    with pytest.raises(FileNotFoundError, match="init_from"):
        train(tiny_config(tmp_path / "three", path, f"init_from={tmp_path / 'nope'}"))


def test_ball_touches_and_longest_gap_from_contact_flags():
    from mimic2dm.tasks.tracking2d.evaluation import _object_metrics

    T = 31
    hit = torch.zeros(1, T, dtype=torch.bool)
    hit[0, [5, 6, 7, 20, 21]] = True  # two touches, the first lasting three steps
    rec = {"obj_uv": torch.zeros(1, T, 1, 2), "obj_ref": torch.zeros(1, T, 1, 2),
           "obj_ok": torch.ones(1, T, 1, dtype=torch.bool), "obj_front": torch.ones(1, T, 1, dtype=torch.bool),
           "obj3d": torch.zeros(1, T, 3), "root3d": torch.zeros(1, T, 3), "obj_hit": hit}  # fmt: skip
    m = _object_metrics(rec, 0, T, 1080.0, 1.5, 30.0)
    assert m["ball_touches"] == 2
    assert m["ball_touch_max_gap_s"] == pytest.approx(15 / 30.0)  # frame 5 -> 20
    rec["obj_hit"] = torch.zeros(1, T, dtype=torch.bool)
    m = _object_metrics(rec, 0, T, 1080.0, 1.5, 30.0)
    assert m["ball_touches"] == 0 and m["ball_touch_max_gap_s"] == pytest.approx(1.0)


@pytest.mark.parametrize("lead, at", [(-1, 7), (0, 3)])
def test_a_lost_ball_counts_for_asi_where_it_was_lost(tmp_path, lead, at):
    """``ball_failure_lead``: a ball_lost termination counts for ASI's failure sampling at the
    ball's first lost step (minus the lead, never before the episode's start), or with -1
    at the termination; the sample counts stay at the observed frames."""
    asi = {"enabled": True, "capacity": 1, "failure_decay": 1.0, "iteration_steps": 1000}
    cfg = {"ball_lost_steps": 5, "tau_term": 50.0, "ball_failure_lead": lead, "asi": asi}
    task = make_task(_dribble_spec(tmp_path, **cfg), 2)
    starts = torch.full((2,), 3, dtype=torch.long)
    states = task.asi.sample_states(starts, task.gen)
    states.object_pos[1, 0, :2] += torch.tensor([4.0, 0.0])
    task.start_episodes(torch.arange(2), starts, states)
    for _ in range(5):  # the 5th step (observed frame 7) ends env 1 with ball_lost
        r = task.step(torch.zeros(2, task.action_dim))
    assert r.causes["ball_lost"].tolist() == [False, True]
    counts = task.asi.failure_counts
    task.close()
    assert counts.nonzero().flatten().tolist() == [at] and counts[at] == 1.0
    assert task.asi.sample_counts[3:8].tolist() == [2.0] * 5


def test_ball_failure_frames_move_back_by_the_lead(tmp_path):
    """Onset = observed frame - (lost steps - 1) - lead, clamped at the episode's first frame;
    envs that did not lose the ball keep their frame."""
    task = make_task(_dribble_spec(tmp_path, ball_failure_lead=2), 3)
    task._ball_lost = torch.tensor([True, True, False])
    task.lost = torch.tensor([5, 5, 0])
    task.steps = torch.tensor([20, 6, 20])
    got = task.failure_frames(torch.tensor([30, 30, 30]))
    task.close()
    assert got.tolist() == [24, 25, 30]  # 30 - 4 - 2; clamped at 30 - 5; unchanged


def test_ball_in_critic_appends_the_ball_state_for_the_critic_only(tmp_path):
    """``ball_in_critic``: the observation ends with the ball's root-relative state, which the
    layout gives to the critic (``critic``: 6); the rest is the observation without it."""
    plain = make_task(_dribble_spec(tmp_path), 2)
    task = make_task(_dribble_spec(tmp_path, ball_in_critic=True), 2)
    lay, obs, base = task.obs_layout(), task.observe(), plain.observe()
    s = task.engine.get_state()
    want = ball_terms.ball_state(s.root_pos, s.root_rot, s.object_pos[:, 0], s.object_lin_vel[:, 0])
    plain.close()
    task.close()
    assert lay["critic"] == 6 and obs.shape[1] == task.obs_dim == base.shape[1] + 6
    assert torch.allclose(obs[:, :-6], base) and torch.allclose(obs[:, -6:], want)
    assert obs[0, -6] == pytest.approx(1.0, abs=0.05)  # the ball 1 m ahead of the root


def test_a_run_with_the_ball_in_the_critic_trains_evaluates_and_exports(tmp_path, one_torch_thread):
    """Real rl-games: two epochs with the critic columns, then eval and an ONNX export whose
    input is the actor's observation only."""
    from rl_helpers import tiny_config

    from mimic2dm.eval import evaluate
    from mimic2dm.export import export_policy
    from mimic2dm.train import train

    clip = tmp_path / "ball.npz"
    save_motion2d(standing_clip("humanoid", frames=40, ball=True), clip)
    train(tiny_config(tmp_path / "run", clip, "task=dribble", "task.ball_in_critic=true",
                      "train.max_epochs=2", "logger.video_every=0", "logger.tensorboard=false",
                      "train.network.precision=fp32"))  # fmt: skip
    ck = tmp_path / "run" / "checkpoints" / "last.pt"
    res = evaluate(ck, data=[str(clip)])
    assert "object_error_2d_px" in res
    desc = export_policy(ck, tmp_path / "onnx", data=[str(clip)], num_envs=2, steps=2)
    assert desc["check"]["passed"], desc["check"]
    assert (
        desc["observation"]["size"]
        == desc["observation"]["prop_size"] + desc["observation"]["view_size"]
    )
    assert desc["observation"]["view_points"][-1] == "object_0_centre"
