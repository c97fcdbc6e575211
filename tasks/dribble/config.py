"""Settings of the ``dribble`` task (``conf/task/dribble.yaml``): the tracker's plus the ball's."""

from __future__ import annotations

from dataclasses import dataclass

from mimic2dm.tasks.tracking2d.config import TrackingConfig


@dataclass
class DribbleConfig(TrackingConfig):
    """:class:`~mimic2dm.tasks.tracking2d.config.TrackingConfig` plus the ball's settings.

    Attributes:
        ball_lost_frac: the ball's 2D centre error beyond this fraction of the image height
            counts as lost (0.2 = 216 px at 1080p).
        ball_lost_steps: lost for this many consecutive control steps (where the reference
            sees the ball) ends the episode (cause ``ball_lost``).
        reach_radius: evaluation: the ball is "within reach" when its ground-plane distance
            to the character's root is at most this (m).
        ball_in_proprioception: also observe the ball's simulated position and velocity
            relative to the root (heading frame). The network has no privileged critic input
            yet, so this reaches the actor too; off by default (the actor sees the 2D ball).
    """

    ball_lost_frac: float = 0.2
    ball_lost_steps: int = 15
    reach_radius: float = 1.5
    ball_in_proprioception: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        from mimic2dm.utils.validate import check

        check("task.ball_lost_frac", self.ball_lost_frac, gt=0)
        check("task.ball_lost_steps", self.ball_lost_steps, ge=1, integer=True)
        check("task.reach_radius", self.reach_radius, gt=0)
