"""Build a tracking task from a :class:`~mimic2dm.tasks.base.TaskSpec` and its engine, so
that the learner's process and every Ray actor build identical environments."""

from __future__ import annotations

from mimic2dm.tasks.base import TaskSpec
from mimic2dm.tasks.tracking2d.config import TrackingConfig
from mimic2dm.tasks.tracking2d.reference import ReferenceLibrary
from mimic2dm.tasks.tracking2d.source import ClipReference
from mimic2dm.tasks.tracking2d.task import Tracking2DTask

from mimic2dm.engines.base import Engine


def tracking_config(spec: TaskSpec) -> TrackingConfig:
    """The task's checked settings from ``spec.config`` (parsed by ``spec.task``'s entry, so
    that tasks built on this one, such as ``dribble``, get their own config subclass)."""
    from mimic2dm.tasks.registry import load_task

    return load_task(spec.task).parse_config(spec.config)


def load_library(spec: TaskSpec, cfg: TrackingConfig, **overrides) -> ReferenceLibrary:
    """The reference clips of ``spec.data`` at the task's control rate."""
    kw = {
        "view_mode": cfg.view_mode,
        "camera_mode": cfg.camera_mode,
        "camera_config": cfg.camera,
        **overrides,
    }
    return ReferenceLibrary.from_files(list(spec.data), spec.control_hz, **kw)


def build(
    spec: TaskSpec, engine: Engine, seed: int = 0, task_cls: type = Tracking2DTask
) -> Tracking2DTask:
    """The task of ``spec`` on ``engine``: clips of ``spec.data``, views drawn per episode
    (``task_cls``: the tracker or a task built on it, such as ``DribbleTask``)."""
    cfg = tracking_config(spec)
    source = ClipReference(load_library(spec, cfg), engine.num_envs, cfg.num_views, engine.device)
    return task_cls(engine, source, cfg, seed=seed)
