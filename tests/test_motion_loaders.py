"""Loaders on small files built here in the COCO, mmpose and AIST++ layouts, and the mocap wrappers."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.spatial.transform import Rotation
from shared_data import AI4ANIMATION_DOGS

from mimic2dm.characters.clips import load_mocap_keypoints, mocap_to_motion3d
from mimic2dm.motion.format import Motion3D, MotionFormatError, save_motion3d
from mimic2dm.motion.loaders import (
    load_aist,
    load_coco_keypoints,
    load_keypoints_json,
    load_mmpose_predictions,
)
from mimic2dm.utils.paths import mocap_dir

MOCAP = mocap_dir()
K = 17


def _kp(rng, n=K) -> np.ndarray:
    return np.concatenate([rng.uniform(0, 600, (n, 2)), rng.uniform(0.2, 1.0, (n, 1))], axis=1)


def _write(path: Path, data) -> Path:
    path.write_text(json.dumps(data))
    return path


# ----------------------------------------------------------------------------- COCO
def test_coco_results_list(tmp_path: Path):
    rng = np.random.default_rng(0)
    a, b_low, b_high, d = (_kp(rng) for _ in range(4))
    b_high[0, 2] = 1.7  # heatmap maxima can exceed 1: clipped
    results = [
        {
            "image_id": 5,
            "category_id": 1,
            "keypoints": a.ravel().tolist(),
            "score": 0.8,
            "bbox": [0, 0, 10, 10],
        },
        {
            "image_id": 6,
            "category_id": 1,
            "keypoints": b_low.ravel().tolist(),
            "score": 0.5,
            "bbox": [0, 0, 1, 1],
        },
        {
            "image_id": 6,
            "category_id": 1,
            "keypoints": b_high.ravel().tolist(),
            "score": 0.9,
            "bbox": [0, 0, 1, 1],
        },
        {
            "image_id": 8,
            "category_id": 1,
            "keypoints": d.ravel().tolist(),
            "score": 0.7,
            "bbox": [0, 0, 1, 1],
        },
    ]
    m = load_coco_keypoints(_write(tmp_path / "res.json", results), fps=25, image_size=(640, 480))
    assert m.keypoints.shape == (1, 4, K, 2) and m.fps == 25 and m.image_size == (640, 480)
    np.testing.assert_allclose(m.keypoints[0, 0], a[:, :2], rtol=1e-6)
    np.testing.assert_allclose(m.keypoints[0, 1], b_high[:, :2], rtol=1e-6)  # highest score kept
    assert m.confidence[0, 1, 0] == 1.0
    np.testing.assert_allclose(m.confidence[0, 1, 1:], b_high[1:, 2], rtol=1e-6)
    assert (
        np.isnan(m.keypoints[0, 2]).all() and (m.confidence[0, 2] == 0).all()
    )  # image 7: no detection
    np.testing.assert_allclose(m.keypoints[0, 3], d[:, :2], rtol=1e-6)
    assert m.meta["source_format"] == "coco" and m.meta["random_weights"] is False
    # explicit first image id shifts the frames
    m2 = load_coco_keypoints(tmp_path / "res.json", fps=25, image_size=(640, 480), first_image_id=4)
    assert m2.num_frames == 5 and (m2.confidence[0, 0] == 0).all()


def test_coco_dict_with_images_and_visibility(tmp_path: Path):
    rng = np.random.default_rng(1)
    kps = [_kp(rng) for _ in range(3)]
    for k in kps:
        k[:, 2] = rng.integers(0, 3, K)  # COCO visibility flags 0/1/2 (ground truth, no score)
    images = [
        {"id": 30, "frame_id": 2, "width": 320, "height": 240},
        {"id": 10, "frame_id": 0, "width": 320, "height": 240},
        {"id": 20, "frame_id": 1, "width": 320, "height": 240},
    ]
    anns = [
        {"image_id": i, "category_id": 1, "keypoints": k.ravel().tolist()}
        for i, k in zip((10, 20, 30), kps, strict=True)
    ]
    anns.append(
        {"image_id": 20, "category_id": 2, "keypoints": _kp(rng).ravel().tolist(), "score": 1.0}
    )
    path = _write(tmp_path / "gt.json", {"images": images, "annotations": anns})
    m = load_coco_keypoints(path, fps=30, category_id=1)
    assert m.image_size == (320, 240) and m.num_frames == 3
    for t, k in enumerate(kps):
        np.testing.assert_array_equal(m.confidence[0, t], (k[:, 2] > 0).astype(np.float32))
        np.testing.assert_allclose(m.keypoints[0, t], k[:, :2], rtol=1e-6)


def test_coco_errors(tmp_path: Path):
    bad = _write(tmp_path / "bad.json", [{"image_id": 0, "keypoints": [1.0] * 50, "score": 1.0}])
    with pytest.raises(MotionFormatError) as e:
        load_coco_keypoints(bad, fps=30, image_size=(10, 10))
    assert (
        e.value.field == "annotations[0].keypoints"
        and "51 numbers" in str(e.value)
        and str(bad) in str(e.value)
    )
    ok = _write(tmp_path / "ok.json", [{"image_id": 0, "keypoints": [1.0] * 51, "score": 1.0}])
    with pytest.raises(MotionFormatError) as e:
        load_coco_keypoints(ok, fps=30)
    assert e.value.field == "image_size"
    with pytest.raises(MotionFormatError) as e:
        load_coco_keypoints(ok, fps=0, image_size=(10, 10))
    assert e.value.field == "fps"
    (tmp_path / "broken.json").write_text("[{")
    with pytest.raises(MotionFormatError) as e:
        load_coco_keypoints(tmp_path / "broken.json", fps=30, image_size=(10, 10))
    assert e.value.field == "(file)"


# ----------------------------------------------------------------------------- mmpose
def _instance(rng, bbox_score=None):
    k = _kp(rng)
    inst = {
        "keypoints": k[:, :2].tolist(),
        "keypoint_scores": k[:, 2].tolist(),
        "bbox": [[0, 0, 5, 5]],
    }
    if bbox_score is not None:
        inst["bbox_score"] = bbox_score
    return inst, k


def test_mmpose_predictions(tmp_path: Path):
    rng = np.random.default_rng(2)
    (i1, k1), (i2a, _), (i2b, k2b) = _instance(rng, 0.9), _instance(rng, 0.4), _instance(rng, 0.95)
    frames = [
        {"frame_id": 1, "instances": [i1]},
        {"frame_id": 2, "instances": [i2a, i2b]},
        {"frame_id": 3, "instances": []},
    ]
    path = _write(tmp_path / "pred.json", frames)
    m = load_mmpose_predictions(path, fps=30, image_size=(1280, 720))
    assert m.keypoints.shape == (1, 3, K, 2) and m.meta["source_format"] == "mmpose"
    np.testing.assert_allclose(m.keypoints[0, 0], k1[:, :2], rtol=1e-6)
    np.testing.assert_allclose(m.keypoints[0, 1], k2b[:, :2], rtol=1e-6)
    np.testing.assert_allclose(m.confidence[0, 1], k2b[:, 2], rtol=1e-6)
    assert np.isnan(m.keypoints[0, 2]).all() and (m.confidence[0, 2] == 0).all()
    # the demo scripts' dict layout; without bbox_score the mean keypoint score decides
    (ja, ka), (jb, kb) = _instance(rng), _instance(rng)
    ka[:, 2], kb[:, 2] = 0.3, 0.6
    ja["keypoint_scores"], jb["keypoint_scores"] = ka[:, 2].tolist(), kb[:, 2].tolist()
    path2 = _write(
        tmp_path / "pred2.json",
        {"meta_info": {}, "instance_info": [{"frame_id": 0, "instances": [ja, jb]}]},
    )
    m2 = load_keypoints_json(path2, fps=30, image_size=(1280, 720))
    np.testing.assert_allclose(m2.keypoints[0, 0], kb[:, :2], rtol=1e-6)
    assert load_keypoints_json(path, fps=30, image_size=(1280, 720)).num_frames == 3


def test_mmpose_errors(tmp_path: Path):
    rng = np.random.default_rng(3)
    inst, _ = _instance(rng)
    inst["keypoints"] = inst["keypoints"][:16]
    path = _write(tmp_path / "pred.json", [{"frame_id": 0, "instances": [inst]}])
    with pytest.raises(MotionFormatError) as e:
        load_mmpose_predictions(path, fps=30, image_size=(10, 10))
    assert e.value.field == "instance_info[0].instances[0].keypoints" and "34 numbers" in str(
        e.value
    )
    with pytest.raises(MotionFormatError) as e:
        load_mmpose_predictions(
            _write(tmp_path / "x.json", {"foo": 1}), fps=30, image_size=(10, 10)
        )
    assert e.value.field == "instance_info"


# ----------------------------------------------------------------------------- AIST++
SEQ = "gWA_sFM_cAll_d27_mWA2_ch21"


def _aist_cameras() -> list[dict]:
    cams = []
    for i, (yaw, f) in enumerate([(0.0, 1600.0), (60.0, 1400.0)]):
        rvec = (
            Rotation.from_euler("y", 180 - yaw, degrees=True)
            * Rotation.from_euler("z", 180, degrees=True)
        ).as_rotvec()
        cams.append(
            {
                "name": f"c0{i + 1}",
                "size": [1920, 1080],
                "matrix": [[f, 0, 960], [0, f, 540], [0, 0, 1]],
                "rotation": rvec.tolist(),
                "translation": [5.0 * i, 180.0, 500.0],
                "distortions": [0.0] * 5,
            }
        )
    return cams


def _project_cm(cam: dict, p: np.ndarray) -> np.ndarray:
    """Independent pinhole projection of AIST++ world points (cm, y-up)."""
    R = Rotation.from_rotvec(cam["rotation"]).as_matrix()
    pc = p @ R.T + np.array(cam["translation"])
    Km = np.array(cam["matrix"])
    return np.stack(
        [
            Km[0, 0] * pc[..., 0] / pc[..., 2] + Km[0, 2],
            Km[1, 1] * pc[..., 1] / pc[..., 2] + Km[1, 2],
        ],
        -1,
    )


@pytest.fixture()
def aist_dir(tmp_path: Path) -> tuple[Path, np.ndarray, np.ndarray, list[dict]]:
    rng = np.random.default_rng(4)
    T = 5
    p3 = np.concatenate(
        [
            rng.uniform(-30, 30, (T, K, 1)),
            rng.uniform(0, 170, (T, K, 1)),
            rng.uniform(-30, 30, (T, K, 1)),
        ],
        -1,
    )
    cams = _aist_cameras()
    k2 = np.zeros((2, T, K, 3))
    for v, cam in enumerate(cams):
        k2[v, ..., :2] = _project_cm(cam, p3)
        k2[v, ..., 2] = rng.uniform(0.1, 1.0, (T, K))
    k2[1, 2] = np.nan  # a lost frame in view 2
    for sub in ("keypoints2d", "keypoints3d", "cameras"):
        (tmp_path / sub).mkdir()
    (tmp_path / "cameras" / "mapping.txt").write_text(f"other_seq setting9\n{SEQ} setting1\n")
    (tmp_path / "cameras" / "setting1.json").write_text(json.dumps(cams))
    with open(tmp_path / "keypoints2d" / f"{SEQ}.pkl", "wb") as f:
        pickle.dump(
            {"keypoints2d": k2, "det_scores": np.ones((2, T)), "timestamps": np.arange(T)}, f
        )
    with open(tmp_path / "keypoints3d" / f"{SEQ}.pkl", "wb") as f:
        pickle.dump({"keypoints3d": p3, "keypoints3d_optim": p3 + 1.0}, f)
    return tmp_path, p3, k2, cams


def test_aist_layout(aist_dir):
    root, p3, k2, cams = aist_dir
    m = load_aist(root, SEQ)
    assert (
        m.num_views == 2
        and m.fps == 60.0
        and m.image_size == (1920, 1080)
        and m.keypoint_set == "coco17"
    )
    assert m.meta["views"] == ["c01", "c02"]
    finite = np.isfinite(k2[..., 0])
    np.testing.assert_allclose(m.keypoints[finite], k2[..., :2][finite], rtol=1e-6)
    np.testing.assert_allclose(m.confidence[finite], k2[..., 2][finite], rtol=1e-6)
    assert (m.confidence[1, 2] == 0).all()
    # cm -> m and y-up -> z-up: (x, y, z) -> (x, -z, y)
    np.testing.assert_allclose(m.keypoints3d[..., 2], p3[..., 1] / 100, atol=1e-6)
    np.testing.assert_allclose(m.keypoints3d[..., 1], -p3[..., 2] / 100, atol=1e-6)
    np.testing.assert_allclose(m.camera_t[1, 0], np.array(cams[1]["translation"]) / 100, atol=1e-6)
    np.testing.assert_allclose(m.camera_intrinsics[1, 0], [1400, 1400, 960, 540])
    # the converted cameras reproject the converted 3D keypoints onto the 2D keypoints
    for v, cam in enumerate(m.cameras()):
        assert not cam.is_dynamic
        uv, depth = cam.project(torch.as_tensor(m.keypoints3d))
        assert (depth > 0).all()
        np.testing.assert_allclose(uv.numpy()[finite[v]], m.keypoints[v][finite[v]], atol=1e-2)
    # world up is +z after conversion: the camera centres are 1.8 m high
    np.testing.assert_allclose(m.cameras()[0].center()[0, 2], 1.8, atol=1e-5)


def test_aist_options_and_npz(aist_dir):
    root, p3, k2, _ = aist_dir
    m = load_aist(root, SEQ, views=["c02"], use_optim=True)
    assert m.num_views == 1 and m.meta["views"] == ["c02"]
    np.testing.assert_allclose(m.keypoints3d[..., 0], (p3[..., 0] + 1) / 100, atol=1e-6)
    os.remove(root / "keypoints2d" / f"{SEQ}.pkl")
    np.savez(root / "keypoints2d" / f"{SEQ}.npz", keypoints2d=k2)
    assert load_aist(root, SEQ).num_views == 2
    with pytest.raises(MotionFormatError) as e:
        load_aist(root, SEQ, views=["c07"])
    assert e.value.field == "name"


def test_aist_errors(aist_dir):
    root, _, k2, _ = aist_dir
    with pytest.raises(MotionFormatError) as e:
        load_aist(root, "unknown_seq")
    assert e.value.field == "(file)" and "unknown_seq" in str(e.value)
    with open(root / "keypoints2d" / f"{SEQ}.pkl", "wb") as f:
        pickle.dump({"keypoints2d": k2[:1]}, f)
    with pytest.raises(MotionFormatError) as e:
        load_aist(root, SEQ)
    assert e.value.field == "keypoints2d" and "one per camera" in str(e.value)


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


def test_aist_refuses_code_in_pickles(aist_dir):
    root = aist_dir[0]
    (root / "keypoints2d" / f"{SEQ}.pkl").write_bytes(pickle.dumps({"keypoints2d": _Evil()}))
    with pytest.raises(MotionFormatError, match="refusing to load") as e:
        load_aist(root, SEQ)
    assert e.value.field == "(file)"


# ----------------------------------------------------------------------------- mocap wrappers
needs_mocap = pytest.mark.skipif(
    not MOCAP.is_dir(), reason=f"shared mocap clips not found at {MOCAP}"
)


@needs_mocap
def test_mocap_keypoints_human_and_dog():
    from mimic2dm.characters import mocap

    h = load_mocap_keypoints(MOCAP / "cmu_walk.npz")
    assert (
        h.keypoints.shape == (154, 17, 3)
        and h.keypoint_set == "coco17"
        and h.character == "humanoid"
    )
    assert h.fps == 60.0 and h.keypoints.dtype == np.float32
    ref = mocap.human_keypoints(mocap.load_cmu_clip(MOCAP / "cmu_walk.npz")).numpy()
    np.testing.assert_array_equal(h.keypoints, ref)
    d = load_mocap_keypoints(MOCAP / "dog_trot.npz")
    with np.load(MOCAP / "dog_trot.npz") as z:
        frames = len(z["positions"])
    if AI4ANIMATION_DOGS:
        assert frames == 33
    assert (
        d.keypoints.shape == (frames, 17, 3) and d.keypoint_set == "dog17" and d.character == "dog"
    )


@needs_mocap
def test_mocap_to_motion3d_matches_keypoints(tmp_path: Path):
    m = mocap_to_motion3d(MOCAP / "cmu_walk.npz")
    assert m.character == "humanoid" and m.dof_pos.shape == (154, 28) and m.fps == 60.0
    kp = load_mocap_keypoints(MOCAP / "cmu_walk.npz").keypoints
    np.testing.assert_allclose(m.keypoints3d, kp, atol=1e-4)
    save_motion3d(m, tmp_path / "walk3d.npz")
    back = load_mocap_keypoints(tmp_path / "walk3d.npz")
    assert back.character == "humanoid" and back.keypoint_set == "coco17"
    np.testing.assert_array_equal(back.keypoints, m.keypoints3d)


def test_motion3d_without_keypoints_is_replayed(tmp_path: Path):
    from mimic2dm.characters.registry import load_character

    pose = load_character("humanoid").default_pose
    T = 3
    m = Motion3D(
        "humanoid",
        30,
        np.tile(pose.root_pos, (T, 1)),
        np.tile(pose.root_quat, (T, 1)),
        np.tile(pose.dof_pos, (T, 1)),
    )
    save_motion3d(m, tmp_path / "stand.npz")
    kp = load_mocap_keypoints(tmp_path / "stand.npz")
    assert kp.keypoints.shape == (T, 17, 3) and kp.keypoint_set == "coco17"
    assert (
        abs(kp.keypoints[:, 15:17, 2].min() - 0.052) < 1e-3
    )  # ankles above the floor by the sole depth


def test_unknown_npz_layout(tmp_path: Path):
    np.savez(tmp_path / "x.npz", foo=np.zeros(3))
    with pytest.raises(ValueError, match="unknown clip layout"):
        load_mocap_keypoints(tmp_path / "x.npz")
