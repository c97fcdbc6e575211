"""Per-frame pose fitting by Levenberg-Marquardt with the camera held fixed.

Each frame (and hypothesis) is one small least-squares problem in ``6 + J`` unknowns
(root position, a rotation-vector update of the root orientation, joint angles):
reprojection residuals (confidence-weighted, iteratively reweighted with the same
pseudo-Huber as the loss), the weak pose prior, the upright prior and the ground
penetration. Jacobians are geometric (hinge axis x lever arm, from one forward pass
with :meth:`~mimic2dm.preprocess.kinematics.CharacterModel.jacobian_parts`); joint angles
are projected onto their limits after every step.
Adam then polishes every frame jointly with the temporal terms and the camera
(:mod:`mimic2dm.preprocess.optimize`); Gauss-Newton steps converge in ~10 iterations
where first-order ones needed hundreds.
"""

from __future__ import annotations

import torch

from mimic2dm.geometry import rotations as rot
from mimic2dm.preprocess.kinematics import CharacterModel


def point_jacobian(points, pos, root_rot, axes, pivots, below) -> torch.Tensor:
    """``[N, Q, 3, P]``: derivatives of world points ``[N, Q, 3]`` w.r.t. ``[pos 3, rotvec 3, dofs J]``
    (the rotation vector turns the root in its own frame)."""
    N, Q, _ = points.shape
    eye = torch.eye(3, dtype=points.dtype).expand(N, Q, 3, 3)
    rel = points - pos[:, None]
    d_rot = torch.cross(
        root_rot.transpose(1, 2)[:, None], rel[:, :, None].expand(N, Q, 3, 3), dim=-1
    )  # [N, Q, i, 3]
    d_dof = torch.cross(axes[:, None], points[:, :, None] - pivots[:, None], dim=-1)  # [N, Q, J, 3]
    d_dof = d_dof * below.T[None, :, :, None].to(points.dtype)
    return torch.cat([eye, d_rot.transpose(2, 3), d_dof.transpose(2, 3)], dim=-1)


def _per_point(R, t, k, kp):
    """Cameras per projected point: ``R [N, V * K, 3, 3]``, ``t [N, V * K, 3]``, ``k [N, V * K, 4]``
    and the points ``[N, V * K, 3]`` (view-major) from one camera per row (``R [N, 3, 3]``)
    or ``V`` (``R [N, V, 3, 3]``)."""
    N, K = kp.shape[:2]
    if R.dim() == 3:
        R, t, k = R[:, None], t[:, None], k[:, None]
    V = R.shape[1]
    rep = lambda x: x.repeat_interleave(K, dim=1)  # noqa: E731
    return rep(R), rep(t), rep(k), kp.repeat(1, V, 1)


def _residual(model, p, q0, obs, sw, R, t, k, sigma, w, nb, jacobian: bool = False):
    """Residuals ``[N, M]`` of params ``p [N, 6 + J]`` (and their Jacobian ``[N, M, 6 + J]``);
    ``nb [N, J]``: the mean joint angles of the neighbouring frames."""
    quat = rot.quat_mul(q0, rot.exp_map_to_quat(p[..., 3:6]))
    dof = p[..., 6:]
    J = dof.shape[-1]
    if jacobian:
        kp, contact, root_rot, axes, pivots = model.jacobian_parts(p[..., :3], quat, dof)
    else:
        kp, contact = model.forward(p[..., :3], quat, dof)
    R, t, k, kp_v = _per_point(R, t, k, kp)
    X = torch.einsum("nkij,nkj->nki", R, kp_v) + t
    z = X[..., 2:3].clamp_min(1e-3)
    uv = X[..., :2] / z * k[..., :2] + k[..., 2:]
    scale = (sw / sigma)[..., None]
    r_uv = ((uv - obs) * scale).flatten(-2)
    up = rot.quat_rotate(
        quat, torch.tensor([0.0, 0.0, 1.0], dtype=p.dtype).expand(quat.shape[:-1] + (3,))
    )
    c_up, c_prior = (w["upright"] / 2) ** 0.5, (w["prior"] / J) ** 0.5
    c_ground, c_time = (
        (w["ground"] / contact.shape[-2]) ** 0.5 / 0.01,
        (w["temporal"] / J) ** 0.5 / 0.1,
    )
    cz = contact[..., 2] - model.contact_radius.to(p.dtype)
    r = torch.cat(
        [r_uv, c_up * up[..., :2], c_prior * dof, c_ground * torch.relu(-cz), c_time * (dof - nb)],
        -1,
    )
    if not jacobian:
        return r
    N, P = p.shape
    G = point_jacobian(kp, p[:, :3], root_rot, axes, pivots, model.site_below)  # [N, K, 3, P]
    G = G.repeat(1, kp_v.shape[1] // kp.shape[1], 1, 1)  # the same points seen by each view
    f = k[..., :2, None] / z[..., None]  # [N, VK, 2, 1] -> per row of D
    D = f * (R[..., :2, :] - (X[..., :2] / z)[..., None] * R[..., 2:3, :])  # [N, VK, 2, 3]
    J_uv = (scale[..., None] * (D @ G)).flatten(1, 2)
    J_up = torch.zeros(N, 2, P, dtype=p.dtype)
    J_up[:, :, 3:6] = (
        c_up
        * torch.cross(root_rot.transpose(1, 2), up[:, None].expand(N, 3, 3), dim=-1).transpose(
            1, 2
        )[:, :2]
    )
    eyeJ = torch.eye(J, dtype=p.dtype).expand(N, J, J)
    J_prior = torch.cat([torch.zeros(N, J, 6, dtype=p.dtype), c_prior * eyeJ], -1)
    Gc = point_jacobian(contact, p[:, :3], root_rot, axes, pivots, model.contact_below)[
        :, :, 2
    ]  # [N, C, P]
    J_ground = -c_ground * (cz < 0).to(p.dtype)[..., None] * Gc
    J_time = torch.cat([torch.zeros(N, J, 6, dtype=p.dtype), c_time * eyeJ], -1)
    return r, torch.cat([J_uv, J_up, J_prior, J_ground, J_time], dim=1)


def fit_poses(
    model: CharacterModel,
    obs: torch.Tensor,
    weight: torch.Tensor,
    cams: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    root_pos: torch.Tensor,
    root_quat: torch.Tensor,
    dof_pos: torch.Tensor,
    sigma: float,
    weights: dict[str, float],
    frames: tuple[int, int] | None = None,
    iters: int = 10,
    delta: float = 2.0,
    progress=None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fit ``N`` poses to 2D keypoints through fixed cameras.

    Args:
        obs: ``[N, K, 2]`` pixels; weight: ``[N, K]`` confidences (0 = masked).
        cams: ``(R [N, 3, 3], t [N, 3], intrinsics [N, 4])``; or ``V`` views per row:
            ``(R [N, V, 3, 3], t [N, V, 3], intrinsics [N, V, 4])`` with ``obs [N, V * K, 2]``
            and ``weight [N, V * K]`` (view-major).
        root_pos ``[N, 3]``, root_quat ``[N, 4]`` xyzw, dof_pos ``[N, J]``: initial poses.
        sigma: pixel error that counts as 1; weights: ``upright``, ``prior``, ``ground``,
            ``temporal`` (joint angles towards their neighbours' mean, per 0.1 rad).
        frames: ``(H, T)`` when the ``N`` rows are ``H`` sequences of ``T`` frames: the
            temporal residual then pulls each frame's joint angles towards the previous
            iterate's neighbours (Jacobi style), so that frames agree on ambiguous limbs.
        iters: LM iterations; delta: pseudo-Huber knee (units of sigma).
        progress: called once per iteration.

    Returns:
        ``(root_pos, root_quat, dof_pos)`` float32, joints within their limits.
    """
    dt = torch.float64
    obs, weight = obs.to(dt), weight.to(dt)
    R, t, k = (c.to(dt) for c in cams)
    lo, hi = model.lower.to(dt), model.upper.to(dt)
    q0 = rot.quat_normalize(root_quat.to(dt))
    p = torch.cat(
        [root_pos.to(dt), torch.zeros_like(root_pos, dtype=dt), dof_pos.to(dt).clamp(lo, hi)], -1
    )
    N, P = p.shape
    lam = torch.full((N,), 1e-2, dtype=dt)

    def neighbours(dof):
        if frames is None or frames[1] < 3:
            return dof
        d = dof.reshape(*frames, -1)
        mid = torch.cat([d[:, 1:2], 0.5 * (d[:, :-2] + d[:, 2:]), d[:, -2:-1]], dim=1)
        return mid.reshape(dof.shape)

    nb = neighbours(p[:, 6:])

    def residual(pp, q, sw, jacobian=False):
        return _residual(model, pp, q, obs, sw, R, t, k, sigma, weights, nb, jacobian)

    def robust_w(r_uv2):
        return weight * (1.0 + r_uv2 / delta**2).rsqrt()

    Kx2 = obs.shape[1] * 2
    for _ in range(iters):
        r = residual(p, q0, torch.ones_like(weight))
        sw = robust_w(r[:, :Kx2].reshape(N, -1, 2).square().sum(-1)).sqrt()
        r, jac = residual(p, q0, sw, jacobian=True)  # [N, M], [N, M, P]
        cost = r.square().sum(-1)
        jtj = jac.transpose(1, 2) @ jac
        g = (jac.transpose(1, 2) @ r[..., None])[..., 0]
        damp = torch.diag_embed(torch.diagonal(jtj, dim1=1, dim2=2).clamp_min(1e-6))
        step = torch.linalg.solve(jtj + lam[:, None, None] * damp, -g[..., None])[..., 0]
        cand = p + step
        cand = torch.cat([cand[:, :6], cand[:, 6:].clamp(lo, hi)], -1)
        r_new = residual(cand, q0, sw)
        better = r_new.square().sum(-1) < cost
        p = torch.where(better[:, None], cand, p)
        r = torch.where(better[:, None], r_new, r)
        lam = torch.where(better, lam * 0.3, lam * 10.0).clamp(1e-7, 1e7)
        # re-base the orientation so that the rotation vector stays small
        q0 = rot.quat_normalize(rot.quat_mul(q0, rot.exp_map_to_quat(p[:, 3:6])))
        p = torch.cat([p[:, :3], torch.zeros_like(p[:, 3:6]), p[:, 6:]], -1)
        nb = neighbours(p[:, 6:])
        if progress is not None:
            progress()
    f = torch.float32
    return p[:, :3].to(f), q0.to(f), p[:, 6:].to(f)
