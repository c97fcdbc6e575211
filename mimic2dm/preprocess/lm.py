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
from mimic2dm.preprocess import losses
from mimic2dm.preprocess.kinematics import CharacterModel

BALANCE_MARGIN = 0.1
"""Metres the centre of mass may be from the standing feet for free (:func:`losses.balance`;
the weights' ``balance_margin`` overrides it)."""
BALANCE_SCALE = 0.1
"""Metres past the margin that cost as much as one ``sigma`` of reprojection."""
FLAT_SCALE = 0.2
"""Sine of a standing foot's tilt that costs as much as one ``sigma`` of reprojection."""
STANCE_SCALE = 0.02
"""Metres between a standing foot and the ground that cost as much as one ``sigma``."""


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


def _residual(model, p, q0, obs, sw, R, t, k, sigma, w, nb, jacobian: bool = False, stance=None):
    """Residuals ``[N, M]`` of params ``p [N, 6 + J]`` (and their Jacobian ``[N, M, 6 + J]``);
    ``nb [N, J]``: the mean joint angles of the neighbouring frames; ``stance [N, G]``: which
    feet stand (the balance, flat-foot and stance-contact residuals; None: none of them)."""
    quat = rot.quat_mul(q0, rot.exp_map_to_quat(p[..., 3:6]))
    dof = p[..., 6:]
    J = dof.shape[-1]
    on = stance is not None
    w_bal = w.get("balance", 0.0) if on else 0.0
    w_flat = w.get("flat", 0.0) if on and len(model.flat_feet) else 0.0
    w_st = w.get("stance", 0.0) if on else 0.0
    if w_flat or (jacobian and (w_bal or w_st)):
        kp, contact, root_rot, axes, pivots, coms, body_rot = model.com_jacobian_parts(
            p[..., :3], quat, dof
        )
    elif jacobian:  # the default fit: no centres of mass needed
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
    parts = [
        r_uv,
        c_up * up[..., :2],
        c_prior * dof,
        c_ground * torch.relu(-cz),
        c_time * (dof - nb),
    ]
    if w_bal:
        com = model.com_of(coms) if jacobian else model.com(p[..., :3], quat, dof)
        d, standing, support, chosen = losses.support_offset(
            com[..., :2], contact, cz, model.contact_group, stance=stance
        )
        c_bal = (w_bal * standing).sqrt() / BALANCE_SCALE
        margin = w.get("balance_margin", BALANCE_MARGIN)
        parts.append((c_bal * torch.relu(d - margin))[..., None])
    if w_flat:
        stand = stance[..., model.flat_group]  # [N, F]
        feet_up = body_rot[:, model.flat_feet, :, 2]  # [N, F, 3]
        c_flat = (w_flat * stand).sqrt()[..., None] / FLAT_SCALE
        parts.append((c_flat * feet_up[..., :2]).flatten(1))
    if w_st:
        one_hot = torch.nn.functional.one_hot(model.contact_group, stance.shape[-1]).bool()
        masked = torch.where(one_hot.T, cz[:, None, :], torch.full_like(cz[:, None, :], 1e3))
        lowest = masked.argmin(-1)  # [N, G] the contact point each body stands on
        c_st = (w_st * stance).sqrt() / STANCE_SCALE
        parts.append(c_st * torch.gather(cz, 1, lowest))
    r = torch.cat(parts, -1)
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
    jacs = [J_uv, J_up, J_prior, J_ground, J_time]
    if w_bal:
        jacs.append(_balance_jacobian(model, p, root_rot, axes, pivots, coms, contact, com,
                                      support, chosen, d > margin, c_bal))  # fmt: skip
    if w_flat:
        # a direction turns with every hinge above its body and with the root, never moves
        F = feet_up.shape[1]
        below = model.body_below[:, model.flat_feet]
        zero = torch.zeros_like(p[:, :3])
        Gu = point_jacobian(feet_up, zero, root_rot, axes, torch.zeros_like(pivots), below)
        Gu[..., :3] = 0.0
        jacs.append((c_flat[..., None] * Gu[:, :, :2]).reshape(N, F * 2, P))
    if w_st:
        Gz = point_jacobian(contact, p[:, :3], root_rot, axes, pivots, model.contact_below)[:, :, 2]
        jacs.append(c_st[..., None] * torch.gather(Gz, 1, lowest[..., None].expand(-1, -1, P)))
    return r, torch.cat(jacs, dim=1)


def _balance_jacobian(
    model, p, root_rot, axes, pivots, coms, contact, com, support, chosen, past, c
):
    """``[N, 1, P]``: the balance residual's Jacobian: the centre of mass moving away from
    the support point, minus the chosen feet moving with it (the feet's standing weights
    and the choice of support held fixed)."""
    frac = model.mass_fraction(p.dtype)
    G_com = (
        frac[None, :, None, None]
        * point_jacobian(coms, p[:, :3], root_rot, axes, pivots, model.body_below)
    ).sum(1)[:, :2]  # [N, 2, P]
    Gc = point_jacobian(contact, p[:, :3], root_rot, axes, pivots, model.contact_below)[:, :, :2]
    G = int(model.contact_group.max()) + 1
    one_hot = torch.nn.functional.one_hot(model.contact_group, G).to(p.dtype)  # [C, G]
    G_feet = torch.einsum("cg,ncip->ngip", one_hot / one_hot.sum(0), Gc)  # [N, G, 2, P]
    i, j, t = chosen[:, 0].long(), chosen[:, 1].long(), chosen[:, 2]
    ar = torch.arange(p.shape[0])
    G_sup = (1 - t)[:, None, None] * G_feet[ar, i] + t[:, None, None] * G_feet[ar, j]
    rel = com[:, :2] - support
    u = rel / rel.norm(dim=-1, keepdim=True).clamp_min(1e-9)
    active = past.to(p.dtype) * c
    return active[:, None, None] * (u[:, :, None] * (G_com - G_sup)).sum(1, keepdim=True)


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
    stance: torch.Tensor | None = None,
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
        stance: ``[N, G]`` how much each contact body stands (fixed): turns on the
            ``balance``, ``flat`` and ``stance`` weights' residuals.

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
    st = None if stance is None else stance.to(dt)

    def neighbours(dof):
        if frames is None or frames[1] < 3:
            return dof
        d = dof.reshape(*frames, -1)
        mid = torch.cat([d[:, 1:2], 0.5 * (d[:, :-2] + d[:, 2:]), d[:, -2:-1]], dim=1)
        return mid.reshape(dof.shape)

    nb = neighbours(p[:, 6:])

    def residual(pp, q, sw, jacobian=False):
        return _residual(model, pp, q, obs, sw, R, t, k, sigma, weights, nb, jacobian, st)

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
