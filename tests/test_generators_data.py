"""Generators' data: view-dataset builder, canonical windows, masks, statistics, G^-1."""

import json

import numpy as np
import pytest
import torch
from generator_helpers import MOCAP, build_views, needs_mocap
from mimic2dm.generators.data import (
    ViewDatasetSpec,
    WindowSampler,
    build_view_dataset,
    ensure_heldout_views,
    ensure_view_dataset,
    feature_mask,
    features_to_pixels,
    load_clips,
    prepare_data,
    spec_from_config,
    window_pixel_errors,
)

from mimic2dm.motion.format import Motion2D, MotionFormatError, load_motion2d, save_motion2d
from mimic2dm.motion.synth import root_trajectory

pytestmark = needs_mocap


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    """Small models: one torch thread is faster than two on shared cores."""


@pytest.fixture(scope="module")
def views(tmp_path_factory):
    return build_views(tmp_path_factory, pairs=2, seed=3, drop_prob=0.2)


def test_builder_writes_orthogonal_labelled_pairs(views):
    out, spec, files = views
    assert len(files) == 4 and all(f.is_file() for f in files)
    m = load_motion2d(files[0])
    assert (
        m.num_views == 2
        and m.fps == 30.0
        and m.labels == {"skill": "walk"}
        and m.keypoint_set == "coco17"
    )
    a0, a1 = m.meta["azimuths_deg"]
    assert a1 - a0 == pytest.approx(90.0)
    # the two cameras sit at orthogonal azimuths around the point they are placed from
    root = root_trajectory(m.keypoints3d, "coco17")
    centre = root[0] if m.meta["camera_mode"] == "tracking" else 0.5 * (root.min(0) + root.max(0))
    eyes = [-m.camera_R[v, 0].T @ m.camera_t[v, 0] - centre for v in range(2)]
    d0, d1 = (e[:2] / np.linalg.norm(e[:2]) for e in eyes)
    assert abs(np.dot(d0, d1)) < 1e-3
    assert json.loads((out / "manifest.json").read_text())["digest"] == spec.digest()
    again = build_view_dataset(out / "again", spec, MOCAP)
    np.testing.assert_array_equal(load_motion2d(again[0]).keypoints, m.keypoints)


def test_ensure_reuses_same_spec_and_refuses_another(views):
    out, spec, _ = views
    assert ensure_view_dataset(out, spec, MOCAP) == out
    with pytest.raises(ValueError, match="another spec"):
        ensure_view_dataset(out, ViewDatasetSpec(clips=("cmu_walk",), pairs=1), MOCAP)


def test_prepare_data_builds_train_and_heldout_with_their_own_specs(tmp_path):
    from omegaconf import OmegaConf

    build = {"clips": ["cmu_walk"], "pairs": 1, "seed": 0, "heldout_pairs": 2, "heldout_seed": 7,
             "fps": 30.0, "camera_modes": ["static"], "noise_px": 0.0, "drop_prob": 0.0,
             "mocap_dir": str(MOCAP)}  # fmt: skip
    cfg = OmegaConf.create(
        {"dir": str(tmp_path / "train"), "heldout_dir": str(tmp_path / "held"), "build": build}
    )
    train, held = prepare_data(cfg)
    assert (train, held) == (tmp_path / "train", tmp_path / "held")
    assert len(list(train.glob("*.npz"))) == 1 and len(list(held.glob("*.npz"))) == 2
    digest = json.loads((held / "manifest.json").read_text())["digest"]
    assert digest == spec_from_config(cfg.build, "heldout_seed", "heldout_pairs").digest()
    assert digest != json.loads((train / "manifest.json").read_text())["digest"]
    assert ensure_heldout_views(held, cfg.build) == held  # same spec: accepted


def test_clips_windows_masks_and_stats(views):
    out, _, _ = views
    clips = load_clips(out)
    assert clips.label_names == ["run", "walk"] and clips.num_items == 8
    assert clips.feats.shape == (int(clips.lengths.sum()), 37) and clips.mask.shape[1] == 17
    assert not clips.mask.all(), "drop_prob should have masked keypoints"
    stats = clips.compute_stats()
    fm = feature_mask(clips.mask)
    col = 0  # nose x: masked entries (local 0) must not enter the mean
    assert stats.mean[col] == pytest.approx(float(clips.feats[fm[:, col], col].mean()), abs=1e-5)
    s = WindowSampler(clips, 32, stats)
    b = s.sample(16, torch.Generator().manual_seed(0))
    assert (
        b.x.shape == (16, 32, 37)
        and b.fmask.shape == (16, 32, 37)
        and b.kmask.shape == (16, 32, 17)
    )
    assert (b.x[~b.fmask] == 0).all() and b.fmask[..., -3:].all()
    assert set(b.y.tolist()) <= {0, 1}


def test_windows_map_back_to_the_file_pixels(views):
    out, _, files = views
    clips = load_clips(out)
    stats = clips.compute_stats()
    s = WindowSampler(clips, 16, stats)
    b = s.batch(torch.tensor([5, 40, len(s) - 1]))
    for i in range(3):
        c, start = int(b.item[i]), int(b.start[i])
        m = load_motion2d(clips.files[int(clips.group[c])])
        v = int(clips.view[c])
        x, _, _ = features_to_pixels(stats.denormalize(b.x[i]), b.root0[i], b.scale0[i])
        ref = torch.as_tensor(m.keypoints[v, start : start + 16])
        vis = b.kmask[i]
        assert (x - ref).norm(dim=-1)[vis].max() < 1e-2
    full, pose = window_pixel_errors(b.x, b, stats)
    assert full.abs().max() < 1e-2 and pose.abs().max() < 1e-3


def test_chunked_inverse_equals_one_shot(views):
    out, _, _ = views
    clips = load_clips(out)
    it = clips.item(0)
    x_all, r_end, s_end = features_to_pixels(it["feats"], it["root"][0], it["scale"][0])
    x1, r, s = features_to_pixels(it["feats"][:20], it["root"][0], it["scale"][0])
    x2, r2, s2 = features_to_pixels(it["feats"][20:], r, s)
    torch.testing.assert_close(torch.cat([x1, x2]), x_all, atol=1e-3, rtol=0)
    torch.testing.assert_close(r, it["root"][20], atol=1e-3, rtol=0)


def test_bad_inputs_name_file_field_and_expectation(views, tmp_path):
    out, _, files = views
    with pytest.raises(FileNotFoundError, match="no 2D-motion files"):
        load_clips(tmp_path)
    m = load_motion2d(files[0])
    dog = Motion2D(
        keypoints=m.keypoints,
        confidence=m.confidence,
        keypoint_set="dog17",
        fps=30.0,
        image_size=(1920, 1080),
    )
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    save_motion2d(m, mixed / "a.npz")
    save_motion2d(dog, mixed / "b.npz")
    with pytest.raises(MotionFormatError, match=r"b\.npz: field 'keypoint_set'.*expected 'coco17'"):
        load_clips(mixed)
    with pytest.raises(
        MotionFormatError,
        match=r"cmu_run_0000.npz: field 'labels.skill' is 'run', expected one of hop",
    ):
        load_clips(out, label_names=["hop"])
    with pytest.raises(ValueError, match="no clip has 400 frames"):
        WindowSampler(load_clips(out), 400, load_clips(out).compute_stats())


def test_single_cycle_clips_are_looped_to_min_seconds(tmp_path):
    """The dog clips (one gait cycle, shorter than a 32-frame window) are looped to
    ``min_seconds``; a clip already that long is kept as recorded; specs without looping keep
    the digest they had before the option existed (existing datasets stay valid)."""
    from mimic2dm.characters.clips import load_mocap_keypoints

    raw = load_mocap_keypoints(MOCAP / "dog_trot.npz")
    assert (len(raw.keypoints) - 1) / raw.fps < 32 / 30  # too short for one window as recorded
    spec = ViewDatasetSpec(clips=("dog_trot", "dog_pace"), pairs=1, seed=1, min_seconds=2.0)
    files = build_view_dataset(tmp_path / "dog", spec, MOCAP)
    for f, label in zip(files, ("trot", "pace"), strict=True):
        m = load_motion2d(f)
        assert m.keypoint_set == "dog17" and m.labels == {"skill": label} and m.num_views == 2
        assert (m.num_frames - 1) / m.fps >= 2.0 and m.meta["loop"]["loops"] > 1.5
        root = m.keypoints3d[:, :, :2].mean(1)  # looped, not frozen: the dog moves on
        assert np.linalg.norm(root[-1] - root[0]) > 1.0
    clips = load_clips(tmp_path / "dog")
    assert clips.label_names == ["pace", "trot"] and clips.keypoint_set == "dog17"
    assert int((clips.offsets[1:] - clips.offsets[:-1]).min()) >= 60  # windows of 32 frames fit
    # cmu_walk (2.6 s) is longer than min_seconds = 2: kept as recorded
    kw = {"clips": ("cmu_walk",), "pairs": 1, "seed": 1}
    walk = load_motion2d(
        build_view_dataset(tmp_path / "w", ViewDatasetSpec(**kw, min_seconds=2.0), MOCAP)[0]
    )
    plain = load_motion2d(build_view_dataset(tmp_path / "p", ViewDatasetSpec(**kw), MOCAP)[0])
    assert "loop" not in walk.meta
    np.testing.assert_array_equal(walk.keypoints, plain.keypoints)
    assert ViewDatasetSpec().digest() == "030b06e19f1ac3ba"  # the cmu_views default, as before
    assert spec.digest() != ViewDatasetSpec(clips=spec.clips, pairs=1, seed=1).digest()


def test_elevation_range_fixes_every_cameras_elevation(tmp_path):
    """``elevation_range_deg`` (``gen_data.build``): every camera of every pair looks down at
    that elevation (the controller's follow camera is at 10 deg); specs without it keep their
    digest; a reversed range is refused naming the field."""
    from omegaconf import OmegaConf

    kw = {"clips": ("cmu_walk",), "pairs": 3, "seed": 2, "camera_modes": ("static", "tracking")}
    spec = ViewDatasetSpec(**kw, elevation_range_deg=(10.0, 10.0))
    for f in build_view_dataset(tmp_path / "el10", spec, MOCAP):
        m = load_motion2d(f)
        axis_z = m.camera_R[:, :, 2, 2]  # the optical axis' world z, per view and frame
        np.testing.assert_allclose(np.degrees(np.arcsin(-axis_z)), 10.0, atol=1e-3)
    free = [
        load_motion2d(f).camera_R[:, 0, 2, 2]
        for f in build_view_dataset(tmp_path / "free", ViewDatasetSpec(**kw), MOCAP)
    ]
    assert (
        np.ptp(np.degrees(np.arcsin(-np.concatenate(free)))) > 1.0
    )  # the range of docs/design.md section 1 otherwise
    assert (
        ViewDatasetSpec().digest() == "030b06e19f1ac3ba"
        and spec.digest() != ViewDatasetSpec(**kw).digest()
    )
    build = OmegaConf.create({"clips": ["cmu_walk"], "pairs": 1, "seed": 0, "fps": 30, "camera_modes": ["static"],
                              "noise_px": 0.0, "drop_prob": 0.0, "elevation_range_deg": [10, 10]})  # fmt: skip
    assert spec_from_config(build).elevation_range_deg == (10.0, 10.0)
    build.elevation_range_deg = [20, 10]
    with pytest.raises(ValueError, match="elevation_range_deg"):
        spec_from_config(build)
