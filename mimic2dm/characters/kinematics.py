"""Torch forward kinematics of our characters, identical to MuJoCo's for their MJCF.

Every character is a tree of bodies; each non-root body sits at a fixed offset in its
parent's frame and carries zero or more hinge joints at its origin, applied in
declaration order (so three hinges about x, y, z give ``Rx(a) Ry(b) Rz(c)``). The root
carries the freejoint. :class:`KinematicTree` is that description, built by the same
code that writes the MJCF, so ``fk`` matches ``mj_kinematics`` (tested).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from mimic2dm.geometry.rotations import quat_from_axis_angle, quat_identity, quat_mul, quat_rotate


@dataclass(frozen=True, eq=False)
class KinematicTree:
    """Bodies, offsets and hinge axes of a character.

    Attributes:
        body_names: ``B`` names, MuJoCo body order, root first.
        parents: ``B`` parent indices (-1 for the root); parents precede children.
        offsets: ``[B, 3]`` body origin in the parent frame (root row unused).
        dof_body: ``J`` index of the body carrying each actuated hinge (action order).
        dof_axis: ``[J, 3]`` unit hinge axes in the body frame.
    """

    body_names: tuple[str, ...]
    parents: tuple[int, ...]
    offsets: np.ndarray
    dof_body: tuple[int, ...]
    dof_axis: np.ndarray

    def __post_init__(self):
        for name in ("offsets", "dof_axis"):
            arr = np.array(getattr(self, name), dtype=np.float64)
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)
        if any(not -1 <= p < i for i, p in enumerate(self.parents)) or self.parents[0] != -1:
            raise ValueError(f"KinematicTree: parents must precede children, got {self.parents}")
        if list(self.dof_body) != sorted(self.dof_body):
            raise ValueError("KinematicTree: dofs must follow body order (MuJoCo qpos order)")

    def fk(
        self, root_pos: torch.Tensor, root_quat: torch.Tensor, dof_pos: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Global body frames.

        Args:
            root_pos: ``[..., 3]`` root position.
            root_quat: ``[..., 4]`` root rotation, xyzw.
            dof_pos: ``[..., J]`` hinge angles (rad).

        Returns:
            ``(pos [..., B, 3], rot [..., B, 4] xyzw)``.
        """
        dtype, device = dof_pos.dtype, dof_pos.device
        offsets = torch.tensor(
            self.offsets, dtype=dtype, device=device
        )  # copy: arrays are read-only
        axes = torch.tensor(self.dof_axis, dtype=dtype, device=device)
        batch = dof_pos.shape[:-1]
        local = [quat_identity(batch, dtype, device) for _ in self.body_names]
        for j, b in enumerate(self.dof_body):
            local[b] = quat_mul(
                local[b], quat_from_axis_angle(axes[j].expand(batch + (3,)), dof_pos[..., j])
            )
        pos, rot = [root_pos], [quat_mul(root_quat, local[0])]
        for b in range(1, len(self.body_names)):
            p = self.parents[b]
            pos.append(pos[p] + quat_rotate(rot[p], offsets[b].expand(batch + (3,))))
            rot.append(quat_mul(rot[p], local[b]))
        return torch.stack(pos, dim=-2), torch.stack(rot, dim=-2)

    def keypoints(
        self,
        site_offsets,
        root_pos: torch.Tensor,
        root_quat: torch.Tensor,
        dof_pos: torch.Tensor,
    ) -> torch.Tensor:
        """Keypoints ``[..., K, 3]`` of a pose, from ``CharacterSpec.site_offsets``."""
        pos, rot = self.fk(root_pos, root_quat, dof_pos)
        return keypoints_from_bodies(site_offsets, self.body_names, pos, rot)


def keypoints_from_bodies(
    site_offsets, body_names, pos: torch.Tensor, rot: torch.Tensor
) -> torch.Tensor:
    """Keypoints from any forward kinematics via ``CharacterSpec.site_offsets``.

    Args:
        site_offsets: ``K`` pairs ``(body_name, (x, y, z))``.
        body_names: names of the ``B`` bodies indexed by ``pos`` / ``rot``.
        pos: ``[..., B, 3]`` body positions.
        rot: ``[..., B, 4]`` body rotations, xyzw.

    Returns:
        ``[..., K, 3]`` keypoint positions.
    """
    names = list(body_names)
    idx = torch.tensor([names.index(b) for b, _ in site_offsets], device=pos.device)
    off = torch.tensor([o for _, o in site_offsets], dtype=pos.dtype, device=pos.device)
    return pos[..., idx, :] + quat_rotate(rot[..., idx, :], off.expand(rot.shape[:-2] + off.shape))
