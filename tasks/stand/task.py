"""The ``stand`` task: hold the character's default pose and root height.

A tiny second task (a smoke test of the task platform, and a task that learns in
seconds): episodes start from the default pose with random joint offsets; rewards are
pure tensor functions of the state; the episode ends when the root falls below
``fall_height`` or after ``max_episode_steps`` (a time-out).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from mimic2dm.tasks.base import StepResult, Task

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


class StandTask(Task):
    """Stand still in the default pose. Observation: ``[prop | goal]`` with ``prop`` = root
    height, root velocities, joint angles and velocities, and ``goal`` = joint-angle and
    root-height errors to the default pose."""

    name = "stand"

    def __init__(self, engine: Engine, cfg: StandConfig, seed: int = 0):
        super().__init__(engine, seed)
        unknown = sorted(set(cfg.scales) - {"pose", "height", "reg"})
        if unknown or sum(cfg.scales.values()) <= 0:
            raise ValueError(
                f"task.scales {cfg.scales}: terms are pose, height, reg with a positive sum"
            )
        self.cfg, dev = cfg, self.device
        self.default = engine.default_state(1)
        lo, hi = engine.get_dof_limits()
        self.act_offset = self.default.dof_pos[0].clone()
        self.act_scale = 0.5 * (hi - lo) * cfg.action_scale
        self.lo, self.hi = lo, hi
        self.h0 = float(self.default.root_pos[0, 2])
        N, J = engine.num_envs, engine.num_dofs
        self.steps = torch.zeros(N, dtype=torch.long, device=dev)
        self.ep_return = torch.zeros(N, device=dev)
        self.prev_action = torch.zeros(N, J, device=dev)
        self.reset(torch.arange(N, device=dev))

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
        self.engine.reset(env_ids, s)
        self.steps[env_ids], self.ep_return[env_ids], self.prev_action[env_ids] = 0, 0.0, 0.0

    def observe(self) -> torch.Tensor:
        s = self.engine.get_state()
        h = s.root_pos[:, 2:3]
        prop = torch.cat([h, s.root_lin_vel, s.root_ang_vel, s.dof_pos, s.dof_vel], -1)
        goal = torch.cat([s.dof_pos - self.act_offset, h - self.h0], -1)
        return torch.cat([prop, goal], -1)

    def step(self, actions: torch.Tensor) -> StepResult:
        a = actions.to(self.device).clamp(-1.0, 1.0)
        self.engine.step(self.act_offset + self.act_scale * a)
        self.steps += 1
        s = self.engine.get_state()
        terms = stand_terms(
            s.dof_pos, self.act_offset, s.root_pos[:, 2], self.h0, a, self.prev_action, self.cfg
        )
        total = sum(self.cfg.scales.values())
        reward = sum(terms[k] * (w / total) for k, w in self.cfg.scales.items() if w > 0)
        nonfinite = self.engine.nonfinite_envs()
        reward = torch.where(nonfinite, torch.zeros_like(reward), reward).nan_to_num(0.0)
        fall = (s.root_pos[:, 2] < self.cfg.fall_height) & ~nonfinite
        if not self.cfg.early_termination:
            fall = torch.zeros_like(fall)
        terminated = fall | nonfinite
        truncated = ~terminated & (self.steps >= self.cfg.max_episode_steps)
        self.ep_return += reward
        self.prev_action = a.clone()
        done = terminated | truncated
        ep_len = torch.where(done, self.steps, torch.zeros_like(self.steps))
        ep_ret = torch.where(done, self.ep_return, torch.zeros_like(self.ep_return))
        self.reset(torch.nonzero(done).flatten())
        causes = {"fall": fall, "nonfinite": nonfinite, "timeout": truncated}
        return StepResult(
            self.observe(), reward, terms, terminated, truncated, causes, ep_len, ep_ret
        )

    def state_dict(self) -> dict:
        return {"rng": self.gen.get_state()}

    def load_state_dict(self, d: dict) -> None:
        self.gen.set_state(d["rng"])

    def episode_state(self) -> dict:
        return {"num_envs": self.num_envs, "steps": self.steps.clone(), "ep_return": self.ep_return.clone(),
                "prev_action": self.prev_action.clone(), "engine": self.engine.state_dict()}  # fmt: skip

    def load_episode_state(self, d: dict) -> None:
        if d["num_envs"] != self.num_envs:
            raise ValueError(
                f"episode state of {d['num_envs']} envs does not fit this task's {self.num_envs}"
            )
        for k in ("steps", "ep_return", "prev_action"):
            getattr(self, k).copy_(d[k])
        self.engine.load_state_dict(d["engine"])
