"""Run directories of the generator apps (tokenizer shown; generator and FID share
``generators/runs.py``): SIGTERM saves and exits 143, one writer, no silent reuse,
resume errors as one line creating nothing, full disks as one line."""

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from generator_helpers import MOCAP, TINY, needs_mocap, run_main
from mimic2dm.generators import train_tokenizer

from mimic2dm.utils.checkpoint import load_checkpoint
from mimic2dm.utils.rundir import LOCK_NAME

pytestmark = needs_mocap
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_torch_thread):
    """Small models: one torch thread is faster than two on shared cores."""


@pytest.fixture(scope="module")
def args(tmp_path_factory):
    d = tmp_path_factory.mktemp("gen_data")
    return [f"gen_data.dir={d}/train", f"gen_data.heldout_dir={d}/heldout", "gen_data.build.clips=[cmu_walk]",
            "gen_data.build.pairs=1", "gen_data.build.heldout_pairs=1", f"gen_data.build.mocap_dir={MOCAP}",
            "logger.wandb=false", "logger.tensorboard=false", "threads=1", "model.width=32", *TINY]  # fmt: skip


def fails_with_one_line(capsys, argv: list[str]) -> str:
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        run_main(train_tokenizer, argv)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert e.value.code == 1 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_a_reused_run_dir_is_refused_unless_overwrite(args, tmp_path, capsys):
    run = tmp_path / "tok"
    run_main(train_tokenizer, [*args, f"run_dir={run}", "train.max_steps=9"])
    line = fails_with_one_line(capsys, [*args, f"run_dir={run}"])
    assert "already holds a run" in line and "overwrite=true" in line
    run_main(train_tokenizer, [*args, f"run_dir={run}", "overwrite=true"])
    assert json.loads((run / "metrics.json").read_text())["step"] == 6
    assert load_checkpoint(run / "checkpoints" / "last.pt")["step"] == 6
    assert not (run / LOCK_NAME).exists()


def test_a_busy_run_dir_is_refused_naming_its_owner(args, tmp_path, capsys):
    run = tmp_path / "tok"
    run.mkdir()
    owner = subprocess.Popen(["sleep", "60"])
    try:
        (run / LOCK_NAME).write_text(json.dumps({"pid": owner.pid, "host": socket.gethostname()}))
        line = fails_with_one_line(capsys, [*args, f"run_dir={run}"])
        assert f"in use by pid {owner.pid} on host {socket.gethostname()}" in line
        assert sorted(p.name for p in run.iterdir()) == [LOCK_NAME]
    finally:
        owner.kill()
        owner.wait()


def test_resume_of_a_missing_run_is_one_line_and_creates_nothing(args, tmp_path, capsys):
    line = fails_with_one_line(capsys, [*args, f"resume={tmp_path / 'typo'}"])
    assert "checkpoints/last.pt" in line and not (tmp_path / "typo").exists()


def test_a_full_disk_is_one_line_naming_the_path(args, tmp_path, capsys, monkeypatch):
    import torch

    real = torch.save

    def save(obj, f, *a, **kw):
        if isinstance(obj, dict) and obj.get("step", 0) >= 6:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(obj, f, *a, **kw)

    monkeypatch.setattr("mimic2dm.utils.checkpoint.torch.save", save)
    run = tmp_path / "tok"
    line = fails_with_one_line(capsys, [*args, f"run_dir={run}"])
    assert "[Errno 28] No space left on device" in line and str(run / "checkpoints") in line
    assert f"the last whole checkpoint is {run / 'checkpoints' / 'last.pt'}" in line
    assert load_checkpoint(run / "checkpoints" / "last.pt")["step"] == 3


def test_sigterm_checkpoints_and_exits_143_then_resume_continues(args, tmp_path):
    run = tmp_path / "tok"
    run_main(train_tokenizer, [*args, f"run_dir={tmp_path / 'warm'}"])  # builds the data once
    cmd = [sys.executable, "-m", "mimic2dm.generators.train_tokenizer", *args, f"run_dir={run}",
           "train.max_steps=1000000", "train.ckpt_every=2", "train.eval_every=1000000"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "WANDB_MODE": "offline"})  # fmt: skip
    last = run / "checkpoints" / "last.pt"
    deadline = time.monotonic() + 180
    while not last.is_file():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(proc.communicate()[1][-3000:])
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    step = load_checkpoint(last)["step"]
    assert step >= 2 and not (run / LOCK_NAME).exists()
    run_main(train_tokenizer, [*args, f"resume={run}", f"train.max_steps={step + 2}"])
    assert json.loads((run / "metrics.json").read_text())["step"] == step + 2


def test_clips_mixing_keypoint_sets_are_refused_before_config_tb_and_wandb(tmp_path, capsys):
    from mimic2dm.app.data import MAKERS

    clips = tmp_path / "clips"
    clips.mkdir()
    for name, mocap in (("a_walk", "cmu_walk"), ("b_dog", "dog_trot")):
        MAKERS["synth"](clips / f"{name}.npz", {"mocap": str(MOCAP / f"{mocap}.npz"), "seconds": 2.0,
                                                 "views": 1, "camera": "static", "fps": 30.0})  # fmt: skip
    run = tmp_path / "tok"
    argv = [f"gen_data.dir={clips}", "gen_data.heldout_dir=null", "gen_data.build=null", "logger.wandb=true",
            "threads=1", "model.width=32", *TINY, f"run_dir={run}"]  # fmt: skip
    line = fails_with_one_line(capsys, argv)
    assert "keypoint_set" in line and "b_dog.npz" in line
    assert not any((run / n).exists() for n in ("config.yaml", "tb", "wandb", "checkpoints"))
