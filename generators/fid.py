"""2D-motion FID: a feature extractor trained by the project, frozen and versioned.

The extractor is a 1D conv encoder over canonical windows ``[B, W, D]`` (plus the
keypoint mask as channels) pooled over time to a ``feat_dim`` vector. It is trained
contrastively (two temporally shifted, noise-jittered crops of the same clip-view are
positives, InfoNCE) with an auxiliary label classifier when labels exist, so features
describe the motion rather than only its class. Once trained it is frozen and
identified by :func:`weights_hash` (SHA-256 of its weights and normalisation); every
FID report names that hash, and loading a file whose weights do not match its stored
hash fails.

FID is the Fréchet distance between Gaussians fitted to the features of two sets;
diversity is the mean feature distance between random pairs of one set (as in T2M).
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import scipy.linalg
import torch
import torch.nn as nn
import torch.nn.functional as F
from mimic2dm.generators.data import FeatureStats, WindowBatch, WindowSampler, feature_mask
from mimic2dm.generators.vqvae import ResBlock

from mimic2dm.utils.validate import check


@dataclass
class FIDConfig:
    """Extractor hyper-parameters.

    Attributes:
        in_dim, num_keypoints: ``D`` and ``K``.
        window: frames per window ``W`` (every FID set must use it).
        width, feat_dim: conv channels and feature size.
        num_classes: labels of the auxiliary classifier (0: none).
        temperature: InfoNCE temperature; label_weight: classifier loss weight.
        max_shift: frames between the two crops of a positive pair; noise: jitter std
            (normalised units).
    """

    in_dim: int = 37
    num_keypoints: int = 17
    window: int = 32
    width: int = 128
    feat_dim: int = 64
    num_classes: int = 0
    temperature: float = 0.1
    label_weight: float = 1.0
    max_shift: int = 4
    noise: float = 0.05

    def __post_init__(self):
        for key in ("in_dim", "num_keypoints", "window", "width", "feat_dim"):
            check(f"model.{key}", getattr(self, key), ge=1, integer=True)
        check("model.num_classes", self.num_classes, ge=0, integer=True)
        check("model.temperature", self.temperature, gt=0)
        check("model.label_weight", self.label_weight, ge=0)
        check("model.max_shift", self.max_shift, ge=0, integer=True)
        check("model.noise", self.noise, ge=0)


class MotionEncoder(nn.Module):
    """``x [B, W, D]``, ``kmask [B, W, K]`` -> features ``[B, feat_dim]``."""

    def __init__(self, c: FIDConfig):
        super().__init__()
        self.config = c
        self.net = nn.Sequential(
            nn.Conv1d(c.in_dim + c.num_keypoints, c.width, 3, padding=1), nn.ReLU(),
            nn.Conv1d(c.width, c.width, 4, stride=2, padding=1), ResBlock(c.width, 1),
            nn.Conv1d(c.width, c.width, 4, stride=2, padding=1), ResBlock(c.width, 3), nn.ReLU(),
        )  # fmt: skip
        self.feat = nn.Linear(2 * c.width, c.feat_dim)
        self.proj = nn.Sequential(nn.ReLU(), nn.Linear(c.feat_dim, c.feat_dim))
        self.classifier = nn.Linear(c.feat_dim, max(1, c.num_classes))

    def forward(self, x: torch.Tensor, kmask: torch.Tensor) -> torch.Tensor:
        c = self.config
        if x.ndim != 3 or x.shape[1:] != (c.window, c.in_dim):
            raise ValueError(
                f"FID extractor: expected windows [B, {c.window}, {c.in_dim}], got {list(x.shape)}"
            )
        h = self.net(torch.cat([x, kmask.to(x.dtype)], dim=-1).transpose(1, 2))
        return self.feat(torch.cat([h.mean(-1), h.amax(-1)], dim=-1))


def info_nce(a: torch.Tensor, b: torch.Tensor, temperature: float) -> torch.Tensor:
    """Symmetric InfoNCE between paired embeddings ``a, b [B, d]`` (row i of a matches row i of b)."""
    z = F.normalize(torch.cat([a, b]), dim=-1)
    sim = z @ z.t() / temperature
    sim.fill_diagonal_(float("-inf"))
    B = a.shape[0]
    target = torch.cat([torch.arange(B, 2 * B), torch.arange(0, B)])
    return F.cross_entropy(sim, target)


def positive_pairs(
    sampler: WindowSampler, batch_size: int, max_shift: int, generator: torch.Generator
):
    """Two batches of windows of the same items, starts shifted by up to ``max_shift`` frames."""
    idx = torch.randint(len(sampler), (batch_size,), generator=generator)
    a = sampler.batch(idx)
    shift = torch.randint(-max_shift, max_shift + 1, (batch_size,), generator=generator)
    n = sampler.clips.lengths[a.item] - sampler.window
    start_b = (a.start + shift).clamp(min=torch.zeros_like(n), max=n)
    return a, sampler.batch(idx - a.start + start_b)


def extractor_loss(
    model: MotionEncoder, a: WindowBatch, b: WindowBatch, generator: torch.Generator
) -> dict:
    """Contrastive (+ label) loss of a positive pair of batches; jitter drawn from ``generator``."""
    c = model.config
    xa = a.x + c.noise * torch.randn(a.x.shape, generator=generator) * a.fmask
    xb = b.x + c.noise * torch.randn(b.x.shape, generator=generator) * b.fmask
    fa, fb = model(xa, a.kmask), model(xb, b.kmask)
    nce = info_nce(model.proj(fa), model.proj(fb), c.temperature)
    out = {"nce": nce.detach()}
    loss = nce
    if c.num_classes > 0 and bool((a.y >= 0).any()):
        ok = a.y >= 0
        logits = model.classifier(torch.cat([fa[ok], fb[ok]]))
        ce = F.cross_entropy(logits, torch.cat([a.y[ok], a.y[ok]]))
        acc = (logits.argmax(-1) == torch.cat([a.y[ok], a.y[ok]])).float().mean()
        loss = loss + c.label_weight * ce
        out |= {"ce": ce.detach(), "accuracy": acc}
    return {"loss": loss, **out}


def weights_hash(model: nn.Module, stats: FeatureStats) -> str:
    """SHA-256 (16 hex digits) of the extractor's weights and normalisation: its version."""
    h = hashlib.sha256()
    tensors = dict(model.state_dict()) | {"stats.mean": stats.mean, "stats.std": stats.std}
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        h.update(name.encode())
        h.update(str(t.dtype).encode())
        h.update(str(list(t.shape)).encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()[:16]


class FIDExtractor:
    """A frozen extractor with its normalisation and version hash.

    Args:
        model: trained :class:`MotionEncoder` (frozen here).
        stats: normalisation of its training data.
    """

    def __init__(self, model: MotionEncoder, stats: FeatureStats):
        self.model = model.eval().requires_grad_(False)
        self.stats = stats
        self.version = weights_hash(model, stats)

    @property
    def window(self) -> int:
        return self.model.config.window

    @torch.no_grad()
    def _embed(
        self, feats: torch.Tensor, kmask: torch.Tensor | None, batch_size: int = 512
    ) -> torch.Tensor:
        c = self.model.config
        if feats.ndim != 3 or feats.shape[1:] != (c.window, c.in_dim):
            raise ValueError(
                f"FID features: expected windows [N, {c.window}, {c.in_dim}], got {list(feats.shape)}"
            )
        if kmask is None:
            kmask = torch.ones(*feats.shape[:2], c.num_keypoints, dtype=torch.bool)
        x = torch.where(feature_mask(kmask), self.stats.normalize(feats.float()), torch.zeros(()))
        return torch.cat(
            [
                self.model(x[i : i + batch_size], kmask[i : i + batch_size])
                for i in range(0, len(x), batch_size)
            ]
        )

    def features(self, feats: torch.Tensor, kmask: torch.Tensor | None = None) -> np.ndarray:
        """Features ``[N, feat_dim]`` (float64) of raw canonical windows ``feats [N, W, D]``.

        Args:
            feats: raw (unnormalised) canonical features.
            kmask: ``[N, W, K]`` keypoint mask (default: all visible, as for generated motion).
        """
        return self._embed(feats, kmask).double().numpy()

    @torch.no_grad()
    def classify(self, feats: torch.Tensor, kmask: torch.Tensor | None = None) -> torch.Tensor:
        """Label ids ``[N]`` predicted by the auxiliary classifier for raw windows ``[N, W, D]``."""
        return self.model.classifier(self._embed(feats, kmask)).argmax(-1)

    def payload(self) -> dict:
        """Checkpoint dict of the frozen extractor."""
        return {"kind": "mimic2dm.fid_extractor", "config": asdict(self.model.config), "model": self.model.state_dict(),
                "stats": self.stats.to_dict(), "hash": self.version}  # fmt: skip


def load_fid_extractor(path: str | Path) -> FIDExtractor:
    """Load a frozen extractor (``fid_extractor.pt`` or its run directory) and check its hash.

    Raises:
        ValueError when the weights do not match the stored hash (the file was changed).
    """
    from mimic2dm.utils.checkpoint import load_checkpoint

    p = Path(path)
    p = p / "fid_extractor.pt" if p.is_dir() else p
    d = load_checkpoint(p)
    if d.get("kind") != "mimic2dm.fid_extractor":
        raise ValueError(
            f"{p}: field 'kind' is {d.get('kind')!r}, expected 'mimic2dm.fid_extractor'"
        )
    model = MotionEncoder(FIDConfig(**d["config"]))
    model.load_state_dict(d["model"])
    ext = FIDExtractor(model, FeatureStats.from_dict(d["stats"]))
    if ext.version != d["hash"]:
        raise ValueError(
            f"{p}: weights hash {ext.version} != stored hash {d['hash']}; the extractor was modified"
        )
    return ext


def gaussian_stats(f: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean ``[d]`` and covariance ``[d, d]`` of features ``f [N, d]``."""
    if f.ndim != 2 or f.shape[0] < 2:
        raise ValueError(f"FID: need features [N >= 2, d], got {list(f.shape)}")
    return f.mean(0), np.cov(f, rowvar=False)


def frechet_distance(mu1: np.ndarray, s1: np.ndarray, mu2: np.ndarray, s2: np.ndarray) -> float:
    """``|mu1 - mu2|^2 + tr(S1 + S2 - 2 (S1 S2)^(1/2))``."""
    covmean = scipy.linalg.sqrtm(s1 @ s2)
    if not np.isfinite(covmean).all():
        eps = 1e-6 * np.eye(s1.shape[0])
        covmean = scipy.linalg.sqrtm((s1 + eps) @ (s2 + eps))
    covmean = covmean.real
    return float(((mu1 - mu2) ** 2).sum() + np.trace(s1) + np.trace(s2) - 2 * np.trace(covmean))


def fid(f1: np.ndarray, f2: np.ndarray) -> float:
    """FID between feature sets ``f1 [N1, d]`` and ``f2 [N2, d]``."""
    return max(0.0, frechet_distance(*gaussian_stats(f1), *gaussian_stats(f2)))


def diversity(f: np.ndarray, num_pairs: int = 300, seed: int = 0) -> float:
    """Mean L2 distance between ``num_pairs`` random pairs of rows of ``f [N, d]``."""
    rng = np.random.default_rng(seed)
    i, j = rng.integers(len(f), size=num_pairs), rng.integers(len(f), size=num_pairs)
    return float(np.linalg.norm(f[i] - f[j], axis=1).mean())


def real_windows(
    sampler: WindowSampler, limit: int, stride: int = 4
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Up to ``limit`` evenly spread real windows: raw features ``[N, W, D]``, ``kmask [N, W, K]``, labels ``[N]``."""
    xs, ms, ys = [], [], []
    for b in sampler.iterate(1024, stride, limit):
        xs.append(sampler.stats.denormalize(b.x))
        ms.append(b.kmask)
        ys.append(b.y)
    return torch.cat(xs), torch.cat(ms), torch.cat(ys)


def fid_report(
    ext: FIDExtractor, real: tuple[torch.Tensor, torch.Tensor], generated: torch.Tensor
) -> dict:
    """FID and diversity of ``generated`` raw windows ``[N, W, D]`` against ``real`` (feats, kmask)."""
    fr, fg = ext.features(*real), ext.features(generated)
    return {"fid": fid(fg, fr), "diversity": diversity(fg), "diversity_real": diversity(fr),
            "fid_extractor": ext.version, "num_generated": len(fg), "num_real": len(fr)}  # fmt: skip
