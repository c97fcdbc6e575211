"""Style classifier for RSMT's FMD (paper sec. 5.1).

A convolutional style encoder over canonical motion windows ``[B, T, 180]`` (1D
convolutions over time, the 180 feature channels of all joints as input channels),
followed by a pooling layer that removes the time and joint axes (global average over
time; the joints are already mixed into the channels) and a linear layer whose softmax
gives the style. The pooled features (:meth:`StyleClassifier.embed`) are the space of the
Fréchet Motion Distance, :func:`frechet_distance`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from mimic2dm.generators.fid import fid
from mimic2dm.generators.rsmt.features import D

from mimic2dm.utils.validate import check

MIN_FRAMES = 8  # shortest window the classifier accepts


@dataclass
class StyleClassifierConfig:
    """Classifier hyper-parameters.

    Attributes:
        width: channels of every convolution (and size of the pooled embedding).
        layers: number of convolutions (kernel ``kernel``, stride 1, same padding).
        kernel: odd temporal kernel size.
        dropout: dropout after each convolution.
        num_styles: number of style classes (set from the data set).
    """

    width: int = 64
    layers: int = 3
    kernel: int = 5
    dropout: float = 0.1
    num_styles: int = 100

    def __post_init__(self):
        for key in ("width", "layers", "kernel"):
            check(f"model.{key}", getattr(self, key), ge=1, integer=True)
        if self.kernel % 2 == 0:
            raise ValueError(f"model.kernel={self.kernel}: expected an odd kernel size")
        check("model.dropout", self.dropout, ge=0, lt=1)
        check("model.num_styles", self.num_styles, ge=2, integer=True)


class StyleClassifier(nn.Module):
    """``x [B, T, 180]`` (any ``T >= 8``) -> style logits ``[B, num_styles]``.

    Args:
        config: hyper-parameters.
        mean, std: per-channel normalisation ``[180]`` applied inside the model (stored
            as buffers); defaults zeros and ones. Channels with ``std < 1e-6`` (constant
            in the data) are divided by 1 instead.
    """

    def __init__(
        self,
        config: StyleClassifierConfig,
        mean: torch.Tensor | None = None,
        std: torch.Tensor | None = None,
    ):
        super().__init__()
        self.config = c = config
        mean = torch.zeros(D) if mean is None else torch.as_tensor(mean, dtype=torch.float32)
        std = torch.ones(D) if std is None else torch.as_tensor(std, dtype=torch.float32)
        if mean.shape != (D,) or std.shape != (D,):
            raise ValueError(f"mean {list(mean.shape)}, std {list(std.shape)}: need [{D}]")
        self.register_buffer("mean", mean.clone())
        self.register_buffer("std", torch.where(std < 1e-6, torch.ones_like(std), std))
        blocks: list[nn.Module] = []
        for i in range(c.layers):
            conv = nn.Conv1d(D if i == 0 else c.width, c.width, c.kernel, padding=c.kernel // 2)
            blocks += [conv, nn.ReLU(), nn.Dropout(c.dropout)]
        self.encoder = nn.Sequential(*blocks)
        self.head = nn.Linear(c.width, c.num_styles)

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        """Pooled style features ``[B, width]`` of windows ``x [B, T, 180]``."""
        if x.ndim != 3 or x.shape[-1] != D or x.shape[1] < MIN_FRAMES:
            raise ValueError(f"x: expected [B, T >= {MIN_FRAMES}, {D}], got {list(x.shape)}")
        z = ((x - self.mean) / self.std).transpose(1, 2)  # [B, 180, T]
        return self.encoder(z).mean(dim=-1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``[B, num_styles]`` (softmax gives the style probabilities)."""
        return self.head(self.embed(x))

    @torch.no_grad()
    def predict(self, x: torch.Tensor) -> torch.Tensor:
        """Style labels ``[B]`` (long), computed in eval mode (no dropout)."""
        was_training = self.training
        self.eval()
        try:
            return self(x).argmax(dim=-1)
        finally:
            self.train(was_training)


def classifier_loss(model: StyleClassifier, x: torch.Tensor, y: torch.Tensor) -> dict:
    """Cross-entropy of the softmax over styles.

    Args:
        model: the classifier.
        x: windows ``[B, T, 180]``; y: labels ``[B]`` (long).

    Returns:
        ``{"loss": scalar tensor (differentiable), "accuracy": float in [0, 1]}``.
    """
    logits = model(x)
    loss = F.cross_entropy(logits, y)
    acc = (logits.argmax(-1) == y).float().mean().item()
    return {"loss": loss, "accuracy": acc}


def _groups_by_length(windows: Sequence[torch.Tensor]) -> dict[int, list[int]]:
    groups: dict[int, list[int]] = {}
    for i, w in enumerate(windows):
        groups.setdefault(int(w.shape[0]), []).append(i)
    return groups


@torch.no_grad()
def embed_windows(model: StyleClassifier, windows: Sequence[torch.Tensor]) -> np.ndarray:
    """Eval-mode embeddings ``[N, width]`` of ``N`` windows ``[T_i, 180]`` of any lengths."""
    was_training = model.training
    model.eval()
    try:
        out = torch.zeros(len(windows), model.config.width)
        for idx in _groups_by_length(windows).values():
            out[idx] = model.embed(torch.stack([windows[i] for i in idx])).float().cpu()
    finally:
        model.train(was_training)
    return out.numpy()


def accuracy(
    model: StyleClassifier,
    windows: Sequence[torch.Tensor],
    labels: Sequence[int] | torch.Tensor,
) -> float:
    """Fraction of windows ``[T_i, 180]`` (lengths may differ) classified as ``labels``."""
    labels = torch.as_tensor(labels, dtype=torch.long)
    if len(windows) != len(labels) or len(windows) == 0:
        raise ValueError(f"accuracy: {len(windows)} windows, {len(labels)} labels")
    correct = 0
    for idx in _groups_by_length(windows).values():
        pred = model.predict(torch.stack([windows[i] for i in idx])).cpu()
        correct += int((pred == labels[idx]).sum())
    return correct / len(windows)


def frechet_distance(
    feats_a: np.ndarray | torch.Tensor, feats_b: np.ndarray | torch.Tensor
) -> float:
    """Fréchet (Motion) Distance between two sets of embeddings ``[N_a, d]``, ``[N_b, d]``.

    ``|mu_a - mu_b|^2 + tr(S_a + S_b - 2 (S_a S_b)^(1/2))`` of the fitted Gaussians, with
    the real part of ``scipy.linalg.sqrtm`` (clamped at 0; needs ``N >= 2`` per set).
    """
    a = torch.as_tensor(feats_a).detach().cpu().double().numpy()
    b = torch.as_tensor(feats_b).detach().cpu().double().numpy()
    return fid(a, b)
