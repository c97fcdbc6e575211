"""The `mimic2dm` command as users call it: every documented sub-command is wired, and
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


def test_bench_train_reports_modes_ratios_and_the_time_breakdown(tmp_path):
    from mimic2dm.rl.config import resolve_precision
    from mimic2dm.rl.observer import BREAKDOWN
    from mimic2dm.train import compose_config
    from mimic2dm.train_bench import bench_train

    overrides = [o for o in TINY if not o.startswith(("train.num_envs", "train.minibatch_size"))]
    overrides += ["data.clips.0.make.seconds=1.5"]
    r = bench_train(num_envs=8, seconds=1.0, overrides=overrides, out_dir=tmp_path, extra=("dog",),
                    candidate=["train.horizon_length=4", "train.network.precision=bf16"], repeats=2)  # fmt: skip
    names = [
        "baseline",
        "serial",
        "in-process",
        "ray, 1 actor",
        "ray, 2 actors",
        "ray, 2 actors, per-step calls",
        "dog, serial",
        "dog",
    ]
    assert list(r["modes"]) == names and r["repeats"] == 2
    for m in r["modes"].values():  # two rounds each, the lower one reported (the median of 2)
        assert len(m["rounds"]) == 2 and m["wall_samples_per_s"] == min(m["rounds"])
    ratios = r["ratios"]
    assert (
        set(ratios["vs_baseline"])
        == set(ratios["vs_in_process"])
        == set(ratios["vs_serial"])
        == set(names)
    )
    assert ratios["vs_baseline"]["baseline"] == 1.0
    assert ratios["vs_in_process"]["in-process"] == 1.0
    assert ratios["vs_serial"]["serial"] == ratios["vs_serial"]["dog, serial"] == 1.0
    assert ratios["in_process_vs_serial"] == ratios["vs_serial"]["in-process"]
    dog = r["modes"]["dog"]["wall_samples_per_s"] / r["modes"]["dog, serial"]["wall_samples_per_s"]
    assert ratios["vs_serial"]["dog"] == pytest.approx(
        dog
    )  # each extra against its own serial loop
    assert ratios["2_actors_vs_in_process"] == ratios["vs_in_process"]["ray, 2 actors"]
    per_step = ratios["vs_in_process"]["ray, 2 actors, per-step calls"]
    assert ratios["per_step_calls_vs_in_process"] == per_step
    assert ratios["per_sample_vs_baseline"]["baseline"]["all"] == 1.0
    # the fixed modes' settings; the other modes run the config's own
    settings = {n: m["settings"] for n, m in r["modes"].items()}
    base, serial, default = settings["baseline"], settings["serial"], settings["in-process"]
    assert base["minibatch_size"] == 512 and base["physics_hz"] == 60 and not base["overlap"]
    assert (
        serial["physics_hz"] == 60
        and not serial["overlap"]
        and not settings["dog, serial"]["overlap"]
    )
    assert (
        serial["minibatch_size"]
        == default["minibatch_size"]
        == compose_config([]).train.minibatch_size
    )
    assert settings["dog"]["character"] == "dog" and default["character"] == "humanoid"
    # --set reaches the default modes only
    assert (
        base["horizon_length"] == serial["horizon_length"] == 8 and base["env_groups"] == 1
    )  # TINY's
    defaults = [
        "in-process",
        "ray, 1 actor",
        "ray, 2 actors",
        "ray, 2 actors, per-step calls",
        "dog",
    ]
    # the actors run the policy by default; the per-step mode keeps it in the learner
    assert settings["ray, 2 actors"]["actor_policy"] and settings["ray, 1 actor"]["actor_policy"]
    assert settings["ray, 2 actors, per-step calls"]["actor_policy"] is False
    assert all(settings[n]["horizon_length"] == 4 for n in defaults)
    assert base["precision"] == "fp32"
    assert serial["precision"] == resolve_precision(
        str(compose_config([]).train.network.precision), "cpu"
    )
    assert all(settings[n]["precision"] == "bf16" for n in defaults)
    assert default["physics_hz"] == compose_config([]).engine.physics_hz
    assert default["overlap"] == compose_config([]).train.overlap
    for name, m in r["modes"].items():
        assert m["samples_per_s"] > 0 and m["wall_samples_per_s"] > 0, name
        b = m["breakdown"]
        assert list(b) == list(BREAKDOWN), name
        assert all(v >= 0 for part in b.values() for v in part.values()), (name, b)
        total = sum(part["s_per_epoch"] for part in b.values())
        assert abs(total - m["epoch_s"]) <= 0.1 * m["epoch_s"], (name, total, m["epoch_s"])
        # the engine's timer reaches the learner, from Ray actors too; an update beside the
        # rollout reports its own time apart
        update = m["update_busy_s"] if m["settings"]["overlap"] else b["update"]["s_per_epoch"]
        assert b["physics"]["s_per_epoch"] > 0 and update > 0, (name, b)


def test_bench_train_refuses_an_unknown_extra():
    res = CliRunner().invoke(app, ["bench", "train", "--extra", "dog,cat"])
    assert res.exit_code == 1 and "--extra cat" in res.output and "dog, dribble" in res.output
    res = CliRunner().invoke(app, ["bench", "train", "--repeats", "0"])
    assert res.exit_code == 1 and "--repeats must be >= 1" in res.output


def test_time_breakdown_parts_sum_to_the_epoch():
    from mimic2dm.rl.observer import time_breakdown

    t = {"step_time": 2.0, "play_time": 3.0, "update_time": 1.5}
    parts = time_breakdown(t, physics=0.5, wall=5.0)
    assert parts == {"physics": 0.5, "task": 1.5, "inference": 1.0, "update": 1.5, "overhead": 0.5}
    # the update beside the rollout (train.overlap): what it added to the rollout's time
    over = time_breakdown({**t, "overlapped": 1.0, "total_time": 3.25}, physics=0.5, wall=3.5)
    assert over == {"physics": 0.5, "task": 1.5, "inference": 1.0, "update": 0.25, "overhead": 0.25}
    # a physics time above the step's (clock noise across processes) is capped, never negative
    parts = time_breakdown(t, physics=2.5, wall=4.0)
    assert parts["physics"] == 2.0 and parts["task"] == 0.0 and parts["overhead"] == 0.0


def test_eval_command_bad_input_is_a_clear_error(tmp_path):
    res = CliRunner().invoke(
        app, ["eval", str(tmp_path / "missing.pt"), "--data", str(tmp_path / "x.npz")]
    )
    assert res.exit_code == 1
    assert "missing.pt" in res.output


def test_option_checks_name_the_option_and_input_errors_exit_1(capsys):
    import typer

    from mimic2dm.utils.cli import check_choice, check_positive, exit_on, fail

    with pytest.raises(typer.BadParameter) as e:
        check_choice("x", ("a", "b"), "--camera")
    assert str(e.value) == "'x' is not one of a, b" and e.value.param_hint == "--camera"
    check_choice("a", ("a", "b"), "--camera")
    check_positive(None, "--fps")
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(typer.BadParameter, match="must be > 0"):
            check_positive(bad, "--fps")
    with pytest.raises(typer.Exit) as ex, exit_on(ValueError, prefix="clip.npz: "):
        raise ValueError("field 'fps' is 0, expected > 0")
    assert ex.value.exit_code == 1
    assert capsys.readouterr().err == "error: clip.npz: field 'fps' is 0, expected > 0\n"
    with pytest.raises(typer.Exit) as ex:
        fail("cannot list 'x'", code=2)
    assert ex.value.exit_code == 2 and capsys.readouterr().err == "error: cannot list 'x'\n"
