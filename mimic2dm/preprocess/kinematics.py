"""A batched, differentiable kinematic model of a character for preprocessing (B.1).

:class:`CharacterModel` evaluates the character's own kinematic tree (the one its MJCF
is built from, ``CharacterSpec.tree``) on many poses at once: keypoint sites (the
sites the engine reads) and the contact geometry of the feet / paws, read from the
compiled MJCF. It gives the same keypoints as ``spec.tree.keypoints`` (tested) but is
written with rotation matrices, all hinges at once and one step per tree level, so
its autograd graph has ~40 nodes instead of ~300: the optimiser's cost is dominated by
this function.
"""

from __future__ import annotations

import numpy as np
import torch

from mimic2dm.characters.base import CharacterSpec
from mimic2dm.geometry.rotations import quat_to_matrix


def _skew(a: np.ndarray) -> np.ndarray:
    """``[J, 3]`` -> ``[J, 3, 3]`` cross-product matrices."""
    k = np.zeros((a.shape[0], 3, 3))
    k[:, 0, 1], k[:, 0, 2], k[:, 1, 2] = -a[:, 2], a[:, 1], -a[:, 0]
    return k - k.transpose(0, 2, 1)


def contact_points(spec: CharacterSpec) -> tuple[list[int], np.ndarray, np.ndarray]:
    """Contact geometry of ``spec.contact_bodies`` from the compiled MJCF.

    Boxes give their 8 corners, spheres and capsules their centre(s) with a radius.

    Returns:
        ``(body index per point [C], offsets in the body frame [C, 3], radius [C])``.
    """
    import mujoco

    model = mujoco.MjModel.from_xml_string(spec.mjcf)
    bodies, offs, radii = [], [], []
    for name in spec.contact_bodies:
        b = model.body(name).id
        for g in np.flatnonzero(model.geom_bodyid == b):
            rot = np.zeros(9)
            mujoco.mju_quat2Mat(rot, model.geom_quat[g])
            rot, pos, size = rot.reshape(3, 3), model.geom_pos[g], model.geom_size[g]
            kind = model.geom_type[g]
            if kind == mujoco.mjtGeom.mjGEOM_BOX:
                corners = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)])
                pts, r = pos + (corners * size) @ rot.T, 0.0
            elif kind == mujoco.mjtGeom.mjGEOM_SPHERE:
                pts, r = pos[None], size[0]
            elif kind == mujoco.mjtGeom.mjGEOM_CAPSULE:
                pts, r = pos + np.array([[0, 0, -size[1]], [0, 0, size[1]]]) @ rot.T, size[0]
            else:
                continue
            bodies += [spec.body_names.index(name)] * len(pts)
            offs.append(pts)
            radii += [r] * len(pts)
    if not bodies:
        raise ValueError(
            f"{spec.name}: no box/sphere/capsule geom on contact bodies {spec.contact_bodies}"
        )
    return bodies, np.concatenate(offs), np.array(radii)


def body_inertia(spec: CharacterSpec) -> tuple[np.ndarray, np.ndarray]:
    """Mass ``[B]`` (kg) and centre of mass in the body frame ``[B, 3]`` of each body of
    ``spec.tree`` (its order), from the compiled MJCF."""
    import mujoco

    model = mujoco.MjModel.from_xml_string(spec.mjcf)
    ids = [model.body(name).id for name in spec.tree.body_names]
    return np.asarray(model.body_mass[ids], np.float64), np.asarray(
        model.body_ipos[ids], np.float64
    )


class CharacterModel:
    """Batched forward kinematics of one character (float32, any leading batch shape).

    Attributes:
        spec: the character.
        lower, upper: ``[J]`` joint limits (rad) from the MJCF.
        num_dof: ``J``; num_keypoints: ``K``.
    """

    def __init__(self, spec: CharacterSpec, dtype: torch.dtype = torch.float32):
        self.spec = spec
        tree = spec.tree
        B, J = len(tree.body_names), len(tree.dof_body)
        self.num_dof, self.num_keypoints = J, spec.num_keypoints
        as_t = lambda x: torch.tensor(np.array(x), dtype=dtype)  # noqa: E731
        self.lower, self.upper = as_t(spec.joint_range[:, 0]), as_t(spec.joint_range[:, 1])
        axes = np.asarray(tree.dof_axis, dtype=np.float64).reshape(J, 3)
        k = _skew(axes)
        self._K, self._K2 = as_t(k), as_t(k @ k)
        # hinge slots per body, padded with J (= the identity appended after the hinges)
        slots = max(1, int(np.bincount(np.asarray(tree.dof_body, dtype=int), minlength=B).max()))
        table = np.full((B, slots), J)
        for j, b in enumerate(tree.dof_body):
            table[b, int((table[b] < J).sum())] = j
        self._slots = torch.as_tensor(table)
        self._offsets = as_t(tree.offsets)
        depth = [0] * B
        for b in range(1, B):
            depth[b] = depth[tree.parents[b]] + 1
        self._levels = []  # (bodies of the level, index of each one's parent in the level above)
        for d in range(1, max(depth) + 1):
            ids = [b for b in range(B) if depth[b] == d]
            above = [b for b in range(B) if depth[b] == d - 1]
            self._levels.append(
                (torch.as_tensor(ids), torch.as_tensor([above.index(tree.parents[b]) for b in ids]))
            )
        order = [0] + [b for ids, _ in self._levels for b in ids.tolist()]
        self._unpermute = torch.as_tensor(np.argsort(order))
        names = list(tree.body_names)
        self._site_body = torch.as_tensor([names.index(b) for b, _ in spec.site_offsets])
        self._site_off = as_t([o for _, o in spec.site_offsets])
        cb, coff, crad = contact_points(spec)
        self._contact_body, self._contact_off = torch.as_tensor(cb), as_t(coff)
        self.contact_radius = as_t(crad)
        self._cache: dict[torch.dtype, dict[str, torch.Tensor]] = {}
        self._axes = as_t(axes)
        self._dof_body = torch.as_tensor(list(tree.dof_body))
        self._dof_slot = torch.as_tensor(
            [int(np.flatnonzero(table[b] == j)[0]) for j, b in enumerate(tree.dof_body)]
        )
        # hinge j moves a point on body b iff j's body is b or one of its ancestors
        below = np.zeros((J, B), dtype=bool)
        for j, b in enumerate(tree.dof_body):
            for c in range(B):
                a = c
                while a >= 0 and a != b:
                    a = tree.parents[a]
                below[j, c] = a == b
        self.site_below = torch.as_tensor(below[:, self._site_body.numpy()])  # [J, K]
        self.contact_below = torch.as_tensor(below[:, self._contact_body.numpy()])  # [J, C]
        self.body_below = torch.as_tensor(below)  # [J, B]
        mass, ipos = body_inertia(spec)
        self._mass_frac = as_t(mass / mass.sum())  # [B]
        self._ipos = as_t(ipos)  # [B, 3] centre of mass in the body frame
        # contact points grouped by body: [C] index into contact_bodies
        self.contact_group = torch.as_tensor([spec.contact_bodies.index(names[b]) for b in cb])
        from mimic2dm.characters.retarget import levelable_feet

        flat = levelable_feet(spec)
        # feet that stand flat: (body index [F], their contact_bodies index [F])
        self.flat_feet = torch.as_tensor([names.index(b) for b in flat], dtype=torch.long)
        self.flat_group = torch.as_tensor(
            [spec.contact_bodies.index(b) for b in flat], dtype=torch.long
        )

    def clamp(self, dof_pos: torch.Tensor) -> torch.Tensor:
        """Joint angles ``[..., J]`` projected onto the limits."""
        return torch.maximum(
            torch.minimum(dof_pos, self.upper.to(dof_pos.dtype)), self.lower.to(dof_pos.dtype)
        )

    def _consts(self, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """The model's float constants in ``dtype`` (cached)."""
        if dtype not in self._cache:
            names = ("_K", "_K2", "_offsets", "_site_off", "_contact_off", "_axes", "_ipos",
                     "_mass_frac")  # fmt: skip
            self._cache[dtype] = {n: getattr(self, n).to(dtype) for n in names}
        return self._cache[dtype]

    def bodies(
        self,
        root_pos: torch.Tensor,
        root_quat: torch.Tensor,
        dof_pos: torch.Tensor,
        with_axes: bool = False,
    ):
        """Body frames: ``(pos [..., B, 3], rot [..., B, 3, 3])`` (root_quat xyzw, any norm > 0),
        plus the hinges' world axes ``[..., J, 3]`` when ``with_axes``."""
        k = self._consts(dof_pos.dtype)
        s, c = torch.sin(dof_pos)[..., None, None], torch.cos(dof_pos)[..., None, None]
        hinge = (
            torch.eye(3, dtype=dof_pos.dtype) + s * k["_K"] + (1 - c) * k["_K2"]
        )  # [..., J, 3, 3]
        eye = torch.eye(3, dtype=dof_pos.dtype).expand(*hinge.shape[:-3], 1, 3, 3)
        hinge = torch.cat([hinge, eye], dim=-3)
        local = hinge[..., self._slots[:, 0], :, :]
        for m in range(1, self._slots.shape[1]):
            local = local @ hinge[..., self._slots[:, m], :, :]
        q = root_quat / root_quat.norm(dim=-1, keepdim=True)
        R = (quat_to_matrix(q) @ local[..., 0, :, :])[..., None, :, :]
        p = root_pos[..., None, :]
        Rs, ps = [R], [p]
        for ids, par in self._levels:
            Rp, pp = R[..., par, :, :], p[..., par, :]
            p = pp + (Rp @ k["_offsets"][ids][..., None])[..., 0]
            R = Rp @ local[..., ids, :, :]
            Rs.append(R), ps.append(p)
        pos = torch.cat(ps, dim=-2)[..., self._unpermute, :]
        rot = torch.cat(Rs, dim=-3)[..., self._unpermute, :, :]
        if with_axes:
            return pos, rot, self._world_axes(hinge, rot, k)
        return pos, rot

    def _world_axes(self, hinge: torch.Tensor, rot: torch.Tensor, k: dict) -> torch.Tensor:
        """World axes ``[..., J, 3]`` of every hinge: ``R_body (H_{m+1} ... H_last)^T a_j`` for
        hinge ``j`` in slot ``m`` of its body (the hinges after it turn the body frame further)."""
        after = torch.eye(3, dtype=hinge.dtype).expand(
            *hinge.shape[:-3], len(self.spec.body_names), 3, 3
        )
        suffix = [None] * self._slots.shape[1]
        for m in range(self._slots.shape[1] - 1, -1, -1):
            suffix[m] = after
            after = hinge[..., self._slots[:, m], :, :] @ after
        suffix = torch.stack(suffix, dim=-4)  # [..., S, B, 3, 3]
        A = suffix[..., self._dof_slot, self._dof_body, :, :]  # [..., J, 3, 3]
        local = (A.transpose(-1, -2) @ k["_axes"][..., None])[..., 0]
        return (rot[..., self._dof_body, :, :] @ local[..., None])[..., 0]

    def body_coms(self, pos: torch.Tensor, rot: torch.Tensor) -> torch.Tensor:
        """Each body's centre of mass ``[..., B, 3]`` from the frames of :meth:`bodies`."""
        k = self._consts(pos.dtype)
        return pos + (rot @ k["_ipos"][..., None])[..., 0]

    def mass_fraction(self, dtype: torch.dtype) -> torch.Tensor:
        """``[B]``: each body's share of the character's mass."""
        return self._consts(dtype)["_mass_frac"]

    def com_of(self, body_coms: torch.Tensor) -> torch.Tensor:
        """The whole body's centre of mass ``[..., 3]`` from :meth:`body_coms` ``[..., B, 3]``."""
        return (self.mass_fraction(body_coms.dtype)[:, None] * body_coms).sum(-2)

    def com(self, root_pos, root_quat, dof_pos) -> torch.Tensor:
        """The whole body's centre of mass ``[..., 3]`` (the MJCF's masses)."""
        pos, rot = self.bodies(root_pos, root_quat, dof_pos)
        return self.com_of(self.body_coms(pos, rot))

    def com_jacobian_parts(self, root_pos, root_quat, dof_pos):
        """:meth:`jacobian_parts` plus the bodies' centres of mass ``[..., B, 3]`` and their
        rotations ``[..., B, 3, 3]`` (last)."""
        pos, rot, axes = self.bodies(root_pos, root_quat, dof_pos, with_axes=True)
        kp, ct = self._points(pos, rot, self._consts(dof_pos.dtype))
        coms = self.body_coms(pos, rot)
        return kp, ct, rot[..., 0, :, :], axes, pos[..., self._dof_body, :], coms, rot

    def jacobian_parts(self, root_pos, root_quat, dof_pos):
        """Everything a geometric Jacobian needs, from one forward pass.

        Returns:
            ``(keypoints [..., K, 3], contacts [..., C, 3], root_rot [..., 3, 3],
            axes [..., J, 3], pivots [..., J, 3])``: world hinge axes and the body origins
            they turn about. ``d p / d q_j = axes_j x (p - pivots_j)`` for a point ``p``
            below hinge ``j`` (:attr:`site_below` / :attr:`contact_below`), else 0.
        """
        pos, rot, axes = self.bodies(root_pos, root_quat, dof_pos, with_axes=True)
        kp, ct = self._points(pos, rot, self._consts(dof_pos.dtype))
        return kp, ct, rot[..., 0, :, :], axes, pos[..., self._dof_body, :]

    def forward(self, root_pos, root_quat, dof_pos) -> tuple[torch.Tensor, torch.Tensor]:
        """Keypoints ``[..., K, 3]`` and contact-point heights above their surface ``[..., C, 3]``.

        Args:
            root_pos: ``[..., 3]``; root_quat: ``[..., 4]`` xyzw; dof_pos: ``[..., J]`` (rad).

        Returns:
            ``(keypoints [..., K, 3], contacts [..., C, 3])``; a contact point's ``z`` minus
            ``contact_radius`` is the height of the geom's surface there.
        """
        pos, rot = self.bodies(root_pos, root_quat, dof_pos)
        return self._points(pos, rot, self._consts(dof_pos.dtype))

    def _points(self, pos, rot, k) -> tuple[torch.Tensor, torch.Tensor]:
        sb, cb = self._site_body, self._contact_body
        kp = pos[..., sb, :] + (rot[..., sb, :, :] @ k["_site_off"][..., None])[..., 0]
        ct = pos[..., cb, :] + (rot[..., cb, :, :] @ k["_contact_off"][..., None])[..., 0]
        return kp, ct
