"""Where the tracking task's reference comes from: the :class:`ReferenceSource` protocol.

The task asks a source for the reference of each env at given frames (keypoints, masks,
roots, cameras, the object track) and never indexes clip arrays itself. Two sources:

- :class:`ClipReference`: the clips of a :class:`~.reference.ReferenceLibrary` (training,
  evaluation). Start frames are the library's frames, so adaptive state initialisation
  keeps one state buffer per frame.
- :class:`StreamingReference`: 2D frames pushed at run time (a generator feeding the
  tracker). Episodes start at the newest frame; frames past the newest pushed one read
  as the newest (the reference holds still until the next push).
"""

from __future__ import annotations

import abc

import torch
from mimic2dm.tasks.tracking2d.reference import EpisodeViews, ReferenceLibrary

from mimic2dm.engines.base import SimState
from mimic2dm.motion.keypoint_sets import KeypointSet, load_keypoint_set


class ReferenceSource(abc.ABC):
    """The reference of ``num_envs`` envs, ``num_views`` views each.

    Frames are per-env episode frames ``[N]`` (the task advances them); global start frames
    index :meth:`initial_states` (one ASI buffer each).

    Attributes:
        kset: the keypoint set; control_hz: frame rate (the task's control rate).
        num_envs, num_views: ``N`` and ``V``.
        replays_starts: episodes restart from recorded frames (ASI applies).
    """

    kset: KeypointSet
    control_hz: float
    num_envs: int
    num_views: int
    replays_starts: bool = True

    # ------------------------------------------------------------------ starts
    @property
    @abc.abstractmethod
    def num_start_frames(self) -> int:
        """``F``: global frames an episode may start at (ASI buffers)."""

    @abc.abstractmethod
    def valid_starts(self) -> torch.Tensor:
        """``[F]`` bool: frames an episode may start at (they have a future)."""

    @abc.abstractmethod
    def initial_states(
        self, template: SimState, character, mode: str = "auto", level_feet: bool = False
    ) -> SimState:
        """One state per start frame ``[F]`` (the first fill of the ASI buffers); ``mode``
        is ``task.initial_state`` (``auto`` | ``default_pose``, see :mod:`.initial`),
        ``level_feet`` is ``task.initial_level_feet``."""

    @abc.abstractmethod
    def begin(self, env_ids: torch.Tensor, starts: torch.Tensor, gen: torch.Generator,
              view_ids: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
        """New episodes in ``env_ids [E]`` from global ``starts [E]``; ``view_ids [E, V]``
        picks given views. Returns the episodes' first frames ``[E]``."""

    @abc.abstractmethod
    def global_frame(self, env_ids: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
        """``[E]`` global frames of ``frames [E]`` of envs ``env_ids``."""

    # ------------------------------------------------------------------ per step (all envs)
    @abc.abstractmethod
    def keypoints(self, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Reference at ``frames [N]`` or ``[N, n]`` (clamped to the frames that exist).

        Returns:
            ``uv [N, V, (n,) K, 2]`` pixels, ``mask [N, V, (n,) K]``, ``root [N, V, (n,) 2]``.
        """

    @abc.abstractmethod
    def cameras(self, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``R [N, V, 3, 3]``, ``t [N, V, 3]``, ``intrinsics [N, V, 4]`` at ``frames [N]``."""

    @abc.abstractmethod
    def heights(self) -> torch.Tensor:
        """``[N]`` image heights (pixels; errors are normalised by them)."""

    @abc.abstractmethod
    def at_end(self, frames: torch.Tensor) -> torch.Tensor:
        """``[N]`` bool: ``frames`` is the last of the env's reference (a time-out)."""

    def objects(self, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The object track at ``frames [N]``: ``uv [N, V, 2]``, ``valid [N, V]``; None
        when the source has none (the object terms are then left out)."""
        return None

    # ------------------------------------------------------------------ resume
    @abc.abstractmethod
    def episode_state(self) -> dict: ...

    @abc.abstractmethod
    def load_episode_state(self, d: dict) -> None: ...


def gather(x: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
    """``x [N, V, T, ...]`` at per-env ``frames [N]`` or ``[N, n]`` -> ``[N, V, (n,) ...]``:
    how a source reads its per-view, per-frame buffers (a subclass's own buffers too)."""
    e = torch.arange(x.shape[0], device=x.device)
    if frames.dim() == 1:
        return x[e, :, frames]
    return x[e[:, None], :, frames].transpose(1, 2)


class ClipReference(ReferenceSource):
    """Clips of a library, one drawn per episode (with its views).

    Args:
        library: the clips.
        num_envs, num_views: ``N`` and ``V`` (views per env).
        device: where the per-env tensors live (the engine's device).
    """

    def __init__(self, library: ReferenceLibrary, num_envs: int, num_views: int = 1, device="cpu"):
        self.lib, self.num_envs, self.num_views = library, num_envs, num_views
        self.kset, self.control_hz = library.kset, library.control_hz
        self.device = torch.device(device)
        library.to(self.device)
        self.offsets = library.offsets
        self.clip = torch.zeros(num_envs, dtype=torch.long, device=self.device)
        self.views: EpisodeViews | None = None
        self.initial_state_sources: list[str] = []  # per clip, set by initial_states()
        self._kp3d: torch.Tensor | None = None  # [C, Tmax, K, 3] padded 3D keypoints, on first use

    @property
    def num_start_frames(self) -> int:
        return self.lib.total_frames

    def valid_starts(self) -> torch.Tensor:
        starts = torch.ones(self.lib.total_frames, dtype=torch.bool)
        starts[self.lib.offsets + self.lib.lengths - 1] = False  # the last frame has no future
        return starts

    def initial_states(
        self, template: SimState, character, mode: str = "auto", level_feet: bool = False
    ) -> SimState:
        from mimic2dm.tasks.tracking2d.initial import initial_state_sources, initial_states

        self.initial_state_sources = initial_state_sources(self.lib, character, mode)
        return initial_states(self.lib, template, character, mode, level_feet)

    def begin(self, env_ids, starts, gen, view_ids=None) -> torch.Tensor:
        starts = starts.to(self.device)
        clip = torch.searchsorted(self.offsets, starts, right=True) - 1
        views = self.lib.episode_views(clip, gen, self.num_views, view_ids)
        views = EpisodeViews(**{k: v.to(self.device) for k, v in vars(views).items()})
        self.clip[env_ids] = clip
        if self.views is None:
            if env_ids.numel() != self.num_envs:
                raise ValueError("ClipReference: the first episodes must start in every env")
            self.views = views
        else:
            for name, v in vars(views).items():
                getattr(self.views, name)[env_ids] = v
        return starts - self.offsets[clip]

    def global_frame(self, env_ids, frames) -> torch.Tensor:
        return self.offsets[self.clip[env_ids]] + frames

    def _clamp(self, frames):
        last = self.views.length - 1
        return torch.minimum(frames, last if frames.dim() == 1 else last[:, None])

    def keypoints(self, frames):
        f = self._clamp(frames)
        v = self.views
        return gather(v.uv, f), gather(v.mask, f), gather(v.root, f)

    def cameras(self, frames):
        f = self._clamp(frames)
        v = self.views
        return gather(v.cam_R, f), gather(v.cam_t, f), gather(v.intrinsics, f)

    def heights(self):
        return self.views.height

    def at_end(self, frames):
        return frames >= self.views.length - 1

    def objects(self, frames):
        if not self.lib.has_object_track:
            return None
        f = self._clamp(frames)
        return gather(self.views.obj_uv, f), gather(self.views.obj_valid, f)

    def clip_of(self, env_ids: torch.Tensor) -> torch.Tensor:
        """``[E]`` clip index of each env's episode."""
        return self.clip[env_ids]

    def keypoints3d(self, frames: torch.Tensor) -> torch.Tensor:
        """The episodes' clips' 3D keypoints at per-env ``frames [N, n]`` -> ``[N, n, K, 3]``
        (frames past a clip's end read its last frame; privileged teacher observations).

        Raises:
            ValueError: a clip has no 3D keypoints (naming it).
        """
        if self._kp3d is None:
            missing = [c.name for c in self.lib.clips if c.keypoints3d is None]
            if missing:
                raise ValueError(f"task.privileged_3d needs clips with 3D keypoints; {', '.join(missing)} have none")  # fmt: skip
            K = self.kset.num_keypoints
            kp = torch.zeros(self.lib.num_clips, self.lib.max_len, K, 3)
            for c, clip in enumerate(self.lib.clips):
                kp[c, : clip.num_frames] = clip.keypoints3d
            self._kp3d = kp.to(self.device)
        last = self.lib.lengths.to(self.device)[self.clip] - 1
        return self._kp3d[self.clip[:, None], torch.minimum(frames, last[:, None])]

    def episode_state(self) -> dict:
        return {
            "clip": self.clip.clone(),
            "views": {k: v.clone() for k, v in vars(self.views).items()},
        }

    def load_episode_state(self, d: dict) -> None:
        self.clip.copy_(d["clip"])
        for k, v in d["views"].items():  # checkpoints of older code lack the object track
            setattr(self.views, k, v.clone().to(self.device))


class StreamingReference(ReferenceSource):
    """2D frames pushed at run time, the same for every env unless pushed per env.

    Args:
        keypoint_set: the keypoint set of the pushed frames.
        num_envs, num_views: ``N`` and ``V``.
        camera: ``(R [V, 3, 3], t [V, 3], intrinsics [V, 4])`` the views' (static) cameras.
        image_height: pixels.
        control_hz: rate of the pushed frames (the task's control rate).
        capacity: frames kept (older ones are dropped).
    """

    replays_starts = False

    def __init__(self, keypoint_set: str, num_envs: int, num_views: int, camera, image_height: float,
                 control_hz: float = 30.0, capacity: int = 64, device="cpu"):  # fmt: skip
        self.kset = load_keypoint_set(keypoint_set)
        self.num_envs, self.num_views, self.control_hz = num_envs, num_views, control_hz
        self.capacity, self.device = int(capacity), torch.device(device)
        N, V, C, K = num_envs, num_views, self.capacity, self.kset.num_keypoints
        R, t, k = (torch.as_tensor(x, dtype=torch.float32, device=self.device) for x in camera)
        if R.shape != (V, 3, 3) or t.shape != (V, 3) or k.shape != (V, 4):
            raise ValueError(f"StreamingReference camera: expected R [{V}, 3, 3], t [{V}, 3], intrinsics "
                             f"[{V}, 4]; got {list(R.shape)}, {list(t.shape)}, {list(k.shape)}")  # fmt: skip
        self.R, self.t, self.k = (x.expand(N, *x.shape) for x in (R, t, k))
        self.height = torch.full((N,), float(image_height), device=self.device)
        self.uv = torch.zeros(N, V, C, K, 2, device=self.device)
        self.mask = torch.zeros(N, V, C, K, dtype=torch.bool, device=self.device)
        self.root = torch.zeros(N, V, C, 2, device=self.device)
        self.pushed = 0  # frames pushed so far; frame f lives in slot f % capacity

    def push(self, uv: torch.Tensor, mask: torch.Tensor | None = None) -> int:
        """Append one frame: ``uv [K, 2]``, ``[V, K, 2]`` or ``[N, V, K, 2]`` pixels, ``mask``
        of the same shape without the last axis (default: every finite keypoint).

        Returns:
            The new frame's index.
        """
        N, V, K = self.num_envs, self.num_views, self.kset.num_keypoints
        uv = torch.as_tensor(uv, dtype=torch.float32, device=self.device)
        if uv.shape[-2:] != (K, 2) or uv.dim() > 4:
            raise ValueError(f"StreamingReference.push: uv must be [K, 2], [V, K, 2] or [N, V, K, 2] "
                             f"with K={K}, got {list(uv.shape)}")  # fmt: skip
        m = (
            torch.isfinite(uv).all(-1)
            if mask is None
            else torch.as_tensor(mask, dtype=torch.bool, device=self.device)
        )
        uv, m = uv.nan_to_num(0.0).expand(N, V, K, 2), m.expand(N, V, K)
        slot = self.pushed % self.capacity
        self.uv[:, :, slot], self.mask[:, :, slot] = uv, m
        self.root[:, :, slot] = self._root(
            uv, m, self.root[:, :, (self.pushed - 1) % self.capacity]
        )
        self.pushed += 1
        return self.pushed - 1

    def _root(self, uv, m, prev):
        """``[N, V, 2]``: mean of the root keypoints when all are seen, else of the seen ones,
        else the previous frame's root (a stream cannot interpolate over future frames)."""
        r = list(self.kset.root)
        w_all = m.to(uv.dtype)[..., None]
        any_mean = (uv * w_all).sum(-2) / w_all.sum(-2).clamp_min(1.0)
        root = torch.where(m[..., r].all(-1, keepdim=True), uv[..., r, :].mean(-2), any_mean)
        return torch.where(m.any(-1, keepdim=True), root, prev)

    @property
    def num_start_frames(self) -> int:
        return 1

    def valid_starts(self) -> torch.Tensor:
        return torch.ones(1, dtype=torch.bool)

    def initial_states(
        self, template: SimState, character, mode: str = "auto", level_feet: bool = False
    ) -> SimState:
        return template.repeat(1)  # a stream has no 3D: its episodes start from the default pose

    def begin(self, env_ids, starts, gen, view_ids=None) -> torch.Tensor:
        if self.pushed == 0:
            raise ValueError("StreamingReference: push a frame before starting episodes")
        return torch.full((env_ids.numel(),), self.pushed - 1, dtype=torch.long, device=self.device)

    def global_frame(self, env_ids, frames) -> torch.Tensor:
        return torch.zeros_like(frames)

    def _slots(self, frames):
        oldest = max(self.pushed - self.capacity, 0)
        return frames.clamp(oldest, self.pushed - 1) % self.capacity

    def keypoints(self, frames):
        s = self._slots(frames)
        return gather(self.uv, s), gather(self.mask, s), gather(self.root, s)

    def cameras(self, frames):
        return self.R, self.t, self.k

    def heights(self):
        return self.height

    def at_end(self, frames):
        return torch.zeros_like(frames, dtype=torch.bool)  # a stream has no end: time-outs only

    def episode_state(self) -> dict:
        return {
            "uv": self.uv.clone(),
            "mask": self.mask.clone(),
            "root": self.root.clone(),
            "pushed": self.pushed,
        }

    def load_episode_state(self, d: dict) -> None:
        self.uv, self.mask, self.root = d["uv"].clone(), d["mask"].clone(), d["root"].clone()
        self.pushed = int(d["pushed"])
