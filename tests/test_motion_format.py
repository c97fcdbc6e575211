"""The versioned 2D/3D motion formats: round trips, atomic writes, validation errors."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mimic2dm.geometry.camera import Camera
from mimic2dm.motion import format as fmt
from mimic2dm.motion.format import (
    FORMAT_VERSION,
    Motion2D,
    Motion3D,
    MotionFormatError,
    camera_arrays,
    load_motion2d,
    load_motion3d,
    save_motion2d,
    save_motion3d,
)

V, T, K = 2, 6, 17


def make_clip(seed: int = 0) -> Motion2D:
    """A valid clip with every optional field: view 0 static, view 1 dynamic camera."""
    rng = np.random.default_rng(seed)
    kp3 = rng.normal(0.0, 0.3, (T, K, 3)).astype(np.float32) + np.array([0, 0, 1], np.float32)
    static = Camera.look_at([4.0, 0.0, 1.0], [0.0, 0.0, 1.0], 1200.0)
    eyes = torch.stack([torch.tensor([4.0, 0.1 * t, 1.0]) for t in range(T)])
    dynamic = Camera.look_at(
        eyes, torch.tensor([0.0, 0.0, 1.0]).expand(T, 3), torch.linspace(1000, 1300, T)
    )
    uv = np.stack([c.project(torch.as_tensor(kp3))[0].numpy() for c in (static, dynamic)]).astype(
        np.float32
    )
    conf = rng.uniform(0.0, 1.0, (V, T, K)).astype(np.float32)
    conf[0, 1, 3] = 0.0
    uv[0, 1, 3] = np.nan  # allowed: confidence 0
    obj3 = rng.normal(0.0, 1.0, (T, 3)).astype(np.float32)
    return Motion2D(
        keypoints=uv,
        confidence=conf,
        keypoint_set="coco17",
        fps=30.0,
        image_size=(1920, 1080),
        object_center=rng.uniform(0, 1000, (V, T, 2)).astype(np.float32),
        object_box=rng.uniform(0, 1000, (V, T, 4)).astype(np.float32),
        object_confidence=np.ones((V, T), np.float32),
        keypoints3d=kp3,
        object3d=obj3,
        labels={"skill": "dribble", "style": "calm"},
        meta={"source": "test", "random_weights": True, "nested": {"a": [1, 2]}},
        **camera_arrays([static, dynamic], T),
    )


def make_motion3d() -> Motion3D:
    rng = np.random.default_rng(1)
    q = rng.normal(size=(T, 4))
    return Motion3D(
        character="humanoid",
        fps=60.0,
        root_pos=rng.normal(size=(T, 3)).astype(np.float32),
        root_quat=(q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32),
        dof_pos=rng.normal(size=(T, 28)).astype(np.float32),
        keypoints3d=rng.normal(size=(T, K, 3)).astype(np.float32),
        keypoint_set="coco17",
        object_pos=rng.normal(size=(T, 3)).astype(np.float32),
        meta={"source": "unit"},
    )


def assert_same(a, b) -> None:
    for name in a.__dataclass_fields__:
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y, err_msg=name)
        else:
            assert x == y, name


# ----------------------------------------------------------------------------- round trips
def test_motion2d_round_trip(tmp_path: Path):
    m = make_clip()
    save_motion2d(m, tmp_path / "clip.npz")
    back = load_motion2d(tmp_path / "clip.npz")
    assert_same(m, back)
    assert back.image_size == (1920, 1080) and isinstance(back.fps, float)
    assert sorted(os.listdir(tmp_path)) == ["clip.npz"]  # no temp file left behind


def test_motion3d_round_trip(tmp_path: Path):
    m = make_motion3d()
    save_motion3d(m, tmp_path / "ref.npz")
    assert_same(m, load_motion3d(tmp_path / "ref.npz"))
    qpos = m.qpos()
    assert qpos.shape == (T, 7 + 28)
    np.testing.assert_array_equal(qpos[:, 3], m.root_quat[:, 3])  # MuJoCo w first


def test_motion3d_keypoint_only_and_kind_mismatch(tmp_path: Path):
    m = Motion3D(
        "dog",
        30,
        np.zeros((T, 3)),
        np.tile([0.0, 0, 0, 1], (T, 1)),
        np.zeros((T, 0)),
        keypoints3d=np.zeros((T, 17, 3)),
        keypoint_set="dog17",
    )
    save_motion3d(m, tmp_path / "ref.npz")
    assert load_motion3d(tmp_path / "ref.npz").dof_pos.shape == (T, 0)
    with pytest.raises(MotionFormatError) as e:
        load_motion2d(tmp_path / "ref.npz")
    assert e.value.field == "kind" and "'motion2d'" in str(e.value)


def test_save_failure_keeps_existing_file(tmp_path: Path, monkeypatch):
    path = tmp_path / "clip.npz"
    save_motion2d(make_clip(0), path)
    before = path.read_bytes()

    def broken(f, **arrays):
        f.write(b"partial garbage")
        raise OSError("disk full")

    monkeypatch.setattr(fmt.np, "savez_compressed", broken)
    with pytest.raises(OSError, match="disk full"):
        save_motion2d(make_clip(1), path)
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["clip.npz"]


def test_invalid_clip_is_not_saved(tmp_path: Path):
    path = tmp_path / "clip.npz"
    save_motion2d(make_clip(0), path)
    before = path.read_bytes()
    m = make_clip(1)
    m.fps = -1.0  # corrupted after construction
    with pytest.raises(MotionFormatError) as e:
        save_motion2d(m, path)
    assert e.value.field == "fps" and str(path) in str(e.value)
    assert path.read_bytes() == before


# ----------------------------------------------------------------------------- behaviour
def test_mask_view_and_cameras():
    m = make_clip()
    mask = m.mask()
    assert mask.shape == (V, T, K) and mask.dtype == bool
    assert not mask[0, 1, 3]
    np.testing.assert_array_equal(mask, (m.confidence >= 0.3) & np.isfinite(m.keypoints).all(-1))
    assert m.mask(0.0).sum() == V * T * K - 1
    v1 = m.view(1)
    assert v1.num_views == 1 and v1.keypoints3d is m.keypoints3d
    np.testing.assert_array_equal(v1.keypoints[0], m.keypoints[1])
    cams = m.cameras()
    assert [c.is_dynamic for c in cams] == [False, True]
    for v, cam in enumerate(cams):
        uv, _ = cam.project(torch.as_tensor(m.keypoints3d))
        ok = m.confidence[v] > 0
        np.testing.assert_allclose(uv.numpy()[ok], m.keypoints[v][ok], atol=1e-3)
    s = m.summary()
    assert s["cameras"] == "dynamic" and s["object"] and s["gt3d"] and s["views"] == V


def test_example_error_message(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    m = make_clip().view(0)
    save_motion2d(m, "clip.npz")
    raw = dict(np.load("clip.npz"))
    raw["keypoints"] = np.zeros((1, 10, 17, 2), np.float32)
    raw["confidence"] = np.ones((1, 10, 16), np.float32)
    for name in (
        "object_center",
        "object_box",
        "object_confidence",
        "camera_R",
        "camera_t",
        "camera_intrinsics",
        "keypoints3d",
        "object3d",
    ):
        raw.pop(name)
    np.savez("clip.npz", **raw)
    with pytest.raises(MotionFormatError) as e:
        load_motion2d("clip.npz")
    assert (
        str(e.value)
        == "clip.npz: field 'confidence' has shape [1, 10, 16], expected [V, T, K] = [1, 10, 17]"
    )
    assert isinstance(e.value, ValueError)


# ----------------------------------------------------------------------------- malformed files
def _rewrite(src: Path, dst: Path, **changes) -> None:
    raw = dict(np.load(src))
    for k, val in changes.items():
        if val is None:
            raw.pop(k)
        else:
            raw[k] = val
    with open(dst, "wb") as f:
        np.savez(f, **raw)


@pytest.fixture(scope="module")
def good_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("fmt") / "good.npz"
    save_motion2d(make_clip(), path)
    return path


CASES = {
    "missing keypoints": ({"keypoints": None}, "keypoints", "required"),
    "missing fps": ({"fps": None}, "fps", "required"),
    "int keypoints": (
        {"keypoints": np.zeros((V, T, K, 2), np.int32)},
        "keypoints",
        "floating-point",
    ),
    "string confidence": ({"confidence": np.full((V, T, K), "x")}, "confidence", "floating-point"),
    "zero fps": ({"fps": np.array(0.0)}, "fps", "> 0"),
    "negative fps": ({"fps": np.array(-30.0)}, "fps", "> 0"),
    "nan fps": ({"fps": np.array(np.nan)}, "fps", "> 0"),
    "vector fps": ({"fps": np.array([30.0, 30.0])}, "fps", "a scalar of a numeric dtype"),
    "string fps": ({"fps": np.array("30")}, "fps", "numeric"),
    "bool fps": ({"fps": np.array(True)}, "fps", "numeric"),
    "vector set": ({"keypoint_set": np.array(["coco17"])}, "keypoint_set", "a scalar of a string"),
    "bytes labels": ({"labels": np.array(b"{}")}, "labels", "string"),
    "unknown set": ({"keypoint_set": np.array("coco18")}, "keypoint_set", "coco17, dog17"),
    "version": ({"format_version": np.array(FORMAT_VERSION + 1)}, "format_version", "supported"),
    "no version": ({"format_version": None}, "format_version", "format_version"),
    "camera frames": (
        {"camera_t": np.zeros((V, T + 1, 3), np.float32)},
        "camera_t",
        "[V, F, 3] = [2, 1|6, 3]",
    ),
    "camera missing part": ({"camera_intrinsics": None}, "camera_intrinsics", "together"),
    "camera not rotation": (
        {"camera_R": np.ones((V, 1, 3, 3), np.float32)},
        "camera_R",
        "rotation",
    ),
    "focal": (
        {"camera_intrinsics": np.zeros((V, 1, 4), np.float32)},
        "camera_intrinsics",
        "fx, fy > 0",
    ),
    "image size zero": ({"image_size": np.array([0, 1080])}, "image_size", "positive"),
    "image size float": ({"image_size": np.array([1920.0, 1080.0])}, "image_size", "integers"),
    "image size 3": ({"image_size": np.array([1920, 1080, 3])}, "image_size", "(width, height)"),
    "confidence range": (
        {"confidence": np.full((V, T, K), 1.5, np.float32)},
        "confidence",
        "[0, 1]",
    ),
    "gt3d shape": (
        {"keypoints3d": np.zeros((T, K, 2), np.float32)},
        "keypoints3d",
        "[T, K, 3] = [6, 17, 3]",
    ),
    "object conf missing": ({"object_confidence": None}, "object_confidence", "[V, T]"),
    "labels not json": ({"labels": np.array("{oops")}, "labels", "JSON"),
    "meta list": ({"meta": np.array("[1, 2]")}, "meta", "JSON object"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_field(case: str, good_file: Path, tmp_path: Path):
    changes, field, expected = CASES[case]
    path = tmp_path / "bad.npz"
    _rewrite(good_file, path, **changes)
    with pytest.raises(MotionFormatError) as e:
        load_motion2d(path)
    assert e.value.field == field
    msg = str(e.value)
    assert msg.startswith(f"{path}: field '{field}'") and expected in msg and "expected" in msg


def test_nan_keypoint_needs_zero_confidence(good_file: Path, tmp_path: Path):
    kp = np.load(good_file)["keypoints"].copy()
    conf = np.load(good_file)["confidence"].copy()
    conf[1, 2, 5] = 0.5
    kp[1, 2, 5] = np.nan
    _rewrite(good_file, tmp_path / "bad.npz", keypoints=kp, confidence=conf)
    with pytest.raises(
        MotionFormatError, match=r"field 'keypoints' has a non-finite value at \[1, 2, 5, 0\]"
    ) as e:
        load_motion2d(tmp_path / "bad.npz")
    assert "confidence" in e.value.expected
    conf[1, 2, 5] = 0.0  # now allowed
    _rewrite(good_file, tmp_path / "ok.npz", keypoints=kp, confidence=conf)
    assert not load_motion2d(tmp_path / "ok.npz").mask()[1, 2, 5]


def test_unreadable_files(tmp_path: Path, good_file: Path):
    data = good_file.read_bytes()
    (tmp_path / "trunc.npz").write_bytes(data[: len(data) // 2])
    (tmp_path / "text.npz").write_text("hello")
    np.save(tmp_path / "array.npy", np.zeros(3))
    for name in ("trunc.npz", "text.npz", "array.npy", "missing.npz"):
        with pytest.raises(MotionFormatError) as e:
            load_motion2d(tmp_path / name)
        assert e.value.field == "(file)" and name in str(e.value)


def test_in_memory_validation_names_field():
    m = make_clip()
    with pytest.raises(MotionFormatError, match="<memory>: field 'object_box'"):
        Motion2D(
            m.keypoints,
            m.confidence,
            "coco17",
            30,
            (1920, 1080),
            object_box=np.zeros((V, T, 3), np.float32),
            object_confidence=np.ones((V, T), np.float32),
        )
    with pytest.raises(MotionFormatError, match="'root_quat'"):
        Motion3D("humanoid", 30, np.zeros((T, 3)), np.ones((T, 4)), np.zeros((T, 28)))


# ----------------------------------------------------------------------------- property-based
ARRAY_FIELDS = [
    "confidence",
    "camera_R",
    "camera_t",
    "camera_intrinsics",
    "keypoints3d",
    "object_center",
    "object_box",
    "object_confidence",
    "object3d",
]
# keypoints bind V and T, so only their K and coordinate axes are "theirs" to corrupt
AXES = {"keypoints": [2, 3]}


def _shape_corruption(draw, raw) -> tuple[dict, str]:
    name = draw(st.sampled_from(ARRAY_FIELDS + ["keypoints"]))
    x = raw[name]
    how = draw(st.sampled_from(["grow", "add_axis", "drop_axis"]))
    if how == "add_axis":
        return {name: x[..., None]}, name
    if how == "drop_axis":
        return {name: x[..., 0]}, name
    axis = draw(st.sampled_from(AXES.get(name, list(range(x.ndim)))))
    shape = list(x.shape)
    shape[axis] += draw(st.integers(1, 3))
    return {name: np.zeros(shape, x.dtype)}, name


def _nan_corruption(draw, raw) -> tuple[dict, str]:
    name = draw(
        st.sampled_from(
            ["keypoints", "confidence", "camera_R", "camera_t", "keypoints3d", "object_confidence"]
        )
    )
    x = raw[name].copy()
    idx = tuple(draw(st.integers(0, s - 1)) for s in x.shape)
    x[idx] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    changes = {name: x}
    if name == "keypoints":
        conf = raw["confidence"].copy()
        conf[idx[:3]] = draw(st.floats(0.01, 1.0))
        changes["confidence"] = conf
    return changes, name


@st.composite
def corruption(draw, raw: dict) -> tuple[dict, str]:
    kind = draw(st.sampled_from(["shape", "nan", "fps", "set", "missing", "dtype"]))
    if kind == "shape":
        return _shape_corruption(draw, raw)
    if kind == "nan":
        return _nan_corruption(draw, raw)
    if kind == "fps":
        bad = [0.0, -1.0, -1e9, np.nan, np.inf, [30.0, 30.0], "30", True]
        return {"fps": np.array(draw(st.sampled_from(bad)))}, "fps"
    if kind == "set":
        name = draw(st.text(alphabet="abcdefgh0123456789_", min_size=1, max_size=8))
        return {"keypoint_set": np.array(name)}, "keypoint_set"
    if kind == "missing":
        name = draw(
            st.sampled_from(
                ["keypoints", "confidence", "keypoint_set", "fps", "image_size", "kind"]
            )
        )
        return {name: None}, name
    name = draw(st.sampled_from(["keypoints", "confidence", "camera_R", "keypoints3d"]))
    return {name: np.nan_to_num(raw[name]).astype(np.int64)}, name


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_corruptions_raise_format_error_naming_field(data, good_file: Path):
    raw = dict(np.load(good_file))
    changes, field = data.draw(corruption(raw))
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "bad.npz"
        _rewrite(good_file, path, **changes)
        with pytest.raises(MotionFormatError) as e:
            load_motion2d(path)
    assert e.value.field == field, str(e.value)
    assert str(path) in str(e.value) and "expected" in str(e.value)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_damaged_bytes_raise_only_format_errors(data, good_file: Path):
    blob = bytearray(good_file.read_bytes())
    if data.draw(st.booleans()):
        blob = blob[: data.draw(st.integers(0, len(blob) - 1))]
        field = "(file)"
    else:
        for _ in range(data.draw(st.integers(1, 8))):
            blob[data.draw(st.integers(0, len(blob) - 1))] ^= data.draw(st.integers(1, 255))
        field = None  # a flipped byte may hit any field name or value
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "bad.npz"
        path.write_bytes(bytes(blob))
        try:
            load_motion2d(path)
        except MotionFormatError as e:
            assert field is None or e.field == field
            assert str(path) in str(e)
        else:
            # a flip inside padding or an unused byte can leave the archive valid
            assert field is None, "a truncated file loaded"
