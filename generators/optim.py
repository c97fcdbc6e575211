"""One optimiser schema for every generator app (``conf/optim/<name>.yaml``).

``optim:`` holds the optimiser, its learning-rate schedule (linear warm-up, then cosine
decay to ``min_lr_ratio * lr``) and gradient clipping; the apps' ``train:`` blocks hold
only steps, batch and evaluation cadence. Optimisers are a registry (``OPTIMIZERS``):
``optim.name`` picks one.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import ClassVar

import torch

from mimic2dm.utils.registry import Registry
from mimic2dm.utils.validate import ConfigError, check

DEFAULT_BETAS = (0.9, 0.999)
"""torch's AdamW default; models may prefer others (``GeneratorType.betas``)."""

OPTIMIZERS: Registry[Callable[..., torch.optim.Optimizer]] = Registry("optimizer")
OPTIMIZERS.register("adamw", lambda: torch.optim.AdamW)
OPTIMIZERS.register("amsgrad", lambda: functools.partial(torch.optim.AdamW, amsgrad=True))


@dataclass
class OptimConfig:
    """``conf/optim/adamw.yaml``, checked on creation (errors name ``optim.<field>``).

    Attributes:
        name: registered optimiser (``adamw``).
        lr: peak learning rate; warmup_steps: linear warm-up length;
            min_lr_ratio: final learning rate as a fraction of ``lr`` (cosine decay).
        betas: Adam betas; None: the model's own default (GPT 0.9/0.95, else 0.9/0.999).
        eps: Adam epsilon; weight_decay: decoupled decay (models may exempt parameters).
        grad_clip: global gradient-norm clip (None or 0: off).
    """

    KEY: ClassVar[str] = "optim"

    name: str = "adamw"
    lr: float = 1e-3
    betas: tuple[float, float] | None = None
    eps: float = 1e-8
    weight_decay: float = 0.0
    warmup_steps: int = 100
    min_lr_ratio: float = 0.1
    grad_clip: float | None = 1.0

    def __post_init__(self):
        k = self.KEY
        if self.name not in OPTIMIZERS:
            raise ConfigError(f"{k}.name", self.name, "one of " + ", ".join(OPTIMIZERS.names()))
        self.lr = float(check(f"{k}.lr", self.lr, gt=0))
        if self.betas is not None:
            if isinstance(self.betas, str) or len(self.betas) != 2:
                raise ConfigError(
                    f"{k}.betas", self.betas, "[beta1, beta2] with 0 <= beta < 1, or null"
                )
            self.betas = tuple(float(check(f"{k}.betas[{i}]", b, ge=0, lt=1)) for i, b in enumerate(self.betas))  # fmt: skip
        self.eps = float(check(f"{k}.eps", self.eps, gt=0))
        self.weight_decay = float(check(f"{k}.weight_decay", self.weight_decay, ge=0))
        check(f"{k}.warmup_steps", self.warmup_steps, ge=0, integer=True)
        self.min_lr_ratio = float(check(f"{k}.min_lr_ratio", self.min_lr_ratio, ge=0, le=1))
        check(f"{k}.grad_clip", self.grad_clip, ge=0, optional=True)

    def lr_at(self, step: int, max_steps: int) -> float:
        """Learning rate of 0-based ``step`` of ``max_steps``."""
        return lr_at(step, self.lr, self.warmup_steps, max_steps, self.min_lr_ratio)


def lr_at(step: int, base: float, warmup: int, max_steps: int, min_ratio: float = 0.1) -> float:
    """Linear warm-up then cosine decay to ``min_ratio * base``."""
    if step < warmup:
        return base * (step + 1) / warmup
    p = min(1.0, (step - warmup) / max(1, max_steps - warmup))
    return base * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * p)))


def param_groups(model: torch.nn.Module, weight_decay: float) -> Iterable:
    """The model's own groups (``model.optim_groups(weight_decay)``), else one group of all parameters."""
    if hasattr(model, "optim_groups"):
        return model.optim_groups(weight_decay)
    return [{"params": list(model.parameters()), "weight_decay": weight_decay}]


def make_optimizer(
    model: torch.nn.Module, cfg: OptimConfig, default_betas: tuple[float, float] = DEFAULT_BETAS
) -> torch.optim.Optimizer:
    """The optimiser of ``cfg`` over ``model``'s parameter groups.

    Args:
        model: its ``optim_groups(weight_decay)`` (if any) says which parameters decay.
        cfg: the ``optim`` config; ``default_betas`` apply where ``cfg.betas`` is None.
    """
    cls = OPTIMIZERS.load(cfg.name)
    betas = cfg.betas if cfg.betas is not None else default_betas
    return cls(param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=betas, eps=cfg.eps)
