"""Atomic checkpoints and exact resume, shared by every training job.

A checkpoint is one ``torch.save`` dict written to a temporary file in the same
directory, flushed to disk, then renamed over the target: a crash at any moment leaves
either the old or the new file, never a truncated one. RNG states (python, numpy,
torch) travel in the checkpoint so that a resumed run continues the same stream.
"""

from __future__ import annotations

import os
import pickle
import random
import tempfile
import types
from pathlib import Path
from typing import Any

import numpy as np
import torch


class CheckpointWriteError(OSError):
    """Writing a checkpoint failed (full disk, read-only directory...): ``filename`` is the
    checkpoint's path; the previous file of that name is still whole."""


def current_umask() -> int:
    """This process's umask (read from ``/proc`` where possible: setting it to read it back
    is not thread-safe)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_torch_save(obj: Any, path: str | Path) -> Path:
    """``torch.save(obj)`` to ``path`` atomically (temp file + fsync + ``os.replace``).

    The file gets the mode an ordinary write would (``0o666 & ~umask``; ``mkstemp`` makes
    its files 0600, which would hide checkpoints from the rest of a group).

    Raises:
        CheckpointWriteError: any ``OSError`` of the write, naming ``path``.
    """
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~current_umask())
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError) and not isinstance(e, CheckpointWriteError):
            raise CheckpointWriteError(e.errno, e.strerror or str(e), str(path)) from e
        raise
    return path


RECORD_MODULES = ("mimic2dm.tasks.", "mimic2dm.geometry.virtual")
"""Modules whose pickled objects load as :class:`Record` s: checkpoints of older code stored
task specs as these classes; loading them as plain fields means moving or changing a class
never breaks an old run (new checkpoints store plain data only)."""


class Record:
    """An object of a class that an older checkpoint pickled: its fields, by name (``vars``).

    ``pickled_as`` is the class's ``module.name``.
    """

    pickled_as = ""

    def __setstate__(self, state) -> None:
        if isinstance(state, tuple):  # (dict, slots) of classes with __slots__
            state = {**(state[0] or {}), **(state[1] or {})}
        self.__dict__.update(state or {})


class _RecordUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if module.startswith(RECORD_MODULES):
            return type(name, (Record,), {"pickled_as": f"{module}.{name}"})
        return super().find_class(module, name)


_record_pickle = types.SimpleNamespace(
    __name__="pickle",
    Unpickler=_RecordUnpickler,
    load=lambda f, **kw: _RecordUnpickler(f, **kw).load(),
)


def records_to_plain(obj: Any) -> Any:
    """``obj`` with every :class:`Record` turned into a dict of its fields (recursively)."""
    if isinstance(obj, Record):
        return {k: records_to_plain(v) for k, v in vars(obj).items()}
    if isinstance(obj, dict):
        return {k: records_to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(records_to_plain(v) for v in obj)
    return obj


def load_checkpoint(path: str | Path, map_location: str = "cpu") -> dict:
    """Load a checkpoint written by :func:`atomic_torch_save`; clear error if unreadable.

    Objects of :data:`RECORD_MODULES` load as :class:`Record` s (see there).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no checkpoint file")
    try:
        return torch.load(
            path, map_location=map_location, weights_only=False, pickle_module=_record_pickle
        )
    except Exception as e:  # noqa: BLE001 - any unpickling failure means a bad file
        raise ValueError(f"{path}: not a readable checkpoint ({type(e).__name__}: {e})") from e


def rng_state() -> dict:
    """Python, numpy and torch RNG states."""
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }


def set_rng_state(state: dict) -> None:
    """Restore :func:`rng_state`."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def seed_everything(seed: int) -> None:
    """Seed python, numpy and torch."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class CheckpointManager:
    """``RUN_DIR/checkpoints/``: ``last.pt`` (every save), ``best.pt`` (best metric so far),
    and ``step_<N>.pt`` snapshots of which the newest ``keep`` are kept."""

    def __init__(self, run_dir: str | Path, keep: int = 3, higher_is_better: bool = True):
        self.dir = Path(run_dir) / "checkpoints"
        self.keep = keep
        self.sign = 1.0 if higher_is_better else -1.0
        self.best: float | None = None

    @property
    def last(self) -> Path:
        return self.dir / "last.pt"

    @property
    def best_path(self) -> Path:
        return self.dir / "best.pt"

    def save(
        self, state: dict, step: int, metric: float | None = None, snapshot: bool = False
    ) -> Path:
        """Write ``last.pt`` (and ``best.pt`` when ``metric`` improves, ``step_<N>.pt`` when asked)."""
        state = {**state, "step": step, "best_metric": self.best}
        if metric is not None and (self.best is None or self.sign * metric > self.sign * self.best):
            self.best = metric
            state["best_metric"] = metric
            atomic_torch_save(state, self.best_path)
        atomic_torch_save(state, self.last)
        if snapshot:
            atomic_torch_save(state, self.dir / f"step_{step:09d}.pt")
            for old in sorted(self.dir.glob("step_*.pt"))[: -self.keep]:
                old.unlink()
        return self.last

    def load_last(self) -> dict | None:
        """The last checkpoint (restoring the best metric seen), or None when there is none."""
        if not self.last.is_file():
            return None
        state = load_checkpoint(self.last)
        self.best = state.get("best_metric")
        return state
