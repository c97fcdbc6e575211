"""A user's own video, end to end on a short clip (README "Your own videos"):
``data strip`` (the clip as a video gives it) -> training refuses it -> ``preprocess`` ->
``mimic2dm-train data=files 'data.clips=[PATH]' task.initial_state=auto`` -> ``eval``.

The clip is the shared CMU walk projected to one static view (``data synth``), or, where
the shared mocap is absent, the project's own demo clip; its 3D ground truth only scores
preprocessing (``--gt``)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

from rl_helpers import TINY, write_demo
from typer.testing import CliRunner

from mimic2dm.cli import app
from mimic2dm.motion.format import load_motion2d
from mimic2dm.utils.checkpoint import load_checkpoint
from mimic2dm.utils.paths import mocap_dir

ROOT = Path(__file__).resolve().parents[1]
MOCAP = mocap_dir()
REPROJECTION_BOUND_PX = 5.0
"""The issue's reprojection target (measured: about 1.4 px on both clips)."""
MPJPE_BOUND_MM = 150.0
"""Loose: few heading hypotheses and iterations (measured: 58-67 mm)."""
EPOCHS = 3
runner = CliRunner()


def _cli(*args: str) -> str:
    res = runner.invoke(app, [str(a) for a in args])
    text = res.output + (res.stderr if res.stderr_bytes is not None else "")
    assert res.exit_code == 0, text
    return text


def _train(run: Path, clip: Path, *overrides: str) -> subprocess.CompletedProcess:
    """``mimic2dm-train`` (the Hydra app) on one clip given as a plain path."""
    cmd = [sys.executable, "-m", "mimic2dm.train", f"hydra.run.dir={run}", "data=files",
           f"data.clips=[{clip}]", *TINY, "logger.tensorboard=false", *overrides]  # fmt: skip
    env = {**os.environ, "WANDB_MODE": "offline"}
    env.pop("HYDRA_FULL_ERROR", None)  # config errors as one line, as a user sees them
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)


def test_strip_preprocess_train_eval(tmp_path):
    gt, video, pre = tmp_path / "gt.npz", tmp_path / "video.npz", tmp_path / "pre"
    if (MOCAP / "cmu_walk.npz").is_file():
        _cli("data", "synth", MOCAP / "cmu_walk.npz", "--out", gt, "--fps", "30")
    else:
        write_demo(gt, seconds=2.5)
    _cli("data", "strip", gt, "--out", video)

    # a clip without cameras: training stops at start-up in one line that says what to run
    res = _train(tmp_path / "refused", video, "train.max_epochs=1")
    assert res.returncode == 1 and "mimic2dm preprocess" in res.stderr, res.stderr[-2000:]
    assert res.stderr.strip().splitlines()[-1].startswith(f"error: data.clips[0].file='{video}'")
    assert "Traceback" not in res.stderr + res.stdout and not (tmp_path / "refused").exists()

    report = tmp_path / "report.json"
    _cli("preprocess", video, "--character", "humanoid", "--out", pre, "--gt", gt, "--json", report,
         "--headings", "2", "--iters", "20", "--threads", "1", "--no-progress")  # fmt: skip
    r = json.loads(report.read_text())["clips"][0]
    assert r["reprojection_px"] <= REPROJECTION_BOUND_PX, r
    assert r["mpjpe_mm"] <= MPJPE_BOUND_MM, r
    clip = pre / "video.npz"
    est = load_motion2d(clip)
    assert est.has_cameras and est.has_initial_states and est.init_character == "humanoid"

    run = tmp_path / "run"
    res = _train(run, clip, "task.initial_state=auto", f"train.max_epochs={EPOCHS}")
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    last = run / "checkpoints" / "last.pt"
    assert last.is_file() and load_checkpoint(last)["epoch"] == EPOCHS
    summary = json.loads((run / "summary.json").read_text())
    assert summary["epochs"] == EPOCHS and summary["frames"] > 0

    out = tmp_path / "eval.json"
    _cli("eval", last, "--data", clip, "--json", out)
    ev = json.loads(out.read_text())
    # the default is default_pose: "preprocessed" shows that the run's auto reached the clip's states
    assert ev["initial_state"] == "preprocessed"
    (seq,) = ev["sequences"]
    assert seq["initial_state"] == "preprocessed" and seq["clip"] == "video"
    for key in ("error_2d_px", "max_error_2d_px", "jitter", "foot_skating_m_s",
                "ground_penetration_mm", "floating_mm"):  # fmt: skip
        assert math.isfinite(ev[key]) and ev[key] >= 0, (key, ev[key])
    assert 0.0 <= ev["success_rate"] <= 1.0
    assert "mpjpe_mm" not in seq  # MPJPE needs ground truth, which preprocessing never writes
