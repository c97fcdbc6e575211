"""The ``tracking2d`` task: a batch of envs that imitate 2D reference keypoints.

Engine-free: it talks to an :class:`~mimic2dm.engines.base.Engine` only through the
interface's tensors, and every observation, reward and termination is a pure function
from :mod:`.observations`, :mod:`.rewards` and :mod:`.terminations`.

Each env tracks ``num_views`` views of one clip (1 in training: view-agnostic tracking;
>= 2 for 3D tracking by view aggregation). Envs reset themselves when done; terminations
(reprojection, fall, non-finite physics) and time-outs are reported separately.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from mimic2dm.tasks.tracking2d import observations as O
from mimic2dm.tasks.tracking2d import terminations as X
from mimic2dm.tasks.tracking2d.asi import ASIConfig, StateBuffers
from mimic2dm.tasks.tracking2d.initial import initial_states
from mimic2dm.tasks.tracking2d.reference import EpisodeViews, ReferenceLibrary
from mimic2dm.tasks.tracking2d.rewards import RewardConfig, combine, reward_terms

from mimic2dm.engines.base import Engine, SimState
from mimic2dm.geometry.camera import MIN_DEPTH, project_points

CAUSES = ("reprojection", "fall", "nonfinite", "timeout")


@dataclass
class TrackingConfig:
    """Task settings (DESIGN sections 3-7); Hydra group ``task``."""

    num_future: int = 2
    num_views: int = 1
    max_episode_steps: int = 300
    tau_term: float = 0.12
    fall_height: float = 0.3
    early_termination: bool = True
    action_scale: float = 1.0
    reward: RewardConfig = field(default_factory=RewardConfig)
    asi: ASIConfig = field(default_factory=ASIConfig)

    def __post_init__(self) -> None:
        from mimic2dm.utils.validate import check

        check("task.num_future", self.num_future, ge=0, integer=True)
        check("task.num_views", self.num_views, ge=1, integer=True)
        check("task.max_episode_steps", self.max_episode_steps, ge=1, integer=True)
        check("task.tau_term", self.tau_term, gt=0)
        check("task.action_scale", self.action_scale, gt=0)


class Tracking2DTask:
    """Vectorised 2D tracking over ``engine.num_envs`` envs with per-env auto-reset.

    Args:
        engine: the simulator (any backend).
        library: reference clips.
        cfg: task settings.
        seed: seed of the task's own RNG (episode draws, ASI sampling).
        init: optional initial states per global frame (default: see :mod:`.initial`).
    """

    def __init__(self, engine: Engine, library: ReferenceLibrary, cfg: TrackingConfig, seed: int = 0,
                 init: SimState | None = None):  # fmt: skip
        spec = engine.character
        if spec.keypoint_set != library.kset.name:
            raise ValueError(
                f"character {spec.name!r} has keypoints {spec.keypoint_set!r} but the reference clips use {library.kset.name!r}"
            )
        self.engine, self.lib, self.cfg = engine, library, cfg
        self.N, self.V, self.K = engine.num_envs, cfg.num_views, engine.num_keypoints
        self.gen = torch.Generator().manual_seed(seed)
        lo, hi = engine.get_dof_limits()
        # zero action holds the default (standing) pose; +-1 spans half the joint range around it
        self.act_offset = torch.tensor(np.array(spec.default_pose.dof_pos), dtype=torch.float32)
        self.act_scale = 0.5 * (hi - lo) * cfg.action_scale
        self.parents = torch.tensor(spec.tree.parents)
        self.key_idx = torch.tensor([engine.body_names.index(b) for b in spec.key_bodies])
        self.root_idx = library.root_idx
        starts = torch.ones(library.total_frames, dtype=torch.bool)
        starts[library.offsets + library.lengths - 1] = False  # the last frame has no future
        if init is None:
            init = initial_states(library, engine.default_state(1), spec)
        self.asi = StateBuffers(init, starts, cfg.asi)
        self.clip = torch.zeros(self.N, dtype=torch.long)
        self.frame = torch.zeros(self.N, dtype=torch.long)
        self.steps = torch.zeros(self.N, dtype=torch.long)
        self.ep_return = torch.zeros(self.N)
        self.prev_action = torch.zeros(self.N, engine.num_dofs)
        self.views: EpisodeViews | None = None
        self._obs_state: SimState | None = None
        self._cache: dict = {}
        self.reset(torch.arange(self.N))
        self.prop_dim = self._proprioception().shape[1]
        self.view_dim = O.observation_2d_size(self.K, cfg.num_future)

    # ------------------------------------------------------------------ sizes
    @property
    def obs_dim(self) -> int:
        return self.prop_dim + self.V * self.view_dim

    @property
    def action_dim(self) -> int:
        return self.engine.num_dofs

    def obs_layout(self) -> dict[str, int]:
        """Sizes the view-aggregation network needs to split observations."""
        return {"prop": self.prop_dim, "view": self.view_dim, "views": self.V}

    # ------------------------------------------------------------------ episodes
    def reset(self, env_ids: torch.Tensor) -> None:
        """Start new episodes in ``env_ids [E]``: ASI start frame and state, fresh views."""
        if env_ids.numel() == 0:
            return
        g = self.asi.sample_frames(env_ids.numel(), self.gen)
        clip = torch.searchsorted(self.lib.offsets, g, right=True) - 1
        self.start_episodes(
            env_ids, clip, g - self.lib.offsets[clip], self.asi.sample_states(g, self.gen)
        )

    def start_episodes(self, env_ids: torch.Tensor, clip_ids: torch.Tensor, frames: torch.Tensor,
                       states: SimState, view_ids: torch.Tensor | None = None) -> None:  # fmt: skip
        """Start given episodes: clips ``[E]`` at ``frames [E]`` from ``states``; ``view_ids [E, V]``
        picks the clip's views (default: drawn as in training)."""
        self.clip[env_ids], self.frame[env_ids] = clip_ids, frames
        self.steps[env_ids] = 0
        self.ep_return[env_ids] = 0.0
        self.prev_action[env_ids] = 0.0
        self.engine.reset(env_ids, states)
        self._cache.clear()
        views = self.lib.episode_views(clip_ids, self.gen, self.V, view_ids)
        if self.views is None:
            self.views = views
        else:
            for name in vars(views):
                getattr(self.views, name)[env_ids] = getattr(views, name)

    def _read(self, what: str):
        """Engine read-outs, fetched once per physics state (the cache clears on step/reset)."""
        if what not in self._cache:
            read = {"state": self.engine.get_state, "bodies": self.engine.get_body_poses,
                    "keypoints": self.engine.get_keypoints}[what]  # fmt: skip
            self._cache[what] = read()
        return self._cache[what]

    def _cams(self, frame: torch.Tensor):
        e = torch.arange(self.N)
        v = self.views
        return v.cam_R[e, :, frame], v.cam_t[e, :, frame], v.intrinsics[e, :, frame]  # [N, V, ...]

    def project_character(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The character's keypoints in every env's reference views at the current frame.

        Returns:
            ``uv [N, V, K, 2]`` pixels and ``valid [N, V, K]`` (in front of the camera).
        """
        R, t, k = self._cams(self.frame)
        kp = self._read("keypoints")[:, None].expand(-1, self.V, -1, -1)
        uv, depth = project_points(R, t, k, kp)
        return uv, depth > MIN_DEPTH

    def reference(self, frame: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``uv [N, V, K, 2]`` and ``mask [N, V, K]`` of the reference at ``frame [N]``."""
        e = torch.arange(self.N)
        f = torch.minimum(frame, self.views.length - 1)
        return self.views.uv[e, :, f], self.views.mask[e, :, f]

    # ------------------------------------------------------------------ observations
    def _proprioception(self) -> torch.Tensor:
        s = self._read("state")
        pos, brot = self._read("bodies")
        return O.proprioception(s.root_pos, s.root_rot, s.root_lin_vel, s.root_ang_vel, brot, self.parents,
                                s.dof_vel, pos[:, self.key_idx])  # fmt: skip

    def observe(self) -> torch.Tensor:
        """Observation ``[N, prop + V * view]`` of the current state (no camera parameters)."""
        prop = self._proprioception()
        uv, valid = self.project_character()
        n = self.cfg.num_future
        fut = torch.minimum(
            self.frame[:, None] + torch.arange(1, n + 1), self.views.length[:, None] - 1
        )  # [N, n]
        e = torch.arange(self.N)[:, None]
        ref_uv = self.views.uv[e, :, fut].transpose(1, 2)  # [N, V, n, K, 2]
        ref_mask = self.views.mask[e, :, fut].transpose(1, 2)
        ref_root = self.views.root[e, :, fut].transpose(1, 2)
        _, _, k = self._cams(self.frame)
        flat = lambda x: x.reshape(self.N * self.V, *x.shape[2:])  # noqa: E731
        view_obs = O.observation_2d(
            flat(uv),
            flat(valid),
            flat(ref_uv),
            flat(ref_mask),
            flat(ref_root),
            flat(k),
            self.root_idx,
        )
        self._obs_state = self._read("state")
        return torch.cat([prop, view_obs.reshape(self.N, -1)], dim=-1)

    # ------------------------------------------------------------------ stepping
    def step(
        self, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        """Apply normalised actions ``[N, J]`` in [-1, 1] as PD targets for one control step.

        Returns:
            ``obs [N, D]`` (after auto-reset), ``reward [N]``, ``terminated [N]``,
            ``truncated [N]`` and ``info`` with per-term rewards and finished episodes.
        """
        a = actions.clamp(-1.0, 1.0)
        prev_uv, _ = self.project_character()
        prev_ref, prev_mask = self.reference(self.frame)
        self.advance(a)
        uv, valid = self.project_character()
        ref, mask = self.reference(self.frame)
        m, pm = mask & valid, prev_mask
        H = self.views.height[:, None].expand(-1, self.V).reshape(-1)
        flat = lambda x: x.reshape(self.N * self.V, *x.shape[2:])  # noqa: E731
        terms = reward_terms(flat(uv), flat(ref), flat(m), flat(prev_uv), flat(prev_ref), flat(pm), H,
                             a.repeat_interleave(self.V, 0), self.prev_action.repeat_interleave(self.V, 0), self.cfg.reward)  # fmt: skip
        terms = {k: v.reshape(self.N, self.V).mean(1) for k, v in terms.items()}
        reward = combine(terms, self.cfg.reward)
        causes = self._terminations(flat(uv), flat(ref), flat(mask), H)
        reward = torch.where(causes["nonfinite"], torch.zeros_like(reward), reward).nan_to_num(0.0)
        terminated = causes["reprojection"] | causes["fall"] | causes["nonfinite"]
        truncated = ~terminated & (
            (self.frame >= self.views.length - 1) | (self.steps >= self.cfg.max_episode_steps)
        )
        causes["timeout"] = truncated
        self.ep_return += reward
        self.prev_action = a.clone()
        info = self._info(terms, causes, terminated | truncated)
        done_ids = torch.nonzero(terminated | truncated).flatten()
        self.reset(done_ids)
        return self.observe(), reward, terminated, truncated, info

    def advance(self, actions: torch.Tensor) -> None:
        """Physics only: apply normalised ``actions [N, J]`` as PD targets, move one frame on."""
        self.engine.step(self.act_offset + self.act_scale * actions.clamp(-1.0, 1.0))
        self._cache.clear()
        self.frame += 1
        self.steps += 1

    def _terminations(self, uv, ref, mask, H) -> dict[str, torch.Tensor]:
        nonfinite = self.engine.nonfinite_envs()
        root_h = self._read("state").root_pos[:, 2]
        reproj = (
            X.reprojection_exceeded(uv, ref, mask, H, self.cfg.tau_term)
            .reshape(self.N, self.V)
            .any(1)
        )
        fall = X.fallen(root_h, self.cfg.fall_height)
        if not self.cfg.early_termination:
            reproj, fall = torch.zeros_like(reproj), torch.zeros_like(fall)
        return {
            "reprojection": reproj & ~nonfinite,
            "fall": fall & ~nonfinite & ~reproj,
            "nonfinite": nonfinite,
        }

    def _info(self, terms, causes, done) -> dict:
        return {
            "reward_terms": {k: float(v.mean()) for k, v in terms.items()},
            "episode_lengths": self.steps[done].tolist(),
            "episode_returns": self.ep_return[done].tolist(),
            "causes": {k: int(v.sum()) for k, v in causes.items()},
            "time_outs": causes["timeout"].clone(),
        }

    # ------------------------------------------------------------------ ASI
    def observe_values(self, values: torch.Tensor) -> int:
        """Score the states behind the last observation with the critic's ``values [N]``.

        Skips states that an episode started from (they came from the buffers).
        Returns the number of buffer replacements.
        """
        keep = (self.steps > 0) & (self.frame < self.views.length - 1)
        if self._obs_state is None or not keep.any():
            return 0
        ids = torch.nonzero(keep).flatten()
        g = self.lib.global_frame(self.clip[ids], self.frame[ids])
        return self.asi.update(
            g, self._obs_state.index(ids), values.detach().reshape(-1)[ids].float()
        )

    def state_dict(self) -> dict:
        """What a checkpoint needs to resume the task exactly (ASI buffers, RNG)."""
        return {"asi": self.asi.state_dict(), "rng": self.gen.get_state()}

    def load_state_dict(self, d: dict) -> None:
        self.asi.load_state_dict(d["asi"])
        self.gen.set_state(d["rng"])

    EPISODE_FIELDS = ("clip", "frame", "steps", "ep_return", "prev_action")

    def episode_state(self) -> dict:
        """The episodes in flight (per-env tensors, views, the engine's exact state): with
        :meth:`state_dict`, what an exact resume of a training run needs."""
        return {
            "num_envs": self.N,
            "tensors": {k: getattr(self, k).clone() for k in self.EPISODE_FIELDS},
            "views": {k: v.clone() for k, v in vars(self.views).items()},
            "engine": self.engine.state_dict(),
        }

    def load_episode_state(self, d: dict) -> None:
        """Continue the episodes of :meth:`episode_state` (same spec and ``num_envs``)."""
        if d["num_envs"] != self.N:
            raise ValueError(
                f"episode state of {d['num_envs']} envs does not fit this task's {self.N}"
            )
        for k in self.EPISODE_FIELDS:
            getattr(self, k).copy_(d["tensors"][k])
        for k, v in d["views"].items():
            setattr(self.views, k, v.clone())
        self.engine.load_state_dict(d["engine"])
        self._cache.clear()
