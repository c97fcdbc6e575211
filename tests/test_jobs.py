"""`mimic2dm submit` / `mimic2dm jobs`: job plans, command-line errors, and a training job on a
two-node Ray cluster (head + worker on this machine) whose worker node is killed mid-run."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ray_nodes import BIN, TwoNodes, fresh_auth_token
from rl_helpers import TINY
from typer.testing import CliRunner

from mimic2dm.cli import app
from mimic2dm.jobs import parse_env, plan_job, project_root

ROOT = Path(__file__).resolve().parents[1]


def test_plan_adds_an_absolute_run_dir_to_hydra_apps(tmp_path):
    plan = plan_job(["mimic2dm-train", "seed=3"], tmp_path, name="job-a")
    want = str((tmp_path / "runs" / "jobs" / "job-a").resolve())
    assert plan.submission_id == "job-a" and plan.run_dir == want
    assert (
        plan.entrypoint
        == f"cd {tmp_path.resolve()} && mimic2dm-train seed=3 run_dir={want} hydra.run.dir={want}"
    )
    assert plan.metadata["run_dir"] == want and plan.metadata["mimic2dm"] == "1"
    assert all(isinstance(v, str) for v in plan.metadata.values())  # Ray's metadata is str -> str


def test_plan_keeps_the_commands_run_dir_or_resume_dir(tmp_path):
    plan = plan_job(["mimic2dm-train", "run_dir=runs/x", "seed=1"], tmp_path)
    assert plan.run_dir == str(tmp_path.resolve() / "runs/x")
    assert plan.entrypoint.endswith(f"run_dir=runs/x seed=1 hydra.run.dir={plan.run_dir}")
    plan = plan_job(["mimic2dm-train", f"resume={tmp_path}/r", "train.max_epochs=9"], tmp_path)
    assert (
        plan.run_dir == str(tmp_path / "r") and "run_dir=" not in plan.entrypoint
    )  # Hydra's: resume
    assert plan.submission_id.startswith("mimic2dm-")
    with pytest.raises(ValueError, match="differs"):
        plan_job(["mimic2dm-train", "run_dir=a"], tmp_path, run_dir="b")


def test_plan_of_other_commands_quotes_them_and_records_only_a_given_run_dir(tmp_path):
    plan = plan_job(["python", "-c", "print('a b')"], tmp_path)
    assert plan.entrypoint.endswith("python -c 'print('\"'\"'a b'\"'\"')'") and plan.run_dir is None
    assert "run_dir" not in plan.metadata
    plan = plan_job(["mimic2dm", "demo", "--out", "o"], tmp_path, run_dir="o")
    assert plan.run_dir == str(tmp_path.resolve() / "o")
    assert (
        plan_job(["mimic2dm-train", "-m", "seed=0,1"], tmp_path).run_dir is None
    )  # a sweep: many dirs
    with pytest.raises(ValueError, match="no command"):
        plan_job([], tmp_path)


def test_env_pairs_and_project_root():
    assert parse_env(["A=1", "B=x=y", "C="]) == {"A": "1", "B": "x=y", "C": ""}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_env(["novalue"])
    assert (project_root() / "pyproject.toml").is_file()


def test_commands_report_an_unreachable_cluster_clearly():
    runner = CliRunner()
    res = runner.invoke(app, ["jobs", "list", "--address", "http://127.0.0.1:9"])
    assert res.exit_code == 1 and "no Ray Jobs API at http://127.0.0.1:9" in res.output
    res = runner.invoke(
        app, ["submit", "--address", "http://127.0.0.1:9", "--env", "bad", "--", "true"]
    )
    assert res.exit_code == 1 and "--env 'bad': expected KEY=VALUE" in res.output


# ----------------------------------------------------------------------------- two nodes


def m2d(*args: str, env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    """``mimic2dm ARGS`` in a subprocess (the way a user runs it)."""
    res = subprocess.run([str(BIN / "mimic2dm"), *args], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=timeout)  # fmt: skip
    assert res.returncode == 0, (
        f"mimic2dm {' '.join(args)}:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    )
    return res


def wait_until(what: str, cond, timeout_s: float, every: float = 0.5):
    t0 = time.monotonic()
    while not (out := cond()):
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"{what}: not after {timeout_s} s")
        time.sleep(every)
    return out


def env_actors(cluster: TwoNodes) -> list | None:
    """Alive ``EnvActor`` actors of the cluster (their node ids and worker PIDs); ``None``
    while the dashboard's state API does not answer (on 2 busy cores it can miss a request
    while the job starts: CI saw ``ServerUnavailable`` here), so that callers poll again."""
    from ray.util.state import list_actors
    from ray.util.state.exception import RayStateApiException

    try:
        return list_actors(address=cluster.address, timeout=10,
                           filters=[("class_name", "=", "EnvActor"), ("state", "=", "ALIVE")])  # fmt: skip
    except RayStateApiException as e:  # ServerUnavailable is one
        cluster.last_error = e
        return None


def job_status(jobs, job_id: str) -> str:
    return str(jobs.get_job_status(job_id).value)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_training_job_survives_losing_a_node_and_resumes(tmp_path, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    from ray.job_submission import JobSubmissionClient

    with fresh_auth_token():  # for the nodes, the CLI and this process's clients
        cluster = TwoNodes(tmp_path, head_cpus=2, worker_cpus=1)
        try:
            env = {**cluster.env, "RAY_API_SERVER_ADDRESS": cluster.address}
            jobs = JobSubmissionClient(cluster.address)
            run, epochs = tmp_path / "run", 40
            lose_the_worker_node_mid_run(cluster, jobs, env, run, epochs)
            check_jobs_commands_and_resume(jobs, env, run, epochs, tmp_path)
        finally:
            cluster.close()


def lose_the_worker_node_mid_run(cluster: TwoNodes, jobs, env: dict, run: Path, epochs: int):
    """A training job with one env actor per node; the worker node is killed after the first
    checkpoint: the job must end well, with the replacement counted and logged."""
    train = ["mimic2dm-train", f"run_dir={run}", *TINY, f"train.max_epochs={epochs}", "ray=local",
             "ray.num_actors=2", "ray.actor_cpus=1", "ray.step_timeout_s=60", "data.clips.0.make.seconds=1.5"]  # fmt: skip
    out = m2d(
        "submit", "--name", "m2d-node-loss", "--env", "WANDB_MODE=offline", "--", *train, env=env
    )
    assert f"submitted m2d-node-loss (run dir {run})" in out.stdout

    head_id, worker_id = cluster.node_id("head"), cluster.node_id("worker")
    actors = wait_until(
        "two env actors", lambda: (a := env_actors(cluster)) and len(a) == 2 and a, 300
    )
    assert {a.node_id for a in actors} == {head_id, worker_id}, (
        "env actors not spread over both nodes"
    )
    on_worker = [a.pid for a in actors if a.node_id == worker_id]
    wait_until("a first checkpoint", lambda: (run / "checkpoints" / "last.pt").is_file(), 300)
    assert job_status(jobs, "m2d-node-loss") == "RUNNING"
    raylet = cluster.worker.raylet_pid()
    killed = cluster.worker.kill()
    assert raylet in killed and set(on_worker) <= set(killed)

    ended = ("SUCCEEDED", "FAILED", "STOPPED")
    status = wait_until(
        "the job to end", lambda: (s := job_status(jobs, "m2d-node-loss")) in ended and s, 600, 2
    )
    logs = m2d("jobs", "logs", "m2d-node-loss", env=env).stdout
    assert status == "SUCCEEDED", logs[-4000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["epochs"] == epochs and summary["actor_restarts"] >= 1
    hit = [h["epoch"] for h in summary["history"] if h.get("ray/actor_restarts")]
    assert hit and hit[0] < epochs, "the node was lost after the last epoch"
    assert "Ray env actor" in logs and "starting a replacement" in logs
    # The replacement could only run on the head. (`alive_nodes` is [] while the state API
    # misses a request, so poll briefly rather than read it once.)
    alive = lambda: [n["node_id"] for n in cluster.alive_nodes()]  # noqa: E731
    wait_until("only the head alive", lambda: alive() == [head_id], 60, 2)


def check_jobs_commands_and_resume(jobs, env: dict, run: Path, epochs: int, tmp_path: Path):
    """`jobs list` / `fetch` on the finished job, a `resume=` job, and `jobs stop`."""
    listed = m2d("jobs", "list", env=env).stdout
    assert "m2d-node-loss" in listed and "SUCCEEDED" in listed
    fetched = tmp_path / "fetched"
    m2d("jobs", "fetch", "m2d-node-loss", "--out", str(fetched), env=env)
    assert json.loads((fetched / "summary.json").read_text())["epochs"] == epochs
    assert (fetched / "checkpoints" / "last.pt").is_file()
    assert "starting a replacement" in (fetched / "train.log").read_text()  # Hydra's log came too

    out = m2d("submit", "--name", "m2d-resume", "--wait", "--", "mimic2dm-train", f"resume={run}",
              f"train.max_epochs={epochs + 2}", env=env, timeout=600)  # fmt: skip
    assert "job m2d-resume: SUCCEEDED" in out.stdout
    summary = json.loads((run / "summary.json").read_text())
    assert summary["resumed_from_epoch"] == epochs and summary["epochs"] == epochs + 2

    sleep = ["--", sys.executable, "-c", "import time; time.sleep(600)"]
    m2d("submit", "--name", "m2d-sleep", *sleep, env=env)
    wait_until("the sleep job", lambda: job_status(jobs, "m2d-sleep") == "RUNNING", 120)
    assert "stop requested" in m2d("jobs", "stop", "m2d-sleep", env=env).stdout
    wait_until("the stop", lambda: job_status(jobs, "m2d-sleep") == "STOPPED", 120)
