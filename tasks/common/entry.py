"""The registry entry of a reference-tracking task."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from mimic2dm.tasks.base import TaskEntry


def lazy(module: str, name: str) -> Callable:
    """``module.name`` as a function that imports its module on the first call (a task
    package's ``__init__`` stays light: building or evaluating a task loads the rest)."""

    def call(*args, **kwargs):
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    return call


def reference_entry(name: str, description: str, config_cls: type, build: str | Callable,
                    evaluate: str | Callable, **extra) -> TaskEntry:  # fmt: skip
    """The :class:`~mimic2dm.tasks.base.TaskEntry` of a task that tracks reference files.

    Args:
        name, description, config_cls: as :class:`~mimic2dm.tasks.base.TaskEntry`.
        build, evaluate: the functions, or ``"module:function"`` imported on first use.
        extra: the entry's other fields (``check_data``, ``characters``, ...).
    """
    fn = lambda f: lazy(*f.split(":")) if isinstance(f, str) else f  # noqa: E731
    return TaskEntry(name=name, description=description, config_cls=config_cls, build=fn(build),
                     needs_data=True, evaluate=fn(evaluate), **extra)  # fmt: skip
