"""The ``tracking3d`` task: imitate 3D reference keypoints (DeepMimic / PHC style).

The baselines of paper Table 1: **3D-GT** tracks the ground-truth 3D keypoints of a
synthetic clip, **Sfv*** the 3D motion ``mimic2dm preprocess`` reconstructed from 2D. Same
engines, PPO and network as the 2D tracker, and the same skeleton
(:class:`~mimic2dm.tasks.common.task.ReferenceTask`: episodes from adaptive state
initialisation, falls, the step tail); what is its own, the goal observation, the reward
terms and the distance termination, are pure functions (:mod:`.observations`, :mod:`.rewards`).
"""

from __future__ import annotations

import logging

import torch
from mimic2dm.tasks.base import StepResult
from mimic2dm.tasks.common.task import ReferenceTask
from mimic2dm.tasks.tracking3d.config import Tracking3DConfig
from mimic2dm.tasks.tracking3d.observations import observation_3d, observation_3d_size
from mimic2dm.tasks.tracking3d.reference import Reference3D
from mimic2dm.tasks.tracking3d.rewards import error_exceeded, reward_terms_3d

from mimic2dm.engines.base import Engine, SimState

log = logging.getLogger(__name__)

CAUSES = ("distance", "fall", "nonfinite", "timeout")


class Tracking3DTask(ReferenceTask):
    """Vectorised 3D keypoint tracking over ``engine.num_envs`` envs with per-env auto-reset.

    Args:
        engine: the simulator (any backend).
        reference: the 3D reference clips.
        cfg: task settings; seed: the task's RNG (episode draws, ASI sampling).
    """

    name = "tracking3d"
    EPISODE_FIELDS = ("clip", "frame", "steps", "ep_return", "prev_action")
    RESCORE_STARTS = False

    def __init__(
        self, engine: Engine, reference: Reference3D, cfg: Tracking3DConfig, seed: int = 0
    ):
        super().__init__(engine, seed, cfg, reference.kset.name)
        self.ref = reference.to(self.device)
        init = reference.initial_states(
            engine.default_state(1), engine.character, cfg.initial_state
        )
        # as the 2D tracker: no start inside the ground (docs/baselines.md)
        self.start_buffers(init, reference.valid_starts(), cfg.initial_ground, log)
        self.clip = torch.zeros(self.N, dtype=torch.long, device=self.device)
        self.start()
        self.goal_dim = observation_3d_size(self.K, cfg.num_future)

    def obs_layout(self) -> dict[str, int]:
        return {"prop": self.prop_dim, "view": self.goal_dim, "views": 1}

    # ------------------------------------------------------------------ episodes
    def start_episodes(self, env_ids: torch.Tensor, starts: torch.Tensor, states: SimState) -> None:
        """Episodes in ``env_ids [E]`` from global frames ``starts [E]`` and ``states``."""
        starts = starts.to(self.device)
        clip = torch.searchsorted(self.ref.offsets, starts, right=True) - 1
        self.clip[env_ids], self.frame[env_ids] = clip, starts - self.ref.offsets[clip]
        self.begin_episodes(env_ids, states)

    def reference(self, frames: torch.Tensor) -> torch.Tensor:
        """Reference keypoints at per-env ``frames [N]`` or ``[N, n]`` -> ``[N, (n,) K, 3]``
        (frames past a clip's end read its last frame)."""
        c = self.clip if frames.dim() == 1 else self.clip[:, None]
        return self.ref.keypoints[c, frames.clamp(max=self.ref.keypoints.shape[1] - 1)]

    def at_end(self) -> torch.Tensor:
        return self.frame >= self.ref.lengths[self.clip] - 1

    def global_frame(self, env_ids: torch.Tensor) -> torch.Tensor:
        return self.ref.offsets[self.clip[env_ids]] + self.frame[env_ids]

    # ------------------------------------------------------------------ observations
    def observe(self) -> torch.Tensor:
        s = self._read("state")
        fut = self.frame[:, None] + torch.arange(1, self.cfg.num_future + 1, device=self.device)
        goal = observation_3d(self._read("keypoints"), s.root_pos, s.root_rot, self.reference(fut))
        self.obs_state = s
        return torch.cat([self.proprioception(), goal], dim=-1)

    # ------------------------------------------------------------------ stepping
    def step(self, actions: torch.Tensor) -> StepResult:
        a = actions.to(self.device).clamp(-1.0, 1.0)
        prev_kp, prev_ref = self._read("keypoints"), self.reference(self.frame)
        self.advance(a)
        kp, ref = self._read("keypoints"), self.reference(self.frame)
        terms = reward_terms_3d(kp, ref, prev_kp, prev_ref, a, self.prev_action, self.ref.kset,
                                self.cfg.reward, self.ref.control_hz)  # fmt: skip
        far = error_exceeded(kp, ref, self.cfg.term_distance)
        return self.finish_step(a, terms, self.cfg.reward.scales, self.fall_causes("distance", far))


def build(spec, engine: Engine, seed: int = 0) -> Tracking3DTask:
    """The task of ``spec`` (a :class:`~mimic2dm.tasks.base.TaskSpec`) on ``engine``."""
    from mimic2dm.tasks.tracking3d import ENTRY

    ref = Reference3D.from_files(list(spec.data), spec.control_hz, engine.character)
    return Tracking3DTask(engine, ref, ENTRY.parse_config(spec.config), seed=seed)
