"""Simulation engines behind one interface (:class:`mimic2dm.engines.base.Engine`).

Backends are registered by name and imported on first use, so optional simulators stay
optional::

    from mimic2dm.engines import load_engine
    engine = load_engine("mujoco", "humanoid", num_envs=64, objects=("ball",))

This module imports neither torch nor any simulator: an entry point that runs on Isaac
Gym calls :func:`preload_backend` before anything imports torch.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from mimic2dm.utils.registry import Registry

ENGINES: Registry[Any] = Registry("engine")
"""Engine classes by name; ``ENGINES.load(name)`` imports the backend and returns its class."""


def _lazy(module: str, cls: str):
    def factory():
        return getattr(importlib.import_module(module), cls)

    return factory


def _gpu_only(name: str, needs: str):
    def factory():
        raise ImportError(
            f"engine {name!r} needs a GPU machine with {needs}; it is not available on this "
            f"CPU machine and its backend is not part of this build. Use engine 'mujoco'."
        )

    return factory


def preload_backend(name: str) -> None:
    """Import what backend ``name`` needs before torch; call it first in an entry point.

    The one place that knows Isaac Gym must be imported before torch.

    Raises:
        ImportError: torch is already imported, or the simulator is not installed.
    """
    if name != "isaacgym":
        return
    if "torch" in sys.modules and "isaacgym" not in sys.modules:
        raise ImportError(
            "isaacgym must be imported before torch: call "
            "mimic2dm.engines.preload_backend('isaacgym') before importing torch or any "
            "module that imports it"
        )
    importlib.import_module("isaacgym")


ENGINES.register("mujoco", _lazy("mimic2dm.engines.mujoco_engine", "MujocoEngine"))
ENGINES.register("isaacgym", _gpu_only("isaacgym", "Isaac Gym (CUDA; not on any package registry)"))
ENGINES.register("newton", _gpu_only("newton", "Newton and warp on CUDA"))


def engine_names() -> list[str]:
    """Registered engine names."""
    return ENGINES.names()


def load_engine(name: str, *args, **kwargs):
    """Build engine ``name`` (an :class:`~mimic2dm.engines.base.Engine`).

    Args:
        name: registered engine name (``"mujoco"``).
        *args, **kwargs: the engine's arguments: ``character, num_envs, objects=(),
            control_dt=1/30, physics_dt=1/60`` plus backend options.

    Raises:
        KeyError: unknown ``name``; the message lists the valid names.
        ImportError: the backend cannot run on this machine.
    """
    return ENGINES.load(name)(*args, **kwargs)
