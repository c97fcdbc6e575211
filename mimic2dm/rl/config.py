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
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

from mimic2dm.engines.base import EngineOptions
from mimic2dm.tasks.base import TaskSpec
from mimic2dm.tasks.registry import check_spec, load_task
from mimic2dm.utils.config import from_mapping, to_plain

ALGO_NAME = "mimic2dm_ppo"
NETWORK_NAME = "mimic2dm_view_mlp"
MODEL_NAME = "continuous_a2c_logstd"
SPEC_TASK_KEYS = ("name", "control_hz", "objects")
"""Keys of the ``task`` group that go to the ``TaskSpec`` rather than to the task's config."""


@dataclass
class NetworkConfig:
    """View-aggregation actor-critic (DESIGN 5): ``head(mean_v(encoder(prop, view_v)))``."""

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


@dataclass
class CheckpointConfig:
    """``RUN_DIR/checkpoints``: ``last.pt``, ``best.pt`` and ``step_<epoch>.pt`` snapshots."""

    enabled: bool = True
    save_frequency: int = 25  # epochs between periodic checkpoints (last.pt + a snapshot)
    save_best_after: int = 10  # first epoch that may write best.pt
    keep: int = 3  # snapshots kept


@dataclass
class TrainConfig:
    """PPO (rl-games ``a2c_continuous``) hyperparameters; Hydra group ``train``."""

    num_envs: int = 64
    horizon_length: int = 32
    minibatch_size: int = 512
    mini_epochs: int = 4
    learning_rate: float = 2e-4
    lr_schedule: str = "fixed"  # fixed | linear | adaptive
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
    torch_threads: int = 1  # 0: rl-games' choice (min(4, cores))
    device: str = "cpu"
    network: NetworkConfig = field(default_factory=NetworkConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)


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
    temp_dir: str | None = (
        None  # Ray session dir (None: RUN_DIR/ray, or /tmp when that path is too long)
    )


def _checked(schema: type, node: Any, where: str):
    """Merge a config node into a dataclass schema (unknown keys / bad types raise, naming ``where``)."""
    return from_mapping(schema, node, f"group {where!r}")


def train_config(cfg: DictConfig) -> TrainConfig:
    """The ``train`` group as a checked :class:`TrainConfig`."""
    return _checked(TrainConfig, cfg.train, "train")


def ray_config(cfg: DictConfig) -> RayConfig:
    """The ``ray`` group as a checked :class:`RayConfig`."""
    return _checked(RayConfig, cfg.ray, "ray")


def task_spec_from_cfg(cfg: DictConfig, data_files: list[str]) -> TaskSpec:
    """Build the picklable :class:`TaskSpec` from the ``task``/``character``/``engine`` groups.

    Args:
        cfg: the composed config (``task.name`` picks the registered task).
        data_files: the reference files of the ``data`` group (already prepared), for tasks
            that track data.
    """
    t = OmegaConf.to_container(cfg.task, resolve=True)
    if "name" not in t:
        raise ValueError(
            "config group 'task': no `name:` key (the registered task, e.g. tracking2d)"
        )
    name = str(t["name"])
    entry = load_task(name)
    where = f"conf/task/{name}.yaml"
    config = entry.parse_config({k: v for k, v in t.items() if k not in SPEC_TASK_KEYS}, where)
    # every key of the engine group reaches the backend (EngineOptions fields, checked here)
    raw = OmegaConf.to_container(cfg.engine, resolve=True)
    control_hz = float(t.get("control_hz", raw.get("control_hz", 30.0)))
    EngineOptions.from_mapping(
        {**raw, "control_hz": control_hz}, f"conf/engine/{raw.get('name')}.yaml"
    )
    spec = TaskSpec(
        task=name,
        character=str(cfg.character.name),
        engine=raw,
        objects=tuple(t.get("objects") or ()),
        control_hz=control_hz,
        config=to_plain(config),
        data=tuple(str(f) for f in data_files) if entry.needs_data else (),
    )
    check_spec(spec)
    return spec


def network_params(net: NetworkConfig, obs_layout: dict[str, int]) -> dict:
    """rl-games ``network`` params of :mod:`mimic2dm.rl.network`."""
    return {"name": NETWORK_NAME, "obs_layout": dict(obs_layout), **dataclasses.asdict(net)}


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
    batch = tc.horizon_length * num_envs
    if batch % tc.minibatch_size:
        raise ValueError(f"train.minibatch_size={tc.minibatch_size} must divide horizon_length x num_envs = "
                         f"{tc.horizon_length} x {num_envs} = {batch}")  # fmt: skip
    if tc.lr_schedule not in ("adaptive", "linear", "fixed"):
        raise ValueError(
            f"train.lr_schedule={tc.lr_schedule!r} is not one of adaptive, linear, fixed"
        )
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
        "horizon_length": tc.horizon_length, "minibatch_size": tc.minibatch_size, "mini_epochs": tc.mini_epochs,
        "max_epochs": tc.max_epochs, "games_to_track": tc.games_to_track,
    }  # fmt: skip
    return {
        "seed": seed,
        "torch_threads": tc.torch_threads or "auto",
        "algo": {"name": ALGO_NAME},
        "model": {"name": MODEL_NAME},
        "network": network_params(tc.network, obs_layout),
        "config": config,
    }
