"""The 3D tracker (3D-GT / Sfv* baselines): pure terms, references, the task on the fake
engine and MuJoCo, a tiny training run and `mimic2dm compare` on two tiny runs."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from fake_engine import KinematicEngine
from mimic2dm.tasks.base import TaskSpec
from mimic2dm.tasks.common.terms import combine
from mimic2dm.tasks.registry import load_task
from mimic2dm.tasks.tracking3d.config import Reward3DConfig, Tracking3DConfig
from mimic2dm.tasks.tracking3d.reference import Reference3D, load_clip3d
from mimic2dm.tasks.tracking3d.rewards import body_frame, frame_angle, reward_terms_3d
from mimic2dm.tasks.tracking3d.task import Tracking3DTask
from task_helpers import standing_clip

from mimic2dm.characters import load_character
from mimic2dm.motion.format import (
    Motion3D,
    MotionFormatError,
    load_motion2d,
    save_motion2d,
    save_motion3d,
)
from mimic2dm.motion.keypoint_sets import load_keypoint_set

COCO = load_keypoint_set("coco17")


def _pose_kp(spec, dof=None, root_pos=None):
    p = spec.default_pose
    d = lambda x: torch.tensor(np.array(x), dtype=torch.float64)[None]  # noqa: E731
    return spec.tree.keypoints(spec.site_offsets, d(p.root_pos if root_pos is None else root_pos),
                               d(p.root_quat), d(p.dof_pos if dof is None else dof)).float()  # fmt: skip


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_future": 0}, "task.num_future=0: expected"),
        ({"fall_tilt_deg": 200.0}, "task.fall_tilt_deg=200.0: expected"),
        ({"initial_state": "x"}, "task.initial_state='x': expected"),
        ({"reward": {"alpha_reg": 0.0}}, "task.reward.alpha_reg=0.0: expected a number > 0"),
    ],
)
def test_both_trackers_check_their_shared_settings_alike(kwargs, message):
    from mimic2dm.tasks.tracking2d.config import TrackingConfig

    from mimic2dm.utils.config import from_mapping
    from mimic2dm.utils.validate import ConfigError

    for schema in (TrackingConfig, Tracking3DConfig):
        with pytest.raises(ConfigError, match=message):
            from_mapping(schema, kwargs, "task")


def test_3d_reward_scales_need_a_positive_total_the_2d_ones_may_not():
    """Every 3D term is always present; a 2D term may be absent (``obj``), so its sum is
    checked over the terms present at each step."""
    from mimic2dm.tasks.tracking2d.rewards import RewardConfig

    from mimic2dm.utils.validate import ConfigError

    with pytest.raises(ConfigError, match="task.reward.scales=.*a positive total weight"):
        Reward3DConfig(scales={"pos": 0.0})
    assert RewardConfig(scales={"obj": 0.0}).scales == {"obj": 0.0}


def test_rewards_are_one_on_the_reference_and_lower_when_perturbed():
    spec = load_character("humanoid")
    ref = _pose_kp(spec)
    cfg = Reward3DConfig()
    a = torch.zeros(1, spec.num_dof)
    same = reward_terms_3d(ref, ref, ref, ref, a, a, COCO, cfg, 30.0)
    assert all(float(v) == pytest.approx(1.0) for v in same.values())
    assert float(combine(same, cfg.scales)) == pytest.approx(1.0)
    bent = _pose_kp(spec, dof=0.6 * torch.ones(spec.num_dof).numpy())
    moved = _pose_kp(spec, root_pos=np.asarray(spec.default_pose.root_pos) + [0.3, 0.0, 0.0])
    t_bent = reward_terms_3d(bent, ref, bent, ref, a, a, COCO, cfg, 30.0)
    t_moved = reward_terms_3d(moved, ref, ref, ref, a, a, COCO, cfg, 30.0)
    assert (
        float(t_bent["pos"]) < 0.9 and float(t_moved["root"]) < 0.3 and float(t_moved["vel"]) < 0.01
    )
    assert float(combine(t_bent, cfg.scales)) < 0.95 and float(combine(t_moved, cfg.scales)) < 0.6
    # a body frame turned by 90 degrees about z reads 90 degrees, and scores rot < 1
    R = torch.tensor([[0.0, -1, 0], [1, 0, 0], [0, 0, 1]])
    turned = ref @ R.T
    ang = frame_angle(body_frame(turned, COCO), body_frame(ref, COCO))
    assert float(ang) == pytest.approx(np.pi / 2, abs=1e-4)
    assert float(reward_terms_3d(turned, ref, turned, ref, a, a, COCO, cfg, 30.0)["rot"]) < 0.1


def _motion3d(spec, frames=20) -> Motion3D:
    p = spec.default_pose
    root = np.repeat(np.asarray(p.root_pos)[None], frames, 0)
    root[:, 0] += np.linspace(0, 0.3, frames)  # walking forwards slowly
    dof = np.zeros((frames, spec.num_dof))
    return Motion3D(spec.name, 30.0, root, np.repeat(np.asarray(p.root_quat)[None], frames, 0), dof)


def test_references_from_motion3d_and_from_ground_truth(tmp_path):
    spec = load_character("humanoid")
    m3 = _motion3d(spec)
    save_motion3d(m3, tmp_path / "m3.npz")
    c = load_clip3d(tmp_path / "m3.npz", 30.0, spec)
    assert (
        c.kind == "motion3d"
        and c.keypoints3d.shape == (20, 17, 3)
        and c.init_character == "humanoid"
    )
    # keypoints come from the joint angles by forward kinematics; velocities by finite differences
    assert torch.allclose(c.keypoints3d[0], _pose_kp(spec)[0], atol=1e-5)
    assert c.init_states["root_lin_vel"][5, 0] == pytest.approx(0.3 / 19 * 30, rel=1e-3)
    save_motion2d(standing_clip("humanoid"), tmp_path / "gt.npz")
    lib = Reference3D([c, load_clip3d(tmp_path / "gt.npz", 30.0, spec)], "coco17", 30.0)
    init = lib.initial_states(KinematicEngine("humanoid", 1).default_state(1), spec)
    assert init.num_envs == 40 and torch.allclose(init.root_pos[:20], c.init_states["root_pos"])
    assert lib.valid_starts().sum() == 38
    stripped = load_motion2d(tmp_path / "gt.npz")
    stripped.keypoints3d = None
    save_motion2d(stripped, tmp_path / "no3d.npz")
    with pytest.raises(
        MotionFormatError, match="no3d.npz: field 'keypoints3d' is missing.*preprocess"
    ):
        load_clip3d(tmp_path / "no3d.npz", 30.0, spec)
    with pytest.raises(MotionFormatError, match="field 'character' is 'humanoid', expected 'dog'"):
        load_clip3d(tmp_path / "m3.npz", 30.0, load_character("dog"))


def test_task_tracks_a_motion3d_on_the_fake_engine_and_resumes_exactly(tmp_path):
    spec = load_character("humanoid")
    save_motion3d(_motion3d(spec), tmp_path / "m3.npz")
    ts = TaskSpec("tracking3d", "humanoid", data=(str(tmp_path / "m3.npz"),),
                  config={"initial_ground": False, "asi": {"start_sampling": "uniform"}})  # fmt: skip
    a, b = (load_task("tracking3d").build(ts, KinematicEngine("humanoid", 4), s) for s in (1, 2))
    assert a.obs_layout() == {"prop": a.prop_dim, "view": 17 * 3 * 5, "views": 1}
    r = a.step(torch.zeros(4, a.action_dim))  # zero action holds the (reference) default pose
    assert (r.terms["pos"] > 0.99).all() and set(r.causes) == {
        "distance",
        "fall",
        "nonfinite",
        "timeout",
    }
    b.load_state_dict(a.state_dict())
    b.load_episode_state(a.episode_state())
    for _ in range(3):
        ra, rb = (
            a.step(torch.full((4, a.action_dim), 0.3)),
            b.step(torch.full((4, a.action_dim), 0.3)),
        )
        assert torch.equal(ra.obs, rb.obs) and torch.equal(ra.reward, rb.reward)
    # a far-off pose ends episodes by the distance bound
    cfg = dataclasses.replace(load_task("tracking3d").parse_config(ts.config), term_distance=0.05)
    t = Tracking3DTask(
        KinematicEngine("humanoid", 4), Reference3D.from_files(ts.data, 30.0, spec), cfg
    )
    assert t.step(torch.ones(4, t.action_dim)).causes["distance"].all()


def test_tracking3d_lifts_starts_out_of_the_ground_and_prioritises_failures(tmp_path):
    """Like the 2D tracker: initial states whose geometry starts in the ground are lifted
    (``initial_ground``), and early terminations are counted per start frame, which
    ``start_sampling: failure`` draws from (docs/baselines.md: the IK fit of cmu_walk's
    ground truth starts 38 of 77 frames up to 6 cm in the ground)."""
    from mimic2dm.tasks.tracking2d.asi import ASIConfig

    spec = load_character("humanoid")
    m3 = _motion3d(spec)
    m3.root_pos[:5, 2] -= 0.08  # the first five frames sink 8 cm into the ground
    save_motion3d(m3, tmp_path / "m3.npz")
    ref = Reference3D.from_files((str(tmp_path / "m3.npz"),), 30.0, spec)
    asi = ASIConfig(start_sampling="failure", iteration_steps=1000)
    kept, lifted = (
        Tracking3DTask(
            KinematicEngine("humanoid", 4),
            ref,
            Tracking3DConfig(initial_ground=g, term_distance=0.05, asi=asi),
        )
        for g in (False, True)
    )
    z0 = kept.asi.states["root_pos"][:, 0, 2]
    z1 = lifted.asi.states["root_pos"][:, 0, 2]
    assert torch.all(z1[:5] - z0[:5] > 0.05) and torch.allclose(z1[5:], z0[5:])
    # every env is far off after one step of full actions: each start frame counts a failure
    starts = lifted.frame.clone()
    r = lifted.step(torch.ones(4, lifted.action_dim))
    assert r.terminated.all()
    expect = torch.bincount(starts, minlength=lifted.asi.failure_counts.numel()).float()
    assert torch.equal(lifted.asi.failure_counts, expect)
    assert lifted.asi.failure_counts.sum() == 4 and kept.asi.failure_counts.sum() == 0


@pytest.mark.slow
def test_train_tracking3d_then_compare_with_a_2d_run(tmp_path, monkeypatch):
    """`mimic2dm-train task=tracking3d` (3D-GT on a synthetic clip), a tiny tracking2d run,
    then `mimic2dm compare` on both: JSON and markdown tables."""
    from rl_helpers import tiny_config
    from typer.testing import CliRunner

    from mimic2dm.cli import app
    from mimic2dm.train import train

    monkeypatch.setenv("WANDB_MODE", "offline")
    clip = tmp_path / "clip.npz"
    save_motion2d(standing_clip("humanoid", frames=30), clip)
    s3 = train(
        tiny_config(
            tmp_path / "gt3d",
            clip,
            "task=tracking3d",
            "train.max_epochs=2",
            "logger.tensorboard=false",
        )
    )
    assert s3["epochs"] == 2 and {"reward/pos", "reward/root", "reward/rot"} <= set(
        s3["history"][-1]
    )
    train(tiny_config(tmp_path / "m2d", clip, "train.max_epochs=2", "logger.tensorboard=false"))
    md = tmp_path / "table.md"
    res = CliRunner().invoke(app, ["compare", str(tmp_path / "gt3d"), str(tmp_path / "m2d"), "--data", str(clip),
                                   "--json", "-", "--markdown", str(md)])  # fmt: skip
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    methods = [r["method"] for r in out["rows"]]
    assert methods == ["3D-GT (tracks ground-truth 3D)", "Mimic2DM (ground-truth cameras)"]
    for r in out["rows"]:
        assert 0.0 <= r["success_rate"] <= 1.0 and r["error_2d_px"] >= 0 and r["mpjpe_mm"] >= 0
        assert r["max_error_2d_px"] >= r["error_2d_px"]  # success is decided on the worst frame
        assert {"jitter", "foot_skating_m_s", "ground_penetration_mm", "floating_mm"} <= set(r)
    text = md.read_text()
    assert (
        "| method | success (%) | 2D error (px) | max 2D error (px) | MPJPE (mm)" in text
        and "3D-GT" in text
        and "Mimic2DM" in text
    )
    bad = CliRunner().invoke(app, ["compare", str(tmp_path), "--data", str(clip)])
    assert bad.exit_code == 1 and "no checkpoints/last.pt" in bad.output


def test_eval_clip_moves_the_ground_truth_into_the_runs_camera_world(tmp_path):
    """Sfv* / preprocessed runs are measured through their own (estimated) camera: the
    ground truth moved into that camera's world has the same camera-frame coordinates."""
    from mimic2dm.compare import camera_clip, eval_clip
    from mimic2dm.motion.synth import synthesize_views

    gt = standing_clip("humanoid", frames=10)
    other = synthesize_views(gt.keypoints3d + np.array([2.0, -1.0, 0.0]), "coco17", 30.0, seed=3)
    est = eval_clip(gt, other)  # another camera and world
    assert est.camera_R is other.camera_R and est.keypoints is gt.keypoints
    cam = lambda m: np.einsum("ij,tkj->tki", m.camera_R[0, 0], m.keypoints3d) + m.camera_t[0, 0]  # noqa: E731
    assert np.allclose(cam(est), cam(gt), atol=1e-5)  # the same camera-frame coordinates
    d = lambda x: np.linalg.norm(x[:, 0] - x[:, 5], axis=-1)  # noqa: E731  distances are kept
    assert np.allclose(d(est.keypoints3d), d(gt.keypoints3d), atol=1e-6)
    assert eval_clip(gt, None) is gt
    # a preprocessed run's own estimates come along: its evaluation starts from its own
    # initial states, not from a pose fitted to the moved ground truth
    from dataclasses import replace

    est3d = gt.keypoints3d + np.array([0.0, 0.0, 0.1])
    moved = eval_clip(gt, replace(other, est_keypoints3d=est3d))
    assert moved.est_keypoints3d is est3d and est.est_keypoints3d is None
    # a Motion3D's camera is the preprocessed clip beside it, when it shows the same 2D keypoints
    save_motion2d(replace_cameras(gt, other), tmp_path / "walk_video.npz")
    save_motion3d(_motion3d(load_character("humanoid"), 10), tmp_path / "walk_video_motion3d.npz")
    spec = TaskSpec("tracking3d", "humanoid", data=(str(tmp_path / "walk_video_motion3d.npz"),))
    found = camera_clip(spec, gt)
    assert found is not None and found[1].endswith("walk_video.npz")
    assert np.allclose(found[0].camera_t, other.camera_t)


def replace_cameras(m, cams):
    from dataclasses import replace

    return replace(m, camera_R=cams.camera_R, camera_t=cams.camera_t, camera_intrinsics=cams.camera_intrinsics,
                   keypoints3d=None)  # fmt: skip
