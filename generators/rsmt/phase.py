"""The periodic autoencoder (DeepPhase, Starke et al. 2022) that gives RSMT its phase manifold.

Input: joint velocities over a window of ``window`` frames centred on a frame, rotated into
the centre frame's heading and normalised (``[B, 45, N]``). A convolutional encoder maps
them to ``channels`` latent curves; per curve an FFT gives the frequency ``F`` (power-weighted
mean, Hz), amplitude ``A`` and offset ``B``, and a linear layer on the curve gives the phase
shift ``S`` (``atan2`` of its two outputs, in turns). The decoder rebuilds the velocities from
the parametrised sines ``A sin(2 pi (F t - S)) + B``, so the curves must be periodic. The phase
features of a frame are those of its centred window: ``p_{2i} = A_i sin(2 pi S_i)``,
``p_{2i+1} = A_i cos(2 pi S_i)`` (paper eq. 3), plus ``A``, ``F`` and ``S``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from mimic2dm.generators.rsmt import features as F
from torch import nn

from mimic2dm.utils.validate import check


@dataclass
class PhaseConfig:
    """``model:`` of the periodic autoencoder.

    Attributes:
        channels: phase channels (latent curves); window: frames per window (odd);
        hidden: convolution width; kernel: convolution kernel (odd).
    """

    channels: int = 5
    window: int = 61
    hidden: int = 64
    kernel: int = 25

    def __post_init__(self) -> None:
        check("model.channels", self.channels, ge=1, integer=True)
        check("model.window", self.window, ge=5, integer=True)
        check("model.hidden", self.hidden, ge=1, integer=True)
        check("model.kernel", self.kernel, ge=1, integer=True)
        if self.window % 2 == 0 or self.kernel % 2 == 0:
            from mimic2dm.utils.validate import ConfigError

            raise ConfigError("model.window", self.window, "odd window and kernel sizes")


class PeriodicAutoencoder(nn.Module):
    """DeepPhase's periodic autoencoder over velocity windows ``[B, 45, N]`` (normalised)."""

    def __init__(self, cfg: PhaseConfig, mean: torch.Tensor | None = None, std: torch.Tensor | None = None):  # fmt: skip
        super().__init__()
        self.cfg = cfg
        c, h, k, n = cfg.channels, cfg.hidden, cfg.kernel, cfg.window
        pad = k // 2
        self.encoder = nn.Sequential(nn.Conv1d(45, h, k, padding=pad), nn.ELU(), nn.Conv1d(h, c, k, padding=pad))  # fmt: skip
        self.shift = nn.ModuleList(nn.Linear(n, 2) for _ in range(c))
        self.decoder = nn.Sequential(nn.Conv1d(c, h, k, padding=pad), nn.ELU(), nn.Conv1d(h, 45, k, padding=pad))  # fmt: skip
        t = (torch.arange(n, dtype=torch.float32) - n // 2) / F.FPS
        self.register_buffer("t", t)
        self.register_buffer("freqs", torch.fft.rfftfreq(n, d=1.0 / F.FPS)[1:])
        self.register_buffer("mean", torch.zeros(45) if mean is None else mean.float())
        self.register_buffer("std", torch.ones(45) if std is None else std.float())

    def params(self, v: torch.Tensor) -> dict[str, torch.Tensor]:
        """Phase parameters of normalised windows ``v [B, 45, N]``: ``A, F, B, S [B, C]``."""
        lat = self.encoder(v)
        n = lat.shape[-1]
        spec = torch.fft.rfft(lat, dim=-1)
        power = spec[..., 1:].abs() ** 2
        total = power.sum(-1).clamp_min(1e-8)
        freq = (power * self.freqs).sum(-1) / total
        amp = 2.0 * total.sqrt() / n
        offset = spec[..., 0].real / n
        sxy = torch.stack([lin(lat[:, i]) for i, lin in enumerate(self.shift)], 1)
        shift = torch.atan2(sxy[..., 1], sxy[..., 0]) / (2 * math.pi)
        return {"A": amp, "F": freq, "B": offset, "S": shift}

    def forward(self, v: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Reconstruction ``[B, 45, N]`` and the phase parameters."""
        p = self.params(v)
        arg = 2 * math.pi * (p["F"][..., None] * self.t - p["S"][..., None])
        curves = p["A"][..., None] * torch.sin(arg) + p["B"][..., None]
        return self.decoder(curves), p

    def loss(self, v: torch.Tensor) -> dict[str, torch.Tensor]:
        rec, _ = self(v)
        mse = ((rec - v) ** 2).mean()
        return {"loss": mse, "mse": mse.detach()}


def velocity_windows(x: torch.Tensor, window: int) -> torch.Tensor:
    """Every frame's centred window of joint velocities ``[T, 45, N]`` (edges repeated), in the
    heading frame of its centre frame."""
    half = window // 2
    T = x.shape[0]
    idx = (torch.arange(T)[:, None] + torch.arange(-half, half + 1)).clamp(0, T - 1)
    v = F.velocities(x)[idx]  # [T, N, 15, 3]
    yaw = -F.heading(x)
    cos, sin = torch.cos(yaw)[:, None, None], torch.sin(yaw)[:, None, None]
    vx, vy = v[..., 0], v[..., 1]
    v = torch.stack([cos * vx - sin * vy, sin * vx + cos * vy, v[..., 2]], -1)
    return v.flatten(-2).transpose(1, 2)


def phase_vector(amp: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """``p [..., 2C]`` from amplitudes and shifts ``[..., C]`` (eq. 3, interleaved sin/cos)."""
    a = 2 * math.pi * shift
    return torch.stack([amp * torch.sin(a), amp * torch.cos(a)], -1).flatten(-2)


@torch.no_grad()
def clip_phases(model: PeriodicAutoencoder, x: torch.Tensor, chunk: int = 512) -> dict[str, torch.Tensor]:  # fmt: skip
    """Per-frame phase features of a clip ``[T, 180]``: ``p [T, 2C]``, ``A, F, S [T, C]``."""
    model.eval()
    v = velocity_windows(x, model.cfg.window)
    outs = []
    for i in range(0, len(v), chunk):
        vi = (v[i : i + chunk] - model.mean[:, None]) / model.std[:, None]
        outs.append(model.params(vi))
    p = {k: torch.cat([o[k] for o in outs]) for k in ("A", "F", "S")}
    p["p"] = phase_vector(p["A"], p["S"])
    return p


def add_phases(model: PeriodicAutoencoder, *corpora) -> None:
    """Fill ``Clip.phase`` of every clip of the corpora."""
    for corpus in corpora:
        for c in corpus.clips:
            c.phase = clip_phases(model, c.x)


def velocity_stats(corpus) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and std (floored at 1e-3) of the heading-frame joint velocities of a corpus."""
    v = torch.cat([velocity_windows(c.x, 1)[..., 0] for c in corpus.clips])
    return v.mean(0), v.std(0).clamp_min(1e-3)


def sample_velocity_windows(corpus, n: int, model: PeriodicAutoencoder, gen: torch.Generator) -> torch.Tensor:  # fmt: skip
    """``n`` normalised training windows ``[n, 45, N]`` centred on random frames."""
    w = torch.tensor([c.frames for c in corpus.clips], dtype=torch.float64)
    clips = torch.multinomial(w, n, replacement=True, generator=gen).tolist()
    out = []
    for c in clips:
        x = corpus.clips[c].x
        t = int(torch.randint(x.shape[0], (1,), generator=gen))
        lo, hi = max(0, t - model.cfg.window), min(x.shape[0], t + model.cfg.window + 1)
        out.append(velocity_windows(x[lo:hi], model.cfg.window)[t - lo])
    v = torch.stack(out)
    return (v - model.mean[:, None]) / model.std[:, None]
