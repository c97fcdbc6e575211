"""Training metrics from rl-games to the run's logger (wandb + TensorBoard) and the console.

Per epoch, at step = env frames so far:

- ``reward/<term>``: mean per-step value of every reward term the task reports, zero-weight
  ones included (and ``reward/total``);
- ``episode/length``, ``episode/return``: means over the episodes that ended;
- ``termination/<cause>``: fraction of the ended episodes ended by each cause
  (tracking: reprojection, fall, nonfinite, timeout);
- the task's own statistics (tracking: ``asi/...``, adaptive state initialisation);
- ``perf/env_steps_per_s`` (env stepping only), ``perf/rollout_samples_per_s`` (env +
  policy), ``perf/learner_samples_per_s`` (PPO update) and ``perf/samples_per_s`` (all);
- the epoch's wall time ``perf/epoch_s`` and where it went (:func:`time_breakdown`):
  ``perf/physics_s``, ``perf/task_s``, ``perf/inference_s``, ``perf/update_s``,
  ``perf/overhead_s`` (seconds; they sum to ``perf/epoch_s``); with env groups
  (``train.env_groups``) the physics runs in the background, ``perf/physics_s`` is the time
  the rollout waited for it and ``perf/physics_busy_s`` the physics' own time; with
  ``train.overlap`` the update runs beside the next rollout, ``perf/update_s`` is what it
  added to the epoch and ``perf/update_busy_s`` its own time;
- ``ray/actor_restarts``; rl-games' own losses, KL and learning rate as ``rl/...``.

Every ``video_every`` epochs (0: never) the current policy is also evaluated by the
``evaluator`` the app hands in (training: the task's evaluation on the first training
clip): its numeric results are logged as ``eval/...`` and the rollout video it writes as
the video ``rollout`` (skipped with one warning where no GL is available).

The per-step :class:`~mimic2dm.tasks.stats.StepStats` of the vecenv are merged over the
epoch and reduced to host numbers once, when the epoch's metrics are logged.

A rich progress bar shows epochs, frames, mean episode length and reward.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from rl_games.common.algo_observer import AlgoObserver

from mimic2dm.tasks.stats import StepStats
from mimic2dm.utils.run_logging import RunLogger, make_progress

log = logging.getLogger(__name__)


class WriterBridge:
    """Stands in for rl-games' SummaryWriter: keeps the last value of each scalar until the
    observer logs them (``losses/a_loss`` -> ``rl/losses/a_loss``). Time- and
    iteration-indexed duplicates and episode statistics (logged by the observer) are dropped."""

    SKIP_PREFIXES = ("rewards", "shaped_rewards", "episode_lengths")

    def __init__(self):
        self.pending: dict[str, float] = {}

    def add_scalar(self, tag: str, value, step=None, *args, **kwargs) -> None:
        if tag.endswith(("/iter", "/time")) or tag.startswith(self.SKIP_PREFIXES):
            return
        self.pending["rl/" + tag.removesuffix("/step")] = float(value)

    def pop(self) -> dict[str, float]:
        out, self.pending = self.pending, {}
        return out

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


BREAKDOWN = ("physics", "task", "inference", "update", "overhead")
"""The parts of an epoch's wall time, in :func:`time_breakdown` order (``perf/<part>_s``)."""


def time_breakdown(timing: dict[str, float], physics: float, wall: float) -> dict[str, float]:
    """Where an epoch's wall time went, in seconds; the parts sum to ``wall``.

    Args:
        timing: rl-games' epoch times (``TrackerAgent.epoch_timing``): ``step_time`` (in
            ``vec_env.step``), ``play_time`` (the rollout), ``update_time`` (the PPO update);
            with ``overlapped`` (``train.overlap``: the update ran beside the rollout of the
            next batch) also ``total_time`` (the epoch's training time), and the ``update``
            part is what the update added to the rollout's time.
        physics: seconds in the engine's step during the rollout (``infos['physics_s']``).
        wall: the epoch's wall time, from the previous epoch's metrics to this one's.

    Returns:
        ``{"physics", "task" (env step minus physics: observations, rewards, resets, ASI,
        Ray transfers), "inference" (rollout minus env steps: the policy, buffers, GAE),
        "update", "overhead" (the rest: checkpoints, logging, evaluations)}``, each >= 0.
    """
    step, play, update = (max(float(timing.get(k, 0.0)), 0.0)
                          for k in ("step_time", "play_time", "update_time"))  # fmt: skip
    physics = min(max(float(physics), 0.0), step)
    inference = max(play - step, 0.0)
    if timing.get("overlapped"):  # the update ran beside the rollout: count what it added
        update = max(float(timing.get("total_time", 0.0)) - play, 0.0)
    return {"physics": physics, "task": step - physics, "inference": inference, "update": update,
            "overhead": max(wall - step - inference - update, 0.0)}  # fmt: skip


class TrackerObserver(AlgoObserver):
    """rl-games observer feeding a :class:`RunLogger`.

    Args:
        logger: the run's logger (None: console only).
        log_every: epochs between logged scalars.
        progress: show a rich progress bar.
        video_every: epochs between evaluation rollouts with a video (0: never).
        evaluator: ``fn(model, epoch, frame, video_path) -> report`` (needed when
            ``video_every > 0``); video_fps: frame rate of its videos.
    """

    def __init__(self, logger: RunLogger | None = None, log_every: int = 1, progress: bool = True,
                 video_every: int = 0, evaluator: Callable | None = None, video_fps: float = 30.0):  # fmt: skip
        super().__init__()
        self.logger, self.log_every = logger, max(1, int(log_every))
        self.video_every, self.evaluator, self.video_fps = (
            int(video_every),
            evaluator,
            float(video_fps),
        )
        self.bridge = WriterBridge()
        self.algo = None
        self.progress = make_progress() if progress else None
        self.bar = None
        self.last_epoch = -1
        self.history: list[dict[str, float]] = []
        self._mark: float | None = None  # when the last epoch's metrics were taken
        self._reset_epoch()

    def _reset_epoch(self) -> None:
        self.stats = StepStats()
        self.restarts = 0
        self.physics_s = 0.0
        self.physics_busy_s = 0.0

    # ------------------------------------------------------------------ rl-games hooks
    def after_init(self, algo) -> None:
        self.algo = algo
        old = getattr(algo, "writer", None)
        if old is not None and old is not self.bridge:
            old.close()
            # rl-games made RUN_DIR/rl_games/{summaries,nn}: we log and checkpoint elsewhere
            shutil.rmtree(Path(algo.summaries_dir), ignore_errors=True)
            for d in (algo.nn_dir, algo.experiment_dir):
                with contextlib.suppress(OSError):
                    Path(d).rmdir()
        algo.writer = self.bridge

    def process_infos(self, infos, done_indices) -> None:
        if not isinstance(infos, dict):
            return
        if "stats" in infos:
            self.stats.merge(infos["stats"])
        self.restarts += int(infos.get("actor_restarts", 0))
        self.physics_s += float(infos.get("physics_s", 0.0))
        self.physics_busy_s += float(infos.get("physics_busy_s", 0.0))

    def after_print_stats(self, frame: int, epoch_num: int, total_time: float) -> None:
        if epoch_num == self.last_epoch:  # rl-games may call this twice per epoch
            return
        self.last_epoch = epoch_num
        # one mark per epoch: this epoch's logging and evaluation count in the next one's overhead
        now = time.perf_counter()
        start = getattr(self.algo, "epoch_timing", {}).get("start", now)
        wall, self._mark = now - (self._mark if self._mark is not None else start), now
        # rl-games passes the frame count from before this epoch; log at the count after it
        frame = int(getattr(self.algo, "frame", frame))
        metrics = self.epoch_metrics(wall)
        if (
            self.video_every > 0
            and epoch_num % self.video_every == 0
            and self.evaluator is not None
        ):
            metrics.update(self.evaluate_with_video(epoch_num, frame))
        self.history.append({"epoch": epoch_num, "frame": frame, **metrics})
        if self.logger is not None and epoch_num % self.log_every == 0:
            self.logger.log(metrics, step=int(frame))
        if metrics.get("ray/actor_restarts"):
            log.warning(
                "epoch %d: %d Ray env actor(s) replaced",
                epoch_num,
                int(metrics["ray/actor_restarts"]),
            )
        self._advance(epoch_num, frame, metrics)
        self._reset_epoch()

    # ------------------------------------------------------------------ metrics
    def epoch_metrics(self, wall: float | None = None) -> dict[str, float]:
        """This epoch's metrics (see the module docstring); ``wall``: its wall time (s), for
        the time breakdown (None: none)."""
        m = self.stats.metrics()
        m["ray/actor_restarts"] = float(self.restarts)
        algo = self.algo
        if algo is not None:
            t = getattr(algo, "epoch_timing", {})
            frames = t.get("frames", 0.0)
            for name, key in (("env_steps", "step_time"), ("rollout_samples", "play_time"),
                              ("learner_samples", "update_time"), ("samples", "total_time")):  # fmt: skip
                if t.get(key):
                    m[f"perf/{name}_per_s"] = frames / t[key]
            if wall is not None and t:
                m["perf/epoch_s"] = float(wall)
                for part, sec in time_breakdown(t, self.physics_s, wall).items():
                    m[f"perf/{part}_s"] = sec
                if (
                    self.physics_busy_s
                ):  # env groups: the physics' own time, overlapped with the rest
                    m["perf/physics_busy_s"] = self.physics_busy_s
                if t.get("overlapped"):  # train.overlap: the update's own time, beside the rollout
                    m["perf/update_busy_s"] = float(t.get("update_time", 0.0))
            stats = getattr(algo.vec_env, "stats", None)
            if stats is not None:
                m.update(stats())
            m["rl/epoch"] = float(algo.epoch_num)
        m.update(self.bridge.pop())
        return m

    def evaluate_with_video(self, epoch: int, frame: int) -> dict[str, float]:
        """Deterministic evaluation of the current policy by ``evaluator``; logs its video."""
        run_dir = Path(self.logger.run_dir) if self.logger is not None else None
        tmp = run_dir / "videos" / f".eval_{epoch}.mp4" if run_dir is not None else None
        report = self.evaluator(self.algo.model, epoch, frame, tmp)
        out = {
            f"eval/{k}": float(v)
            for k, v in report.items()
            if isinstance(v, (int, float)) and k != "views"
        }
        if tmp is not None and tmp.is_file():
            import imageio.v2 as imageio

            frames = np.stack(imageio.mimread(tmp, memtest=False))
            tmp.unlink()
            self.logger.log_video("rollout", frames, fps=int(round(self.video_fps)), step=frame)
        return out

    # ------------------------------------------------------------------ console
    def _advance(self, epoch: int, frame: int, m: dict[str, float]) -> None:
        if self.progress is None:
            return
        info = f"frames {frame:,}  len {m.get('episode/length', float('nan')):.1f}  r {m.get('reward/total', float('nan')):.3f}"
        if self.bar is None:
            total = getattr(self.algo, "max_epochs", -1)
            self.progress.start()
            start = (getattr(self.algo, "resumed_from", None) or 0) if self.algo is not None else 0
            self.bar = self.progress.add_task(
                "epochs", total=total if total and total > 0 else None, completed=start, info=""
            )
        self.progress.update(self.bar, completed=epoch, info=info)

    def close(self) -> None:
        """Stop the progress bar (the logger is closed by its owner)."""
        if self.progress is not None and self.bar is not None:
            self.progress.stop()
            self.bar = None
