"""Per-frame pose fitting by Levenberg-Marquardt with the camera held fixed.

Each frame (and hypothesis) is one small least-squares problem in ``6 + J`` unknowns
(root position, a rotation-vector update of the root orientation, joint angles):
reprojection residuals (confidence-weighted, iteratively reweighted with the same
pseudo-Huber as the loss), the weak pose prior, the upright prior and the ground
penetration. Jacobians are forward differences of one batched forward kinematics of
``(7 + J) N`` poses; joint angles are projected onto their limits after every step.
Adam then polishes every frame jointly with the temporal terms and the camera
(:mod:`mimic2dm.preprocess.optimize`); Gauss-Newton steps converge in ~10 iterations
where first-order ones needed hundreds.
"""

from __future__ import annotations

import torch

from mimic2dm.geometry import rotations as rot
from mimic2dm.geometry.camera import project_points
from mimic2dm.preprocess.kinematics import CharacterModel


def _residual(model, p, q0, obs, sw, R, t, k, sigma, w):
    """Residuals ``[..., M]`` of params ``p [..., 6 + J]`` (other inputs broadcast)."""
    quat = rot.quat_mul(q0, rot.exp_map_to_quat(p[..., 3:6]))
    dof = p[..., 6:]
    kp, contact = model.forward(p[..., :3], quat, dof)
    uv, _ = project_points(R, t, k, kp)
    r_uv = ((uv - obs) / sigma * sw[..., None]).flatten(-2)
    up = rot.quat_rotate(quat, torch.tensor([0.0, 0.0, 1.0], dtype=p.dtype).expand(quat.shape[:-1] + (3,)))
    r_up = (w["upright"] / 2) ** 0.5 * up[..., :2]
    r_prior = (w["prior"] / dof.shape[-1]) ** 0.5 * dof
    cz = contact[..., 2] - model.contact_radius.to(p.dtype)
    r_ground = (w["ground"] / cz.shape[-1]) ** 0.5 * torch.relu(-cz) / 0.01
    return torch.cat([r_uv, r_up, r_prior, r_ground], dim=-1)


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
    iters: int = 10,
    delta: float = 2.0,
    eps: float = 1e-4,
    progress=None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Fit ``N`` poses to 2D keypoints through fixed cameras.

    Args:
        obs: ``[N, K, 2]`` pixels; weight: ``[N, K]`` confidences (0 = masked).
        cams: ``(R [N, 3, 3], t [N, 3], intrinsics [N, 4])``.
        root_pos ``[N, 3]``, root_quat ``[N, 4]`` xyzw, dof_pos ``[N, J]``: initial poses.
        sigma: pixel error that counts as 1; weights: ``upright``, ``prior``, ``ground``.
        iters: LM iterations; delta: pseudo-Huber knee (units of sigma); eps: difference step.
        progress: called once per iteration.

    Returns:
        ``(root_pos, root_quat, dof_pos)`` float32, joints within their limits.
    """
    dt = torch.float64
    obs, weight = obs.to(dt), weight.to(dt)
    R, t, k = (c.to(dt) for c in cams)
    lo, hi = model.lower.to(dt), model.upper.to(dt)
    q0 = rot.quat_normalize(root_quat.to(dt))
    p = torch.cat([root_pos.to(dt), torch.zeros_like(root_pos, dtype=dt), dof_pos.to(dt).clamp(lo, hi)], -1)
    N, P = p.shape
    lam = torch.full((N,), 1e-2, dtype=dt)
    delta_eye = eps * torch.eye(P, dtype=dt)

    def residual(pp, q, sw, batch=False):
        ex = (lambda x: x[:, None]) if batch else (lambda x: x)
        return _residual(model, pp, ex(q), ex(obs), ex(sw), ex(R), ex(t), ex(k), sigma, weights)

    def robust_w(r_uv2):
        return weight * (1.0 + r_uv2 / delta**2).rsqrt()

    Kx2 = obs.shape[1] * 2
    for _ in range(iters):
        r = residual(p, q0, torch.ones_like(weight))
        sw = robust_w(r[:, :Kx2].reshape(N, -1, 2).square().sum(-1)).sqrt()
        r = residual(p, q0, sw)
        cost = r.square().sum(-1)
        rp = residual(p[:, None] + delta_eye, q0, sw, batch=True)  # [N, P, M]
        jac = ((rp - r[:, None]) / eps).transpose(1, 2)  # [N, M, P]
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
        if progress is not None:
            progress()
    f = torch.float32
    return p[:, :3].to(f), q0.to(f), p[:, 6:].to(f)
