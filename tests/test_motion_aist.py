"""The AIST++ protocol (motion/aist.py, ``data import-aist --split``) on small trees in the AIST++ layout."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.spatial.transform import Rotation
from typer.testing import CliRunner

from mimic2dm.cli import app
from mimic2dm.motion.aist import GT3D_USE, import_split, split_sequences
from mimic2dm.motion.format import MotionFormatError, load_motion2d

TRAIN = ["gBR_sBM_cAll_d04_mBR0_ch01", "gPO_sFM_cAll_d10_mPO1_ch02", "gJS_sBM_cAll_d01_mJS3_ch04"]
IGNORED = "gPO_sFM_cAll_d10_mPO1_ch02"
VAL = ["gLH_sBM_cAll_d16_mLH1_ch06"]
TEST = ["gMH_sFM_cAll_d22_mMH3_ch04"]
NUM_CAMS = 5


def _cameras() -> list[dict]:
    """``NUM_CAMS`` cameras around the dancer, each with its own focal length (AIST++ json layout)."""
    cams = []
    for i in range(NUM_CAMS):
        yaw = 360.0 * i / NUM_CAMS
        rot = Rotation.from_euler("y", 180 - yaw, degrees=True) * Rotation.from_euler(
            "z", 180, degrees=True
        )
        f = 1200.0 + 100 * i
        cams.append({"name": f"c0{i + 1}", "size": [1920, 1080], "matrix": [[f, 0, 960], [0, f, 540], [0, 0, 1]],
                     "rotation": rot.as_rotvec().tolist(), "translation": [0.0, 90.0, 600.0],
                     "distortions": [0.0] * 5})  # fmt: skip
    return cams


def _project_cm(cam: dict, p: np.ndarray) -> np.ndarray:
    R = Rotation.from_rotvec(cam["rotation"]).as_matrix()
    pc = p @ R.T + np.array(cam["translation"])
    Km = np.array(cam["matrix"])
    return np.stack([Km[0, 0] * pc[..., 0] / pc[..., 2] + Km[0, 2], Km[1, 1] * pc[..., 1] / pc[..., 2] + Km[1, 2]], -1)  # fmt: skip


@pytest.fixture()
def aist_tree(tmp_path: Path) -> Path:
    """A small ``aist_plusplus_final`` tree: 5 sequences, a split list each, an ignore list."""
    root = tmp_path / "aist_plusplus_final"
    for sub in ("keypoints2d", "keypoints3d", "cameras", "splits"):
        (root / sub).mkdir(parents=True)
    cams = _cameras()
    (root / "cameras" / "setting1.json").write_text(json.dumps(cams))
    seqs = TRAIN + VAL + TEST
    (root / "cameras" / "mapping.txt").write_text("".join(f"{s} setting1\n" for s in seqs))
    rng = np.random.default_rng(0)
    for s in seqs:
        T = 6
        p3 = np.concatenate([rng.uniform(-30, 30, (T, 17, 1)), rng.uniform(0, 170, (T, 17, 1)),
                             rng.uniform(-30, 30, (T, 17, 1))], -1)  # fmt: skip
        k2 = np.ones((NUM_CAMS, T, 17, 3))
        for v, cam in enumerate(cams):
            k2[v, ..., :2] = _project_cm(cam, p3)
        with open(root / "keypoints2d" / f"{s}.pkl", "wb") as f:
            pickle.dump(
                {
                    "keypoints2d": k2,
                    "det_scores": np.ones((NUM_CAMS, T)),
                    "timestamps": np.arange(T),
                },
                f,
            )
        with open(root / "keypoints3d" / f"{s}.pkl", "wb") as f:
            pickle.dump({"keypoints3d": p3, "keypoints3d_optim": p3}, f)
    for name, lst in (("train", TRAIN), ("val", VAL), ("test", TEST)):
        (root / "splits" / f"crossmodal_{name}.txt").write_text("\n".join(lst) + "\n")
    (root / "ignore_list.txt").write_text(IGNORED + "\n")
    return root


def test_split_lists_and_ignore_list(aist_tree: Path):
    assert split_sequences(aist_tree, "train") == [TRAIN[0], TRAIN[2]]
    assert split_sequences(aist_tree, "val") == VAL and split_sequences(aist_tree, "test") == TEST
    # some copies keep the ignore list in splits/
    (aist_tree / "ignore_list.txt").rename(aist_tree / "splits" / "ignore_list.txt")
    assert IGNORED not in split_sequences(aist_tree, "train")
    with pytest.raises(ValueError, match="train, val, test"):
        split_sequences(aist_tree, "dev")


def test_one_random_view_per_sequence(aist_tree: Path, tmp_path: Path):
    files = import_split(aist_tree, "train", tmp_path / "a", one_view_seed=3)
    assert [f.stem for f in files] == [TRAIN[0], TRAIN[2]]
    cams = {c["name"]: c for c in _cameras()}
    with open(aist_tree / "keypoints3d" / f"{TRAIN[0]}.pkl", "rb") as f:
        p3 = pickle.load(f)["keypoints3d"]
    m = load_motion2d(files[0])
    name = m.meta["view"]
    assert m.num_views == 1 and m.meta["views"] == [name] and m.meta["view_seed"] == 3
    assert (
        m.meta["split"] == "train" and m.meta["sequence"] == TRAIN[0] and m.meta["gt3d"] == GT3D_USE
    )
    # the kept 2D keypoints and camera are those of the drawn view: 3D GT reprojects onto them
    np.testing.assert_allclose(m.keypoints[0], _project_cm(cams[name], p3), atol=1e-2)
    uv, _ = m.cameras()[0].project(torch.as_tensor(m.keypoints3d)[None])
    np.testing.assert_allclose(uv[0].numpy(), m.keypoints[0], atol=0.5)
    # seeded: the same seed draws the same views, other seeds draw others somewhere
    again = import_split(aist_tree, "train", tmp_path / "b", one_view_seed=3)
    assert [load_motion2d(f).meta["view"] for f in again] == [
        load_motion2d(f).meta["view"] for f in files
    ]
    drawn = {load_motion2d(f).meta["view"] for s in range(8) for f in import_split(aist_tree, "train", tmp_path / f"s{s}", one_view_seed=s)}  # fmt: skip
    assert len(drawn) >= 3


def test_missing_sequence_names_the_file(aist_tree: Path, tmp_path: Path):
    (aist_tree / "keypoints2d" / f"{VAL[0]}.pkl").unlink()
    with pytest.raises(MotionFormatError, match="lacks 1 sequence"):
        import_split(aist_tree, "val", tmp_path / "v")
    (aist_tree / "splits" / "crossmodal_test.txt").unlink()
    with pytest.raises(MotionFormatError, match="crossmodal_test.txt"):
        import_split(aist_tree, "test", tmp_path / "t")


def test_import_aist_cli(aist_tree: Path, tmp_path: Path):
    run = CliRunner().invoke
    out = tmp_path / "test_split"
    args = [
        "data",
        "import-aist",
        str(aist_tree),
        "--split",
        "test",
        "--one-random-view",
        "--seed",
        "1",
    ]
    res = run(app, [*args, "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert "1 clip(s)" in res.output and sorted(p.stem for p in out.glob("*.npz")) == TEST
    assert run(app, ["data", "check", str(out / f"{TEST[0]}.npz")]).exit_code == 0
    res = run(
        app,
        ["data", "import-aist", str(aist_tree), "--seq", VAL[0], "--out", str(tmp_path / "v.npz")],
    )
    assert res.exit_code == 0 and load_motion2d(tmp_path / "v.npz").num_views == NUM_CAMS
    res = run(app, ["data", "import-aist", str(aist_tree), "--split", "dev", "--out", str(out)])
    assert res.exit_code == 2 and "train, val, test" in res.output
    res = run(app, ["data", "import-aist", str(aist_tree), "--out", str(out)])
    assert res.exit_code == 2


def test_data_config_makes_the_split(aist_tree: Path, tmp_path: Path):
    """``conf/data/aist.yaml`` through the training data recipes: one clip per sequence."""
    from omegaconf import OmegaConf

    from mimic2dm.app.data import prepare_data

    conf = Path(__file__).resolve().parents[1] / "conf" / "data" / "aist.yaml"
    cfg = OmegaConf.create({"data": OmegaConf.load(conf)})
    cfg.data.anno_dir, cfg.data.seed = str(aist_tree), 5
    files = prepare_data(cfg.data, tmp_path / "run")
    assert [Path(f).stem for f in files] == [TRAIN[0], TRAIN[2]]
    assert Path(files[0]).parent.name == "aist_train_seed5"
    assert {load_motion2d(f).meta["view_seed"] for f in files} == {5}
    assert prepare_data(cfg.data, tmp_path / "run") == files  # made once, then reused
