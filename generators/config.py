"""Schemas and start-up checks of the generator apps (tokenizer, generator, FID extractor).

Every app parses its config once, here, before anything is created: ranges (``optim.lr
> 0``, ``train.batch_size >= 1``, ``eval.top_k >= 0`` ...), unknown model settings,
missing inputs. Errors are :class:`~mimic2dm.utils.validate.ConfigError` naming the key,
the value and what is allowed. Through Hydra, :class:`ValidateCallback` runs the checks
before Hydra makes the run directory and turns an error into one line on stderr and
exit status 1 (``HYDRA_FULL_ERROR=1`` shows the traceback).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.experimental.callback import Callback
from mimic2dm.generators.optim import OptimConfig
from omegaconf import DictConfig, OmegaConf

from mimic2dm.utils.run_logging import LoggerConfig
from mimic2dm.utils.validate import ConfigError, check, exit_on_config_error

if TYPE_CHECKING:
    from mimic2dm.generators.model_types import GeneratorType

APPS = ("tokenizer", "generator", "fid")


def parse(cls: type, node: Any, key: str, exclude: tuple[str, ...] = (), **derived: Any):
    """Dataclass ``cls`` from the config node (or dict) ``node`` found at ``key``.

    Args:
        exclude: fields the config must not set (filled by the app from the data).
        derived: values of such fields, passed to ``cls``.

    Raises:
        ConfigError: an unknown or excluded key (listing the allowed ones), or a value
            out of range (from ``cls.__post_init__``).
    """
    d = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else dict(node)
    names = [f.name for f in fields(cls) if f.name not in exclude]
    for k in d:
        if k not in names:
            raise ConfigError(f"{key}.{k}", d[k], f"a key of {key}: {', '.join(names)}")
    return cls(**d, **derived)


def model_settings(cfg: DictConfig) -> dict:
    """``cfg.model`` without the keys that select it (``name``, ``type``)."""
    kw = OmegaConf.to_container(cfg.model, resolve=True)
    kw.pop("name", None)
    kw.pop("type", None)
    return kw


@dataclass
class TrainConfig:
    """``train:`` of every generator app: steps, batch and cadence (the optimiser is ``optim:``).

    Attributes:
        max_steps: optimiser steps; batch_size: windows per step.
        eval_every, ckpt_every: steps between evaluations / checkpoints (0: at the end only).
    """

    max_steps: int = 3000
    batch_size: int = 64
    eval_every: int = 500
    ckpt_every: int = 500

    def __post_init__(self):
        check("train.max_steps", self.max_steps, ge=1, integer=True)
        check("train.batch_size", self.batch_size, ge=1, integer=True)
        check("train.eval_every", self.eval_every, ge=0, integer=True)
        check("train.ckpt_every", self.ckpt_every, ge=0, integer=True)


@dataclass
class TokenizerTrainConfig(TrainConfig):
    """``train:`` of the tokenizer: plus the evaluation windows' stride and count."""

    eval_stride: int = 8
    eval_windows: int = 2048

    def __post_init__(self):
        super().__post_init__()
        check("train.eval_stride", self.eval_stride, ge=1, integer=True)
        check("train.eval_windows", self.eval_windows, ge=1, integer=True)


@dataclass
class GenEvalConfig:
    """``eval:`` of the generator app (validation loss, FID and its samples)."""

    val_windows: int = 1024
    num_samples: int = 512
    real_windows: int = 2048
    temperature: float = 1.0
    top_k: int | None = None
    seed: int = 0

    def __post_init__(self):
        for k in ("val_windows", "num_samples", "real_windows"):
            check(f"eval.{k}", getattr(self, k), ge=1, integer=True)
        check("eval.temperature", self.temperature, ge=0)  # 0: greedy
        check("eval.top_k", self.top_k, ge=0, integer=True, optional=True)  # 0 / null: all tokens
        check("eval.seed", self.seed, ge=0, integer=True)


@dataclass
class AppConfig:
    """The parsed parts of an app's config that the shared run code needs."""

    train: TrainConfig
    optim: OptimConfig
    gtype: GeneratorType | None = None
    eval: GenEvalConfig | None = None


def check_run(cfg: DictConfig) -> None:
    """Check the keys every generator app shares: ``logger``, ``seed``, ``threads`` and
    ``keep_checkpoints``."""
    parse(LoggerConfig, cfg.logger, "logger")
    check("seed", cfg.seed, ge=0, integer=True)
    check("threads", cfg.get("threads", 0), ge=0, integer=True)
    check("keep_checkpoints", cfg.get("keep_checkpoints", 3), ge=1, integer=True)


def _check_gen_data(gd: DictConfig) -> None:
    from mimic2dm.geometry.virtual import CAMERA_MODES

    if OmegaConf.is_missing(gd, "dir") or not gd.dir:
        value = "???" if OmegaConf.is_missing(gd, "dir") else gd.dir
        raise ConfigError("gen_data.dir", value, "a directory of 2D-motion files (gen_data.dir=PATH)")  # fmt: skip
    b = gd.get("build")
    if not b:
        return
    if not b.clips:
        raise ConfigError(
            "gen_data.build.clips", list(b.clips), "a non-empty list of mocap clip stems"
        )
    for k in ("pairs", "heldout_pairs"):
        check(f"gen_data.build.{k}", b[k], ge=1, integer=True)
    for k in ("seed", "heldout_seed"):
        check(f"gen_data.build.{k}", b[k], ge=0, integer=True)
    check("gen_data.build.fps", b.fps, gt=0)
    check("gen_data.build.noise_px", b.noise_px, ge=0)
    check("gen_data.build.drop_prob", b.drop_prob, ge=0, lt=1)
    modes = list(b.camera_modes)
    if not modes or any(m not in CAMERA_MODES for m in modes):
        raise ConfigError("gen_data.build.camera_modes", modes, "a non-empty list of " + ", ".join(CAMERA_MODES))  # fmt: skip


def validate(cfg: DictConfig, app: str) -> AppConfig:
    """Check the config of ``app`` (``tokenizer``, ``generator``, ``fid``); returns its parsed parts.

    Raises:
        ConfigError: the first value out of range, naming its key and what is allowed.
    """
    check_run(cfg)
    _check_gen_data(cfg.gen_data)
    optim = parse(OptimConfig, cfg.optim, "optim")
    if app == "tokenizer":
        from mimic2dm.generators.vqvae import VQVAEConfig

        train = parse(TokenizerTrainConfig, cfg.train, "train")
        m = parse(VQVAEConfig, cfg.model, "model", ("in_dim", "num_keypoints"))
        check("window", cfg.window, ge=1, integer=True)
        if cfg.window % m.downsample:
            raise ConfigError("window", cfg.window, f"a multiple of {m.downsample} (2 ** model.down_t)")  # fmt: skip
        return AppConfig(train, optim)
    if app == "fid":
        from mimic2dm.generators.fid import FIDConfig

        check("window", cfg.window, ge=1, integer=True)
        check("eval_windows", cfg.eval_windows, ge=1, integer=True)
        parse(FIDConfig, cfg.model, "model", ("in_dim", "num_keypoints", "window", "num_classes"))
        return AppConfig(parse(TrainConfig, cfg.train, "train"), optim)
    if app != "generator":
        raise ValueError(f"app {app!r} is not one of {', '.join(APPS)}")
    from mimic2dm.generators.model_types import generator_type

    name = cfg.model.get("name")
    gtype = generator_type(cfg.model.get("type") or name)
    gtype.config(model_settings(cfg))
    out = AppConfig(parse(TrainConfig, cfg.train, "train"), optim, gtype, parse(GenEvalConfig, cfg.eval, "eval"))  # fmt: skip
    if gtype.needs_tokenizer and not cfg.get("tokenizer"):
        raise ConfigError("tokenizer", cfg.get("tokenizer"),
                          f"a mimic2dm-train-tokenizer run directory: model={name} needs tokenizer=RUN_DIR")  # fmt: skip
    return out


def check_paths(cfg: DictConfig) -> None:
    """The inputs named by ``resume``, ``tokenizer`` and ``fid`` exist (checked before a run directory is made)."""
    if cfg.get("resume") and not (Path(cfg.resume) / "checkpoints" / "last.pt").is_file():
        raise ConfigError("resume", cfg.resume, "a run directory with checkpoints/last.pt")
    tok = cfg.get("tokenizer")
    if tok and not (Path(tok).is_file() or (Path(tok) / "checkpoints" / "last.pt").is_file()):
        raise ConfigError("tokenizer", tok, "a tokenizer checkpoint (.pt) or run directory with checkpoints/last.pt")  # fmt: skip
    fid = cfg.get("fid")
    if fid and not (Path(fid).is_file() or (Path(fid) / "fid_extractor.pt").is_file()):
        raise ConfigError("fid", fid, "a mimic2dm-train-fid run directory (with fid_extractor.pt) or that file")  # fmt: skip


class ValidateCallback(Callback):
    """Hydra callback (``hydra.callbacks.validate`` of the apps' YAML): checks before the run directory exists.

    Args:
        app: ``tokenizer``, ``generator`` or ``fid``.
    """

    def __init__(self, app: str):
        if app not in APPS:
            raise ValueError(f"ValidateCallback app {app!r} is not one of {', '.join(APPS)}")
        self.app = app

    def _check(self, config: DictConfig, one_run: bool = True) -> None:
        from mimic2dm.utils.rundir import preflight_run_dir

        with exit_on_config_error():
            validate(config, self.app)
            check_paths(config)
            run_dir = config.get("resume") or config.get("run_dir")
            if run_dir and one_run:  # a sweep's jobs are checked as they open their runs
                preflight_run_dir(run_dir, "resume" if config.get("resume") else "run_dir",
                                  bool(config.get("resume")), bool(config.get("overwrite")))  # fmt: skip

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check(config)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._check(config, one_run=False)
