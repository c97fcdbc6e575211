"""`cluster/ray_local.sh`: a Ray head started on its own, and training that joins it by address."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from rl_helpers import TINY

from mimic2dm.utils.paths import mocap_dir, shared_dir

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _script_env(**extra: str) -> dict:
    """The environment of a cluster script: this venv's bin first on PATH, wandb offline."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "WANDB_MODE": "offline",
            **extra}  # fmt: skip


def _tiny_generator_and_walk(tmp_path: Path, env: dict, camera: str) -> tuple[Path, Path]:
    """A 2-step diffusion generator on `gen_data=cmu_views_control` (``tmp_path/gen``) and a
    1.5 s synthetic cmu_walk clip seen by a ``camera`` camera (``tmp_path/real.npz``)."""
    gen = tmp_path / "gen"
    subprocess.run(["mimic2dm-train-generator", "model=diffusion", "gen_data=cmu_views_control",
                    "gen_data.build.pairs=2", "gen_data.build.heldout_pairs=1", f"run_dir={gen}",
                    "train.max_steps=2", "train.eval_every=2", "train.ckpt_every=2", "train.batch_size=4",
                    "optim.warmup_steps=1"], cwd=tmp_path, env=env, check=True, capture_output=True, timeout=600)  # fmt: skip
    real = tmp_path / "real.npz"
    subprocess.run(["mimic2dm", "data", "synth", str(mocap_dir() / "cmu_walk.npz"), "--out",
                    str(real), "--seconds", "1.5", "--camera", camera, "--ground", "--seed", "0"],
                   cwd=tmp_path, env=env, check=True, capture_output=True, timeout=300)  # fmt: skip
    return gen, real


def test_training_joins_an_existing_ray_cluster_by_address(tmp_path):
    run = tmp_path / "run"
    env = _script_env(RAY_PORT=str(free_port()), RAY_CPUS="2")
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
    env = _script_env()
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
    env = _script_env(CONTROL_SECONDS="2")
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
    """`cluster/compare_baselines.sh BUDGET OUT OVERRIDES` with `METHODS` (paper Table 1):
    synth -> strip -> preprocess, a 2D run from the preprocessed clip and a 3D-GT run, each
    for the budget, then `mimic2dm compare` over the rows that were trained."""
    shared = shared_dir()
    if not (shared / "data" / "mocap" / "cmu_walk.npz").is_file():
        pytest.skip(f"no shared mocap under {shared}")
    env = _script_env(MIMIC2DM_SHARED=str(shared), CLIPS="cmu_walk", METHODS="mimic2dm gt3d")
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


def test_cluster_argument_helpers_split_positionals_from_overrides():
    """`cluster/lib_args.sh`: optional positionals stop at `--` (what follows is left for the
    training overrides), missing ones keep their defaults; integers are checked by name."""
    lib = ROOT / "cluster" / "lib_args.sh"
    script = (f". {lib}; A=a; B=b; C=c; take_positionals A B C -- \"$@\"; "
              'echo "$A|$B|$C|${REST[*]}"; require_int SEED 0 non-negative; require_int N "$A"')  # fmt: skip
    cases = [
        (["1", "--", "x=1", "--y"], 0, "1|b|c|x=1 --y\n"),
        (["1", "2", "3", "4"], 0, "1|2|3|4\n"),
        ([], 2, "a|b|c|\n"),
        (["007"], 0, "007|b|c|\n"),
        (["0"], 2, "0|b|c|\n"),
    ]
    for args, rc, out in cases:
        res = subprocess.run(
            ["bash", "-c", script, "t.sh", *args], capture_output=True, text=True, timeout=60
        )
        assert (res.returncode, res.stdout) == (rc, out), (args, res.stdout, res.stderr)
        if rc:
            assert f"N must be a positive integer, got '{args[0] if args else 'a'}'" in res.stderr


def test_generated_tracker_script_rejects_bad_arguments_before_any_work(tmp_path):
    """`cluster/generated_tracker.sh`: a missing generator, a bad N or a missing real clip is a
    usage error (exit 2) naming it, and nothing is written."""
    script = str(ROOT / "cluster" / "generated_tracker.sh")
    gen = tmp_path / "gen"
    gen.mkdir()
    cases = [
        ([str(tmp_path / "nope"), str(tmp_path / "o1")], {}, "no generator run or checkpoint"),
        ([str(gen), str(tmp_path / "o2"), "x"], {}, "N must be a positive integer, got 'x'"),
        ([str(gen), str(tmp_path / "o3"), "2", "walk", "1.5"], {}, "SECONDS must be a positive integer"),
        ([str(gen), str(tmp_path / "o4")], {"REAL_CLIPS": str(tmp_path / "missing.npz")}, "REAL_CLIPS: no file"),
        ([str(gen)], {}, "usage:"),
    ]  # fmt: skip
    for args, extra, message in cases:
        res = subprocess.run(["bash", script, *args], cwd=tmp_path, env=_script_env(**extra),
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        assert res.returncode == 2 and message in res.stderr, (args, res.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gen"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_generated_tracker_script_samples_preprocesses_and_trains(tmp_path):
    """`cluster/generated_tracker.sh GEN OUT 2 walk 600 -- overrides` on a 2-step diffusion
    generator: two sampled walks, each preprocessed (camera and initial states), one tracker
    trained on them and a real clip; a second call reuses the clips and resumes nothing else."""
    import numpy as np
    from generator_helpers import HAVE_MOCAP

    if not HAVE_MOCAP:
        pytest.skip("shared mocap missing")
    env = _script_env()
    gen, real = _tiny_generator_and_walk(tmp_path, env, "static")
    out = tmp_path / "out"
    tiny = [o for o in TINY if not o.startswith("train.checkpoint.")]
    cmd = ["bash", str(ROOT / "cluster" / "generated_tracker.sh"), str(gen), str(out), "2", "walk", "600", "--",
           *tiny, "train.max_epochs=1", "logger.tensorboard=false"]  # fmt: skip
    env = {**env, "FRAMES": "45", "REAL_CLIPS": str(real)}
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    assert sorted(p.name for p in (out / "clips").iterdir()) == ["walk_0.npz", "walk_1.npz"]
    a, b = (
        np.load(out / "clips" / f"walk_{i}.npz", allow_pickle=True)["keypoints"] for i in (0, 1)
    )
    assert a.shape == (1, 45, 17, 2) and not np.allclose(a, b)  # seeds 1000 and 1001
    for i in (0, 1):
        pre = np.load(out / "pre" / f"walk_{i}.npz", allow_pickle=True)
        assert pre["camera_R"].shape == (1, 1, 3, 3) and pre["init_root_pos"].shape == (45, 3)
    cfg = (out / "tracker" / "config.yaml").read_text()
    assert str(real) in cfg and str(out / "pre" / "walk_1.npz") in cfg and "_motion3d" not in cfg
    summary = json.loads((out / "tracker" / "summary.json").read_text())
    assert summary["epochs"] == 1 and (out / "tracker" / "checkpoints" / "last.pt").is_file()
    # the sampled clips are kept: a second call with a new output run samples nothing again
    stamp = (out / "clips" / "walk_0.npz").stat().st_mtime_ns
    cmd[cmd.index("--") :] = ["--", *tiny, "train.max_epochs=1", "logger.tensorboard=false",
                              f"run_dir={tmp_path / 'again'}"]  # fmt: skip
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert (out / "clips" / "walk_0.npz").stat().st_mtime_ns == stamp
    assert (tmp_path / "again" / "checkpoints" / "last.pt").is_file()


def test_loop_tracker_script_rejects_bad_arguments_before_any_work(tmp_path):
    """`cluster/loop_tracker.sh`: a missing tracker or generator, a bad count, no start states
    or a missing clip is a usage error (exit 2) naming it, and nothing is written."""
    script = str(ROOT / "cluster" / "loop_tracker.sh")
    run, gen, clip = tmp_path / "run", tmp_path / "gen", tmp_path / "clip.npz"
    run.mkdir()
    gen.mkdir()
    clip.write_bytes(b"")
    ok = {"START_STATES": str(clip)}
    cases = [
        ([str(tmp_path / "nope"), str(gen), str(tmp_path / "o1")], ok, "no tracker run or checkpoint"),
        ([str(run), str(tmp_path / "nope"), str(tmp_path / "o2")], ok, "no generator run or checkpoint"),
        ([str(run), str(gen), str(tmp_path / "o3"), "x"], ok, "EPISODES must be a positive integer, got 'x'"),
        ([str(run), str(gen), str(tmp_path / "o4"), "2", "walk", "1.5"], ok, "SECONDS must be a positive integer"),
        ([str(run), str(gen), str(tmp_path / "o5")], {}, "START_STATES (env) must name clips"),
        ([str(run), str(gen), str(tmp_path / "o8")], {**ok, "SEED": "-1"}, "SEED must be a non-negative integer"),
        ([str(run), str(gen), str(tmp_path / "o9"), "0"], ok, "EPISODES must be a positive integer, got '0'"),
        ([str(run), str(gen), str(tmp_path / "o10")], {**ok, "VIEW_MODE": "virtual"},
         "VIEW_MODE: clip or auto, not 'virtual'"),
        ([str(run), str(gen), str(tmp_path / "o6")], {"START_STATES": str(tmp_path / "missing.npz")},
         "START_STATES: no file"),
        ([str(run), str(gen), str(tmp_path / "o7")], {**ok, "EXTRA_CLIPS": str(tmp_path / "x.npz")},
         "EXTRA_CLIPS: no file"),
        ([str(run), str(gen)], ok, "usage:"),
    ]  # fmt: skip
    for args, extra, message in cases:
        res = subprocess.run(["bash", script, *args], cwd=tmp_path, env=_script_env(**extra),
                             capture_output=True, text=True, timeout=60)  # fmt: skip
        assert res.returncode == 2 and message in res.stderr, (args, res.stderr)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clip.npz", "gen", "run"]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_loop_tracker_script_makes_clips_in_the_loop_and_fine_tunes(tmp_path):
    """`cluster/loop_tracker.sh RUN GEN OUT 2 walk 600 -- overrides` with a one-epoch tracker
    and a 2-step diffusion generator: two controlled episodes become loop clips (per-frame
    cameras and states), and the tracker is fine-tuned from RUN on them plus an extra clip
    (`VIEW_MODE=auto`: the extra clip has 3D, the loop clips have not)."""
    import numpy as np
    from generator_helpers import HAVE_MOCAP

    if not HAVE_MOCAP:
        pytest.skip("shared mocap missing")
    env = _script_env()
    gen, real = _tiny_generator_and_walk(tmp_path, env, "tracking")
    tiny = [o for o in TINY if not o.startswith("train.checkpoint.")]
    run = tmp_path / "run"
    subprocess.run(["mimic2dm-train", "data=files", f"data.clips=[{real}]", *tiny, "train.max_epochs=1",
                    "logger.tensorboard=false", f"run_dir={run}"], cwd=tmp_path, env=env, check=True,
                   capture_output=True, timeout=600)  # fmt: skip
    out = tmp_path / "out"
    cmd = ["bash", str(ROOT / "cluster" / "loop_tracker.sh"), str(run), str(gen), str(out), "2", "walk", "600",
           "--", *tiny, "train.max_epochs=1", "logger.tensorboard=false"]  # fmt: skip
    env = {**env, "START_STATES": str(real), "EXTRA_CLIPS": str(real), "VIEW_MODE": "auto",
           "CONTROL_ARGS": "--clips-max-error 100000 --clips-min-frames 3"}  # fmt: skip
    res = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    manifest = json.loads((out / "clips" / "walk" / "manifest.json").read_text())
    assert [e["seed"] for e in manifest["episodes"]] == [1000, 1001]
    kept = [e for e in manifest["episodes"] if e["file"]]
    assert kept, manifest
    clip = np.load(out / "clips" / "walk" / kept[0]["file"], allow_pickle=True)
    T = kept[0]["kept"]
    assert clip["camera_R"].shape == (1, T, 3, 3) and clip["init_dof_pos"].shape[0] == T
    cfg = (out / "tracker" / "config.yaml").read_text()
    assert str(real) in cfg and kept[0]["file"] in cfg and "view_mode: auto" in cfg
    assert f"init_from: {run}" in cfg
    summary = json.loads((out / "tracker" / "summary.json").read_text())
    assert summary["epochs"] == 1 and (out / "tracker" / "checkpoints" / "last.pt").is_file()
