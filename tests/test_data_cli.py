"""``mimic2dm data``: synth on the shared mocap clips, check, import and demo, via CliRunner."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shared_data import AI4ANIMATION_DOGS
from typer.testing import CliRunner

from mimic2dm.geometry.camera import Camera
from mimic2dm.motion.cli import app
from mimic2dm.motion.format import (
    MIN_CONTROL_FRAMES,
    control_frames,
    load_motion2d,
    load_motion3d,
    save_motion2d,
)
from mimic2dm.motion.synth import NOISE_CONF_SCALE, project_view, resample, synthesize_views
from mimic2dm.utils.paths import mocap_dir

MOCAP = mocap_dir()
needs_mocap = pytest.mark.skipif(
    not MOCAP.is_dir(), reason=f"shared mocap clips not found at {MOCAP}"
)
runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def synth(tmp_path: Path, clip: str, character: str, *extra: str, name: str = "out.npz"):
    out = tmp_path / name
    res = invoke("synth", MOCAP / clip, "--character", character, "--out", out, *extra)
    return res, out


def assert_reprojects(m, atol: float = 0.05) -> None:
    """Stored 3D GT through stored cameras lands on stored keypoints wherever confidence > 0."""
    for v, cam in enumerate(m.cameras()):
        uv, _ = cam.project(torch.as_tensor(m.keypoints3d))
        ok = m.confidence[v] > 0
        assert ok.mean() > 0.5
        np.testing.assert_allclose(uv.numpy()[ok], m.keypoints[v][ok], atol=atol)


# ----------------------------------------------------------------------------- synth
@needs_mocap
@pytest.mark.parametrize("camera", ["static", "tracking", "dynamic"])
def test_synth_cmu_walk(tmp_path: Path, camera: str):
    from mimic2dm.characters import mocap

    res, out = synth(
        tmp_path, "cmu_walk.npz", "humanoid", "--views", "3", "--camera", camera, "--seed", "3"
    )
    assert res.exit_code == 0, res.output
    m = load_motion2d(out)
    assert m.num_views == 3 and m.num_frames == 154 and m.fps == 60.0 and m.keypoint_set == "coco17"
    gt = mocap.human_keypoints(mocap.load_cmu_clip(MOCAP / "cmu_walk.npz")).numpy()
    np.testing.assert_allclose(m.keypoints3d, gt, atol=1e-6)
    assert_reprojects(m)
    F = m.camera_R.shape[1]
    assert F == (1 if camera == "static" else 154)
    assert all(c.is_dynamic == (camera != "static") for c in m.cameras())
    assert not np.allclose(m.keypoints[0], m.keypoints[1], equal_nan=True)  # views differ
    assert not np.allclose(m.camera_R[0], m.camera_R[1])
    assert m.meta["camera_mode"] == camera and m.meta["source"].endswith("cmu_walk.npz")


@needs_mocap
def test_synth_dog_trot_resampled_with_labels(tmp_path: Path):
    from mimic2dm.characters import mocap

    opts = "--views 2 --camera dynamic --fps 30 --label gait=trot --label speed=fast".split()
    res, out = synth(tmp_path, "dog_trot.npz", "dog", *opts)
    assert res.exit_code == 0, res.output
    m = load_motion2d(out)
    gt = mocap.dog_keypoints(mocap.load_dog_clip(MOCAP / "dog_trot.npz")).numpy()
    frames = (len(gt) + 1) // 2  # every other frame of the 60 fps clip, the first kept
    if AI4ANIMATION_DOGS:
        assert len(gt) == 33 and frames == 17  # 33 frames at 60 fps -> 17 at 30
    assert m.keypoint_set == "dog17" and m.fps == 30.0 and m.num_frames == frames
    np.testing.assert_allclose(m.keypoints3d, gt[::2], atol=1e-5)
    assert m.labels == {"gait": "trot", "speed": "fast"}
    assert m.camera_R.shape[:2] == (2, frames)
    assert_reprojects(m)


@needs_mocap
def test_synth_ground_lifts_the_motion_onto_the_characters_feet(tmp_path: Path):
    """``--ground`` lifts the whole 3D motion by one constant (recorded in meta) before the
    projection, so the stored GT has its lowest ankle at the humanoid's flat-foot height."""
    from mimic2dm.characters import mocap
    from mimic2dm.characters.feet import character_feet
    from mimic2dm.characters.registry import load_character

    res, out = synth(tmp_path, "cmu_run.npz", "humanoid", "--ground")
    assert res.exit_code == 0, res.output
    m = load_motion2d(out)
    gt = mocap.human_keypoints(mocap.load_cmu_clip(MOCAP / "cmu_run.npz")).numpy()
    lift = m.meta["ground_lift_m"]
    assert 0.045 < lift < 0.06  # the shared run's ankle reaches 0 m; the humanoid's is at 0.052
    np.testing.assert_allclose(m.keypoints3d, gt + np.array([0, 0, lift], np.float32), atol=1e-5)
    idx, ground = character_feet(load_character("humanoid"))
    assert np.isclose((m.keypoints3d[:, idx, 2] - ground.numpy()).min(), 0.0, atol=1e-5)
    assert_reprojects(m)
    res, plain = synth(tmp_path, "cmu_run.npz", "humanoid", name="plain.npz")
    assert "ground_lift_m" not in load_motion2d(plain).meta


@needs_mocap
def test_synth_noise_and_drops(tmp_path: Path):
    clean = load_motion2d(
        synth(tmp_path, "cmu_walk.npz", "humanoid", "--seed", "1", name="a.npz")[1]
    )
    noise = ("--seed", "1", "--noise-px", "8", "--drop-prob", "0.2")
    res, out = synth(tmp_path, "cmu_walk.npz", "humanoid", *noise, name="b.npz")
    assert res.exit_code == 0, res.output
    noisy = load_motion2d(out)
    np.testing.assert_array_equal(noisy.camera_R, clean.camera_R)  # same seed, same cameras
    err = np.linalg.norm(noisy.keypoints - clean.keypoints, axis=-1)
    assert 5 < np.nanmean(err) < 15  # Rayleigh mean sigma * sqrt(pi/2) ~ 10 px
    visible = clean.confidence > 0
    dropped = (noisy.confidence == 0) & visible
    assert 0.15 < dropped.sum() / visible.sum() < 0.25
    kept = (noisy.confidence > 0) & visible
    expected = np.exp(-(err[kept] ** 2) / (2 * (NOISE_CONF_SCALE * 1080) ** 2))
    np.testing.assert_allclose(
        noisy.confidence[kept], expected, rtol=1e-3, atol=1e-4
    )  # falls with the error
    again = load_motion2d(synth(tmp_path, "cmu_walk.npz", "humanoid", *noise, name="c.npz")[1])
    np.testing.assert_array_equal(again.keypoints, noisy.keypoints)  # deterministic


@needs_mocap
def test_synth_camera_ranges_narrowed_to_the_follow_camera(tmp_path: Path):
    """--distance/--focal/--elevation fix the camera (azimuth stays random per view)."""
    res, out = synth(
        tmp_path, "cmu_walk.npz", "humanoid", "--views", "3", "--camera", "tracking",
        "--distance", "5", "--focal", "1400", "--elevation", "10",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    m = load_motion2d(out)
    np.testing.assert_allclose(m.camera_intrinsics[..., :2], 1400.0)
    assert m.meta["camera_ranges"]["distance_range"] == [5.0, 5.0]
    kp3 = m.keypoints3d
    for v in range(m.num_views):
        centre = -np.einsum("fji,fj->fi", m.camera_R[v], m.camera_t[v])  # camera centre, world
        root = kp3[:, [11, 12]].mean(axis=1)  # hips
        horiz = np.linalg.norm((centre - root)[:, :2], axis=1)
        dist = np.linalg.norm(centre - root, axis=1)
        np.testing.assert_allclose(dist, 5.0, atol=0.3)
        np.testing.assert_allclose(np.degrees(np.arccos(horiz / dist)), 10.0, atol=4.0)
    assert not np.allclose(m.camera_R[0], m.camera_R[1])  # azimuths differ
    # the default ranges give other focal lengths; a bad range is refused, nothing written
    res, out2 = synth(tmp_path, "cmu_walk.npz", "humanoid", "--seed", "1", name="d.npz")
    assert not np.allclose(load_motion2d(out2).camera_intrinsics[..., 0], 1400.0)
    for opt, bad in (("--distance", "8:3"), ("--focal", "0"), ("--elevation", "a:b")):
        res, out3 = synth(tmp_path, "cmu_walk.npz", "humanoid", opt, bad, name="bad.npz")
        assert res.exit_code == 2 and opt in res.output and not out3.exists()


@needs_mocap
def test_synth_bad_inputs(tmp_path: Path):
    res, _ = synth(tmp_path, "dog_trot.npz", "humanoid")
    assert res.exit_code == 1 and "cannot be used with --character humanoid" in res.output
    res, _ = synth(tmp_path, "cmu_walk.npz", "humanoid", "--camera", "orbit")
    assert res.exit_code == 2 and "orbit" in res.output
    res, _ = synth(tmp_path, "cmu_walk.npz", "robot")
    assert res.exit_code == 2
    res, _ = synth(tmp_path, "cmu_walk.npz", "humanoid", "--views", "0")
    assert res.exit_code == 2
    res, _ = synth(tmp_path, "cmu_walk.npz", "humanoid", "--label", "novalue")
    assert res.exit_code == 2
    res = invoke("synth", tmp_path / "missing.npz", "--out", tmp_path / "o.npz")
    assert res.exit_code == 1 and "missing.npz" in res.output
    assert not (tmp_path / "out.npz").exists()
    # 2.6 s at 0.1 fps is a single frame: refused (with the minimum), nothing written
    res, out = synth(tmp_path, "cmu_walk.npz", "humanoid", "--fps", "0.1", name="slow.npz")
    assert res.exit_code == 1 and not out.exists()
    assert f"expected >= {MIN_CONTROL_FRAMES} frames at 30 Hz" in res.output


def test_points_behind_camera_get_zero_confidence():
    cam = Camera.look_at([0.0, 0.0, 1.0], [1.0, 0.0, 1.0], 1000.0, 640, 480)
    pts = np.array(
        [[[3.0, 0.0, 1.0], [-3.0, 0.0, 1.0], [3.0, 30.0, 1.0]]]
    )  # in front, behind, off-image
    uv, vis = project_view(cam, pts)
    np.testing.assert_allclose(uv[0, 0], [320, 240], atol=1e-4)
    assert np.isnan(uv[0, 1]).all() and np.isfinite(uv[0, 2]).all()
    assert vis.tolist() == [[True, False, False]]


def test_synthesize_views_object_and_resample():
    T = 10
    kp = np.zeros((T, 17, 3))
    kp[..., 2] = np.linspace(0.1, 1.7, 17)
    kp[..., 0] = np.linspace(0, 1, T)[:, None]
    ball = np.stack([np.linspace(0, 1, T), np.full(T, 0.5), np.full(T, 0.2)], -1)
    m = synthesize_views(kp, "coco17", 30, num_views=2, camera="tracking", seed=5, object3d=ball)
    assert m.object_center.shape == (2, T, 2) and m.object3d.shape == (T, 3)
    for v, cam in enumerate(m.cameras()):
        uv, _ = cam.project(torch.as_tensor(ball, dtype=torch.float32)[:, None])
        np.testing.assert_allclose(uv.numpy()[:, 0], m.object_center[v], atol=1e-3)
    x = np.arange(7.0)[:, None]
    np.testing.assert_allclose(resample(x, 60, 30)[:, 0], [0, 2, 4, 6])
    np.testing.assert_allclose(resample(x, 30, 60)[:, 0], np.arange(13) / 2)


# ----------------------------------------------------------------------------- check
@pytest.fixture(scope="module")
def valid_clip(tmp_path_factory) -> Path:
    T = 8
    kp = np.zeros((T, 17, 3))
    kp[..., 2] = np.linspace(0.1, 1.7, 17)
    kp[..., 1] = np.linspace(-0.3, 0.3, 17)
    m = synthesize_views(kp, "coco17", 30, num_views=2, camera="dynamic", seed=0, drop_prob=0.25)
    path = tmp_path_factory.mktemp("check") / "valid.npz"
    save_motion2d(m, path)
    return path


def test_check_valid_and_invalid(valid_clip: Path, tmp_path: Path):
    res = invoke("check", valid_clip)
    assert res.exit_code == 0, res.output
    for cell in ("valid.npz", "motion2d", "coco17", "1920x1080", "dynamic", "1/1 file(s) valid"):
        assert cell in res.output
    raw = dict(np.load(valid_clip))
    raw["confidence"] = raw["confidence"][..., :16]
    bad = tmp_path / "bad.npz"
    np.savez(bad, **raw)
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    res = invoke("check", valid_clip, bad, tmp_path / "junk.npz")
    assert res.exit_code == 1
    assert (
        f"{bad}: field 'confidence' has shape [2, 8, 16], expected [V, T, K] = [2, 8, 17]"
        in res.output
    )
    assert "junk.npz: field '(file)'" in res.output and "1/3 file(s) valid" in res.output
    assert "valid.npz" in res.output  # the good file is still reported


def test_check_motion3d_and_threshold(tmp_path: Path, valid_clip: Path):
    res = invoke("demo", tmp_path / "demo", "--seconds", "1")
    assert res.exit_code == 0, res.output
    res = invoke("check", tmp_path / "demo" / "demo_3d.npz", tmp_path / "demo" / "demo_2d.npz")
    assert res.exit_code == 0, res.output
    assert "motion3d (humanoid)" in res.output and "static" in res.output
    m = load_motion2d(valid_clip)
    masked = 1 - m.mask(0.0).mean()
    assert f"{masked:.1%}" in invoke("check", valid_clip, "--threshold", "0.0").output


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_check_reports_corruptions(data, valid_clip: Path):
    raw = dict(np.load(valid_clip))
    field = data.draw(
        st.sampled_from(
            ["keypoints", "confidence", "fps", "keypoint_set", "camera_t", "image_size"]
        )
    )
    how = data.draw(st.sampled_from(["remove", "scramble"]))
    if how == "remove":
        raw.pop(field)
    elif field == "fps":
        raw[field] = np.array(data.draw(st.sampled_from([-1.0, 0.0, np.nan])))
    elif field == "keypoint_set":
        raw[field] = np.array(data.draw(st.sampled_from(["", "coco", "h36m"])))
    else:
        x = raw[field]
        raw[field] = np.zeros(x.shape[:-1] + (x.shape[-1] + data.draw(st.integers(1, 3)),), x.dtype)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "bad.npz"
        np.savez(path, **raw)
        res = invoke("check", path)
    assert res.exit_code == 1
    assert f"{path}: field '{field}'" in res.output and "expected" in res.output


def test_check_refuses_clips_too_short_or_fully_masked(tmp_path: Path):
    kp = np.zeros((2, 17, 3))
    kp[..., 2] = np.linspace(0.1, 1.7, 17)
    short = tmp_path / "short.npz"
    save_motion2d(synthesize_views(kp, "coco17", 30, num_views=1, seed=0), short)
    res = invoke("check", short)
    assert res.exit_code == 1 and "0/1 file(s) valid" in res.output
    assert (
        f"{short}: field 'keypoints' has 2 frame(s) at 30 fps = 2 frame(s) at the 30 Hz control "
        f"rate, expected >= {MIN_CONTROL_FRAMES} frames at 30 Hz" in res.output
    )
    # at a 60 Hz control rate the same clip resamples to 3 frames: long enough
    assert invoke("check", short, "--control-hz", "60").exit_code == 0
    m = synthesize_views(np.repeat(kp, 4, axis=0), "coco17", 30, num_views=2, seed=0)
    m.confidence[1] = 0.1  # view 1: every keypoint below the 0.3 threshold
    masked = tmp_path / "masked.npz"
    save_motion2d(m, masked)
    res = invoke("check", masked)
    assert (
        res.exit_code == 1
        and f"{masked}: field 'confidence' masks every keypoint of view(s) [1]" in res.output
    )
    assert invoke("check", masked, "--threshold", "0.05").exit_code == 0
    assert (
        control_frames(2, 30, 60) == 3
        and control_frames(8, 30, 15) == 4
        and control_frames(1, 5, 30) == 1
    )


# ----------------------------------------------------------------------------- import / demo
def test_import_json_and_aist(tmp_path: Path):
    rng = np.random.default_rng(0)
    results = [
        {
            "image_id": i,
            "category_id": 1,
            "score": 0.9,
            "keypoints": np.concatenate([rng.uniform(0, 100, (17, 2)), np.ones((17, 1))], 1)
            .ravel()
            .tolist(),
        }
        for i in range(4)
    ]
    (tmp_path / "res.json").write_text(json.dumps(results))
    out = tmp_path / "clip.npz"
    size = "--fps 25 --width 640 --height 480 --random-weights".split()
    res = invoke("import-json", tmp_path / "res.json", "--out", out, *size)
    assert res.exit_code == 0, res.output
    m = load_motion2d(out)
    assert m.num_frames == 4 and m.image_size == (640, 480) and m.meta["random_weights"] is True
    res = invoke("import-json", tmp_path / "res.json", "--out", tmp_path / "x.npz", "--fps", "25")
    assert res.exit_code == 1 and "field 'image_size'" in res.output
    res = invoke("import-aist", tmp_path, "--seq", "nothing", "--out", tmp_path / "a.npz")
    assert res.exit_code == 1 and "nothing" in res.output


def test_demo_clip(tmp_path: Path):
    from mimic2dm.characters.demo_clip import make_demo_clip
    from mimic2dm.characters.registry import load_character

    m3, m2 = make_demo_clip(seconds=4, fps=30, seed=0)
    spec = load_character("humanoid")
    assert m3.num_frames == 120 and m2.num_frames == 120 and m2.num_views == 1
    lo, hi = spec.joint_range[:, 0], spec.joint_range[:, 1]
    assert (m3.dof_pos >= lo - 1e-6).all() and (m3.dof_pos <= hi + 1e-6).all()
    # smooth: bounded joint speed and acceleration
    vel = np.diff(m3.dof_pos, axis=0) * 30
    assert np.abs(vel).max() < np.radians(400) and np.abs(
        np.diff(vel, axis=0) * 30
    ).max() < np.radians(6000)
    # the supporting foot stays on the floor and in place
    ankles = m3.keypoints3d[:, 15:17]
    low = ankles[np.arange(120), ankles[..., 2].argmin(1)]
    np.testing.assert_allclose(low[:, 2], 0.052, atol=2e-3)
    np.testing.assert_allclose(low[:, 0], 0.0, atol=2e-3)
    assert (
        m3.keypoints3d[:, 0, 2].max() - m3.keypoints3d[:, 0, 2].min() > 0.3
    )  # the squat moves the head down
    assert m2.summary()["cameras"] == "static" and m2.confidence.min() == 1.0
    assert_reprojects(m2)
    res = invoke("demo", tmp_path)
    assert res.exit_code == 0, res.output
    back = load_motion3d(tmp_path / "demo_3d.npz")
    np.testing.assert_allclose(back.keypoints3d, m3.keypoints3d)


def test_synth_from_motion3d_file(tmp_path: Path):
    assert invoke("demo", tmp_path, "--seconds", "1").exit_code == 0
    out = tmp_path / "views.npz"
    res = invoke(
        "synth",
        tmp_path / "demo_3d.npz",
        "--character",
        "humanoid",
        "--views",
        "2",
        "--camera",
        "tracking",
        "--out",
        out,
    )
    assert res.exit_code == 0, res.output
    m = load_motion2d(out)
    np.testing.assert_array_equal(
        m.keypoints3d, load_motion3d(tmp_path / "demo_3d.npz").keypoints3d
    )
    assert m.num_views == 2 and m.fps == 30.0
    assert_reprojects(m)
    res = invoke(
        "synth", tmp_path / "demo_3d.npz", "--character", "dog", "--out", tmp_path / "x.npz"
    )
    assert res.exit_code == 1 and "cannot be used with --character dog" in res.output
