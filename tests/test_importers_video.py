"""2D importers: AIST++ without calibration, Penn Action, BADJA, and import-json's refusals.

Runs on the fixtures in ``tests/fixtures`` (AIST++ CC BY 4.0, BADJA MIT) and on files written
here (Penn Action ``.mat`` files by ``scipy.io.savemat``: the dataset's licence keeps it out
of the repository); the real files in ``../shared/data/video2d`` are read when present (the
BADJA ones also ship, ``tests/fixtures/shared``).
"""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import scipy.io
from importer_helpers import assert_refused, invoke
from shared_data import AISTPP, VIDEO2D, needs_badja_files, needs_penn_action

from mimic2dm.motion.format import check_trackable, load_motion2d
from mimic2dm.motion.keypoint_sets import COCO17, DOG17
from mimic2dm.motion.video2d import BADJA_TO_DOG17, PENN_TO_COCO17

HERE = Path(__file__).resolve().parent
AIST_FIXTURE = HERE / "fixtures" / "aistpp" / "gBR_sBM_cAll_d04_mBR0_ch01_c01_2s.pkl"
BADJA_FIXTURE = HERE / "fixtures" / "badja" / "rs_dog_first20.json"


def _aist_data() -> dict[str, np.ndarray]:
    with open(AIST_FIXTURE, "rb") as f:
        return pickle.load(f)


def _write_pkl(path: Path, data: dict) -> Path:
    with open(path, "wb") as f:
        pickle.dump(data, f)
    return path


# ----------------------------------------------------------------------------- AIST++
def test_aist_single_file_without_cameras(tmp_path: Path):
    out = tmp_path / "c.npz"
    res = invoke("import-aist", AIST_FIXTURE, "--out", out)
    assert res.exit_code == 0, res.output
    m = load_motion2d(out)
    raw = _aist_data()["keypoints2d"]
    assert (m.num_views, m.num_frames, m.fps, m.image_size) == (1, 120, 60.0, (1920, 1080))
    assert not m.has_cameras and m.meta["calibrated"] is False and m.meta["views"] == ["c01"]
    np.testing.assert_allclose(m.keypoints[0], raw[0, ..., :2], rtol=1e-6)
    np.testing.assert_allclose(m.confidence[0], np.clip(raw[0, ..., 2], 0, 1), rtol=1e-6)
    check_trackable(m, out)


def test_aist_nan_detections_are_masked(tmp_path: Path):
    data = _aist_data()
    k = data["keypoints2d"].copy()
    k[0, 10] = np.nan  # a missed frame
    k[0, 20, 5, 2] = np.nan  # a NaN score only
    k[0, 30, 7, :2] = np.nan  # NaN position, finite score
    src = _write_pkl(tmp_path / "seq.pkl", data | {"keypoints2d": k})
    out = tmp_path / "m.npz"
    assert invoke("import-aist", src, "--out", out).exit_code == 0
    m = load_motion2d(out)
    assert (m.confidence[0, 10] == 0).all() and m.confidence[0, 20, 5] == 0
    assert m.confidence[0, 30, 7] == 0 and np.isnan(m.keypoints[0, 30, 7]).all()
    seen = m.confidence > 0
    assert np.isfinite(m.keypoints[seen]).all() and np.isfinite(m.confidence).all()


def test_aist_keypoints_only_folder_views_and_random_view(tmp_path: Path):
    data = _aist_data()
    k = np.concatenate([data["keypoints2d"]] * 3)  # three "views"
    k[1, ..., 0] += 5.0
    folder = tmp_path / "kp"
    folder.mkdir()
    _write_pkl(folder / "seqA.pkl", data | {"keypoints2d": k})
    out = tmp_path / "a.npz"
    res = invoke("import-aist", folder, "--seq", "seqA", "--view", "c02", "--out", out)
    assert res.exit_code == 0, res.output
    m = load_motion2d(out)
    assert m.meta["views"] == ["c02"] and not m.has_cameras
    np.testing.assert_allclose(m.keypoints[0], k[1, ..., :2], rtol=1e-6)
    res = invoke("import-aist", folder, "--seq", "seqA", "--one-random-view", "--seed", "3", "--out", out)  # fmt: skip
    assert res.exit_code == 0, res.output
    m = load_motion2d(out)
    assert m.num_views == 1 and m.meta["view"] in ("c01", "c02", "c03") and m.meta["view_seed"] == 3
    res = invoke("import-aist", folder, "--seq", "seqA", "--image-size", "1280x720", "--out", out)
    assert res.exit_code == 0 and load_motion2d(out).image_size == (1280, 720)


def test_aist_split_of_an_uncalibrated_tree(tmp_path: Path):
    """A tree with keypoints2d/ and splits/ but no camera file: every clip uncalibrated."""
    root = tmp_path / "aist_plusplus_final"
    (root / "keypoints2d").mkdir(parents=True)
    (root / "splits").mkdir()
    (root / "cameras").mkdir()
    (root / "cameras" / "mapping.txt").write_text(
        "seqA setting1\nseqB setting1\n"
    )  # no setting1.json
    data = _aist_data()
    two = np.concatenate([data["keypoints2d"]] * 2)
    for name in ("seqA", "seqB"):
        _write_pkl(root / "keypoints2d" / f"{name}.pkl", data | {"keypoints2d": two})
    (root / "splits" / "crossmodal_val.txt").write_text("seqA\nseqB\n")
    (root / "ignore_list.txt").write_text("seqB\n")
    out = tmp_path / "val"
    res = invoke("import-aist", root, "--split", "val", "--one-random-view", "--out", out)
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.glob("*.npz")) == ["seqA.npz"]
    m = load_motion2d(out / "seqA.npz")
    assert m.num_views == 1 and not m.has_cameras and m.meta["split"] == "val"


def test_aist_bad_input(tmp_path: Path):
    data = _aist_data()
    out = tmp_path / "out.npz"
    res = invoke("import-aist", AIST_FIXTURE, "--fps", "30", "--out", out)
    assert_refused(res, out, str(AIST_FIXTURE), "timestamps", "60 fps", "--fps")
    res = invoke("import-aist", AIST_FIXTURE, "--fps", "0", "--out", out)
    assert_refused(res, out, str(AIST_FIXTURE), "field 'fps'", "--fps")
    nan = _write_pkl(tmp_path / "nan.pkl", data | {"keypoints2d": np.full((1, 120, 17, 3), np.nan)})  # fmt: skip
    assert_refused(
        invoke("import-aist", nan, "--out", out), out, str(nan), "keypoints2d", "non-NaN"
    )
    joints = _write_pkl(tmp_path / "j.pkl", data | {"keypoints2d": data["keypoints2d"][:, :, :16]})
    assert_refused(invoke("import-aist", joints, "--out", out), out, str(joints), "keypoints2d", "[V, T, 17, 3]")  # fmt: skip
    empty = tmp_path / "empty.pkl"
    empty.write_bytes(b"")
    assert_refused(invoke("import-aist", empty, "--out", out), out, str(empty), "(file)")
    cut = tmp_path / "cut.pkl"
    cut.write_bytes(AIST_FIXTURE.read_bytes()[:5000])
    assert_refused(invoke("import-aist", cut, "--out", out), out, str(cut), "could not be read")
    res = invoke("import-aist", AIST_FIXTURE, "--view", "c05", "--out", out)
    assert_refused(res, out, "c05", "c01")


def test_aist_shared_sequence_all_views(tmp_path: Path):
    """All views of a sequence file, and one random view of a sequence in a folder: the full
    AIST++ sequences of the shared data (9 views x 12 s), else a folder of two copies of the
    fixture (1 view x 2 s)."""
    folder, views, frames = AISTPP, 9, 720
    if not folder.is_dir():
        folder = tmp_path / "aistpp"
        folder.mkdir()
        for seq in ("ch01", "ch03"):
            shutil.copyfile(AIST_FIXTURE, folder / f"{seq}.pkl")
        views, frames = _aist_data()["keypoints2d"].shape[:2]
    out = tmp_path / "ch01.npz"
    res = invoke("import-aist", folder / "ch01.pkl", "--out", out)
    assert res.exit_code == 0 and "cameras none" in res.output, res.output
    m = load_motion2d(out)
    assert (
        m.num_views == views and m.num_frames == frames and m.meta["views"][-1] == f"c{views:02d}"
    )
    res = invoke("import-aist", folder, "--seq", "ch03", "--one-random-view", "--out", out)
    assert res.exit_code == 0 and load_motion2d(out).num_views == 1


# ----------------------------------------------------------------------------- Penn Action
def _penn(path: Path, T: int = 12, joints: int = 13, **override) -> tuple[Path, dict]:
    rng = np.random.default_rng(0)
    d = {
        "x": rng.uniform(0, 480, (T, joints)),
        "y": rng.uniform(0, 270, (T, joints)),
        "visibility": (rng.uniform(size=(T, joints)) > 0.2).astype(np.uint8),
        "bbox": np.tile([10.0, 10.0, 200.0, 260.0], (T, 1)),
        "dimensions": np.array([[270, 480, T]], dtype=np.uint16),
        "nframes": np.array([[T]], dtype=np.uint8),
        "action": np.array(["squat"]),
        "pose": np.array(["front"]),
        "train": np.array([[1]]),
    } | override
    scipy.io.savemat(path, d)
    return path, d


def test_penn_written_here(tmp_path: Path):
    src, d = _penn(tmp_path / "0001.mat")
    out = tmp_path / "p.npz"
    res = invoke("import-penn", src, "--out", out)
    assert res.exit_code == 0, res.output
    m = load_motion2d(out)
    assert (m.keypoint_set, m.fps, m.image_size, m.num_frames) == ("coco17", 30.0, (480, 270), 12)
    assert m.meta["action"] == "squat" and m.meta["pose"] == "front"
    nose = COCO17.index("nose")
    np.testing.assert_allclose(m.keypoints[0, :, nose], np.stack([d["x"][:, 0], d["y"][:, 0]], -1), rtol=1e-6)  # fmt: skip
    for j, c in enumerate(PENN_TO_COCO17):
        np.testing.assert_array_equal(m.confidence[0, :, c], (d["visibility"][:, j] > 0).astype(np.float32))  # fmt: skip
    for name in ("left_eye", "right_eye", "left_ear", "right_ear"):
        assert (m.confidence[0, :, COCO17.index(name)] == 0).all()
    assert COCO17.names[PENN_TO_COCO17[11]] == "left_ankle"
    assert invoke("import-penn", src, "--out", out, "--fps", "25").exit_code == 0
    assert load_motion2d(out).fps == 25.0


def test_penn_bad_input(tmp_path: Path):
    out = tmp_path / "out.npz"
    src, _ = _penn(tmp_path / "joints.mat", joints=12)
    assert_refused(invoke("import-penn", src, "--out", out), out, str(src), "field 'x'", "13")
    src, _ = _penn(tmp_path / "frames.mat", dimensions=np.array([[270, 480, 20]]))
    assert_refused(invoke("import-penn", src, "--out", out), out, str(src), "dimensions", "frames = 12")  # fmt: skip
    src, _ = _penn(tmp_path / "invisible.mat", visibility=np.zeros((12, 13), np.uint8))
    assert_refused(invoke("import-penn", src, "--out", out), out, str(src), "keypoints", "visible")
    src, _ = _penn(tmp_path / "nan.mat", x=np.full((12, 13), np.nan))
    assert_refused(invoke("import-penn", src, "--out", out), out, str(src), "keypoints")
    good, _ = _penn(tmp_path / "good.mat")
    assert_refused(invoke("import-penn", good, "--out", out, "--fps", "0"), out, str(good), "fps", "--fps")  # fmt: skip
    cut = tmp_path / "cut.mat"
    cut.write_bytes(good.read_bytes()[:300])
    assert_refused(invoke("import-penn", cut, "--out", out), out, str(cut), "(file)")
    empty = tmp_path / "empty.mat"
    empty.write_bytes(b"")
    assert_refused(invoke("import-penn", empty, "--out", out), out, str(empty), "(file)")


@needs_penn_action
def test_penn_shared_clips(tmp_path: Path):
    files = sorted((VIDEO2D / "penn_action").glob("*.mat"))
    assert len(files) == 36
    for src in files:
        res = invoke("import-penn", src, "--out", tmp_path / f"{src.stem}.npz")
        assert res.exit_code == 0, res.output
    raw = scipy.io.loadmat(files[0])
    m = load_motion2d(tmp_path / f"{files[0].stem}.npz")
    h, w, T = (int(v) for v in raw["dimensions"].ravel())
    assert m.image_size == (w, h) and m.num_frames == T
    np.testing.assert_allclose(m.keypoints[0, :, 5, 0], raw["x"][:, 1], rtol=1e-6)  # left shoulder


# ----------------------------------------------------------------------------- BADJA
def test_badja_fixture_mapping(tmp_path: Path):
    out = tmp_path / "b.npz"
    res = invoke("import-badja", BADJA_FIXTURE, "--fps", "30", "--image-size", "1920x1080", "--out", out)  # fmt: skip
    assert res.exit_code == 0, res.output
    m = load_motion2d(out)
    raw = json.loads(BADJA_FIXTURE.read_text())
    assert (m.keypoint_set, m.num_frames, m.fps, m.image_size) == ("dog17", 20, 30.0, (1920, 1080))
    for t in (0, 7, 19):
        rc, vis = np.array(raw[t]["joints"]), np.array(raw[t]["visibility"])
        for name, j in BADJA_TO_DOG17.items():
            k = DOG17.index(name)
            if j is None:
                assert m.confidence[0, t, k] == 0
                continue
            assert m.confidence[0, t, k] == float(vis[j])
            np.testing.assert_allclose(m.keypoints[0, t, k], rc[j, ::-1])  # (row, col) -> (x, y)


def test_badja_frame_numbers_define_time(tmp_path: Path):
    raw = json.loads(BADJA_FIXTURE.read_text())[:3]
    for e, n in zip(raw, (3, 8, 13), strict=True):
        e["image_path"] = f"DAVIS/JPEGImages/Full-Resolution/dog/{n:05d}.jpg"
    src = tmp_path / "sparse.json"
    src.write_text(json.dumps(raw[::-1]))  # file order does not matter
    out = tmp_path / "s.npz"
    assert invoke("import-badja", src, "--fps", "24", "--image-size", "854x480", "--out", out).exit_code == 0  # fmt: skip
    m = load_motion2d(out)
    assert m.num_frames == 11 and m.meta["annotated_frames"] == [3, 8, 13]
    annotated = (m.confidence[0] > 0).any(-1)
    assert annotated[[0, 5, 10]].all() and not annotated[[1, 2, 3, 4, 6, 9]].any()


def test_badja_bad_input(tmp_path: Path):
    raw = json.loads(BADJA_FIXTURE.read_text())[:4]
    out = tmp_path / "out.npz"
    opts = ("--fps", "30", "--image-size", "1920x1080", "--out", out)

    def write(name, data):
        (tmp_path / name).write_text(json.dumps(data))
        return tmp_path / name

    bad_joints = [dict(e) for e in raw]
    bad_joints[2]["joints"] = bad_joints[2]["joints"][:36]
    src = write("joints.json", bad_joints)
    assert_refused(invoke("import-badja", src, *opts), out, str(src), "[2].joints", "[37, 2]")
    src = write("empty.json", [])
    assert_refused(invoke("import-badja", src, *opts), out, str(src), "empty list")
    dup = [dict(e) for e in raw]
    dup[3]["image_path"] = dup[1]["image_path"]
    src = write("dup.json", dup)
    assert_refused(invoke("import-badja", src, *opts), out, str(src), "[3].image_path", "repeats frame 1")  # fmt: skip
    hidden = [dict(e, visibility=[0] * 37) for e in raw]
    src = write("hidden.json", hidden)
    assert_refused(invoke("import-badja", src, *opts), out, str(src), "keypoints", "visible")
    good = write("good.json", raw)
    res = invoke("import-badja", good, "--fps", "0", "--image-size", "1920x1080", "--out", out)
    assert_refused(res, out, str(good), "fps", "--fps")
    cut = tmp_path / "cut.json"
    cut.write_text(BADJA_FIXTURE.read_text()[:500])
    assert_refused(invoke("import-badja", cut, *opts), out, str(cut), "not valid JSON")
    res = invoke("import-badja", good, "--fps", "30", "--out", out)  # the file has no size
    assert res.exit_code == 2 and "--image-size" in res.output and not out.exists()
    res = invoke("import-badja", good, "--fps", "30", "--image-size", "1920", "--out", out)
    assert res.exit_code == 2 and "WxH" in res.output and not out.exists()


@needs_badja_files
def test_badja_shared_files(tmp_path: Path):
    for name, frames in (("rs_dog", 201), ("dog", 53), ("dog-agility", 21)):
        out = tmp_path / f"{name}.npz"
        res = invoke("import-badja", VIDEO2D / "badja" / f"{name}.json", "--fps", "30", "--image-size", "1920x1080", "--out", out)  # fmt: skip
        assert res.exit_code == 0, res.output
        assert load_motion2d(out).num_frames == frames


# ----------------------------------------------------------------------------- import-json
def _result(image_id: int) -> dict:
    kp = np.concatenate([np.full((17, 2), 50.0), np.ones((17, 1))], 1)
    return {"image_id": image_id, "category_id": 1, "score": 0.9, "keypoints": kp.ravel().tolist()}


def test_import_json_refusals(tmp_path: Path):
    out = tmp_path / "out.npz"
    coco = {
        "images": [{"id": i, "width": 640, "height": 480} for i in (1, 2, 2, 3)],
        "annotations": [_result(i) for i in (1, 2, 3)],
    }
    src = tmp_path / "dup.json"
    src.write_text(json.dumps(coco))
    res = invoke("import-json", src, "--out", out, "--fps", "30")
    assert_refused(res, out, str(src), "images", "id 2")
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    res = invoke("import-json", empty, "--out", out, "--fps", "30", "--image-size", "640x480")
    assert_refused(res, out, str(empty), "empty list")
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps([_result(i) for i in range(4)]))
    res = invoke("import-json", ok, "--out", out, "--fps", "0", "--image-size", "640x480")
    assert_refused(res, out, str(ok), "field 'fps'", "--fps")
    res = invoke("import-json", ok, "--out", out, "--fps", "30")
    assert_refused(res, out, str(ok), "image_size", "--image-size", "'images'")
    nothing = tmp_path / "nothing.json"
    nothing.write_text(json.dumps([dict(_result(0), keypoints=[0.0] * 51)]))
    res = invoke("import-json", nothing, "--out", out, "--fps", "30", "--image-size", "640x480")
    assert_refused(res, out, str(nothing), "keypoints")
    res = invoke("import-json", ok, "--out", out, "--fps", "30", "--width", "640")
    assert res.exit_code == 2 and not out.exists()
    res = invoke("import-json", ok, "--out", out, "--fps", "30", "--image-size", "640x480")
    assert res.exit_code == 0 and load_motion2d(out).image_size == (640, 480)
