"""One aggregator of what tasks report per step: :class:`StepStats`.

Vecenvs fill one per step (merging Ray actors'), the training observer merges them over
an epoch and rollouts over their steps. Sums stay tensors on the task's device until
:meth:`StepStats.metrics` reduces them to host numbers (once per epoch); a Ray actor
sends :meth:`StepStats.to_host` across its process boundary.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from mimic2dm.tasks.base import StepResult

Number = torch.Tensor | float


def _add(a: dict, k: str, v: Number) -> None:
    a[k] = a[k] + v if k in a else v


@dataclass
class StepStats:
    """Sums over env steps: reward terms, total reward, ended episodes and their causes.

    Attributes:
        env_steps: env steps summed over (``N`` per control step).
        terms: ``{term: sum of the term over env steps}``; ``reward``: the same of the total.
        episodes, length_sum, return_sum: ended episodes, their summed lengths and returns.
        causes: ``{cause: episodes ended by it}``.
    """

    env_steps: int = 0
    terms: dict[str, Number] = field(default_factory=dict)
    reward: Number = 0.0
    episodes: Number = 0.0
    length_sum: Number = 0.0
    return_sum: Number = 0.0
    causes: dict[str, Number] = field(default_factory=dict)

    @classmethod
    def of(cls, r: StepResult) -> StepStats:
        """The statistics of one step."""
        s = cls()
        s.add(r)
        return s

    def add(self, r: StepResult) -> StepStats:
        """Fold in one step's :class:`StepResult` (no host synchronisation)."""
        self.env_steps += int(r.reward.shape[0])
        for k, v in r.terms.items():
            _add(self.terms, k, v.detach().float().sum())
        self.reward = self.reward + r.reward.detach().float().sum()
        done = r.done
        self.episodes = self.episodes + done.sum()
        self.length_sum = self.length_sum + torch.where(done, r.episode_length, 0).sum()
        self.return_sum = self.return_sum + torch.where(done, r.episode_return, 0.0).sum()
        for k, v in r.causes.items():
            _add(self.causes, k, v.sum())
        return self

    def merge(self, other: StepStats) -> StepStats:
        """Fold in another aggregate (another actor, another step)."""
        self.env_steps += other.env_steps
        for k, v in other.terms.items():
            _add(self.terms, k, v)
        for k, v in other.causes.items():
            _add(self.causes, k, v)
        self.reward = self.reward + other.reward
        self.episodes = self.episodes + other.episodes
        self.length_sum = self.length_sum + other.length_sum
        self.return_sum = self.return_sum + other.return_sum
        return self

    def to_host(self) -> StepStats:
        """The same sums as python numbers (to cross a process boundary)."""
        f = lambda x: float(x)  # noqa: E731
        return StepStats(self.env_steps, {k: f(v) for k, v in self.terms.items()}, f(self.reward),
                         f(self.episodes), f(self.length_sum), f(self.return_sum),
                         {k: f(v) for k, v in self.causes.items()})  # fmt: skip

    def metrics(self) -> dict[str, float]:
        """``reward/<term>`` and ``reward/total`` (means per env step), ``episode/length``,
        ``episode/return``, ``episode/count`` and ``termination/<cause>`` (fractions of the
        ended episodes) when any ended."""
        h = self.to_host()
        n = max(h.env_steps, 1)
        m = {f"reward/{k}": v / n for k, v in h.terms.items()}
        m["reward/total"] = h.reward / n
        if h.episodes > 0:
            m["episode/length"] = h.length_sum / h.episodes
            m["episode/return"] = h.return_sum / h.episodes
            m["episode/count"] = h.episodes
            ended = max(sum(h.causes.values()), 1.0)
            m.update({f"termination/{k}": v / ended for k, v in h.causes.items()})
        return m
