"""Real motion in the control loop (``--reference``) and matched start states
(``--start-states``, mimic2dm/control/start.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from mimic2dm.cli import app
from mimic2dm.control.controller import Controller, ControlSettings
from mimic2dm.control.generator import open_stream, replay_generator
from mimic2dm.control.reference import FollowCamera, anchor_chunk
from mimic2dm.control.run import load_models
from mimic2dm.control.start import MATCH_FRAMES, load_start_library, match_start
from mimic2dm.motion.canonical import to_canonical
from mimic2dm.motion.format import load_motion2d, save_motion2d
from mimic2dm.motion.keypoint_sets import load_keypoint_set
from mimic2dm.utils.paths import mocap_dir

pytestmark = pytest.mark.usefixtures("one_torch_thread")
MOCAP = mocap_dir()
needs_mocap = pytest.mark.skipif(not MOCAP.is_dir(), reason=f"no shared mocap at {MOCAP}")
KSET = load_keypoint_set("coco17")


@pytest.fixture(scope="module")
def walk(tmp_path_factory) -> Path:
    """cmu_walk at 30 fps through two static views with the follow camera's distance, focal
    length and elevation, with its 3D ground truth."""
    from mimic2dm.characters.clips import load_mocap_keypoints
    from mimic2dm.geometry.virtual import VirtualCameraConfig
    from mimic2dm.motion.synth import resample, synthesize_views

    clip = load_mocap_keypoints(MOCAP / "cmu_walk.npz")
    kp = resample(clip.keypoints, clip.fps, 30.0)
    cfg = VirtualCameraConfig(
        distance_range=(5.0, 5.0), focal_range=(1400.0, 1400.0), elevation_range_deg=(10.0, 10.0)
    )
    m = synthesize_views(kp, clip.keypoint_set, 30.0, num_views=2, seed=4, camera_config=cfg,
                         labels={"skill": "walk"})  # fmt: skip
    path = tmp_path_factory.mktemp("walk") / "walk.npz"
    save_motion2d(m, path)
    return path


@needs_mocap
def test_replay_generator_gives_back_the_clip(walk: Path):
    """The replayed features are G of the clip's view; G^-1 from its first root and size gives
    its pixels back; the stream hands them out 32 at a time and starts over at the end."""
    m = load_motion2d(walk)
    gen = replay_generator(walk, views=2)
    f = gen.data["features"]
    assert gen.num_views == 2 and gen.model_type == "replay" and f.shape[1] == m.num_frames - 1
    assert gen.label_id("walk") == 0 and gen.label_id(None) == -1
    cm = to_canonical(torch.as_tensor(m.keypoints[1]), KSET)
    pix = anchor_chunk(f[1:2, :32], cm.root0[None], cm.scale0[None], KSET)[0]
    np.testing.assert_allclose(pix.numpy(), m.keypoints[1, :32], atol=0.5)
    stream = open_stream(gen, -1, seed=0)
    chunks = [stream.next_chunk() for _ in range(3)]  # 96 frames of a 76-frame clip
    assert all(c.shape == (2, 32, f.shape[-1]) for c in chunks)
    torch.testing.assert_close(chunks[0], f[:, :32])
    n = f.shape[1]
    torch.testing.assert_close(chunks[2][:, n - 64 :], f[:, : 96 - n])  # wrapped around
    with pytest.raises(ValueError, match="3 view"):
        replay_generator(walk, views=3)


def _start_library(path: Path):
    """The start library of ``path`` for an untrained tracker of the default configs."""
    from mimic2dm.tasks.registry import build_engine
    from mimic2dm.tasks.tracking2d.factory import tracking_config

    policy, _ = load_models(None, None, True)[:2]
    engine = build_engine(policy.env_spec, 1)
    try:
        return load_start_library([str(path)], engine.character, engine.default_state(1),
                                  tracking_config(policy.env_spec), 30.0)  # fmt: skip
    finally:
        engine.close()


def _about_mean(x: torch.Tensor) -> torch.Tensor:
    """Keypoints ``[..., K, 2]`` about their mean."""
    return x - x.mean(-2, keepdim=True)


def _match_known(lib, t0: int, az: float) -> dict:
    """``match_start`` on the library's own frames ``t0..`` seen by a follow camera at ``az``."""
    from mimic2dm.geometry.camera import project_points

    kp = lib.keypoints3d[t0 : t0 + MATCH_FRAMES + 1]
    R, t, k = FollowCamera(1, az).place(kp[0, list(KSET.root)].mean(0))
    uv, _ = project_points(R[0], t[0], k[0], kp)
    feats = to_canonical(uv, KSET, window=1).features()[None, :MATCH_FRAMES]
    return match_start(lib, feats, FollowCamera(1, 0.0), KSET)


@needs_mocap
def test_match_start_finds_the_frame_and_azimuth(walk: Path):
    """Motion projected from a known library frame and azimuth is matched to that frame and
    azimuth (and a far-off pose is not)."""
    lib = _start_library(walk)
    T = load_motion2d(walk).num_frames
    assert len(lib.states.root_pos) == T and lib.keypoints3d.shape == (T, 17, 3)
    assert lib.valid.sum() == T - MATCH_FRAMES and lib.sources == ["reference_3d"]
    for t0, az in ((10, 75.0), (40, 300.0)):
        m = _match_known(lib, t0, az)
        assert m["index"] == t0 and m["azimuth_deg"] == az and m["cost"] < 1e-3, m
    # the library frame's state is where the fitted pose is: its keypoints near the reference
    assert (
        float(
            (lib.states.root_pos[:, :2] - lib.keypoints3d[:, 11:13].mean(1)[:, :2])
            .norm(dim=-1)
            .max()
        )
        < 0.2
    )


@needs_mocap
def test_start_library_takes_clips_made_by_preprocess(tmp_path: Path, walk: Path):
    """A clip made by `mimic2dm preprocess` (no ``keypoints3d``) is a start library: its states
    are the preprocessed ones and its frames are matched on the preprocessing's own 3D estimate
    (``est_keypoints3d``), so a view of a known estimated frame is matched back to it."""
    runner = CliRunner()
    stripped = tmp_path / "video.npz"
    assert runner.invoke(app, ["data", "strip", str(walk), "--out", str(stripped)]).exit_code == 0
    res = runner.invoke(app, ["preprocess", str(stripped), "--out", str(tmp_path / "pre"), "--no-progress",
                              "--view", "0", "--headings", "2", "--finalists", "1", "--iters", "10"])  # fmt: skip
    assert res.exit_code == 0, res.output
    pre = tmp_path / "pre" / "video.npz"
    m = load_motion2d(pre)
    assert m.keypoints3d is None and m.est_keypoints3d is not None and m.has_initial_states
    lib = _start_library(pre)
    assert lib.sources == ["preprocessed"]
    np.testing.assert_allclose(lib.keypoints3d.numpy(), m.est_keypoints3d, atol=1e-5)
    # the states are the preprocessed ones (grounding may lift them, never move them sideways)
    np.testing.assert_allclose(
        lib.states.root_pos[:, :2].numpy(), m.init_root_pos[:, :2], atol=1e-5
    )
    found = _match_known(lib, 20, 120.0)
    assert found["index"] == 20 and found["azimuth_deg"] == 120.0 and found["cost"] < 1e-3, found


@needs_mocap
def test_controller_starts_from_the_matched_state(walk: Path):
    """With a start library the episode begins at the matched state (the character's keypoints
    are the library frame's, not the default pose's) and views it from the matched azimuth."""
    policy, _ = load_models(None, None, True)[:2]
    gen = replay_generator(walk)
    ctl = Controller(policy, gen)
    try:
        lib = load_start_library(
            [str(walk)], ctl.engine.character, ctl.engine.default_state(1), ctl.cfg, ctl.hz
        )
        rec = ctl.run(ControlSettings(seconds=0.5, start_states=lib, azimuth_deg=10.0))
        plain = ctl.run(ControlSettings(seconds=0.5, azimuth_deg=10.0))
    finally:
        ctl.close()
    i = rec.start["index"]
    # the replay starts at the clip's first frame: that pose, or the same phase a gait cycle later
    assert 0 <= i < len(lib.valid) and rec.start["cost"] < 0.05, rec.start
    assert (
        rec.azimuth_deg == rec.start["azimuth_deg"]
        and plain.start is None
        and plain.azimuth_deg == 10.0
    )
    err = (rec.kp3d[0] - lib.keypoints3d[i]).norm(dim=-1).mean()
    err_plain = (plain.kp3d[0] - lib.keypoints3d[i]).norm(dim=-1).mean()
    assert float(err) < 0.2 and float(err) < 0.25 * float(err_plain), (float(err), float(err_plain))
    assert len(rec.uv) == 15 and [c[0] for c in rec.chunks] == [0, 8]  # 8-step chunks by default


@needs_mocap
def test_start_blend_begins_the_reference_at_the_character(walk: Path):
    """With ``start_blend`` the first reference frame after a matched start is the character's
    own projection, the easing goes on into the second 8-step chunk and has ended by step
    ``start_blend``; without a start library there is nothing to blend from."""
    policy, _ = load_models(None, None, True)[:2]
    ctl = Controller(policy, replay_generator(walk))
    try:
        lib = load_start_library(
            [str(walk)], ctl.engine.character, ctl.engine.default_state(1), ctl.cfg, ctl.hz
        )
        runs = {
            b: ctl.run(ControlSettings(seconds=0.7, start_states=lib, start_blend=b))
            for b in (0, 12)
        }
        plain = [
            ctl.run(ControlSettings(seconds=0.5, start_blend=b, azimuth_deg=10.0)) for b in (0, 12)
        ]
    finally:
        ctl.close()

    def gap(rec, t):
        ok = rec.mask[t] & rec.front[t]
        return float((rec.uv[t] - rec.ref[t]).norm(dim=-1)[ok].max())

    assert gap(runs[12], 0) < 1e-2 < gap(runs[0], 0), (gap(runs[12], 0), gap(runs[0], 0))
    # the same start state and generated frames: the pose (about the keypoints' mean) differs
    # by the eased offset, in the first chunk and in the second (steps 8-11), not after step 12
    assert runs[12].start["index"] == runs[0].start["index"]
    assert [c[0] for c in runs[12].chunks] == [0, 8, 16]
    off = runs[0].uv[0] - runs[0].ref[0]
    for t in (0, 4, 8, 9, 11, 12, 16):
        w = 0.5 * (1 + math.cos(math.pi * t / 12)) if t < 12 else 0.0
        d = _about_mean(runs[12].ref[t]) - _about_mean(runs[0].ref[t])
        assert float((d - w * _about_mean(off)).norm(dim=-1).max()) < 0.05, t
    torch.testing.assert_close(plain[1].ref[0], plain[0].ref[0])


@needs_mocap
def test_control_cli_reference_and_start_states(tmp_path: Path, walk: Path):
    out = tmp_path / "c.json"
    res = CliRunner().invoke(app, ["control", "--random-weights", "--reference", str(walk), "--start-states",
                                   str(walk), "--seconds", "1", "--episodes", "2", "--no-fid", "--json", str(out)])  # fmt: skip
    assert res.exit_code == 0, res.output
    r = json.loads(out.read_text())
    assert r["generator_type"] == "replay" and r["generator"] == str(walk)
    assert r["settings"]["start_states"] == [str(walk)]
    assert all(
        "start" in e and e["azimuth_deg"] == e["start"]["azimuth_deg"] for e in r["per_episode"]
    )
    # a clip without 3D cannot give start states; --reference and --generator exclude each other
    m = load_motion2d(walk)
    import dataclasses

    no3d = tmp_path / "no3d.npz"
    save_motion2d(dataclasses.replace(m, keypoints3d=None), no3d)
    res = CliRunner().invoke(app, ["control", "--random-weights", "--reference", str(walk), "--start-states",
                                   str(no3d), "--seconds", "1", "--no-fid"])  # fmt: skip
    assert res.exit_code == 1 and "no3d" in res.output and "keypoints3d" in res.output
    res = CliRunner().invoke(app, ["control", "--random-weights", "--reference", str(walk), "--generator",
                                   str(walk), "--seconds", "1", "--no-fid"])  # fmt: skip
    assert res.exit_code == 1 and "--reference replaces --generator" in res.output


@needs_mocap
def test_control_generator_data_moves_over_the_ground(tmp_path: Path):
    """``gen_data=cmu_views_control``: static views of 10 s looped clips, so a walk's canonical
    root velocity is motion over the ground (the follow cameras hold still between chunks),
    seen from the follow camera's 10 deg elevation."""
    import dataclasses

    from mimic2dm.generators.data import build_view_dataset, spec_from_config
    from omegaconf import OmegaConf

    conf = Path(__file__).resolve().parents[1] / "conf/gen_data/cmu_views_control.yaml"
    spec = dataclasses.replace(
        spec_from_config(OmegaConf.load(conf).build), pairs=2, clips=("cmu_walk",)
    )
    files = build_view_dataset(tmp_path, spec, MOCAP)
    assert len(files) == 2
    K = KSET.num_keypoints
    for f in files:
        m = load_motion2d(f)
        assert m.camera_R.shape[:2] == (2, 1) and m.num_frames >= 300  # static, >= 10 s at 30 fps
        # every camera at the follow camera's elevation
        np.testing.assert_allclose(np.degrees(np.arcsin(-m.camera_R[:, 0, 2, 2])), 10.0, atol=1e-3)
        speed = replay_generator(f, 2).data["features"][..., 2 * K : 2 * K + 2].norm(dim=-1)
        assert float(speed.median()) > 0.04  # body sizes per frame; tracking views give ~0.01


@needs_mocap
def test_replayed_clip_carries_its_body_size_for_depth_rescale(walk: Path):
    """``--reference``: the replay's ``scale_px`` is the clip's median body size at 1080p, so
    ``--depth-rescale`` converts its size velocity from the clip's camera to the follow camera."""
    from mimic2dm.motion.canonical import body_scale

    m = load_motion2d(walk)
    gen = replay_generator(walk, views=2)
    sizes = [float(body_scale(torch.as_tensor(m.keypoints[v]), torch.ones(m.keypoints.shape[1:3], dtype=torch.bool),
                              KSET).median()) for v in range(2)]  # fmt: skip
    assert gen.stats.scale_px == pytest.approx(
        float(np.median(sizes)) * 1080.0 / m.image_size[1], rel=1e-5
    )
    assert 50.0 < gen.stats.scale_px < 300.0  # 5 m, focal 1400: ~135 px


@needs_mocap
def test_loop_clips_carry_the_reference_and_the_simulated_states(tmp_path: Path, walk: Path):
    """``--clips-out``: each episode becomes a 2D clip of the reference the tracker was handed
    (per-frame follow cameras) with the simulated states as initial states; it loads as a
    training clip and as a start library whose states are the recorded ones. Episodes are
    cut before the first step that falls or loses the reference; short ones are skipped."""
    from mimic2dm.tasks.tracking2d.reference import ReferenceLibrary

    from mimic2dm.control.clips import LoopClipSettings, LoopClipWriter, usable_frames
    from mimic2dm.engines.base import SimState

    policy, _ = load_models(None, None, True)[:2]
    ctl = Controller(policy, replay_generator(walk))
    try:
        lib = load_start_library(
            [str(walk)], ctl.engine.character, ctl.engine.default_state(1), ctl.cfg, ctl.hz
        )
        rec = ctl.run(ControlSettings(seconds=1.0, start_states=lib, record_states=True))
        keep_all = LoopClipSettings(max_error_px=1e6, min_root_height=0.0, min_frames=5)
        w = LoopClipWriter(
            tmp_path / "loop", keep_all, "humanoid", "coco17", ctl.hz, (1920, 1080), {}
        )
        path = w.add(rec, 7, "walk")
        clip_lib = load_start_library(
            [str(path)], ctl.engine.character, ctl.engine.default_state(1), ctl.cfg, ctl.hz
        )
    finally:
        ctl.close()
    m = load_motion2d(path)
    assert path.name == "loop_7.npz" and m.num_frames == 30 and m.labels == {"skill": "walk"}
    assert m.camera_R.shape == (1, 30, 3, 3) and m.init_character == "humanoid"
    ref = rec.stacked("ref")[:, 0].numpy()
    np.testing.assert_allclose(m.keypoints[0], ref, atol=1e-3)
    rec_states = SimState.cat(rec.states)
    np.testing.assert_allclose(m.init_dof_pos, rec_states.dof_pos.numpy(), atol=1e-6)
    # the tracker's training loads it (view_mode=clip); as start states it gives the recorded
    # ones back (up to the ground lift that training applies too)
    lib2 = ReferenceLibrary.from_files([str(path)], 30.0, view_mode="clip")
    assert lib2.lengths.tolist() == [30]
    torch.testing.assert_close(clip_lib.states.dof_pos, rec_states.dof_pos)
    torch.testing.assert_close(clip_lib.states.root_pos[:, :2], rec_states.root_pos[:, :2])
    assert float((clip_lib.states.root_pos[:, 2] - rec_states.root_pos[:, 2]).abs().max()) < 0.06
    # the cut: 10 steps before the root first drops below 0.5 m; too short: no clip
    rec.root_height = [1.0] * 20 + [0.4] * 10
    assert usable_frames(rec, 1080, LoopClipSettings(min_frames=5)) == 10
    assert usable_frames(rec, 1080, LoopClipSettings(min_frames=11)) == 0
    rec.root_height = [1.0] * 30
    assert usable_frames(rec, 1080, LoopClipSettings(max_error_px=1e6, min_frames=5)) == 30
    assert w.add(rec, 8, "walk") is not None
    rec.root_height = [0.2] * 30  # fallen from the start: nothing kept under the default cut
    w.s = LoopClipSettings(max_error_px=1e6, min_frames=5)
    assert w.add(rec, 9, None) is None
    manifest = json.loads((tmp_path / "loop" / "manifest.json").read_text())
    assert [(e["seed"], e["kept"], e["file"]) for e in manifest["episodes"]] == [
        (7, 30, "loop_7.npz"),
        (8, 30, "loop_8.npz"),
        (9, 0, None),
    ]
    # a second run into the same directory keeps the first run's episodes; seed 8 again,
    # now too short, replaces its entry and removes its stale clip
    w2 = LoopClipWriter(
        tmp_path / "loop", LoopClipSettings(), "humanoid", "coco17", 30.0, (1920, 1080), {}
    )
    assert w2.add(rec, 8, "walk") is None
    manifest = json.loads((tmp_path / "loop" / "manifest.json").read_text())
    assert [(e["seed"], e["kept"]) for e in manifest["episodes"]] == [(7, 30), (9, 0), (8, 0)]
    assert sorted(p.name for p in (tmp_path / "loop").glob("*.npz")) == ["loop_7.npz"]
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "manifest.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a loop-clip manifest"):
        LoopClipWriter(
            tmp_path / "bad", LoopClipSettings(), "humanoid", "coco17", 30.0, (1920, 1080), {}
        )


@needs_mocap
def test_control_cli_clips_out(tmp_path: Path, walk: Path):
    out = tmp_path / "clips"
    res = CliRunner().invoke(app, ["control", "--random-weights", "--reference", str(walk), "--start-states",
                                   str(walk), "--seconds", "1", "--episodes", "2", "--no-fid", "--clips-out",
                                   str(out), "--clips-max-error", "100000", "--clips-min-frames", "3"])  # fmt: skip
    assert res.exit_code == 0, res.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert [e["seed"] for e in manifest["episodes"]] == [0, 1]
    assert manifest["source"]["generator_type"] == "replay"
    assert all(e["kept"] == 0 or (out / e["file"]).is_file() for e in manifest["episodes"])
    res = CliRunner().invoke(app, ["control", "--random-weights", "--reference", str(walk), "--seconds", "1",
                                   "--no-fid", "--clips-out", str(out), "--clips-min-frames", "0"])  # fmt: skip
    assert res.exit_code == 1 and "--clips-min-frames" in res.output
