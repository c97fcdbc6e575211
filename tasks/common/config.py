"""Settings every reference-tracking task shares (``tracking2d``, ``tracking3d``, and what
extends them): the task configs subclass :class:`ReferenceConfig` and their reward configs
:class:`TermRewardConfig`, each adding its own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from mimic2dm.tasks.common.terms import check_reward

INITIAL_STATES = ("auto", "default_pose")
"""Values of ``initial_state``."""


@dataclass
class ReferenceConfig:
    """Episode, action and start settings of a reference-tracking task; ``fall_height`` /
    ``fall_tilt_deg`` come from the character (``${character.fall_height}``, ...). A subclass
    adds its ``reward`` and ``asi`` (adaptive state initialisation) settings.

    Attributes:
        num_future: future reference frames observed.
        max_episode_steps: time-out.
        fall_height: root below this (m) ends the episode.
        fall_tilt_deg: the root's up axis leaning more than this (degrees) from vertical ends
            the episode (``${character.fall_tilt_deg}``; 0: off). The dog needs it: rolled
            over, its root stays above any useful height floor.
        early_termination: False: only time-outs and non-finite physics end episodes.
        action_scale: actions in [-1, 1] span ``action_scale`` x half the joint range
            around the default pose.
        initial_state: first fill of the ASI buffers (and evaluation's start): ``auto`` (the
            clip's own states, else a pose fitted to its 3D keypoints; the task says which)
            or ``default_pose``.
        initial_ground: lift those states whose collision geometry starts in the ground
            until it touches it (``tracking2d.initial.ground_states``).
    """

    num_future: int = 2
    max_episode_steps: int = 300
    fall_height: float = 0.3
    fall_tilt_deg: float = 0.0
    early_termination: bool = True
    action_scale: float = 1.0
    initial_state: str = "auto"
    initial_ground: bool = True

    def __post_init__(self) -> None:
        from mimic2dm.utils.validate import check, check_choice

        check("task.num_future", self.num_future, ge=1, integer=True)
        check("task.max_episode_steps", self.max_episode_steps, ge=1, integer=True)
        check("task.fall_height", self.fall_height, ge=0)
        check("task.fall_tilt_deg", self.fall_tilt_deg, ge=0, le=180)
        check("task.action_scale", self.action_scale, gt=0)
        check_choice("task.initial_state", self.initial_state, INITIAL_STATES)


@dataclass
class TermRewardConfig:
    """A task's reward settings: term weights ``scales`` (the subclass's field, with the
    task's defaults) and the sharpness of each term, checked by
    :func:`~mimic2dm.tasks.common.terms.check_reward` on construction.

    Class attributes (not fields) a subclass sets: ``terms``, every term the task computes;
    ``positive``, the fields that must be ``> 0``; ``weighted``, the scales must give a
    positive total weight (where every term is always present).

    Attributes:
        alpha_reg: sharpness of ``reg`` on the mean squared action change per control step.
    """

    terms: ClassVar[tuple[str, ...]] = ()
    positive: ClassVar[tuple[str, ...]] = ()
    weighted: ClassVar[bool] = False

    alpha_reg: float = 10.0

    def __post_init__(self) -> None:
        check_reward(self, self.terms, self.positive, weighted=self.weighted)
