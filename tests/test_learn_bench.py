"""`mimic2dm bench learn` with a tiny budget: table, JSON and PNG are produced, numbers sane."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mimic2dm.cli import app
from mimic2dm.utils.paths import mocap_dir

MOCAP = mocap_dir()


@pytest.mark.slow
@pytest.mark.skipif(not (MOCAP / "cmu_run.npz").is_file(), reason="shared mocap missing")
def test_bench_learn_tiny_budget(tmp_path):
    out, png = tmp_path / "learn.json", tmp_path / "learn.png"
    res = CliRunner().invoke(app, ["bench", "learn", "--clips", "cmu_run", "--minutes", "0.15", "--seeds", "1",
                                   "--first-seed", "3", "--eval-every", "3", "--out-dir", str(tmp_path / "runs"), "--json", str(out),
                                   "--png", str(png), "-o", "train.num_envs=16", "-o", "logger.tensorboard=false",
                                   "-o", "task.initial_state=auto"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "last checkpoint" in res.output and "cmu_" in res.output
    r = json.loads(out.read_text())["runs"][0]
    assert r["checkpoint"].endswith("last.pt") and Path(r["checkpoint"]).is_file()
    assert r["seed"] == 3 and r["run_dir"].endswith("cmu_run_seed3")  # --first-seed
    assert r["initial_state"] == "reference_3d"
    assert 0 < r["error_2d_px"] <= r["max_error_2d_px"] < 1e4
    assert r["mpjpe_mm"] > 0 and r["jitter"] > 0 and r["reference_jitter"] > 0
    assert math.isclose(r["jitter_ratio"], r["jitter"] / r["reference_jitter"])
    assert r["evals"] and all(e["train_s"] >= 0 for e in r["evals"])
    # the last periodic evaluation of the same weights matches the final one (deterministic)
    assert r["time_to_first_success_s"] is None or r["time_to_first_success_s"] <= 0.15 * 60 + 60
    assert png.stat().st_size > 2000


def test_bench_learn_table_adds_the_ball_columns_for_dribble_runs():
    from rich.console import Console

    from mimic2dm.learn_bench import CLIP_OVERRIDES, _table

    assert CLIP_OVERRIDES["dribble_cmu_run"] == ("task=dribble",)
    row = {"clip": "cmu_run", "seed": 0, "time_to_first_success_s": None, "final_success": False,
           "error_2d_px": 40.0, "max_error_2d_px": 120.0, "mpjpe_mm": 150.0, "jitter": 500.0,
           "reference_jitter": 400.0, "jitter_ratio": 1.25}  # fmt: skip
    dribble = {
        **row,
        "clip": "dribble_cmu_run",
        "object_error_2d_px": 321.5,
        "ball_within_reach": 0.25,
    }

    def text(runs):
        console = Console(width=300, record=True)
        console.print(_table({"minutes": 1.0, "runs": runs}))
        return console.export_text()

    assert "ball 2D err" not in text([row])
    out = text([row, dribble])
    assert "ball 2D err" in out and "321.5" in out and "0.25" in out


def test_bench_learn_composes_every_run_before_training_and_names_the_bad_one(tmp_path):
    """A clip that has no data config fails the command at once, before the clip before it
    trains: no run folder, no JSON."""
    out = tmp_path / "learn.json"
    res = CliRunner().invoke(app, ["bench", "learn", "--clips", "cmu_walk,cmu_nope", "--minutes", "0.1",
                                   "--out-dir", str(tmp_path / "runs"), "--json", str(out)])  # fmt: skip
    assert res.exit_code != 0
    assert "cmu_nope" in res.output and "seed 0" in res.output
    assert not (tmp_path / "runs").exists() and not out.exists()


def _fake_row(clip, seed, run_dir):
    return {"clip": clip, "seed": seed, "minutes": 0.1, "run_dir": str(run_dir), "checkpoint": "last.pt",
            "time_to_first_success_s": 3.0, "final_success": True, "error_2d_px": 20.0,
            "max_error_2d_px": 42.0, "mpjpe_mm": 50.0, "jitter": 5.0, "reference_jitter": 4.0,
            "jitter_ratio": 1.25, "evals": [], "curve": []}  # fmt: skip


def test_bench_learn_records_a_failed_run_and_goes_on_with_the_next(tmp_path, monkeypatch):
    """A run whose training raises is a failed row (never succeeded, with its error) and the
    runs after it still train. ``learn_one`` (the training) is replaced; composing the
    configs is real."""
    import mimic2dm.learn_bench as lb
    from mimic2dm.rl.agent import TrainingDiverged

    calls = []

    def fake_learn_one(clip, seed, minutes, run_dir, every, overrides, cfg=None):
        calls.append((seed, cfg.seed, Path(cfg.run_dir).name))
        if seed == 1:
            raise TrainingDiverged("non-finite loss at epoch 7")
        return _fake_row(clip, seed, run_dir)

    monkeypatch.setattr(lb, "learn_one", fake_learn_one)
    out, png = tmp_path / "learn.json", tmp_path / "learn.png"
    res = CliRunner().invoke(app, ["bench", "learn", "--clips", "cmu_walk", "--seeds", "3", "--minutes", "0.1",
                                   "--out-dir", str(tmp_path / "runs"), "--json", str(out), "--png", str(png)],
                             catch_exceptions=False)  # fmt: skip
    assert res.exit_code == 0, res.output
    assert [c[:2] for c in calls] == [(0, 0), (1, 1), (2, 2)]
    assert calls[1][2].endswith("cmu_walk_seed1")
    runs = json.loads(out.read_text())["runs"]
    assert [r["seed"] for r in runs] == [0, 1, 2]
    assert "error" not in runs[0] and "error" not in runs[2] and runs[2]["max_error_2d_px"] == 42.0
    bad = runs[1]
    assert bad["error"] == "TrainingDiverged: non-finite loss at epoch 7"
    assert bad["final_success"] is False and bad["time_to_first_success_s"] is None
    assert bad["checkpoint"] is None and bad["run_dir"].endswith("cmu_walk_seed1")
    assert "failed" in res.output and "non-finite loss" in res.output and png.is_file()
    assert not list(tmp_path.glob(".*.tmp"))


def test_bench_learn_a_config_error_in_a_run_ends_it_and_keeps_the_finished_runs(
    tmp_path, monkeypatch
):
    """A config error (which every later run would repeat) ends the benchmark with one line;
    the JSON, rewritten after each run, keeps the runs before it."""
    import mimic2dm.learn_bench as lb
    from mimic2dm.utils.validate import ConfigError

    calls = []

    def fake_learn_one(clip, seed, minutes, run_dir, every, overrides, cfg=None):
        calls.append(seed)
        if seed == 1:
            raise ConfigError("train.num_envs", -1, "x >= 1")
        return _fake_row(clip, seed, run_dir)

    monkeypatch.setattr(lb, "learn_one", fake_learn_one)
    out = tmp_path / "learn.json"
    res = CliRunner().invoke(app, ["bench", "learn", "--clips", "cmu_walk", "--seeds", "3", "--minutes", "0.1",
                                   "--out-dir", str(tmp_path / "runs"), "--json", str(out)])  # fmt: skip
    assert res.exit_code == 1 and "train.num_envs" in res.output
    assert calls == [0, 1]
    saved = json.loads(out.read_text())
    assert [r["seed"] for r in saved["runs"]] == [0] and saved["runs"][0]["max_error_2d_px"] == 42.0
    assert not list(tmp_path.glob(".*.tmp"))


def test_speedups_pair_scratch_and_init_from_runs_and_bound_the_failures():
    from mimic2dm.learn_bench import speedups

    runs = [
        {"clip": "a", "seed": 0, "start": "scratch", "time_to_first_success_s": 300.0},
        {"clip": "a", "seed": 0, "start": "init_from", "time_to_first_success_s": 60.0},
        {"clip": "b", "seed": 0, "start": "scratch", "time_to_first_success_s": None},
        {"clip": "b", "seed": 0, "start": "init_from", "time_to_first_success_s": 100.0},
        {"clip": "c", "seed": 1, "start": "scratch", "time_to_first_success_s": None},
        {"clip": "c", "seed": 1, "start": "init_from", "time_to_first_success_s": None},
    ]
    sp = speedups(runs, minutes=10.0)
    assert [(p["clip"], p["bound"]) for p in sp["pairs"]] == [("a", "="), ("b", ">="), ("c", None)]
    assert sp["pairs"][0]["ratio"] == 5.0 and sp["pairs"][1]["ratio"] == 6.0  # b: the 600 s budget
    assert sp["median"] == 5.5


@pytest.mark.skipif(not (MOCAP / "cmu_walk.npz").is_file(), reason="shared mocap missing")
def test_bench_learn_init_from_trains_each_clip_from_scratch_and_from_the_weights(tmp_path):
    """`--init-from` runs every clip x seed twice; the second starts from the given weights
    at the fine-tuning learning rate, and the JSON pairs them."""
    from mimic2dm.utils.checkpoint import load_checkpoint

    out = tmp_path / "learn.json"
    common = ["-o", "train.num_envs=8", "-o", "train.horizon_length=8", "-o", "train.minibatch_size=32",
              "-o", "logger.tensorboard=false", "-o", "train.network.encoder_units=[64]",
              "-o", "train.network.head_units=[32,32]"]  # fmt: skip
    first = CliRunner().invoke(app, ["bench", "learn", "--clips", "cmu_walk", "--minutes", "0.05", "--eval-every", "100",
                                     "--out-dir", str(tmp_path / "a"), *common])  # fmt: skip
    assert first.exit_code == 0, first.output
    src = next((tmp_path / "a").iterdir())
    res = CliRunner().invoke(app, ["bench", "learn", "--clips", "cmu_walk", "--minutes", "0.05", "--eval-every", "100",
                                   "--out-dir", str(tmp_path / "b"), "--init-from", str(src), "--json", str(out),
                                   *common])  # fmt: skip
    assert res.exit_code == 0, res.output
    rep = json.loads(out.read_text())
    assert [r["start"] for r in rep["runs"]] == ["scratch", "init_from"]
    assert rep["init_from"] == str(src) and len(rep["speedup"]["pairs"]) == 1
    init_cfg = load_checkpoint(rep["runs"][1]["checkpoint"])["meta"]["config"]
    assert init_cfg["init_from"] == str(src) and init_cfg["train"]["learning_rate"] == 1e-4
    assert load_checkpoint(rep["runs"][0]["checkpoint"])["meta"]["config"]["init_from"] is None
    assert "time to first success, scratch / init_from" in res.output
