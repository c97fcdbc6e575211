"""`cluster/tb_curve.py`: a real run's TensorBoard scalars as a results curve."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rl_helpers import tiny_config, write_demo

ROOT = Path(__file__).resolve().parents[1]


def test_curve_of_a_real_run_and_a_clear_error_without_events(tmp_path, one_torch_thread):
    from mimic2dm.train import train

    clip = write_demo(tmp_path / "clip.npz", seconds=1.0)
    train(tiny_config(tmp_path / "run", clip, "train.max_epochs=3", "logger.video_every=0"))
    out = tmp_path / "curve.json"
    cmd = [sys.executable, str(ROOT / "cluster/tb_curve.py"), str(tmp_path / "run"), "--out", str(out),
           "--every", "2", "--command", "mimic2dm-train ..."]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    assert doc["run"] == "mimic2dm-train ..." and doc["x"] == "samples" and doc["every"] == 2
    steps = [s for s, _ in doc["episode/length"]]
    assert steps == [64, 192] and "reward/obj" not in doc  # 3 epochs of 64 samples: 1st, 3rd
    bad = subprocess.run([*cmd[:2], str(tmp_path), "--out", str(tmp_path / "x.json")],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert bad.returncode == 1 and "no TensorBoard events" in bad.stderr
    assert not (tmp_path / "x.json").exists()
