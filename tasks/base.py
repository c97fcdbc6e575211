"""The task contract every learner, evaluator and app works against.

A :class:`Task` is a batch of ``num_envs`` envs on one engine that reset themselves when
their episodes end. ``step`` returns a :class:`StepResult`: the observation, the total
reward *and* its named terms, terminations and time-outs apart (with their causes) and
the episodes that ended. Tasks are built from a :class:`TaskSpec` (plain, picklable data:
what a checkpoint stores and what every Ray actor rebuilds its envs from) by
:func:`make_task`, which looks the task up in the :data:`TASKS` registry.

A new task is a package under ``tasks/`` with a :class:`Task` subclass, a config
dataclass, a :class:`TaskEntry` registered in :mod:`mimic2dm.tasks.registry` and one
``conf/task/<name>.yaml``.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from mimic2dm.engines.base import Engine


@dataclass
class TaskSpec:
    """Everything needed to build a batch of envs of one task, as plain data.

    Attributes:
        task: task registry name (``tracking2d``, ``stand``).
        character: character registry name (``humanoid``, ``dog``).
        engine: the engine group's options (``conf/engine/<name>.yaml``, ``name`` included),
            passed to the backend unchanged.
        objects: props simulated in every env (``("ball",)``).
        control_hz: policy rate (Hz).
        config: the task's own settings (its config dataclass as a dict).
        data: reference files of tasks that track data (2D-motion ``.npz``).
    """

    task: str
    character: str
    engine: dict = field(default_factory=lambda: {"name": "mujoco"})
    objects: tuple[str, ...] = ()
    control_hz: float = 30.0
    config: dict = field(default_factory=dict)
    data: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        """Plain data (dicts, lists, numbers, strings): what checkpoints store."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping) -> TaskSpec:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"task spec: unknown keys {unknown}; valid keys: {sorted(names)}")
        d = dict(d)
        d["objects"] = tuple(d.get("objects", ()))
        d["data"] = tuple(str(x) for x in d.get("data", ()))
        return cls(**d)

    def with_config(self, **changes) -> TaskSpec:
        """A copy whose task config has ``changes`` (top-level keys of the config)."""
        return dataclasses.replace(self, config={**self.config, **changes})

    def with_engine(self, **changes) -> TaskSpec:
        """A copy whose engine options have ``changes`` (e.g. ``num_threads=1``)."""
        return dataclasses.replace(self, engine={**self.engine, **changes})


@dataclass
class StepResult:
    """One control step of ``N`` envs (every tensor on the engine's device).

    Attributes:
        obs: ``[N, D]`` observation after auto-reset (what the next action sees).
        reward: ``[N]`` total reward (the scaled terms).
        terms: ``{name: [N]}`` every reward term, zero-weight ones included.
        terminated: ``[N]`` bool, the episode failed (no bootstrapping).
        truncated: ``[N]`` bool, a time-out (the learner bootstraps it).
        causes: ``{cause: [N] bool}`` why episodes ended (``timeout`` included).
        episode_length: ``[N]`` steps of the episode that ended here (0 where none did).
        episode_return: ``[N]`` its summed reward (0 where none ended).
    """

    obs: torch.Tensor
    reward: torch.Tensor
    terms: dict[str, torch.Tensor]
    terminated: torch.Tensor
    truncated: torch.Tensor
    causes: dict[str, torch.Tensor]
    episode_length: torch.Tensor
    episode_return: torch.Tensor

    @property
    def done(self) -> torch.Tensor:
        """``[N]`` bool, the episode ended (terminated or truncated)."""
        return self.terminated | self.truncated


class Task(abc.ABC):
    """A batch of envs of one task on one engine, with per-env auto-reset.

    Subclasses implement the abstract methods; ``obs_layout`` tells the learner's network
    how an observation splits (``prop`` numbers, then ``views`` blocks of ``view``).

    Args:
        engine: the simulator (any backend); the task owns it (``close`` closes it).
        seed: seed of the task's own RNG (episode draws).
    """

    name: str = ""

    def __init__(self, engine: Engine, seed: int = 0):
        self.engine = engine
        self.device = engine.device
        self.gen = torch.Generator().manual_seed(int(seed))

    @property
    def num_envs(self) -> int:
        return self.engine.num_envs

    @property
    def action_dim(self) -> int:
        """Actions are ``[N, action_dim]`` in [-1, 1]."""
        return self.engine.num_dofs

    @abc.abstractmethod
    def obs_layout(self) -> dict[str, int]:
        """``{"prop": P, "view": W, "views": V}``: observations are ``[prop | view_1..view_V]``
        (plus ``critic``: columns only the critic sees, or ``privileged``: a teacher's part,
        appended after them where a task has one)."""

    @property
    def obs_dim(self) -> int:
        lay = self.obs_layout()
        extra = int(lay.get("critic", 0)) + int(lay.get("privileged", 0))
        return int(lay["prop"]) + int(lay["views"]) * int(lay["view"]) + extra

    @abc.abstractmethod
    def reset(self, env_ids: torch.Tensor) -> None:
        """Start new episodes in ``env_ids [E]``."""

    @abc.abstractmethod
    def observe(self) -> torch.Tensor:
        """Observation ``[N, obs_dim]`` of the current state."""

    @abc.abstractmethod
    def step(self, actions: torch.Tensor) -> StepResult:
        """Apply ``actions [N, action_dim]`` for one control step; done envs reset themselves."""

    def step_begin(self, actions: torch.Tensor) -> None:
        """First half of :meth:`step`: everything up to starting the physics, which may
        then run in the background (``Engine.step_async``) until :meth:`step_end`.

        A learner that steps several tasks overlaps one task's physics with its work on
        the others (``train.env_groups``). Between the two calls the caller must not use
        this task. ``step_begin(a); step_end()`` equals ``step(a)``; this default simply
        defers the whole step to :meth:`step_end` (no overlap).
        """
        if getattr(self, "_begun", None) is not None:
            raise RuntimeError(f"{type(self).__name__}.step_begin called twice without step_end")
        self._begun = actions

    def step_end(self) -> StepResult:
        """Second half of :meth:`step` (after :meth:`step_begin`): the step's result."""
        actions = getattr(self, "_begun", None)
        if actions is None:
            raise RuntimeError(f"{type(self).__name__}.step_end called without step_begin")
        self._begun = None
        return self.step(actions)

    def observe_values(self, values: torch.Tensor) -> int | torch.Tensor:
        """The learner's critic values ``[N]`` of the states behind the last observation
        (adaptive state initialisation uses them). Returns how many were used (an int or
        a 0-d tensor, so that the step path needs no host read)."""
        return 0

    def stats(self) -> dict[str, float]:
        """Task-specific statistics for logging (host numbers; called once per epoch)."""
        return {}

    @abc.abstractmethod
    def state_dict(self) -> dict:
        """What outlives episodes (buffers, the task's RNG), for exact resume."""

    @abc.abstractmethod
    def load_state_dict(self, d: dict) -> None: ...

    @abc.abstractmethod
    def episode_state(self) -> dict:
        """The episodes in flight (per-env tensors and the engine's exact state), with
        ``num_envs``: with :meth:`state_dict`, what an exact resume needs."""

    @abc.abstractmethod
    def load_episode_state(self, d: dict) -> None:
        """Continue the episodes of :meth:`episode_state` (same spec and ``num_envs``)."""

    def close(self) -> None:
        self.engine.close()


@dataclass(frozen=True)
class TaskEntry:
    """A registered task.

    Attributes:
        name: registry name (also ``name:`` in ``conf/task/<name>.yaml``).
        description: one line for ``mimic2dm list tasks``.
        config_cls: the task's config dataclass (``TaskSpec.config`` is checked against it).
        build: ``fn(spec, engine, seed) -> Task``.
        characters: characters the task supports (None: every registered one).
        needs_data: the task tracks reference files (``TaskSpec.data``).
        check_data: optional ``fn(motion) -> str | None`` on each loaded reference clip
            (``Motion2D`` or ``Motion3D``) at start-up, before any run dir exists: None when
            the task can track it, else what it expects instead (words for the ``ConfigError``
            naming ``data.clips[i].file``), e.g. cameras that a video clip lacks.
        evaluate: optional ``fn(policy, data, views, json_out, picture_out, video_out) -> report``
            behind ``mimic2dm eval``.
        upgrade_spec: optional ``fn(old_spec_dict) -> TaskSpec dict`` for specs stored by older code.
    """

    name: str
    description: str
    config_cls: type
    build: Callable[..., Task]
    characters: tuple[str, ...] | None = None
    needs_data: bool = False
    check_data: Callable[[Any], str | None] | None = None
    evaluate: Callable[..., dict] | None = None
    upgrade_spec: Callable[[dict], dict] | None = None

    def parse_config(self, values: Mapping | None, where: str | None = None) -> Any:
        """The task config dataclass from plain ``values`` (``ConfigError`` naming ``task.<key>``
        on unknown keys, bad types or values out of range)."""
        from mimic2dm.utils.config import from_mapping

        return from_mapping(self.config_cls, dict(values or {}), where or "task")
