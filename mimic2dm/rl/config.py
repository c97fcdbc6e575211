"""Schemas of the learner's config groups and the one conversion from a Hydra config.

``conf/train/*.yaml`` is checked against :class:`TrainConfig` and ``conf/ray/*.yaml``
against :class:`RayConfig` (unknown keys and wrong types fail at start-up, naming the
key); ``conf/task/<name>.yaml`` against the config dataclass of the task it names.
:func:`task_spec_from_cfg` and :func:`rl_games_params` turn the composed config into the
``TaskSpec`` every env is built from and the params dict rl-games reads; nothing else in
the learner reads the Hydra config.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from mimic2dm.engines.base import EngineOptions
from mimic2dm.tasks.base import TaskSpec
from mimic2dm.tasks.registry import check_spec, load_task
from mimic2dm.utils.config import from_mapping, to_plain
from mimic2dm.utils.run_logging import LoggerConfig
from mimic2dm.utils.validate import ConfigError, check, check_choice, check_device

log = logging.getLogger(__name__)

ACTIVATIONS = ("relu", "tanh", "sigmoid", "elu", "selu", "swish", "gelu", "softplus")
"""Activations rl-games' network builder knows."""
ALGO_NAME = "mimic2dm_ppo"
NETWORK_NAME = "mimic2dm_view_mlp"
MODEL_NAME = "continuous_a2c_logstd"
PRECISIONS = ("fp32", "bf16", "auto")
"""``train.network.precision`` choices (docs/training.md "Network", precision)."""
SPEC_TASK_KEYS = ("name", "control_hz", "objects")
"""Keys of the ``task`` group that go to the ``TaskSpec`` rather than to the task's config."""


@dataclass
class NetworkConfig:
    """View-aggregation actor-critic (docs/design.md section 5): ``head(mean_v(encoder(prop, view_v)))``."""

    encoder_units: list[int] = field(default_factory=lambda: [512])
    head_units: list[int] = field(default_factory=lambda: [256, 256])
    activation: str = "relu"
    separate_critic: bool = True  # the critic gets its own encoder and head (same sizes)
    sigma_init: float = 0.05  # initial action std (actions in [-1, 1])
    learn_sigma: bool = False  # False: a fixed exploration std, as in DeepMimic-style trackers
    normalize_input: bool = (
        True  # running mean/std of proprioception and of views (shared by views)
    )
    obs_clip: float = 5.0  # clip of normalised observations
    mu_init_scale: float = (
        0.01  # scale of the action layer's initial weights (start near the default pose)
    )
    precision: str = (
        "auto"  # hidden layers' matmuls: fp32 | bf16 (autocast) | auto (bf16 where fast)
    )

    def __post_init__(self) -> None:
        for name in ("encoder_units", "head_units"):
            for i, u in enumerate(getattr(self, name)):
                check(f"train.network.{name}[{i}]", u, ge=1, integer=True)
        if not self.encoder_units:
            raise ConfigError("train.network.encoder_units", [], "at least one layer size")
        check_choice("train.network.activation", self.activation, ACTIVATIONS)
        check("train.network.sigma_init", self.sigma_init, gt=0)
        check("train.network.obs_clip", self.obs_clip, gt=0)
        check("train.network.mu_init_scale", self.mu_init_scale, ge=0)
        check_choice("train.network.precision", self.precision, PRECISIONS)


@dataclass
class CheckpointConfig:
    """``RUN_DIR/checkpoints``: ``last.pt``, ``best.pt`` and ``step_<epoch>.pt`` snapshots."""

    enabled: bool = True
    save_frequency: int = 25  # epochs between periodic checkpoints (last.pt + a snapshot)
    save_best_after: int = 10  # first epoch that may write best.pt
    keep: int = 3  # snapshots kept

    def __post_init__(self) -> None:
        check("train.checkpoint.save_frequency", self.save_frequency, ge=1, integer=True)
        check("train.checkpoint.save_best_after", self.save_best_after, ge=0, integer=True)
        check("train.checkpoint.keep", self.keep, ge=0, integer=True)


@dataclass
class TrainConfig:
    """PPO (rl-games ``a2c_continuous``) hyperparameters; Hydra group ``train``."""

    num_envs: int = 256
    horizon_length: int = 32
    minibatch_size: int = 4096
    mini_epochs: int = 2
    learning_rate: float = 1e-3
    lr_schedule: str = "linear"  # to 0 over max_seconds (else max_epochs) | fixed | adaptive
    kl_threshold: float = 0.008
    gamma: float = 0.99
    tau: float = 0.95
    e_clip: float = 0.2
    entropy_coef: float = 0.0
    critic_coef: float = 2.0
    clip_value: bool = True
    normalize_value: bool = True
    normalize_advantage: bool = True
    value_bootstrap: bool = True
    grad_norm: float = 1.0
    truncate_grads: bool = True
    bounds_loss_coef: float = 0.0001
    max_epochs: int = 200
    max_seconds: float = 0.0  # stop after this much training time (0: no limit)
    games_to_track: int = 100
    torch_threads: int = 2  # 0: rl-games' choice (min(4, cores))
    collect_threads: int = 1  # torch threads while collecting rollouts (0: torch_threads)
    env_groups: int = 1  # in-process env groups: one's physics overlaps the others' work
    device: str = "cpu"
    network: NetworkConfig = field(default_factory=NetworkConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)

    def __post_init__(self) -> None:
        for name in ("num_envs", "horizon_length", "minibatch_size", "mini_epochs", "max_epochs",
                     "games_to_track"):  # fmt: skip
            check(f"train.{name}", getattr(self, name), ge=1, integer=True)
        check("train.learning_rate", self.learning_rate, gt=0)
        check_choice("train.lr_schedule", self.lr_schedule, ("fixed", "linear", "adaptive"))
        check("train.kl_threshold", self.kl_threshold, gt=0)
        check("train.gamma", self.gamma, gt=0, le=1)
        check("train.tau", self.tau, ge=0, le=1)
        check("train.e_clip", self.e_clip, gt=0)
        for name in ("entropy_coef", "critic_coef", "bounds_loss_coef", "max_seconds"):
            check(f"train.{name}", getattr(self, name), ge=0)
        check("train.grad_norm", self.grad_norm, gt=0)
        check("train.torch_threads", self.torch_threads, ge=0, integer=True)
        check("train.collect_threads", self.collect_threads, ge=0, integer=True)
        check("train.env_groups", self.env_groups, ge=1, integer=True)
        if self.num_envs % self.env_groups:
            raise ConfigError(
                "train.env_groups", self.env_groups, f"a divisor of train.num_envs={self.num_envs}"
            )
        check_device("train.device", self.device)


@dataclass
class RayConfig:
    """Where the envs live; Hydra group ``ray`` (``none``: in the learner's process)."""

    enabled: bool = False
    address: str | None = None  # join this cluster; None starts a local one
    num_actors: int = 2
    envs_per_actor: int | None = None  # None: split train.num_envs evenly
    num_cpus: int | None = None  # CPUs of a local cluster (None: all)
    actor_cpus: float = 1.0  # CPUs reserved by each actor
    threads_per_actor: int = 1  # MuJoCo threads inside each actor
    step_timeout_s: float = 300.0  # an actor silent for this long is replaced
    pipeline: bool = False  # the learner computes one actor's actions while the others step
    temp_dir: str | None = (
        None  # Ray session dir (None: RUN_DIR/ray, or /tmp when that path is too long)
    )

    def __post_init__(self) -> None:
        check("ray.num_actors", self.num_actors, ge=1, integer=True)
        check("ray.envs_per_actor", self.envs_per_actor, ge=1, integer=True, optional=True)
        check("ray.num_cpus", self.num_cpus, ge=1, integer=True, optional=True)
        check("ray.actor_cpus", self.actor_cpus, gt=0)
        check("ray.threads_per_actor", self.threads_per_actor, ge=0, integer=True)
        check("ray.step_timeout_s", self.step_timeout_s, gt=0)


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
    """Build the picklable :class:`TaskSpec` from the ``task``/``character``/``engine`` groups.

    Args:
        cfg: the composed config (``task.name`` picks the registered task).
        data_files: the reference files of the ``data`` group (already prepared), for tasks
            that track data.
    """
    name, config, control_hz = task_config(cfg)
    engine_config(cfg, control_hz)  # every key of the engine group reaches the backend: check it
    spec = TaskSpec(
        task=name,
        character=str(cfg.character.name),
        engine=OmegaConf.to_container(cfg.engine, resolve=True),
        objects=tuple(cfg.task.get("objects") or ()),
        control_hz=control_hz,
        config=to_plain(config),
        data=tuple(str(f) for f in data_files) if load_task(name).needs_data else (),
    )
    check_spec(spec)
    return spec


def total_envs(tc: TrainConfig, rc: RayConfig) -> int:
    """Envs of a run: ``train.num_envs``, or ``ray.num_actors x ray.envs_per_actor`` when set.

    Raises:
        ConfigError: ``train.num_envs`` does not split evenly over the Ray actors.
    """
    if not rc.enabled:
        return tc.num_envs
    if rc.envs_per_actor:
        return rc.num_actors * rc.envs_per_actor
    if tc.num_envs % rc.num_actors:
        raise ConfigError("train.num_envs", tc.num_envs,
                          f"a multiple of ray.num_actors={rc.num_actors} (or set ray.envs_per_actor)")  # fmt: skip
    return tc.num_envs


def minibatch_size(tc: TrainConfig, num_envs: int, note: bool = False) -> int:
    """The PPO minibatch: ``train.minibatch_size``, clamped to the batch ``horizon_length x num_envs``.

    Small runs (``train.num_envs=8``) get one minibatch of the whole batch instead of an error.

    Args:
        note: log an info line when the minibatch is clamped.

    Raises:
        ConfigError: the minibatch does not divide the batch.
    """
    batch = tc.horizon_length * num_envs
    mb = min(tc.minibatch_size, batch)
    if mb < tc.minibatch_size and note:
        log.info("train.minibatch_size=%d is larger than the batch horizon_length x num_envs = %d x %d; "
                 "using minibatches of %d", tc.minibatch_size, tc.horizon_length, num_envs, batch)  # fmt: skip
    if batch % mb:
        raise ConfigError("train.minibatch_size", tc.minibatch_size,
                          f"a divisor of horizon_length x num_envs = {tc.horizon_length} x {num_envs} = {batch}")  # fmt: skip
    return mb


def check_data_files(cfg: DictConfig, control_hz: float, made: list[str] | None = None) -> None:
    """Check the ``data`` clips: the files that already exist (recipes are made, and checked
    with ``made``, later). Each is read (``Motion3D`` or ``Motion2D``, by its ``kind``), must
    be trackable, must pass the task's ``TaskEntry.check_data`` (e.g. tracking2d needs
    cameras), must use the character's keypoint set, and all must use the same one.

    Args:
        made: the prepared files (:func:`mimic2dm.rl.data.prepare_data`): check these instead
            of the entries' existing files.

    Raises:
        ConfigError: ``data.clips`` is empty, an entry is neither a path nor ``{file, make?}``,
            or the task cannot track a clip (naming ``data.clips[i].file``).
        MotionFormatError: a clip is invalid, too short or fully masked (naming the file).
    """
    from mimic2dm.rl.data import clip_entries

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


def validate_config(cfg: DictConfig) -> tuple[TrainConfig, RayConfig]:
    """Check every group of a tracker config at start-up, before anything is created.

    Returns:
        The checked ``train`` and ``ray`` groups.

    Raises:
        ConfigError: the first key out of range (named, with what is allowed).
        MotionFormatError: a data clip cannot be tracked.
    """
    tc, rc = train_config(cfg), ray_config(cfg)
    _, _, control_hz = task_config(cfg)
    engine_config(cfg, control_hz)
    logger_config(cfg)
    check("seed", cfg.seed, ge=0, integer=True)
    minibatch_size(tc, total_envs(tc, rc))
    if load_task(str(cfg.task.name)).needs_data:
        check_data_files(cfg, control_hz)
    return tc, rc


def fast_bf16(device: str = "cpu", cpuinfo: str | Path = "/proc/cpuinfo") -> bool:
    """Whether ``device`` multiplies bfloat16 matrices natively (faster than float32).

    CUDA: ``torch.cuda.is_bf16_supported()``. CPU: the AVX512-BF16 or AMX-BF16 flag in
    ``/proc/cpuinfo`` (oneDNN emulates bfloat16 on other CPUs, slower than float32; where
    ``/proc/cpuinfo`` is missing, e.g. macOS, the answer is no).
    """
    import torch

    if str(device).startswith("cuda"):
        return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())
    if str(device) != "cpu":
        return False
    try:
        flags = Path(cpuinfo).read_text().split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_precision(precision: str, device: str = "cpu") -> str:
    """``auto`` -> ``bf16`` where :func:`fast_bf16`, else ``fp32``; other values unchanged."""
    if precision == "auto":
        return "bf16" if fast_bf16(device) else "fp32"
    return precision


def network_params(net: NetworkConfig, obs_layout: dict[str, int], device: str = "cpu") -> dict:
    """rl-games ``network`` params of :mod:`mimic2dm.rl.network` (``precision`` resolved for ``device``)."""
    params = {"name": NETWORK_NAME, "obs_layout": dict(obs_layout), **dataclasses.asdict(net)}
    params["precision"] = resolve_precision(net.precision, device)
    return params


def rl_games_params(
    tc: TrainConfig,
    obs_layout: dict[str, int],
    num_envs: int,
    seed: int,
    run_dir: str,
    task: str = "tracking2d",
) -> dict:
    """The params dict rl-games' ``Runner.load_config`` takes.

    Args:
        tc: PPO settings.
        obs_layout: ``{prop, view, views}`` of the task (for the network).
        num_envs: total envs (rl-games calls them ``num_actors``).
        seed: run seed.
        run_dir: the run directory (rl-games' own folders go under ``RUN_DIR/rl_games``).
        task: the task's registry name (rl-games' ``env_name`` is ``mimic2dm_<task>``).
    """
    mb = minibatch_size(tc, num_envs, note=True)
    config = {
        "name": "tracker", "full_experiment_name": "rl_games", "train_dir": run_dir,
        "env_name": f"mimic2dm_{task}", "num_actors": num_envs, "device": tc.device, "ppo": True,
        "reward_shaper": {"scale_value": 1.0}, "torch_compile": False, "print_stats": False,
        "multi_gpu": False, "mixed_precision": False,
        # checkpoints are written by the agent (atomic, with env and RNG state), not by rl-games
        "save_frequency": 0, "save_best_after": 10**12,
        # observations are normalised inside the network (per part, so any number of views works)
        "normalize_input": False,
        "normalize_value": tc.normalize_value, "normalize_advantage": tc.normalize_advantage,
        "value_bootstrap": tc.value_bootstrap, "gamma": tc.gamma, "tau": tc.tau,
        "learning_rate": tc.learning_rate, "lr_schedule": None if tc.lr_schedule == "fixed" else tc.lr_schedule,
        "kl_threshold": tc.kl_threshold, "e_clip": tc.e_clip, "clip_value": tc.clip_value,
        "entropy_coef": tc.entropy_coef, "critic_coef": tc.critic_coef, "grad_norm": tc.grad_norm,
        "truncate_grads": tc.truncate_grads, "bounds_loss_coef": tc.bounds_loss_coef,
        "horizon_length": tc.horizon_length, "minibatch_size": mb, "mini_epochs": tc.mini_epochs,
        "max_epochs": tc.max_epochs, "games_to_track": tc.games_to_track,
    }  # fmt: skip
    return {
        "seed": seed,
        "torch_threads": tc.torch_threads or "auto",
        "algo": {"name": ALGO_NAME},
        "model": {"name": MODEL_NAME},
        "network": network_params(tc.network, obs_layout, tc.device),
        "config": config,
    }
