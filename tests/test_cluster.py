"""`cluster/ray_local.sh`: a Ray head started on its own, and training that joins it by address."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
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


def test_ray_up_config_passes_rays_schema():
    import yaml
    from ray.autoscaler._private.util import prepare_config, validate_config

    cfg = yaml.safe_load((ROOT / "cluster" / "ray_aws.yaml").read_text())
    validate_config(prepare_config(cfg))  # raises jsonschema.ValidationError on a bad field
    head = cfg["available_node_types"]["head"]
    assert cfg["provider"]["type"] == "aws" and head["resources"] == {"CPU": 0}
    assert "-v /mnt/shared:/mnt/shared" in cfg["docker"]["run_options"]
    assert "/mnt/shared" in " ".join(cfg["initialization_commands"])


def test_kuberay_rayjob_mounts_the_run_dir_on_every_pod():
    import ray
    import yaml

    job, pvc = yaml.safe_load_all((ROOT / "cluster" / "kuberay_rayjob.yaml").read_text())
    assert job["kind"] == "RayJob" and pvc["kind"] == "PersistentVolumeClaim"
    spec = job["spec"]
    assert spec["rayClusterSpec"]["rayVersion"] == ray.__version__
    entry = spec["entrypoint"].split()
    assert "mimic2dm-train" in entry and "ray=local" in entry
    run_dir = next(a.split("=", 1)[1] for a in entry if a.startswith("run_dir="))
    pods = [spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]]
    pods += [g["template"]["spec"] for g in spec["rayClusterSpec"]["workerGroupSpecs"]]
    for pod in pods:
        claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]}
        mounts = [(m["name"], m["mountPath"]) for c in pod["containers"] for m in c["volumeMounts"]]
        assert any(run_dir.startswith(path + "/") and claims[name] == pvc["metadata"]["name"]
                   for name, path in mounts), f"run dir {run_dir} not on the shared volume of {pod}"  # fmt: skip
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]


def test_slurm_script_parses_and_passes_its_arguments_to_training():
    script = ROOT / "cluster" / "slurm_ray.sbatch"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    text = script.read_text()
    assert "--dashboard-host=0.0.0.0" in text and 'train.num_envs=$(( actors * 64 )) "$@"' in text


@pytest.mark.slow
def test_generators_e2e_script_trains_all_five_jobs_at_a_tiny_scale(tmp_path):
    """`cluster/generators_e2e.sh OUT 0.002`: 1-4 steps per job; every job leaves its last.pt."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "WANDB_MODE": "offline"}  # fmt: skip
    out = tmp_path / "gen"
    res = subprocess.run(["bash", str(ROOT / "cluster" / "generators_e2e.sh"), str(out), "0.002"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)  # fmt: skip
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    for job in ("fid", "tok", "gpt", "gpt_multiview", "diffusion"):
        assert (out / job / "checkpoints" / "last.pt").is_file(), job


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_control_e2e_script_runs_every_experiment_at_a_tiny_scale(tmp_path):
    """`cluster/control_e2e.sh RUN OUT 1 0.002` on a one-epoch all-CMU tracker: generators,
    rollouts, the two-view generator, nine Table 3 reports and the markdown table."""
    from generator_helpers import HAVE_MOCAP

    from mimic2dm.train import compose_config, train

    if not HAVE_MOCAP:
        pytest.skip("shared mocap missing")
    run = tmp_path / "tracker"
    train(compose_config(["data=cmu_all", "task.view_mode=virtual", "task.camera_mode=tracking", f"run_dir={run}",
                          *TINY, "train.max_epochs=1", "logger.tensorboard=false"]))  # fmt: skip
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "WANDB_MODE": "offline", "CONTROL_SECONDS": "2"}  # fmt: skip
    out = tmp_path / "ctl"
    res = subprocess.run(["bash", str(ROOT / "cluster" / "control_e2e.sh"), str(run), str(out), "1", "0.002"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1700)  # fmt: skip
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    reports = sorted(p.stem for p in (out / "table3").glob("*.json"))
    assert reports == sorted(f"{g}_{s}" for g in ("gpt", "diffusion", "gpt_multiview_rollouts")
                             for s in ("walk", "run", "hop"))  # fmt: skip
    two = json.loads((out / "table3" / "gpt_multiview_rollouts_walk.json").read_text())
    assert two["views"] == 2 and len(two["per_episode"][0]["error_2d_px_per_view"]) == 2
    assert len((out / "table3.md").read_text().splitlines()) == 2 + 9


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_compare_baselines_script_trains_the_methods_asked_and_tables_them(tmp_path):
    """`cluster/compare_baselines.sh BUDGET OUT OVERRIDES` with `METHODS` (issue 11's Table 1):
    synth -> strip -> preprocess, a 2D run from the preprocessed clip and a 3D-GT run, each
    for the budget, then `mimic2dm compare` over the rows that were trained."""
    shared = ROOT.parent / "shared"
    if not (shared / "data" / "mocap" / "cmu_walk.npz").is_file():
        pytest.skip(f"no shared mocap under {shared}")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "WANDB_MODE": "offline",
           "MIMIC2DM_SHARED": str(shared), "CLIPS": "cmu_walk", "METHODS": "mimic2dm gt3d"}  # fmt: skip
    tiny = [o for o in TINY if not o.startswith("train.checkpoint.")]
    res = subprocess.run(["bash", "cluster/compare_baselines.sh", "15", str(tmp_path), *tiny],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=1100)  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    D = tmp_path / "cmu_walk"
    report = json.loads((D / "clips" / "pre" / "report.json").read_text())["clips"][0]
    assert report["mpjpe_mm"] < 150.0
    assert not (D / "mimic2dm_oracle").exists() and not (D / "sfv").exists()
    for run in ("mimic2dm", "gt3d"):
        summary = json.loads((D / run / "summary.json").read_text())
        assert summary["epochs"] >= 1 and (D / run / "checkpoints" / "last.pt").is_file()
    rows = json.loads((D / "table.json").read_text())["rows"]
    assert [(Path(r["run"]).name, r["task"]) for r in rows] == [
        ("mimic2dm", "tracking2d"),
        ("gt3d", "tracking3d"),
    ]
    assert all(r["error_2d_px"] > 0 and r["mpjpe_mm"] > 0 for r in rows)
    assert "Mimic2DM (preprocessed)" in (D / "table.md").read_text()
    assert "## cmu_walk" in res.stdout
    bad = subprocess.run(["bash", "cluster/compare_baselines.sh", "15", str(tmp_path / "bad")], cwd=ROOT,
                         env={**env, "METHODS": "nope"}, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert bad.returncode == 2 and "unknown method nope" in bad.stderr
