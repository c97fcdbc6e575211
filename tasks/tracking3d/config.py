"""Settings of the ``tracking3d`` task (``conf/task/tracking3d.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from mimic2dm.tasks.tracking2d.asi import ASIConfig

TERMS = ("pos", "vel", "root", "rot", "reg")
"""Every reward term of the 3D tracker."""


def _default_scales() -> dict[str, float]:
    return {"pos": 0.5, "vel": 0.1, "root": 0.15, "rot": 0.15, "reg": 0.1}


@dataclass
class Reward3DConfig:
    """Term weights (``scales``, re-normalised to sum 1) and sharpness of the 3D terms.

    Attributes:
        alpha_pos: on the mean squared keypoint error (m^2).
        alpha_vel: on the mean squared keypoint velocity error ((m/s)^2).
        alpha_root: on the squared root position error (m^2).
        alpha_rot: on the squared body-frame angle error (rad^2).
        alpha_reg: on the mean squared action change per control step.
    """

    scales: dict[str, float] = field(default_factory=_default_scales)
    alpha_pos: float = 40.0
    alpha_vel: float = 1.0
    alpha_root: float = 20.0
    alpha_rot: float = 2.0
    alpha_reg: float = 10.0

    def __post_init__(self) -> None:
        from mimic2dm.tasks.tracking2d.rewards import check_scales

        from mimic2dm.utils.validate import ConfigError, check

        check_scales(self.scales, TERMS)
        if sum(self.scales.values()) <= 0:
            raise ConfigError("task.reward.scales", dict(self.scales), "a positive total weight")
        for name in ("alpha_pos", "alpha_vel", "alpha_root", "alpha_rot", "alpha_reg"):
            check(f"task.reward.{name}", getattr(self, name), gt=0)


@dataclass
class Tracking3DConfig:
    """Task settings; ``fall_height`` / ``fall_tilt_deg`` come from the character.

    Attributes:
        num_future: future reference frames observed.
        max_episode_steps: time-out.
        term_distance: mean 3D keypoint error (m) above which an episode ends.
        fall_height: root below this (m) ends the episode.
        fall_tilt_deg: root up axis leaning more than this from vertical ends it (0: off).
        early_termination: False: only time-outs and non-finite physics end episodes.
        action_scale: actions in [-1, 1] span ``action_scale`` x half the joint range
            around the default pose.
        initial_state: first fill of the ASI buffers: ``auto`` (a Motion3D's own states,
            else the pose fitted to the 3D keypoints) | ``default_pose``.
        initial_ground: lift those states whose collision geometry starts in the ground
            until it touches it, as the 2D tracker does (``tracking2d.initial.ground_states``).
        reward: term scales and sharpness; asi: adaptive state initialisation.
    """

    num_future: int = 2
    max_episode_steps: int = 300
    term_distance: float = 0.5
    fall_height: float = 0.3
    fall_tilt_deg: float = 0.0
    early_termination: bool = True
    action_scale: float = 1.0
    initial_state: str = "auto"
    initial_ground: bool = True
    reward: Reward3DConfig = field(default_factory=Reward3DConfig)
    asi: ASIConfig = field(default_factory=ASIConfig)

    def __post_init__(self) -> None:
        from mimic2dm.utils.validate import check, check_choice

        check("task.num_future", self.num_future, ge=1, integer=True)
        check("task.max_episode_steps", self.max_episode_steps, ge=1, integer=True)
        check("task.term_distance", self.term_distance, gt=0)
        check("task.fall_height", self.fall_height, ge=0)
        check("task.fall_tilt_deg", self.fall_tilt_deg, ge=0, le=180)
        check("task.action_scale", self.action_scale, gt=0)
        check_choice("task.initial_state", self.initial_state, ("auto", "default_pose"))
