"""Run directories of ``mimic2dm-train`` that cannot be lost or mixed: SIGTERM saves and
exits 143, one writer per directory, no silent reuse, resume checks before anything is
written, full disks and unwritable places as one line, data checks before the run dir."""

import errno
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rl_helpers import TINY, tiny_config, write_demo

from mimic2dm.train import compose_config, train
from mimic2dm.utils.checkpoint import atomic_torch_save, load_checkpoint
from mimic2dm.utils.paths import mocap_dir
from mimic2dm.utils.run_logging import save_resolved_config
from mimic2dm.utils.rundir import LOCK_NAME, RunDirError

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "WANDB_MODE": "offline"}
QUIET = ["logger.tensorboard=false", "train.checkpoint.save_best_after=1000"]


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return write_demo(tmp_path_factory.mktemp("clip") / "demo.npz", seconds=1.5)


def run_train(*args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mimic2dm.train", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=ENV)  # fmt: skip


def one_error_line(res: subprocess.CompletedProcess) -> str:
    """The app's one ``error:`` line (and no traceback)."""
    assert res.returncode == 1, res.stderr[-3000:]
    assert "Traceback" not in res.stderr + res.stdout, res.stderr[-3000:]
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, res.stderr[-3000:]
    return lines[0]


def fake_run(run: Path, *overrides: str) -> Path:
    """A run directory as training leaves it (config.yaml + checkpoints/last.pt), without training."""
    save_resolved_config(
        compose_config(["progress=false", f"run_dir={run}", *TINY, *overrides]), run
    )
    atomic_torch_save({"epoch": 1}, run / "checkpoints" / "last.pt")
    return run


def tree(d: Path) -> dict:
    return {p: p.read_bytes() for p in d.rglob("*") if p.is_file()} if d.exists() else {}


# ----------------------------------------------------------------------------- SIGTERM
def _start(run: Path, *overrides: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "mimic2dm.train", f"hydra.run.dir={run}", *TINY, "data.clips.0.make.seconds=1.5",
           "train.max_epochs=100000", "train.checkpoint.save_frequency=2", *QUIET, *overrides]  # fmt: skip
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=ENV, start_new_session=True)  # fmt: skip


def _sigterm_after_first_checkpoint(run: Path, proc: subprocess.Popen) -> tuple[int, str]:
    last = run / "checkpoints" / "last.pt"
    deadline = time.monotonic() + 240
    while not (last.is_file() and load_checkpoint(last)["epoch"] >= 2):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(proc.communicate()[1][-3000:])
        time.sleep(0.2)
    e0 = load_checkpoint(last)["epoch"]
    os.kill(proc.pid, signal.SIGTERM)  # the main process only, as docker stop and ray job stop
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return e0, out + err


def _check_stopped_and_resume(run: Path, proc: subprocess.Popen, e0: int, err: str) -> None:
    assert proc.returncode == 143, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    epoch = load_checkpoint(run / "checkpoints" / "last.pt")["epoch"]  # whole: it loads
    summary = json.loads((run / "summary.json").read_text())
    assert (
        summary["interrupted"]
        and summary["signal"] == "SIGTERM"
        and summary["epochs"] == epoch >= e0
    )
    assert not (run / LOCK_NAME).exists()
    r = train(compose_config([f"resume={run}"]), resume_overrides=[f"train.max_epochs={epoch + 1}"])
    assert r["resumed_from_epoch"] == epoch and r["epochs"] == epoch + 1 and not r["interrupted"]


def test_sigterm_saves_the_epoch_prints_the_summary_and_exits_143(tmp_path):
    run = tmp_path / "run"
    proc = _start(run)
    e0, err = _sigterm_after_first_checkpoint(run, proc)
    _check_stopped_and_resume(run, proc, e0, err)
    assert "stopped by SIGTERM" in err and f"resume={run}" in err


@pytest.mark.slow
def test_sigterm_with_ray_actors_saves_and_exits_143(tmp_path):
    run = tmp_path / "run"
    proc = _start(run, "ray=local", "ray.actor_cpus=0.5", "ray.num_cpus=2")
    e0, err = _sigterm_after_first_checkpoint(run, proc)
    _check_stopped_and_resume(run, proc, e0, err)


# ----------------------------------------------------------------------------- one writer
def test_a_second_writer_is_refused_naming_the_lock_owner(tmp_path, clip):
    run = tmp_path / "run"
    run.mkdir()
    owner = subprocess.Popen(["sleep", "60"])  # a live process of this host holds the lock
    try:
        (run / LOCK_NAME).write_text(
            json.dumps({"pid": owner.pid, "host": socket.gethostname(), "started": "x"})
        )
        with pytest.raises(
            RunDirError, match=f"in use by pid {owner.pid} on host {socket.gethostname()}"
        ):
            train(tiny_config(run, clip, "train.max_epochs=1", *QUIET))
        line = one_error_line(run_train(f"hydra.run.dir={run}", *TINY, "train.max_epochs=1"))
        assert f"pid {owner.pid}" in line and socket.gethostname() in line
        assert sorted(p.name for p in run.iterdir()) == [LOCK_NAME]  # Hydra wrote nothing either
    finally:
        owner.kill()
        owner.wait()


def test_a_stale_lock_of_a_dead_process_is_taken_over(tmp_path, clip, caplog):
    run = tmp_path / "run"
    run.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    (run / LOCK_NAME).write_text(
        json.dumps({"pid": dead.pid, "host": socket.gethostname(), "started": "x"})
    )
    s = train(tiny_config(run, clip, "train.max_epochs=1", *QUIET))
    assert s["epochs"] == 1 and "taking over the stale lock" in caplog.text
    assert not (run / LOCK_NAME).exists()  # released at the end


# ----------------------------------------------------------------------------- no silent reuse
def test_a_new_run_refuses_a_directory_holding_a_run_unless_overwrite(tmp_path, clip):
    run = tmp_path / "run"
    train(tiny_config(run, clip, "train.max_epochs=5", "train.checkpoint.keep=3", *QUIET))
    ck = run / "checkpoints"
    assert sorted(p.name for p in ck.glob("step_*")) == [f"step_00000000{i}.pt" for i in (3, 4, 5)]
    with pytest.raises(RunDirError, match="already holds a run.*resume=.*overwrite=true"):
        train(tiny_config(run, clip, "train.max_epochs=2", *QUIET))
    line = one_error_line(run_train(f"hydra.run.dir={run}", *TINY, "train.max_epochs=2"))
    assert "already holds a run" in line and not (run / ".hydra").exists()
    s = train(tiny_config(run, clip, "train.max_epochs=2", "overwrite=true", *QUIET))
    assert s["epochs"] == 2 and len(s["history"]) == 2
    # only the new run's snapshots: none of the old run's epochs 3-5 survive to be mixed in
    assert sorted(p.name for p in ck.glob("step_*")) == ["step_000000001.pt", "step_000000002.pt"]
    assert load_checkpoint(ck / "last.pt")["epoch"] == 2


def test_the_demo_overwrites_its_own_run():
    from mimic2dm.demo import demo_config

    cfg = demo_config(Path("/tmp/demo_out"), minutes=1.0)
    assert cfg.overwrite is True and cfg.run_dir == "/tmp/demo_out/train"


# ----------------------------------------------------------------------------- resume checks
def test_resume_of_a_missing_directory_is_one_line_and_creates_nothing(tmp_path):
    missing = tmp_path / "typo"
    line = one_error_line(run_train(f"resume={missing}"))
    assert str(missing) in line and "no such run directory" in line
    assert not missing.exists()


def test_resume_without_a_checkpoint_is_one_line_and_changes_nothing(tmp_path):
    run = tmp_path / "run"
    save_resolved_config(compose_config(["progress=false", f"run_dir={run}"]), run)
    before = tree(run)
    line = one_error_line(run_train(f"resume={run}"))
    assert "no checkpoints/last.pt" in line and tree(run) == before


@pytest.mark.parametrize("override, key, values", [
    ("train.num_envs=16", "train.num_envs", "8 in .*, 16 given"),
    ("train.network.head_units=[64,64]", "train.network.head_units", r"\[32, 32\] in .*, \[64, 64\] given"),
    ("character.name=dog", "character.name", "humanoid in .*, dog given"),
    ("task.num_views=2", "task.num_views", "1 in .*, 2 given"),
])  # fmt: skip
def test_resume_refuses_shape_changes_naming_the_key_and_both_values(
    tmp_path, override, key, values
):
    import re

    run = fake_run(tmp_path / "run")
    before = tree(run)
    with pytest.raises(RunDirError, match=f"{re.escape(key)} cannot change on resume \\({values}"):
        train(compose_config([f"resume={run}"]), resume_overrides=[override])
    assert tree(run) == before  # config.yaml untouched


def test_resume_errors_are_one_line_without_a_traceback(tmp_path):
    run = fake_run(tmp_path / "run")
    before = tree(run)
    line = one_error_line(run_train(f"resume={run}", "train.num_envs=16"))
    assert "train.num_envs cannot change on resume (8 in" in line and "16 given" in line
    line = one_error_line(run_train(f"resume={run}", "character=dog"))
    assert "config group 'character' cannot change" in line
    assert tree(run) == before and not (run / ".hydra").exists()


# ----------------------------------------------------------------------------- disks
def test_a_full_disk_is_one_line_naming_the_path_and_the_resume_point(
    tmp_path, clip, monkeypatch, capsys
):
    import torch

    from mimic2dm.train import one_line_errors

    real = torch.save

    def save(obj, f, *a, **kw):  # the disk fills up after epoch 1's checkpoint
        if isinstance(obj, dict) and obj.get("epoch", 0) >= 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(obj, f, *a, **kw)

    monkeypatch.setattr("mimic2dm.utils.checkpoint.torch.save", save)
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as e, one_line_errors():
        train(
            tiny_config(
                run, clip, "train.max_epochs=4", "train.checkpoint.save_frequency=1", *QUIET
            )
        )
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 1 and len(err) == 1, err
    last = run / "checkpoints" / "last.pt"
    assert (
        "No space left on device" in err[0]
        and "[Errno 28]" in err[0]
        and str(run / "checkpoints") in err[0]
    )
    assert f"the last whole checkpoint is {last} (epoch 1)" in err[0] and f"resume={run}" in err[0]
    assert load_checkpoint(last)["epoch"] == 1 and not list((run / "checkpoints").glob(".*.tmp"))
    assert not (run / LOCK_NAME).exists()


def test_checkpoints_get_the_umask_mode_and_stale_temps_are_cleaned(tmp_path, clip, caplog):
    old = os.umask(0o022)
    try:
        atomic_torch_save({"w": 1}, tmp_path / "a.pt")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a.pt").stat().st_mode) == 0o644
    run = tmp_path / "run"
    train(tiny_config(run, clip, "train.max_epochs=1", *QUIET))
    stale = run / "checkpoints" / ".last.pt.k9x2.tmp"  # what a kill -9 mid-write leaves
    stale.write_bytes(b"half")
    train(compose_config([f"resume={run}"]), resume_overrides=["train.max_epochs=2"])
    assert not stale.exists() and "stale temporary file" in caplog.text


def test_an_unwritable_run_dir_is_one_line_naming_path_and_errno(tmp_path, clip):
    # tests run as root, where chmod 0555 does not stop writes: a path under a regular file does
    blocker = tmp_path / "file"
    blocker.write_text("x")
    line = one_error_line(run_train(f"hydra.run.dir={blocker}/run", *TINY))
    assert f"{blocker}/run" in line and "Not a directory" in line
    with pytest.raises(RunDirError, match="Not a directory"):
        train(tiny_config(blocker / "run2", clip, "train.max_epochs=1", *QUIET))


# ----------------------------------------------------------------------------- data checks first
@pytest.fixture(scope="module")
def dog_clip(tmp_path_factory):
    from mimic2dm.app.data import _make_synth

    out = tmp_path_factory.mktemp("dog") / "dog.npz"
    _make_synth(out, {"mocap": str(mocap_dir() / "dog_trot.npz"), "views": 1, "camera": "tracking",
                      "fps": 30.0, "seed": 0})  # fmt: skip
    return out


def test_a_clip_of_another_keypoint_set_is_refused_before_any_directory(tmp_path, dog_clip, clip):
    run = tmp_path / "run"
    line = one_error_line(
        run_train(f"hydra.run.dir={run}", *TINY, "data=files", f"data.clips=[{dog_clip}]")
    )
    assert "dog17" in line and "coco17" in line and str(dog_clip) in line
    assert not run.exists()
    # clips mixing keypoint sets, the second one named
    line = one_error_line(
        run_train(f"hydra.run.dir={run}", *TINY, "data=files", f"data.clips=[{clip},{dog_clip}]")
    )
    assert "data.clips[1].file" in line and not run.exists()


@pytest.mark.skipif(
    not (mocap_dir() / "dog_trot.npz").is_file(),
    reason=f"no dog clip dog_trot.npz at {mocap_dir()}",
)
def test_a_made_clip_is_checked_before_config_tb_and_wandb(tmp_path, dog_clip):
    from mimic2dm.utils.validate import ConfigError

    run = tmp_path / "run"
    cfg = compose_config(
        [
            f"run_dir={run}",
            *TINY,
            "logger.wandb=true",
            "data=dog_trot",
            "data.clips.0.make.seconds=2.0",
        ]
    )
    with pytest.raises(ConfigError, match="dog17 keypoints"):
        train(cfg)
    assert not any((run / n).exists() for n in ("config.yaml", "tb", "wandb", "checkpoints"))
