"""The tracker's motion corpus: DeepMimic clips as mocap, windows, ``data corpus`` and ``bench corpus``.

The generator runs on a small shared folder built here from the shipped clips (a DeepMimic
walk and run, a long clip made by repeating the walk's frames, the CMU clips); the committed
``conf/data/corpus.yaml`` and its manifest are compared with a fresh scan of the full shared
data where it is there.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from rl_helpers import tiny_config, write_demo
from shared_data import DEEPMIMIC
from typer.testing import CliRunner

from mimic2dm.app.data import prepare_data
from mimic2dm.characters.clips import load_mocap_keypoints
from mimic2dm.cli import app
from mimic2dm.motion import corpus
from mimic2dm.motion.format import load_motion2d
from mimic2dm.utils.paths import PROJECT_ROOT, mocap_dir
from mimic2dm.utils.validate import ConfigError

runner = CliRunner()
WALK = DEEPMIMIC / "humanoid3d_walk.txt"
CORPUS_YAML = PROJECT_ROOT / "conf" / "data" / "corpus.yaml"
CORPUS_MANIFEST = PROJECT_ROOT / "conf" / "data" / "corpus_manifest.json"


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def _shared_corpus(root: Path) -> Path:
    """A shared folder with the corpus layout: 3 DeepMimic clips at the top (walk, run, a
    get-up that is left out), a 25 s walk in ``long/``, a run in ``sie/``, the CMU clips."""
    dm = root / "data" / "mocap" / "deepmimic"
    for sub in ("long", "sie", "characters"):
        (dm / sub).mkdir(parents=True)
    shutil.copy(DEEPMIMIC / "characters" / "humanoid3d.txt", dm / "characters")
    shutil.copy(WALK, dm)
    shutil.copy(DEEPMIMIC / "humanoid3d_run.txt", dm)
    shutil.copy(WALK, dm / "humanoid3d_getup_faceup.txt")
    shutil.copy(DEEPMIMIC / "humanoid3d_run.txt", dm / "sie" / "sie_humanoid3d_run_forward00.txt")
    walk = json.loads(WALK.read_text())
    frames, step = [], walk["Frames"][0][0]
    while len(frames) * step < 25.0:  # the walk cycle's frames again and again: 25 s
        frames += [list(f) for f in walk["Frames"][:-1]]
    (dm / "long" / "humanoid3d_long_walk9.txt").write_text(json.dumps({"Loop": "none", "Frames": frames}))  # fmt: skip
    for name in corpus.CMU_CLIPS:
        shutil.copy(mocap_dir() / f"{name}.npz", root / "data" / "mocap")
    return root


# ----------------------------------------------------------------------------- DeepMimic as mocap
def test_deepmimic_txt_keypoints_equal_those_of_its_imported_npz(tmp_path: Path):
    npz = tmp_path / "walk.npz"
    assert invoke("data", "import-deepmimic", WALK, "--out", npz).exit_code == 0
    a, b = load_mocap_keypoints(WALK), load_mocap_keypoints(npz)
    assert (a.keypoint_set, a.character, a.fps) == (b.keypoint_set, b.character, b.fps) == ("coco17", "humanoid", 30.0)  # fmt: skip
    assert (
        a.keypoints.shape == b.keypoints.shape and np.abs(a.keypoints - b.keypoints).max() <= 1e-5
    )


def test_synth_recipe_and_data_synth_read_a_deepmimic_txt_and_cut_windows(tmp_path: Path):
    rec = {"kind": "synth", "mocap": str(WALK), "views": 1, "camera": "static", "fps": 30.0, "ground": True}  # fmt: skip
    whole, cut = prepare_data({"clips": [{"file": "whole.npz", "make": rec},
                                         {"file": "cut.npz", "make": {**rec, "start": 0.2, "end": 0.6}}]},
                              tmp_path)  # fmt: skip
    w, c = load_motion2d(whole), load_motion2d(cut)
    assert w.num_frames == 39 and c.num_frames == 13  # frames 6..18 of the 30 fps walk
    assert np.allclose(c.keypoints3d, w.keypoints3d[6:19] + (c.meta["ground_lift_m"] - w.meta["ground_lift_m"]) * np.array([0, 0, 1]), atol=1e-5)  # fmt: skip
    assert c.meta["window_s"] == pytest.approx([0.2, 0.6])
    out = tmp_path / "cli.npz"
    res = invoke(
        "data", "synth", WALK, "--out", out, "--start", "0.2", "--end", "0.6", "--fps", "30"
    )
    assert res.exit_code == 0, res.output
    assert load_motion2d(out).num_frames == 13


@pytest.mark.parametrize(
    ("start", "end", "field", "words"),
    [(-1.0, None, "start", "0 <= start < 1.26667"), (2.0, None, "start", "0 <= start"),
     (0.5, 0.4, "end", "0.5 < end <= 1.26667"), (0.0, 9.0, "end", "end <= 1.26667"),
     ("a", None, "start", "a finite number")],
)  # fmt: skip
def test_window_bounds_out_of_range_name_the_field(tmp_path: Path, start, end, field, words):
    ok = {"file": "a.npz", "make": {"kind": "synth", "mocap": str(WALK)}}
    bad = {
        "file": "b.npz",
        "make": {"kind": "synth", "mocap": str(WALK), "start": start, "end": end},
    }
    with pytest.raises(ConfigError) as e:
        prepare_data({"clips": [ok, bad]}, tmp_path)
    assert e.value.key == f"data.clips[1].make.{field}" and words in str(e.value), str(e.value)


def test_split_windows_cuts_10_s_and_merges_a_short_remainder():
    assert corpus.split_windows(9.5) == [(0.0, 9.5)]
    assert corpus.split_windows(10.0) == [(0.0, 10.0)]
    assert corpus.split_windows(25.0) == [(0.0, 10.0), (10.0, 20.0), (20.0, 25.0)]
    assert corpus.split_windows(21.5) == [(0.0, 10.0), (10.0, 21.5)]  # 1.5 s joins the last
    assert corpus.split_windows(22.0) == [(0.0, 10.0), (10.0, 20.0), (20.0, 22.0)]


# ----------------------------------------------------------------------------- data corpus
def test_data_corpus_writes_the_windows_yaml_and_manifest(tmp_path: Path):
    shared = _shared_corpus(tmp_path / "shared")
    out, man = tmp_path / "corpus.yaml", tmp_path / "manifest.json"
    res = invoke("data", "corpus", "--shared", shared, "--out", out, "--manifest", man)
    assert res.exit_code == 0, res.output
    m = json.loads(man.read_text())
    names = [c["name"] for c in m["clips"]]
    assert names == ["humanoid3d_run", "humanoid3d_walk", "humanoid3d_long_walk9",
                     "sie_humanoid3d_run_forward00", "cmu_walk", "cmu_run", "cmu_hop"]  # fmt: skip
    long = m["clips"][2]
    assert [(w["name"], w["start_s"], w["frames"]) for w in long["windows"]][:2] == [
        ("humanoid3d_long_walk9@0-10", 0.0, 301), ("humanoid3d_long_walk9@10-20", 10.0, 301)]  # fmt: skip
    assert len(long["windows"]) == 3 and long["windows"][2]["end_s"] == long["duration_s"] > 24.9
    windows = corpus.manifest_windows(m)
    assert m["windows_count"] == len(windows) == 9 and m["clips_count"] == 7
    assert sum(w["weight"] for w in windows) == pytest.approx(1.0, abs=1e-5)
    assert m["frames"] == sum(w["frames"] for w in windows)
    assert (
        "CC BY-NC" in m["clips"][3]["license"]
        and m["clips"][3]["license_folder"] == "deepmimic/sie"
    )
    cfg = corpus.task_camera_config()
    for w in windows:
        assert len(w["eval_cameras"]) == 8 and all(c["static"] for c in w["eval_cameras"])
        for c in w["eval_cameras"]:
            assert cfg.distance_range[0] <= c["distance_m"] <= cfg.distance_range[1]
            assert cfg.focal_range[0] <= c["focal_px"] <= cfg.focal_range[1]
            assert cfg.elevation_range_deg[0] <= c["elevation_deg"] <= cfg.elevation_range_deg[1]
    assert windows[0]["eval_cameras"] == corpus.evaluation_cameras(windows[0]["name"], cfg)
    from omegaconf import OmegaConf

    clips = OmegaConf.load(out).clips
    assert [c.make.labels.window for c in clips] == [w["name"] for w in windows]
    assert all(c.make.ground and c.make.fps == 30 and c.make.views == 1 and c.make.camera == "static" for c in clips)  # fmt: skip
    assert clips[3].make.start == 10.0 and clips[3].make.end == 20.0
    assert (
        OmegaConf.to_container(clips[3].make)["mocap"]
        == "${shared_dir}/data/mocap/deepmimic/long/humanoid3d_long_walk9.txt"
    )


@pytest.mark.skipif(not (corpus.DEFAULT_MANIFEST.is_file() and (mocap_dir() / "deepmimic" / "sie").is_dir()),
                    reason="needs the full shared DeepMimic clips (long/, sie/)")  # fmt: skip
def test_committed_corpus_is_what_the_generator_writes(tmp_path: Path):
    from mimic2dm.utils.paths import shared_dir

    out, man = tmp_path / "corpus.yaml", tmp_path / "manifest.json"
    corpus.write_corpus(shared_dir(), out, man)
    assert out.read_text() == CORPUS_YAML.read_text()
    assert json.loads(man.read_text()) == json.loads(CORPUS_MANIFEST.read_text())
    m = json.loads(man.read_text())
    stems = {c["name"] for c in m["clips"]}
    assert not stems & set(corpus.LEFT_OUT) and {"cmu_walk", "cmu_run", "cmu_hop"} <= stems


def test_data_corpus_composes_and_makes_one_window(tmp_path: Path):
    from omegaconf import OmegaConf

    from mimic2dm.train import compose_config

    cfg = compose_config([f"run_dir={tmp_path}", "data=corpus", "task.view_mode=virtual"])
    m = json.loads(CORPUS_MANIFEST.read_text())
    assert len(cfg.data.clips) == m["windows_count"]
    entry = next(c for c in cfg.data.clips if c.make.get("start") is not None)
    w = next(w for w in corpus.manifest_windows(m) if w["name"] == entry.make.labels.window)
    if not Path(OmegaConf.to_container(entry, resolve=True)["make"]["mocap"]).is_file():
        pytest.skip("needs the full shared DeepMimic clips")
    (path,) = prepare_data({"clips": [entry]}, tmp_path)
    clip = load_motion2d(path)
    assert Path(path).name == Path(w["file"]).name and clip.num_frames == w["frames"]
    assert clip.labels["window"] == w["name"] and clip.meta["window_s"][0] == pytest.approx(
        w["start_s"]
    )


# ----------------------------------------------------------------------------- bench corpus
@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory, one_torch_thread):
    from mimic2dm.train import train

    root = tmp_path_factory.mktemp("corpus_bench")
    clip = write_demo(root / "clip.npz", seconds=1.0)
    train(tiny_config(root / "run", clip, "train.max_epochs=1", "logger.video_every=0", "logger.tensorboard=false"))  # fmt: skip
    return root / "run" / "checkpoints" / "last.pt"


def test_bench_corpus_reports_every_window_and_camera(tmp_path: Path, tiny_checkpoint: Path):
    shared = _shared_corpus(tmp_path / "shared")
    man = tmp_path / "manifest.json"
    corpus.write_corpus(shared, tmp_path / "corpus.yaml", man)
    out, views = tmp_path / "report.json", tmp_path / "views"
    args = ["bench", "corpus", tiny_checkpoint, "--manifest", man, "--windows", "cmu_run,humanoid3d_walk",
            "--out", views, "--shared", shared, "--json", out]  # fmt: skip
    res = invoke(*args)
    assert res.exit_code == 0, res.output
    r = json.loads(out.read_text())
    assert r["pair_count"] == len(r["pairs"]) == 16 and [w["name"] for w in r["windows"]] == ["cmu_run", "humanoid3d_walk"]  # fmt: skip
    assert {(p["window"], p["camera"]) for p in r["pairs"]} == {(w, c) for w in ("cmu_run", "humanoid3d_walk") for c in range(8)}  # fmt: skip
    for p in r["pairs"]:
        assert p["success"] == (p["max_error_2d_px"] <= r["threshold_px"]) and p["error_2d_px"] <= p["max_error_2d_px"]  # fmt: skip
    assert r["successes"] == sum(p["success"] for p in r["pairs"])
    assert r["success_fraction"] == pytest.approx(r["successes"] / 16)
    assert r["meets_target"] == (r["success_fraction"] >= 0.8)
    for w in r["windows"]:
        ps = [p for p in r["pairs"] if p["window"] == w["name"]]
        assert w["success_fraction"] == pytest.approx(sum(p["success"] for p in ps) / 8)
    # the views are cached with the manifest's cameras: one file per window, 8 views each
    cached = load_motion2d(views / "cmu_run.npz")
    m = json.loads(man.read_text())
    w = next(w for w in corpus.manifest_windows(m) if w["name"] == "cmu_run")
    assert cached.num_views == 8 and cached.num_frames == w["frames"] and cached.meta["cameras"] == w["eval_cameras"]  # fmt: skip
    stamp = (views / "cmu_run.npz").stat().st_mtime_ns
    res = invoke(*args[:-2], "--max-windows", "1")
    assert res.exit_code == 0, res.output
    assert (views / "cmu_run.npz").stat().st_mtime_ns == stamp
    res = invoke("bench", "corpus", tiny_checkpoint, "--manifest", man, "--windows", "nope")
    assert res.exit_code == 1 and "nope" in res.output


def test_data_select_keeps_the_named_windows_and_refuses_a_pattern_that_matches_none():
    """`data.select` (fnmatch patterns over window names) picks a part of the corpus, e.g. one
    expert's clips in a Hydra sweep over lists; a typo is one error naming the pattern."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from mimic2dm.app.data import clip_entries
    from mimic2dm.train import compose_config
    from mimic2dm.utils.validate import ConfigError

    cfg = compose_config(["data=corpus", "data.select=[humanoid3d_walk*,cmu_walk]"])
    assert [e["file"] for e in clip_entries(cfg.data)] == [
        "corpus/humanoid3d_walk.npz",
        "corpus/cmu_walk.npz",
    ]
    cfg = compose_config(["data=corpus", "data.select=humanoid3d_long_walk1@*"])
    assert len(clip_entries(cfg.data)) == 4  # 32.8 s in 10 s windows
    with pytest.raises(ConfigError, match="data.select=.*'humanoid3d_wakl' matches none of the 97"):
        clip_entries(
            compose_config(["data=corpus", "data.select=[humanoid3d_walk,humanoid3d_wakl]"]).data
        )
    sweep = OverridesParser.create().parse_overrides(
        ["data.select=[humanoid3d_walk*,cmu_walk],[sie_*_run_left*]"]
    )[0]
    assert list(sweep.sweep_string_iterator()) == [
        "[humanoid3d_walk*,cmu_walk]",
        "[sie_*_run_left*]",
    ]
