"""Reference clips for the 2D tracker, resampled to the control rate.

A :class:`ReferenceLibrary` holds every clip of a training set: its 2D views (keypoints,
masks, cameras) and, when the clip is synthetic, its 3D keypoints so that episodes can
draw fresh virtual views. :meth:`ReferenceLibrary.episode_views` turns a draw of
(clip, view) into per-env tensors over the clip's frames that the task indexes by time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from mimic2dm.geometry.camera import MIN_DEPTH, Camera, project_points
from mimic2dm.geometry.virtual import (
    VirtualCameraConfig,
    sample_camera,
    static_cameras,
    tracking_cameras,
)
from mimic2dm.motion.canonical import root_2d
from mimic2dm.motion.format import (
    CONFIDENCE_THRESHOLD,
    MIN_CONTROL_FRAMES,
    Motion2D,
    check_trackable,
    load_motion2d,
)
from mimic2dm.motion.keypoint_sets import KeypointSet, load_keypoint_set
from mimic2dm.motion.synth import resample

#: where episode references come from (``ReferenceLibrary``; ``task.view_mode``)
VIEW_MODES = ("clip", "virtual", "mixed", "auto")
TASK_CAMERA_MODES = ("static", "tracking", "dynamic", "static_tracking")
"""Virtual camera modes of the task: those of :func:`mimic2dm.geometry.virtual.sample_camera`,
and ``static_tracking``: each view static or tracking (follow camera), even odds."""


@dataclass
class Clip:
    """One reference clip at the control rate (``T`` frames, ``V`` views, ``K`` keypoints).

    Attributes:
        name: file stem (and view count) for logs.
        uv: ``[V, T, K, 2]`` reference pixels; mask ``[V, T, K]``.
        cam_R ``[V, T, 3, 3]``, cam_t ``[V, T, 3]``, intrinsics ``[V, T, 4]``: per-frame
            cameras (static ones repeated).
        image_height: ``[V]`` pixels; image_width ``[V]`` pixels.
        keypoints3d: ``[T, K, 3]`` when known (synthetic data): enables virtual views
            and the 3D metrics.
        object_uv: ``[V, T, 2]`` the clip's object track (``Motion2D.object_center``,
            pixels) and object_valid ``[V, T]`` where it is seen; None without a track.
        object3d: ``[T, 3]`` the object's world position when known (synthetic data):
            initial states place the ball there.
        init_states: per-frame initial simulation states from preprocessing
            (``Motion2D.init_*`` at the control rate: ``root_pos [T, 3]``, ``root_quat
            [T, 4]`` xyzw, ``root_lin_vel``/``root_ang_vel [T, 3]`` world frame,
            ``dof_pos``/``dof_vel [T, J]``) for the character ``init_character``; None without.
        est_keypoints3d: ``[T, K, 3]`` the preprocessing's 3D estimate the ``init_states``
            were fitted with (``Motion2D.est_keypoints3d`` at the control rate); None without.
    """

    name: str
    uv: torch.Tensor
    mask: torch.Tensor
    cam_R: torch.Tensor
    cam_t: torch.Tensor
    intrinsics: torch.Tensor
    image_height: torch.Tensor
    image_width: torch.Tensor
    keypoints3d: torch.Tensor | None = None
    labels: dict = field(default_factory=dict)
    object_uv: torch.Tensor | None = None
    object_valid: torch.Tensor | None = None
    object3d: torch.Tensor | None = None
    init_states: dict[str, torch.Tensor] | None = None
    init_character: str | None = None
    est_keypoints3d: torch.Tensor | None = None

    @property
    def num_frames(self) -> int:
        return self.uv.shape[1]

    @property
    def num_views(self) -> int:
        return self.uv.shape[0]


def _cameras_per_frame(
    cams: list[Camera], T: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    Rs, ts, ks = [], [], []
    frames = torch.arange(T)
    for cam in cams:
        R, t, k = cam.params(frames)
        Rs.append(R), ts.append(t), ks.append(k)
    return torch.stack(Rs), torch.stack(ts), torch.stack(ks)


def _resample_cameras(R, t, k, src_len: int, dst_len: int):
    """Nearest-frame resampling of per-frame cameras ``[V, T, ...]`` to ``dst_len`` frames."""
    idx = torch.round(torch.linspace(0, src_len - 1, dst_len)).long()
    return R[:, idx], t[:, idx], k[:, idx]


def clip_from_motion(m: Motion2D, control_hz: float, name: str = "clip") -> Clip:
    """Build a :class:`Clip` from a validated 2D-motion file, resampled to ``control_hz``.

    Raises:
        ValueError: the clip has no cameras (run preprocessing first) — naming the clip.
    """
    if not m.has_cameras:
        raise ValueError(f"{name}: field 'camera_R' is missing; the tracker needs cameras per view: "
                         "run `mimic2dm preprocess CLIP.npz --out DIR` first and train on DIR/CLIP.npz "
                         "(synthetic clips from `mimic2dm data synth` carry cameras already)")  # fmt: skip
    mask = torch.from_numpy(m.mask(CONFIDENCE_THRESHOLD))
    uv = torch.from_numpy(np.nan_to_num(m.keypoints)).float()
    R, t, k = _cameras_per_frame(m.cameras(), m.num_frames)
    T_src = m.num_frames
    kp3d = None if m.keypoints3d is None else torch.from_numpy(m.keypoints3d).float()
    obj3d = None if m.object3d is None else torch.from_numpy(np.asarray(m.object3d)).float()
    if abs(m.fps - control_hz) > 1e-6:
        uv = torch.from_numpy(
            np.stack([resample(u, m.fps, control_hz) for u in uv.numpy()])
        ).float()
        T = uv.shape[1]
        near = torch.round(torch.linspace(0, T_src - 1, T)).long()
        mask = mask[:, near]
        R, t, k = _resample_cameras(R, t, k, T_src, T)
        if kp3d is not None:
            kp3d = torch.from_numpy(resample(kp3d.numpy(), m.fps, control_hz)).float()
        if obj3d is not None:
            obj3d = torch.from_numpy(resample(obj3d.numpy(), m.fps, control_hz)).float()
    obj_uv = obj_ok = None
    if m.object_center is not None:
        obj_uv = torch.from_numpy(np.nan_to_num(m.object_center)).float()
        obj_ok = torch.from_numpy(np.asarray(m.object_confidence) >= CONFIDENCE_THRESHOLD)
        if abs(m.fps - control_hz) > 1e-6:
            obj_uv = torch.from_numpy(
                np.stack([resample(u, m.fps, control_hz) for u in obj_uv.numpy()])
            ).float()
            obj_ok = obj_ok[:, torch.round(torch.linspace(0, T_src - 1, obj_uv.shape[1])).long()]
    height = torch.full((uv.shape[0],), float(m.image_size[1]))
    width = torch.full((uv.shape[0],), float(m.image_size[0]))
    clip = Clip(name, uv, mask, R, t, k, height, width, kp3d, dict(m.labels), obj_uv, obj_ok, obj3d)
    if m.has_initial_states:
        clip.init_states, clip.init_character = _initial_states_at(m, control_hz), m.init_character
    if m.est_keypoints3d is not None:
        est = np.asarray(m.est_keypoints3d, dtype=np.float32)
        if abs(m.fps - control_hz) > 1e-6:
            est = resample(est, m.fps, control_hz)
        clip.est_keypoints3d = torch.from_numpy(np.ascontiguousarray(est)).float()
    return clip


INIT_FIELDS = ("root_pos", "root_quat", "root_lin_vel", "root_ang_vel", "dof_pos", "dof_vel")
"""The per-frame initial-state fields of a clip (``Motion2D.init_<name>``)."""


def _initial_states_at(m: Motion2D, control_hz: float) -> dict[str, torch.Tensor]:
    """The clip's preprocessed initial states resampled (linearly) to ``control_hz``;
    quaternions are kept sign-continuous before and renormalised after."""
    out = {}
    for f in INIT_FIELDS:
        x = np.asarray(getattr(m, f"init_{f}"), dtype=np.float64)
        if f == "root_quat":  # q and -q are one rotation: interpolate along the shorter arc
            x = x.copy()
            for i in range(1, x.shape[0]):
                if (x[i] * x[i - 1]).sum() < 0:
                    x[i] = -x[i]
        if abs(m.fps - control_hz) > 1e-6:
            x = resample(x, m.fps, control_hz)
        if f == "root_quat":
            x = x / np.linalg.norm(x, axis=-1, keepdims=True)
        out[f] = torch.from_numpy(x).float()
    return out


def _empty_views(E: int, T: int, K: int) -> EpisodeViews:
    return EpisodeViews(
        torch.zeros(E, T, K, 2), torch.zeros(E, T, K, dtype=torch.bool), torch.zeros(E, T, 2),
        torch.eye(3).repeat(E, T, 1, 1), torch.zeros(E, T, 3), torch.ones(E, T, 4),
        torch.zeros(E), torch.zeros(E, dtype=torch.long),
        torch.zeros(E, T, 2), torch.zeros(E, T, dtype=torch.bool),
    )  # fmt: skip


@dataclass
class EpisodeViews:
    """Per-env reference tensors of new episodes (``E`` envs, ``V`` views each, ``T`` = longest clip)."""

    uv: torch.Tensor  # [E, V, T, K, 2] pixels
    mask: torch.Tensor  # [E, V, T, K]
    root: torch.Tensor  # [E, V, T, 2] gap-filled reference root (pixels)
    cam_R: torch.Tensor  # [E, V, T, 3, 3]
    cam_t: torch.Tensor  # [E, V, T, 3]
    intrinsics: torch.Tensor  # [E, V, T, 4]
    height: torch.Tensor  # [E] image height (pixels; the views of one env share it)
    length: torch.Tensor  # [E] frames of each env's clip
    obj_uv: torch.Tensor  # [E, V, T, 2] the clip's object track (pixels)
    obj_valid: torch.Tensor  # [E, V, T] where the object is seen

    PER_VIEW = ("uv", "mask", "root", "cam_R", "cam_t", "intrinsics", "obj_uv", "obj_valid")

    def reshape_(self, C: int, V: int) -> EpisodeViews:
        """View the leading ``C * V`` axis as ``[C, V]`` (per-view fields; height becomes ``[C, V]``)."""
        for name in self.PER_VIEW:
            x = getattr(self, name)
            setattr(self, name, x.reshape(C, V, *x.shape[1:]))
        self.height = self.height.reshape(C, V)
        return self


class ReferenceLibrary:
    """All reference clips of a run.

    Args:
        clips: the clips (same keypoint set).
        keypoint_set: name of that set.
        view_mode: ``"clip"`` (draw one of the clip's own views), ``"virtual"`` (a fresh
            random virtual camera per episode; needs 3D keypoints), ``"mixed"`` (half each) or
            ``"auto"`` (per clip: virtual views for clips with 3D keypoints, their own views for
            clips without, e.g. real clips beside clips made in the control loop).
        camera_mode: kind of virtual camera (``static``, ``tracking``, ``dynamic``).
        camera_config: sampling ranges of virtual cameras.
        control_hz: frame rate of the clips (they are resampled to the control rate).
    """

    def __init__(
        self,
        clips: Sequence[Clip],
        keypoint_set: str,
        view_mode: str = "clip",
        camera_mode: str = "static",
        camera_config: VirtualCameraConfig | None = None,
        control_hz: float = 30.0,
    ):
        if not clips:
            raise ValueError("ReferenceLibrary: no clips")
        short = [f"{c.name} ({c.num_frames})" for c in clips if c.num_frames < MIN_CONTROL_FRAMES]
        if short:
            raise ValueError(f"ReferenceLibrary: clips need >= {MIN_CONTROL_FRAMES} frames at the "
                             f"control rate; too short: {short}")  # fmt: skip
        if view_mode not in VIEW_MODES:
            raise ValueError(f"view_mode {view_mode!r} is not one of {', '.join(VIEW_MODES)}")
        if view_mode in ("virtual", "mixed") and any(c.keypoints3d is None for c in clips):
            bad = [c.name for c in clips if c.keypoints3d is None]
            raise ValueError(
                f"view_mode={view_mode!r} needs 3D keypoints; clips without them: {bad}"
            )
        self.clips = list(clips)
        self.control_hz = control_hz
        self.kset: KeypointSet = load_keypoint_set(keypoint_set)
        self.view_mode = view_mode
        self.camera_mode = camera_mode
        self.camera_config = camera_config or VirtualCameraConfig()
        self.lengths = torch.tensor([c.num_frames for c in self.clips])
        self.offsets = torch.cat(
            [torch.zeros(1, dtype=torch.long), torch.cumsum(self.lengths, 0)[:-1]]
        )
        self.max_len = int(self.lengths.max())
        self.root_idx = torch.tensor(self.kset.root)
        self.num_views = torch.tensor([c.num_views for c in self.clips])
        self.has_3d = torch.tensor([c.keypoints3d is not None for c in self.clips])
        self.has_object_track = any(c.object_uv is not None for c in self.clips)
        self.max_views = int(self.num_views.max())
        self._padded = self._pad_clip_views()

    def to(self, device) -> ReferenceLibrary:
        """Keep the per-clip index tensors and the padded views on ``device`` (in place), so
        drawing clip views needs no host round trip (virtual views are drawn on the host)."""
        self.lengths, self.offsets = self.lengths.to(device), self.offsets.to(device)
        self.num_views = self.num_views.to(device)
        self._padded = EpisodeViews(**{k: v.to(device) for k, v in vars(self._padded).items()})
        return self

    def _pad_clip_views(self) -> EpisodeViews:
        """All clip views padded to ``[C, Vmax, Tmax, ...]`` so episodes gather them at once."""
        C, V, T, K = (
            self.num_clips,
            int(self.num_views.max()),
            self.max_len,
            self.kset.num_keypoints,
        )
        p = _empty_views(C * V, T, K).reshape_(C, V)
        for c, clip in enumerate(self.clips):
            n = clip.num_frames
            p.uv[c, : clip.num_views, :n], p.mask[c, : clip.num_views, :n] = clip.uv, clip.mask
            p.cam_R[c, : clip.num_views, :n], p.cam_t[c, : clip.num_views, :n] = (
                clip.cam_R,
                clip.cam_t,
            )
            p.intrinsics[c, : clip.num_views, :n] = clip.intrinsics
            for v in range(clip.num_views):
                p.root[c, v, :n] = root_2d(clip.uv[v], clip.mask[v], self.kset)
            p.height[c, : clip.num_views] = clip.image_height
            if clip.object_uv is not None:
                p.obj_uv[c, : clip.num_views, :n] = clip.object_uv
                p.obj_valid[c, : clip.num_views, :n] = clip.object_valid
        return p

    @classmethod
    def from_files(cls, paths: Sequence[str | Path], control_hz: float, **kw) -> ReferenceLibrary:
        """Load 2D-motion files (validated) and resample them to ``control_hz``."""
        motions = [load_motion2d(p) for p in paths]
        for m, p in zip(motions, paths, strict=True):
            check_trackable(m, p, control_hz)  # too short / fully masked: named, with the minimum
        sets = {m.keypoint_set for m in motions}
        if len(sets) != 1:
            raise ValueError(
                f"reference clips mix keypoint sets {sorted(sets)}: {list(map(str, paths))}"
            )
        clips = [
            clip_from_motion(m, control_hz, Path(p).stem)
            for m, p in zip(motions, paths, strict=True)
        ]
        return cls(clips, sets.pop(), control_hz=control_hz, **kw)

    @property
    def num_clips(self) -> int:
        return len(self.clips)

    @property
    def total_frames(self) -> int:
        """Frames of all clips together (the number of ASI buffers)."""
        return int(self.lengths.sum())

    def global_frame(self, clip_ids: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
        """Index into the concatenation of all clips' frames."""
        return self.offsets[clip_ids] + frames

    def camera(self, clip_id: int, view: int):
        """The :class:`Camera` of one clip view (per-frame parameters)."""
        c = self.clips[clip_id]
        return Camera(
            c.cam_R[view],
            c.cam_t[view],
            c.intrinsics[view],
            int(c.image_width[view]),
            int(c.image_height[view]),
        )

    def _clip_view(self, clip: Clip, view: int):
        return (
            clip.uv[view],
            clip.mask[view],
            clip.cam_R[view],
            clip.cam_t[view],
            clip.intrinsics[view],
            clip.image_height[view],
        )

    def _virtual_view(self, clip: Clip, gen: torch.Generator, mode: str | None = None):
        kp3d = clip.keypoints3d
        root3d = kp3d[:, list(self.kset.root)].mean(1)
        cam = sample_camera(root3d, mode or self.camera_mode, gen, self.camera_config)
        R, t, k = cam.params(torch.arange(clip.num_frames))
        uv, depth = project_points(R, t, k, kp3d)
        mask = depth > MIN_DEPTH
        return uv, mask, R, t, k, torch.tensor(float(cam.height))

    def episode_views(
        self,
        clip_ids: torch.Tensor,
        gen: torch.Generator,
        num_views: int = 1,
        view_ids: torch.Tensor | None = None,
    ) -> EpisodeViews:
        """Draw ``num_views`` views per env for clips ``clip_ids [E]``: the references of new episodes.

        Clip views are drawn without replacement while the clip has enough of them;
        ``view_ids [E, V]`` picks given clip views instead (evaluation).
        """
        E, V = clip_ids.shape[0], num_views
        nv = self.num_views[clip_ids]
        if view_ids is None:
            # a random order of each clip's views (missing view slots sort last)
            Vmax, dev = self.max_views, nv.device
            key = (
                torch.rand(E, Vmax, generator=gen).to(dev)
                + (torch.arange(Vmax, device=dev) >= nv[:, None]).float() * 2
            )
            order = key.argsort(dim=1)
            view_ids = order.gather(1, torch.arange(V, device=dev)[None] % nv[:, None])
        view_ids = view_ids.to(clip_ids.device)
        p = self._padded
        c = clip_ids[:, None]
        out = EpisodeViews(
            p.uv[c, view_ids], p.mask[c, view_ids], p.root[c, view_ids], p.cam_R[c, view_ids],
            p.cam_t[c, view_ids], p.intrinsics[c, view_ids], p.height[clip_ids, view_ids[:, 0]],
            self.lengths[clip_ids].clone(), p.obj_uv[c, view_ids], p.obj_valid[c, view_ids],
        )  # fmt: skip
        if self.view_mode != "clip":
            self._draw_virtual(out, clip_ids, gen)
        return out

    def _draw_virtual(
        self, out: EpisodeViews, clip_ids: torch.Tensor, gen: torch.Generator
    ) -> None:
        """Replace views of ``out`` by fresh virtual views (all in ``virtual`` mode, half in
        ``mixed``, those of clips with 3D keypoints in ``auto``)."""
        E, V = out.uv.shape[:2]
        if self.view_mode == "mixed":
            draw = torch.rand(E, V, generator=gen) >= 0.5
        else:
            draw = torch.ones(E, V, dtype=torch.bool)
        if self.view_mode == "auto":
            draw &= self.has_3d[clip_ids.cpu()][:, None]
        mode = self.camera_mode
        if mode == "static_tracking":  # per view: a follow camera or a static one
            follow = draw & (torch.rand(E, V, generator=gen) < 0.5)
            draw, mode = draw & ~follow, "static"
        else:
            follow = draw if mode == "tracking" else torch.zeros_like(draw)
            draw = draw & ~follow
        # tracking and static cameras batched per clip: resets are frequent early in training
        for c in clip_ids[follow.any(1)].unique().tolist():
            e, v = torch.nonzero(follow & (clip_ids == c)[:, None], as_tuple=True)
            self._draw_batched(out, self.clips[c], e, v, gen, "tracking")
        if not bool(draw.any()):
            return
        if mode == "static":
            for c in clip_ids[draw.any(1)].unique().tolist():
                e, v = torch.nonzero(draw & (clip_ids == c)[:, None], as_tuple=True)
                self._draw_batched(out, self.clips[c], e, v, gen, "static")
            return
        for e, c in enumerate(clip_ids.tolist()):
            clip = self.clips[c]
            for v in range(V):
                if not draw[e, v]:
                    continue
                uv, mask, R, t, k, h = self._virtual_view(clip, gen, mode)
                n = clip.num_frames
                out.uv[e, v, :n], out.mask[e, v, :n] = uv, mask
                out.cam_R[e, v, :n], out.cam_t[e, v, :n], out.intrinsics[e, v, :n] = R, t, k
                out.root[e, v, :n] = root_2d(uv, mask, self.kset)
                out.height[e] = h
                out.obj_valid[e, v] = False  # the 2D object track belongs to the clip's own views

    def _draw_batched(
        self,
        out: EpisodeViews,
        clip: Clip,
        e: torch.Tensor,
        v: torch.Tensor,
        gen: torch.Generator,
        mode: str,
    ) -> None:
        """Fresh ``tracking`` or ``static`` virtual views of ``clip`` into the slots
        ``(e [n], v [n])`` of ``out``, all drawn at once."""
        kp3d, n = clip.keypoints3d, clip.num_frames
        root3d = kp3d[:, list(self.kset.root)].mean(1)
        if mode == "tracking":
            R, t, k = tracking_cameras(root3d, e.shape[0], gen, self.camera_config)
        else:
            R, t, k = static_cameras(root3d, e.shape[0], gen, self.camera_config)
            R, t = R[:, None].expand(-1, n, 3, 3), t[:, None].expand(-1, n, 3)
        k = k[:, None].expand(-1, n, 4)
        uv, depth = project_points(R, t, k, kp3d)  # [n_views, T, K, 2]
        mask = depth > MIN_DEPTH
        out.uv[e, v, :n], out.mask[e, v, :n] = uv, mask
        out.cam_R[e, v, :n], out.cam_t[e, v, :n], out.intrinsics[e, v, :n] = R, t, k
        idx = list(self.kset.root)
        if bool(mask[:, :, idx].all()):
            out.root[e, v, :n] = uv[:, :, idx].mean(2)
        else:  # a root keypoint behind the camera somewhere: the gap-filling per view
            out.root[e, v, :n] = torch.stack(
                [root_2d(uv[i], mask[i], self.kset) for i in range(e.shape[0])]
            )
        out.height[e] = float(self.camera_config.height)
        out.obj_valid[e, v] = False  # the 2D object track belongs to the clip's own views
