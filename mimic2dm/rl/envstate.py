"""Everything a checkpoint needs to continue a batch of envs of any task exactly.

``Task.state_dict()`` holds what outlives episodes (e.g. ASI buffers, the task's RNG);
``Task.episode_state()`` the episodes in flight (per-env tensors and the engine's exact
state). :func:`task_state` / :func:`load_task_state` bundle the two.
"""

from __future__ import annotations

import torch

from mimic2dm.tasks.base import Task


def task_state(task: Task) -> dict:
    """Snapshot of a task: ASI buffers + RNG and the episodes in flight (picklable)."""
    return {"num_envs": task.num_envs, "task": task.state_dict(), "episodes": task.episode_state()}


def load_task_state(task: Task, state: dict, episodes: bool = True) -> bool:
    """Restore :func:`task_state` into a task built from the same ``TaskSpec``.

    Args:
        task: the task to restore into.
        state: a :func:`task_state` snapshot.
        episodes: also restore the episodes in flight (needs the same number of envs).

    Returns:
        True when the episodes were restored (the next ``observe()`` continues the saved
        run); False when only the buffers and RNG were (the task's episodes go on).
    """
    task.load_state_dict(state["task"])
    if not episodes or state["num_envs"] != task.num_envs:
        return False
    task.load_episode_state(state["episodes"])
    return True


def states_equal(a, b) -> bool:
    """True when two snapshots hold identical tensors / arrays / values (test helper)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(states_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(states_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, torch.Tensor):
        return a.shape == b.shape and bool(torch.equal(a, b))
    if hasattr(a, "shape"):
        return a.shape == b.shape and bool((a == b).all())
    return a == b
