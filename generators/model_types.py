"""Generator model types: one registry entry per kind of generator.

A model YAML (``conf/model/<name>.yaml``) names its type with ``type:`` (``gpt`` for
``gpt`` and ``gpt_multiview``, ``diffusion``); a generator checkpoint stores it as
``model_type``. Each :class:`GeneratorType` says how to build the model from its config
dict, how the training app trains it (its job class) and how ``mimic2dm sample`` makes
motion with it, so adding a generator means one entry here, one model file and one
YAML, without editing the apps.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from mimic2dm.generators.optim import DEFAULT_BETAS

from mimic2dm.utils.registry import Registry
from mimic2dm.utils.validate import ConfigError

if TYPE_CHECKING:
    from mimic2dm.generators.sample import LoadedGenerator


class GeneratorType(ABC):
    """How to build, train and sample one kind of generator.

    Attributes:
        name: the type's name (checkpoints' ``model_type``).
        description: one line for listings.
        needs_tokenizer: trains on the tokens of a frozen tokenizer (``tokenizer=RUN_DIR``).
        betas: Adam betas when ``optim.betas`` is null.
        derived: config fields the app fills in from the data (not set in the YAML).
    """

    name: ClassVar[str]
    description: ClassVar[str]
    needs_tokenizer: ClassVar[bool] = False
    betas: ClassVar[tuple[float, float]] = DEFAULT_BETAS
    derived: ClassVar[tuple[str, ...]] = ()

    @abstractmethod
    def config_class(self) -> type:
        """The model's config dataclass."""

    @abstractmethod
    def model_class(self) -> type[torch.nn.Module]:
        """The model (built from one config dataclass instance)."""

    @abstractmethod
    def job_class(self) -> type:
        """The training job of ``mimic2dm-train-generator`` (see ``generators/jobs.py``)."""

    @abstractmethod
    def generate(self, gen: LoadedGenerator, frames: int, label: int, generator: torch.Generator,
                 temperature: float, top_k: int | None) -> torch.Tensor:  # fmt: skip
        """Raw canonical features ``[V, frames, D]`` for label id ``label`` (-1: unconditional)."""

    def config(self, settings: dict[str, Any], **derived: Any):
        """The config dataclass from YAML ``settings`` (``model.*``) and data-derived fields.

        Raises:
            ConfigError: an unknown or data-derived key in ``settings``, or a value out of range.
        """
        from mimic2dm.generators.config import parse

        config = parse(self.config_class(), settings, "model", self.derived, **derived)
        self.check(config)
        return config

    def check(self, config) -> None:
        """Checks across fields that the apps need (beyond the config's own ranges)."""
        return None  # most types need none

    def build(self, config: dict[str, Any]) -> torch.nn.Module:
        """A fresh model from a stored config dict (a checkpoint's ``model_config``)."""
        return self.model_class()(self.config_class()(**config))

    def num_views(self, model: torch.nn.Module) -> int:
        """Views ``V`` generated together."""
        return int(getattr(model.config, "num_views", 1))


class GPTType(GeneratorType):
    name = "gpt"
    description = "autoregressive transformer over VQ-VAE tokens (single- or multi-view)"
    needs_tokenizer = True
    betas = (0.9, 0.95)
    derived = ("vocab_size", "num_classes")

    def config_class(self) -> type:
        from mimic2dm.generators.gpt import GPTConfig

        return GPTConfig

    def model_class(self) -> type[torch.nn.Module]:
        from mimic2dm.generators.gpt import GPT

        return GPT

    def job_class(self) -> type:
        from mimic2dm.generators.jobs import GPTJob

        return GPTJob

    def generate(self, gen, frames, label, generator, temperature, top_k) -> torch.Tensor:
        from mimic2dm.generators.sample import MotionStream

        stream = MotionStream(gen.model, gen.tokenizer, gen.stats, label, temperature, top_k, generator)  # fmt: skip
        chunks, n = [], 0
        while n < frames:
            chunks.append(stream.next_chunk())
            n += chunks[-1].shape[1]
        return torch.cat(chunks, dim=1)[:, :frames]


class DiffusionType(GeneratorType):
    name = "diffusion"
    description = "DDPM baseline over canonical windows (paper Table 3)"
    derived = ("in_dim", "num_classes")

    def config_class(self) -> type:
        from mimic2dm.generators.diffusion import DiffusionConfig

        return DiffusionConfig

    def model_class(self) -> type[torch.nn.Module]:
        from mimic2dm.generators.diffusion import Diffusion

        return Diffusion

    def job_class(self) -> type:
        from mimic2dm.generators.jobs import DiffusionJob

        return DiffusionJob

    def check(self, config) -> None:
        if config.overlap >= config.window:  # long generation holds overlap frames of each window
            raise ConfigError("model.overlap", config.overlap, f"0 <= x < model.window={config.window}")  # fmt: skip

    def generate(self, gen, frames, label, generator, temperature, top_k) -> torch.Tensor:
        m = gen.model
        x = m.sample_long(torch.tensor([label]), frames, m.config.overlap, generator)
        return gen.stats.denormalize(x)


GENERATORS: Registry[GeneratorType] = Registry("generator model type")
GENERATORS.register("gpt", GPTType)
GENERATORS.register("diffusion", DiffusionType)


def generator_type(name: str, key: str = "model.type") -> GeneratorType:
    """The registered type ``name``; a :class:`ConfigError` naming ``key`` lists the valid ones."""
    if name not in GENERATORS:
        raise ConfigError(key, name, "one of " + ", ".join(GENERATORS.names()))
    return GENERATORS.load(name)
