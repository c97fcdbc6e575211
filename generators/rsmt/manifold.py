"""RSMT's motion manifold (paper sec. 3.1, Fig. 2): a conditional VAE over pose changes with a
phase-gated mixture of experts.

- Encoder: ``(s^t, s^{t+1}) -> (mu, log sigma^2)`` of ``z`` (``latent`` numbers).
- Gating: ``(z, p^{t+1}) -> softmax`` weights of ``experts`` experts.
- Decoder: ``(s^t, v_h^{t+1}, z) -> Delta s^{t+1}`` through layers whose weights are the
  gate-weighted blend of the experts' weights (as in MANN / Motion VAEs' MoE).

Frames are normalised with the corpus :class:`~mimic2dm.generators.rsmt.data.Stats`; the
decoder predicts the normalised change and ``s^{t+1} = s^t + Delta``. Training rolls the
decoder out over a window, feeding back its own frames (encoder sees the prediction and the
next true frame), with ``L = L_rec + beta L_kl + L_foot`` (eqs. 4-5).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from mimic2dm.generators.rsmt import features as F
from mimic2dm.generators.rsmt.data import Stats
from mimic2dm.generators.rsmt.metrics import foot_contact_prob
from torch import nn

from mimic2dm.utils.validate import check


@dataclass
class ManifoldConfig:
    """``model:`` of the motion manifold.

    Attributes:
        latent: size of ``z``; experts: experts of the mixture; hidden: layer width;
        gate_hidden: gating network width; beta: KL weight; foot_weight: weight of L_foot.
        phase_dim: ``2 * channels`` of the phase model (set by the app).
    """

    latent: int = 32
    experts: int = 8
    hidden: int = 256
    gate_hidden: int = 64
    beta: float = 0.001
    foot_weight: float = 1.0
    phase_dim: int = 10

    def __post_init__(self) -> None:
        for k in ("latent", "experts", "hidden", "gate_hidden", "phase_dim"):
            check(f"model.{k}", getattr(self, k), ge=1, integer=True)
        check("model.beta", self.beta, ge=0.0)
        check("model.foot_weight", self.foot_weight, ge=0.0)


class MixtureLinear(nn.Module):
    """A linear layer whose weights are the blend ``sum_k w_k W_k`` of ``experts`` layers.

    The experts' weights sit side by side in one ``[inp, experts * out]`` matrix: one matrix
    product gives every expert's output, blended by ``w`` (the same as blending the weights
    first, without copying them per call).
    """

    def __init__(self, experts: int, inp: int, out: int):
        super().__init__()
        self.experts, self.out = experts, out
        self.weight = nn.Parameter(torch.randn(inp, experts * out) * (1.0 / inp) ** 0.5)
        self.bias = nn.Parameter(torch.zeros(experts * out))

    def forward(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """``x [B, inp]``, blend weights ``w [B, experts]`` -> ``[B, out]``."""
        y = torch.addmm(self.bias, x, self.weight).view(-1, self.experts, self.out)
        return (w.unsqueeze(-1) * y).sum(1)


class MotionManifold(nn.Module):
    """Encoder, gating network and mixture-of-experts decoder over normalised frames."""

    def __init__(self, cfg: ManifoldConfig, stats: Stats):
        super().__init__()
        self.cfg = cfg
        h, z = cfg.hidden, cfg.latent
        for k, v in stats.__dict__.items():
            self.register_buffer(k, v.float().clone())
        self.encoder = nn.Sequential(nn.Linear(2 * F.D, h), nn.ELU(), nn.Linear(h, h), nn.ELU(), nn.Linear(h, 2 * z))  # fmt: skip
        self.gate = nn.Sequential(nn.Linear(z + cfg.phase_dim, cfg.gate_hidden), nn.ELU(), nn.Linear(cfg.gate_hidden, cfg.experts))  # fmt: skip
        inp = F.D + F.HIP + z
        self.layers = nn.ModuleList([MixtureLinear(cfg.experts, inp, h), MixtureLinear(cfg.experts, h + z, h),
                                     MixtureLinear(cfg.experts, h + z, F.D)])  # fmt: skip

    def norm(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std

    def encode(self, s: torch.Tensor, s_next: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mu, logvar)`` of ``z`` for the transition ``s -> s_next`` (raw frames)."""
        mu, logvar = self.encoder(torch.cat([self.norm(s), self.norm(s_next)], -1)).chunk(2, -1)
        return mu, logvar.clamp(-10.0, 10.0)

    def decode(self, s: torch.Tensor, hip: torch.Tensor, z: torch.Tensor, phase: torch.Tensor) -> torch.Tensor:  # fmt: skip
        """Next raw frame from the raw frame ``s``, the next hip feature, ``z`` and the next phase."""
        w = torch.softmax(self.gate(torch.cat([z, phase], -1)), -1)
        hn = (hip - self.hmean) / self.hstd
        y = torch.nn.functional.elu(self.layers[0](torch.cat([self.norm(s), hn, z], -1), w))
        y = torch.nn.functional.elu(self.layers[1](torch.cat([y, z], -1), w))
        d = self.layers[2](torch.cat([y, z], -1), w)
        return s + d * self.dstd + self.dmean

    def rollout_loss(self, x: torch.Tensor, phase: torch.Tensor) -> dict[str, torch.Tensor]:
        """Autoregressive reconstruction of windows ``x [B, L, 180]`` with phases ``[B, L, 2C]``."""
        s = x[:, 0]
        preds, kls = [], []
        for t in range(x.shape[1] - 1):
            mu, logvar = self.encode(s, x[:, t + 1])
            z = mu + torch.randn_like(mu) * (0.5 * logvar).exp()
            s = self.decode(s, F.hip(x[:, t + 1]), z, phase[:, t + 1])
            preds.append(s)
            kls.append(-0.5 * (1 + logvar - mu**2 - logvar.exp()).sum(-1).mean())
        pred = torch.stack(preds, 1)
        prev = torch.cat([x[:, :1], pred[:, :-1]], 1)
        return self.losses(pred, x[:, 1:], torch.stack(kls).mean(), prev)

    def losses(self, pred, gt, kl, prev) -> dict[str, torch.Tensor]:
        rec = ((self.norm(pred) - self.norm(gt)) ** 2).mean()
        foot = foot_loss(pred, gt, prev)
        loss = rec + self.cfg.beta * kl + self.cfg.foot_weight * foot
        err = (F.positions(pred) - F.positions(gt)).norm(dim=-1).mean()
        return {"loss": loss, "rec": rec.detach(), "kl": kl.detach(), "foot": foot.detach(), "pos_err_m": err.detach()}  # fmt: skip


def foot_loss(pred: torch.Tensor, gt: torch.Tensor, prev: torch.Tensor) -> torch.Tensor:
    """L_foot: predicted foot displacement speed (from positions) squared, weighted by the true
    contact probability. ``pred, gt [B, L, 180]``; ``prev`` the frames before them."""
    feet = list(F.FEET)
    pv = (F.positions(pred)[..., feet, :] - F.positions(prev)[..., feet, :]) * F.FPS
    gv = F.velocities(gt)[..., feet, :].norm(dim=-1)
    return ((pv**2).sum(-1) * foot_contact_prob(gv)).mean()
