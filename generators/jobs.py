"""Training jobs of ``mimic2dm-train-generator``: data, model, loss and evaluation per model type.

The app (``train_generator.py``) owns everything they share (run, optimiser, loop,
FID, closing); :class:`GeneratorType.job_class` says which job a model type uses.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict

import torch
from mimic2dm.generators import runs
from mimic2dm.generators.config import AppConfig, model_settings
from mimic2dm.generators.data import ClipSet, FeatureStats, WindowSampler
from mimic2dm.generators.gpt import GPT
from mimic2dm.generators.model_types import GeneratorType
from mimic2dm.generators.tokens import TokenWindowSampler, gpt_inputs, tokenize_clips
from mimic2dm.generators.vqvae import VQVAE, VQVAEConfig, tokenizer_payload
from omegaconf import DictConfig


def load_tokenizer(path) -> tuple[VQVAE, FeatureStats]:
    """The frozen tokenizer of a ``train_tokenizer`` run directory or checkpoint."""
    from mimic2dm.utils.checkpoint import load_checkpoint

    if path is None:
        raise ValueError(
            "model=gpt|gpt_multiview needs tokenizer=RUN_DIR (a trained mimic2dm-train-tokenizer run)"
        )
    p = runs.resolve_checkpoint(path)
    d = load_checkpoint(p)
    if d.get("kind") != runs.TOKENIZER_KIND:
        raise ValueError(
            f"{p}: field 'kind' is {d.get('kind')!r}, expected {runs.TOKENIZER_KIND!r}"
        )
    model = VQVAE(VQVAEConfig(**d["model_config"]))
    model.load_state_dict(d["model"])
    return model.eval().requires_grad_(False), FeatureStats.from_dict(d["stats"])


class GeneratorJob(ABC):
    """One model type's part of a training run, built as ``Job(cfg, app, run, clips, held, stats)``
    (the composed config, its parsed :class:`AppConfig`, the open run, training and held-out
    clips, the data's normalisation).

    Attributes:
        model: the generator being trained; stats: its feature normalisation.
        metric: eval entry that picks ``best.pt`` (lower is better).
        extra: checkpoint entries besides weights/optimiser/RNG (``model_type``,
            ``model_name``, ``model_config``, ``stats``, ``tokenizer``).
    """

    metric: str
    model: torch.nn.Module
    stats: FeatureStats
    extra: dict

    def _extra(self, gtype: GeneratorType, cfg: DictConfig, mcfg, tokenizer) -> dict:
        return {"model_type": gtype.name, "model_name": cfg.model.name, "model_config": asdict(mcfg),
                "stats": self.stats.to_dict(), "tokenizer": tokenizer}  # fmt: skip

    @abstractmethod
    def loss_fn(self) -> dict:
        """Draw a batch (from ``run.gen``) and return ``{"loss": ..., ...}``."""

    @abstractmethod
    def eval_fn(self) -> dict:
        """Deterministic held-out numbers (``metric`` among them)."""

    @abstractmethod
    def sample_windows(
        self, y: torch.Tensor, frames: int, generator: torch.Generator
    ) -> torch.Tensor:
        """Raw canonical windows ``[N * V, frames, D]`` generated from scratch for labels ``y [N]``."""


class GPTJob(GeneratorJob):
    """``type: gpt`` (``model=gpt|gpt_multiview``): tokens of a frozen tokenizer."""

    metric = "val_nll"

    def __init__(self, cfg: DictConfig, app: AppConfig, run: runs.Run, clips: ClipSet,
                 held: ClipSet, stats: FeatureStats | None = None):  # fmt: skip
        self.ev, gtype = app.eval, app.gtype
        self.tokenizer, self.stats = load_tokenizer(cfg.tokenizer)
        if self.tokenizer.config.in_dim != clips.dim:
            raise ValueError(
                f"tokenizer expects {self.tokenizer.config.in_dim} features per frame, the data has {clips.dim}"
            )
        mcfg = gtype.config(model_settings(cfg), vocab_size=self.tokenizer.config.codebook_size,
                            num_classes=len(clips.label_names))  # fmt: skip
        self.model = gtype.model_class()(mcfg)
        V = mcfg.num_views
        self.train_windows = TokenWindowSampler(
            tokenize_clips(self.tokenizer, clips, self.stats, V), mcfg.block_size
        )
        self.held_windows = TokenWindowSampler(
            tokenize_clips(self.tokenizer, held, self.stats, V), mcfg.block_size
        )
        self.run, self.bs = run, app.train.batch_size
        payload = tokenizer_payload(self.tokenizer, self.stats, {})
        self.extra = self._extra(gtype, cfg, mcfg, payload)

    def loss_fn(self) -> dict:
        tokens, y = self.train_windows.sample(self.bs, self.run.gen)
        idx, targets = gpt_inputs(tokens)
        _, loss = self.model(idx, y, targets)
        return {"loss": loss}

    def eval_fn(self) -> dict:
        total, n = 0.0, 0
        for tokens, y in self.held_windows.iterate(256, self.ev.val_windows):
            valid = int((tokens >= 0).sum())
            total += float(sequence_nll_masked(self.model, tokens, y)) * valid
            n += valid
        nll = total / max(1, n)
        return {"val_nll": nll, "val_ppl": float(torch.exp(torch.tensor(nll)))}

    @torch.no_grad()
    def sample_windows(
        self, y: torch.Tensor, frames: int, generator: torch.Generator
    ) -> torch.Tensor:
        down, V = self.tokenizer.config.downsample, self.model.config.num_views
        n = -(-frames // down)
        toks = self.model.generate(y, n * V, self.ev.temperature, self.ev.top_k or None, generator)
        toks = toks.reshape(len(y), n, V).permute(0, 2, 1).reshape(len(y) * V, n)
        out = torch.cat(
            [self.tokenizer.decode(toks[i : i + 256]) for i in range(0, len(toks), 256)]
        )
        return self.stats.denormalize(out[:, :frames])


@torch.no_grad()
def sequence_nll_masked(model: GPT, tokens: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean NLL (nats/token) of window batch ``tokens [B, n]`` over non-padding targets."""
    was = model.training
    model.eval()
    idx, targets = gpt_inputs(tokens)
    _, loss = model(idx, y, targets)
    model.train(was)
    return loss


class DiffusionJob(GeneratorJob):
    """``type: diffusion``: the canonical windows directly."""

    metric = "val_loss"

    def __init__(self, cfg: DictConfig, app: AppConfig, run: runs.Run, clips: ClipSet,
                 held: ClipSet, stats: FeatureStats):  # fmt: skip
        self.ev, gtype, self.run, self.stats = app.eval, app.gtype, run, stats
        mcfg = gtype.config(model_settings(cfg), in_dim=clips.dim, num_classes=len(clips.label_names))  # fmt: skip
        self.model = gtype.model_class()(mcfg)
        self.train_windows = WindowSampler(clips, mcfg.window, stats)
        self.held_windows = WindowSampler(held, mcfg.window, stats)
        self.bs = app.train.batch_size
        self.extra = self._extra(gtype, cfg, mcfg, None)

    def loss_fn(self) -> dict:
        b = self.train_windows.sample(self.bs, self.run.gen)
        return self.model(b.x, b.fmask, b.y)

    def eval_fn(self) -> dict:
        self.model.eval()
        losses = [self.model.validation_loss(b.x, b.fmask, b.y, seed=i)
                  for i, b in enumerate(self.held_windows.iterate(256, 4, self.ev.val_windows))]  # fmt: skip
        return {"val_loss": float(torch.tensor(losses).mean())}

    @torch.no_grad()
    def sample_windows(
        self, y: torch.Tensor, frames: int, generator: torch.Generator
    ) -> torch.Tensor:
        out = [self.model.sample_long(y[i : i + 256], frames, self.model.config.overlap, generator)
               for i in range(0, len(y), 256)]  # fmt: skip
        return self.stats.denormalize(torch.cat(out))
