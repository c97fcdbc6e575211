"""VQ-VAE motion tokenizer (paper B.4, docs/design.md section 9).

A 1D convolutional encoder maps normalised canonical windows ``[B, T, D]`` (plus the
keypoint mask ``[B, T, K]`` as input channels) to latents ``[B, T / l, C]`` with
``l = 2 ** down_t = 4``; each latent is replaced by its nearest entry of a codebook
``K x C = 512 x 128`` updated by exponential moving averages (no codebook gradient),
with dead codes reset to random encoder outputs; a commitment loss keeps the encoder
close to the codebook. The decoder mirrors the encoder with nearest-neighbour
upsampling.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from mimic2dm.generators.data import FeatureStats, WindowSampler, window_pixel_errors

from mimic2dm.utils.validate import check


@dataclass
class VQVAEConfig:
    """Tokenizer hyper-parameters (the paper's Table 5 is lost; these are ours).

    Attributes:
        in_dim: canonical feature size ``D = 2K + 3``.
        num_keypoints: ``K`` (mask input channels).
        width: conv channels; depth: residual blocks per level (dilations 1, 3, 9...).
        down_t: temporal downsampling levels, ``l = 2 ** down_t``.
        codebook_size, code_dim: the codebook ``K x C``.
        ema_decay: EMA rate of the codebook statistics.
        commitment: weight of ``|z - sg(q)|^2``.
        dead_threshold: codes whose EMA count falls below this are reset.
        global_weight: loss weight of the three global-motion channels.
    """

    in_dim: int = 37
    num_keypoints: int = 17
    width: int = 128
    depth: int = 2
    down_t: int = 2
    codebook_size: int = 512
    code_dim: int = 128
    ema_decay: float = 0.99
    commitment: float = 0.02
    dead_threshold: float = 1.0
    global_weight: float = 1.0

    def __post_init__(self):
        for key in ("in_dim", "num_keypoints", "width", "depth", "codebook_size", "code_dim"):
            check(f"model.{key}", getattr(self, key), ge=1, integer=True)
        check("model.down_t", self.down_t, ge=0, integer=True)
        check("model.ema_decay", self.ema_decay, ge=0, lt=1)
        for key in ("commitment", "dead_threshold", "global_weight"):
            check(f"model.{key}", getattr(self, key), ge=0)

    @property
    def downsample(self) -> int:
        return 2**self.down_t


class ResBlock(nn.Module):
    """``x + conv(relu(conv(relu(x))))`` with a dilated first conv (length preserved)."""

    def __init__(self, width: int, dilation: int):
        super().__init__()
        self.conv1 = nn.Conv1d(width, width, 3, padding=dilation, dilation=dilation)
        self.conv2 = nn.Conv1d(width, width, 1)

    def forward(self, x):
        return x + self.conv2(F.relu(self.conv1(F.relu(x))))


def _res_stack(width: int, depth: int) -> nn.Sequential:
    return nn.Sequential(*[ResBlock(width, 3**i) for i in range(depth)])


class Encoder(nn.Module):
    """``[B, in, T]`` -> ``[B, code_dim, T / 2**down_t]``."""

    def __init__(self, c: VQVAEConfig):
        super().__init__()
        layers = [nn.Conv1d(c.in_dim + c.num_keypoints, c.width, 3, padding=1), nn.ReLU()]
        for _ in range(c.down_t):
            layers += [
                nn.Conv1d(c.width, c.width, 4, stride=2, padding=1),
                _res_stack(c.width, c.depth),
            ]
        layers.append(nn.Conv1d(c.width, c.code_dim, 3, padding=1))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)


class Decoder(nn.Module):
    """``[B, code_dim, T']`` -> ``[B, in_dim, T' * 2**down_t]``."""

    def __init__(self, c: VQVAEConfig):
        super().__init__()
        layers = [nn.Conv1d(c.code_dim, c.width, 3, padding=1), nn.ReLU()]
        for _ in range(c.down_t):
            layers += [_res_stack(c.width, c.depth), nn.Upsample(scale_factor=2, mode="nearest"),
                       nn.Conv1d(c.width, c.width, 3, padding=1)]  # fmt: skip
        layers += [
            nn.Conv1d(c.width, c.width, 3, padding=1),
            nn.ReLU(),
            nn.Conv1d(c.width, c.in_dim, 3, padding=1),
        ]
        self.net = nn.Sequential(*layers)

    def forward(self, z):
        return self.net(z)


class EMAQuantizer(nn.Module):
    """Nearest-neighbour codebook with EMA updates and dead-code reset.

    Buffers (all in ``state_dict``, so resume is exact): ``codebook [K, C]``,
    ``ema_count [K]``, ``ema_sum [K, C]``, ``initted`` (codebook seeded from data).
    """

    def __init__(self, size: int, dim: int, decay: float, dead_threshold: float):
        super().__init__()
        self.size, self.dim, self.decay, self.dead_threshold = size, dim, decay, dead_threshold
        self.register_buffer("codebook", torch.zeros(size, dim))
        self.register_buffer("ema_count", torch.zeros(size))
        self.register_buffer("ema_sum", torch.zeros(size, dim))
        self.register_buffer("initted", torch.tensor(False))

    def _random_rows(self, z: torch.Tensor, n: int) -> torch.Tensor:
        """``n`` rows of ``z [N, C]`` drawn with the global torch RNG (saved with checkpoints)."""
        return z[torch.randint(z.shape[0], (n,))]

    def quantize(self, z: torch.Tensor) -> torch.Tensor:
        """Code indices ``[N]`` of the nearest codebook entries to ``z [N, C]``."""
        d = (
            z.pow(2).sum(1, keepdim=True)
            - 2 * z @ self.codebook.t()
            + self.codebook.pow(2).sum(1)[None]
        )
        return d.argmin(dim=1)

    @torch.no_grad()
    def _update(self, z: torch.Tensor, idx: torch.Tensor) -> None:
        onehot = F.one_hot(idx, self.size).type(z.dtype)
        self.ema_count.mul_(self.decay).add_(onehot.sum(0), alpha=1 - self.decay)
        self.ema_sum.mul_(self.decay).add_(onehot.t() @ z, alpha=1 - self.decay)
        dead = self.ema_count < self.dead_threshold
        fresh = self._random_rows(z, self.size)
        self.codebook.copy_(
            torch.where(
                dead[:, None], fresh, self.ema_sum / self.ema_count.clamp_min(1e-5)[:, None]
            )
        )
        self.ema_sum.copy_(torch.where(dead[:, None], fresh, self.ema_sum))
        self.ema_count.copy_(torch.where(dead, torch.ones_like(self.ema_count), self.ema_count))

    def forward(
        self, z: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Quantise ``z [B, T', C]``.

        Returns:
            ``zq [B, T', C]`` (straight-through), indices ``[B, T']``, commitment loss
            ``|z - sg(zq)|^2`` and the batch perplexity of code usage.
        """
        B, T, C = z.shape
        flat = z.reshape(-1, C)
        if self.training and not bool(self.initted):
            with torch.no_grad():
                rows = self._random_rows(flat.detach(), self.size)
                self.codebook.copy_(rows)
                self.ema_sum.copy_(rows)
                self.ema_count.fill_(1.0)
                self.initted.fill_(True)
        idx = self.quantize(flat.detach())
        if self.training:
            self._update(flat.detach(), idx)
        zq = self.codebook[idx]
        commit = F.mse_loss(flat, zq.detach())
        zq = flat + (zq - flat).detach()
        p = torch.bincount(idx, minlength=self.size).float() / idx.numel()
        perplexity = torch.exp(-(p * torch.log(p.clamp_min(1e-10))).sum())
        return zq.reshape(B, T, C), idx.reshape(B, T), commit, perplexity


class VQVAE(nn.Module):
    """Encoder, EMA quantizer and decoder over normalised canonical windows."""

    def __init__(self, config: VQVAEConfig):
        super().__init__()
        self.config = config
        self.encoder = Encoder(config)
        self.quantizer = EMAQuantizer(
            config.codebook_size, config.code_dim, config.ema_decay, config.dead_threshold
        )
        self.decoder = Decoder(config)

    def _check(self, x: torch.Tensor, kmask: torch.Tensor) -> None:
        c = self.config
        if x.ndim != 3 or x.shape[-1] != c.in_dim:
            raise ValueError(f"VQVAE: expected windows [B, T, {c.in_dim}], got {list(x.shape)}")
        if kmask.shape != (*x.shape[:2], c.num_keypoints):
            raise ValueError(
                f"VQVAE: expected keypoint mask [B, T, {c.num_keypoints}] = {[*x.shape[:2], c.num_keypoints]}, got {list(kmask.shape)}"
            )
        if x.shape[1] % c.downsample:
            raise ValueError(
                f"VQVAE: window length {x.shape[1]} is not a multiple of l = {c.downsample}"
            )

    def encode_latent(self, x: torch.Tensor, kmask: torch.Tensor) -> torch.Tensor:
        """``x [B, T, D]``, ``kmask [B, T, K]`` -> latents ``[B, T / l, C]``."""
        self._check(x, kmask)
        inp = torch.cat([x, kmask.to(x.dtype)], dim=-1).transpose(1, 2)
        return self.encoder(inp).transpose(1, 2)

    @torch.no_grad()
    def encode(self, x: torch.Tensor, kmask: torch.Tensor | None = None) -> torch.Tensor:
        """Token indices ``[B, T / l]`` of normalised windows ``x [B, T, D]``."""
        if kmask is None:
            kmask = torch.ones(*x.shape[:2], self.config.num_keypoints, dtype=torch.bool)
        z = self.encode_latent(x, kmask)
        return self.quantizer.quantize(z.reshape(-1, z.shape[-1])).reshape(z.shape[:2])

    def decode(self, idx: torch.Tensor) -> torch.Tensor:
        """Token indices ``[B, T']`` -> normalised features ``[B, T' * l, D]``."""
        z = self.quantizer.codebook[idx]
        return self.decoder(z.transpose(1, 2)).transpose(1, 2)

    def forward(
        self, x: torch.Tensor, fmask: torch.Tensor, kmask: torch.Tensor
    ) -> tuple[torch.Tensor, dict]:
        """Reconstruct a batch and compute the training loss.

        Args:
            x: ``[B, T, D]`` normalised windows (masked entries 0).
            fmask: ``[B, T, D]`` feature mask (loss only where True).
            kmask: ``[B, T, K]`` keypoint mask (encoder input channels).

        Returns:
            ``recon [B, T, D]`` and a dict with ``loss``, ``recon``, ``commit``, ``perplexity``.
        """
        z = self.encode_latent(x, kmask)
        zq, _, commit, ppl = self.quantizer(z)
        recon = self.decoder(zq.transpose(1, 2)).transpose(1, 2)
        w = fmask.to(x.dtype).clone()
        w[..., -3:] *= self.config.global_weight
        rec = (F.smooth_l1_loss(recon, x, reduction="none") * w).sum() / w.sum().clamp_min(1.0)
        loss = rec + self.config.commitment * commit
        return recon, {
            "loss": loss,
            "recon": rec.detach(),
            "commit": commit.detach(),
            "perplexity": ppl.detach(),
        }


@torch.no_grad()
def evaluate_tokenizer(model: VQVAE, sampler: WindowSampler, stats: FeatureStats, stride: int = 8,
                       limit: int | None = 2048, batch_size: int = 256) -> dict[str, float]:  # fmt: skip
    """Reconstruction error and codebook statistics over a deterministic set of windows.

    Args:
        model: the tokenizer (put in eval mode here, restored after).
        sampler: windows of the evaluation clips.
        stats: normalisation of ``sampler``.
        stride: start positions taken every ``stride`` frames; ``limit``: at most this many windows.

    Returns:
        ``recon_px`` (mean error in 1080p pixels after ``G^-1`` with decoded global
        motion), ``recon_pose_px`` (local pose only), ``usage`` (fraction of codes
        used), ``perplexity`` (of code usage over the set), ``windows``.
    """
    was = model.training
    model.eval()
    full, pose, counts = [], [], torch.zeros(model.config.codebook_size)
    for b in sampler.iterate(batch_size, stride, limit):
        idx = model.encode(b.x, b.kmask)
        recon = model.decode(idx)
        f, p = window_pixel_errors(recon, b, stats)
        full.append(f)
        pose.append(p)
        counts += torch.bincount(idx.flatten(), minlength=counts.numel()).float()
    model.train(was)
    prob = counts / counts.sum()
    ppl = torch.exp(-(prob * torch.log(prob.clamp_min(1e-10))).sum())
    return {"recon_px": float(torch.cat(full).mean()), "recon_pose_px": float(torch.cat(pose).mean()),
            "usage": float((counts > 0).float().mean()), "perplexity": float(ppl), "windows": len(torch.cat(full))}  # fmt: skip


def tokenizer_payload(model: VQVAE, stats: FeatureStats, data_info: dict) -> dict:
    """What a generator checkpoint keeps of its tokenizer (config, weights, stats, data)."""
    from dataclasses import asdict

    return {
        "config": asdict(model.config),
        "model": model.state_dict(),
        "stats": stats.to_dict(),
        "data": dict(data_info),
    }


def tokenizer_from_payload(payload: dict) -> tuple[VQVAE, FeatureStats, dict]:
    """Inverse of :func:`tokenizer_payload`; the model is returned in eval mode."""
    model = VQVAE(VQVAEConfig(**payload["config"]))
    model.load_state_dict(payload["model"])
    return model.eval(), FeatureStats.from_dict(payload["stats"]), dict(payload["data"])
