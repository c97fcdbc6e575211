"""The learner's settings: PPO (:class:`TrainConfig`, Hydra group ``train``), where the
envs live (:class:`RayConfig`, group ``ray``) and the rl-games params built from them.

The apps parse the Hydra config into these once (:mod:`mimic2dm.app.runspec`);
:func:`rl_games_params` turns the checked settings into the params dict rl-games reads.
Nothing in the learner reads the Hydra config.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path

from mimic2dm.utils.validate import ConfigError, check, check_choice, check_device

log = logging.getLogger(__name__)

ACTIVATIONS = ("relu", "tanh", "sigmoid", "elu", "selu", "swish", "gelu", "softplus")
"""Activations rl-games' network builder knows."""
ALGO_NAME = "mimic2dm_ppo"
NETWORK_NAME = "mimic2dm_view_mlp"
MODEL_NAME = "continuous_a2c_logstd"
PRECISIONS = ("fp32", "bf16", "auto")
"""``train.network.precision`` choices (docs/training.md "Network", precision)."""


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
    overlap: bool = (
        False  # collect the next rollout while the update runs (policy one update behind)
    )
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
    # each actor runs the epoch's policy and collects its whole rollout in one call (False: per-step calls)
    actor_policy: bool = True
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
        if self.actor_policy and self.pipeline:
            raise ConfigError(
                "ray.pipeline",
                self.pipeline,
                "false with ray.actor_policy=true (the actors step on their own)",
            )


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
