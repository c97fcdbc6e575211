"""The skeleton of the tasks on a character: what every task here shares, so that a task
writes only its observation, its reward terms and its own terminations.

:class:`EpisodeTask` is a :class:`~mimic2dm.tasks.base.Task` with the per-env episode
bookkeeping (steps, return, previous action), the PD action mapping, cached engine
read-outs, the fall / tilt / non-finite terminations and the step tail that turns reward
terms and termination causes into a :class:`~mimic2dm.tasks.base.StepResult` (with auto-reset).
:class:`ReferenceTask` adds what the reference-tracking tasks share: a reference frame per
env, episodes that start from adaptive state initialisation (ASI) buffers, the critic's
scoring of the states behind an observation, and proprioception.
"""

from __future__ import annotations

import torch
from mimic2dm.tasks.base import StepResult, Task
from mimic2dm.tasks.common.terms import (
    combine,
    fallen,
    pd_targets,
    proprioception,
    tilted,
    up_axis,
)

from mimic2dm.engines.base import Engine, SimState


class EpisodeTask(Task):
    """A task with per-env episodes, PD actions around a pose and auto-reset.

    Subclasses implement ``reset``, ``observe`` and ``step``; ``step`` computes its reward
    terms and causes and ends with :meth:`finish_step`. ``cfg`` must have
    ``max_episode_steps``, ``early_termination``, ``action_scale`` and ``fall_height``
    (``fall_tilt_deg`` optional).

    Args:
        engine: the simulator; seed: the task's RNG.
        cfg: the task's config dataclass.
        act_offset: ``[J]`` PD target of a zero action (default: the character's default pose).
    """

    EPISODE_FIELDS: tuple[str, ...] = ("steps", "ep_return", "prev_action")
    """Per-env tensors of the episodes in flight (:meth:`episode_state`)."""

    def __init__(self, engine: Engine, seed: int, cfg, act_offset: torch.Tensor | None = None):
        super().__init__(engine, seed)
        spec, dev = engine.character, self.device
        self.cfg, self.N = cfg, engine.num_envs
        lo, hi = engine.get_dof_limits()
        if act_offset is None:
            act_offset = torch.tensor(spec.default_pose.dof_pos, dtype=torch.float32, device=dev)
        # zero action holds the offset pose; +-1 spans half the joint range around it
        self.act_offset = act_offset
        self.act_scale = 0.5 * (hi - lo) * cfg.action_scale
        # the root-frame axis that is vertical in the default pose (tilt fall detection)
        q0 = torch.tensor(spec.default_pose.root_quat, dtype=torch.float32, device=dev)
        self.up_local = up_axis(q0)
        self.steps = torch.zeros(self.N, dtype=torch.long, device=dev)
        self.ep_return = torch.zeros(self.N, device=dev)
        self.prev_action = torch.zeros(self.N, engine.num_dofs, device=dev)
        self._cache: dict = {}

    # ------------------------------------------------------------------ engine read-outs
    def _read(self, what: str):
        """Engine read-outs, fetched once per physics state (the cache clears on step/reset)."""
        if what not in self._cache:
            read = {"state": self.engine.get_state, "bodies": self.engine.get_body_poses,
                    "keypoints": self.engine.get_keypoints}[what]  # fmt: skip
            self._cache[what] = read()
        return self._cache[what]

    def refresh(self) -> None:
        """Forget the cached read-outs (and projections): call after changing what the
        observation depends on between steps (the task refreshes on every step and reset)."""
        self._cache.clear()

    # ------------------------------------------------------------------ episodes
    def begin_episodes(self, env_ids: torch.Tensor, states: SimState) -> None:
        """Fresh bookkeeping in ``env_ids [E]`` and the engine reset to ``states``."""
        self.steps[env_ids] = 0
        self.ep_return[env_ids] = 0.0
        self.prev_action[env_ids] = 0.0
        self.engine.reset(env_ids, states)
        self._cache.clear()

    def at_end(self) -> torch.Tensor:
        """``[N]`` bool: the episode reached the end of what it follows (a time-out)."""
        return torch.zeros(self.N, dtype=torch.bool, device=self.device)

    # ------------------------------------------------------------------ stepping
    def advance(self, actions: torch.Tensor, background: bool = False) -> None:
        """Physics only: apply normalised ``actions [N, J]`` as PD targets, one control step
        on (``background``: the engine steps on its own thread, read-outs wait for it)."""
        targets = pd_targets(self.act_offset, self.act_scale, actions)
        if background:
            self.engine.step_async(targets)
        else:
            self.engine.step(targets)
        self._cache.clear()
        self.steps += 1

    def fall_causes(self, name: str | None = None, failed: torch.Tensor | None = None) -> dict:
        """The terminations every task has, beside the task's own ``failed [N]`` (``name``).

        Returns:
            ``{name: failed, "fall", "nonfinite"}`` ``[N]`` bool, each cause only where no
            earlier one holds; ``fall``: root below ``fall_height`` or, with
            ``fall_tilt_deg > 0``, tilted beyond it. Without ``early_termination`` only
            non-finite physics ends episodes.
        """
        nonfinite = self.engine.nonfinite_envs()
        s = self._read("state")
        fall = fallen(s.root_pos[:, 2], self.cfg.fall_height)
        max_tilt = getattr(self.cfg, "fall_tilt_deg", 0.0)
        if max_tilt > 0:
            fall = fall | tilted(s.root_rot, self.up_local, max_tilt)
        if failed is None:
            failed = torch.zeros_like(fall)
        if not self.cfg.early_termination:
            failed, fall = torch.zeros_like(failed), torch.zeros_like(fall)
        own = {} if name is None else {name: failed & ~nonfinite}
        return own | {"fall": fall & ~nonfinite & ~failed, "nonfinite": nonfinite}

    def note_step(self, terminated: torch.Tensor) -> None:
        """Hook of :meth:`finish_step`: the step's ``terminated [N]`` before any reset."""

    def finish_step(self, actions: torch.Tensor, terms: dict[str, torch.Tensor], scales: dict,
                    causes: dict[str, torch.Tensor]) -> StepResult:  # fmt: skip
        """The tail of every ``step``: reward, time-outs, bookkeeping, resets, observation.

        Args:
            actions: ``[N, J]`` the clamped actions of the step.
            terms: ``{name: [N]}`` reward terms, combined with ``scales`` (:func:`combine`);
                envs with non-finite physics get 0.
            causes: ``{cause: [N] bool}`` terminations (``nonfinite`` included); the
                time-out (end of reference or ``max_episode_steps``) is added.
        """
        reward = combine(terms, scales)
        reward = torch.where(causes["nonfinite"], torch.zeros_like(reward), reward).nan_to_num(0.0)
        terminated = torch.stack(list(causes.values())).any(0)
        truncated = ~terminated & (self.at_end() | (self.steps >= self.cfg.max_episode_steps))
        causes["timeout"] = truncated
        self.note_step(terminated)
        self.ep_return += reward
        self.prev_action = actions.clone()
        done = terminated | truncated
        ep_len = torch.where(done, self.steps, torch.zeros_like(self.steps))
        ep_ret = torch.where(done, self.ep_return, torch.zeros_like(self.ep_return))
        self.reset(torch.nonzero(done).flatten())
        return StepResult(
            self.observe(), reward, terms, terminated, truncated, causes, ep_len, ep_ret
        )

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """What outlives episodes: the task's RNG."""
        return {"rng": self.gen.get_state()}

    def load_state_dict(self, d: dict) -> None:
        self.gen.set_state(d["rng"])

    def episode_state(self) -> dict:
        """The episodes in flight: ``EPISODE_FIELDS`` and the engine's exact state."""
        return {"num_envs": self.N, "tensors": {k: getattr(self, k).clone() for k in self.EPISODE_FIELDS},
                "engine": self.engine.state_dict()}  # fmt: skip

    def check_num_envs(self, d: dict) -> None:
        if d["num_envs"] != self.N:
            raise ValueError(
                f"episode state of {d['num_envs']} envs does not fit this task's {self.N}"
            )

    def load_episode_state(self, d: dict) -> None:
        """Continue the episodes of :meth:`episode_state` (same spec and ``num_envs``)."""
        self.check_num_envs(d)
        tensors = d.get("tensors", d)  # older states kept the tensors beside num_envs
        for k in self.EPISODE_FIELDS:
            getattr(self, k).copy_(tensors[k])
        self.engine.load_state_dict(d["engine"])
        self._cache.clear()


class ReferenceTask(EpisodeTask):
    """An :class:`EpisodeTask` that tracks a reference: ``frame [N]`` per env, starts drawn
    from ASI buffers (``self.asi``), the critic's values scoring the observed states.

    A subclass sets ``self.asi`` (:meth:`start_buffers`), implements
    ``start_episodes(env_ids, starts, states)`` (calling :meth:`begin_episodes`),
    :meth:`at_end`, :meth:`global_frame`, ``observe`` (recording ``self.obs_state``) and
    ``step`` (ending with :meth:`finish_step`), then calls :meth:`start` at the end of
    its constructor.
    """

    EPISODE_FIELDS = ("frame", "steps", "ep_return", "prev_action", "start_slot")
    RESCORE_STARTS = True
    """States an episode just started from are rescored by the critic (False: they keep
    the score they were stored with)."""

    def __init__(self, engine: Engine, seed: int, cfg, keypoint_set: str):
        spec = engine.character
        if spec.keypoint_set != keypoint_set:
            raise ValueError(f"character {spec.name!r} has keypoints {spec.keypoint_set!r} but the "
                             f"reference uses {keypoint_set!r}")  # fmt: skip
        super().__init__(engine, seed, cfg)
        dev = self.device
        self.K = engine.num_keypoints
        self.parents = torch.tensor(spec.tree.parents, device=dev)
        self.key_idx = torch.tensor(
            [engine.body_names.index(b) for b in spec.key_bodies], device=dev
        )
        self.frame = torch.zeros(self.N, dtype=torch.long, device=dev)
        # the ASI slot each episode started from (-1: none), rescored by the critic
        self.start_slot = torch.full((self.N,), -1, dtype=torch.long, device=dev)
        self.obs_state: SimState | None = None

    def start_buffers(self, init: SimState, valid_starts: torch.Tensor, ground: bool, log) -> None:
        """``self.asi`` from initial states per start frame (``ground``: lifted out of the
        ground first, :func:`~mimic2dm.tasks.tracking2d.initial.ground_states_logged`)."""
        from mimic2dm.tasks.tracking2d.asi import StateBuffers

        if ground:
            from mimic2dm.tasks.tracking2d.initial import ground_states_logged

            init = ground_states_logged(init, self.engine.character, log)
        self.asi = StateBuffers(init, valid_starts, self.cfg.asi)

    def start(self) -> None:
        """Start every env's first episode and measure the proprioception."""
        self.reset(torch.arange(self.N, device=self.device))
        self.prop_dim = self.proprioception().shape[1]

    @property
    def replays_starts(self) -> bool:
        """Episodes start from the ASI buffers' frames (a stream does not)."""
        return True

    def global_frame(self, env_ids: torch.Tensor) -> torch.Tensor:
        """``[E]`` ASI frame index of the current frame of ``env_ids [E]``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ episodes
    def reset(self, env_ids: torch.Tensor) -> None:
        """Start new episodes in ``env_ids [E]`` at frames and states drawn from the buffers."""
        if env_ids.numel() == 0:
            return
        g = self.asi.sample_frames(env_ids.numel(), self.gen)
        states, slots = self.asi.sample(g, self.gen)
        self.start_episodes(env_ids, g, states)
        self.start_slot[env_ids] = slots.to(self.device)

    def begin_episodes(self, env_ids: torch.Tensor, states: SimState) -> None:
        self.start_slot[env_ids] = -1  # not from an ASI buffer unless reset() says so
        super().begin_episodes(env_ids, states)

    def advance(self, actions: torch.Tensor, background: bool = False) -> None:
        """Physics only: :meth:`EpisodeTask.advance` and the reference one frame on."""
        super().advance(actions, background)
        self.frame += 1

    # ------------------------------------------------------------------ observations
    def proprioception(self) -> torch.Tensor:
        """``[N, P]`` the character's proprioception (:func:`~.terms.proprioception`)."""
        s = self._read("state")
        pos, brot = self._read("bodies")
        return proprioception(s.root_pos, s.root_rot, s.root_lin_vel, s.root_ang_vel, brot, self.parents,
                              s.dof_vel, pos[:, self.key_idx])  # fmt: skip

    # ------------------------------------------------------------------ ASI
    def note_step(self, terminated: torch.Tensor) -> None:
        """ASI counts samples (at the observed frame) and early terminations per frame."""
        if self.replays_starts:
            ids = torch.arange(self.N, device=self.device)
            frames = self.global_frame(ids) - 1
            self.asi.note_step(frames, terminated, self.failure_frames(frames))

    def failure_frames(self, frames: torch.Tensor) -> torch.Tensor | None:
        """``[N]`` the global frame at which each env's early termination counts for ASI's
        ``failure`` start sampling, given the observed ``frames [N]``; None: at ``frames``.
        A task whose failures begin before they end an episode moves them back."""
        return None

    def observe_values(self, values: torch.Tensor) -> int:
        """Score the states behind the last observation with the critic's ``values [N]``.

        States that an episode just started from came from the buffers: their values
        rescore them in place (the current critic's view of a stored state). The others
        may replace their buffer's lowest score. Returns the number of replacements (a 0-d
        tensor: no host sync).
        """
        if not self.replays_starts or self.obs_state is None:
            return 0
        v = values.detach().reshape(-1).float()
        if self.RESCORE_STARTS:
            fresh = torch.nonzero((self.steps == 0) & (self.start_slot >= 0)).flatten()
            if fresh.numel():
                self.asi.rescore(self.global_frame(fresh), self.start_slot[fresh], v[fresh])
        ids = torch.nonzero((self.steps > 0) & ~self.at_end()).flatten()
        return self.asi.update(self.global_frame(ids), self.obs_state.index(ids), v[ids])

    def stats(self) -> dict[str, float]:
        """Adaptive state initialisation statistics."""
        return self.asi.stats()

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """What a checkpoint needs to resume the task exactly (ASI buffers, RNG)."""
        return {"asi": self.asi.state_dict(), "rng": self.gen.get_state()}

    def load_state_dict(self, d: dict) -> None:
        self.asi.load_state_dict(d["asi"])
        self.gen.set_state(d["rng"])

    def load_episode_state(self, d: dict) -> None:
        """Continue the episodes of :meth:`episode_state` (same spec and ``num_envs``)."""
        self.check_num_envs(d)
        for k in self.EPISODE_FIELDS:
            if k in d["tensors"]:  # older checkpoints lack start_slot: no rescoring of their starts
                getattr(self, k).copy_(d["tensors"][k])
            elif k == "start_slot":
                self.start_slot.fill_(-1)
            else:
                raise KeyError(f"episode state lacks {k!r}")
        self.engine.load_state_dict(d["engine"])
        self._cache.clear()
