"""Hydra launcher and sweeper plugins of the default set-up: 2-job sweeps of ``mimic2dm-train``
through ``submitit_local``, through the Ray launcher (in-process Ray, and the project's
``ray_cluster`` preset joining a head + worker started with ``ray start``), and a 2-trial Optuna
search (``hydra/sweeper=tracker_optuna``) minimising the eval metric the app returns."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf
from ray_nodes import TwoNodes
from rl_helpers import TINY, ray_tmp

from mimic2dm.utils.checkpoint import load_checkpoint

ROOT = Path(__file__).resolve().parents[1]
SWEEP = [*TINY, "data.clips.0.make.seconds=1.5", "train.max_epochs=1", "logger.tensorboard=false",
         "logger.video_every=0", "seed=0,1"]  # fmt: skip


def sweep(
    sweep_dir: Path, *launcher: str, env: dict | None = None, args=SWEEP
) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "mimic2dm.train", "-m", f"hydra.sweep.dir={sweep_dir}",
           *launcher, *args]  # fmt: skip
    env = {**(env or os.environ), "WANDB_MODE": "offline"}
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=400, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res


def assert_two_finished_jobs(sweep_dir: Path) -> None:
    for job, seed in (("0", 0), ("1", 1)):
        run = sweep_dir / job
        assert yaml.safe_load((run / "config.yaml").read_text())["seed"] == seed
        assert json.loads((run / "summary.json").read_text())["epochs"] == 1
        assert load_checkpoint(run / "checkpoints" / "last.pt")["epoch"] == 1


def test_submitit_local_sweep_runs_both_jobs(tmp_path):
    res = sweep(tmp_path / "sweep", "hydra/launcher=submitit_local")
    assert "Submitit 'local' sweep output dir" in res.stdout + res.stderr
    assert_two_finished_jobs(tmp_path / "sweep")
    # each job ran as its own submitit process, with its own log
    logs = list((tmp_path / "sweep" / ".submitit").glob("*/*_0_log.out"))
    assert len(logs) == 2


@pytest.mark.slow
def test_ray_launcher_sweep_on_a_local_cluster(tmp_path):
    res = sweep(tmp_path / "sweep", "hydra/launcher=ray", "+hydra.launcher.ray.init.num_cpus=2",
                f"+hydra.launcher.ray.init._temp_dir={ray_tmp()}_hydra",
                "+hydra.launcher.ray.init.include_dashboard=false")  # fmt: skip
    assert "Ray Launcher is launching 2 jobs" in res.stdout + res.stderr
    assert_two_finished_jobs(tmp_path / "sweep")


@pytest.mark.slow
def test_ray_cluster_preset_spreads_a_sweep_over_two_ray_start_nodes(tmp_path, monkeypatch):
    """The ``ray_cluster`` preset joins a running cluster by address (token auth, no
    object_store_memory): with one CPU per node and per job, the 2 jobs run on both nodes."""
    from ray._raylet import Config
    from ray.util.state import list_tasks

    # this process queries the cluster's state too; Ray caches its config (auth mode included)
    # on first use, e.g. by an earlier test of the session: re-read it
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    Config.initialize("")

    cluster = TwoNodes(tmp_path, head_cpus=1, worker_cpus=1)
    try:
        res = sweep(tmp_path / "sweep", "hydra/launcher=ray_cluster",
                    f"hydra.launcher.ray.init.address={cluster.gcs}", env=cluster.env)  # fmt: skip
        assert f"'address': '{cluster.gcs}'" in res.stdout + res.stderr
        assert_two_finished_jobs(tmp_path / "sweep")
        jobs = [t for t in list_tasks(address=cluster.address, timeout=30) if t.name == "_run_job"]
        assert len(jobs) == 2 and {t.state for t in jobs} == {"FINISHED"}
        assert {t.node_id for t in jobs} == {cluster.node_id("head"), cluster.node_id("worker")}
    finally:
        cluster.close()


@pytest.mark.slow
def test_optuna_sweep_minimises_the_last_eval_error(tmp_path):
    """2 TPE trials over the preset's reward / PPO space (minibatch and mini-epochs fixed by the
    tiny config): each returns its last ``eval/error_2d_px``, the best lands in the results."""
    args = [
        a for a in SWEEP if not a.startswith(("seed=", "logger.video_every", "train.max_epochs"))
    ]
    res = sweep(tmp_path / "sweep", "hydra/sweeper=tracker_optuna", "hydra.sweeper.n_trials=2",
                "train.max_epochs=2", "logger.video_every=2", args=args)  # fmt: skip
    assert "Sampler: TPESampler" in res.stdout + res.stderr
    errors, lrs = [], set()
    for job in ("0", "1"):
        run = tmp_path / "sweep" / job
        summary = json.loads((run / "summary.json").read_text())
        assert summary["epochs"] == 2
        errors.append(summary["history"][-1]["eval/error_2d_px"])
        lrs.add(yaml.safe_load((run / "config.yaml").read_text())["train"]["learning_rate"])
    assert len(lrs) == 2  # sampled, not the default 2e-4 twice
    results = yaml.safe_load((tmp_path / "sweep" / "optimization_results.yaml").read_text())
    assert results["best_value"] == pytest.approx(min(errors))
    assert set(results["best_params"]) >= {
        "task.reward.scales.pos",
        "train.learning_rate",
        "train.gamma",
    }
    assert "train.minibatch_size" not in results["best_params"]  # fixed on the command line


def test_project_presets_compose_onto_the_plugins_configs():
    from hydra import compose, initialize_config_dir

    from mimic2dm.train import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        slurm = compose("tracker", ["hydra/launcher=slurm", "hydra.launcher.partition=gpu"],
                        return_hydra_config=True).hydra.launcher  # fmt: skip
        ray = compose("tracker", ["hydra/launcher=ray_cluster"], return_hydra_config=True)
        optuna = compose("tracker", ["hydra/sweeper=tracker_optuna"], return_hydra_config=True)
    assert slurm._target_.endswith("SlurmLauncher") and slurm.partition == "gpu"
    assert slurm.cpus_per_task == 16 and slurm.timeout_min == 1440
    init = ray.hydra.launcher.ray.init
    assert ray.hydra.launcher._target_.endswith("RayLauncher")
    assert "object_store_memory" in init and init.object_store_memory is None
    sw = optuna.hydra.sweeper
    assert sw._target_.endswith("OptunaSweeper") and str(sw.direction) == "minimize"
    assert sw.sampler._target_ == "optuna.samplers.TPESampler" and sw.sampler.seed == 0
    # every searched key exists in the tracker config
    for key in sw.params:
        assert OmegaConf.select(optuna, key) is not None, key
    assert optuna.objective == "eval/error_2d_px"
