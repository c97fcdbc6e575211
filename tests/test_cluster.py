"""`cluster/ray_local.sh`: a Ray head started on its own, and training that joins it by address."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from rl_helpers import TINY

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_training_joins_an_existing_ray_cluster_by_address(tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "RAY_PORT": str(free_port()),
           "RAY_CPUS": "2", "WANDB_MODE": "offline"}  # fmt: skip
    res = subprocess.run(
        ["bash", "cluster/ray_local.sh", f"run_dir={run}", *TINY, "train.max_epochs=2", "ray.num_actors=2",
         "ray.actor_cpus=0.5", "data.clips.0.make.seconds=1.5"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["epochs"] == 2 and summary["actor_restarts"] == 0
    assert (run / "config.yaml").read_text().count("address: 127.0.0.1:") == 1
