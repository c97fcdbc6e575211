"""``mimic2dm-train`` as users run it: Hydra app, multirun, logs and checkpoints, SIGKILL + resume."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml
from rl_helpers import TINY

from mimic2dm.utils.checkpoint import load_checkpoint

ROOT = Path(__file__).resolve().parents[1]
SHORT_DEMO = ["data.clips.0.make.seconds=1.5"]


def run_app(*args: str, env: dict | None = None, timeout: int = 240) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "mimic2dm.train", *args]
    full_env = {**os.environ, "WANDB_MODE": "offline", **(env or {})}
    res = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=full_env
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res


def test_app_writes_config_checkpoints_tensorboard_and_offline_wandb(tmp_path):
    run = tmp_path / "run"
    run_app(f"hydra.run.dir={run}", *TINY, *SHORT_DEMO, "train.max_epochs=2", "logger.wandb=true")
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert (
        cfg["train"]["max_epochs"] == 2
        and cfg["run_dir"] == str(run)
        and cfg["character"]["name"] == "humanoid"
    )
    assert (run / "data" / "demo_clip.npz").is_file()  # data=demo made the clip in the run dir
    ck = run / "checkpoints"
    assert {"last.pt", "best.pt", "step_000000002.pt"} <= {p.name for p in ck.iterdir()}
    assert load_checkpoint(ck / "last.pt")["epoch"] == 2
    assert list((run / "tb").glob("events.out.tfevents.*"))
    assert list((run / "wandb").glob("offline-run-*"))
    summary = json.loads((run / "summary.json").read_text())
    assert summary["epochs"] == 2 and summary["frames"] == 2 * 8 * 8
    assert {
        "reward/total",
        "episode/length",
        "asi/scored_fraction",
        "perf/samples_per_s",
        "rl/losses/a_loss",
    } <= set(summary["history"][-1])


def test_multirun_with_the_basic_launcher(tmp_path):
    sweep = tmp_path / "sweep"
    run_app(
        "-m",
        f"hydra.sweep.dir={sweep}",
        "seed=0,1",
        *TINY,
        *SHORT_DEMO,
        "train.max_epochs=1",
        "logger.tensorboard=false",
    )
    for job, seed in (("0", 0), ("1", 1)):
        assert yaml.safe_load((sweep / job / "config.yaml").read_text())["seed"] == seed
        assert json.loads((sweep / job / "summary.json").read_text())["epochs"] == 1
        assert (sweep / job / "checkpoints" / "last.pt").is_file()


def test_sigkill_mid_run_then_resume_continues_the_counters(tmp_path):
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "mimic2dm.train", f"hydra.run.dir={run}", *TINY, *SHORT_DEMO,
           "train.max_epochs=100000", "logger.tensorboard=false"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    last = run / "checkpoints" / "last.pt"
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            if last.is_file() and load_checkpoint(last)["epoch"] >= 3:
                break
            time.sleep(0.5)
        assert proc.poll() is None, "training ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    epoch = load_checkpoint(last)[
        "epoch"
    ]  # the atomic writes leave a whole last.pt whenever the kill came
    assert epoch >= 3
    run_app(f"resume={run}", f"train.max_epochs={epoch + 2}")
    summary = json.loads((run / "summary.json").read_text())
    assert summary["resumed_from_epoch"] == epoch and summary["epochs"] == epoch + 2
    assert [h["epoch"] for h in summary["history"]] == [epoch + 1, epoch + 2]
    ck = load_checkpoint(last)
    assert ck["epoch"] == epoch + 2 and ck["frame"] == (epoch + 2) * 8 * 8
