"""The `mimic2dm` command as users call it: every sub-command the issues name is wired, and
`mimic2dm eval` / `mimic2dm bench train` run end to end on a tiny trained tracker."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from rl_helpers import TINY
from typer.testing import CliRunner

from mimic2dm.cli import app
from mimic2dm.render import gl_backend, no_gl_message

ROOT = Path(__file__).resolve().parents[1]


def test_every_named_command_is_mounted():
    runner = CliRunner()
    top = runner.invoke(app, ["--help"]).output
    for cmd in ("demo", "eval", "data", "bench", "extract", "pose", "sample", "list"):
        assert f" {cmd} " in top, cmd
    bench = runner.invoke(app, ["bench", "--help"]).output
    for cmd in ("engine", "train", "pose", "generate"):
        assert f" {cmd} " in bench, cmd
    data = runner.invoke(app, ["data", "--help"]).output
    assert " synth " in data and " check " in data
    assert " convert-mmpose " in runner.invoke(app, ["pose", "--help"]).output


def test_list_prints_every_registered_name_with_a_description():
    from mimic2dm.tasks.registry import TASKS

    from mimic2dm.characters import CHARACTERS, OBJECTS
    from mimic2dm.engines import ENGINES

    runner = CliRunner()
    for what, reg in (
        ("tasks", TASKS),
        ("characters", CHARACTERS),
        ("engines", ENGINES),
        ("objects", OBJECTS),
    ):
        res = runner.invoke(app, ["list", what])
        assert res.exit_code == 0, res.output
        lines = res.output.strip().splitlines()
        assert [ln.split()[0] for ln in lines] == reg.names(), what
        assert all(len(ln.split()) > 2 for ln in lines), what  # a name, then a description
    assert "tracking2d" in runner.invoke(app, ["list", "tasks"]).output
    bad = runner.invoke(app, ["list", "robots"])
    assert bad.exit_code == 2 and "choose one of: tasks, characters, engines, objects" in bad.output


def test_eval_command_on_a_tiny_trained_tracker(tmp_path):
    run = tmp_path / "run"
    res = subprocess.run(
        [sys.executable, "-m", "mimic2dm.train", f"hydra.run.dir={run}", *TINY,
         "data.clips.0.make.seconds=1.5", "train.max_epochs=2"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    out = tmp_path / "eval"
    args = ["eval", str(run / "checkpoints" / "best.pt"), "--data", str(run / "data" / "demo_clip.npz"),
            "--json", str(out / "eval.json"), "--picture", str(out / "overlay.png")]  # fmt: skip
    video = ["--video", str(out / "rollout.mp4")]
    if gl_backend() is None:  # --video must then fail, with the reason, before evaluating
        res = CliRunner().invoke(app, args + video)
        assert res.exit_code == 1 and "no OpenGL back-end works" in res.output, res.output
        assert not (out / "eval.json").exists()
        video = []
    res = CliRunner().invoke(app, args + video)
    assert res.exit_code == 0, res.output
    report = json.loads((out / "eval.json").read_text())
    assert report["views"] == 1 and len(report["sequences"]) == 1
    seq = report["sequences"][0]
    assert seq["success"] == (seq["max_error_2d_px"] <= 100.0)
    assert seq["error_2d_px"] > 0 and seq["mpjpe_mm"] > 0
    assert (out / "overlay.png").stat().st_size > 1000
    if video:
        assert (out / "rollout.mp4").stat().st_size > 1000
    else:
        pytest.skip(f"eval --video not run: {no_gl_message()}")


def test_bench_train_reports_three_modes_and_ratios(tmp_path):
    from mimic2dm.train_bench import bench_train

    overrides = [o for o in TINY if not o.startswith("train.num_envs")] + [
        "data.clips.0.make.seconds=1.5"
    ]
    r = bench_train(num_envs=8, seconds=1.0, overrides=overrides, out_dir=tmp_path)
    assert set(r["modes"]) == set(r["ratios"]) and len(r["modes"]) == 3
    assert r["ratios"]["in-process"] == 1.0
    assert all(m["samples_per_s"] > 0 for m in r["modes"].values())


def test_eval_command_bad_input_is_a_clear_error(tmp_path):
    res = CliRunner().invoke(
        app, ["eval", str(tmp_path / "missing.pt"), "--data", str(tmp_path / "x.npz")]
    )
    assert res.exit_code == 1
    assert "missing.pt" in res.output
