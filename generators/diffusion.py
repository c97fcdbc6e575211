"""Diffusion baseline over canonical 2D windows (paper Table 3's comparison).

A small DDPM (Ho et al. 2020) with a cosine noise schedule whose denoiser predicts the
clean window ``x0`` (as motion diffusion models do): a non-causal transformer of the
GPT's size (4 layers, 4 heads, width 128) over the ``W`` frames of a noisy window, with
one prepended token holding the diffusion-step embedding plus the condition embedding
(zeros for unconditional; label dropout during training allows classifier-free
guidance). The loss is masked MSE on visible entries only.

Long motions are made window by window: each new window is generated with its first
``overlap`` frames held to the end of the previous one (replacement inpainting).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
from mimic2dm.generators.gpt import Block, check_transformer, condition_vector, init_weights

from mimic2dm.utils.validate import check


@dataclass
class DiffusionConfig:
    """Denoiser and schedule hyper-parameters.

    Attributes:
        in_dim: canonical feature size ``D``.
        window: frames per window ``W``.
        n_layer, n_head, n_embd, dropout: transformer size (the GPT's budget).
        num_steps: diffusion steps of training and sampling.
        num_classes: labels (0: unconditional only); p_uncond: label dropout.
        guidance: classifier-free guidance scale at sampling (1: plain conditional).
        overlap: frames held from the previous window when generating long motion.
    """

    in_dim: int = 37
    window: int = 32
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.1
    num_steps: int = 100
    num_classes: int = 0
    p_uncond: float = 0.1
    guidance: float = 1.0
    overlap: int = 8

    def __post_init__(self):
        check("model.in_dim", self.in_dim, ge=1, integer=True)
        check("model.window", self.window, ge=1, integer=True)
        check_transformer("model", self.n_layer, self.n_head, self.n_embd, self.dropout)
        check("model.num_steps", self.num_steps, ge=1, integer=True)
        check("model.num_classes", self.num_classes, ge=0, integer=True)
        check("model.p_uncond", self.p_uncond, ge=0, le=1)
        check("model.guidance", self.guidance, ge=0)
        check("model.overlap", self.overlap, ge=0, integer=True)  # < window: DiffusionType.check


def cosine_alpha_bar(num_steps: int, s: float = 0.008) -> torch.Tensor:
    """Cumulative signal rates ``alpha_bar [num_steps]`` of the cosine schedule."""
    t = torch.linspace(0, num_steps, num_steps + 1, dtype=torch.float64) / num_steps
    f = torch.cos((t + s) / (1 + s) * math.pi / 2) ** 2
    betas = (1 - f[1:] / f[:-1]).clamp(max=0.999)
    return torch.cumprod(1 - betas, 0).float()


def timestep_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal embedding ``[B, dim]`` of integer steps ``t [B]``."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32) / half)
    a = t.float()[:, None] * freqs[None]
    return torch.cat([torch.cos(a), torch.sin(a)], dim=-1)


class Denoiser(nn.Module):
    """Predicts ``x0 [B, W, D]`` from ``x_t [B, W, D]``, step ``t [B]`` and label ``y [B]``."""

    def __init__(self, c: DiffusionConfig):
        super().__init__()
        self.config = c
        self.inp = nn.Linear(c.in_dim, c.n_embd)
        self.time_mlp = nn.Sequential(
            nn.Linear(c.n_embd, c.n_embd), nn.SiLU(), nn.Linear(c.n_embd, c.n_embd)
        )
        self.cond_emb = nn.Embedding(max(1, c.num_classes), c.n_embd)
        self.pos_emb = nn.Embedding(c.window + 1, c.n_embd)
        self.drop = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(
            [Block(c.n_embd, c.n_head, c.dropout, causal=False) for _ in range(c.n_layer)]
        )
        self.ln_f = nn.LayerNorm(c.n_embd)
        self.out = nn.Linear(c.n_embd, c.in_dim)
        self.apply(init_weights)

    def forward(self, x_t: torch.Tensor, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        c = self.config
        if x_t.ndim != 3 or x_t.shape[1:] != (c.window, c.in_dim):
            raise ValueError(
                f"Denoiser: expected windows [B, {c.window}, {c.in_dim}], got {list(x_t.shape)}"
            )
        head = self.time_mlp(timestep_embedding(t, c.n_embd)) + condition_vector(self.cond_emb, y)
        h = torch.cat([head[:, None], self.inp(x_t)], dim=1)
        h = self.drop(h + self.pos_emb.weight)
        for block in self.blocks:
            h, _ = block(h)
        return self.out(self.ln_f(h)[:, 1:])


class Diffusion(nn.Module):
    """DDPM with an ``x0``-predicting :class:`Denoiser` (schedule buffers in ``state_dict``)."""

    def __init__(self, config: DiffusionConfig):
        super().__init__()
        self.config = config
        self.denoiser = Denoiser(config)
        ab = cosine_alpha_bar(config.num_steps)
        ab_prev = torch.cat([torch.ones(1), ab[:-1]])
        self.register_buffer("alpha_bar", ab)
        self.register_buffer("alpha_bar_prev", ab_prev)
        self.register_buffer("beta", 1 - ab / ab_prev)

    def q_sample(self, x0: torch.Tensor, t: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """Noisy ``x_t`` of ``x0 [B, W, D]`` at steps ``t [B]``."""
        ab = self.alpha_bar[t][:, None, None]
        return ab.sqrt() * x0 + (1 - ab).sqrt() * noise

    def forward(self, x0: torch.Tensor, fmask: torch.Tensor, y: torch.Tensor) -> dict:
        """Training loss on normalised windows ``x0 [B, W, D]`` with feature mask ``fmask``.

        Draws steps, noise and label dropout from the global torch RNG.

        Returns:
            dict with ``loss`` (masked MSE of the predicted ``x0``).
        """
        B = x0.shape[0]
        t = torch.randint(self.config.num_steps, (B,))
        noise = torch.randn_like(x0)
        if self.training and self.config.p_uncond > 0:
            y = torch.where(torch.rand(B) < self.config.p_uncond, torch.full_like(y, -1), y)
        pred = self.denoiser(self.q_sample(x0, t, noise), t, y)
        w = fmask.to(x0.dtype)
        loss = (((pred - x0) ** 2) * w).sum() / w.sum().clamp_min(1.0)
        return {"loss": loss}

    @torch.no_grad()
    def validation_loss(
        self, x0: torch.Tensor, fmask: torch.Tensor, y: torch.Tensor, seed: int = 0
    ) -> float:
        """Masked MSE with steps and noise from a fixed seed (leaves the global RNG alone)."""
        g = torch.Generator().manual_seed(seed)
        t = torch.randint(self.config.num_steps, (x0.shape[0],), generator=g)
        noise = torch.randn(x0.shape, generator=g)
        pred = self.denoiser(self.q_sample(x0, t, noise), t, y)
        w = fmask.to(x0.dtype)
        return float((((pred - x0) ** 2) * w).sum() / w.sum().clamp_min(1.0))

    def _predict_x0(
        self, x: torch.Tensor, t: torch.Tensor, y: torch.Tensor, guidance: float
    ) -> torch.Tensor:
        cond = self.denoiser(x, t, y)
        if guidance == 1.0 or bool((y < 0).all()):
            return cond
        uncond = self.denoiser(x, t, torch.full_like(y, -1))
        return uncond + guidance * (cond - uncond)

    @torch.no_grad()
    def sample(self, y: torch.Tensor, generator: torch.Generator | None = None, known: torch.Tensor | None = None,
               guidance: float | None = None) -> torch.Tensor:  # fmt: skip
        """Ancestral DDPM sampling of normalised windows ``[B, W, D]``.

        Args:
            y: ``[B]`` labels (``-1``: unconditional).
            generator: torch RNG (deterministic under a seed).
            known: optional ``[B, k, D]`` first frames to hold (continuation by inpainting).
            guidance: classifier-free guidance scale (default: the config's).
        """
        was = self.training
        self.eval()
        c = self.config
        g = c.guidance if guidance is None else guidance
        B = y.shape[0]
        x = torch.randn(B, c.window, c.in_dim, generator=generator)
        for i in reversed(range(c.num_steps)):
            t = torch.full((B,), i, dtype=torch.long)
            if known is not None:
                k = known.shape[1]
                noisy = self.q_sample(known, t, torch.randn(known.shape, generator=generator))
                x = torch.cat([noisy, x[:, k:]], dim=1)
            x0 = self._predict_x0(x, t, y, g)
            ab, ab_prev, beta = self.alpha_bar[i], self.alpha_bar_prev[i], self.beta[i]
            mean = (ab_prev.sqrt() * beta / (1 - ab)) * x0 + (
                (1 - beta).sqrt() * (1 - ab_prev) / (1 - ab)
            ) * x
            if i > 0:
                var = beta * (1 - ab_prev) / (1 - ab)
                x = mean + var.sqrt() * torch.randn(x.shape, generator=generator)
            else:
                x = mean
        if known is not None:
            x = torch.cat([known, x[:, known.shape[1] :]], dim=1)
        self.train(was)
        return x

    @torch.no_grad()
    def sample_long(self, y: torch.Tensor, num_frames: int, overlap: int, generator: torch.Generator | None = None,
                    guidance: float | None = None) -> torch.Tensor:  # fmt: skip
        """``[B, num_frames, D]`` normalised frames, window by window with ``overlap`` held frames."""
        W = self.config.window
        if not 0 <= overlap < W:
            raise ValueError(f"overlap must be in [0, {W}), got {overlap}")
        out = self.sample(y, generator, guidance=guidance)
        while out.shape[1] < num_frames:
            known = out[:, out.shape[1] - overlap :] if overlap else None
            nxt = self.sample(y, generator, known, guidance)
            out = torch.cat([out, nxt[:, overlap:]], dim=1)
        return out[:, :num_frames]
