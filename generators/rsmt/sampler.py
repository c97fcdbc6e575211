"""RSMT's style motion sampler (paper sec. 3.2, Fig. 3) and transition generation.

Per step ``t`` of a transition to the target ``s^T`` in ``T`` frames, with a style example
``M_s``:

- the style encoder (1D convolutions, stride 2 twice) turns ``M_s`` into a temporal style code
  ``k`` (one vector per 4 frames: the paper keeps the time axis);
- the state encoder embeds ``s^t``; the style embedding attends from it over ``k`` and
  modulates it (FiLM by the attended code);
- the target and offset encoders embed ``s^T`` and ``s^T - s^t`` (the offset twice: over the
  frames' spread, and over the frame-to-frame change times the frames to go, i.e. as the
  average change per frame it asks for); their concatenation gets the
  time-varying noise ``lambda N(0, 0.5)`` (eq. 6, ``t_zero`` 5, ``t_period`` 30) and the
  sinusoidal embedding of the frames to go ``z_dt`` (eq. 7);
- an LSTM cell takes ``(E_sty + z_dt, h_target)``; the decoder maps ``(p^t, LSTM output,
  h_target)`` to the manifold's ``z^{t+1}``, the hip feature ``v_h^{t+1}``, an intermediate
  phase ``p_hat``, amplitudes ``A_hat`` and frequencies ``F_hat``;
- the next phase is the halfway slerp of ``p_hat`` and ``p_tilde = A_hat R(2 pi F_hat dt) p^t``
  (eq. 8), amplitudes averaged;
- the frozen manifold decodes ``s^{t+1}`` from ``(s^t, v_h^{t+1}, z^{t+1}, p^{t+1})``.

Training rolls the whole transition out from the true first frame and minimises ``L_rec
(L1) + w_last L_last + w_foot L_foot + w_phase L_phase`` (eq. 9) against the true window.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from mimic2dm.generators.rsmt import features as F
from mimic2dm.generators.rsmt.manifold import MotionManifold, foot_loss
from torch import nn

from mimic2dm.utils.validate import ConfigError, check


@dataclass
class SamplerConfig:
    """``model:`` of the sampler.

    Attributes:
        hidden: encoder width; lstm: LSTM width; style_channels: style code width;
        style_frames: frames of a style example; time_dim: size of ``z_dt``;
        noise_std, t_zero, t_period: the time-varying noise (eq. 6);
        min_frames, max_frames: transition lengths drawn in training (frames after the start);
        last_weight, foot_weight, phase_weight: loss weights; last_pos_weight: weight of the
            last frame's joint-position error in metres (L1), beside ``L_last`` on normalised
            features; phase_channels: set by the app.
    """

    hidden: int = 256
    lstm: int = 256
    style_channels: int = 64
    style_frames: int = 60
    noise_std: float = 0.5
    t_zero: float = 5.0
    t_period: float = 30.0
    min_frames: int = 10
    max_frames: int = 60
    last_weight: float = 4.0
    last_pos_weight: float = 100.0
    foot_weight: float = 0.5
    phase_weight: float = 0.1
    phase_channels: int = 5

    def __post_init__(self) -> None:
        for k in ("hidden", "lstm", "style_channels", "style_frames", "min_frames", "max_frames", "phase_channels"):  # fmt: skip
            check(f"model.{k}", getattr(self, k), ge=1, integer=True)
        for k in ("noise_std", "last_weight", "last_pos_weight", "foot_weight", "phase_weight"):
            check(f"model.{k}", getattr(self, k), ge=0.0)
        if self.max_frames < self.min_frames:
            raise ConfigError("model.max_frames", self.max_frames, f">= model.min_frames ({self.min_frames})")  # fmt: skip
        if not 0 <= self.t_zero < self.t_period:
            raise ConfigError(
                "model.t_period", self.t_period, f"> model.t_zero ({self.t_zero}) >= 0"
            )


def _mlp(inp: int, hidden: int, out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inp, hidden), nn.ELU(), nn.Linear(hidden, out))


class StyleEncoder(nn.Module):
    """Temporal style code ``[B, L/4, C]`` of a normalised style example ``[B, L, 180]``."""

    def __init__(self, channels: int):
        super().__init__()
        self.net = nn.Sequential(nn.Conv1d(F.D, channels * 2, 5, stride=2, padding=2), nn.ELU(),
                                 nn.Conv1d(channels * 2, channels, 5, stride=2, padding=2), nn.ELU(),
                                 nn.Conv1d(channels, channels, 3, padding=1))  # fmt: skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.transpose(1, 2)).transpose(1, 2)


class StyleEmbedding(nn.Module):
    """Attention from a state embedding over the style code, then FiLM of the state by it."""

    def __init__(self, hidden: int, channels: int):
        super().__init__()
        self.q = nn.Linear(hidden, channels)
        self.film = nn.Linear(channels, 2 * hidden)

    def forward(self, e: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        att = torch.softmax(torch.einsum("bc,btc->bt", self.q(e), k) / math.sqrt(k.shape[-1]), -1)
        ctx = torch.einsum("bt,btc->bc", att, k)
        g, b = self.film(ctx).chunk(2, -1)
        return e * (1 + g) + b


@dataclass
class Step:
    """One sampler step's outputs: the next frame and phase and the phase heads."""

    frame: torch.Tensor
    phase: torch.Tensor
    p_hat: torch.Tensor
    p_tilde: torch.Tensor
    amp: torch.Tensor
    freq: torch.Tensor


class MotionSampler(nn.Module):
    """The sampler over a frozen :class:`MotionManifold` (which it holds, not trains)."""

    def __init__(self, cfg: SamplerConfig, manifold: MotionManifold):
        super().__init__()
        self.cfg = cfg
        self.manifold = manifold.eval().requires_grad_(False)
        h, c, pc = cfg.hidden, cfg.style_channels, cfg.phase_channels
        self.style = StyleEncoder(c)
        self.state = _mlp(F.D, h, h)
        self.style_embed = StyleEmbedding(h, c)
        self.target = _mlp(F.D, h, h // 2)
        self.offset = _mlp(2 * F.D, h, h - h // 2)
        self.lstm = nn.LSTMCell(2 * h, cfg.lstm)
        z = manifold.cfg.latent
        self.out_sizes = (z, F.HIP, 2 * pc, pc, pc)
        self.decoder = nn.Sequential(nn.Linear(2 * pc + cfg.lstm + h, h), nn.ELU(), nn.Linear(h, h), nn.ELU(),
                                     nn.Linear(h, sum(self.out_sizes)))  # fmt: skip

    def train(self, mode: bool = True):
        super().train(mode)
        self.manifold.eval()  # frozen: no dropout/batch statistics, whatever the mode
        return self

    def encode_style(self, style: torch.Tensor) -> torch.Tensor:
        """Style code of raw style examples ``[B, L, 180]`` (canonical)."""
        return self.style(self.manifold.norm(style))

    def noise_scale(self, to_go: int) -> float:
        """``lambda`` of eq. 6 for ``to_go`` frames left."""
        c = self.cfg
        return min(max((to_go - c.t_zero) / (c.t_period - c.t_zero), 0.0), 1.0)

    def step(self, s: torch.Tensor, phase: torch.Tensor, target: torch.Tensor, k: torch.Tensor,
             to_go: int, state, gen: torch.Generator | None = None) -> tuple[Step, tuple]:  # fmt: skip
        """One frame: ``s [B, 180]`` raw, ``phase [B, 2C]``, ``target [B, 180]`` raw, style code
        ``k``, ``to_go`` frames left before the target, LSTM ``state`` (None at the start)."""
        m, c = self.manifold, self.cfg
        zdt = F.time_embedding(torch.full(s.shape[:1], float(to_go)), c.hidden)
        e = self.style_embed(self.state(m.norm(s)), k) + zdt
        off = target - s
        off = torch.cat([off / m.std, off / (m.dstd * to_go)], -1)  # where, and how fast per frame
        ht = torch.cat([self.target(m.norm(target)), self.offset(off)], -1)
        lam = self.noise_scale(to_go)
        if lam > 0 and c.noise_std > 0:
            ht = ht + lam * c.noise_std * torch.randn(ht.shape, generator=gen)
        ht = ht + zdt
        hx, cx = self.lstm(torch.cat([e, ht], -1), state)
        z, hip, p_hat, amp, freq = self.decoder(torch.cat([phase, hx, ht], -1)).split(self.out_sizes, -1)  # fmt: skip
        amp = torch.nn.functional.softplus(amp)
        p_tilde = rotate_phase(phase, freq, amp)
        nxt = blend_phase(p_tilde, p_hat)
        hip = hip * m.hstd + m.hmean
        frame = m.decode(s, hip, z, nxt)
        return Step(frame, nxt, p_hat, p_tilde, amp, freq), (hx, cx)

    def rollout(self, start: torch.Tensor, phase0: torch.Tensor, target: torch.Tensor, frames: int,
                style: torch.Tensor, gen: torch.Generator | None = None) -> Iterator[Step]:  # fmt: skip
        """Steps 1..``frames`` of the transition from ``start`` to ``target`` (reached at the last)."""
        k = self.encode_style(style)
        s, phase, state = start, phase0, None
        for t in range(frames):
            out, state = self.step(s, phase, target, k, frames - t, state, gen)
            s, phase = out.frame, out.phase
            yield out

    def loss(self, x: torch.Tensor, ph: dict[str, torch.Tensor], style: torch.Tensor,
             gen: torch.Generator | None = None) -> dict[str, torch.Tensor]:  # fmt: skip
        """Losses of transitions through windows ``x [B, L+1, 180]`` (start, in-between, target)
        with their phases ``ph`` and style examples ``[B, Ls, 180]``."""
        frames = x.shape[1] - 1
        steps = list(self.rollout(x[:, 0], ph["p"][:, 0], x[:, -1], frames, style, gen))
        pred = torch.stack([o.frame for o in steps], 1)
        gt = x[:, 1:]
        m, c = self.manifold, self.cfg
        rec = (m.norm(pred) - m.norm(gt)).abs().mean()
        last = (m.norm(pred[:, -1]) - m.norm(gt[:, -1])).abs().mean()
        prev = torch.cat([x[:, :1], pred[:, :-1]], 1)
        foot = foot_loss(pred, gt, prev)

        def st(key: str) -> torch.Tensor:
            return torch.stack([getattr(o, key) for o in steps], 1)

        phase = (((st("amp") - ph["A"][:, 1:]) ** 2).mean() + ((st("freq") - ph["F"][:, 1:]) ** 2).mean()
                 + 0.5 * ((st("p_hat") - ph["p"][:, 1:]) ** 2).mean()
                 + 0.5 * ((st("p_tilde") - ph["p"][:, 1:]) ** 2).mean())  # fmt: skip
        err = (F.positions(pred[:, -1]) - F.positions(gt[:, -1])).norm(dim=-1).mean()
        loss = rec + c.last_weight * last + c.foot_weight * foot + c.phase_weight * phase
        if c.last_pos_weight:
            loss = (
                loss
                + c.last_pos_weight
                * (F.positions(pred[:, -1]) - F.positions(gt[:, -1])).abs().mean()
            )
        return {"loss": loss, "rec": rec.detach(), "last": last.detach(), "foot": foot.detach(),
                "phase": phase.detach(), "last_err_m": err.detach()}  # fmt: skip


def rotate_phase(phase: torch.Tensor, freq: torch.Tensor, amp: torch.Tensor) -> torch.Tensor:
    """``A_hat R(2 pi F_hat / fps) p^t`` per channel (unit direction of ``p^t``), eq. 8."""
    p = phase.unflatten(-1, (-1, 2))  # (sin, cos) pairs
    u = p / p.norm(dim=-1, keepdim=True).clamp_min(1e-6)
    th = 2 * math.pi * freq / F.FPS
    cos, sin = torch.cos(th), torch.sin(th)
    rs = u[..., 0] * cos + u[..., 1] * sin
    rc = u[..., 1] * cos - u[..., 0] * sin
    return (torch.stack([rs, rc], -1) * amp[..., None]).flatten(-2)


def blend_phase(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Halfway slerp of the angles and mean of the amplitudes of phase vectors ``[..., 2C]``."""
    pa, pb = a.unflatten(-1, (-1, 2)), b.unflatten(-1, (-1, 2))
    na, nb = pa.norm(dim=-1, keepdim=True), pb.norm(dim=-1, keepdim=True)
    ua, ub = pa / na.clamp_min(1e-6), pb / nb.clamp_min(1e-6)
    mid = ua + ub
    n = mid.norm(dim=-1, keepdim=True)
    mid = torch.where(n > 1e-4, mid / n.clamp_min(1e-6), ua)  # opposite directions: keep a's
    return (mid * 0.5 * (na + nb)).flatten(-2)
