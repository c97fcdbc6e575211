"""The ``tracking2d`` task: a batch of envs that imitate 2D reference keypoints.

Engine-free: it talks to an :class:`~mimic2dm.engines.base.Engine` only through the
interface's tensors, and every observation, reward and termination is a pure function
from :mod:`.observations`, :mod:`.rewards` and :mod:`.terminations` (the shared ones from
:mod:`mimic2dm.tasks.common`, whose :class:`~mimic2dm.tasks.common.task.ReferenceTask` is
the skeleton: episodes, ASI, the step tail). Apps drive it through :mod:`.streaming`.

Each env tracks ``num_views`` views of one clip (1 in training: view-agnostic tracking;
>= 2 for 3D tracking by view aggregation). Envs reset themselves when done; terminations
(reprojection, fall, non-finite physics) and time-outs are reported separately. The
reference comes from a :class:`~.source.ReferenceSource` (clips or a stream); the task
never indexes clip arrays itself.
"""

from __future__ import annotations

import logging

import torch
from mimic2dm.tasks.base import StepResult
from mimic2dm.tasks.common.task import ReferenceTask
from mimic2dm.tasks.tracking2d.config import TrackingConfig
from mimic2dm.tasks.tracking2d.observations import observation_2d, observation_2d_size
from mimic2dm.tasks.tracking2d.rewards import reward_terms
from mimic2dm.tasks.tracking2d.source import ReferenceSource
from mimic2dm.tasks.tracking2d.terminations import reprojection_exceeded
from mimic2dm.tasks.tracking3d.observations import observation_3d, observation_3d_size

from mimic2dm.engines.base import Engine, SimState
from mimic2dm.geometry.camera import MIN_DEPTH, project_points

log = logging.getLogger(__name__)

CAUSES = ("reprojection", "fall", "nonfinite", "timeout")


class Tracking2DTask(ReferenceTask):
    """Vectorised 2D tracking over ``engine.num_envs`` envs with per-env auto-reset.

    Args:
        engine: the simulator (any backend).
        source: the reference (:class:`~.source.ClipReference` or a stream) with
            ``cfg.num_views`` views per env.
        cfg: task settings.
        seed: seed of the task's own RNG (episode draws, ASI sampling).
        init: optional initial states per start frame (default: the source's).
    """

    name = "tracking2d"

    def __init__(self, engine: Engine, source: ReferenceSource, cfg: TrackingConfig, seed: int = 0,
                 init: SimState | None = None):  # fmt: skip
        super().__init__(engine, seed, cfg, source.kset.name)
        if source.num_views != cfg.num_views or source.num_envs != engine.num_envs:
            raise ValueError(f"reference source has {source.num_envs} envs x {source.num_views} views, the task "
                             f"{engine.num_envs} x {cfg.num_views}")  # fmt: skip
        self.source, self.V = source, cfg.num_views
        self.root_idx = torch.tensor(source.kset.root, device=self.device)
        spec = engine.character
        ground = init is None and cfg.initial_ground  # given states are used as they are
        if init is None:
            init = source.initial_states(
                engine.default_state(1), spec, cfg.initial_state, cfg.initial_level_feet
            )
        self.start_buffers(init, source.valid_starts(), ground, log)
        self._ori_pairs, self._contact = self._reward_cues(spec, source.kset)
        self._pending: tuple | None = None  # a step between step_begin and step_end
        self.start()
        self.view_dim = observation_2d_size(self.view_points()[0].shape[2], cfg.num_future)

    def obs_layout(self) -> dict[str, int]:
        """Sizes the view-aggregation network needs to split observations (``privileged``:
        the width of the teacher's part appended after them with ``task.privileged_3d``: the
        episode's clip index, then the 3D tracker's goal observation)."""
        layout = {"prop": self.prop_dim, "view": self.view_dim, "views": self.V}
        if self.cfg.privileged_3d:
            layout["privileged"] = 1 + observation_3d_size(
                self.source.kset.num_keypoints, self.cfg.num_future
            )
        return layout

    # ------------------------------------------------------------------ episodes
    def start_episodes(self, env_ids: torch.Tensor, starts: torch.Tensor, states: SimState,
                       view_ids: torch.Tensor | None = None) -> None:  # fmt: skip
        """Start episodes in ``env_ids [E]`` at global start frames ``starts [E]`` from
        ``states``; ``view_ids [E, V]`` picks the reference's views (default: drawn)."""
        self.begin_episodes(env_ids, states)
        self.frame[env_ids] = self.source.begin(env_ids, starts, self.gen, view_ids)

    def project_character(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The character's keypoints in every env's reference views at the current frame.

        Returns:
            ``uv [N, V, K, 2]`` pixels and ``valid [N, V, K]`` (in front of the camera).
        """
        if "uv" not in self._cache:  # one projection per physics state (reused by the next step)
            R, t, k = self._cameras()
            kp = self._read("keypoints")[:, None].expand(-1, self.V, -1, -1)
            uv, depth = project_points(R, t, k, kp)
            self._cache["uv"] = (uv, depth > MIN_DEPTH)
        return self._cache["uv"]

    def _cameras(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The reference cameras at the current frames (cached like the engine read-outs)."""
        if "cams" not in self._cache:
            self._cache["cams"] = self.source.cameras(self.frame)
        return self._cache["cams"]

    def reference(self, frame: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``uv [N, V, K, 2]`` and ``mask [N, V, K]`` of the reference at ``frame [N]``."""
        uv, mask, _ = self.source.keypoints(frame)
        return uv, mask

    def project_object(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The first object's centre in every view: ``uv [N, V, 2]``, ``valid [N, V]``."""
        R, t, k = self._cameras()
        p = self._read("state").object_pos[:, :1, :][:, None].expand(-1, self.V, -1, -1)
        uv, depth = project_points(R, t, k, p)
        return uv[:, :, 0], depth[:, :, 0] > MIN_DEPTH

    # ------------------------------------------------------------------ observations
    def view_points(self) -> tuple[torch.Tensor, ...]:
        """The 2D points each view observes (subclasses append points, e.g. a ball centre).

        Returns:
            own ``uv [N, V, P, 2]`` and ``valid [N, V, P]``; the future reference
            ``ref_uv [N, V, n, P, 2]``, ``ref_mask [N, V, n, P]`` and ``ref_root [N, V, n, 2]``.
        """
        uv, valid = self.project_character()
        n = self.cfg.num_future
        fut = self.frame[:, None] + torch.arange(1, n + 1, device=self.device)  # [N, n]
        ref_uv, ref_mask, ref_root = self.source.keypoints(fut)  # [N, V, n, ...]
        return uv, valid, ref_uv, ref_mask, ref_root

    def observe(self) -> torch.Tensor:
        """Observation ``[N, prop + V * view]`` of the current state (no camera parameters)."""
        prop = self.proprioception()
        uv, valid, ref_uv, ref_mask, ref_root = self.view_points()
        _, _, k = self._cameras()
        flat = lambda x: x.reshape(self.N * self.V, *x.shape[2:])  # noqa: E731
        view_obs = observation_2d(flat(uv), flat(valid), flat(ref_uv), flat(ref_mask), flat(ref_root),
                                    flat(k), self.root_idx)  # fmt: skip
        self.obs_state = s = self._read("state")
        obs = torch.cat([prop, view_obs.reshape(self.N, -1)], dim=-1)
        if not self.cfg.privileged_3d:
            return obs
        fut = self.frame[:, None] + torch.arange(1, self.cfg.num_future + 1, device=self.device)
        goal = observation_3d(
            self._read("keypoints"), s.root_pos, s.root_rot, self.source.keypoints3d(fut)
        )
        clip = self.source.clip_of(torch.arange(self.N, device=self.device)).float()[:, None]
        return torch.cat([obs, clip, goal], dim=-1)

    # ------------------------------------------------------------------ stepping
    def step(self, actions: torch.Tensor) -> StepResult:
        """Apply normalised actions ``[N, J]`` in [-1, 1] as PD targets for one control step.

        Reward terms: ``pos``, ``vel``, ``reg``, ``ori`` (keypoint sets with left/right
        shoulders or hips), ``contact`` (characters with contact bodies), and ``obj`` when
        the engine simulates an object and the reference carries its 2D track (otherwise
        left out, the other scales re-normalised).
        """
        self._begin(actions, background=False)
        return self.step_end()

    def step_begin(self, actions: torch.Tensor) -> None:
        """:meth:`step` up to the physics, which then runs on the engine's background
        thread (``Engine.step_async``) while the caller works on other envs; the
        reference of the new frame is read meanwhile. Finish with :meth:`step_end`."""
        self._begin(actions, background=True)

    def _begin(self, actions: torch.Tensor, background: bool) -> None:
        if self._pending is not None:
            raise RuntimeError("Tracking2DTask.step_begin called twice without step_end")
        a = actions.to(self.device).clamp(-1.0, 1.0)
        prev_uv, _ = self.project_character()
        prev_ref, prev_mask = self.reference(self.frame)
        self.advance(a, background=background)
        self._pending = (a, prev_uv, prev_ref, prev_mask, *self.reference(self.frame))

    def step_end(self) -> StepResult:
        """The rest of :meth:`step` after :meth:`step_begin`: rewards, terminations, resets
        and the next observation (waits for the physics first)."""
        if self._pending is None:
            raise RuntimeError("Tracking2DTask.step_end called without step_begin")
        (a, prev_uv, prev_ref, prev_mask, ref, mask), self._pending = self._pending, None
        uv, valid = self.project_character()
        m, pm = mask & valid, prev_mask
        H = self.source.heights()[:, None].expand(-1, self.V).reshape(-1)
        flat = lambda x: x.reshape(self.N * self.V, *x.shape[2:])  # noqa: E731
        terms = reward_terms(flat(uv), flat(ref), flat(m), flat(prev_uv), flat(prev_ref), flat(pm), H,
                             a.repeat_interleave(self.V, 0), self.prev_action.repeat_interleave(self.V, 0),
                             self.cfg.reward, self._object_pair(flat), control_hz=1.0 / self.engine.control_dt,
                             ori_pairs=self._ori_pairs, contact=self._contact_flags())  # fmt: skip
        terms = {k: v.reshape(self.N, self.V).mean(1) for k, v in terms.items()}
        causes = self.terminations(flat(uv), flat(ref), flat(mask), H)
        return self.finish_step(a, terms, self.cfg.reward.scales, causes)

    def _reward_cues(self, spec, kset) -> tuple[torch.Tensor, tuple | None]:
        """Indices of Yu et al. 2021's cues: ``(left, right)`` shoulder / hip keypoint pairs
        ``[P, 2]``; per contact body with a keypoint, ``(keypoint [C], contact column [C])``."""
        names = kset.names
        pairs = [(names.index(f"left_{p}"), names.index(f"right_{p}")) for p in ("shoulder", "hip")
                 if f"left_{p}" in names and f"right_{p}" in names]  # fmt: skip
        ori = torch.tensor(pairs, dtype=torch.long, device=self.device).reshape(-1, 2)
        kp, cols = [], []
        for c, body in enumerate(self.engine.contact_names):
            on = [k for k, (b, _) in enumerate(spec.site_offsets) if b == body]
            if on:  # the last keypoint on a foot body is its distal one (ankle, paw)
                kp.append(on[-1])
                cols.append(c)
        if not kp:
            return ori, None
        return ori, (torch.tensor(kp, device=self.device), torch.tensor(cols, device=self.device))

    def _contact_flags(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        """``(keypoint [C], flags [N * V, C])`` for the ``contact`` term, or None."""
        if self._contact is None:
            return None
        kp, cols = self._contact
        return kp, self.engine.get_contacts()[:, cols].repeat_interleave(self.V, 0)

    def _object_pair(self, flat):
        """``(sim_centre, ref_centre, valid)`` flattened over views, or None when no object term applies."""
        if self.engine.num_objects == 0:
            return None
        track = self.source.objects(self.frame)
        if track is None:
            return None
        ref_c, ref_ok = track
        sim_c, sim_ok = self.project_object()
        return flat(sim_c), flat(ref_c), flat(ref_ok & sim_ok)

    def terminations(self, uv, ref, mask, H) -> dict[str, torch.Tensor]:
        """``{"reprojection", "fall", "nonfinite": [N] bool}``: a view's reprojection error
        beyond ``tau_term x H`` (``uv, ref [N * V, K, 2]``, ``mask [N * V, K]``, ``H [N * V]``)."""
        far = reprojection_exceeded(uv, ref, mask, H, self.cfg.tau_term)
        return self.fall_causes("reprojection", far.reshape(self.N, self.V).any(1))

    # ------------------------------------------------------------------ the reference
    @property
    def replays_starts(self) -> bool:
        """Clips replay their frames (ASI); a stream does not."""
        return self.source.replays_starts

    def global_frame(self, env_ids: torch.Tensor) -> torch.Tensor:
        return self.source.global_frame(env_ids, self.frame[env_ids])

    def at_end(self) -> torch.Tensor:
        return self.source.at_end(self.frame)

    def episode_state(self) -> dict:
        """The episodes in flight (per-env tensors, the reference's, the engine's exact state):
        with :meth:`state_dict`, what an exact resume of a training run needs."""
        return super().episode_state() | {"source": self.source.episode_state()}

    def load_episode_state(self, d: dict) -> None:
        """Continue the episodes of :meth:`episode_state` (same spec and ``num_envs``)."""
        # checkpoints of older code kept the clip's per-env tensors beside the task's
        src = d["source"] if "source" in d else {"clip": d["tensors"]["clip"], "views": d["views"]}
        self.source.load_episode_state(src)
        super().load_episode_state(d)
