"""Token sequences for the GPT: clip-views tokenized by a frozen VQ-VAE.

Single-view: one sequence per clip-view. Multi-view (``V > 1``, paper B.5): the first
``V`` views of each file (an orthogonal pair for the CMU views), tokenized separately
and interleaved time-major, ``[c_0^0, c_0^1, c_1^0, c_1^1, ...]``. Training windows
start at a time-step boundary and hold ``block_size`` tokens; shorter sequences give
one window padded with ``IGNORE`` targets.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from mimic2dm.generators.data import ClipSet, FeatureStats, feature_mask
from mimic2dm.generators.gpt import IGNORE
from mimic2dm.generators.vqvae import VQVAE


@dataclass
class TokenSequences:
    """Tokenized clips.

    Attributes:
        seqs: ``S`` long tensors ``[L_s]`` (time-major, ``V`` tokens per time step).
        labels: ``[S]`` label ids (``-1``: none).
        num_views: ``V``.
    """

    seqs: list[torch.Tensor]
    labels: torch.Tensor
    num_views: int


@torch.no_grad()
def encode_item(tokenizer: VQVAE, clips: ClipSet, stats: FeatureStats, c: int) -> torch.Tensor:
    """Tokens ``[T // l]`` of the whole item ``c`` (trailing frames beyond a multiple of ``l`` dropped)."""
    it = clips.item(c)
    T = it["feats"].shape[0] // tokenizer.config.downsample * tokenizer.config.downsample
    x = torch.where(feature_mask(it["mask"][:T]), stats.normalize(it["feats"][:T]), torch.zeros(()))
    return tokenizer.encode(x[None], it["mask"][None, :T])[0]


def tokenize_clips(
    tokenizer: VQVAE, clips: ClipSet, stats: FeatureStats, num_views: int = 1
) -> TokenSequences:
    """Tokenize every item (``V = 1``) or every file's first ``V`` views (``V > 1``).

    Raises:
        ValueError naming the file when a file lacks ``V`` views of equal length.
    """
    tokenizer.eval()
    if num_views == 1:
        seqs = [encode_item(tokenizer, clips, stats, c) for c in range(clips.num_items)]
        return TokenSequences(seqs, clips.labels.clone(), 1)
    seqs, labels = [], []
    for g in torch.unique(clips.group).tolist():
        items = [
            c
            for c in torch.nonzero(clips.group == g).flatten().tolist()
            if int(clips.view[c]) < num_views
        ]
        lens = {int(clips.lengths[c]) for c in items}
        if len(items) != num_views or len(lens) != 1:
            raise ValueError(f"{clips.files[g]}: multi-view training needs {num_views} views of equal length "
                             f"(views 0..{num_views - 1}); found {len(items)} with lengths {sorted(lens)}")  # fmt: skip
        items.sort(key=lambda c: int(clips.view[c]))
        toks = torch.stack(
            [encode_item(tokenizer, clips, stats, c) for c in items], dim=1
        )  # [T', V]
        seqs.append(toks.reshape(-1))
        labels.append(int(clips.labels[items[0]]))
    return TokenSequences(seqs, torch.tensor(labels, dtype=torch.long), num_views)


class TokenWindowSampler:
    """Windows of ``block_size`` tokens starting at time-step boundaries.

    Args:
        data: tokenized sequences.
        block_size: tokens per window (the GPT's ``block_size``: condition slot + ``block_size - 1`` inputs).
    """

    def __init__(self, data: TokenSequences, block_size: int):
        self.data, self.n = data, int(block_size)
        V = data.num_views
        seq_ids, starts = [], []
        for s, seq in enumerate(data.seqs):
            last = max(0, len(seq) - self.n)
            st = torch.arange(0, last + 1, V)
            seq_ids.append(torch.full_like(st, s))
            starts.append(st)
        self.seq_ids, self.starts = torch.cat(seq_ids), torch.cat(starts)
        if len(self.seq_ids) == 0:
            raise ValueError("no token sequence to train on")

    def __len__(self) -> int:
        return int(self.seq_ids.numel())

    def batch(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``tokens [B, block_size]`` (``IGNORE``-padded) and labels ``[B]`` of windows ``idx``."""
        out = torch.full((len(idx), self.n), IGNORE, dtype=torch.long)
        for b, i in enumerate(idx.tolist()):
            s, a = int(self.seq_ids[i]), int(self.starts[i])
            w = self.data.seqs[s][a : a + self.n]
            out[b, : len(w)] = w
        return out, self.data.labels[self.seq_ids[idx]]

    def sample(
        self, batch_size: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return self.batch(torch.randint(len(self), (batch_size,), generator=generator))

    def iterate(self, batch_size: int, limit: int | None = None):
        """Deterministic pass over (at most ``limit``, evenly spread) windows."""
        idx = torch.arange(len(self))
        if limit is not None and len(idx) > limit:
            idx = idx[torch.linspace(0, len(idx) - 1, limit).round().long()]
        for i in range(0, len(idx), batch_size):
            yield self.batch(idx[i : i + batch_size])


def gpt_inputs(tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(idx [B, n - 1], targets [B, n])`` of a window batch (padding embedded as token 0, never a target)."""
    return tokens[:, :-1].clamp_min(0), tokens
