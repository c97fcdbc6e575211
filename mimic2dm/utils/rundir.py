"""Run directories that cannot be lost or mixed: one writer, no silent reuse, clear
errors for unwritable places. Shared by every command that writes a run directory
(``mimic2dm-train``, the generator apps, ``bench learn``, ``demo``).

- :class:`RunLock`: ``RUN_DIR/.lock`` holds the writer's pid and host; a second writer is
  refused naming them; the lock of a process that is gone (same host) is taken over.
- :func:`claim_new_run`: a new run refuses a directory that already holds a run unless
  ``overwrite`` is given, in which case the old run's files are removed first (so that
  old snapshots cannot mix with the new ones).
- :func:`check_writable`: an output path that cannot be written is refused before any
  work, naming the path and the errno text.
- :func:`clean_stale_temps`: temp files of atomic writes left by a killed process.

Every error here is a :class:`RunDirError`: apps print its message as one line and exit 1.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import socket
import time
from pathlib import Path

log = logging.getLogger(__name__)

LOCK_NAME = ".lock"
RUN_MARKERS = ("checkpoints/last.pt", "config.yaml", "summary.json", "metrics.json")
"""Files whose presence means a directory already holds a run."""
RUN_FILES = ("checkpoints", "config.yaml", "summary.json", "metrics.json", "tb", "wandb",
             "wandb_id", "videos", "data", "rl_games", "ray")  # fmt: skip
"""What ``overwrite`` removes: the files a run writes (``.hydra`` and logs are Hydra's own)."""


class RunDirError(ValueError):
    """A run directory or output path that cannot be used; the message is one line."""


class NoRunError(RunDirError, FileNotFoundError):
    """The run to resume is missing, or holds no checkpoint (also a ``FileNotFoundError``)."""


def os_error_line(e: OSError, what: str = "cannot write") -> str:
    """``cannot write PATH: [Errno 28] No space left on device`` for an ``OSError``."""
    path = e.filename if e.filename is not None else "?"
    code = f"[Errno {e.errno}] " if e.errno is not None else ""
    return f"{what} {path}: {code}{e.strerror or e}"


def check_writable(path: str | Path, option: str, is_dir: bool = False) -> Path:
    """Refuse an output path that cannot be written, before any work is done.

    The nearest existing ancestor must be a directory this process may write into (the
    path's missing parents are created by the writer later); an existing ``path`` must be a
    file (a directory when ``is_dir``). ``os.access`` honours read-only file systems
    (``EROFS``) even for root; a path under a regular file gives ``ENOTDIR``.

    Raises:
        RunDirError: ``OPTION PATH: [Errno N] text``.
    """
    p = Path(path).absolute()
    probe = p
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    code = None
    if probe != p:  # p is missing: its nearest existing ancestor must be a directory
        target = probe
        code = None if probe.is_dir() else errno.ENOTDIR
    else:
        target = p if is_dir else p.parent
        if p.is_dir() != is_dir:
            code = errno.EISDIR if p.is_dir() else errno.ENOTDIR
    if code is None and not os.access(target, os.W_OK | os.X_OK):
        code = errno.EROFS if _read_only_fs(target) else errno.EACCES
    if code is None:
        return p
    raise RunDirError(f"{option} {path}: [Errno {code}] {os.strerror(code)}")


def _read_only_fs(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


class RunLock:
    """``RUN_DIR/.lock``: the run's one writer (pid, host, start time as JSON).

    Created with ``O_EXCL``, so two processes starting at once cannot both win. A lock
    whose pid is gone on this host is stale (a ``kill -9``, a lost node's run seen from
    the same host) and is taken over with a warning; a lock of another host is trusted,
    since its pid cannot be checked from here (remove the file by hand when that host is
    gone).
    """

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / LOCK_NAME
        self.held = False

    def owner(self) -> dict | None:
        """The lock file's content (None when there is no lock)."""
        try:
            return json.loads(self.path.read_text() or "{}")
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}

    def busy_message(self) -> str | None:
        """Why this directory cannot be written now (a live owner), else None."""
        owner = self.owner()
        if owner is None or self._stale(owner) or self._mine(owner):
            return None
        return (f"{self.path.parent} is in use by pid {owner.get('pid', '?')} on host "
                f"{owner.get('host', '?')} (since {owner.get('started', '?')}; lock file {self.path}); "
                "stop that run first, or use another run directory")  # fmt: skip

    @staticmethod
    def _mine(owner: dict) -> bool:
        return owner.get("pid") == os.getpid() and owner.get("host") == socket.gethostname()

    @staticmethod
    def _stale(owner: dict) -> bool:
        pid = owner.get("pid")
        if owner.get("host") != socket.gethostname() or not isinstance(pid, int):
            return not owner  # an unreadable lock counts as stale; another host's does not
        return pid != os.getpid() and not _pid_alive(pid)

    def acquire(self) -> RunLock:
        """Take the lock (taking over a stale one).

        Raises:
            RunDirError: another live process holds it (naming pid and host).
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        me = {"pid": os.getpid(), "host": socket.gethostname(),
              "started": time.strftime("%Y-%m-%d %H:%M:%S")}  # fmt: skip
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
            except FileExistsError:
                owner = self.owner()
                if owner is not None and self._mine(owner):
                    self.held = True  # this process already holds it (a nested caller)
                    return self
                busy = self.busy_message()
                if busy:
                    raise RunDirError(busy) from None
                log.warning("taking over the stale lock %s of pid %s on host %s (that process is gone)",
                            self.path, (owner or {}).get("pid", "?"), (owner or {}).get("host", "?"))  # fmt: skip
                self.path.unlink(missing_ok=True)
                continue
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps(me))
            self.held = True
            return self
        raise RunDirError(f"{self.path}: could not take the lock (another process keeps taking it)")

    def release(self) -> None:
        """Remove the lock file if this process still owns it."""
        if self.held and (self.owner() or {}).get("pid") == os.getpid():
            self.path.unlink(missing_ok=True)
        self.held = False

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def existing_run(run_dir: str | Path) -> list[str]:
    """The run files (:data:`RUN_MARKERS`, snapshots) a directory already holds."""
    d = Path(run_dir)
    found = [m for m in RUN_MARKERS if (d / m).exists()]
    if (d / "checkpoints").is_dir() and any((d / "checkpoints").glob("*.pt")):
        found += [] if "checkpoints/last.pt" in found else ["checkpoints/*.pt"]
    return found


def claim_new_run(run_dir: str | Path, overwrite: bool, resume_hint: str = "resume=") -> None:
    """Check that a new run may write into ``run_dir``; with ``overwrite`` remove an old run.

    Call while holding the directory's :class:`RunLock`.

    Raises:
        RunDirError: the directory holds a run and ``overwrite`` is false.
    """
    d = Path(run_dir)
    found = existing_run(d)
    if not found:
        return
    if not overwrite:
        raise RunDirError(f"{d} already holds a run ({', '.join(found)}): continue it with "
                          f"{resume_hint}{d}, or start over in it with overwrite=true")  # fmt: skip
    for name in RUN_FILES:
        p = d / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()
    log.warning(
        "overwrite=true: removed the previous run's files from %s (%s)", d, ", ".join(found)
    )


def clean_stale_temps(directory: str | Path) -> list[Path]:
    """Remove the ``.NAME.*.tmp`` files of atomic writes that a killed process left.

    Call while holding the run's :class:`RunLock` (no other writer can be mid-write).
    """
    d = Path(directory)
    if not d.is_dir():
        return []
    stale = sorted(p for p in d.glob(".*.tmp") if p.is_file())
    for p in stale:
        p.unlink(missing_ok=True)
    if stale:
        log.warning("removed %d stale temporary file(s) of an interrupted checkpoint write in %s: %s",
                    len(stale), d, ", ".join(p.name for p in stale))  # fmt: skip
    return stale


def preflight_run_dir(run_dir: str | Path, option: str, resume: bool, overwrite: bool) -> None:
    """The checks of a run directory that need nothing but its path, for apps to run before
    their framework creates it: writable, not in use, and (for a new run) not holding a run
    unless ``overwrite``.

    Raises:
        RunDirError: one line naming the directory and the problem.
    """
    if not resume:
        check_writable(run_dir, option, is_dir=True)
    busy = RunLock(run_dir).busy_message()
    if busy:
        raise RunDirError(busy)
    if not resume and not overwrite:
        claim_new_run(run_dir, overwrite=False)


def error_line(e: BaseException) -> str:
    """One line for an error an app reports: a failed write (``OSError`` with a file name,
    not a missing input) as :func:`os_error_line`, anything else as its message."""
    if isinstance(e, OSError) and not isinstance(e, FileNotFoundError) and e.filename:
        return os_error_line(e)
    return str(e)
