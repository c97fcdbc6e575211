"""Start-up validation: range checks, one-line errors without a traceback, no run dir left behind."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from rl_helpers import tiny_config, write_demo
from typer.testing import CliRunner

from mimic2dm.motion.format import (
    MIN_CONTROL_FRAMES,
    Motion2D,
    MotionFormatError,
    load_motion2d,
    save_motion2d,
)
from mimic2dm.utils.validate import (
    ConfigError,
    check,
    check_choice,
    check_device,
    exit_on_config_error,
)

ROOT = Path(__file__).resolve().parents[1]


def run_train(*args: str, env: dict | None = None, cwd: Path = ROOT, timeout: int = 240):
    full_env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    full_env.update({"WANDB_MODE": "offline", **(env or {})})
    return subprocess.run([sys.executable, "-m", "mimic2dm.train", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def clip_with(path: Path, frames: int | None = None, masked: bool = False) -> Path:
    """The demo clip cut to ``frames`` frames, or with every keypoint masked."""
    m = load_motion2d(write_demo(path, seconds=1.0))
    kw = dict(vars(m))
    if frames is not None:
        for k in ("keypoints", "confidence", "camera_R", "camera_t", "camera_intrinsics"):
            if kw[k] is not None and kw[k].shape[1] == m.num_frames:
                kw[k] = kw[k][:, :frames]
        kw["keypoints3d"] = None if m.keypoints3d is None else m.keypoints3d[:frames]
    if masked:
        kw["confidence"] = np.zeros_like(m.confidence)
    save_motion2d(Motion2D(**kw), path)
    return path


# ----------------------------------------------------------------------------- the helper
def test_check_ranges_and_messages():
    assert check("a", 0.5, gt=0, le=1) == 0.5 and check("n", 3, ge=1, integer=True) == 3
    assert check("opt", None, gt=0, optional=True) is None
    cases = [
        (dict(value=0.0, gt=0), "k=0.0: expected a number > 0"),
        (dict(value=2.0, gt=0, le=1), "k=2.0: expected a number with 0 < x <= 1"),
        (dict(value=1.5, ge=1, integer=True), "k=1.5: expected an integer >= 1"),
        (dict(value=True, ge=0), "k=True: expected a number >= 0"),
        (dict(value=float("nan"), ge=0), "k=nan: expected a number >= 0"),
        (dict(value="3", ge=0), "k='3': expected a number >= 0"),
        (dict(value=None, lt=1), "k=None: expected a number < 1"),
    ]
    for kw, msg in cases:
        with pytest.raises(ConfigError) as ei:
            check("k", **kw)
        assert str(ei.value) == msg and ei.value.key == "k"
    with pytest.raises(ConfigError, match="^mode='x': expected one of a, b$"):
        check_choice("mode", "x", ("a", "b"))
    assert isinstance(ConfigError("k", 1, "x"), ValueError)  # callers catching ValueError still do


def test_devices():
    import torch

    assert check_device("d", "cpu") == "cpu"
    with pytest.raises(ConfigError, match="d='tpu9': expected a torch device"):
        check_device("d", "tpu9")
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if n == 0:
        with pytest.raises(ConfigError, match="no CUDA GPU"):
            check_device("d", "cuda")
    else:
        assert check_device("d", "cuda:0") == "cuda:0"
        with pytest.raises(ConfigError, match=f"cuda:{n - 1}"):
            check_device("d", f"cuda:{n}")


def test_exit_on_config_error(capsys, monkeypatch):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    with pytest.raises(SystemExit) as ei, exit_on_config_error():
        check("train.gamma", 2.0, gt=0, le=1)
    assert ei.value.code == 1
    assert capsys.readouterr().err == "error: train.gamma=2.0: expected a number with 0 < x <= 1\n"
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")
    with pytest.raises(ConfigError), exit_on_config_error():
        check("train.gamma", 2.0, gt=0, le=1)


# ----------------------------------------------------------------------------- the train app
@pytest.mark.parametrize(
    "override, message",
    [
        ("train.learning_rate=-1", "error: train.learning_rate=-1.0: expected a number > 0"),
        ("engine.physics_hz=0", "error: engine.physics_hz=0.0: expected a number > 0"),
        ("train.minibatch_size=500", "error: train.minibatch_size=500: expected a divisor of"),
    ],
)
def test_bad_value_exits_1_with_one_line_and_no_run_dir(tmp_path, override, message):
    run = tmp_path / "run"
    res = run_train(f"hydra.run.dir={run}", override, "progress=false", cwd=tmp_path)
    assert res.returncode == 1
    assert res.stderr.strip().splitlines()[-1].startswith(message), res.stderr
    assert "Traceback" not in res.stderr + res.stdout
    assert not run.exists()  # Hydra's .hydra/ and log are removed with the dir


def test_multirun_leaves_no_sweep_dir(tmp_path):
    sweep = tmp_path / "sweep"
    res = run_train("-m", f"hydra.sweep.dir={sweep}", "seed=0,1", "train.gamma=2.0", cwd=tmp_path)
    assert (
        res.returncode == 1
        and "error: train.gamma=2.0: expected a number with 0 < x <= 1" in res.stderr
    )
    assert not sweep.exists()


def test_full_error_shows_the_traceback(tmp_path):
    run = tmp_path / "run"
    res = run_train(f"hydra.run.dir={run}", "task.asi.temperature=0", env={"HYDRA_FULL_ERROR": "1"})
    assert res.returncode == 1 and "Traceback" in res.stderr
    assert "ConfigError: task.asi.temperature=0.0: expected a number > 0" in res.stderr
    assert not run.exists()


def test_resume_dir_is_never_touched(tmp_path):
    from mimic2dm.train import compose_config
    from mimic2dm.utils.run_logging import save_resolved_config

    run = tmp_path / "old_run"
    save_resolved_config(compose_config(["progress=false", f"run_dir={run}"]), run)
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "last.pt").write_bytes(b"keep me")
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    res = run_train(f"resume={run}", "train.learning_rate=-1", cwd=tmp_path)
    assert res.returncode == 1 and "error: train.learning_rate=-1.0" in res.stderr
    after = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert all(after.get(p) == b for p, b in before.items())  # nothing removed or changed


# ----------------------------------------------------------------------------- clips
@pytest.mark.parametrize("frames, masked", [(MIN_CONTROL_FRAMES - 1, False), (None, True)])
def test_training_refuses_untrackable_clips_before_creating_the_run(tmp_path, frames, masked):
    from mimic2dm.train import train

    clip = clip_with(tmp_path / "clip.npz", frames, masked)
    run = tmp_path / "run"
    expected = (f"expected >= {MIN_CONTROL_FRAMES} frames at 30 Hz" if frames
                else re.escape("masks every keypoint of view(s) [0]"))  # fmt: skip
    with pytest.raises(MotionFormatError, match=expected) as ei:
        train(tiny_config(run, clip, "train.max_epochs=1"))
    assert str(clip) in str(ei.value) and not run.exists()


def test_training_refuses_a_clip_without_cameras_in_one_line(tmp_path):
    """A video clip (``data strip``) given as a plain path: exit 1, one line naming
    ``data.clips[0].file`` and ``mimic2dm preprocess``, no traceback, no run dir."""
    from mimic2dm.preprocess.clipio import strip_clip

    clip = tmp_path / "video.npz"
    save_motion2d(strip_clip(load_motion2d(write_demo(tmp_path / "gt.npz", seconds=1.0))), clip)
    run = tmp_path / "run"
    res = run_train(f"hydra.run.dir={run}", "data=files", f"data.clips=[{clip}]", "progress=false",
                    "logger.wandb=false", cwd=tmp_path)  # fmt: skip
    assert res.returncode == 1, res.stderr[-2000:]
    lines = res.stderr.strip().splitlines()
    assert lines[-1].startswith(
        f"error: data.clips[0].file='{clip}': expected a clip with cameras"
    ), res.stderr
    assert "`mimic2dm preprocess`" in lines[-1] and len([ln for ln in lines if "error" in ln]) == 1
    assert "Traceback" not in res.stderr + res.stdout
    assert not run.exists()


def test_clip_checks_follow_the_task(tmp_path):
    """``check_data_files`` asks the task (``TaskEntry.check_data``): tracking2d and dribble need
    cameras and a 2D clip; tracking3d takes a Motion3D (or a 2D clip's ground-truth 3D)."""
    from omegaconf import OmegaConf

    from mimic2dm.app.runspec import check_data_files
    from mimic2dm.characters import load_character
    from mimic2dm.motion.format import Motion3D, save_motion3d
    from mimic2dm.preprocess.clipio import strip_clip

    gt = write_demo(tmp_path / "gt.npz", seconds=1.0)
    video = tmp_path / "video.npz"
    save_motion2d(strip_clip(load_motion2d(gt)), video)
    m3 = tmp_path / "m3.npz"
    pose, n = load_character("humanoid").default_pose, 20
    rep = lambda x: np.repeat(np.asarray(x, dtype=float)[None], n, 0)  # noqa: E731
    save_motion3d(Motion3D("humanoid", 30.0, rep(pose.root_pos), rep(pose.root_quat),
                           np.zeros((n, load_character("humanoid").num_dof))), m3)  # fmt: skip

    def check(task: str, clip: Path) -> None:
        check_data_files(
            OmegaConf.create({"task": {"name": task}, "data": {"clips": [str(clip)]}}), 30.0
        )

    for task in ("tracking2d", "dribble"):
        check(task, gt)
        with pytest.raises(
            ConfigError, match=re.escape("data.clips[0].file=") + ".*mimic2dm preprocess"
        ):
            check(task, video)
        with pytest.raises(ConfigError, match="a Motion3D is tracked by task=tracking3d"):
            check(task, m3)
    check("tracking3d", m3)  # a 3D reference is read as one (not refused as a bad Motion2D)
    check("tracking3d", gt)


def test_eval_refuses_short_clips_and_zero_views(tmp_path):
    from mimic2dm.tasks.tracking2d.reference import ReferenceLibrary

    from mimic2dm.cli import app

    clip = clip_with(tmp_path / "clip.npz", frames=2)
    # eval (and the envs) load their clips through this, before any engine exists
    with pytest.raises(MotionFormatError, match=f"{clip}: field 'keypoints' has 2 frame"):
        ReferenceLibrary.from_files([clip], control_hz=30.0)
    assert ReferenceLibrary.from_files([clip], control_hz=60.0).clips[0].num_frames == 3
    res = CliRunner().invoke(app, ["eval", "x.pt", "--data", str(clip), "--views", "0"])
    assert res.exit_code == 2 and "--views" in res.output and "view counts >= 1" in res.output
    assert "Traceback" not in res.output


@pytest.mark.slow
def test_small_num_envs_train_with_a_clamped_minibatch(tmp_path):
    """``-m seed=0,1 train.num_envs=8``: batch 32 x 8 = 256 < minibatch 512 is clamped, not an error."""
    sweep = tmp_path / "sweep"
    res = run_train("-m", f"hydra.sweep.dir={sweep}", "seed=0,1", "train.num_envs=8", "train.max_epochs=1",
                    "data.clips.0.make.seconds=1.5", "logger.wandb=false", "logger.tensorboard=false",
                    "progress=false", "logger.video_every=0", cwd=tmp_path, timeout=400)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    for job in ("0", "1"):
        summary = json.loads((sweep / job / "summary.json").read_text())
        assert summary["epochs"] == 1 and summary["frames"] == 32 * 8
    logs = res.stdout + res.stderr + "".join(p.read_text() for p in sweep.glob("0/*.log"))
    assert "using minibatches of 256" in logs
