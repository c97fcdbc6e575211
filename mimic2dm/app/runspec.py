"""The training config parsed and checked once: :func:`parse_run` turns the composed Hydra
config into a frozen :class:`RunSpec` that the later steps trust.

``conf/train/*.yaml`` is checked against :class:`~mimic2dm.rl.config.TrainConfig`,
``conf/ray/*.yaml`` against :class:`~mimic2dm.rl.config.RayConfig`, ``conf/engine`` against
:class:`~mimic2dm.engines.base.EngineOptions`, ``conf/logger`` against
:class:`~mimic2dm.utils.run_logging.LoggerConfig` and ``conf/task/<name>.yaml`` against the
config dataclass of the task it names (unknown keys, wrong types and values out of range
fail at start-up, naming the key). :meth:`RunSpec.task_spec` gives the ``TaskSpec`` every
env is built from, without parsing again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from mimic2dm.engines.base import EngineOptions
from mimic2dm.rl.config import RayConfig, TrainConfig, minibatch_size, total_envs
from mimic2dm.tasks.base import TaskSpec
from mimic2dm.tasks.registry import check_spec, load_task
from mimic2dm.utils.config import from_mapping, to_plain
from mimic2dm.utils.run_logging import LoggerConfig
from mimic2dm.utils.validate import ConfigError, check

SPEC_TASK_KEYS = ("name", "control_hz", "objects")
"""Keys of the ``task`` group that go to the ``TaskSpec`` rather than to the task's config."""


@dataclass(frozen=True)
class RunSpec:
    """A tracker config, every group checked (:func:`parse_run`).

    Attributes:
        train, ray, logger: the checked ``train``, ``ray`` and ``logger`` groups.
        engine: the checked ``engine`` group at the task's control rate.
        engine_group: the ``engine`` group as given (every key reaches the backend).
        task: the registered task's name; task_config: its checked config dataclass.
        control_hz: the task's control rate.
        character: the character's name; objects: props simulated in every env.
        needs_data: the task tracks the ``data`` clips.
        seed: the run's seed.
    """

    train: TrainConfig
    ray: RayConfig
    logger: LoggerConfig
    engine: EngineOptions
    engine_group: dict
    task: str
    task_config: Any
    control_hz: float
    character: str
    objects: tuple[str, ...]
    needs_data: bool
    seed: int

    def task_spec(self, data_files: list[str]) -> TaskSpec:
        """The picklable ``TaskSpec`` of this run over ``data_files`` (the prepared clips of
        the ``data`` group; ignored by tasks that track no data)."""
        return _task_spec(self.task, self.character, self.engine_group, self.objects,
                          self.control_hz, self.task_config, data_files)  # fmt: skip


def _task_spec(task: str, character: str, engine: dict, objects: tuple[str, ...],
               control_hz: float, config: Any, data_files: list[str]) -> TaskSpec:  # fmt: skip
    spec = TaskSpec(
        task=task,
        character=character,
        engine=dict(engine),
        objects=tuple(objects),
        control_hz=control_hz,
        config=to_plain(config),
        data=tuple(str(f) for f in data_files) if load_task(task).needs_data else (),
    )
    check_spec(spec)
    return spec


def _checked(schema: type, node: Any, where: str):
    """Merge a config node into a dataclass schema; its ``__post_init__`` checks the ranges.

    Raises:
        ConfigError: unknown key, wrong type or value out of range, naming the key.
    """
    return from_mapping(schema, node, where)


def train_config(cfg: DictConfig) -> TrainConfig:
    """The ``train`` group as a checked :class:`TrainConfig`."""
    return _checked(TrainConfig, cfg.train, "train")


def ray_config(cfg: DictConfig) -> RayConfig:
    """The ``ray`` group as a checked :class:`RayConfig`."""
    return _checked(RayConfig, cfg.ray, "ray")


def engine_config(cfg: DictConfig, control_hz: float | None = None) -> EngineOptions:
    """The ``engine`` group as checked :class:`EngineOptions` (every key reaches the backend);
    ``control_hz`` (the task's rate) overrides the group's own."""
    raw = OmegaConf.to_container(cfg.engine, resolve=True)
    if control_hz is not None:
        raw["control_hz"] = control_hz
    return EngineOptions.from_mapping(raw, "engine")


def logger_config(cfg: DictConfig) -> LoggerConfig:
    """The ``logger`` group as a checked :class:`LoggerConfig`."""
    return _checked(LoggerConfig, cfg.logger, "logger")


def task_config(cfg: DictConfig) -> tuple[str, Any, float]:
    """The ``task`` group: the registered task's name, its checked config and its control rate.

    Raises:
        ConfigError: no ``name:``, an unknown task, or a key out of range (named).
    """
    t = OmegaConf.to_container(cfg.task, resolve=True)
    if "name" not in t:
        raise ConfigError("task.name", None, "the registered task (e.g. tracking2d)")
    name = str(t["name"])
    try:
        entry = load_task(name)
    except (KeyError, ValueError) as e:
        raise ConfigError("task.name", name, f"a registered task ({e})") from None
    config = entry.parse_config({k: v for k, v in t.items() if k not in SPEC_TASK_KEYS}, "task")
    control_hz = float(t.get("control_hz", cfg.engine.get("control_hz", 30.0)))
    check("task.control_hz", control_hz, gt=0)
    return name, config, control_hz


def task_spec_from_cfg(cfg: DictConfig, data_files: list[str]) -> TaskSpec:
    """The picklable :class:`TaskSpec` of the ``task``/``character``/``engine`` groups, for
    callers that need no other group (one parse; :func:`parse_run` checks every group).

    Args:
        cfg: the composed config (``task.name`` picks the registered task).
        data_files: the reference files of the ``data`` group (already prepared), for tasks
            that track data.
    """
    name, config, control_hz = task_config(cfg)
    engine_config(cfg, control_hz)  # every key of the engine group reaches the backend: check it
    return _task_spec(name, str(cfg.character.name), OmegaConf.to_container(cfg.engine, resolve=True),
                      tuple(cfg.task.get("objects") or ()), control_hz, config, data_files)  # fmt: skip


def check_data_files(cfg: DictConfig, control_hz: float, made: list[str] | None = None) -> None:
    """Check the ``data`` clips: the files that already exist (recipes are made, and checked
    with ``made``, later). Each is read (``Motion3D`` or ``Motion2D``, by its ``kind``), must
    be trackable, must pass the task's ``TaskEntry.check_data`` (e.g. tracking2d needs
    cameras), must use the character's keypoint set, and all must use the same one.

    Args:
        made: the prepared files (:func:`mimic2dm.app.data.prepare_data`): check these instead
            of the entries' existing files.

    Raises:
        ConfigError: ``data.clips`` is empty, an entry is neither a path nor ``{file, make?}``,
            or the task cannot track a clip (naming ``data.clips[i].file``).
        MotionFormatError: a clip is invalid, too short or fully masked (naming the file).
    """
    from mimic2dm.app.data import clip_entries

    if made is not None:
        _check_clips(cfg, control_hz, [(f"data.clips: {Path(f).name}", Path(f)) for f in made])
        return
    found = []
    for i, entry in enumerate(clip_entries(cfg.data)):
        path = Path(str(entry.get("file", "")))
        if path.is_absolute() and path.is_file():
            found.append((f"data.clips[{i}].file", path))
        elif path.is_absolute() and not entry.get("make"):
            raise ConfigError(f"data.clips[{i}].file", str(path), "an existing 2D-motion file")
    _check_clips(cfg, control_hz, found)


def _check_clips(cfg: DictConfig, control_hz: float, clips: list[tuple[str, Path]]) -> None:
    from mimic2dm.characters import load_character
    from mimic2dm.motion.format import check_trackable, load_motion2d, load_motion3d, read_kind

    task_check = load_task(str(cfg.task.name)).check_data
    character = OmegaConf.select(cfg, "character.name")
    try:
        want = load_character(str(character)).keypoint_set if character else None
    except (KeyError, ValueError) as e:
        raise ConfigError(
            "character.name", str(character), f"a registered character ({e})"
        ) from None
    for key, path in clips:
        m = load_motion3d(path) if read_kind(path) == "motion3d" else load_motion2d(path)
        check_trackable(m, path, control_hz)
        problem = task_check(m) if task_check else None
        have = getattr(m, "keypoint_set", None)  # a Motion3D of joint angles has none
        if not problem and want and have and have != want:
            problem = (f"a clip with the {want} keypoints of character={character}; it has {have} "
                       "keypoints (pick the matching character, e.g. character=dog for dog17)")  # fmt: skip
        if problem:
            raise ConfigError(key, str(path), problem)


def parse_run(cfg: DictConfig) -> RunSpec:
    """Check every group of a tracker config at start-up, before anything is created, once.

    Besides each group's schema: the seed, the minibatch against the run's envs and, for
    tasks that track data, the clips that already exist (:func:`check_data_files`).

    Raises:
        ConfigError: the first key out of range (named, with what is allowed).
        MotionFormatError: a data clip cannot be tracked.
    """
    tc, rc = train_config(cfg), ray_config(cfg)
    name, config, control_hz = task_config(cfg)
    engine = engine_config(cfg, control_hz)
    logger = logger_config(cfg)
    check("seed", cfg.seed, ge=0, integer=True)
    minibatch_size(tc, total_envs(tc, rc))
    needs_data = load_task(name).needs_data
    if needs_data:
        check_data_files(cfg, control_hz)
    return RunSpec(
        train=tc, ray=rc, logger=logger, engine=engine,
        engine_group=OmegaConf.to_container(cfg.engine, resolve=True),
        task=name, task_config=config, control_hz=control_hz, character=str(cfg.character.name),
        objects=tuple(cfg.task.get("objects") or ()), needs_data=needs_data, seed=int(cfg.seed),
    )  # fmt: skip
