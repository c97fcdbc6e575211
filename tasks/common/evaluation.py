"""What the tracking tasks' evaluations share: the evaluation settings, the deterministic
rollout from the first frame of every sequence and the overlay picture / video."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch


def evaluation_config(cfg, **changes):
    """``cfg`` for a whole-sequence evaluation: no early termination, no time-out and no
    adaptive state initialisation (episodes start from the initial states), plus ``changes``."""
    from mimic2dm.tasks.tracking2d.asi import ASIConfig

    return dataclasses.replace(cfg, early_termination=False, max_episode_steps=10**9,
                               asi=ASIConfig(enabled=False), **changes)  # fmt: skip


def start_sequences(task, starts: torch.Tensor, *args) -> None:
    """Every env of ``task`` starts at global frame ``starts [N]`` from the initial state
    stored there (``args``: what ``start_episodes`` takes besides, e.g. view ids)."""
    states = task.asi.sample_states(starts.cpu(), task.gen)
    task.start_episodes(torch.arange(task.N, device=task.device), starts, states, *args)


def policy_rollout(task, policy, T: int, record: Callable[[int], None]) -> None:
    """``T`` steps of ``policy``'s deterministic actions from the task's current episodes:
    ``record(t)`` reads step ``t``'s state, then the physics moves on (no rewards, no resets)."""
    for t in range(T):
        record(t)
        if t < T - 1:
            with torch.no_grad():
                task.advance(policy.act(task.observe(), deterministic=True))


def write_overlays(spec, cam, kset, ref_uv: np.ndarray, sim_uv: np.ndarray, mask: np.ndarray,
                   states: list, picture_out=None, video_out=None) -> None:  # fmt: skip
    """The overlay picture (six frames) and video of one sequence in one camera.

    Args:
        spec: the run's ``TaskSpec`` (character, objects, control rate).
        cam: the view's :class:`~mimic2dm.geometry.camera.Camera`; kset: the keypoint set.
        ref_uv, sim_uv: ``[n, K, 2]`` reference and character pixels; mask: ``[n, K]``.
        states: engine states of env 0 per step (rendered for the video).
    """
    n = len(ref_uv)
    if picture_out:
        from mimic2dm.utils.draw import overlay_grid

        frames = np.linspace(0, n - 1, 6).round().astype(int).tolist()
        Path(picture_out).parent.mkdir(parents=True, exist_ok=True)
        overlay_grid(ref_uv, sim_uv, mask, kset.edges, (cam.width, cam.height), frames).save(
            picture_out
        )
    if video_out:
        from mimic2dm.engines.base import SimState
        from mimic2dm.render import try_render, write_video

        frames = try_render(spec.character, SimState.cat(states).index(slice(0, n)), cam, spec.objects,
                            ref_uv=ref_uv, ref_mask=mask, kset=kset)  # fmt: skip
        if frames is not None:
            Path(video_out).parent.mkdir(parents=True, exist_ok=True)
            write_video(video_out, frames, spec.control_hz)
