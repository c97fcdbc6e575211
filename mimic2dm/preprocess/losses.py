"""Loss terms of preprocessing (B.1): pure tensor functions, batched over hypotheses.

Shapes: ``[H, T, ...]`` with ``H`` hypotheses (or 1) and ``T`` frames. Every term is
dimensionless (errors divided by a scale in their own unit) and averaged, so the
weights in :class:`mimic2dm.preprocess.optimize.PreprocessConfig` compare directly.
Each returns ``[H]`` so that hypotheses can be ranked by their own loss.
"""

from __future__ import annotations

import torch


def robust_reprojection(
    uv: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor,
    sigma_px: float,
    delta: float = 2.0,
) -> torch.Tensor:
    """Confidence-weighted pseudo-Huber reprojection loss ``[H]``.

    Args:
        uv: ``[H, T, K, 2]`` projected keypoints (px).
        target: ``[T, K, 2]`` observed keypoints (px; any value where weight is 0).
        weight: ``[T, K]`` confidence, 0 for masked keypoints (never treated as zeros).
        sigma_px: pixel error that counts as 1.
        delta: where the loss turns from quadratic to linear (in units of ``sigma_px``).
    """
    e2 = ((uv - target) / sigma_px).square().sum(-1)
    rho = delta**2 * (torch.sqrt(1.0 + e2 / delta**2) - 1.0)
    return (rho * weight).sum((-1, -2)) / weight.sum().clamp_min(1e-6)


def ground_penetration(
    kp_z: torch.Tensor, contact_z: torch.Tensor, scale: float = 0.01
) -> torch.Tensor:
    """``[H]``: squared depth below the ground of keypoints ``[H, T, K]`` and contact
    surfaces ``[H, T, C]`` (heights already minus their radius), per ``scale`` metres."""
    pen = torch.relu(-kp_z).square().mean((-1, -2)) + torch.relu(-contact_z).square().mean((-1, -2))
    return pen / scale**2


def lowest_contact_per_frame(
    contact_z: torch.Tensor, scale: float = 0.05, temperature: float = 0.01
) -> torch.Tensor:
    """``[..., T]``: the lowest foot near the ground, per frame: the soft minimum ``m`` over
    contact surfaces ``[..., T, C]``, ``x = (m / scale)^2``, robust: ``x / (1 + x)``
    (Geman-McClure, at most 1 per frame), because people jump: a quadratic cost made a
    hop's flight frames pull the body down along the camera rays."""
    low = -temperature * torch.logsumexp(-contact_z / temperature, dim=-1)
    x = (low / scale).square()
    return x / (1.0 + x)


def lowest_contact(
    contact_z: torch.Tensor, scale: float = 0.05, temperature: float = 0.01
) -> torch.Tensor:
    """``[H]``: :func:`lowest_contact_per_frame` of ``[H, T, C]``, averaged over frames."""
    return lowest_contact_per_frame(contact_z, scale, temperature).mean(-1)


def foot_skate(
    contact: torch.Tensor,
    radius: torch.Tensor,
    fps: float,
    speed: float = 0.2,
    height: float = 0.03,
    pair_ok: torch.Tensor | None = None,
):
    """``[H]``: horizontal speed of contact points ``[H, T, C, 3]`` near the ground (a foot
    on the ground does not slide), per ``speed`` m/s, weighted by ``exp(-h / height)``.
    ``pair_ok [T - 1]``: which consecutive frames are adjacent in time (untrusted frames
    cut out of a fit leave jumps that are no motion); None: all."""
    if contact.shape[1] < 2:
        return contact.new_zeros(contact.shape[0])
    v = (contact[:, 1:, :, :2] - contact[:, :-1, :, :2]) * fps / speed
    h = 0.5 * (contact[:, 1:, :, 2] + contact[:, :-1, :, 2]) - radius
    w = torch.exp(-torch.relu(h).detach() / height)
    return _masked_mean((w * v.square().sum(-1)).mean(-1), pair_ok)


def _masked_mean(x: torch.Tensor, ok: torch.Tensor | None) -> torch.Tensor:
    """Mean of ``x [H, N]`` over the ``N`` entries where ``ok [N]`` (all where None) -> ``[H]``."""
    if ok is None:
        return x.mean(-1)
    ok = ok.to(x.dtype)
    return (x * ok).sum(-1) / ok.sum().clamp_min(1.0)


def smoothness(
    x: torch.Tensor, fps: float, scale: float, pair_ok: torch.Tensor | None = None
) -> torch.Tensor:
    """``[H]``: squared second differences of ``x [H, T, ...]`` as accelerations per ``scale``
    (units of x per s^2); ``pair_ok [T - 1]`` as in :func:`foot_skate` (a triple of frames
    counts where both of its steps are adjacent)."""
    if x.shape[1] < 3:
        return x.new_zeros(x.shape[0])
    acc = (x[:, 2:] - 2 * x[:, 1:-1] + x[:, :-2]) * fps**2 / scale
    ok = None if pair_ok is None else pair_ok[1:] & pair_ok[:-1]
    return _masked_mean(acc.square().flatten(2).mean(-1), ok)


def pose_prior(dof_pos: torch.Tensor, dof_scale: float = 1.0) -> torch.Tensor:
    """``[H]``: weak prior towards the default pose: joint angles ``[H, T, J]`` per ``dof_scale`` rad."""
    return (dof_pos / dof_scale).square().mean((-1, -2))


def upright(root_up_z: torch.Tensor) -> torch.Tensor:
    """``[H]``: ``1 - cos(tilt)`` of the root's up axis (``root_up_z [H, T]``: its world z).

    A level camera and a tilted body look alike to a pitched camera and an upright
    body; this prior picks the second, which fixes the camera's pitch and roll."""
    return (1.0 - root_up_z).mean(-1)


def joint_limits(dof_pos: torch.Tensor, lower: torch.Tensor, upper: torch.Tensor) -> torch.Tensor:
    """``[H]``: squared excursion beyond the joint limits (rad). The optimiser also projects
    onto the limits after each step, so this is ~0 at the end; it keeps the gradient
    pointing inside during a step."""
    out = torch.relu(lower - dof_pos) + torch.relu(dof_pos - upper)
    return out.square().mean((-1, -2))


def support_offset(
    com_xy: torch.Tensor,
    contact: torch.Tensor,
    contact_z: torch.Tensor,
    group: torch.Tensor,
    height: float = 0.03,
    lifted_m: float = 1.0,
    stance: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """How far the centre of mass is from the feet that stand on the ground, per frame.

    Each contact body (foot, paw) stands with weight ``w = exp(-(h / height)^2)`` of its
    lowest surface height ``h >= 0``. The support is the nearest of the segments between
    two feet (a foot alone: its centre), each candidate charged ``lifted_m`` metres times
    how far its feet are from both standing; a biped's support polygon is close to the
    segment between its feet, a quadruped's inside the segments between its paws.

    Args:
        com_xy: ``[..., 2]`` horizontal centre of mass.
        contact: ``[..., C, 3]`` contact points; contact_z: ``[..., C]`` their surface heights.
        group: ``[C]`` the contact body of each point (``0 .. G - 1``).
        stance: ``[..., G]`` given standing weights (None: from the heights).

    Returns:
        ``(distance [...], standing [...], nearest support point [..., 2], (i, j, t) [..., 3])``:
        the charged distance (m), the weight of the frame's best-standing foot, the support
        point, and the chosen feet with the segment parameter (for Jacobians).
    """
    G = int(group.max()) + 1
    one_hot = torch.nn.functional.one_hot(group, G).to(contact.dtype)  # [C, G]
    centre = (one_hot.T @ contact[..., :2]) / one_hot.sum(0)[:, None]  # [..., G, 2]
    w = standing_weights(contact_z, group, height) if stance is None else stance
    ii, jj = torch.triu_indices(G, G)
    a, b = centre[..., ii, :], centre[..., jj, :]  # [..., P, 2]
    ab = b - a
    t = ((com_xy[..., None, :] - a) * ab).sum(-1) / ab.square().sum(-1).clamp_min(1e-9)
    t = t.clamp(0.0, 1.0)
    near = a + t[..., None] * ab
    d = (com_xy[..., None, :] - near).norm(dim=-1) + (1.0 - w[..., ii] * w[..., jj]) * lifted_m
    best = d.argmin(-1)
    pick = lambda x: torch.gather(x, -1, best[..., None])[..., 0]  # noqa: E731
    point = torch.gather(near, -2, best[..., None, None].expand(*best.shape, 1, 2))[..., 0, :]
    chosen = torch.stack([ii[best].to(t.dtype), jj[best].to(t.dtype), pick(t)], -1)
    return pick(d), w.amax(-1), point, chosen


def balance_per_frame(
    com_xy: torch.Tensor,
    contact: torch.Tensor,
    contact_z: torch.Tensor,
    group: torch.Tensor,
    margin: float = 0.1,
    scale: float = 0.1,
    stance: torch.Tensor | None = None,
) -> torch.Tensor:
    """``[..., T]``: the centre of mass ``[..., T, 2]`` over the feet that stand
    (:func:`support_offset`): ``standing * (relu(d - margin) / scale)^2``. A still body that
    does not stand over its feet falls; moving ones lean past them (hence the margin), and
    in the air the term vanishes."""
    d, standing, _, _ = support_offset(com_xy, contact, contact_z, group, stance=stance)
    return standing * (torch.relu(d - margin) / scale).square()


def balance(com_xy, contact, contact_z, group, margin=0.1, scale=0.1, stance=None):
    """``[H]``: :func:`balance_per_frame` averaged over frames."""
    return balance_per_frame(com_xy, contact, contact_z, group, margin, scale, stance).mean(-1)


def standing_weights(contact_z: torch.Tensor, group: torch.Tensor, height: float = 0.03):
    """``[..., G]``: how much each contact body stands, ``exp(-(h / height)^2)`` of its lowest
    surface height ``h >= 0`` (contact heights ``[..., C]``, ``group [C]``). No gradient
    flows through it: a term it weights must not be escaped by lifting the foot."""
    low = lowest_per_body(contact_z.detach(), group)
    return torch.exp(-(torch.relu(low) / height).square())


def flat_feet(foot_up_xy: torch.Tensor, standing: torch.Tensor, scale: float = 0.2) -> torch.Tensor:
    """``[H]``: standing feet lie flat: ``standing * (|up_xy| / scale)^2`` summed over the feet
    ``[H, T, F]`` and averaged over frames, ``up_xy [H, T, F, 2]`` the horizontal part of
    each foot's up axis (the sine of its tilt). COCO-17 has no toe keypoint, so nothing else
    stops a fitted foot from reaching down to a ground placed too low (tiptoes)."""
    return (standing * (foot_up_xy / scale).square().sum(-1)).sum(-1).mean(-1)


def lowest_per_body(contact_z: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """``[..., G]``: the lowest surface height of each contact body (heights ``[..., C]``)."""
    G = int(group.max()) + 1
    one_hot = torch.nn.functional.one_hot(group, G).bool()  # [C, G]
    return torch.where(
        one_hot.T, contact_z[..., None, :], torch.full_like(contact_z[..., None, :], 1e3)
    ).amin(-1)


def stance_contact(
    contact_z: torch.Tensor, group: torch.Tensor, stance: torch.Tensor, scale: float = 0.02
) -> torch.Tensor:
    """``[H]``: standing feet (``stance [H, T, G]``) touch the ground: ``stance * (h / scale)^2``
    of each body's lowest surface height ``h`` (heights ``[H, T, C]``), summed over the
    bodies and averaged over frames."""
    return (stance * (lowest_per_body(contact_z, group) / scale).square()).sum(-1).mean(-1)


def image_stance(
    uv: torch.Tensor,
    mask: torch.Tensor,
    keypoint: list[int],
    fps: float,
    still: float = 0.03,
    window_s: float = 0.07,
) -> torch.Tensor:
    """``[T, G]``: 1 where a foot's keypoint stands still in the image (a contact cue from
    2D alone, for a static camera), else 0.

    A foot is still at frame ``t`` when its keypoint (``keypoint[g]``, -1: none) moves less
    than ``still`` times the body's image height (the median over frames of the keypoints'
    vertical extent) to every frame within ``window_s`` seconds; masked keypoints never count
    as still. ``uv [T, K, 2]`` pixels, ``mask [T, K]``.
    """
    T = uv.shape[0]
    ys = torch.where(mask, uv[..., 1], torch.nan)
    extent = (ys.nan_to_num(-1e9).amax(-1) - ys.nan_to_num(1e9).amin(-1))[mask.sum(-1) >= 2]
    body = float(extent.median()) if extent.numel() else 0.0
    out = torch.zeros(T, len(keypoint))
    if body <= 0:
        return out
    k = max(1, round(window_s * fps))
    for g, j in enumerate(keypoint):
        if j < 0:
            continue
        a, ok = uv[:, j], mask[:, j]
        moved = torch.zeros(T)
        for s in range(1, k + 1):
            d = (a[s:] - a[:-s]).norm(dim=-1) if s < T else torch.zeros(0)
            bad = ~(ok[s:] & ok[:-s]) if s < T else torch.zeros(0, dtype=torch.bool)
            d = torch.where(bad, torch.zeros_like(d), d)  # an unseen neighbour says nothing
            moved[s:] = torch.maximum(moved[s:], d)
            moved[:-s] = torch.maximum(moved[:-s], d)
        out[:, g] = ((moved < still * body) & ok).float()
    return out
