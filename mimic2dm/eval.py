"""``mimic2dm eval``: run a trained policy deterministically and report its task's metrics.

Task-agnostic: the checkpoint names its task, and the task's registry entry evaluates
(for ``tracking2d``: every clip and view, DESIGN-10 metrics; see
:mod:`mimic2dm.tasks.tracking2d.evaluation`).
"""

from __future__ import annotations

from pathlib import Path

from mimic2dm.tasks.registry import load_task


def evaluate(checkpoint, data: list[str | Path], views: int = 1, json_out=None, picture_out=None,
             video_out=None) -> dict:  # fmt: skip
    """Evaluate a policy on the files ``data``; returns (and optionally writes) the report.

    Args:
        checkpoint: a checkpoint path, or a loaded policy (``.act(obs, deterministic)``, ``.env_spec``).
        data: reference files the task evaluates on (2D-motion files with cameras for tracking).
        views: views per sequence (1: view-agnostic 2D tracking; >= 2: view aggregation).
        json_out, picture_out, video_out: optional output paths (``json_out`` may be ``-``: stdout).
            The video is skipped with one warning where no OpenGL back-end works
            (:func:`mimic2dm.render.gl_backend`; callers that need it check that first).

    Raises:
        ValueError: the policy's task has no evaluation.
    """
    if hasattr(checkpoint, "act"):
        policy, name = checkpoint, type(checkpoint).__name__
    else:
        from mimic2dm.rl.policy import load_policy

        policy, name = load_policy(checkpoint), str(checkpoint)
    entry = load_task(policy.env_spec.task)
    if entry.evaluate is None:
        raise ValueError(
            f"task {entry.name!r} has no evaluation (its registry entry sets no `evaluate`)"
        )
    return entry.evaluate(policy, data, views, json_out, picture_out, video_out, name=name)
