"""Reference clips for task tests: any character standing in its default pose."""

from __future__ import annotations

import numpy as np
import torch

from mimic2dm.characters import load_character
from mimic2dm.motion.format import Motion2D
from mimic2dm.motion.synth import synthesize_views


def standing_clip(character: str, frames: int = 20, views: int = 1, ball: bool = False) -> Motion2D:
    """``character``'s default-pose keypoints, still for ``frames`` frames at 30 fps, seen by
    ``views`` static virtual cameras; ``ball``: with a ball 1 m ahead (an object track)."""
    spec = load_character(character)
    pose = spec.default_pose
    kp = spec.tree.keypoints(spec.site_offsets, torch.tensor(pose.root_pos, dtype=torch.float64)[None],
                             torch.tensor(pose.root_quat, dtype=torch.float64)[None],
                             torch.tensor(pose.dof_pos, dtype=torch.float64)[None])[0].numpy()  # fmt: skip
    kp3d = np.repeat(kp[None], frames, axis=0)
    obj = np.repeat(np.array([[1.0, 0.0, 0.11]]), frames, axis=0) if ball else None
    return synthesize_views(
        kp3d, spec.keypoint_set, 30.0, num_views=views, camera="static", seed=0, object3d=obj
    )
