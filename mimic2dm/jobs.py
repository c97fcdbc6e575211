"""``mimic2dm submit`` and ``mimic2dm jobs ...``: project commands as Ray jobs on a cluster.

A job is any project command (``mimic2dm-train ...``, ``mimic2dm demo ...``) run by the
cluster's Jobs API (the dashboard's HTTP address, ``http://HOST:8265``). It runs in place:
the entrypoint is ``cd WORKDIR && COMMAND`` with ``WORKDIR`` the project root, so every
node that may host the job's driver (the head, by Ray's default) must see the project at
the same path and have it installed (a shared filesystem, or the image in ``docker/``).
Nothing is uploaded: the project's package layout (``tasks/`` installed as
``mimic2dm.tasks``) does not work from a copied source tree.

For the Hydra apps (``mimic2dm-train*``) the run directory is made absolute and recorded
in the job's metadata (``run_dir``): given as ``run_dir=`` or ``resume=``, else
``WORKDIR/runs/jobs/SUBMISSION_ID`` is added; Hydra's own output (``hydra.run.dir``, with
the app's log) is put there too. ``jobs fetch`` copies it back; the path must
be one this machine can read (on one machine: its disk; on a cluster: a shared path).
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import shlex
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer

import mimic2dm

HYDRA_APPS = (
    "mimic2dm-train",
    "mimic2dm-train-tokenizer",
    "mimic2dm-train-generator",
    "mimic2dm-train-fid",
)
"""Commands whose run directory is the ``run_dir=`` (or ``resume=``) override."""

META_KEY = "mimic2dm"
"""Metadata key that marks jobs submitted by ``mimic2dm submit``."""

TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")

ADDRESS_ENV = "RAY_API_SERVER_ADDRESS"
DEFAULT_ADDRESS = "http://127.0.0.1:8265"


def project_root() -> Path:
    """The checkout this package runs from (editable install), else the current directory."""
    root = Path(mimic2dm.__file__).resolve().parents[1]
    return root if (root / "pyproject.toml").is_file() else Path.cwd().resolve()


@dataclasses.dataclass
class JobPlan:
    """What ``submit`` sends: ``entrypoint`` (shell), ``submission_id``, ``metadata`` (str -> str)."""

    entrypoint: str
    submission_id: str
    run_dir: str | None
    metadata: dict[str, str]


def _override(command: list[str], key: str) -> str | None:
    """Value of the last ``key=VALUE`` (or ``+key=VALUE``) argument, else None."""
    vals = [a.split("=", 1)[1] for a in command if a.lstrip("+").startswith(f"{key}=")]
    return vals[-1] if vals else None


def new_submission_id(name: str | None = None) -> str:
    """``NAME`` when given, else ``mimic2dm-YYYYmmdd-HHMMSS-xxxx`` (UTC, random suffix)."""
    if name:
        return name
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return f"mimic2dm-{stamp}-{secrets.token_hex(2)}"


def plan_job(
    command: list[str],
    workdir: str | Path,
    name: str | None = None,
    run_dir: str | None = None,
) -> JobPlan:
    """The entrypoint and metadata of a job running ``command`` in ``workdir``.

    Args:
        command: the project command and its arguments (``["mimic2dm-train", "seed=1"]``).
        workdir: the job's working directory (absolute after this call).
        name: submission id (unique on the cluster); None makes one.
        run_dir: where the run writes, for ``jobs fetch``; for the Hydra apps it is
            passed as ``run_dir=`` when the command names none.

    Raises:
        ValueError: an empty command, or a run dir given twice with different values.
    """
    if not command:
        raise ValueError(
            "submit: no command given (write it after '--', e.g. -- mimic2dm-train seed=1)"
        )
    workdir = Path(workdir).resolve()
    sub_id = new_submission_id(name)
    command = list(command)
    app = os.path.basename(command[0])
    if app in HYDRA_APPS and not ({"-m", "--multirun"} & set(command)):
        given = _override(command, "resume") or _override(command, "run_dir")
        if given and run_dir and Path(workdir, given).resolve() != Path(workdir, run_dir).resolve():
            raise ValueError(
                f"submit: --run-dir {run_dir} differs from the command's run dir {given}"
            )
        if given is None:
            run_dir = run_dir or str(workdir / "runs" / "jobs" / sub_id)
            command.append(f"run_dir={Path(workdir, run_dir).resolve()}")
        else:
            run_dir = given
        if _override(command, "hydra.run.dir") is None and _override(command, "resume") is None:
            # Hydra's log and .hydra/ go with the run (else to runs/tracker/TIME), so fetch gets them.
            command.append(f"hydra.run.dir={Path(workdir, run_dir).resolve()}")
    run_dir = str(Path(workdir, run_dir).resolve()) if run_dir else None
    meta = {
        META_KEY: "1",
        "name": name or sub_id,
        "workdir": str(workdir),
        "command": shlex.join(command),
    }
    if run_dir:
        meta["run_dir"] = run_dir
    entrypoint = f"cd {shlex.quote(str(workdir))} && {shlex.join(command)}"
    return JobPlan(entrypoint, sub_id, run_dir, meta)


def parse_env(pairs: list[str]) -> dict[str, str]:
    """``["K=V", ...]`` -> ``{K: V}``; raises ValueError naming a malformed pair."""
    out = {}
    for p in pairs:
        key, sep, val = p.partition("=")
        if not sep or not key:
            raise ValueError(f"--env {p!r}: expected KEY=VALUE")
        out[key] = val
    return out


def client(address: str):
    """A ``JobSubmissionClient`` for ``address`` (the dashboard's ``http://HOST:PORT``).

    Raises:
        ConnectionError: nothing answers there (the message says what to check).
    """
    from ray.job_submission import JobSubmissionClient

    try:
        return JobSubmissionClient(address)
    except ConnectionError as e:
        raise ConnectionError(
            f"no Ray Jobs API at {address} ({e}); start the head with the dashboard "
            f"(`ray start --head --dashboard-host=0.0.0.0`) and pass its address with --address "
            f"or {ADDRESS_ENV}; a cluster with token authentication also needs RAY_AUTH_MODE=token here"
        ) from e


def submit(
    address: str, command: list[str], name: str | None = None, run_dir: str | None = None,
    workdir: str | Path | None = None, env: dict[str, str] | None = None,
) -> JobPlan:  # fmt: skip
    """Submit ``command`` as a Ray job (see :func:`plan_job`); returns what was sent."""
    plan = plan_job(command, workdir or project_root(), name, run_dir)
    runtime_env = {"env_vars": dict(env)} if env else None
    client(address).submit_job(
        entrypoint=plan.entrypoint, submission_id=plan.submission_id,
        metadata=plan.metadata, runtime_env=runtime_env,
    )  # fmt: skip
    return plan


def wait(address: str, job_id: str, timeout_s: float | None = None, echo=None) -> str:
    """Poll ``job_id`` until it ends (printing new log text with ``echo``); its final status.

    Raises:
        TimeoutError: still running after ``timeout_s``.
    """
    c, shown, t0 = client(address), 0, time.monotonic()
    while True:
        status = str(c.get_job_status(job_id).value)
        if echo is not None:
            logs = c.get_job_logs(job_id)
            if len(logs) > shown:
                echo(logs[shown:].rstrip("\n"))
                shown = len(logs)
        if status in TERMINAL:
            return status
        if timeout_s is not None and time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"job {job_id} still {status} after {timeout_s:.0f} s")
        time.sleep(1.0)


def job_rows(address: str, all_jobs: bool = False) -> list[dict[str, Any]]:
    """Jobs on the cluster (only ``mimic2dm submit``'s unless ``all_jobs``), oldest first."""
    rows = []
    for j in client(address).list_jobs():
        meta = j.metadata or {}
        if not all_jobs and META_KEY not in meta:
            continue
        rows.append({
            "id": j.submission_id or j.job_id, "status": str(j.status.value), "name": meta.get("name"),
            "start_time": j.start_time, "end_time": j.end_time, "run_dir": meta.get("run_dir"),
            "entrypoint": j.entrypoint, "message": j.message,
        })  # fmt: skip
    return sorted(rows, key=lambda r: r["start_time"] or 0)


def fetch(address: str, job_id: str, out: str | Path) -> Path:
    """Copy the job's run directory (its metadata's ``run_dir``) into ``out``; returns ``out``.

    Raises:
        ValueError: the job has no recorded run dir.
        FileNotFoundError: the run dir is not readable from here (no shared filesystem).
        FileExistsError: ``out`` exists and is not empty.
    """
    info = client(address).get_job_info(job_id)
    src = (info.metadata or {}).get("run_dir")
    if not src:
        raise ValueError(
            f"job {job_id}: no run_dir in its metadata (submit it with `mimic2dm submit`, "
            "and for commands other than mimic2dm-train* pass --run-dir)"
        )
    src_path, out = Path(src), Path(out)
    if not src_path.is_dir():
        raise FileNotFoundError(
            f"job {job_id}: run dir {src} is not readable from this machine; jobs fetch needs "
            "the path on a filesystem the cluster shares with it (or run it on the head node)"
        )
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"--out {out}: exists and is not empty")
    # Ray's session sockets may sit in RUN_DIR/ray: copy files, not sockets.
    shutil.copytree(src_path, out, dirs_exist_ok=True, ignore=shutil.ignore_patterns("ray"))
    return out


# ---------------------------------------------------------------- command line

AddressOption = typer.Option(
    DEFAULT_ADDRESS, "--address", envvar=ADDRESS_ENV,
    help="The cluster's Jobs API (the Ray dashboard), http://HOST:PORT.",
)  # fmt: skip

jobs_app = typer.Typer(help="Ray jobs submitted with `mimic2dm submit`: list, logs, stop, fetch.",
                       no_args_is_help=True)  # fmt: skip


def _fail(e: Exception) -> None:
    typer.echo(f"error: {e}", err=True)
    raise typer.Exit(1) from e


def _errors():
    """The errors a job command reports as ``error: ...`` with exit code 1."""
    from ray.exceptions import AuthenticationError

    return (ValueError, ConnectionError, FileNotFoundError, FileExistsError, RuntimeError,
            TimeoutError, AuthenticationError)  # fmt: skip


def submit_cmd(
    command: list[str] = typer.Argument(..., help="The command, after '--': -- mimic2dm-train ..."),
    address: str = AddressOption,
    name: str = typer.Option(None, "--name", help="Submission id (unique on the cluster)."),
    run_dir: str = typer.Option(
        None,
        "--run-dir",
        help="Run dir to record for `jobs fetch` (mimic2dm-train*: default WORKDIR/runs/jobs/ID).",
    ),  # fmt: skip
    workdir: str = typer.Option(
        None,
        "--workdir",
        help="Job's working dir (default: the project root); the cluster must see it at this path.",
    ),  # fmt: skip
    env: list[str] = typer.Option(
        None, "--env", help="KEY=VALUE for the job's processes (repeat)."
    ),
    wait_: bool = typer.Option(
        False, "--wait", help="Print the job's log until it ends; exit 1 unless it succeeded."
    ),  # fmt: skip
) -> None:
    """Submit a project command as a Ray job; prints its id (and run dir)."""
    try:
        plan = submit(address, command, name, run_dir, workdir, parse_env(env or []))
        typer.echo(
            f"submitted {plan.submission_id}"
            + (f" (run dir {plan.run_dir})" if plan.run_dir else "")
        )
        if wait_:
            status = wait(address, plan.submission_id, echo=typer.echo)
            typer.echo(f"job {plan.submission_id}: {status}")
            if status != "SUCCEEDED":
                raise typer.Exit(1)
    except _errors() as e:
        _fail(e)


@jobs_app.command("list")
def list_cmd(
    address: str = AddressOption,
    all_jobs: bool = typer.Option(False, "--all", help="Also jobs not submitted by mimic2dm."),
) -> None:
    """The cluster's jobs: id, status, start time, run dir."""
    from rich.console import Console
    from rich.table import Table

    try:
        rows = job_rows(address, all_jobs)
    except _errors() as e:
        _fail(e)
    table = Table("id", "status", "started (UTC)", "run dir")
    for r in rows:
        started = (
            datetime.fromtimestamp(r["start_time"] / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
            if r["start_time"]
            else ""
        )
        table.add_row(r["id"], r["status"], started, r["run_dir"] or "")
    Console(width=200).print(table)


@jobs_app.command("logs")
def logs_cmd(
    job_id: str = typer.Argument(..., help="Submission id."),
    address: str = AddressOption,
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing until the job ends."),
) -> None:
    """Print a job's log (driver output)."""
    try:
        if follow:
            wait(address, job_id, echo=typer.echo)
        else:
            typer.echo(client(address).get_job_logs(job_id), nl=False)
    except _errors() as e:
        _fail(e)


@jobs_app.command("stop")
def stop_cmd(
    job_id: str = typer.Argument(..., help="Submission id."), address: str = AddressOption
) -> None:
    """Stop a running job (its driver gets SIGTERM, then SIGKILL)."""
    try:
        stopped = client(address).stop_job(job_id)
    except _errors() as e:
        _fail(e)
    typer.echo(f"{job_id}: {'stop requested' if stopped else 'not running'}")


@jobs_app.command("fetch")
def fetch_cmd(
    job_id: str = typer.Argument(..., help="Submission id."),
    out: str = typer.Option(..., "--out", help="Where to copy the job's run directory."),
    address: str = AddressOption,
) -> None:
    """Copy a job's run directory (checkpoints, summary, logs) to ``--out``."""
    try:
        status = str(client(address).get_job_status(job_id).value)
        dest = fetch(address, job_id, out)
    except _errors() as e:
        _fail(e)
    typer.echo(f"copied the run dir of {job_id} ({status}) to {dest}")
