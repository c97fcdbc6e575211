"""The tracker driven from outside: by a streaming reference (the hierarchical controller,
``mimic2dm control``) or over whole clips (evaluation, FID rollouts).

A driver builds the task with :func:`streaming_task` (the run's settings for evaluation:
no early termination, no time-out, no adaptive state initialisation) and then uses only
the task's public methods:

- ``observe()``: the observation ``[N, obs_dim]`` the policy acts on;
- ``advance(actions)``: the physics and the reference one frame on (no reward, no reset);
- ``start_episodes(env_ids, starts, states)``: start from chosen states;
- ``refresh()``: after moving the reference's cameras between steps;
- ``project_character()`` / ``reference(frame)``: the character's and the reference's
  keypoints in every view of the current frame;
- ``frame``, ``engine`` and ``source`` (read only).

:func:`observation_layout` gives a tracker's observation sizes without building a task.
"""

from __future__ import annotations

from mimic2dm.tasks.base import TaskSpec
from mimic2dm.tasks.common.evaluation import evaluation_config
from mimic2dm.tasks.common.terms import proprioception_size
from mimic2dm.tasks.tracking2d.config import TrackingConfig
from mimic2dm.tasks.tracking2d.factory import tracking_config
from mimic2dm.tasks.tracking2d.observations import observation_2d_size
from mimic2dm.tasks.tracking2d.source import ReferenceSource
from mimic2dm.tasks.tracking2d.task import Tracking2DTask

from mimic2dm.engines.base import Engine


def streaming_config(spec: TaskSpec, num_views: int) -> TrackingConfig:
    """The settings of ``spec``'s tracker for ``num_views`` driven views: no early
    termination, no time-out and no adaptive state initialisation (the driver decides
    where episodes start and how long they run)."""
    return evaluation_config(tracking_config(spec), num_views=num_views)


def streaming_task(spec: TaskSpec, engine: Engine, source: ReferenceSource,
                   task_cls: type = Tracking2DTask) -> Tracking2DTask:  # fmt: skip
    """A tracker of ``spec`` on ``engine`` that follows ``source`` (its views and envs).

    Args:
        spec: the tracker's ``TaskSpec`` (a checkpoint's ``env_spec``).
        engine: the simulator (``source.num_envs`` envs).
        source: the reference: a :class:`~.source.StreamingReference` filled as it goes, or
            clips (:class:`~.source.ClipReference`).
        task_cls: the tracker or a task built on it (``DribbleTask``).
    """
    return task_cls(engine, source, streaming_config(spec, source.num_views), seed=0)


def observation_layout(engine: Engine, num_future: int, num_views: int = 1) -> dict[str, int]:
    """``{"prop", "view", "views"}`` of the tracker on ``engine``'s character (what
    ``Tracking2DTask.obs_layout`` returns), without building a task.

    Args:
        engine: any engine of the character (its bodies, DoFs and keypoints count).
        num_future: future reference frames per view (``task.num_future``).
        num_views: views per observation.
    """
    spec = engine.character
    prop = proprioception_size(len(engine.body_names), engine.num_dofs, len(spec.key_bodies))
    view = observation_2d_size(engine.num_keypoints, num_future)
    return {"prop": prop, "view": view, "views": num_views}
