"""The 3D tracker's goal observation as a pure tensor function (proprioception is
:func:`mimic2dm.tasks.common.terms.proprioception`)."""

from __future__ import annotations

import torch

from mimic2dm.geometry import rotations as rot


def observation_3d(
    sim_kp: torch.Tensor, root_pos: torch.Tensor, root_rot: torch.Tensor, ref_kp: torch.Tensor
) -> torch.Tensor:
    """Future reference keypoints relative to the character, in its heading frame.

    Args:
        sim_kp: ``[N, K, 3]`` the character's world keypoints.
        root_pos: ``[N, 3]``; root_rot: ``[N, 4]`` xyzw, the character's root.
        ref_kp: ``[N, n, K, 3]`` reference keypoints at frames ``t+1..t+n``.

    Returns:
        ``[N, 3K + n * 6K]``: own keypoints relative to the root; per future frame, the
        reference keypoints relative to the own root and their offsets from the own keypoints.
    """
    N, n, K = ref_kp.shape[:3]
    hinv = rot.heading_quat_inv(root_rot)
    to_local = lambda v: rot.quat_rotate(hinv[:, None].expand(-1, v.shape[1], -1), v)  # noqa: E731
    own = to_local(sim_kp - root_pos[:, None])
    ref = ref_kp.reshape(N, n * K, 3)
    rel = to_local(ref - root_pos[:, None])
    diff = to_local(ref - sim_kp.repeat(1, n, 1))
    per_frame = torch.cat([rel.reshape(N, n, K * 3), diff.reshape(N, n, K * 3)], dim=-1)
    return torch.cat([own.reshape(N, -1), per_frame.reshape(N, -1)], dim=-1)


def observation_3d_size(num_keypoints: int, num_future: int) -> int:
    """Width of :func:`observation_3d`."""
    return 3 * num_keypoints * (1 + 2 * num_future)
