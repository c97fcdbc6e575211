"""Output a script can use: ``--json -`` prints only JSON on stdout, library prints go to the
log, and ``mimic2dm extract`` checks its inputs and the model weights before loading models."""

import json
import logging
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from rl_helpers import tiny_config, write_demo
from typer.testing import CliRunner

from mimic2dm.cli import app
from mimic2dm.utils.reporting import library_output_to_log, write_json_report

ROOT = Path(__file__).resolve().parents[1]
OFFLINE_HINTS = ("--random-weights", "mimic2dm pose convert-mmpose")


# ----------------------------------------------------------------------------- the helpers
def test_write_json_report_to_a_file_to_stdout_and_nowhere(tmp_path, capsys):
    report = {"a": np.float32(1.5), "n": np.int64(3), "arr": np.arange(3), "t": torch.tensor([1.0]),
              "nan": float("nan"), "p": tmp_path, "nested": [{"inf": math.inf}]}  # fmt: skip
    write_json_report(report, tmp_path / "sub" / "r.json")
    back = json.loads((tmp_path / "sub" / "r.json").read_text())
    assert back == {
        "a": 1.5,
        "n": 3,
        "arr": [0, 1, 2],
        "t": [1.0],
        "nan": None,
        "p": str(tmp_path),
        "nested": [{"inf": None}],
    }  # fmt: skip  (strict JSON: no NaN)
    write_json_report(report, None)
    assert capsys.readouterr().out == ""
    write_json_report({"x": 1}, "-")
    assert json.loads(capsys.readouterr().out) == {"x": 1}


def test_library_prints_reach_log_files_not_the_console(tmp_path, capsys):
    root = logging.getLogger()
    console = logging.StreamHandler(sys.stderr)
    log_file = logging.FileHandler(tmp_path / "job.log")
    root.addHandler(console)
    root.addHandler(log_file)
    old_level = root.level
    root.setLevel(logging.INFO)
    try:
        with library_output_to_log("rl_games"):
            print("RunningMeanStd:  (1,)")
            with library_output_to_log():  # nesting keeps the outer block's filters
                print("self.seed = 0")
            print("MAX EPOCHS", end="")  # an unterminated line is logged at the end
            logging.getLogger("mimic2dm.x").info("our own record")
        print("after the block")
        logging.getLogger("mimic2dm.library").info("outside a block: a normal record")
    finally:
        root.removeHandler(console)
        root.removeHandler(log_file)
        log_file.close()
        root.setLevel(old_level)
    cap = capsys.readouterr()
    assert cap.out == "after the block\n"
    assert "RunningMeanStd" not in cap.err and "self.seed" not in cap.err
    assert "our own record" in cap.err and "outside a block" in cap.err
    logged = (tmp_path / "job.log").read_text().splitlines()
    assert logged[:3] == ["RunningMeanStd:  (1,)", "self.seed = 0", "our own record"]
    assert "MAX EPOCHS" in logged


# ----------------------------------------------------------------------------- --json - on commands
def _only_json(res) -> dict:
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)  # fails on anything else printed to stdout


def test_bench_engine_json_to_stdout(tmp_path):
    res = CliRunner().invoke(app, ["bench", "engine", "--num-envs", "2", "--seconds", "0.05",
                                   "--threads", "1", "--json", "-"])  # fmt: skip
    result = _only_json(res)
    assert result["num_envs"] == 2 and result["engine_env_steps_per_s"] > 0
    assert "env-steps/s" in res.stderr  # the table went to stderr
    res = CliRunner().invoke(app, ["bench", "engine", "--num-envs", "2", "--seconds", "0.05",
                                   "--threads", "1", "--json", str(tmp_path / "b.json")])  # fmt: skip
    assert res.exit_code == 0 and "env-steps/s" in res.stdout  # a file: the table stays on stdout
    assert json.loads((tmp_path / "b.json").read_text())["num_envs"] == 2


def test_bench_generate_json_to_stdout():
    result = _only_json(
        CliRunner().invoke(app, ["bench", "generate", "--frames", "32", "--json", "-"])
    )
    assert result["frames"] >= 32 and result["frames_per_s"] > 0


@pytest.fixture(scope="module")
def tracker(tmp_path_factory):
    """A one-epoch tracker run (checkpoint + its demo clip)."""
    from mimic2dm.train import train

    d = tmp_path_factory.mktemp("tracker")
    clip = write_demo(d / "demo.npz", seconds=1.0)
    train(tiny_config(d / "run", clip, "train.max_epochs=1", "logger.tensorboard=false"))
    return d / "run" / "checkpoints" / "last.pt", clip


def test_eval_json_to_stdout_has_no_rl_games_prints(tracker, tmp_path):
    ckpt, clip = tracker
    res = CliRunner().invoke(app, ["eval", str(ckpt), "--data", str(clip), "--json", "-"])
    report = _only_json(res)  # rl-games printed "RunningMeanStd:  (1,)" first before
    assert report["views"] == 1 and len(report["sequences"]) == 1
    assert report["sequences"][0]["error_2d_px"] > 0
    assert "RunningMeanStd" not in res.output and '"success_rate"' in res.stderr


@pytest.mark.slow
def test_bench_train_json_to_stdout_in_a_real_process():
    # a real process: rl-games' prints and Ray's worker output go to the real stdout there
    cmd = [sys.executable, "-m", "mimic2dm.cli", "bench", "train", "--num-envs", "4", "--seconds", "0.5",
           "-o", "train.horizon_length=4", "-o", "train.minibatch_size=16", "-o", "train.mini_epochs=1",
           "-o", "train.network.encoder_units=[32]", "-o", "train.network.head_units=[32]",
           "-o", "data.clips.0.make.seconds=1.0", "--extra", "dribble", "--json", "-"]  # fmt: skip
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "WANDB_MODE": "offline"})  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    result = json.loads(res.stdout)
    assert set(result["modes"]) == {"baseline", "serial", "in-process", "ray, 1 actor", "ray, 2 actors",
                                    "ray, 2 actors, per-step calls", "dribble, serial", "dribble"}  # fmt: skip
    assert result["modes"]["dribble"]["settings"]["task"] == "dribble"
    assert all(m["samples_per_s"] > 0 for m in result["modes"].values())
    assert all(set(m["breakdown"]) >= {"physics", "update"} for m in result["modes"].values())
    assert "PPO training throughput" in res.stderr and "2 actors vs in-process" in res.stderr
    assert "policy in per-step calls" in res.stderr
    assert "in-process vs serial" in res.stderr


# ----------------------------------------------------------------------------- extract start-up
@pytest.fixture(scope="module")
def small_video(tmp_path_factory):
    from mimic2dm.video.io import write_video

    path = tmp_path_factory.mktemp("video") / "small.mp4"
    frames = [np.full((96, 128, 3), 30 * t, np.uint8) for t in range(5)]
    frames = [f.copy() for f in frames]
    for t, f in enumerate(frames):
        f[10:80, 50 + 3 * t : 70 + 3 * t] = 230  # something box-like
    write_video(path, frames, 10.0)
    return path


def test_extract_checks_the_inputs_before_any_model_loads(tmp_path, small_video):
    runner = CliRunner()
    # the models named here do not exist: had they been loaded first, they would be the error
    bad_models = ["--detector", str(tmp_path / "no_det"), "--pose-model", str(tmp_path / "no_pose")]
    garbage = tmp_path / "garbage.mp4"
    garbage.write_bytes(b"not a video " * 20)
    res = runner.invoke(app, ["extract", str(tmp_path / "missing.mp4"), str(garbage), "--out",
                              str(tmp_path / "out"), *bad_models, "--no-progress"])  # fmt: skip
    assert res.exit_code == 1
    assert (
        "missing.mp4: does not exist" in res.stderr
        and "garbage.mp4: could not be opened" in res.stderr
    )
    assert "none of the 2 video(s) can be read" in res.stderr and "no_det" not in res.output
    (tmp_path / "afile").write_text("x")
    res = runner.invoke(app, ["extract", str(small_video), "--out", str(tmp_path / "afile")])
    flat = " ".join(res.output.replace("│", " ").split())  # typer's error box wraps lines
    assert res.exit_code == 2 and "is a file, expected a folder" in flat
    # one readable video: the run goes on to the models (and names the missing folder)
    res = runner.invoke(app, ["extract", str(small_video), str(garbage), "--out", str(tmp_path / "out"),
                              *bad_models, "--no-progress"])  # fmt: skip
    assert res.exit_code == 1 and "garbage.mp4: could not be opened" in res.stderr
    assert f"detector '{tmp_path / 'no_det'}': no such folder" in res.stderr
    assert all(h in res.stderr for h in OFFLINE_HINTS)


def test_extract_offline_without_cached_weights_fails_at_once(tmp_path, small_video, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty_cache"))
    res = CliRunner().invoke(
        app, ["extract", str(small_video), "--out", str(tmp_path / "out"), "--no-progress"]
    )
    assert res.exit_code == 1
    assert "'PekingU/rtdetr_r50vd_coco_o365' is not in the Hugging Face cache" in res.stderr
    assert "HF_HUB_OFFLINE is set" in res.stderr and all(h in res.stderr for h in OFFLINE_HINTS)
    assert not (tmp_path / "out").exists()  # nothing loaded, nothing written


def _hub_cache(hub: Path, repo: str, model) -> None:
    """Put ``model`` into a Hugging Face cache as a download of ``repo`` would."""
    revision = "0" * 40
    d = hub / f"models--{repo.replace('/', '--')}"
    model.save_pretrained(d / "snapshots" / revision)
    (d / "refs").mkdir(parents=True)
    (d / "refs" / "main").write_text(revision)


@pytest.mark.slow
def test_extract_with_an_unreachable_hub_fails_fast_or_uses_the_cache(tmp_path, small_video):
    from test_video_models import TINY_POSE, tiny_detector_model
    from transformers import VitPoseForPoseEstimation

    from mimic2dm.video.pose import pose_config

    env = {
        k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    }
    env.update(
        HF_HOME=str(tmp_path / "hf"), HF_ENDPOINT="http://127.0.0.1:9"
    )  # nothing listens there

    def extract(*args: str) -> subprocess.CompletedProcess:
        cmd = [
            sys.executable,
            "-m",
            "mimic2dm.cli",
            "extract",
            str(small_video),
            "--no-progress",
            *args,
        ]
        return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)

    res = extract("--out", str(tmp_path / "a"))
    assert res.returncode == 1, res.stderr[-3000:]
    assert "Retrying" not in res.stderr  # huggingface_hub's ~30 s of back-off did not run
    assert "http://127.0.0.1:9 cannot be reached" in res.stderr
    assert all(h in res.stderr for h in OFFLINE_HINTS)
    torch.manual_seed(0)
    _hub_cache(tmp_path / "hf" / "hub", "test/tiny-det", tiny_detector_model())
    _hub_cache(
        tmp_path / "hf" / "hub",
        "test/tiny-pose",
        VitPoseForPoseEstimation(pose_config(**TINY_POSE)),
    )
    res = extract("--out", str(tmp_path / "b"), "--detector", "test/tiny-det", "--pose-model", "test/tiny-pose",
                  "--det-threshold", "0")  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Retrying" not in res.stderr and (tmp_path / "b" / "small.npz").is_file()
