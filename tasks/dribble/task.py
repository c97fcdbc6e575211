"""The ``dribble`` task: :class:`~mimic2dm.tasks.tracking2d.task.Tracking2DTask` with a ball.

What it adds to the tracker (nothing is copied; the tracker's hooks are extended):

- observation: the ball's 2D centre is one more point of every view, the character's
  simulated ball beside its own keypoints and the reference ball beside the reference
  keypoints, normalised like them and masked where the reference does not see the ball
  (:meth:`view_points`); optionally the ball's simulated state (:meth:`proprioception`);
- reward: the tracker's ``obj`` term (docs/design.md section 3) on the 2D ball-centre error, present here
  because the engine simulates the ball and the clip carries its 2D track;
- termination ``ball_lost``: the ball's 2D error beyond ``ball_lost_frac x H`` for
  ``ball_lost_steps`` consecutive steps.
"""

from __future__ import annotations

import torch
from mimic2dm.tasks.dribble.config import DribbleConfig
from mimic2dm.tasks.dribble.terms import BALL_STATE_DIM, ball_far, ball_state, count_lost
from mimic2dm.tasks.tracking2d.source import ReferenceSource
from mimic2dm.tasks.tracking2d.task import Tracking2DTask

from mimic2dm.engines.base import Engine, SimState


class DribbleTask(Tracking2DTask):
    """2D tracking of a dribbling clip with a simulated ball (same arguments as the tracker).

    Raises:
        ValueError: the engine simulates no object, or the reference has no ball track.
    """

    name = "dribble"
    EPISODE_FIELDS = (*Tracking2DTask.EPISODE_FIELDS, "lost")

    def __init__(self, engine: Engine, source: ReferenceSource, cfg: DribbleConfig, seed: int = 0,
                 init: SimState | None = None):  # fmt: skip
        if engine.num_objects < 1:
            raise ValueError("task 'dribble' needs a simulated ball: set `objects: [ball]` "
                             "(conf/task/dribble.yaml; TaskSpec.objects)")  # fmt: skip
        self.lost = torch.zeros(engine.num_envs, dtype=torch.long, device=engine.device)
        self._ball_lost: torch.Tensor | None = None  # the last step's ball_lost cause
        super().__init__(engine, source, cfg, seed, init)  # view_points() checks the ball track

    def start_episodes(self, env_ids, starts, states, view_ids=None) -> None:
        self.lost[env_ids] = 0
        super().start_episodes(env_ids, starts, states, view_ids)

    # ------------------------------------------------------------------ observations
    def view_points(self) -> tuple[torch.Tensor, ...]:
        """The tracker's points plus the ball centre as point ``K`` (own and reference)."""
        uv, valid, ref_uv, ref_mask, ref_root = super().view_points()
        c, c_ok = self.project_object()  # [N, V, 2], [N, V]
        n = self.cfg.num_future
        fut = self.frame[:, None] + torch.arange(1, n + 1, device=self.device)
        track = self.source.objects(fut)  # [N, V, n, 2], [N, V, n]
        if track is None:
            raise ValueError("task 'dribble': the reference clips carry no ball track (Motion2D "
                             "object_center / object_confidence); make one with `mimic2dm data "
                             "dribble` or detect the ball with `mimic2dm extract`")  # fmt: skip
        rc, rc_ok = track
        return (
            torch.cat([uv, c[:, :, None]], 2),
            torch.cat([valid, c_ok[:, :, None]], 2),
            torch.cat([ref_uv, rc[:, :, :, None]], 3),
            torch.cat([ref_mask, rc_ok[..., None]], 3),
            ref_root,
        )

    def proprioception(self) -> torch.Tensor:
        prop = super().proprioception()
        if not self.cfg.ball_in_proprioception:
            return prop
        s = self._read("state")
        return torch.cat(
            [
                prop,
                ball_state(s.root_pos, s.root_rot, s.object_pos[:, 0], s.object_lin_vel[:, 0]),
            ],
            -1,
        )

    def obs_layout(self) -> dict[str, int]:
        """The tracker's layout, plus ``critic``: the ball state only the critic sees."""
        layout = super().obs_layout()
        if self.cfg.ball_in_critic:
            layout["critic"] = BALL_STATE_DIM
        return layout

    def observe(self) -> torch.Tensor:
        obs = super().observe()
        if not self.cfg.ball_in_critic:
            return obs
        s = self.obs_state
        ball = ball_state(s.root_pos, s.root_rot, s.object_pos[:, 0], s.object_lin_vel[:, 0])
        return torch.cat([obs, ball], -1)

    # ------------------------------------------------------------------ terminations
    def terminations(self, uv, ref, mask, H) -> dict[str, torch.Tensor]:
        causes = super().terminations(uv, ref, mask, H)
        sim_c, sim_ok = self.project_object()
        ref_c, ref_ok = self.source.objects(self.frame)
        far = ball_far(sim_c, ref_c, self.source.heights(), self.cfg.ball_lost_frac)
        self.lost = count_lost(self.lost, far, ref_ok & sim_ok)
        lost = self.lost >= self.cfg.ball_lost_steps
        if not self.cfg.early_termination:
            lost = torch.zeros_like(lost)
        earlier = causes["reprojection"] | causes["fall"] | causes["nonfinite"]
        causes["ball_lost"] = lost & ~earlier
        self._ball_lost = causes["ball_lost"]
        return causes

    def failure_frames(self, frames: torch.Tensor) -> torch.Tensor | None:
        """A lost ball counts for ASI where it began: ``ball_failure_lead`` frames before the
        first of its lost steps (the touch that sent it astray), never before the episode's
        start frame. Other terminations count where they happen."""
        if self._ball_lost is None or self.cfg.ball_failure_lead < 0:
            return None
        onset = frames - (self.lost - 1).clamp_min(0) - self.cfg.ball_failure_lead
        onset = torch.maximum(onset, frames - (self.steps - 1).clamp_min(0))
        return torch.where(self._ball_lost, onset, frames)
