"""The ``tracking3d`` task: imitate 3D reference keypoints (DeepMimic / PHC style).

The baselines of paper Table 1: **3D-GT** tracks the ground-truth 3D keypoints of a
synthetic clip, **Sfv*** the 3D motion ``mimic2dm preprocess`` reconstructed from 2D. Same
engines, PPO and network as the 2D tracker; episodes start from adaptive state
initialisation (:class:`~mimic2dm.tasks.tracking2d.asi.StateBuffers`), and observations,
rewards and terminations are pure functions (:mod:`.observations`, :mod:`.rewards`).
"""

from __future__ import annotations

import logging

import torch
from mimic2dm.tasks.base import ASITask, StepResult
from mimic2dm.tasks.tracking2d import terminations as X
from mimic2dm.tasks.tracking2d.asi import StateBuffers
from mimic2dm.tasks.tracking2d.observations import proprioception
from mimic2dm.tasks.tracking2d.rewards import combine
from mimic2dm.tasks.tracking3d.config import Tracking3DConfig
from mimic2dm.tasks.tracking3d.observations import observation_3d, observation_3d_size
from mimic2dm.tasks.tracking3d.reference import Reference3D
from mimic2dm.tasks.tracking3d.rewards import error_exceeded, reward_terms_3d

from mimic2dm.engines.base import Engine, SimState
from mimic2dm.geometry import rotations as rot

log = logging.getLogger(__name__)

CAUSES = ("distance", "fall", "nonfinite", "timeout")


class Tracking3DTask(ASITask):
    """Vectorised 3D keypoint tracking over ``engine.num_envs`` envs with per-env auto-reset.

    Args:
        engine: the simulator (any backend).
        reference: the 3D reference clips.
        cfg: task settings; seed: the task's RNG (episode draws, ASI sampling).
    """

    name = "tracking3d"

    def __init__(
        self, engine: Engine, reference: Reference3D, cfg: Tracking3DConfig, seed: int = 0
    ):
        super().__init__(engine, seed)
        spec = engine.character
        if spec.keypoint_set != reference.kset.name:
            raise ValueError(f"character {spec.name!r} has keypoints {spec.keypoint_set!r} but the "
                             f"reference uses {reference.kset.name!r}")  # fmt: skip
        self.ref, self.cfg, dev = reference.to(self.device), cfg, self.device
        self.N, self.K = engine.num_envs, engine.num_keypoints
        lo, hi = engine.get_dof_limits()
        self.act_offset = torch.tensor(spec.default_pose.dof_pos, dtype=torch.float32, device=dev)
        self.act_scale = 0.5 * (hi - lo) * cfg.action_scale
        self.parents = torch.tensor(spec.tree.parents, device=dev)
        self.key_idx = torch.tensor(
            [engine.body_names.index(b) for b in spec.key_bodies], device=dev
        )
        q0 = torch.tensor(spec.default_pose.root_quat, dtype=torch.float32, device=dev)
        self.up_local = rot.quat_rotate_inverse(q0, torch.tensor([0.0, 0.0, 1.0], device=dev))
        init = reference.initial_states(engine.default_state(1), spec, cfg.initial_state)
        if cfg.initial_ground:  # as the 2D tracker: no start inside the ground (docs/baselines.md)
            from mimic2dm.tasks.tracking2d.initial import ground_states_logged

            init = ground_states_logged(init, spec, log)
        self.asi = StateBuffers(init, reference.valid_starts(), cfg.asi)
        self.clip = torch.zeros(self.N, dtype=torch.long, device=dev)
        self.frame = torch.zeros(self.N, dtype=torch.long, device=dev)
        self.steps = torch.zeros(self.N, dtype=torch.long, device=dev)
        self.ep_return = torch.zeros(self.N, device=dev)
        self.prev_action = torch.zeros(self.N, engine.num_dofs, device=dev)
        self._obs_state: SimState | None = None
        self.reset(torch.arange(self.N, device=dev))
        self.prop_dim = self._proprioception().shape[1]
        self.goal_dim = observation_3d_size(self.K, cfg.num_future)

    def obs_layout(self) -> dict[str, int]:
        return {"prop": self.prop_dim, "view": self.goal_dim, "views": 1}

    # ------------------------------------------------------------------ episodes
    def reset(self, env_ids: torch.Tensor) -> None:
        if env_ids.numel() == 0:
            return
        g = self.asi.sample_frames(env_ids.numel(), self.gen)
        self.start_episodes(env_ids, g, self.asi.sample_states(g, self.gen))

    def start_episodes(self, env_ids: torch.Tensor, starts: torch.Tensor, states: SimState) -> None:
        """Episodes in ``env_ids [E]`` from global frames ``starts [E]`` and ``states``."""
        starts = starts.to(self.device)
        clip = torch.searchsorted(self.ref.offsets, starts, right=True) - 1
        self.clip[env_ids], self.frame[env_ids] = clip, starts - self.ref.offsets[clip]
        self.steps[env_ids], self.ep_return[env_ids], self.prev_action[env_ids] = 0, 0.0, 0.0
        self.engine.reset(env_ids, states)

    def reference(self, frames: torch.Tensor) -> torch.Tensor:
        """Reference keypoints at per-env ``frames [N]`` or ``[N, n]`` -> ``[N, (n,) K, 3]``
        (frames past a clip's end read its last frame)."""
        c = self.clip if frames.dim() == 1 else self.clip[:, None]
        return self.ref.keypoints[c, frames.clamp(max=self.ref.keypoints.shape[1] - 1)]

    def at_end(self) -> torch.Tensor:
        return self.frame >= self.ref.lengths[self.clip] - 1

    # ------------------------------------------------------------------ observations
    def _proprioception(self) -> torch.Tensor:
        s = self.engine.get_state()
        pos, brot = self.engine.get_body_poses()
        return proprioception(s.root_pos, s.root_rot, s.root_lin_vel, s.root_ang_vel, brot, self.parents,
                              s.dof_vel, pos[:, self.key_idx])  # fmt: skip

    def observe(self) -> torch.Tensor:
        s = self.engine.get_state()
        fut = self.frame[:, None] + torch.arange(1, self.cfg.num_future + 1, device=self.device)
        goal = observation_3d(
            self.engine.get_keypoints(), s.root_pos, s.root_rot, self.reference(fut)
        )
        self._obs_state = s
        return torch.cat([self._proprioception(), goal], dim=-1)

    # ------------------------------------------------------------------ stepping
    def advance(self, actions: torch.Tensor) -> None:
        """Physics only: normalised ``actions [N, J]`` as PD targets, one frame on."""
        self.engine.step(self.act_offset + self.act_scale * actions.clamp(-1.0, 1.0))
        self.frame += 1
        self.steps += 1

    def step(self, actions: torch.Tensor) -> StepResult:
        a = actions.to(self.device).clamp(-1.0, 1.0)
        prev_kp, prev_ref = self.engine.get_keypoints(), self.reference(self.frame)
        self.advance(a)
        kp, ref = self.engine.get_keypoints(), self.reference(self.frame)
        terms = reward_terms_3d(kp, ref, prev_kp, prev_ref, a, self.prev_action, self.ref.kset,
                                self.cfg.reward, self.ref.control_hz)  # fmt: skip
        reward = combine(terms, self.cfg.reward.scales)
        causes = self._terminations(kp, ref)
        reward = torch.where(causes["nonfinite"], torch.zeros_like(reward), reward).nan_to_num(0.0)
        terminated = causes["distance"] | causes["fall"] | causes["nonfinite"]
        truncated = ~terminated & (self.at_end() | (self.steps >= self.cfg.max_episode_steps))
        causes["timeout"] = truncated
        # ASI counts samples and early terminations per frame (failure-prioritised starts)
        self.asi.note_step(self.ref.offsets[self.clip] + self.frame - 1, terminated)
        self.ep_return += reward
        self.prev_action = a.clone()
        done = terminated | truncated
        ep_len = torch.where(done, self.steps, torch.zeros_like(self.steps))
        ep_ret = torch.where(done, self.ep_return, torch.zeros_like(self.ep_return))
        self.reset(torch.nonzero(done).flatten())
        return StepResult(
            self.observe(), reward, terms, terminated, truncated, causes, ep_len, ep_ret
        )

    def _terminations(self, kp: torch.Tensor, ref: torch.Tensor) -> dict[str, torch.Tensor]:
        nonfinite = self.engine.nonfinite_envs()
        s = self.engine.get_state()
        far = error_exceeded(kp, ref, self.cfg.term_distance)
        fall = X.fallen(s.root_pos[:, 2], self.cfg.fall_height)
        if self.cfg.fall_tilt_deg > 0:
            fall = fall | X.tilted(s.root_rot, self.up_local, self.cfg.fall_tilt_deg)
        if not self.cfg.early_termination:
            far, fall = torch.zeros_like(far), torch.zeros_like(fall)
        return {
            "distance": far & ~nonfinite,
            "fall": fall & ~nonfinite & ~far,
            "nonfinite": nonfinite,
        }

    # ------------------------------------------------------------------ ASI
    def observe_values(self, values: torch.Tensor):
        """Score the states behind the last observation with the critic's ``values [N]``."""
        if self._obs_state is None:
            return 0
        ids = torch.nonzero((self.steps > 0) & ~self.at_end()).flatten()
        g = self.ref.offsets[self.clip[ids]] + self.frame[ids]
        return self.asi.update(
            g, self._obs_state.index(ids), values.detach().reshape(-1)[ids].float()
        )

    EPISODE_FIELDS = ("clip", "frame", "steps", "ep_return", "prev_action")
