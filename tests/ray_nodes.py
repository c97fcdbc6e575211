"""Two Ray nodes on this machine (a head and a worker, each its own `ray start` with its own
temp dir and ports), for the multi-node job tests; and killing one node's processes by PID."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil

BIN = Path(sys.executable).parent

# GCS declares a node dead after `failure_threshold` missed health checks: ~3 s here instead
# of Ray's ~30 s default, so a killed node's actors are reported dead quickly.
FAST_FAILURE_DETECTION = {
    "RAY_health_check_initial_delay_ms": "1000",
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "3",
}


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free right now (all bound at once, then released)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@contextlib.contextmanager
def fresh_auth_token() -> Iterator[str]:
    """Token authentication with a new token (``RAY_AUTH_TOKEN``) in this process and the
    nodes started inside; Ray's cached auth state is reset on entry and exit, so that a
    client made earlier in this process (without a token) does not leak in, nor ours out."""
    from ray._private.authentication_test_utils import reset_auth_token_state

    saved = {
        k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")
    }
    token = secrets.token_hex(32)
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)
    os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
    reset_auth_token_state()
    try:
        yield token
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        reset_auth_token_state()


def ray_env(**extra: str) -> dict[str, str]:
    """Environment of `ray start` and of jobs: this venv's scripts on PATH, token auth (the
    token: ``RAY_AUTH_TOKEN`` when set, e.g. by :func:`fresh_auth_token`, else ~/.ray/auth_token)."""
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "RAY_AUTH_MODE": "token",
           "WANDB_MODE": "offline", "RAY_USAGE_STATS_ENABLED": "0", **extra}  # fmt: skip
    env.pop("RAY_ADDRESS", None)
    return env


START_ATTEMPTS = 3


class NodeExited(RuntimeError):
    """A `ray start` process ended while its node should be coming up."""


class Node:
    """One `ray start --block` process tree (kill it with :meth:`kill`)."""

    def __init__(self, args: list[str], temp_dir: str, env: dict[str, str], log: Path):
        self.temp_dir = temp_dir
        self.log = open(log, "w")  # noqa: SIM115 - closed in kill()
        self.proc = subprocess.Popen(
            [str(BIN / "ray"), "start", "--block", "--disable-usage-stats", f"--temp-dir={temp_dir}", *args],
            env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip

    def processes(self) -> list[psutil.Process]:
        """This node's processes: `ray start`, its raylet (and GCS on the head), their workers."""
        try:
            root = psutil.Process(self.proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def raylet_pid(self) -> int | None:
        for p in self.processes():
            try:
                if p.name() == "raylet":
                    return p.pid
            except psutil.NoSuchProcess:
                continue
        return None

    def kill(self) -> list[int]:
        """SIGKILL every process of this node; returns their PIDs. (Its process group too:
        after `ray start` has exited, its GCS and raylet are no longer its children.)"""
        procs = self.processes()
        for p in procs:
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # start_new_session: pgid == pid
        psutil.wait_procs(procs, timeout=10)
        try:
            self.proc.wait(timeout=10)  # reap `ray start`
        except subprocess.TimeoutExpired:
            pass
        self.log.close()
        return [p.pid for p in procs]


def node_ports() -> list[str]:
    """`ray start` flags giving one node its own free ports, so two nodes share this machine
    (Ray's defaults, e.g. the dashboard agent's 52365, would collide); worker ports: the OS's."""
    flags = ("dashboard-agent-listen-port", "dashboard-agent-grpc-port", "metrics-export-port",
             "runtime-env-agent-port", "node-manager-port", "object-manager-port")  # fmt: skip
    ports = free_ports(len(flags))
    return [f"--{f}={p}" for f, p in zip(flags, ports, strict=True)] + [
        "--min-worker-port=0", "--max-worker-port=0", "--node-ip-address=127.0.0.1"]  # fmt: skip


class TwoNodes:
    """A head (with the dashboard / Jobs API) and a worker node on 127.0.0.1.

    The nodes offer the custom resources ``head`` / ``worker`` (1 each) to be told apart.
    Kill both with :meth:`close` (in a ``finally``).

    Args:
        tmp: where the node logs go.
        head_cpus, worker_cpus: CPUs each node offers.
    """

    def __init__(self, tmp: Path, head_cpus: int = 2, worker_cpus: int = 1):
        tag, self.last_error = uuid.uuid4().hex[:6], None
        # Short temp dirs: Ray's session socket paths must stay under 107 chars.
        self.head_tmp, self.worker_tmp = f"/tmp/m2d_h_{tag}", f"/tmp/m2d_w_{tag}"
        self.env = ray_env(**FAST_FAILURE_DETECTION)
        self.nodes: list[Node] = []
        try:
            self.head = self._start_until_up(lambda: self._head_args(head_cpus), self.head_tmp,
                                             tmp / "head.log", n_alive=1)  # fmt: skip
            self.worker = self._start_until_up(
                lambda: [f"--address={self.gcs}", f"--num-cpus={worker_cpus}",
                         '--resources={"worker": 1}', *node_ports()],
                self.worker_tmp, tmp / "worker.log", n_alive=2,
            )  # fmt: skip
        except BaseException:
            self.close()
            raise

    def _head_args(self, cpus: int) -> list[str]:
        """The head's flags, on ports picked now (a retried start gets new ones)."""
        gcs, dash, client = free_ports(3)
        self.gcs, self.address = f"127.0.0.1:{gcs}", f"http://127.0.0.1:{dash}"
        return ["--head", f"--port={gcs}", f"--num-cpus={cpus}", "--include-dashboard=true",
                "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}", f"--ray-client-server-port={client}",
                '--resources={"head": 1}', *node_ports()]  # fmt: skip

    def _start_until_up(self, make_args, temp_dir: str, log: Path, n_alive: int,
                        attempts: int = START_ATTEMPTS) -> Node:  # fmt: skip
        """Start a node and wait until ``n_alive`` nodes are alive; a `ray start` that exits
        during start-up is started again, up to ``attempts`` times. (`ray start` gives its
        raylet a fixed 30 s to register with GCS, which a busy 2-core CI machine can miss:
        CI saw "The current node timed out during startup".)"""
        for attempt in range(1, attempts + 1):
            node = Node(make_args(), temp_dir, self.env, log.with_suffix(f".{attempt}.log"))
            self.nodes.append(node)
            try:
                self.wait_for_nodes(n_alive, timeout_s=180)
                return node
            except NodeExited:
                if attempt == attempts:
                    raise
                node.kill()
                self.nodes.remove(node)
                shutil.rmtree(temp_dir, ignore_errors=True)
                time.sleep(2.0)
        raise AssertionError("unreachable")

    def alive_nodes(self) -> list[dict]:
        """Alive nodes as the state API lists them (``[]`` while the dashboard is not up)."""
        from ray.util.state import list_nodes

        try:
            nodes = list_nodes(address=self.address, timeout=10)
        except Exception as e:  # noqa: BLE001 - the dashboard is still starting
            self.last_error = e
            return []
        return [
            n.__dict__ if hasattr(n, "__dict__") else dict(n) for n in nodes if n.state == "ALIVE"
        ]

    def wait_for_nodes(self, n: int, timeout_s: float) -> None:
        t0 = time.monotonic()
        while len(self.alive_nodes()) < n:
            for node in self.nodes:
                if node.proc.poll() is not None:
                    raise NodeExited(
                        f"ray start exited ({node.proc.returncode}): {Path(node.log.name).read_text()[-3000:]}"
                    )
            if time.monotonic() - t0 > timeout_s:
                raise TimeoutError(
                    f"{n} Ray nodes not up after {timeout_s} s ({self.last_error!r})"
                )
            time.sleep(1.0)

    def node_id(self, which: str) -> str:
        """The id of the alive node offering the resource ``which`` (``head`` or ``worker``)."""
        for n in self.alive_nodes():
            if which in (n.get("resources_total") or {}):
                return n["node_id"]
        raise RuntimeError(
            f"no {which} node among {json.dumps(self.alive_nodes(), default=str)[:2000]}"
        )

    def close(self) -> None:
        """Kill both nodes' processes (never `ray stop`: it would stop every node on this machine)."""
        for node in reversed(self.nodes):
            node.kill()
            shutil.rmtree(node.temp_dir, ignore_errors=True)
