"""The ``stand`` task: hold the character's default pose and root height.

A tiny second task (a smoke test of the task platform, and a task that learns in
seconds): episodes start from the default pose with random joint offsets; rewards are
pure tensor functions of the state; the episode ends when the root falls below
``fall_height`` or after ``max_episode_steps`` (a time-out).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from mimic2dm.tasks.base import StepResult
from mimic2dm.tasks.common.task import EpisodeTask

from mimic2dm.engines.base import Engine


def _default_scales() -> dict[str, float]:
    return {"pose": 0.5, "height": 0.3, "reg": 0.2}


@dataclass
class StandConfig:
    """Settings (``conf/task/stand.yaml``).

    Attributes:
        max_episode_steps: time-out.
        fall_height: root below this (m) ends the episode (``${character.fall_height}``).
        early_termination: False: only time-outs end episodes.
        action_scale: actions in [-1, 1] span this x half the joint range around the default pose.
        init_noise: start joint offsets, uniform in +- this fraction of half the joint range.
        scales: reward term weights (``pose``, ``height``, ``reg``).
        alpha_pose, alpha_height, alpha_reg: sharpness of the terms.
    """

    max_episode_steps: int = 100
    fall_height: float = 0.3
    early_termination: bool = True
    action_scale: float = 1.0
    init_noise: float = 0.1
    scales: dict[str, float] = field(default_factory=_default_scales)
    alpha_pose: float = 5.0
    alpha_height: float = 50.0
    alpha_reg: float = 0.05


def stand_terms(dof_pos, dof_target, root_h, root_h_target, action, prev_action, cfg: StandConfig):
    """Reward terms, each ``[N]`` in [0, 1].

    Args:
        dof_pos ``[N, J]``, dof_target ``[J]``: joint angles and the default pose's.
        root_h ``[N]``, root_h_target: root height and the default pose's (m).
        action, prev_action: ``[N, J]`` normalised actions.
    """
    return {
        "pose": torch.exp(-cfg.alpha_pose * ((dof_pos - dof_target) ** 2).mean(-1)),
        "height": torch.exp(-cfg.alpha_height * (root_h - root_h_target) ** 2),
        "reg": torch.exp(-cfg.alpha_reg * ((action - prev_action) ** 2).mean(-1)),
    }


class StandTask(EpisodeTask):
    """Stand still in the default pose. Observation: ``[prop | goal]`` with ``prop`` = root
    height, root velocities, joint angles and velocities, and ``goal`` = joint-angle and
    root-height errors to the default pose."""

    name = "stand"

    def __init__(self, engine: Engine, cfg: StandConfig, seed: int = 0):
        unknown = sorted(set(cfg.scales) - {"pose", "height", "reg"})
        if unknown or sum(cfg.scales.values()) <= 0:
            raise ValueError(
                f"task.scales {cfg.scales}: terms are pose, height, reg with a positive sum"
            )
        default = engine.default_state(1)
        super().__init__(engine, seed, cfg, act_offset=default.dof_pos[0].clone())
        self.default = default
        self.lo, self.hi = engine.get_dof_limits()
        self.h0 = float(self.default.root_pos[0, 2])
        self.reset(torch.arange(self.N, device=self.device))

    def obs_layout(self) -> dict[str, int]:
        J = self.engine.num_dofs
        return {"prop": 7 + 2 * J, "view": J + 1, "views": 1}

    def reset(self, env_ids: torch.Tensor) -> None:
        if env_ids.numel() == 0:
            return
        s = self.default.repeat(env_ids.numel())
        u = torch.rand(s.dof_pos.shape, generator=self.gen).to(self.device) * 2 - 1
        s.dof_pos = (s.dof_pos + u * self.cfg.init_noise * 0.5 * (self.hi - self.lo)).clamp(
            self.lo, self.hi
        )
        self.begin_episodes(env_ids, s)

    def observe(self) -> torch.Tensor:
        s = self._read("state")
        h = s.root_pos[:, 2:3]
        prop = torch.cat([h, s.root_lin_vel, s.root_ang_vel, s.dof_pos, s.dof_vel], -1)
        goal = torch.cat([s.dof_pos - self.act_offset, h - self.h0], -1)
        return torch.cat([prop, goal], -1)

    def step(self, actions: torch.Tensor) -> StepResult:
        a = actions.to(self.device).clamp(-1.0, 1.0)
        self.advance(a)
        s = self._read("state")
        terms = stand_terms(
            s.dof_pos, self.act_offset, s.root_pos[:, 2], self.h0, a, self.prev_action, self.cfg
        )
        return self.finish_step(a, terms, self.cfg.scales, self.fall_causes())
