"""A character's feet for the plausibility metrics (:func:`mimic2dm.metrics.plausibility`)."""

from __future__ import annotations

import torch

from mimic2dm.motion.keypoint_sets import load_keypoint_set

FOOT_KEYPOINTS = {
    "coco17": ("left_ankle", "right_ankle"),
    "dog17": ("left_front_paw", "right_front_paw", "left_back_paw", "right_back_paw"),
}
"""The keypoints whose height stands for a foot's (per keypoint set)."""


def character_feet(character) -> tuple[list[int], torch.Tensor]:
    """Foot keypoint indices of a character and their heights ``[F]`` (m) in its default
    standing pose: the ground level of each foot keypoint.

    Args:
        character: a :class:`~mimic2dm.characters.base.CharacterSpec` or its registry name.
    """
    from mimic2dm.characters.registry import load_character

    spec = load_character(character) if isinstance(character, str) else character
    if spec.keypoint_set not in FOOT_KEYPOINTS:
        raise ValueError(f"no foot keypoints known for keypoint set {spec.keypoint_set!r}; "
                         f"known: {sorted(FOOT_KEYPOINTS)}")  # fmt: skip
    kset = load_keypoint_set(spec.keypoint_set)
    idx = [kset.index(n) for n in FOOT_KEYPOINTS[spec.keypoint_set]]
    p = spec.default_pose
    d = lambda x: torch.tensor(x, dtype=torch.float64)[None]  # noqa: E731
    kp = spec.tree.keypoints(spec.site_offsets, d(p.root_pos), d(p.root_quat), d(p.dof_pos))[0]
    return idx, kp[idx, 2].float()
