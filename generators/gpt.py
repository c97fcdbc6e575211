"""Autoregressive token generator (paper B.5, docs/design.md section 9), nanoGPT style.

A causal transformer (4 layers, 4 heads, width 128, learned absolute positions) over
motion-token indices. Position 0 holds a condition embedding (the label's, or zeros
for unconditional generation); the output at position ``p`` predicts token ``p``, so
the model factorises ``p(c_0, c_1, ... | y)``.

Multi-view variant (``num_views = V > 1``): each time step contributes ``V`` tokens
ordered by view id, flattened time-major; contexts always start at view 0, so an
absolute position also tells the view.

:class:`TokenStream` generates an unbounded stream with a sliding context (the
condition slot plus the newest ``block_size - 1`` tokens, dropped in whole time steps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from mimic2dm.utils.validate import ConfigError, check

IGNORE = -1
"""Target value ignored by the loss (padding of short clips)."""


@dataclass
class GPTConfig:
    """Generator hyper-parameters.

    Attributes:
        vocab_size: codebook size ``K`` of the tokenizer.
        block_size: positions, condition slot included (so ``block_size - 1`` tokens of context).
        n_layer, n_head, n_embd, dropout, bias: transformer size.
        num_classes: labels of the condition (0: unconditional only).
        num_views: tokens per time step ``V``.
        p_uncond: probability of training with the zero (unconditional) condition.
    """

    vocab_size: int = 512
    block_size: int = 17
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.1
    bias: bool = True
    num_classes: int = 0
    num_views: int = 1
    p_uncond: float = 0.1

    def __post_init__(self):
        check("model.vocab_size", self.vocab_size, ge=1, integer=True)
        check("model.block_size", self.block_size, ge=2, integer=True)
        check_transformer("model", self.n_layer, self.n_head, self.n_embd, self.dropout)
        check("model.num_classes", self.num_classes, ge=0, integer=True)
        check("model.num_views", self.num_views, ge=1, integer=True)
        check("model.p_uncond", self.p_uncond, ge=0, le=1)


def check_transformer(key: str, n_layer: int, n_head: int, n_embd: int, dropout: float) -> None:
    """Range checks of a transformer's size (``key.n_layer`` ...); raises ``ConfigError``."""
    check(f"{key}.n_layer", n_layer, ge=1, integer=True)
    check(f"{key}.n_head", n_head, ge=1, integer=True)
    check(f"{key}.n_embd", n_embd, ge=1, integer=True)
    if n_embd % n_head:
        raise ConfigError(f"{key}.n_embd", n_embd, f"a multiple of {key}.n_head={n_head}")
    check(f"{key}.dropout", dropout, ge=0, lt=1)


class SelfAttention(nn.Module):
    """Multi-head self-attention (causal or not) with ``scaled_dot_product_attention``."""

    def __init__(self, n_embd: int, n_head: int, dropout: float, bias: bool, causal: bool = True):
        super().__init__()
        if n_embd % n_head:
            raise ValueError(f"n_embd {n_embd} is not a multiple of n_head {n_head}")
        self.qkv = nn.Linear(n_embd, 3 * n_embd, bias=bias)
        self.proj = nn.Linear(n_embd, n_embd, bias=bias)
        self.drop = nn.Dropout(dropout)
        self.n_head, self.dropout, self.causal = n_head, dropout, causal

    def forward(self, x: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None = None):
        """Attend ``x [B, T, C]`` (after the cached ``past`` keys/values, if any).

        Returns:
            ``y [B, T, C]`` and the keys/values ``([B, h, T_past + T, C/h],) * 2`` for a cache.
        """
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        mask, causal = None, self.causal
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
            if (
                self.causal and T > 1
            ):  # new queries see the past and the causal part of the new block
                P = past[0].shape[2]
                mask = torch.ones(T, P + T, dtype=torch.bool).tril(diagonal=P)
            causal = False
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=causal)
        return self.drop(self.proj(y.transpose(1, 2).contiguous().view(B, T, C))), (k, v)


class Block(nn.Module):
    """Pre-norm transformer block (shared by the GPT and the diffusion denoiser)."""

    def __init__(
        self, n_embd: int, n_head: int, dropout: float, bias: bool = True, causal: bool = True
    ):
        super().__init__()
        self.ln1 = nn.LayerNorm(n_embd, bias=bias)
        self.attn = SelfAttention(n_embd, n_head, dropout, bias, causal)
        self.ln2 = nn.LayerNorm(n_embd, bias=bias)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd, bias=bias), nn.GELU(),
                                 nn.Linear(4 * n_embd, n_embd, bias=bias), nn.Dropout(dropout))  # fmt: skip

    def forward(self, x: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None = None):
        """``x [B, T, C]`` -> ``(x [B, T, C], keys/values)`` (see :meth:`SelfAttention.forward`)."""
        a, kv = self.attn(self.ln1(x), past)
        x = x + a
        return x + self.mlp(self.ln2(x)), kv


def init_weights(module: nn.Module) -> None:
    """GPT-2 initialisation (normal 0.02, zero biases)."""
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)


def condition_vector(emb: nn.Embedding, y: torch.Tensor) -> torch.Tensor:
    """``[B, C]`` embedding of labels ``y [B]``; exactly zero where ``y < 0`` (unconditional)."""
    return emb(y.clamp_min(0)) * (y >= 0).to(emb.weight.dtype)[:, None]


class GPT(nn.Module):
    """Causal transformer over motion tokens with a prepended condition embedding."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = c = config
        self.tok_emb = nn.Embedding(c.vocab_size, c.n_embd)
        self.pos_emb = nn.Embedding(c.block_size, c.n_embd)
        self.cond_emb = nn.Embedding(max(1, c.num_classes), c.n_embd)
        self.drop = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(
            [Block(c.n_embd, c.n_head, c.dropout, c.bias) for _ in range(c.n_layer)]
        )
        self.ln_f = nn.LayerNorm(c.n_embd, bias=c.bias)
        self.head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.apply(init_weights)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * c.n_layer))

    def forward(
        self,
        idx: torch.Tensor,
        y: torch.Tensor,
        targets: torch.Tensor | None = None,
        last_only: bool = False,
    ):
        """Next-token logits.

        Args:
            idx: ``[B, t]`` token indices, ``t <= block_size - 1``.
            y: ``[B]`` labels (``-1``: unconditional).
            targets: optional ``[B, t + 1]`` (``-1`` ignored); ``targets[:, p]`` is the
                token that follows position ``p``.
            last_only: compute the logits of the last position only (sampling).

        Returns:
            ``logits [B, t + 1, vocab]`` (``[B, 1, vocab]`` with ``last_only``) and the
            mean cross-entropy (or None).
        """
        B, t = idx.shape
        if t + 1 > self.config.block_size:
            raise ValueError(f"GPT: {t} tokens exceed the context of {self.config.block_size - 1}")
        if y.shape != (B,):
            raise ValueError(f"GPT: expected labels [B] = [{B}], got {list(y.shape)}")
        if self.training and self.config.p_uncond > 0:
            y = torch.where(torch.rand(B) < self.config.p_uncond, torch.full_like(y, -1), y)
        x = self.drop(self._embed(idx, y, 0))
        for block in self.blocks:
            x, _ = block(x)
        logits = self.head(self.ln_f(x[:, -1:] if last_only else x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE
            )
        return logits, loss

    def _embed(self, idx: torch.Tensor, y: torch.Tensor | None, pos0: int) -> torch.Tensor:
        """Token embeddings (after the condition slot when ``y`` is given) plus positions from ``pos0``."""
        x = self.tok_emb(idx)
        if y is not None:
            x = torch.cat([condition_vector(self.cond_emb, y)[:, None], x], dim=1)
        return x + self.pos_emb.weight[pos0 : pos0 + x.shape[1]]

    @torch.inference_mode()
    def forward_cached(self, idx: torch.Tensor, y: torch.Tensor | None, cache: list | None):
        """Incremental inference with a key/value cache (eval mode).

        Args:
            idx: ``[B, t]`` new tokens.
            y: ``[B]`` labels when starting a new cache (``cache`` None): the condition slot
                is prepended; None when extending ``cache``.
            cache: per-layer keys/values of the positions so far, or None.

        Returns:
            logits of the last position ``[B, vocab]`` and the extended cache.
        """
        pos0 = 0 if cache is None else cache[0][0].shape[2]
        x = self._embed(idx, y if cache is None else None, pos0)
        if x.shape[1] + pos0 > self.config.block_size:
            raise ValueError(
                f"GPT: {x.shape[1] + pos0} positions exceed block_size {self.config.block_size}"
            )
        new = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, None if cache is None else cache[i])
            new.append(kv)
        return self.head(self.ln_f(x[:, -1])), new

    def optim_groups(self, weight_decay: float) -> list[dict]:
        """Parameter groups: weight decay on matrices only (not biases, norms, embeddings of size 1)."""
        params = [p for p in self.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        other = [p for p in params if p.dim() < 2]
        return [
            {"params": decay, "weight_decay": weight_decay},
            {"params": other, "weight_decay": 0.0},
        ]

    def configure_optimizers(
        self, lr: float, weight_decay: float, betas=(0.9, 0.95)
    ) -> torch.optim.AdamW:
        """AdamW over :meth:`optim_groups`."""
        return torch.optim.AdamW(self.optim_groups(weight_decay), lr=lr, betas=betas)

    @torch.inference_mode()
    def next_token(self, context: torch.Tensor, y: torch.Tensor, temperature: float = 1.0,
                   top_k: int | None = None, generator: torch.Generator | None = None) -> torch.Tensor:  # fmt: skip
        """Sample one token ``[B]`` after ``context [B, t]`` (``t <= block_size - 1``)."""
        logits, _ = self(context, y, last_only=True)
        return sample_logits(logits[:, -1], temperature, top_k, generator)

    @torch.no_grad()
    def generate(self, y: torch.Tensor, num_tokens: int, temperature: float = 1.0, top_k: int | None = None,
                 generator: torch.Generator | None = None, prefix: torch.Tensor | None = None,
                 slide: int | None = None) -> torch.Tensor:  # fmt: skip
        """``num_tokens`` new tokens ``[B, num_tokens]`` (sliding context beyond the block size, see :class:`TokenStream`)."""
        stream = TokenStream(self, y, temperature, top_k, generator, prefix, slide)
        return torch.stack([stream.step() for _ in range(num_tokens)], dim=1)


def sample_logits(logits: torch.Tensor, temperature: float, top_k: int | None,
                  generator: torch.Generator | None) -> torch.Tensor:  # fmt: skip
    """Sample indices ``[B]`` from ``logits [B, V]`` with temperature and top-k (0/None: all)."""
    if temperature <= 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature
    if top_k:
        kth = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = F.softmax(logits, dim=-1)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


class TokenStream:
    """Unbounded token generation with a sliding context and a key/value cache.

    Until the context is full, each token costs one cached single-position step. When
    it is full, the oldest ``slide`` tokens (whole time steps) are dropped and the cache
    is rebuilt from the rest: ``slide = V`` is an exact one-step sliding window; the
    default (half the context) amortises the rebuild and keeps at least half a block
    of context.

    Args:
        model: the generator (put in eval mode).
        y: ``[B]`` labels (``-1``: unconditional).
        temperature, top_k: sampling.
        generator: torch RNG (deterministic under a seed).
        prefix: optional ``[B, t]`` tokens to continue (starting at view 0).
        slide: tokens dropped when the context is full (rounded up to whole time steps).
    """

    def __init__(self, model: GPT, y: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                 generator: torch.Generator | None = None, prefix: torch.Tensor | None = None,
                 slide: int | None = None):  # fmt: skip
        self.model = model.eval()
        self.y = torch.as_tensor(y, dtype=torch.long).reshape(-1)
        self.temperature, self.top_k, self.generator = temperature, top_k, generator
        c = model.config
        self.limit, self.V = c.block_size - 1, c.num_views
        slide = max(1, self.limit // 2) if slide is None else max(1, slide)
        self.slide = min(math.ceil(slide / self.V) * self.V, self.limit // self.V * self.V)
        B = self.y.shape[0]
        self.context = prefix.long() if prefix is not None else torch.zeros(B, 0, dtype=torch.long)
        self.count = self.context.shape[1]
        if self.context.shape[1] > self.limit:
            drop = math.ceil((self.context.shape[1] - self.limit) / self.V) * self.V
            self.context = self.context[:, drop:]
        self._rebuild()

    def _rebuild(self) -> None:
        self.logits, self.cache = self.model.forward_cached(self.context, self.y, None)

    def set_condition(self, y: torch.Tensor) -> None:
        """Change the labels ``[B]`` for the tokens to come (the context is kept; the
        condition slot changes, so the cache is rebuilt)."""
        self.y = torch.as_tensor(y, dtype=torch.long).reshape(-1)
        self._rebuild()

    def step(self) -> torch.Tensor:
        """The next token ``[B]`` (for ``V > 1``: of view ``count % V``)."""
        tok = sample_logits(self.logits, self.temperature, self.top_k, self.generator)
        self.context = torch.cat([self.context, tok[:, None]], dim=1)
        self.count += 1
        if self.context.shape[1] > self.limit:  # full: slide by whole time steps, rebuild the cache
            drop = max(
                self.slide, math.ceil((self.context.shape[1] - self.limit) / self.V) * self.V
            )
            self.context = self.context[:, drop:]
            self._rebuild()
        else:
            self.logits, self.cache = self.model.forward_cached(tok[:, None], None, self.cache)
        return tok
