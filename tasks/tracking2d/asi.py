"""Adaptive state initialisation (paper 3.3, Algorithm 1 as reconstructed in docs/design.md section 7).

One buffer of ``M`` full simulation states per reference frame. Buffers start filled
with initial poses (from preprocessing or a default pose) whose score is unknown; they
are sampled like the best state of their buffer until scored or replaced.

Start frames (``start_sampling``): ``uniform``; ``inverse_count`` (Yu et al. 2021):
``P(t) ~ 1 / (n_t + 1)`` with ``n_t`` the samples collected at frame ``t`` in the current
learner iteration; ``failure``: a mix of uniform and the frames where episodes were
terminated early (decayed counts), each failure optionally spread over the
``failure_lead`` frames before it in the same clip, so that episodes start early enough
to learn the approach to the hard frame, not only the frame itself. Then a state of that frame's buffer is drawn with
probability ``~ exp(z / T)``, ``z`` the critic's value divided by the running std of
every value the task has seen (the mean cancels in the softmax): scores live on a
normalised scale whatever the return's magnitude, so ``T = 1`` keeps sampling diverse.

Scores come from the learner's critic through the task's value hook. States visited
during rollouts replace their buffer's lowest score when they beat it. Rescoring: a
stored state is re-scored by the current critic whenever it starts an episode (the
episode's first observation *is* that state, and its value comes back through the
same hook); every ``rescore_every`` iterations, one iteration draws each frame's
least recently scored state instead, so that states the softmax ignores are refreshed
too. The task has no learner-iteration signal: it counts ``iteration_steps`` control
steps (rl-games' ``horizon_length``) as one iteration.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from mimic2dm.engines.base import SimState

START_SAMPLING = ("uniform", "inverse_count", "failure")


@dataclass
class ASIConfig:
    """Adaptive state initialisation settings.

    Attributes:
        capacity: states per frame (M).
        temperature: softmax temperature on normalised scores.
        start_sampling: ``uniform`` | ``inverse_count`` | ``failure``.
        iteration_steps: control steps per learner iteration (``train.horizon_length``).
        rescore_every: every this many iterations, one iteration draws stale states (0: never).
        failure_mix: ``failure``: weight of the failure distribution against uniform.
        failure_decay: ``failure``: factor applied to the failure counts each iteration.
        failure_lead: ``failure``: a failure at frame ``t`` weighs frames ``t - lead .. t``
            of its clip equally (0: only ``t``).
    """

    enabled: bool = True
    capacity: int = 16
    temperature: float = 1.0
    start_sampling: str = "failure"
    iteration_steps: int = 32
    rescore_every: int = 0
    failure_mix: float = 0.5
    failure_decay: float = 0.5
    failure_lead: int = 0

    def __post_init__(self) -> None:
        from mimic2dm.utils.validate import check, check_choice

        check("task.asi.capacity", self.capacity, ge=1, integer=True)
        check("task.asi.temperature", self.temperature, gt=0)
        check_choice("task.asi.start_sampling", self.start_sampling, START_SAMPLING)
        check("task.asi.iteration_steps", self.iteration_steps, ge=1, integer=True)
        check("task.asi.rescore_every", self.rescore_every, ge=0, integer=True)
        check("task.asi.failure_mix", self.failure_mix, ge=0, le=1)
        check("task.asi.failure_decay", self.failure_decay, ge=0, le=1)
        check("task.asi.failure_lead", self.failure_lead, ge=0, integer=True)


class StateBuffers:
    """Per-frame buffers of simulation states and critic scores.

    Args:
        initial: :class:`SimState` with one state per frame ``[F]`` (the initial fill).
        valid_starts: ``[F]`` bool, frames an episode may start at.
        cfg: :class:`ASIConfig`.
    """

    def __init__(self, initial: SimState, valid_starts: torch.Tensor, cfg: ASIConfig):
        F, M = initial.num_envs, cfg.capacity
        if cfg.start_sampling not in START_SAMPLING:
            raise ValueError(
                f"asi.start_sampling {cfg.start_sampling!r} is not one of {', '.join(START_SAMPLING)}"
            )
        self.cfg = cfg
        self.states = {
            f.name: getattr(initial, f.name)[:, None]
            .expand(F, M, *getattr(initial, f.name).shape[1:])
            .clone()
            for f in dataclasses.fields(initial)
        }
        self.scores = torch.full((F, M), float("-inf"))  # raw critic values; -inf: never scored
        self.scored_at = torch.full((F, M), -1, dtype=torch.long)  # iteration of the last score
        self.sample_counts = torch.zeros(F)  # samples collected per frame, this iteration
        self.failure_counts = torch.zeros(F)  # early terminations per frame, decayed
        self.start_counts = torch.zeros(F)  # episode starts per frame (logged)
        self.value_stats = torch.zeros(3, dtype=torch.float64)  # count, mean, M2 of all values
        self.valid_starts = valid_starts.clone()
        # clip segment of each frame: a clip ends at a frame with no future (not a start)
        ends = (~self.valid_starts).long()
        segment = torch.cumsum(ends, 0) - ends
        # failure_lead: frames each failure is spread over (clipped at its clip's first frame)
        idx = torch.arange(F)
        first = torch.full((int(segment.max()) + 1,), F, dtype=torch.long)
        first = first.scatter_reduce(0, segment, idx, reduce="amin")
        self.lead_width = (idx - first[segment]).clamp(max=cfg.failure_lead) + 1
        self.replacements = 0
        self.rescored = 0
        self.iteration = 0
        self.iteration_step = 0

    @property
    def num_frames(self) -> int:
        return self.scores.shape[0]

    # ------------------------------------------------------------------ start frames
    def frame_weights(self) -> torch.Tensor:
        """``[F]`` unnormalised start-frame probabilities of the configured rule."""
        w = self.valid_starts.float()
        if self.cfg.start_sampling == "inverse_count":
            w = w / (self.sample_counts + 1.0)
        elif self.cfg.start_sampling == "failure":
            f = self.spread_failures(self.failure_counts) * w
            u = w / w.sum().clamp_min(1.0)
            w = (
                u
                if f.sum() <= 0
                else (1 - self.cfg.failure_mix) * u + self.cfg.failure_mix * f / f.sum()
            )
        return w

    def spread_failures(self, counts: torch.Tensor) -> torch.Tensor:
        """``[F]`` failure weights: each count at frame ``t`` split equally over frames
        ``t - failure_lead .. t`` of the same clip (fewer at a clip's start)."""
        lead = self.cfg.failure_lead
        if lead == 0:
            return counts
        F, width = counts.shape[0], self.lead_width
        share = counts / width
        out = share.clone()
        for k in range(1, lead + 1):
            src = torch.arange(
                k, F
            )  # a failure at src weighs src - k, if that is still in its clip
            out[: F - k] += torch.where(k < width[src], share[src], torch.zeros_like(share[src]))
        return out

    def sample_frames(self, n: int, gen: torch.Generator) -> torch.Tensor:
        """``[n]`` start frames (global indices)."""
        frames = torch.multinomial(self.frame_weights(), n, replacement=True, generator=gen)
        self.start_counts += torch.bincount(frames, minlength=self.num_frames).float()
        return frames

    def note_step(self, frames: torch.Tensor, failed: torch.Tensor,
                  failed_frames: torch.Tensor | None = None) -> None:  # fmt: skip
        """One control step collected: ``frames [n]`` global frame of each sample,
        ``failed [n]`` bool, the episode was terminated early. The failure counts at
        ``failed_frames [n]`` where given (a task that knows when the failure began, such as
        the dribble's lost ball), else at ``frames``. Counts iterations."""
        fr = frames.reshape(-1).to(self.sample_counts.device)
        bad = failed.reshape(-1).to(self.sample_counts.device, torch.float32)
        at = fr if failed_frames is None else failed_frames.reshape(-1).to(fr.device)
        self.sample_counts += torch.bincount(fr, minlength=self.num_frames).float()
        self.failure_counts += torch.bincount(at, weights=bad, minlength=self.num_frames).float()
        self.iteration_step += 1
        if self.iteration_step >= self.cfg.iteration_steps:
            self.iteration_step = 0
            self.iteration += 1
            self.sample_counts.zero_()
            self.failure_counts *= self.cfg.failure_decay

    @property
    def rescoring(self) -> bool:
        """This iteration draws each buffer's least recently scored state."""
        k = self.cfg.rescore_every
        return bool(k) and self.iteration > 0 and self.iteration % k == 0

    # ------------------------------------------------------------------ states
    def value_std(self) -> torch.Tensor:
        """Running std of every critic value seen (1 before two values); a 0-d tensor, so
        the step path reads nothing back to the host."""
        n, _, m2 = self.value_stats.unbind()
        ok = (n > 1) & (m2 > 0)
        return torch.where(ok, (m2 / (n - 1).clamp(min=1)).sqrt(), torch.ones_like(m2)).float()

    def probabilities(self, frames: torch.Tensor) -> torch.Tensor:
        """``[n, M]`` probability of each slot of the buffers of ``frames [n]``: softmax of
        normalised scores / T; never-scored states weigh as their buffer's best."""
        s = self.scores[frames]
        known = torch.isfinite(s)
        z = torch.where(
            known, s / (self.value_std() * self.cfg.temperature), torch.full_like(s, -1e30)
        )
        best = z.max(dim=1, keepdim=True).values
        # optimistic: an unscored state (first fill) is drawn like the best one until scored
        z = torch.where(known, z - best, torch.zeros_like(z))
        return torch.softmax(z, dim=1)

    def sample(self, frames: torch.Tensor, gen: torch.Generator) -> tuple[SimState, torch.Tensor]:
        """One state per frame in ``frames [n]`` and its slot ``[n]`` (for rescoring)."""
        if not self.cfg.enabled:
            slot = torch.zeros(frames.shape[0], dtype=torch.long)
        elif self.rescoring:
            age = self.scored_at[frames].float() + 1e-3 * torch.rand(
                self.scored_at[frames].shape, generator=gen
            )
            slot = age.argmin(dim=1)  # least recently scored (random among ties)
        else:
            slot = torch.multinomial(self.probabilities(frames), 1, generator=gen)[:, 0]
        return SimState(**{k: v[frames, slot].clone() for k, v in self.states.items()}), slot

    def sample_states(self, frames: torch.Tensor, gen: torch.Generator) -> SimState:
        """One state per frame in ``frames [n]`` (see :meth:`sample`)."""
        return self.sample(frames, gen)[0]

    def _observe(self, values: torch.Tensor) -> None:
        """Fold ``values [n]`` into the running count, mean and M2 (Chan et al.'s merge;
        tensor ops only, so the step path reads nothing back to the host)."""
        v = values.detach().double().to(self.value_stats.device)
        n1 = torch.tensor(float(v.numel()), dtype=torch.float64)
        if v.numel() == 0:
            return
        n0, m0, s0 = self.value_stats.unbind()
        m1 = v.mean()
        n = n0 + n1
        d = m1 - m0
        self.value_stats = torch.stack(
            [n, m0 + d * n1 / n, s0 + ((v - m1) ** 2).sum() + d * d * n0 * n1 / n]
        )

    def rescore(self, frames: torch.Tensor, slots: torch.Tensor, values: torch.Tensor) -> None:
        """The current critic's ``values [n]`` of stored states ``(frames, slots) [n]``."""
        if not self.cfg.enabled or frames.numel() == 0:
            return
        ok = torch.isfinite(values)
        f, s, v = frames[ok], slots[ok], values[ok]
        self._observe(v)
        self.scores[f, s] = v.to(self.scores.dtype)
        self.scored_at[f, s] = self.iteration
        self.rescored += int(f.numel())

    def update(self, frames: torch.Tensor, states: SimState, values: torch.Tensor) -> torch.Tensor:
        """Insert states whose critic value beats their buffer's lowest score.

        Each touched buffer ends with the ``M`` best of its stored scores and the new
        values (stored ones win ties; unscored slots count as ``-inf``): what inserting
        the candidates one by one, best first, each over the lowest score, would give.
        One vectorised pass.

        Args:
            frames: ``[n]`` global frame of each state; states: :class:`SimState` ``[n]``;
            values: ``[n]`` critic values.

        Returns:
            Number of replacements made (a 0-d tensor).
        """
        if not self.cfg.enabled or frames.numel() == 0:
            return torch.zeros((), dtype=torch.long, device=values.device)
        ok = torch.isfinite(values) & states_finite(states)
        self._observe(values[ok])
        idx = torch.nonzero(ok).flatten()
        if idx.numel() == 0:
            return torch.zeros((), dtype=torch.long, device=values.device)
        f = frames[idx]
        # candidates grouped per frame: [U, C] values and indices (padding -inf / -1)
        order = torch.argsort(f, stable=True)
        f, idx = f[order], idx[order]
        uniq, counts = torch.unique_consecutive(f, return_counts=True)
        # C = the most candidates a frame can have: the batch size (no read-back of counts.max())
        U, C, M = uniq.numel(), f.numel(), self.scores.shape[1]
        group = torch.repeat_interleave(torch.arange(U), counts, output_size=f.numel())
        within = torch.arange(f.numel()) - torch.repeat_interleave(
            torch.cumsum(counts, 0) - counts, counts, output_size=f.numel()
        )
        cand = torch.full((U, C), float("-inf"), dtype=self.scores.dtype)
        cand_idx = torch.full((U, C), -1, dtype=torch.long)
        cand[group, within] = values[idx].to(self.scores.dtype)
        cand_idx[group, within] = idx
        # the M best of stored + candidates; a stable sort keeps stored entries first on ties
        pool = torch.cat([self.scores[uniq], cand], dim=1)  # [U, M + C]
        rank = torch.sort(pool, dim=1, descending=True, stable=True).indices[:, :M]
        chosen = torch.zeros_like(pool, dtype=torch.bool).scatter_(1, rank, True)
        keep, take = chosen[:, :M], chosen[:, M:] & (cand_idx >= 0)
        # the k-th freed slot of a buffer receives its k-th chosen candidate
        free_rank = torch.cumsum(~keep, 1) - 1
        slot_of_rank = torch.full((U, M), -1, dtype=torch.long)
        u_free, s_free = torch.nonzero(~keep, as_tuple=True)
        slot_of_rank[u_free, free_rank[u_free, s_free]] = s_free
        u_take, c_take = torch.nonzero(take, as_tuple=True)
        take_rank = (torch.cumsum(take, 1) - 1)[u_take, c_take]
        slot = slot_of_rank[u_take, take_rank]
        fr, pick = uniq[u_take], cand_idx[u_take, c_take]
        for k, buf in self.states.items():
            buf[fr, slot] = getattr(states, k)[pick]
        self.scores[fr, slot] = values[pick].to(self.scores.dtype)
        self.scored_at[fr, slot] = self.iteration
        done = torch.tensor(pick.numel(), dtype=torch.long)
        self.replacements += done
        return done

    # ------------------------------------------------------------------ logging, resume
    def effective_states(self) -> float:
        """Mean over start frames of ``exp(entropy)`` of the slot distribution: how many
        states a buffer effectively hands out (1: greedy, ``M``: uniform)."""
        frames = torch.nonzero(self.valid_starts).flatten()
        if frames.numel() == 0 or not self.cfg.enabled:
            return 1.0
        p = self.probabilities(frames)
        h = -(p * torch.log(p.clamp_min(1e-30))).sum(1)
        return float(torch.exp(h).mean())

    def stats(self) -> dict[str, float]:
        """Fill level, score statistics and sampling diversity for logging."""
        known = torch.isfinite(self.scores)
        vals = self.scores[known]
        return {
            "asi/scored_fraction": float(known.float().mean()),
            "asi/score_mean": float(vals.mean()) if vals.numel() else 0.0,
            "asi/score_max": float(vals.max()) if vals.numel() else 0.0,
            "asi/value_std": float(self.value_std()),
            "asi/effective_states": self.effective_states(),
            "asi/replacements": float(self.replacements),  # a tensor until here
            "asi/rescored": float(self.rescored),
            "asi/iteration": float(self.iteration),
        }

    COUNTERS = ("replacements", "rescored", "iteration", "iteration_step")

    def state_dict(self) -> dict:
        return {"states": self.states, "scores": self.scores, "scored_at": self.scored_at,
                "start_counts": self.start_counts, "sample_counts": self.sample_counts,
                "failure_counts": self.failure_counts, "value_stats": self.value_stats,
                **{k: int(getattr(self, k)) for k in self.COUNTERS}}  # fmt: skip

    def load_state_dict(self, d: dict) -> None:
        if d["scores"].shape != self.scores.shape:
            raise ValueError(f"ASI buffers in the checkpoint have shape {list(d['scores'].shape)}, "
                             f"this run expects {list(self.scores.shape)} (frames x capacity)")  # fmt: skip
        self.states = {k: v.clone() for k, v in d["states"].items()}
        self.scores = d["scores"].clone()
        self.start_counts = d["start_counts"].clone()
        # checkpoints of older code lack the fields below: they start afresh
        known = torch.isfinite(self.scores)
        self.scored_at = d.get("scored_at", torch.where(known, 0, -1)).clone()
        for k in ("sample_counts", "failure_counts"):
            setattr(self, k, d[k].clone() if k in d else torch.zeros_like(self.start_counts))
        self.value_stats = d.get("value_stats", torch.zeros(3, dtype=torch.float64)).clone()
        for k in self.COUNTERS:
            setattr(self, k, int(d.get(k, 0)))


def states_finite(states: SimState) -> torch.Tensor:
    """``[n]`` True where every field of the state is finite."""
    ok = torch.ones(states.num_envs, dtype=torch.bool)
    for f in dataclasses.fields(states):
        x = getattr(states, f.name)
        ok &= torch.isfinite(x.reshape(x.shape[0], -1)).all(1)
    return ok
