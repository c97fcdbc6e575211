"""The task registry: ``TASKS``, ``load_task(name)`` and the one ``make_task(spec, ...)``.

Every sub-package of ``mimic2dm.tasks`` but ``common`` (the skeleton the tasks share) is a
task, registered under its package name and imported on first use; it exposes its
:class:`~.base.TaskEntry` as ``ENTRY``. A task
package elsewhere registers itself with ``TASKS.register(name, lambda: ENTRY)``.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from mimic2dm.tasks.base import Task, TaskEntry, TaskSpec

from mimic2dm.utils.registry import Registry

TASKS: Registry[TaskEntry] = Registry("task")


NOT_TASKS = ("common",)
"""Sub-packages that are not tasks."""


def _lazy(module: str) -> callable:
    return lambda: importlib.import_module(module).ENTRY


for _m in pkgutil.iter_modules([str(Path(__file__).parent)]):
    if _m.ispkg and _m.name not in NOT_TASKS:
        TASKS.register(_m.name, _lazy(f"mimic2dm.tasks.{_m.name}"))


def load_task(name: str) -> TaskEntry:
    """The registered task ``name``; ``KeyError`` listing the valid names otherwise."""
    return TASKS.load(name)


def task_names() -> list[str]:
    return TASKS.names()


def describe_tasks() -> dict[str, str]:
    """``{name: one-line description}`` of every registered task (imports each)."""
    return {n: load_task(n).description for n in TASKS.names()}


def build_engine(spec: TaskSpec, num_envs: int):
    """The engine of ``spec`` with ``num_envs`` envs: the only place tasks create engines.

    The engine options are ``spec.engine`` unchanged, with the task's control rate.
    """
    from mimic2dm.engines import load_engine
    from mimic2dm.engines.base import EngineOptions

    opts = EngineOptions.from_mapping(
        {**spec.engine, "control_hz": float(spec.control_hz)}, "engine"
    )
    return load_engine(opts, spec.character, num_envs, tuple(spec.objects))


def check_spec(spec: TaskSpec) -> TaskEntry:
    """The entry of ``spec.task`` after checking the character and data it needs."""
    entry = load_task(spec.task)
    if entry.characters is not None and spec.character not in entry.characters:
        raise ValueError(f"task {spec.task!r} supports characters {list(entry.characters)}, "
                         f"not {spec.character!r}")  # fmt: skip
    if entry.needs_data and not spec.data:
        raise ValueError(f"task {spec.task!r}: no reference file given (TaskSpec.data; expected "
                         "one or more 2D-motion .npz files)")  # fmt: skip
    return entry


def make_task(spec: TaskSpec, num_envs: int, seed: int = 0) -> Task:
    """Build the engine and the task described by ``spec`` with ``num_envs`` envs."""
    entry = check_spec(spec)
    engine = build_engine(spec, num_envs)
    try:
        return entry.build(spec, engine, seed)
    except BaseException:
        engine.close()
        raise


def supported_characters(entry: TaskEntry) -> list[str]:
    """Characters ``entry`` runs with (every registered one when it names none)."""
    from mimic2dm.characters import CHARACTERS

    return list(entry.characters) if entry.characters is not None else CHARACTERS.names()
