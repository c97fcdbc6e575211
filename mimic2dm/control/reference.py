"""Generated 2D motion as the tracker's reference: follow cameras, ``G^-1`` placement and
re-anchoring (paper 3.4, docs/design.md section 9).

Canonical motion carries no camera. The controller gives it one: ``V`` virtual pinhole
cameras that follow the simulated character (:class:`FollowCamera`, views ``v`` at
azimuth ``a + 90 v`` deg, the geometry of the generator's orthogonal training pairs).
The cameras are re-placed at each chunk start. With ``follow="chunk"`` they are held
still during the chunk, so the generated root velocity means motion over the ground, and
each chunk is integrated by ``G^-1`` from the character's current projection
(:func:`anchor_chunk`: root and body size), so drift of the generator's open-loop size and
position never accumulates. With ``follow="step"`` the generated image motion becomes a 3D
root path (:func:`lateral_path`, :func:`level_path`) that the cameras follow step by step,
and the reference keeps the character's root and size of the chunk start (:func:`pose_chunk`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from mimic2dm.generators.data import features_to_pixels
from mimic2dm.geometry.camera import DEG, look_at, spherical_offset
from mimic2dm.motion.canonical import body_scale, root_2d
from mimic2dm.motion.keypoint_sets import KeypointSet
from mimic2dm.tasks.tracking2d import StreamingReference, gather
from mimic2dm.utils.validate import check


@dataclass
class FollowCamera:
    """``V`` cameras at a fixed offset from a target (the character's 3D root).

    Attributes:
        num_views: ``V``; view ``v`` sits at azimuth ``azimuth_deg + 90 v``.
        azimuth_deg, elevation_deg: world direction from the target to view 0's camera.
        distance: metres from the target; focal: pixels (square pixels, centred).
        width, height: image size (pixels).
    """

    num_views: int = 1
    azimuth_deg: float = 0.0
    elevation_deg: float = 10.0
    distance: float = 5.0
    focal: float = 1400.0
    width: int = 1920
    height: int = 1080

    def __post_init__(self) -> None:
        check("--views", self.num_views, ge=1, integer=True)
        check("--distance", self.distance, gt=0)
        check("--focal", self.focal, gt=0)
        check("--elevation", self.elevation_deg, gt=-90, lt=90)

    def azimuths(self) -> torch.Tensor:
        """``[V]`` azimuths (radians)."""
        return (self.azimuth_deg + 90.0 * torch.arange(self.num_views, dtype=torch.float32)) * DEG

    def place(self, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Cameras looking at ``target [..., 3]``: ``R [..., V, 3, 3]``, ``t [..., V, 3]``, ``k [..., V, 4]``."""
        target = torch.as_tensor(target, dtype=torch.float32)[..., None, :]
        az = self.azimuths()
        el, dist = torch.full_like(az, self.elevation_deg * DEG), torch.full_like(az, self.distance)
        eye = target + spherical_offset(az, el, dist)
        R, t = look_at(eye, target.expand_as(eye))
        k = torch.tensor([self.focal, self.focal, self.width / 2, self.height / 2]).expand(
            *t.shape[:-1], 4
        )
        return R, t, k


class ControlReference(StreamingReference):
    """A :class:`StreamingReference` whose cameras and future frames the controller rewrites.

    Each frame keeps the cameras it was pushed with (:meth:`push` with ``camera``), so the
    cameras may move every step. At a chunk start the controller moves the cameras
    (:meth:`set_camera`: every kept frame, and later pushes without their own), drops the
    frames from the current one on (:meth:`rewind`) and pushes the re-anchored chunk.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        C = self.capacity  # per-slot cameras [N, V, C, ...] (the base class keeps one set)
        self.R, self.t, self.k = (x[:, :, None].expand(*x.shape[:2], C, *x.shape[2:]).clone()
                                  for x in (self.R, self.t, self.k))  # fmt: skip
        self._cam = (self.R[:, :, 0].clone(), self.t[:, :, 0].clone(), self.k[:, :, 0].clone())

    def _per_env(self, R, t, k):
        N, dev = self.num_envs, self.device
        return tuple(x.to(dev, torch.float32).expand(N, *x.shape) for x in (R, t, k))

    def set_camera(self, R: torch.Tensor, t: torch.Tensor, k: torch.Tensor) -> None:
        """New cameras ``R [V, 3, 3]``, ``t [V, 3]``, ``k [V, 4]`` for every env and kept frame."""
        self._cam = tuple(x.clone() for x in self._per_env(R, t, k))
        for buf, x in zip((self.R, self.t, self.k), self._cam, strict=True):
            buf.copy_(x[:, :, None].expand_as(buf))

    def push(self, uv: torch.Tensor, mask: torch.Tensor | None = None, camera=None) -> int:
        """:meth:`StreamingReference.push`; ``camera``: ``(R [V, 3, 3], t [V, 3], k [V, 4])``
        the frame was drawn in (default: the last :meth:`set_camera`'s)."""
        frame = super().push(uv, mask)
        cam = self._cam if camera is None else self._per_env(*camera)
        slot = frame % self.capacity
        for buf, x in zip((self.R, self.t, self.k), cam, strict=True):
            buf[:, :, slot] = x
        return frame

    def cameras(self, frames):
        s = self._slots(frames)
        return gather(self.R, s), gather(self.t, s), gather(self.k, s)

    def set_frame_camera(
        self, frame: int, R: torch.Tensor, t: torch.Tensor, k: torch.Tensor
    ) -> None:
        """Replace the cameras of one pushed ``frame`` (``R [V, 3, 3]``, ``t [V, 3]``, ``k [V, 4]``)."""
        if not max(self.pushed - self.capacity, 0) <= frame < self.pushed:
            raise ValueError(f"ControlReference.set_frame_camera: frame {frame} is not kept")
        for buf, x in zip((self.R, self.t, self.k), self._per_env(R, t, k), strict=True):
            buf[:, :, frame % self.capacity] = x

    def rewind(self, frame: int) -> None:
        """Forget frames ``>= frame`` (the next push becomes frame ``frame``)."""
        if not 0 <= frame <= self.pushed:
            raise ValueError(f"ControlReference.rewind: frame {frame} not in [0, {self.pushed}]")
        self.pushed = int(frame)


def character_anchor(
    uv: torch.Tensor, valid: torch.Tensor, kset: KeypointSet
) -> tuple[torch.Tensor, torch.Tensor]:
    """Root ``[V, 2]`` and body size ``[V]`` (pixels) of the character's projection ``uv [V, K, 2]``."""
    roots, scales = [], []
    for v in range(uv.shape[0]):
        x, m = uv[v : v + 1].float(), valid[v : v + 1].bool()
        roots.append(root_2d(x, m, kset)[0])
        scales.append(body_scale(x, m, kset, window=1)[0])
    return torch.stack(roots), torch.stack(scales)


def _centred_poses(feats: torch.Tensor, kset: KeypointSet) -> torch.Tensor:
    """``[V, n, K, 2]`` local poses of raw canonical features ``[V, n, D]``, re-centred on the
    keypoint set's root (generated poses are only approximately centred)."""
    K = kset.num_keypoints
    local = feats[..., : 2 * K].float().reshape(*feats.shape[:2], K, 2)
    return local - local[..., list(kset.root), :].mean(-2, keepdim=True)


def anchor_chunk(
    feats: torch.Tensor, root: torch.Tensor, scale: torch.Tensor, kset: KeypointSet,
    data_scale: float | None = None,
) -> torch.Tensor:  # fmt: skip
    """``G^-1`` of raw canonical features ``[V, n, D]`` started at ``root [V, 2]``, ``scale [V]``.

    The local pose is first re-centred on the keypoint set's root (generated poses are
    only approximately centred), so frame 0's root is exactly ``root``.

    Args:
        data_scale: the body size of the motion the features describe, in the pixels of
            ``scale`` (a generator's ``FeatureStats.scale_px``, which is at 1080p). The body size changes by
            ``d log s / dt = -v_depth / distance``: the same walk towards the camera changes
            its size ``distance_data / distance_here`` times faster at a nearer camera. With
            ``data_scale`` the log-size velocity is multiplied by ``scale / data_scale``
            (``= distance_data / distance_here`` at equal focal lengths), so depth motion
            keeps its speed in metres; the root's image velocity, in body sizes, needs no
            change. ``None``: features as they are.

    Returns:
        ``[V, n, K, 2]`` pixels.
    """
    K = kset.num_keypoints
    local = _centred_poses(feats, kset)
    glob = feats[..., 2 * K :].float().clone()
    if data_scale is not None:
        glob[..., 2] = glob[..., 2] * (scale.float() / float(data_scale))[:, None]
    f = torch.cat([local.reshape(*feats.shape[:2], 2 * K), glob], dim=-1)
    return torch.stack([features_to_pixels(f[v], root[v], scale[v])[0] for v in range(f.shape[0])])


def lateral_path(
    feats: torch.Tensor, R: torch.Tensor, scale: torch.Tensor, kset: KeypointSet,
    distance: float, focal: float,
) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """The 3D path of a chunk's root that the generated image motion describes (``step`` cameras).

    Each view's root velocity (body sizes per frame) is read as motion across its camera's
    image plane of ``velocity x S`` metres, ``S = scale x distance / focal`` the character's
    body size in metres (``du / s = dx / S`` for a pinhole camera). The world displacement per
    frame is the least-squares one over the views. What no view's image plane sees (with one
    view, its viewing axis), taken on the ground plane, is returned as ``null``: the generated
    body-size velocity cannot say it reliably (it depends on the unknown distance of the
    generator data's camera, which changes as the person moves), so the controller lets the
    cameras follow the character along it instead.

    Args:
        feats: ``[V, n, D]`` raw canonical features (row ``i``: the motion ``i -> i + 1``).
        R: ``[V, 3, 3]`` world-to-camera rotations of the follow cameras at the chunk start.
        scale: ``[V]`` the character's body size at the chunk start (pixels, in those cameras).
        distance, focal: the follow cameras' distance (m) and focal length (px).

    Returns:
        ``step [n, 3]`` the root's displacement from frame ``i`` to ``i + 1`` (metres, world)
        and ``null [3, m]`` an orthonormal basis of the horizontal directions no view sees
        (``m`` is 1 for one view, 0 for two views at different azimuths).
    """
    K = kset.num_keypoints
    V, n = feats.shape[:2]
    size_m = (scale.float() * distance / focal).mean()
    lateral = feats[..., 2 * K : 2 * K + 2].float() * size_m  # [V, n, 2] camera x (right), y (down)
    A = R.float()[:, :2, :].reshape(2 * V, 3)  # image-plane axes of every view (world)
    b = lateral.permute(1, 0, 2).reshape(n, 2 * V)
    step = b @ torch.linalg.pinv(A).T  # [n, 3]
    _, sv, vh = torch.linalg.svd(A, full_matrices=True)
    rank = int((sv > 1e-6 * sv.max()).sum())
    # the ground-plane part: heights come from the image (level_path), not from the character
    null = vh[rank:].T.clone()
    null[2] = 0.0
    null = null[:, null.norm(dim=0) > 1e-6]
    return step, torch.linalg.qr(null).Q if null.shape[1] else null


def level_path(step: torch.Tensor, history: torch.Tensor, window: int = 30) -> torch.Tensor:
    """Offsets ``[n, 3]`` of a root path from frame 0 (row 0 zero) whose steps ``step [n, 3]``
    have their vertical drift removed.

    Seen by a static camera above the ground, a person walking away rises in the image and
    one walking closer sinks (perspective), and canonical features cannot tell that from a
    climb: read as lateral motion it lifts the reference root by ~0.2 m per 8 frames for a
    run. A character on flat ground keeps its mean height, so the mean vertical step over the
    last ``window`` frames is subtracted: this chunk's ``n`` and the newest ``window - n`` of
    ``history [h]`` (the raw vertical steps of the frames played before; all of them when
    fewer). The height changes within a hop (which average out over its cycle) stay.
    """
    keep = min(max(window - step.shape[0], 0), history.shape[0])
    vz = torch.cat([history[history.shape[0] - keep :].float(), step[:, 2].float()])
    step = step.clone()
    step[:, 2] -= vz.mean()
    return torch.cat([step.new_zeros(1, 3), torch.cumsum(step, 0)[:-1]])


def pose_chunk(
    feats: torch.Tensor, root: torch.Tensor, scale: torch.Tensor, kset: KeypointSet
) -> torch.Tensor:
    """The local poses of raw canonical features ``[V, n, D]`` drawn at a fixed ``root [V, 2]``
    and ``scale [V]`` (the reference as ``step`` cameras see it: they follow its root at a fixed
    distance). Poses are re-centred on the keypoint set's root as in :func:`anchor_chunk`.

    Returns:
        ``[V, n, K, 2]`` pixels.
    """
    local = _centred_poses(feats, kset)
    return local * scale.float()[:, None, None, None] + root.float()[:, None, None, :]


def start_offset(pix0: torch.Tensor, uv: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """``[V, K, 2]``: the character's projection ``uv [V, K, 2]`` minus the first reference
    frame ``pix0 [V, K, 2]``; 0 where the character does not show a keypoint (``valid``)."""
    return torch.where(valid[..., None].bool(), uv.float() - pix0.float(), 0.0)


def blend_start(
    pix: torch.Tensor, offset: torch.Tensor, first_step: int, frames: int
) -> torch.Tensor:
    """Ease a reference in from the character's starting pose (an inertialisation-style transition).

    The generator knows nothing of the state the character starts from, so step 0's
    reference differs from the character's pose even after the best start match.
    ``offset`` (:func:`start_offset` at step 0) is added to the reference of step ``s``
    with the weight ``(1 + cos(pi s / frames)) / 2``: 1 at step 0, 0 from step ``frames``
    on. The reference begins where the character is and is exactly the generated motion
    after ``frames`` steps, across as many chunks as that takes.

    Args:
        pix: ``[V, n, K, 2]`` the chunk's reference; its frame ``i`` is step ``first_step + i``.
        offset: ``[V, K, 2]``.

    Returns:
        ``[V, n, K, 2]``: a new tensor.
    """
    s = first_step + torch.arange(pix.shape[1], dtype=torch.float32)
    w = torch.where(s < frames, 0.5 * (1.0 + torch.cos(torch.pi * s / max(frames, 1))), 0.0)
    return pix + w[None, :, None, None] * offset[:, None].to(pix)
