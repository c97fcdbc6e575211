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
        ball_in_critic: the critic (not the actor) also sees the ball's simulated position and
            velocity relative to the root (heading frame), appended after the views
            (``obs_layout["critic"]``): values, and the ASI scores they give, that know where
            the ball is going; the policy still sees the ball only as a 2D point.
        ball_failure_lead: ASI's ``failure`` start sampling counts a ``ball_lost``
            termination this many frames before the ball's first lost step (where the touch
            that lost it happened), never before the episode's start; -1: at the
            termination, like the other causes.
    """

    ball_lost_frac: float = 0.2
    ball_lost_steps: int = 15
    reach_radius: float = 1.5
    ball_in_proprioception: bool = False
    ball_in_critic: bool = False
    ball_failure_lead: int = -1

    def __post_init__(self) -> None:
        super().__post_init__()
        from mimic2dm.utils.validate import check

        check("task.ball_lost_frac", self.ball_lost_frac, gt=0)
        check("task.ball_lost_steps", self.ball_lost_steps, ge=1, integer=True)
        check("task.reach_radius", self.reach_radius, gt=0)
        check("task.ball_failure_lead", self.ball_failure_lead, ge=-1, integer=True)
        if self.ball_in_critic and self.privileged_3d:
            raise ValueError("task.ball_in_critic and task.privileged_3d both append columns after the "
                             "views; use one (distillation teachers do not take the critic's)")  # fmt: skip
