"""Initial states that first fill the ASI buffers (DESIGN section 7).

Preferred: 3D poses from preprocessing (B.1), passed in as a :class:`SimState` per
frame. Without them, each frame gets the character's default standing pose placed
under the reference: at the clip's 3D root (when the clip carries 3D keypoints) and
turned to its heading. ASI then replaces these rough states with ones the critic rates.
"""

from __future__ import annotations

import warnings

import torch
from mimic2dm.tasks.tracking2d.reference import ReferenceLibrary

from mimic2dm.engines.base import SimState
from mimic2dm.geometry import rotations as rot
from mimic2dm.motion.keypoint_sets import KeypointSet


def forward_yaw(kp3d: torch.Tensor, kset: KeypointSet) -> torch.Tensor:
    """Yaw ``[...]`` of the body's facing direction from 3D keypoints ``[..., K, 3]``.

    Humans: perpendicular to the hips (left minus right hip, crossed with up).
    Dogs: from the root of the tail to the neck.
    """
    if kset.name == "coco17":
        left = kp3d[..., kset.index("left_hip"), :] - kp3d[..., kset.index("right_hip"), :]
        fwd = torch.stack([left[..., 1], -left[..., 0]], dim=-1)  # left x up, in the ground plane
    else:
        fwd = (kp3d[..., kset.index("neck"), :] - kp3d[..., kset.index("root_of_tail"), :])[..., :2]
    return torch.atan2(fwd[..., 1], fwd[..., 0])


def initial_states(library: ReferenceLibrary, template: SimState, spec) -> SimState:
    """One default-pose state per global reference frame, placed under the reference and
    moving with the horizontal velocity of its root.

    Args:
        library: the reference clips.
        template: the engine's default state ``[1]`` (character and objects at rest).
        spec: the character (for its keypoints in the default pose).

    Returns:
        :class:`SimState` with ``library.total_frames`` rows.
    """
    F = library.total_frames
    out = template.repeat(F)
    pose = spec.default_pose
    root_pos = torch.tensor(pose.root_pos, dtype=torch.float32)
    root_quat = torch.tensor(pose.root_quat, dtype=torch.float32)
    kp0 = spec.tree.keypoints(spec.site_offsets, root_pos.double(), root_quat.double(),
                              torch.tensor(pose.dof_pos)).float()  # fmt: skip
    yaw0 = forward_yaw(kp0, library.kset)
    root_kp0 = kp0[list(library.kset.root)].mean(0)
    z = torch.tensor([0.0, 0.0, 1.0])
    missing = [c.name for c in library.clips if c.keypoints3d is None]
    if missing:
        warnings.warn(f"clips {missing} carry no 3D keypoints nor initial states: ASI starts them from the "
                      "default pose at the origin; pass preprocessed initial states instead", stacklevel=2)  # fmt: skip
    for c, clip in enumerate(library.clips):
        if clip.keypoints3d is None:
            continue
        sl = slice(int(library.offsets[c]), int(library.offsets[c] + library.lengths[c]))
        kp = clip.keypoints3d
        dyaw = forward_yaw(kp, library.kset) - yaw0
        q = rot.quat_mul(
            rot.quat_from_axis_angle(z.expand(kp.shape[0], 3), dyaw),
            root_quat.expand(kp.shape[0], 4),
        )
        # put the default pose's keypoint root over the reference root, keep standing height
        offset = rot.quat_rotate(q, (root_pos - root_kp0).expand(kp.shape[0], 3))
        target = kp[:, list(library.kset.root)].mean(1)
        pos = target + offset
        pos[:, 2] = root_pos[2]
        out.root_pos[sl], out.root_rot[sl] = pos, q
        # move with the reference from the first step (finite differences of its root)
        vel = (
            torch.gradient(target, spacing=1.0 / library.control_hz, dim=0)[0]
            if kp.shape[0] > 1
            else torch.zeros_like(target)
        )
        vel[:, 2] = 0.0
        out.root_lin_vel[sl] = vel
    return out
