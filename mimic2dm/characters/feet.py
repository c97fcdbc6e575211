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


def ground_keypoints(keypoints, character) -> tuple:
    """Lift a 3D keypoint motion by the smallest constant height that puts every foot keypoint,
    on every frame, at or above its height in the character's standing pose.

    Why: a foot keypoint (the humanoid's ankle, the dog's paw) cannot go lower than where the
    character's own foot puts it when the foot lies flat on the floor. Retargeted mocap often
    does: the shared ``cmu_walk`` / ``cmu_run`` put the ankle at 0 m, 5.2 cm under the
    humanoid's flat-foot ankle (0.052 m), the dog clips 2-3 cm under its paws. 2D references
    projected from such a motion ask the tracker for a body that stands in the floor.

    Args:
        keypoints: ``[T, K, 3]`` (z up, m; NaN = missing), in the character's keypoint set.
        character: a :class:`~mimic2dm.characters.base.CharacterSpec` or its registry name.

    Returns:
        ``(lifted [T, K, 3] float32, lift)``: ``lift`` (m, >= 0) was added to every z.

    Raises:
        ValueError: the shape is not ``[T, K, 3]`` for the character's K keypoints, or no
            foot keypoint is observed.
    """
    import numpy as np

    from mimic2dm.characters.registry import load_character

    spec = load_character(character) if isinstance(character, str) else character
    kp = np.asarray(keypoints, dtype=np.float32)
    k = len(load_keypoint_set(spec.keypoint_set).names)
    if kp.ndim != 3 or kp.shape[1:] != (k, 3) or kp.shape[0] == 0:
        raise ValueError(f"keypoints: expected [T, {k}, 3] ({spec.keypoint_set} of {spec.name}), "
                         f"got {list(kp.shape)}")  # fmt: skip
    idx, ground = character_feet(spec)
    z = kp[:, idx, 2]
    if not np.isfinite(z).any():
        raise ValueError(
            f"keypoints: no foot keypoint ({', '.join(FOOT_KEYPOINTS[spec.keypoint_set])}) observed"
        )
    lift = float(max(0.0, np.nanmax(ground.numpy()[None] - z)))
    out = kp.copy()
    out[..., 2] += lift
    return out, lift
