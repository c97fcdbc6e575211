"""Adaptive state initialisation (paper 3.3, Algorithm 1 as reconstructed in DESIGN 7).

One buffer of ``M`` full simulation states per reference frame. Buffers start filled
with initial poses (from preprocessing or a default pose) whose score is unknown
(``-inf``). Resets draw a start frame (uniformly, or by Yu et al. 2021's inverse-count
rule ``P(t) ~ 1 / (n_t + 1)``), then a state of that frame's buffer with probability
``~ exp(score / T)``. States visited during rollouts are scored by the learner's critic
``V(s)``; a state whose score beats the lowest one of its frame's buffer replaces it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from mimic2dm.engines.base import SimState


@dataclass
class ASIConfig:
    """Adaptive state initialisation settings."""

    enabled: bool = True
    capacity: int = 16
    temperature: float = 1.0
    start_sampling: str = "uniform"  # or "inverse_count" (Yu 2021)

    def __post_init__(self) -> None:
        from mimic2dm.utils.validate import check, check_choice

        check("task.asi.capacity", self.capacity, ge=1, integer=True)
        check("task.asi.temperature", self.temperature, gt=0)
        check_choice("task.asi.start_sampling", self.start_sampling, ("uniform", "inverse_count"))


class StateBuffers:
    """Per-frame buffers of simulation states and critic scores.

    Args:
        initial: :class:`SimState` with one state per frame ``[F]`` (the initial fill).
        valid_starts: ``[F]`` bool, frames an episode may start at.
        cfg: :class:`ASIConfig`.
    """

    def __init__(self, initial: SimState, valid_starts: torch.Tensor, cfg: ASIConfig):
        F, M = initial.num_envs, cfg.capacity
        if cfg.start_sampling not in ("uniform", "inverse_count"):
            raise ValueError(
                f"asi.start_sampling {cfg.start_sampling!r} is not one of uniform, inverse_count"
            )
        self.cfg = cfg
        self.states = {
            f.name: getattr(initial, f.name)[:, None]
            .expand(F, M, *getattr(initial, f.name).shape[1:])
            .clone()
            for f in dataclasses.fields(initial)
        }
        self.scores = torch.full((F, M), float("-inf"))
        self.start_counts = torch.zeros(F)
        self.valid_starts = valid_starts.clone()
        self.replacements = 0

    @property
    def num_frames(self) -> int:
        return self.scores.shape[0]

    def sample_frames(self, n: int, gen: torch.Generator) -> torch.Tensor:
        """``[n]`` start frames (global indices)."""
        w = self.valid_starts.float()
        if self.cfg.start_sampling == "inverse_count":
            w = w / (self.start_counts + 1.0)
        frames = torch.multinomial(w, n, replacement=True, generator=gen)
        self.start_counts += torch.bincount(frames, minlength=self.num_frames).float()
        return frames

    def sample_states(self, frames: torch.Tensor, gen: torch.Generator) -> SimState:
        """One state per frame in ``frames [n]``, drawn with probability ``~ exp(score / T)``."""
        s = self.scores[frames]
        if not self.cfg.enabled:
            slot = torch.zeros(frames.shape[0], dtype=torch.long)
        else:
            known = torch.isfinite(s)
            logits = torch.where(known, s / self.cfg.temperature, torch.full_like(s, -1e30))
            logits = logits - logits.max(dim=1, keepdim=True).values
            # a buffer with no scored state yet is sampled uniformly
            logits = torch.where(known.any(1, keepdim=True), logits, torch.zeros_like(logits))
            slot = torch.multinomial(torch.softmax(logits, dim=1), 1, generator=gen)[:, 0]
        return SimState(**{k: v[frames, slot].clone() for k, v in self.states.items()})

    def update(self, frames: torch.Tensor, states: SimState, values: torch.Tensor) -> int:
        """Insert states whose critic value beats their buffer's lowest score.

        Args:
            frames: ``[n]`` global frame of each state; states: :class:`SimState` ``[n]``;
            values: ``[n]`` critic values.

        Returns:
            Number of replacements made (a 0-d tensor).
        """
        if not self.cfg.enabled or frames.numel() == 0:
            return torch.zeros((), dtype=torch.long, device=values.device)
        ok = torch.isfinite(values) & states_finite(states)
        order = torch.argsort(values, descending=True)
        order = order[ok[order]]
        done = torch.zeros(
            (), dtype=torch.long, device=values.device
        )  # a tensor: no host sync per step
        # duplicates of a frame are handled in successive rounds, best value first
        while order.numel():
            f = frames[order]
            uniq, inv = torch.unique(f, return_inverse=True)
            pos = torch.arange(f.shape[0])
            first_pos = torch.full((uniq.shape[0],), f.shape[0]).scatter_reduce(0, inv, pos, "amin")
            first = pos == first_pos[inv]
            idx, rest = order[first], order[~first]
            fr = frames[idx]
            low, slot = self.scores[fr].min(dim=1)
            better = values[idx] > low
            idx, fr, slot = idx[better], fr[better], slot[better]
            for k, v in self.states.items():
                v[fr, slot] = getattr(states, k)[idx]
            self.scores[fr, slot] = values[idx]
            done = done + better.sum()
            order = rest
        self.replacements += done
        return done

    def stats(self) -> dict[str, float]:
        """Fill level and score statistics for logging."""
        known = torch.isfinite(self.scores)
        vals = self.scores[known]
        return {
            "asi/scored_fraction": float(known.float().mean()),
            "asi/score_mean": float(vals.mean()) if vals.numel() else 0.0,
            "asi/score_max": float(vals.max()) if vals.numel() else 0.0,
            "asi/replacements": float(self.replacements),  # a tensor until here
        }

    def state_dict(self) -> dict:
        return {"states": self.states, "scores": self.scores, "start_counts": self.start_counts,
                "replacements": int(self.replacements)}  # fmt: skip

    def load_state_dict(self, d: dict) -> None:
        if d["scores"].shape != self.scores.shape:
            raise ValueError(f"ASI buffers in the checkpoint have shape {list(d['scores'].shape)}, "
                             f"this run expects {list(self.scores.shape)} (frames x capacity)")  # fmt: skip
        self.states = {k: v.clone() for k, v in d["states"].items()}
        self.scores = d["scores"].clone()
        self.start_counts = d["start_counts"].clone()
        self.replacements = int(d["replacements"])


def states_finite(states: SimState) -> torch.Tensor:
    """``[n]`` True where every field of the state is finite."""
    ok = torch.ones(states.num_envs, dtype=torch.bool)
    for f in dataclasses.fields(states):
        x = getattr(states, f.name)
        ok &= torch.isfinite(x.reshape(x.shape[0], -1)).all(1)
    return ok
