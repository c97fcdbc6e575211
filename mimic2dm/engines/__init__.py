"""Simulation engines behind one interface (:class:`mimic2dm.engines.base.Engine`).

Backends are registered by name and imported on first use, so optional simulators stay
optional::

    from mimic2dm.engines import load_engine
    engine = load_engine("mujoco", "humanoid", num_envs=64, objects=("ball",))
    engine = load_engine(EngineOptions(physics_hz=120.0, device="cuda:0"), "dog", 16)

Every backend takes one :class:`~mimic2dm.engines.base.EngineOptions` (the keys of
``conf/engine/<name>.yaml``); nothing outside this package branches on an engine name.

This module imports neither torch nor any simulator. ``newton`` is an optional extra
(``pip install -e .[newton]``); without it, loading that engine raises ``ImportError``
saying how to install it.
"""

from __future__ import annotations

import importlib
from typing import Any

from mimic2dm.utils.registry import Registry

ENGINES: Registry[Any] = Registry("engine")
"""Engine classes by name; ``ENGINES.load(name)`` imports the backend and returns its class."""


def _lazy(module: str, cls: str):
    def factory():
        return getattr(importlib.import_module(module), cls)

    return factory


ENGINES.register("mujoco", _lazy("mimic2dm.engines.mujoco_engine", "MujocoEngine"),
                 description="batched MuJoCo on the CPU (threaded; the reference backend)")  # fmt: skip
ENGINES.register("newton", _lazy("mimic2dm.engines.newton_engine", "NewtonEngine"),
                 description="Newton's MuJoCo-Warp solver on CPU or CUDA (optional extra: .[newton])")  # fmt: skip


def engine_names() -> list[str]:
    """Registered engine names."""
    return ENGINES.names()


def load_engine(engine, character, num_envs: int, objects=(), **overrides):
    """Build an :class:`~mimic2dm.engines.base.Engine` from its options.

    Args:
        engine: an ``EngineOptions``, or a registered engine name (default options).
        character: registry name (``"humanoid"``) or a ``CharacterSpec``.
        num_envs: number of parallel envs.
        objects: prop names (``("ball",)``).
        **overrides: ``EngineOptions`` fields to change (``num_threads=1``, ``device="cuda"``).

    Raises:
        KeyError: unknown engine name; the message lists the valid names.
        ImportError: the backend cannot run on this machine.
        ValueError: an unknown or invalid option, named.
    """
    from mimic2dm.engines.base import EngineOptions

    options = EngineOptions(name=engine) if isinstance(engine, str) else engine
    if not isinstance(options, EngineOptions):
        raise TypeError(f"engine must be a name or an EngineOptions, got {type(engine).__name__}")
    if overrides:
        options = options.replace(**overrides)
    return ENGINES.load(options.name)(character, num_envs, tuple(objects), options)
