"""Settings of the ``tracking3d`` task (``conf/task/tracking3d.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from mimic2dm.tasks.common.config import ReferenceConfig, TermRewardConfig
from mimic2dm.tasks.tracking2d.asi import ASIConfig

TERMS = ("pos", "vel", "root", "rot", "reg")
"""Every reward term of the 3D tracker."""


def _default_scales() -> dict[str, float]:
    return {"pos": 0.5, "vel": 0.1, "root": 0.15, "rot": 0.15, "reg": 0.1}


@dataclass
class Reward3DConfig(TermRewardConfig):
    """Term weights (``scales``, re-normalised to sum 1) and sharpness of the 3D terms;
    ``alpha_reg`` comes from :class:`~mimic2dm.tasks.common.config.TermRewardConfig`.

    Attributes:
        alpha_pos: on the mean squared keypoint error (m^2).
        alpha_vel: on the mean squared keypoint velocity error ((m/s)^2).
        alpha_root: on the squared root position error (m^2).
        alpha_rot: on the squared body-frame angle error (rad^2).
    """

    scales: dict[str, float] = field(default_factory=_default_scales)
    alpha_pos: float = 40.0
    alpha_vel: float = 1.0
    alpha_root: float = 20.0
    alpha_rot: float = 2.0

    terms = TERMS
    positive = ("alpha_pos", "alpha_vel", "alpha_root", "alpha_rot", "alpha_reg")
    weighted = True


@dataclass
class Tracking3DConfig(ReferenceConfig):
    """:class:`~mimic2dm.tasks.common.config.ReferenceConfig` plus the 3D tracker's own settings.

    ``initial_state`` ``auto``: a Motion3D's own states, else the pose fitted to the 3D
    keypoints; ``initial_ground`` lifts the starts as the 2D tracker does.

    Attributes:
        term_distance: mean 3D keypoint error (m) above which an episode ends.
        reward: term scales and sharpness; asi: adaptive state initialisation.
    """

    term_distance: float = 0.5
    reward: Reward3DConfig = field(default_factory=Reward3DConfig)
    asi: ASIConfig = field(default_factory=ASIConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        from mimic2dm.utils.validate import check

        check("task.term_distance", self.term_distance, gt=0)
