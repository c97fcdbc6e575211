"""Retarget mocap clips onto our characters and replay them kinematically in MuJoCo.

- Humans: exact. The humanoid has the mocap skeleton, so each local rotation is just
  re-parameterised (3-DoF joints: x-y-z Euler angles; elbows / knees: the hinge angle).
- Dogs: inverse kinematics. The root is initialised by a least-squares rigid fit
  (Kabsch) of the trunk keypoints, then root and joints are refined together by
  batched Levenberg-Marquardt (damped least squares) on all 17 dog17 keypoints, joint
  angles projected onto their limits after every step.

``qpos`` rows are MuJoCo ``qpos`` of the character alone: ``[root pos 3, root quat
wxyz 4, dofs J]`` (see ``scene.py`` for the scene layout).
"""

from __future__ import annotations

import numpy as np
import torch

from mimic2dm.characters.base import CharacterSpec
from mimic2dm.characters.kinematics import keypoints_from_bodies
from mimic2dm.characters.mocap import DogMocap, HumanMocap, dog_keypoints
from mimic2dm.characters.registry import load_character
from mimic2dm.geometry.rotations import (
    exp_map_to_quat,
    matrix_to_quat,
    quat_conjugate,
    quat_from_axis_angle,
    quat_mul,
    quat_rotate,
    quat_to_euler_xyz,
    quat_to_matrix,
    wxyz_to_xyzw,
    xyzw_to_wxyz,
)

DOG_TRUNK_KEYPOINTS = (
    "neck",
    "root_of_tail",
    "left_shoulder",
    "right_shoulder",
    "left_hip",
    "right_hip",
)
"""dog17 keypoints fixed to the trunk of the 12-DoF dog: used for the root's rigid fit."""

TRUNK_KEYPOINTS = {
    "dog17": DOG_TRUNK_KEYPOINTS,
    "coco17": ("left_shoulder", "right_shoulder", "left_hip", "right_hip"),
}
"""Per keypoint set, the keypoints that start the root's rigid fit (:func:`fit_keypoints`)."""


def _hinge_angle(q: torch.Tensor, axis: int) -> torch.Tensor:
    """Angle ``[...]`` in (-pi, pi] of rotations ``q [..., 4]`` about local ``axis``."""
    return 2.0 * torch.atan2(q[..., axis], q[..., 3])


def _wrap(a: torch.Tensor) -> torch.Tensor:
    return torch.remainder(a + torch.pi, 2 * torch.pi) - torch.pi


def retarget_human(clip: HumanMocap, spec: CharacterSpec | None = None) -> torch.Tensor:
    """Exact retargeting of a human clip onto the humanoid.

    Args:
        clip: loaded with :func:`mimic2dm.characters.mocap.load_cmu_clip`.
        spec: the humanoid spec (default ``load_character("humanoid")``).

    Returns:
        ``qpos [T, 7 + 28]`` in the clip's dtype (root quaternion wxyz).
    """
    spec = spec or load_character("humanoid")
    tree = spec.tree
    if tuple(clip.names) != tree.body_names:
        raise ValueError(
            f"{clip.source}: skeleton bodies {clip.names} differ from {spec.name}'s {tree.body_names}"
        )
    rot = clip.local_rotation
    counts = np.bincount(np.array(tree.dof_body), minlength=len(tree.body_names))
    euler = quat_to_euler_xyz(rot)  # [T, B, 3], used by 3-DoF bodies
    dofs = []
    for j, b in enumerate(tree.dof_body):
        axis = int(np.argmax(tree.dof_axis[j]))
        dofs.append(euler[:, b, axis] if counts[b] == 3 else _wrap(_hinge_angle(rot[:, b], axis)))
    return torch.cat(
        [clip.root_translation, xyzw_to_wxyz(rot[:, 0]), torch.stack(dofs, dim=-1)], dim=-1
    )


def joint_limit_violation(spec: CharacterSpec, qpos) -> np.ndarray:
    """Largest excursion beyond each joint's range over a motion.

    Args:
        spec: the character.
        qpos: ``[T, 7 + J]``.

    Returns:
        ``[J]`` radians (0 where the motion stays inside the range).
    """
    dof = np.asarray(qpos, dtype=np.float64)[:, 7:]
    lo, hi = spec.joint_range[:, 0], spec.joint_range[:, 1]
    return np.maximum(np.maximum(lo - dof, dof - hi), 0.0).max(axis=0)


# ----------------------------------------------------------------------------- dogs
def rigid_fit(src: torch.Tensor, dst: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Least-squares rotation and translation with ``R @ src + t ~ dst`` (Kabsch).

    Args:
        src: ``[N, 3]`` points in the body frame.
        dst: ``[T, N, 3]`` observed points.

    Returns:
        ``(R [T, 3, 3], t [T, 3])``.
    """
    cs, cd = src.mean(0), dst.mean(1)
    h = (src - cs).T @ (dst - cd[:, None])  # [T, 3, 3] = sum src dst^T
    u, _, vt = torch.linalg.svd(h)
    v = vt.transpose(-1, -2)
    d = torch.sign(torch.linalg.det(v @ u.transpose(-1, -2)))
    corr = torch.diag_embed(torch.stack([torch.ones_like(d), torch.ones_like(d), d], -1))
    r = v @ corr @ u.transpose(-1, -2)
    return r, cd - (r @ cs.unsqueeze(-1)).squeeze(-1)


def _residual(
    spec: CharacterSpec, p: torch.Tensor, q0: torch.Tensor, target: torch.Tensor
) -> torch.Tensor:
    """Keypoint residuals ``[..., 3K]`` of params ``p [..., 6 + J]`` = [pos, rotvec, dofs].

    The root rotation is ``q0 * exp(rotvec)``: a small correction of the initial fit.
    """
    quat = quat_mul(q0, exp_map_to_quat(p[..., 3:6]))
    kp = spec.tree.keypoints(spec.site_offsets, p[..., :3], quat, p[..., 6:])
    return (kp - target).flatten(-2)


def _skew(v: torch.Tensor) -> torch.Tensor:
    """``[..., 3, 3]`` cross-product matrices of ``v [..., 3]``."""
    z = torch.zeros_like(v[..., 0])
    x, y, w = v.unbind(-1)
    return torch.stack([z, -w, y, w, z, -x, -y, x, z], -1).reshape(v.shape + (3,))


def _subtree_masks(spec: CharacterSpec) -> torch.Tensor:
    """``[B, K]``: keypoint ``k`` moves with body ``b`` (its body is ``b`` or below it)."""
    tree = spec.tree
    names = list(tree.body_names)
    mask = torch.zeros(len(names), len(spec.site_offsets), dtype=torch.bool)
    for k, (body, _) in enumerate(spec.site_offsets):
        b = names.index(body)
        while b >= 0:
            mask[b, k] = True
            b = tree.parents[b]
    return mask


def _jacobian(spec, p, q0, target) -> torch.Tensor:
    """Analytic Jacobian ``[T, 3K, P]`` of :func:`_residual` (one forward kinematics).

    Columns: the root position (identity), the root rotation vector ``w`` of
    ``q0 * exp(w)`` (``-[kp - root]x R J_r(w)``, with ``J_r`` the right Jacobian of SO(3)),
    and each hinge (``axis x (kp - joint origin)`` for the keypoints below its body).
    It equals the central-difference Jacobian to ~1e-8 (tests/test_retarget.py) at a
    fraction of its cost (which was ``2 P`` forward kinematics per frame).
    """
    tree, dtype = spec.tree, p.dtype
    T, K = p.shape[0], len(spec.site_offsets)
    w = p[:, 3:6]
    quat = quat_mul(q0, exp_map_to_quat(w))
    pos, rot = tree.fk(p[:, :3], quat, p[:, 6:])
    kp = keypoints_from_bodies(spec.site_offsets, tree.body_names, pos, rot)  # [T, K, 3]
    # root rotation: R(q0 exp(w + d)) ~ R(q0 exp(w)) exp([J_r(w) d]x)
    th = w.norm(dim=-1, keepdim=True).unsqueeze(-1)  # [T, 1, 1]
    W = _skew(w)
    small = th < 1e-6
    th_s = torch.where(small, torch.ones_like(th), th)
    c1 = torch.where(small, 0.5 * torch.ones_like(th), (1 - torch.cos(th_s)) / th_s**2)
    c2 = torch.where(small, torch.ones_like(th) / 6, (th_s - torch.sin(th_s)) / th_s**3)
    jr = torch.eye(3, dtype=dtype) - c1 * W + c2 * (W @ W)
    rel = kp - p[:, None, :3]
    j_rot = -_skew(rel) @ (quat_to_matrix(quat) @ jr)[:, None]  # [T, K, 3, 3]
    j_pos = torch.eye(3, dtype=dtype).expand(T, K, 3, 3)
    # hinges: each turns its body (and what hangs below) about its world axis
    axes = torch.tensor(tree.dof_axis, dtype=dtype)
    masks = _subtree_masks(spec).to(dtype)
    frame: dict[int, torch.Tensor] = {}
    a_w = []
    for j, b in enumerate(tree.dof_body):
        base = frame.get(b, rot[:, tree.parents[b]] if b > 0 else quat)
        a_w.append(quat_rotate(base, axes[j].expand(T, 3)))
        frame[b] = quat_mul(base, quat_from_axis_angle(axes[j].expand(T, 3), p[:, 6 + j]))
    if a_w:
        dof_body = list(tree.dof_body)
        arm = kp[:, None] - pos[:, dof_body, None]  # [T, J, K, 3]
        col = torch.linalg.cross(torch.stack(a_w, 1)[:, :, None].expand_as(arm), arm)
        j_dof = (col * masks[dof_body][None, :, :, None]).permute(0, 2, 3, 1)  # [T, K, 3, J]
    else:
        j_dof = kp.new_zeros(T, K, 3, 0)
    return torch.cat([j_pos, j_rot, j_dof], -1).reshape(T, 3 * K, -1)


def solve_keypoint_ik(
    spec: CharacterSpec,
    target: torch.Tensor,
    init_pos: torch.Tensor,
    init_quat: torch.Tensor,
    init_dof: torch.Tensor,
    iters: int = 60,
    tol: float = 0.0,
) -> torch.Tensor:
    """Batched Levenberg-Marquardt fit of a pose to keypoints, one problem per frame.

    Args:
        spec: the character (its ``tree`` and ``site_offsets``).
        target: ``[T, K, 3]`` keypoints, ``spec.keypoint_names`` order (float64).
        init_pos: ``[T, 3]``, init_quat: ``[T, 4]`` xyzw, init_dof: ``[T, J]``.
        iters: LM iterations (each: one Jacobian, one trial step per frame).
        tol: stop early once every frame's RMS keypoint error (m) is below ``tol`` or
            stopped improving (0: always run ``iters``).

    Returns:
        ``qpos [T, 7 + J]`` (root quaternion wxyz); joints within ``spec.joint_range``.
    """
    dtype = target.dtype
    lo = torch.as_tensor(spec.joint_range[:, 0].copy(), dtype=dtype)
    hi = torch.as_tensor(spec.joint_range[:, 1].copy(), dtype=dtype)
    p = torch.cat([init_pos, torch.zeros_like(init_pos), init_dof.clamp(lo, hi)], dim=-1)
    lam = torch.full(p.shape[:1], 1e-3, dtype=dtype)
    r = _residual(spec, p, init_quat, target)
    cost = (r * r).sum(-1)
    for _ in range(iters):
        jac = _jacobian(spec, p, init_quat, target)  # [T, 3K, P]
        jtj = jac.transpose(1, 2) @ jac
        g = (jac.transpose(1, 2) @ r.unsqueeze(-1)).squeeze(-1)
        damp = torch.diag_embed(torch.diagonal(jtj, dim1=1, dim2=2).clamp_min(1e-6))
        step = torch.linalg.solve(jtj + lam[:, None, None] * damp, -g.unsqueeze(-1)).squeeze(-1)
        cand = p + step
        cand = torch.cat([cand[:, :6], cand[:, 6:].clamp(lo, hi)], dim=-1)
        r_new = _residual(spec, cand, init_quat, target)
        cost_new = (r_new * r_new).sum(-1)
        better = cost_new < cost
        p = torch.where(better[:, None], cand, p)
        r = torch.where(better[:, None], r_new, r)
        cost = torch.where(better, cost_new, cost)
        lam = torch.where(better, lam * 0.3, lam * 10.0).clamp(1e-9, 1e9)
        if tol > 0 and bool(((cost / target[0].numel() < tol * tol) | (lam >= 1e9)).all()):
            break
    quat = quat_mul(init_quat, exp_map_to_quat(p[:, 3:6]))
    return torch.cat([p[:, :3], xyzw_to_wxyz(quat), p[:, 6:]], dim=-1)


def retarget_dog(
    clip: DogMocap, spec: CharacterSpec | str = "dog", iters: int = 60
) -> torch.Tensor:
    """Inverse-kinematics retargeting of a dog clip onto the robot dog.

    Args:
        clip: loaded with :func:`mimic2dm.characters.mocap.load_dog_clip`.
        spec: ``"dog"`` (12 DoF), ``"dog_spine"`` (16 DoF) or a spec.
        iters: Levenberg-Marquardt iterations.

    Returns:
        ``qpos [T, 7 + J]`` float64 (root quaternion wxyz).
    """
    spec = load_character(spec) if isinstance(spec, str) else spec
    return fit_keypoints(spec, dog_keypoints(clip), iters)


def fit_keypoints(
    spec: CharacterSpec,
    target: torch.Tensor,
    iters: int = 60,
    tol: float = 0.0,
    init: torch.Tensor | None = None,
) -> torch.Tensor:
    """Inverse kinematics of any character onto 3D keypoints in its own keypoint set.

    The root starts from a rigid fit of the default pose's trunk keypoints
    (:data:`TRUNK_KEYPOINTS`), the joints from the default pose; then
    :func:`solve_keypoint_ik` refines both, one problem per frame.

    Args:
        spec: the character.
        target: ``[T, K, 3]`` keypoints (``spec.keypoint_names`` order, metres).
        iters: Levenberg-Marquardt iterations; tol: early stop (:func:`solve_keypoint_ik`).
        init: optional ``qpos [T, 7 + J]`` (wxyz) to start from instead (e.g. a
            neighbouring frame's solution).

    Returns:
        ``qpos [T, 7 + J]`` float64 (root quaternion wxyz), joints within their limits.
    """
    if spec.keypoint_set not in TRUNK_KEYPOINTS:
        raise ValueError(f"fit_keypoints: no trunk keypoints known for {spec.keypoint_set!r} "
                         f"(known: {sorted(TRUNK_KEYPOINTS)})")  # fmt: skip
    target = torch.as_tensor(target).to(torch.float64)
    if target.dim() != 3 or target.shape[1:] != (spec.num_keypoints, 3):
        raise ValueError(f"fit_keypoints: target must be [T, {spec.num_keypoints}, 3] keypoints of "
                         f"{spec.name}, got {list(target.shape)}")  # fmt: skip
    t = target.shape[0]
    if init is not None:
        init = torch.as_tensor(init, dtype=torch.float64)
        quat = wxyz_to_xyzw(init[:, 3:7])
        return solve_keypoint_ik(spec, target, init[:, :3], quat, init[:, 7:], iters, tol)
    # trunk keypoints of the default pose, in the root frame (do not depend on the limbs)
    dof0 = torch.tensor(spec.default_pose.dof_pos, dtype=torch.float64)
    ident = torch.tensor([0.0, 0.0, 0.0, 1.0], dtype=torch.float64)
    body_kp = spec.tree.keypoints(
        spec.site_offsets, torch.zeros(3, dtype=torch.float64), ident, dof0
    )
    idx = [spec.keypoint_names.index(n) for n in TRUNK_KEYPOINTS[spec.keypoint_set]]
    rot, trans = rigid_fit(body_kp[idx], target[:, idx])
    init_quat = matrix_to_quat(rot)
    return solve_keypoint_ik(spec, target, trans, init_quat, dof0.expand(t, -1), iters, tol)


def levelable_feet(spec: CharacterSpec) -> list[str]:
    """Contact bodies whose orientation no keypoint sees, so that IK leaves it free.

    A body qualifies when it carries three hinges about its local x, y, z (in that
    order), has no child body and every keypoint on it sits at its origin: the humanoid's
    feet (COCO-17 has an ankle but no toe). The dog's paws carry no joint: none.
    """
    tree = spec.tree
    out = []
    for name in spec.contact_bodies:
        b = tree.body_names.index(name)
        dofs = [j for j, jb in enumerate(tree.dof_body) if jb == b]
        axes = [tuple(np.round(tree.dof_axis[j], 6)) for j in dofs]
        if axes != [(1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0)] or b in tree.parents:
            continue
        if any(body == name and any(abs(v) > 1e-9 for v in off) for body, off in spec.site_offsets):
            continue
        out.append(name)
    return out


def level_feet(spec: CharacterSpec, qpos: torch.Tensor) -> torch.Tensor:
    """Poses with every :func:`levelable_feet` body turned flat: its local z axis up, its
    x axis along the horizontal forward direction of its parent (the shin), the three
    ankle angles clamped to their limits (a shin tilted past them leaves the foot tilted
    by the rest). Keypoints do not move.

    Why: fitted to COCO-17 keypoints, a foot keeps the angles it started from, so it
    follows its shin's tilt; a box foot under a tilted shin starts with its toe or heel
    in the ground (docs/tracker.md "Initial states").

    Args:
        spec: the character.
        qpos: ``[T, 7 + J]`` (root quaternion wxyz), e.g. from :func:`fit_keypoints`.

    Returns:
        ``qpos`` with the feet's dofs replaced (same dtype).
    """
    qpos = torch.as_tensor(qpos)
    feet = levelable_feet(spec)
    if not feet:
        return qpos.clone()
    tree = spec.tree
    _, rot = tree.fk(qpos[:, :3], wxyz_to_xyzw(qpos[:, 3:7]), qpos[:, 7:])
    out = qpos.clone()
    lo = torch.as_tensor(spec.joint_range[:, 0].copy(), dtype=qpos.dtype)
    hi = torch.as_tensor(spec.joint_range[:, 1].copy(), dtype=qpos.dtype)
    z = torch.tensor([0.0, 0.0, 1.0], dtype=qpos.dtype).expand(qpos.shape[0], 3)
    x = torch.tensor([1.0, 0.0, 0.0], dtype=qpos.dtype).expand(qpos.shape[0], 3)
    for name in feet:
        b = tree.body_names.index(name)
        parent = rot[:, tree.parents[b]]
        fwd = quat_rotate(parent, x)
        yaw = torch.atan2(fwd[:, 1], fwd[:, 0])
        want = quat_from_axis_angle(z, yaw)  # level, facing the shin's way
        local = quat_mul(quat_conjugate(parent), want)
        dofs = [j for j, jb in enumerate(tree.dof_body) if jb == b]
        angles = quat_to_euler_xyz(local)
        out[:, [7 + j for j in dofs]] = angles.clamp(lo[dofs], hi[dofs])
    return out


# ----------------------------------------------------------------------------- replay
def kinematic_replay(spec: CharacterSpec | str, qpos) -> np.ndarray:
    """Keypoints of a motion computed by MuJoCo (``mj_kinematics``, no dynamics).

    Args:
        spec: the character (name or spec).
        qpos: ``[T, 7 + J]`` MuJoCo qpos of the character (root quaternion wxyz).

    Returns:
        ``[T, K, 3]`` world positions of the keypoint sites, keypoint order.
    """
    import mujoco

    from mimic2dm.characters.scene import build_model

    spec = load_character(spec) if isinstance(spec, str) else spec
    qpos = np.asarray(
        qpos.detach().cpu() if isinstance(qpos, torch.Tensor) else qpos, dtype=np.float64
    )
    model = build_model(spec, with_sensors=False)
    if qpos.ndim != 2 or qpos.shape[1] != model.nq:
        raise ValueError(f"qpos must be [T, {model.nq}] for {spec.name}, got {list(qpos.shape)}")
    data = mujoco.MjData(model)
    site_ids = [model.site(s).id for s in spec.keypoint_sites]
    out = np.empty((qpos.shape[0], len(site_ids), 3))
    for t, q in enumerate(qpos):
        data.qpos[:] = q
        mujoco.mj_kinematics(model, data)
        out[t] = data.site_xpos[site_ids]
    return out


def lowest_points(spec: CharacterSpec | str, root_pos, root_quat, dof_pos) -> np.ndarray:
    """Height ``[T]`` of the lowest point of the character's collision geometry per pose
    (``mj_kinematics``; boxes by their corners, spheres, capsules and cylinders exactly).

    Args:
        spec: the character (name or spec).
        root_pos: ``[T, 3]``; root_quat: ``[T, 4]`` xyzw; dof_pos: ``[T, J]`` (the
            character's joint order).

    Returns:
        metres above the ground plane ``z = 0`` (negative: the pose is in the ground).
    """
    import mujoco

    from mimic2dm.characters.scene import build_model

    spec = load_character(spec) if isinstance(spec, str) else spec
    arr = lambda x: np.asarray(x.detach().cpu() if isinstance(x, torch.Tensor) else x, np.float64)  # noqa: E731
    pos, quat, dof = arr(root_pos), arr(root_quat), arr(dof_pos)
    qpos = np.concatenate([pos, quat[:, 3:4], quat[:, :3], dof], axis=1)  # MuJoCo: wxyz
    model = build_model(spec, with_sensors=False)
    if qpos.shape[1] != model.nq:
        raise ValueError(
            f"poses must have {model.nq - 7} joints for {spec.name}, got {dof.shape[1]}"
        )
    geoms = [g for g in range(model.ngeom) if model.geom_bodyid[g] != 0]  # not the floor
    G = mujoco.mjtGeom
    data = mujoco.MjData(model)
    out = np.empty(qpos.shape[0])
    for t, q in enumerate(qpos):
        data.qpos[:] = q
        mujoco.mj_kinematics(model, data)
        low = np.inf
        for g in geoms:
            kind, size, z = model.geom_type[g], model.geom_size[g], data.geom_xpos[g, 2]
            up = data.geom_xmat[g].reshape(3, 3)[2]  # the world z row: each local axis's z
            if kind == G.mjGEOM_SPHERE:
                z = z - size[0]
            elif kind == G.mjGEOM_CAPSULE:
                z = z - abs(up[2]) * size[1] - size[0]
            elif kind == G.mjGEOM_CYLINDER:
                z = z - abs(up[2]) * size[1] - size[0] * np.sqrt(max(0.0, 1.0 - up[2] ** 2))
            elif kind == G.mjGEOM_BOX:
                z = z - np.abs(up) @ size[:3]
            else:  # meshes, ellipsoids: their bounding sphere
                z = z - model.geom_rbound[g]
            low = min(low, z)
        out[t] = low
    return out
