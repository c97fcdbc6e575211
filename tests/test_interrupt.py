"""Ctrl-C during ``mimic2dm-train``: final checkpoint + summary, exit 130, no traceback, resume."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from rl_helpers import TINY, tiny_config, write_demo

from mimic2dm.train import compose_config, train
from mimic2dm.utils.checkpoint import load_checkpoint

ROOT = Path(__file__).resolve().parents[1]
# no periodic / best checkpoints in the way: only the stop writes one
RARE_SAVES = ["train.checkpoint.save_frequency=1000", "train.checkpoint.save_best_after=1000",
              "logger.tensorboard=false"]  # fmt: skip


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return write_demo(tmp_path_factory.mktemp("clip") / "demo.npz", seconds=1.5)


def test_request_stop_ends_at_the_epoch_with_a_checkpoint_that_resumes_exactly(tmp_path, clip):
    seen = []

    def stop_at_2(agent):
        seen.append(agent.epoch_num)
        if agent.epoch_num == 2:
            agent.request_stop()  # what the SIGINT handler does

    s = train(tiny_config(tmp_path / "cut", clip, "train.max_epochs=50", *RARE_SAVES),
              epoch_callback=stop_at_2)  # fmt: skip
    assert s["interrupted"] and s["epochs"] == 2 and seen == [1, 2]  # no extra epoch, no repeat
    assert [h["epoch"] for h in s["history"]] == [1, 2]
    ck = tmp_path / "cut" / "checkpoints"
    assert load_checkpoint(ck / "last.pt")["epoch"] == 2 and (ck / "step_000000002.pt").is_file()
    assert json.loads((tmp_path / "cut" / "summary.json").read_text())["interrupted"] is True
    # the stop point is an exact resume point: the same weights as a run that never stopped
    r = train(
        compose_config([f"resume={tmp_path / 'cut'}"]), resume_overrides=["train.max_epochs=4"]
    )
    assert r["resumed_from_epoch"] == 2 and r["epochs"] == 4 and not r["interrupted"]
    train(tiny_config(tmp_path / "straight", clip, "train.max_epochs=4", *RARE_SAVES))
    a = load_checkpoint(ck / "last.pt")["model"]
    b = load_checkpoint(tmp_path / "straight" / "checkpoints" / "last.pt")["model"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def _start(run: Path, *overrides: str) -> subprocess.Popen:
    # a session of its own, so that killpg reaches every process as a terminal's Ctrl-C does
    cmd = [sys.executable, "-m", "mimic2dm.train", f"hydra.run.dir={run}", *TINY,
           "data.clips.0.make.seconds=1.5", "train.max_epochs=100000", *overrides]  # fmt: skip
    env = {**os.environ, "WANDB_MODE": "offline"}
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)  # fmt: skip


def _wait_for_checkpoint(
    proc: subprocess.Popen, last: Path, epoch: int, timeout: float = 240
) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if last.is_file() and load_checkpoint(last)["epoch"] >= epoch:
            return int(load_checkpoint(last)["epoch"])
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"no checkpoint at epoch {epoch}: {proc.communicate()[1][-3000:]}")


def _session_processes(sid: int) -> list[str]:
    """Command lines of the live processes in session ``sid``."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid and fields[0] != "Z":
                out.append((stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except (OSError, IndexError, ValueError):
            continue
    return out


def _ctrl_c(proc: subprocess.Popen, timeout: float = 120) -> tuple[str, str]:
    os.killpg(proc.pid, signal.SIGINT)
    try:
        return proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.mark.slow
def test_ctrl_c_saves_a_final_checkpoint_and_the_summary_then_resume_continues(tmp_path):
    run = tmp_path / "run"
    last = run / "checkpoints" / "last.pt"
    proc = _start(run, "train.checkpoint.save_frequency=2", "train.checkpoint.save_best_after=1000",
                  "logger.tensorboard=false")  # fmt: skip
    e0 = _wait_for_checkpoint(proc, last, 2)  # the first periodic checkpoint
    out, err = _ctrl_c(proc)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err + out, err[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    epoch = load_checkpoint(last)["epoch"]
    # the epoch in progress at the signal was finished and saved: newer than the periodic one
    assert summary["interrupted"] and summary["epochs"] == epoch > e0
    assert (run / "checkpoints" / f"step_{epoch:09d}.pt").is_file()
    assert "RunningMeanStd" not in out and "self.seed" not in out  # rl-games' prints: in the log
    assert "RunningMeanStd" in (run / "train.log").read_text()
    res = subprocess.run([sys.executable, "-m", "mimic2dm.train", f"resume={run}", f"train.max_epochs={epoch + 1}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=240,
                         env={**os.environ, "WANDB_MODE": "offline"})  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["resumed_from_epoch"] == epoch and summary["epochs"] == epoch + 1
    assert [h["epoch"] for h in summary["history"]] == [epoch + 1] and not summary["interrupted"]


@pytest.mark.slow
def test_ctrl_c_with_ray_actors_and_wandb_leaves_no_process_behind(tmp_path):
    run = tmp_path / "run"
    proc = _start(
        run, "ray=local", "ray.actor_cpus=0.5", "logger.wandb=true", "logger.tensorboard=false"
    )
    _wait_for_checkpoint(proc, run / "checkpoints" / "last.pt", 1)
    out, err = _ctrl_c(proc)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err + out, err[-3000:]
    assert json.loads((run / "summary.json").read_text())["interrupted"]
    debug = next((run / "wandb").glob("offline-run-*/logs/debug.log")).read_text()
    assert "finishing run" in debug  # wandb closed its run (resume continues it)
    deadline = time.monotonic() + 20
    while (left := _session_processes(proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, left  # Ray's cluster and actors, wandb's service: all gone


@pytest.mark.slow
def test_second_ctrl_c_stops_at_once_without_a_traceback(tmp_path):
    run = tmp_path / "run"
    last = run / "checkpoints" / "last.pt"
    # long epochs (4096 samples), so that the second Ctrl-C comes while one is running
    proc = _start(
        run, "train.horizon_length=512", *RARE_SAVES[1:], "train.checkpoint.save_frequency=1"
    )
    e0 = _wait_for_checkpoint(proc, last, 1)
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(0.3)
    out, err = _ctrl_c(proc)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err + out, err[-3000:]
    assert load_checkpoint(last)["epoch"] >= e0  # a whole checkpoint, whenever the stop came
