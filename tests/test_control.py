"""The hierarchical controller (mimic2dm/control): generator -> G^-1 -> tracker -> engine."""

from __future__ import annotations

import json
import math

import pytest
import torch
from generator_helpers import needs_mocap
from typer.testing import CliRunner

from mimic2dm.cli import app
from mimic2dm.control.controller import Controller, ControlSettings, parse_switch
from mimic2dm.control.reference import (
    ControlReference,
    FollowCamera,
    anchor_chunk,
    blend_start,
    character_anchor,
    lateral_path,
    level_path,
    start_offset,
)
from mimic2dm.control.run import load_models
from mimic2dm.motion.canonical import body_scale, root_2d
from mimic2dm.motion.keypoint_sets import load_keypoint_set

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def models():
    """Untrained tracker (default configs) and GPT generator (conf/model/gpt.yaml)."""
    return load_models(None, None, True)[:2]


@pytest.fixture(scope="module")
def real_dir(tmp_path_factory):
    """A small directory of real 2D motion (CMU clips, one orthogonal view pair each)."""
    from generator_helpers import HAVE_MOCAP, MOCAP
    from mimic2dm.generators.data import ViewDatasetSpec, build_view_dataset

    if not HAVE_MOCAP:
        pytest.skip(f"mocap clips not found in {MOCAP}")

    d = tmp_path_factory.mktemp("real")
    build_view_dataset(d, ViewDatasetSpec(pairs=1, seed=3))
    return d


def test_anchor_known_answer():
    """G^-1 of a chunk starts at the given root and size: a known pose comes back exactly."""
    kset = load_keypoint_set("coco17")
    K = kset.num_keypoints
    local = torch.randn(K, 2) * 0.3
    local -= local[list(kset.root)].mean(0)
    feats = torch.zeros(2, 5, 2 * K + 3)
    feats[:, :, : 2 * K] = local.reshape(-1)
    feats[:, :, 2 * K] = 0.1  # root moves 0.1 body sizes per frame to the right
    root, scale = torch.tensor([[900.0, 600.0], [100.0, 50.0]]), torch.tensor([150.0, 30.0])
    pix = anchor_chunk(feats, root, scale, kset)
    assert torch.allclose(pix[:, 0], local * scale[:, None, None] + root[:, None], atol=1e-3)
    r = root_2d(pix[0], torch.ones(5, K, dtype=torch.bool), kset)
    assert torch.allclose(r[:, 0] - 900.0, 15.0 * torch.arange(5.0), atol=1e-3)


def test_depth_rescale_converts_the_size_velocity_to_the_anchor_size():
    """With ``data_scale`` the generated log-size velocity is multiplied by the anchor size over
    the data's size (depth motion keeps its speed in metres at a nearer camera); the root's
    velocity in body sizes is unchanged; without it the features are used as they are."""
    kset = load_keypoint_set("coco17")
    K = kset.num_keypoints
    local = torch.randn(K, 2) * 0.3
    feats = torch.zeros(1, 11, 2 * K + 3)
    feats[..., : 2 * K] = local.reshape(-1)
    feats[..., 2 * K] = 0.05  # body sizes per frame, to the right
    feats[..., 2 * K + 2] = 0.01  # log body size per frame: walking towards the camera
    root, scale = torch.tensor([[900.0, 600.0]]), torch.tensor([150.0])
    sizes, steps = {}, []
    for data_scale in (None, 150.0, 50.0):
        pix = anchor_chunk(feats, root, scale, kset, data_scale)[0]
        s = body_scale(pix, torch.ones(11, K, dtype=torch.bool), kset, window=1)
        sizes[data_scale] = float(s[10] / s[0])
        r = root_2d(pix, torch.ones(11, K, dtype=torch.bool), kset)
        steps.append((r[1:, 0] - r[:-1, 0]) / s[:-1])  # root velocity in body sizes
    for step in steps:  # the same in every frame and with every setting
        torch.testing.assert_close(
            step, torch.full_like(step, float(steps[0][0])), rtol=1e-3, atol=1e-5
        )
    assert sizes[None] == pytest.approx(math.exp(0.1), rel=1e-3) and sizes[150.0] == pytest.approx(
        sizes[None]
    )
    assert sizes[50.0] == pytest.approx(
        math.exp(0.3), rel=1e-3
    )  # 3x faster at a 3x larger body size


def test_blend_start_eases_from_the_character_into_the_generated_frames():
    """Step 0 is the character's projection, step ``frames`` on the generated motion, the
    midpoint half way, also in a later chunk; keypoints the character does not show stay
    as generated."""
    pix = torch.randn(2, 12, 17, 2) * 100
    uv = torch.randn(2, 17, 2) * 100
    valid = torch.ones(2, 17, dtype=torch.bool)
    valid[1, 3] = False
    off = start_offset(pix[:, 0], uv, valid)
    out = blend_start(pix, off, 0, 8)
    ok = valid[..., None]
    assert torch.allclose(torch.where(ok, out[:, 0], 0), torch.where(ok, uv, 0), atol=1e-4)
    assert torch.equal(out[1, :, 3], pix[1, :, 3])
    assert torch.equal(out[:, 8:], pix[:, 8:])
    half = pix[:, 4] + 0.5 * (uv - pix[:, 0])
    assert torch.allclose(out[0, 4], half[0], atol=1e-4)
    # a chunk that starts at step 4 continues the same easing: its frame 0 is step 4
    later = blend_start(pix, off, 4, 8)
    assert torch.allclose(later[0, 0], pix[0, 0] + 0.5 * off[0], atol=1e-4)
    assert torch.equal(later[:, 4:], pix[:, 4:])
    assert torch.equal(blend_start(pix, off, 0, 0), pix)


def test_follow_camera_orthogonal_views():
    R, t, k = FollowCamera(2, 30.0).place(torch.tensor([1.0, 2.0, 1.0]))
    assert R.shape == (2, 3, 3) and t.shape == (2, 3) and k.shape == (2, 4)
    # optical axes (third rows) are orthogonal in the ground plane, both aimed at the target
    assert abs(float(R[0, 2, :2] @ R[1, 2, :2])) < 1e-5
    cam = -torch.einsum("vji,vj->vi", R, t)
    assert torch.allclose(
        (cam - torch.tensor([1.0, 2.0, 1.0])).norm(dim=-1), torch.tensor(5.0), atol=1e-4
    )


def test_reanchoring_and_skill_switch(models):
    """At every chunk start the reference's root equals the character's projected root and
    size; a switch changes the condition label at the stated step and starts a chunk."""
    policy, gen = models
    ctl = Controller(policy, gen)
    try:
        s = ControlSettings(
            seconds=2.5, skill="walk", switches=[parse_switch("1.5:run")], chunk_frames=20
        )
        rec = ctl.run(s)
    finally:
        ctl.close()
    kset = load_keypoint_set("coco17")
    starts = [c[0] for c in rec.chunks]
    assert starts == [0, 20, 40, 45, 65]  # 45 = 1.5 s x 30 Hz, then every 20 steps again
    for step, root, scale, ref_root in rec.chunks:
        uv, mask = rec.uv[step], rec.mask[step]
        r, sc = character_anchor(uv, torch.ones_like(mask), kset)
        assert torch.allclose(ref_root, r, atol=1e-2) and torch.allclose(root, r, atol=1e-3)
        assert torch.allclose(scale, sc, rtol=1e-4)
    walk, run = gen.label_id("walk"), gen.label_id("run")
    assert rec.labels[:45] == [walk] * 45 and rec.labels[45:] == [run] * (len(rec.labels) - 45)
    assert len(rec.uv) == 75 and all(v > 0 for v in rec.stage_seconds.values())


def test_control_cli_smoke(tmp_path, real_dir):
    """A smoke run with untrained networks writes every Table 3 metric (FID with an untrained extractor)."""
    out = tmp_path / "control.json"
    res = CliRunner().invoke(app, ["control", "--random-weights", "--skill", "walk", "--switch", "1:hop",
                                   "--seconds", "2", "--episodes", "2", "--real", str(real_dir), "--top-k", "5",
                                   "--json", str(out)])  # fmt: skip
    assert res.exit_code == 0, res.output
    r = json.loads(out.read_text())
    assert r["settings"]["top_k"] == 5 and r["settings"]["follow"] == "chunk"
    for key in ("success_rate", "error_2d_px", "fid", "diversity", "fid_generated", "diversity_real",
                "generator_ms_per_frame", "fid_extractor", "per_episode"):  # fmt: skip
        assert key in r, key
    assert r["random_weights"] is True and r["fid_extractor_trained"] is False
    assert r["episodes"] == 2 and len(r["per_episode"]) == 2
    assert r["settings"]["depth_rescale"] is False  # off unless asked (docs/control.md)
    assert r["fid"] is not None and r["fid"] >= 0 and r["fid_windows_simulated"] == 8
    assert 0 <= r["fid_windows_upright"] <= r["fid_windows_simulated"]
    if not any(e["fell"] for e in r["per_episode"]):  # nothing fell: the same windows, the same FID
        assert r["fid_windows_upright"] == 8 and r["fid_upright"] == pytest.approx(r["fid"])
    assert 0 < r["error_2d_px"] < 1e4 and r["generator_ms_per_frame"] > 0
    # the Table 3 markdown from reports: one row each, the report's numbers in it
    md = tmp_path / "table3.md"
    res = CliRunner().invoke(app, ["control-table", str(out), str(out), "--markdown", str(md)])
    assert res.exit_code == 0, res.output
    lines = md.read_text().splitlines()
    assert len(lines) == 4 and lines[0].startswith(
        "| run | generator | skill | views | episodes | success"
    )
    assert (
        lines[2].startswith("| control | gpt | walk | 1 | 2 |")
        and f"{r['error_2d_px']:.1f}" in lines[2]
    )
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    res = CliRunner().invoke(app, ["control-table", str(bad)])
    assert res.exit_code == 1 and "bad.json" in res.output and "control --json" in res.output


@pytest.mark.slow
def test_control_cli_video(tmp_path, gl_backend):
    """``--video`` renders the character with the generated reference drawn over it."""
    out, video = tmp_path / "control.json", tmp_path / "control.mp4"
    res = CliRunner().invoke(app, ["control", "--random-weights", "--seconds", "1", "--no-fid", "--depth-rescale",
                                   "--json", str(out), "--video", str(video)])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert video.is_file() and video.stat().st_size > 1000
    import imageio.v2 as imageio

    assert len(imageio.mimread(str(video))) == 30
    assert json.loads(out.read_text())["settings"]["depth_rescale"] is True


def test_control_cli_errors(tmp_path):
    res = CliRunner().invoke(app, ["control", "--random-weights", "--switch", "oops", "--no-fid"])
    assert res.exit_code == 1 and "--switch 'oops'" in res.output
    res = CliRunner().invoke(
        app, ["control", "--random-weights", "--skill", "fly", "--no-fid", "--seconds", "1"]
    )
    assert res.exit_code == 1 and "fly" in res.output and "walk" in res.output
    res = CliRunner().invoke(app, ["control", "--no-fid"])
    assert res.exit_code == 1 and "--tracker" in res.output
    res = CliRunner().invoke(app, ["control", "--random-weights", "--no-fid", "--follow", "orbit"])
    assert res.exit_code == 1 and "--follow 'orbit'" in res.output and "chunk, step" in res.output
    res = CliRunner().invoke(app, ["control", "--random-weights", "--no-fid", "--top-k", "0"])
    assert res.exit_code == 1 and "--top-k" in res.output


def test_bench_control_prints_table(tmp_path):
    out = tmp_path / "bench.json"
    res = CliRunner().invoke(app, ["bench", "control", "--seconds", "1", "--json", str(out)])
    assert res.exit_code == 0, res.output
    r = json.loads(out.read_text())
    assert r["steps"] == 30 and r["steps_per_s"] > 0
    assert abs(r["realtime_factor"] - r["steps_per_s"] / 30.0) < 1e-9
    assert abs(sum(r["stage_share"].values()) - 1.0) < 1e-6


def test_bench_control_table_on_console():
    res = CliRunner().invoke(app, ["bench", "control", "--seconds", "0.5"])
    assert res.exit_code == 0, res.output
    for word in ("generator", "g_inverse", "policy", "physics", "real time"):
        assert word in res.output


@pytest.mark.slow
def test_rollouts_feed_generator_loader_and_checkpoint_drives_control(tmp_path, models):
    """A tiny trained tracker checkpoint tracks a single-view clip; the written multi-view
    clips load through the generators' data loader with the source's label. The same
    checkpoint is driven by the generator (the checkpoint path of ``control``)."""
    from mimic2dm.generators.data import load_clips
    from rl_helpers import tiny_config, write_demo

    from mimic2dm.motion.format import load_motion2d
    from mimic2dm.train import train

    clip = write_demo(
        tmp_path / "clip.npz", seconds=1.5
    )  # one static view, label skill=march_squat
    train(tiny_config(tmp_path / "run", clip, "train.max_epochs=2", "logger.video_every=0",
                      "logger.tensorboard=false"))  # fmt: skip
    ck = tmp_path / "run" / "checkpoints" / "last.pt"
    out = tmp_path / "rollouts"
    res = CliRunner().invoke(app, ["rollouts", str(ck), "--data", str(clip), "--views", "2", "--out", str(out),
                                   "--sets", "2", "--json", str(tmp_path / "r.json")])  # fmt: skip
    assert res.exit_code == 0, res.output
    clips = load_clips(out)
    assert clips.num_items == 4 and clips.label_names == ["march_squat"]
    m = load_motion2d(sorted(out.glob("*.npz"))[0])
    assert (
        m.num_views == 2
        and m.keypoints3d is not None
        and m.meta["rollout_success"] in (True, False)
    )
    # the geometry of the generators' training pairs: orthogonal optical axes in the ground plane
    R = m.camera_R[:, 0]
    assert abs(float(R[0, 2, :2] @ R[1, 2, :2])) < 0.02  # dynamic cameras pan: nearly orthogonal
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["files"] == 2 and len(manifest["rollouts"]) == 1
    # static cameras only (for control generators); an unknown mode is refused
    out2 = tmp_path / "rollouts_static"
    res = CliRunner().invoke(app, ["rollouts", str(ck), "--data", str(clip), "--out", str(out2), "--sets", "3",
                                   "--camera-modes", "static"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert all(load_motion2d(f).camera_R.shape[1] == 1 for f in out2.glob("*.npz"))
    assert (
        len(list(out2.glob("*.npz"))) == 3
        and "static" in json.loads((out2 / "manifest.json").read_text())["geometry"]
    )
    res = CliRunner().invoke(app, ["rollouts", str(ck), "--data", str(clip), "--out", str(tmp_path / "r3"),
                                   "--camera-modes", "orbit"])  # fmt: skip
    assert res.exit_code == 1 and "orbit" in res.output

    from mimic2dm.rl.policy import load_policy

    ctl = Controller(load_policy(ck), models[1])
    try:
        rec = ctl.run(ControlSettings(seconds=1.0, skill="hop"))
    finally:
        ctl.close()
    assert len(rec.uv) == 30 and [c[0] for c in rec.chunks] == [0, 8, 16, 24]  # 8-step chunks


@needs_mocap
def test_project_views_matches_generator_pairs():
    """``rollouts``' projection equals the generators' orthogonal pair builder for V = 2."""
    import numpy as np
    from mimic2dm.generators.data import DEFAULT_MOCAP_DIR, ViewDatasetSpec, _pair

    from mimic2dm.characters.clips import load_mocap_keypoints
    from mimic2dm.control.rollouts import project_views
    from mimic2dm.motion.synth import resample

    c = load_mocap_keypoints(DEFAULT_MOCAP_DIR / "cmu_walk.npz")
    kp3 = resample(c.keypoints, c.fps, 30.0)[:40]
    for mode in ("static", "tracking", "dynamic"):
        a = _pair(kp3, c.keypoint_set, 30.0, mode, 37.0, 11, ViewDatasetSpec(), "walk")
        b = project_views(kp3, c.keypoint_set, 30.0, 2, mode, 37.0, 11, {"skill": "walk"})
        np.testing.assert_allclose(a.keypoints, b.keypoints, atol=1e-4)
        np.testing.assert_allclose(a.camera_R, b.camera_R, atol=1e-6)


def test_dog_generator_drives_a_dog_tracker(tmp_path):
    """A dog generator trained on ``gen_data=dog_views`` (the looped trot and pace clips) has
    the dog's skills as labels and drives a dog tracker; a switch changes the label."""
    from generator_helpers import HAVE_MOCAP, MOCAP, TINY, run_main
    from mimic2dm.generators import train_generator, train_tokenizer

    if not HAVE_MOCAP:
        pytest.skip(f"mocap clips not found in {MOCAP}")
    data = ["gen_data=dog_views", f"gen_data.dir={tmp_path}/train", f"gen_data.heldout_dir={tmp_path}/heldout",
            "gen_data.build.pairs=1", "gen_data.build.heldout_pairs=1", "gen_data.build.min_seconds=3",
            f"gen_data.build.mocap_dir={MOCAP}", "logger.wandb=false", "threads=1"]  # fmt: skip
    run_main(train_tokenizer, [*data, *TINY, f"run_dir={tmp_path / 'tok'}", "model.width=32"])
    run_main(train_generator, [*data, *TINY, "eval.num_samples=16", "eval.real_windows=64", "eval.val_windows=64",
                               f"tokenizer={tmp_path / 'tok'}", f"run_dir={tmp_path / 'gpt'}", "model=gpt"])  # fmt: skip
    policy, gen, _ = load_models(None, str(tmp_path / "gpt"), True, character="dog")
    assert policy.env_spec.character == "dog" and gen.data["keypoint_set"] == "dog17"
    assert gen.data["label_names"] == ["pace", "trot"]
    ctl = Controller(policy, gen)
    try:
        rec = ctl.run(
            ControlSettings(
                seconds=2.0, skill="trot", switches=[parse_switch("1:pace")], chunk_frames=32
            )
        )
    finally:
        ctl.close()
    trot, pace = gen.label_id("trot"), gen.label_id("pace")
    assert trot != pace and rec.labels[:30] == [trot] * 30 and rec.labels[30:] == [pace] * 30
    assert [c[0] for c in rec.chunks] == [0, 30]  # the switch starts a chunk
    res = CliRunner().invoke(app, ["control", "--random-weights", "--character", "dog", "--skill", "pace",
                                   "--seconds", "1", "--no-fid", "--json", str(tmp_path / "dog.json")])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "dog.json").read_text())["settings"]["skill"] == "pace"


def test_episode_metrics_locate_where_the_bound_is_lost():
    """Per episode: the worst step, the first step over the 100 px bound and the share of steps
    over it, from the worst view of each step (errors at 1080p: a 540-high image doubles them)."""
    from mimic2dm.control.controller import Record
    from mimic2dm.control.metrics import episode_metrics

    T, V, K = 10, 2, 17
    rec = Record()
    for t in range(T):
        ref = torch.full((V, K, 2), 200.0)
        uv = ref.clone()
        uv[1, 3, 0] += {4: 60.0, 6: 80.0, 7: 55.0}.get(t, 10.0)  # view 1, 1080p: 120 / 160 / 110 px
        rec.uv.append(uv)
        rec.ref.append(ref)
        rec.mask.append(torch.ones(V, K, dtype=torch.bool))
        rec.front.append(torch.ones(V, K, dtype=torch.bool))
        rec.root_height.append(0.9)
    m = episode_metrics(rec, hz=10.0, height=540, fall_height=0.3)
    assert m["max_error_2d_px"] == pytest.approx(160.0)
    assert m["max_error_time_s"] == pytest.approx(0.6)
    assert m["first_over_bound_s"] == pytest.approx(0.4)
    assert m["over_bound_share"] == pytest.approx(0.3)
    assert not m["success"] and not m["error_within_bound"] and not m["fell"]
    for uv in rec.uv:  # every step under the bound: nothing to locate
        uv[1, 3, 0] = 200.0 + 20.0
    m = episode_metrics(rec, hz=10.0, height=540, fall_height=0.3)
    assert m["success"] and m["first_over_bound_s"] is None and m["over_bound_share"] == 0.0
    assert m["max_error_2d_px"] == pytest.approx(40.0)


def test_upright_fid_pools_only_the_windows_before_a_fall():
    """``fid_upright``: FID of the simulated windows that end before the root first drops
    under the fall height; a fallen character's poses would otherwise dominate ``fid``."""
    from mimic2dm.generators.data import FeatureStats
    from mimic2dm.generators.fid import FIDConfig, FIDExtractor, MotionEncoder

    from mimic2dm.control.controller import Record
    from mimic2dm.control.metrics import (
        FIDSet,
        simulated_windows,
        table3,
        tracking_cameras,
        upright_steps,
    )

    kset = load_keypoint_set("coco17")
    K, T, W, fall = kset.num_keypoints, 80, 16, 57
    g = torch.Generator().manual_seed(0)
    base = torch.randn(1, K, 3, generator=g) * torch.tensor([0.2, 0.2, 0.5]) + torch.tensor(
        [0, 0, 1.0]
    )
    rec = Record()
    for t in range(T):
        wobble = 0.02 * math.sin(0.3 * t) * torch.ones(K, 3)
        kp = base[0] + wobble + torch.tensor([0.05 * t, 0.0, 0.0])
        if t >= fall:  # lying on the ground from the fall on
            kp = kp * torch.tensor([1.0, 1.0, 0.1])
        rec.kp3d.append(kp)
        rec.root_height.append(float(kp[list(kset.root), 2].mean()))
    assert upright_steps(rec, 0.5) == fall and upright_steps(rec, -1.0) == T
    cams = tracking_cameras(rec.stacked("kp3d"), kset, [0.0, 90.0], 10.0, 5.0, 1400.0)
    every = simulated_windows(rec, kset, cams, W)
    before = simulated_windows(rec, kset, cams, W, frames=fall)
    # T frames give T - 1 feature frames; windows start every 8: (79 - 16) // 8 + 1 = 8 and
    # (56 - 16) // 8 + 1 = 6 per view; the windows before the fall are the first of each view
    assert every.shape[0] == 2 * 8 and before.shape[0] == 2 * 6
    assert torch.allclose(before[:6], every[:6], atol=1e-5)
    assert torch.allclose(before[6:], every[8:14], atol=1e-5)
    torch.manual_seed(0)
    D = every.shape[-1]
    model = MotionEncoder(FIDConfig(in_dim=D, num_keypoints=K, window=W, width=16, feat_dim=4))
    mean, std = every.reshape(-1, D).mean(0), every.reshape(-1, D).std(0) + 1e-3
    ext = FIDExtractor(model, FeatureStats(mean, std))
    real = (before.clone(), torch.ones(before.shape[0], W, K, dtype=torch.bool))
    fs = FIDSet(ext, False, real, "test")
    ep = [{"success": False, "fell": True, "error_2d_px": 1.0, "max_error_2d_px": 1.0,
           "generator_ms_per_frame": 0.1}]  # fmt: skip
    r = table3(ep, every, every, fs, upright=before)
    assert r["fid_windows_upright"] == 12 and r["fid_windows_simulated"] == 16
    assert r["fid_upright"] == pytest.approx(0.0, abs=1e-3)  # the same windows as the real set
    assert r["fid"] > r["fid_upright"] + 1e-3  # the fallen windows are far from them
    assert "fid_upright" not in table3(ep, every, every, fs)


def test_fid_views_are_the_generator_datas_static_views():
    """The simulated character is scored through static cameras placed as the generator data's
    (the real FID set's) views are: the same pixels as ``synthesize_views(..., "static")`` at
    that azimuth, elevation and focal; the root crosses the image as in the real set, where a
    tracking camera would hold it still."""
    import numpy as np

    from mimic2dm.control.metrics import static_views, tracking_cameras
    from mimic2dm.geometry.virtual import VirtualCameraConfig
    from mimic2dm.motion.synth import synthesize_views

    kset = load_keypoint_set("coco17")
    K, T = kset.num_keypoints, 90
    g = torch.Generator().manual_seed(1)
    body = torch.randn(K, 3, generator=g) * torch.tensor([0.15, 0.15, 0.4]) + torch.tensor(
        [0, 0, 1.0]
    )
    kp3d = torch.stack(
        [body + torch.tensor([0.04 * t, 0.01 * t, 0.0]) for t in range(T)]
    )  # 1.2 m/s
    for az in (30.0, 120.0):
        cfg = VirtualCameraConfig(focal_range=(1400.0, 1400.0), azimuth_range_deg=(az, az),
                                  elevation_range_deg=(10.0, 10.0))  # fmt: skip
        want = synthesize_views(kp3d.numpy(), "coco17", 30.0, camera="static", camera_config=cfg)
        (cam,) = static_views(kp3d, kset, [az], 10.0, 1400.0)
        uv, _ = cam.project(kp3d)
        np.testing.assert_allclose(uv.numpy(), want.keypoints[0], atol=1e-2)
        root = uv[:, list(kset.root)].mean(1)
        assert (root[-1] - root[0]).norm() > 20.0  # the root moves across the image
        (trk,) = tracking_cameras(kp3d, kset, [az], 10.0, 5.0, 1400.0)
        root_t = trk.project(kp3d)[0][:, list(kset.root)].mean(1)
        assert (root_t[-1] - root_t[0]).norm() < 1.0  # a tracking camera holds it still


def test_lateral_path_reads_image_motion_as_metres_in_the_image_plane():
    """Root velocities made from a known 3D step come back as that step: exactly its
    image-plane part with one view (the viewing axis, on the ground, is ``null``), the whole
    step with two orthogonal views (nothing unseen)."""
    kset = load_keypoint_set("coco17")
    K = kset.num_keypoints
    cam = FollowCamera(2, 30.0, elevation_deg=10.0)
    R, _, _ = cam.place(torch.tensor([1.0, 2.0, 1.0]))
    scale = torch.tensor([140.0, 140.0])
    size_m = 140.0 * cam.distance / cam.focal
    d = torch.tensor([0.05, -0.02, 0.01])  # metres per frame
    feats = torch.zeros(2, 6, 2 * K + 3)
    feats[..., 2 * K : 2 * K + 2] = (R[:, :2] @ d / size_m)[:, None]  # body sizes per frame
    feats[..., 2 * K + 2] = 0.3  # a size velocity: not used
    step, null = lateral_path(feats, R, scale, kset, cam.distance, cam.focal)
    assert torch.allclose(step, d.expand(6, 3), atol=1e-5) and null.shape == (3, 0)
    step1, null1 = lateral_path(feats[:1], R[:1], scale[:1], kset, cam.distance, cam.focal)
    axis = R[0, 2].clone()
    axis[2] = 0
    axis = axis / axis.norm()
    assert null1.shape == (3, 1) and abs(float(null1[:, 0] @ axis)) == pytest.approx(1.0, abs=1e-5)
    in_plane = R[0, :2].T @ (R[0, :2] @ d)
    assert torch.allclose(step1, in_plane.expand(6, 3), atol=1e-5)


def test_lateral_path_of_a_projected_sideways_walk():
    """A rigid body moving across a static follow camera's view at 5 m, projected, turned into
    canonical features and read back, moves by the 3D step (within 1 %)."""
    from mimic2dm.geometry.camera import project_points
    from mimic2dm.motion.canonical import to_canonical

    kset = load_keypoint_set("coco17")
    cam = FollowCamera(1, 70.0, elevation_deg=10.0)
    P0 = torch.tensor([0.0, 0.0, 1.0])
    R, t, k = cam.place(P0)
    body = torch.randn(17, 3, generator=torch.Generator().manual_seed(0)) * 0.2
    body[list(kset.root)] = body[list(kset.root)] - body[list(kset.root)].mean(0)
    sh = body[[5, 6]].mean(0)
    body[[5, 6]] += (
        torch.tensor([0.0, 0.0, 0.5]) - sh
    )  # shoulders 0.5 m above the hips (the body-size segment)
    d = R[0, 0] * 0.04  # along the image's x axis, 4 cm per frame
    pts = P0 + body[None] + d * torch.arange(10.0)[:, None, None]  # [10, K, 3]
    uv, _ = project_points(R[0], t[0], k[0], pts)
    c = to_canonical(uv, kset, window=1)
    feats = torch.cat([c.local[:-1].flatten(1), c.root_vel, c.log_scale_vel[:, None]], dim=1)[None]
    scale = body_scale(uv[:1], torch.ones(1, 17, dtype=torch.bool), kset, window=1)
    step, _ = lateral_path(feats, R, scale, kset, cam.distance, cam.focal)
    # du / s = dx / S at the root's depth: the step comes back whatever the body's size
    assert torch.allclose(step, d.expand_as(step), atol=4e-4)  # 1 % of 4 cm


def test_level_path_removes_the_vertical_drift_and_keeps_a_hop():
    """A climb of 2 cm per frame under a 15-frame hop: the drift goes, the hop stays, and the
    horizontal steps are integrated as they are."""
    i = torch.arange(45.0)
    vz = 0.02 + 0.05 * torch.sin(2 * math.pi * i / 15)
    steps = torch.stack([torch.full_like(i, 0.03), torch.zeros_like(i), vz], dim=1)
    off = level_path(steps[30:], steps[:30, 2])  # the window: 15 of history + the chunk's 15
    assert torch.equal(off[0], torch.zeros(3))
    assert torch.allclose(off[:, 0], 0.03 * torch.arange(15.0), atol=1e-5)
    hop = torch.cumsum(0.05 * torch.sin(2 * math.pi * i[30:] / 15), 0)
    assert torch.allclose(off[1:, 2], hop[:-1], atol=1e-5)  # the 2 cm/frame climb is gone
    assert float(off[:, 2].abs().max()) > 0.15
    # the mean is over the newest window - n history steps, all of them when fewer
    ramp = torch.zeros(10, 3)
    for h, expect in ((torch.arange(16.0), 7.5), (torch.arange(40.0), 29.5), (torch.zeros(0), 0.0)):
        got = level_path(ramp, h, window=30)[1, 2]  # = -(mean of the window's vertical steps)
        n = min(20, h.shape[0])
        assert float(got) == pytest.approx(-expect * n / (n + 10), abs=1e-5)


def test_control_reference_keeps_each_frames_cameras():
    """Frames keep the cameras they were pushed with; set_camera rewrites every kept frame;
    set_frame_camera refuses a frame that is not kept."""
    cams = [FollowCamera(1).place(torch.tensor([float(i), 0.0, 1.0])) for i in range(6)]
    src = ControlReference("coco17", 2, 1, cams[0], 1080, capacity=4)
    for i in range(6):
        src.push(torch.zeros(17, 2), camera=cams[i])
    R, t, k = src.cameras(torch.tensor([5, 3]))
    assert torch.allclose(t[0], cams[5][1]) and torch.allclose(t[1], cams[3][1])
    src.set_frame_camera(4, *cams[0])
    assert torch.allclose(src.cameras(torch.tensor([4, 4]))[1][0], cams[0][1])
    with pytest.raises(ValueError, match="frame 1 is not kept"):
        src.set_frame_camera(1, *cams[0])
    src.set_camera(*cams[2])
    assert torch.allclose(src.cameras(torch.tensor([3, 5]))[1], cams[2][1].expand(2, 1, 3))
    src.push(torch.zeros(17, 2))  # without a camera: the last set_camera's
    assert torch.allclose(src.cameras(torch.tensor([6, 6]))[1][0], cams[2][1])


def test_step_cameras_follow_the_generated_path_and_the_characters_depth(models):
    """``follow="step"``: the cameras move every step; the reference root and size stay where
    the chunk start put them (the cameras carry the generated global motion); the camera
    target keeps the character's depth along the horizontal viewing axis, 5 m away."""
    policy, gen = models
    ctl = Controller(policy, gen)
    try:
        rec = ctl.run(ControlSettings(seconds=1.0, skill="walk", follow="step", seed=1))
    finally:
        ctl.close()
    kset = load_keypoint_set("coco17")
    R, t = rec.stacked("cam_R")[:, 0], rec.stacked("cam_t")[:, 0]
    eye = -torch.einsum("tji,tj->ti", R, t)
    target = eye + 5.0 * R[:, 2]
    assert float((t[1:] - t[:-1]).norm(dim=-1).min()) > 1e-4  # moved at every step
    root3d = rec.stacked("kp3d")[:, list(kset.root)].mean(1)
    axis = R[:, 2, :2] / R[:, 2, :2].norm(dim=-1, keepdim=True)
    depth_gap = ((root3d - target)[:, :2] * axis).sum(-1)
    assert float(depth_gap.abs().max()) < 1e-4
    starts = [c[0] for c in rec.chunks]
    assert starts == [0, 8, 16, 24]
    ref = rec.stacked("ref")[:, 0]
    ones = torch.ones(ref.shape[:2], dtype=torch.bool)
    ref_root = root_2d(ref, ones, kset)
    for s in starts:
        chunk = ref_root[s : s + 8]
        assert torch.allclose(chunk, chunk[:1].expand_as(chunk), atol=1e-2)
        assert torch.allclose(ref_root[s], rec.chunks[starts.index(s)][1][0], atol=1e-2)
    with pytest.raises(ValueError, match="--follow 'orbit'"):
        ControlSettings(follow="orbit")


def test_step_cameras_with_two_views_move_together():
    """Two orthogonal views (``gpt_multiview``): both cameras follow one 3D root path (their
    targets agree at every step) and each view's reference root holds still within a chunk."""
    policy, gen = load_models(None, None, True, "gpt_multiview")[:2]
    ctl = Controller(policy, gen)
    try:
        rec = ctl.run(ControlSettings(seconds=0.6, follow="step", seed=2))
    finally:
        ctl.close()
    kset = load_keypoint_set("coco17")
    R, t = rec.stacked("cam_R"), rec.stacked("cam_t")  # [T, 2, ...]
    eye = -torch.einsum("tvji,tvj->tvi", R, t)
    target = eye + 5.0 * R[:, :, 2]
    assert torch.allclose(target[:, 0], target[:, 1], atol=1e-4)
    assert float((target[1:, 0] - target[:-1, 0]).norm(dim=-1).min()) > 1e-5
    ref = rec.stacked("ref")  # [T, 2, K, 2]
    for v in range(2):
        r = root_2d(ref[:, v], torch.ones(ref.shape[0], 17, dtype=torch.bool), kset)
        assert torch.allclose(r[:8], r[:1].expand(8, 2), atol=1e-2)
