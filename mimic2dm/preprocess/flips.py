"""Per-limb depth-flip hypotheses: the classic monocular ambiguity of limbs (B.1).

A keypoint seen in one view lies on its camera ray; given the bone length from its
parent keypoint it has two possible depths (in front of or behind the parent). Local
optimisers keep whichever side they started on, so an arm swinging forwards is often
fitted swinging backwards. For every limb (a chain of bodies hanging off the trunk,
:func:`limb_chains`) and every frame this module builds the ``2^n`` depth patterns of its
``n`` chain keypoints (:func:`flip_targets`), fits the limb's joint angles to each by
inverse kinematics (:func:`limb_ik`), scores them with the fitting loss's per-frame terms
(reprojection: unreachable patterns reproject badly; ground; lowest contact; pose prior)
plus, between frames, the limb points' speeds about its pivot above twice the current
fit's median (a jump) and its contacts' skating, and keeps the cheapest sequence of
patterns by dynamic programming (:func:`viterbi`). A flipped pattern pays a margin per
frame, so near-ties (the true ambiguity) keep the current fit's solution.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from mimic2dm.preprocess import losses
from mimic2dm.preprocess.kinematics import CharacterModel
from mimic2dm.preprocess.lm import point_jacobian


@dataclass(frozen=True)
class Limb:
    """One limb of a character's kinematic tree.

    Attributes:
        body: index of its first body (hangs off the trunk; its origin is the pivot).
        dofs: ``[D]`` indices of the joint angles of its bodies.
        sites: ``[n]`` keypoint indices on its other bodies, parent to tip.
        contacts: ``[C_l]`` indices of the contact points on its bodies (may be empty).
    """

    body: int
    dofs: torch.Tensor
    sites: torch.Tensor
    contacts: torch.Tensor


def limb_chains(model: CharacterModel) -> list[Limb]:
    """The limbs of ``model``: maximal chains of bodies (one child each) with a hinge and
    keypoints on the bodies after the first (arms and legs; a head is skipped)."""
    tree = model.spec.tree
    parents = list(tree.parents)
    B = len(parents)
    children = [[c for c in range(B) if parents[c] == b] for b in range(B)]

    def chain(b):  # the bodies of b's subtree if it is a chain, else None
        out = [b]
        while len(children[out[-1]]) == 1:
            out.append(children[out[-1]][0])
        return out if not children[out[-1]] else None

    site_body = model._site_body.tolist()
    offsets = model._site_off.norm(dim=-1).tolist()
    depth = [0] * B
    for b in range(1, B):
        depth[b] = depth[parents[b]] + 1
    limbs = []
    for b in range(1, B):
        bodies = chain(b)
        if bodies is None or chain(parents[b]) is not None:
            continue
        sites = [k for k in range(len(site_body)) if site_body[k] in bodies[1:]]
        sites.sort(key=lambda k: (depth[site_body[k]], offsets[k]))
        dofs = [j for j, db in enumerate(tree.dof_body) if db in bodies]
        contacts = [i for i, cb in enumerate(model._contact_body.tolist()) if cb in bodies]
        if sites and dofs:
            limbs.append(
                Limb(b, *(torch.as_tensor(x, dtype=torch.long) for x in (dofs, sites, contacts)))
            )
    return limbs


def flip_targets(pivot: torch.Tensor, points: torch.Tensor) -> torch.Tensor:
    """Every depth pattern of a chain seen from a camera at the origin.

    Args:
        pivot: ``[..., 3]`` the limb's fixed root, camera frame.
        points: ``[..., n, 3]`` its chain points, parent to tip, camera frame.

    Returns:
        ``[2^n, ..., n, 3]``: point ``i`` moved along its camera ray to the depth at its
        current distance from point ``i - 1`` (as moved), on the same side as now (bit 0)
        or the other (bit 1); pattern 0 is the input. Where the ray misses that
        sphere the closest point on the ray is used.
    """
    n = points.shape[-2]
    prev = torch.cat([pivot[..., None, :], points[..., :-1, :]], -2)
    length = (points - prev).norm(dim=-1)  # [..., n]
    d = points / points.norm(dim=-1, keepdim=True).clamp_min(1e-9)  # ray directions
    side = torch.sign(((points - prev) * d).sum(-1))  # current side along the ray
    side = torch.where(side == 0, torch.ones_like(side), side)
    out = []
    for bits in itertools.product((0, 1), repeat=n):
        p = pivot
        pts = []
        for i in range(n):
            di = d[..., i, :]
            mid = (di * p).sum(-1)
            disc = (mid.square() - p.square().sum(-1) + length[..., i].square()).clamp_min(0.0)
            s = side[..., i] * (1 - 2 * bits[i])
            p = (mid + s * disc.sqrt())[..., None] * di
            pts.append(p)
        out.append(torch.stack(pts, -2))
    return torch.stack(out)


def limb_ik(
    model: CharacterModel,
    root_pos: torch.Tensor,
    root_quat: torch.Tensor,
    dof_pos: torch.Tensor,
    limb: Limb,
    targets: torch.Tensor,
    iters: int = 8,
) -> torch.Tensor:
    """Joint angles ``[N, J]`` with the limb's keypoints at ``targets [N, n, 3]`` (world),
    by damped Gauss-Newton on the limb's angles only, within the joint limits (unreachable
    targets are approached as far as the limits allow)."""
    dt = torch.float64
    pos, quat, dof, tgt = (x.to(dt) for x in (root_pos, root_quat, dof_pos, targets))
    lo, hi = model.lower.to(dt)[limb.dofs], model.upper.to(dt)[limb.dofs]
    cols = 6 + limb.dofs
    below = model.site_below[:, limb.sites]
    for _ in range(iters):
        kp, _, root_rot, axes, pivots = model.jacobian_parts(pos, quat, dof)
        r = (kp[:, limb.sites] - tgt).flatten(1)  # [N, 3n]
        G = point_jacobian(kp[:, limb.sites], pos, root_rot, axes, pivots, below)
        Jm = G[..., cols].flatten(1, 2)  # [N, 3n, D]
        jtj = Jm.transpose(1, 2) @ Jm
        damp = 1e-3 * torch.diag_embed(torch.diagonal(jtj, dim1=1, dim2=2) + 1e-3)
        step = torch.linalg.solve(jtj + damp, -(Jm.transpose(1, 2) @ r[..., None]))[..., 0]
        dof = dof.clone()
        dof[:, limb.dofs] = (dof[:, limb.dofs] + step).clamp(lo, hi)
    return dof.to(dof_pos.dtype)


def viterbi(unary: torch.Tensor, pairwise: torch.Tensor) -> torch.Tensor:
    """Cheapest state sequence ``[B, T]`` for costs ``unary [B, T, P]`` and transition
    costs ``pairwise [B, T - 1, P, P]`` (from state at ``t`` to state at ``t + 1``)."""
    B, T, P = unary.shape
    cost = unary[:, 0]
    back = []
    for t in range(1, T):
        total = cost[:, :, None] + pairwise[:, t - 1]  # [B, P_from, P_to]
        cost, arg = total.min(1)
        cost = cost + unary[:, t]
        back.append(arg)
    state = [cost.argmin(-1)]
    for arg in reversed(back):
        state.append(torch.gather(arg, 1, state[-1][:, None])[:, 0])
    return torch.stack(state[::-1], 1)


def _candidates(model, limb, pos, quat, dof, R, t):
    """Joint angles ``[P, H, T, J]`` of every depth pattern of ``limb`` (pattern 0: ``dof``)."""
    to_cam = lambda p: (R[..., None, :, :] @ p[..., None])[..., 0] + t[..., None, :]  # noqa: E731
    body_pos, _ = model.bodies(pos, quat, dof)
    kp, _ = model.forward(pos, quat, dof)
    pivot = to_cam(body_pos[..., limb.body : limb.body + 1, :])[..., 0, :]
    cand = flip_targets(pivot, to_cam(kp[..., limb.sites, :]))  # [P, H, T, n, 3]
    world = ((cand - t[..., None, :]).unsqueeze(-2) @ R[..., None, :, :]).squeeze(-2)
    P, N = cand.shape[0], pos.shape[:-1].numel()
    rep = lambda x: x.expand(P, *x.shape).reshape(P * N, x.shape[-1])  # noqa: E731
    dofs = limb_ik(model, rep(pos), rep(quat), rep(dof), limb, world.reshape(P * N, -1, 3))
    return dofs.reshape(P, *dof.shape)


def _scores(model, limb, pos, quat, dofs, cams, uv, weight, sigma, fps, w):
    """``(unary [P, H, T], pairwise [P_from, P_to, H, T - 1])`` of the patterns ``dofs``."""
    R, t, k = cams
    P, H, T, J = dofs.shape
    pos, quat = pos.expand(P, H, T, 3), quat.expand(P, H, T, 4)
    kp, contact = model.forward(pos, quat, dofs)
    X = (R[..., None, :, :] @ kp[..., None])[..., 0] + t[..., None, :]
    proj = X[..., :2] / X[..., 2:3].clamp_min(1e-3) * k[..., None, :2] + k[..., None, 2:]
    # per-frame terms of the fitting loss (losses.py, as weighted in the config)
    e2 = ((proj - uv) / sigma).square().sum(-1)
    rho = 4.0 * ((1.0 + e2 / 4.0).sqrt() - 1.0)  # pseudo-Huber, knee at 2 sigma
    unary = w["reproj"] * (weight * rho).sum(-1) / (weight.sum() / T).clamp_min(1e-6)
    cz = contact[..., 2] - model.contact_radius
    pen = torch.relu(-kp[..., 2]).square().mean(-1) + torch.relu(-cz).square().mean(-1)
    unary = unary + w["ground"] * pen / 0.01**2
    unary = (
        unary
        + w["lowest"] * losses.lowest_contact_per_frame(cz)
        + w["prior"] * dofs.square().mean(-1)
    )
    if w.get("balance"):
        com = model.com(pos, quat, dofs)
        unary = unary + w["balance"] * losses.balance_per_frame(
            com[..., :2], contact, cz, model.contact_group, w.get("balance_margin", 0.1)
        )
    # a flipped pattern must explain the frame better by a margin: near-ties are the true
    # monocular ambiguity, where the fit's own solution (grown from the default pose under
    # the temporal prior) is kept
    unary[1:] += w["margin"]
    # transitions: only speeds of the limb's points about its pivot well above the current
    # fit's typical one cost (a jump between patterns; a quadratic cost on every speed
    # would also favour whichever pattern moves least)
    bodies, _ = model.bodies(pos, quat, dofs)
    rel = kp[..., limb.sites, :] - bodies[..., limb.body : limb.body + 1, :]  # [P, H, T, n, 3]
    speed = ((rel[:, None, :, 1:] - rel[None, :, :, :-1]) * fps).norm(dim=-1)
    typical = speed[0, 0].flatten(1).median(-1).values  # [H]
    excess = torch.relu(speed - 2.0 * typical[:, None, None])
    pair = w["speed"] * excess.square().mean(-1)
    # and skating of the limb's contact points (losses.foot_skate, per transition)
    c, r = contact[..., limb.contacts, :], model.contact_radius[limb.contacts]
    c_vel = (c[:, None, :, 1:, :, :2] - c[None, :, :, :-1, :, :2]) * fps / 0.2
    h = 0.5 * (c[:, None, :, 1:, :, 2] + c[None, :, :, :-1, :, 2]) - r
    skate = (torch.exp(-torch.relu(h) / 0.03) * c_vel.square().sum(-1)).sum(-1)
    return unary, pair + w["skate"] * skate / contact.shape[-2]


def flip_limbs(
    model: CharacterModel,
    v: dict[str, torch.Tensor],
    cameras: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    uv: torch.Tensor,
    weight: torch.Tensor,
    sigma: float,
    fps: float,
    weights: dict[str, float],
    limbs: list[Limb],
) -> dict[str, int]:
    """Replace each limb's joint angles in ``v["dof_pos"] [H, T, J]`` (in place) by the
    cheapest sequence of its depth patterns (see the module docstring).

    Args:
        v: ``root_pos [H, T, 3]``, ``root_quat [H, T, 4]``, ``dof_pos [H, T, J]``.
        cameras: ``(R [H, F, 3, 3], t [H, F, 3], intrinsics [H, F, 4])``, F = 1 or T.
        uv: ``[T, K, 2]`` observed pixels; weight: ``[T, K]`` confidences (0 = masked).
        sigma: pixel error that counts as 1; fps: frame rate of the ``T`` frames.
        weights: ``reproj``, ``ground``, ``lowest``, ``prior``, ``skate`` (the loss's
            weights: the scores are its per-frame terms), ``margin`` (added to every
            flipped pattern's frame) and ``speed`` (per squared m/s of excess speed).

    Returns:
        ``{limb's first body: frames (over hypotheses) whose pattern changed}``.
    """
    pos, quat, dof = (v[n].detach() for n in ("root_pos", "root_quat", "dof_pos"))
    H, T, J = dof.shape
    cams = tuple(x.expand(H, T, *x.shape[2:]) for x in cameras)
    changed = {}
    for limb in limbs:
        dofs = _candidates(model, limb, pos, quat, dof, *cams[:2])
        unary, pair = _scores(model, limb, pos, quat, dofs, cams, uv, weight, sigma, fps, weights)
        choice = viterbi(unary.permute(1, 2, 0), pair.permute(2, 3, 0, 1))  # [H, T]
        dof = torch.gather(dofs, 0, choice[None, ..., None].expand(1, H, T, J))[0]
        changed[model.spec.tree.body_names[limb.body]] = int((choice > 0).sum())
    v["dof_pos"].data.copy_(dof)
    return changed
