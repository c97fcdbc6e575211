"""3D references of the ``tracking3d`` task: :class:`Reference3D`.

A reference file is either a :class:`~mimic2dm.motion.format.Motion3D` (e.g. what
``mimic2dm preprocess`` reconstructs: the Sfv* baseline) or a 2D-motion clip that carries
ground-truth ``keypoints3d`` (synthetic clips: the 3D-GT baseline). Clips are resampled to
the control rate and padded to ``[C, T, K, 3]`` so envs gather their frames at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mimic2dm.engines.base import SimState
from mimic2dm.motion.format import (
    MIN_CONTROL_FRAMES,
    Motion3D,
    MotionFormatError,
    load_motion2d,
    load_motion3d,
    read_kind,
)
from mimic2dm.motion.keypoint_sets import KeypointSet, load_keypoint_set
from mimic2dm.motion.synth import resample


@dataclass
class Clip3D:
    """One reference at the control rate (the attributes the 2D tracker's initial states read).

    Attributes:
        name: file stem; path: the file; kind: ``motion3d`` | ``motion2d``.
        keypoints3d: ``[T, K, 3]`` world keypoints (m).
        init_states: Motion3D files: per-frame states (``root_pos``, ``root_quat``,
            ``root_lin_vel``, ``root_ang_vel``, ``dof_pos``, ``dof_vel``) of
            ``init_character``; None for keypoints only (their poses are fitted by IK).
        object3d: ``[T, 3]`` object position when known.
    """

    name: str
    path: str
    keypoints3d: torch.Tensor
    kind: str
    init_states: dict[str, torch.Tensor] | None = None
    init_character: str | None = None
    object3d: torch.Tensor | None = None

    @property
    def num_frames(self) -> int:
        return int(self.keypoints3d.shape[0])


def _motion3d_clip(m: Motion3D, path: str, control_hz: float, spec) -> Clip3D:
    from mimic2dm.geometry.rotations import state_velocities as velocities

    if m.character != spec.name:
        raise MotionFormatError(
            path, "character", f"is {m.character!r}", f"{spec.name!r} (the run's character)"
        )
    J = spec.num_dof
    if m.dof_pos.shape[1] != J:
        raise MotionFormatError(path, "dof_pos", f"has {m.dof_pos.shape[1]} joint angles per frame",
                                f"{J} ({spec.name}'s dof_names) to start episodes from its states")  # fmt: skip
    q = m.root_quat.copy()
    flips = np.cumprod(np.where((q[1:] * q[:-1]).sum(-1) < 0, -1.0, 1.0))
    q[1:] *= flips[:, None]  # one hemisphere, so that linear resampling stays near the sphere
    t = lambda x: torch.as_tensor(np.ascontiguousarray(x), dtype=torch.float64)  # noqa: E731
    root_pos, dof = (
        t(resample(m.root_pos, m.fps, control_hz)),
        t(resample(m.dof_pos, m.fps, control_hz)),
    )
    q = t(resample(q, m.fps, control_hz))
    q = q / q.norm(dim=-1, keepdim=True)
    if m.keypoints3d is not None:
        if m.keypoint_set != spec.keypoint_set:
            raise MotionFormatError(
                path, "keypoint_set", f"is {m.keypoint_set!r}", f"{spec.keypoint_set!r}"
            )
        kp = t(resample(m.keypoints3d, m.fps, control_hz))
    else:  # joint angles only: the keypoints the engine would read in that pose
        kp = spec.tree.keypoints(spec.site_offsets, root_pos, q, dof)
    lin, ang, dof_vel = velocities(root_pos, q, dof, control_hz)
    states = {"root_pos": root_pos, "root_quat": q, "root_lin_vel": lin, "root_ang_vel": ang,
              "dof_pos": dof, "dof_vel": dof_vel}  # fmt: skip
    obj = None if m.object_pos is None else t(resample(m.object_pos, m.fps, control_hz)).float()
    return Clip3D(Path(path).stem, str(path), kp.float(), "motion3d",
                  {k: v.float() for k, v in states.items()}, m.character, obj)  # fmt: skip


def load_clip3d(path: str | Path, control_hz: float, spec) -> Clip3D:
    """One reference file (Motion3D, or a 2D clip with ``keypoints3d``) at ``control_hz``.

    Raises:
        MotionFormatError: unreadable, another character / keypoint set, no 3D keypoints,
            too short — naming the file and field.
    """
    kind = read_kind(path)
    if kind == "motion3d":
        clip = _motion3d_clip(load_motion3d(path), str(path), control_hz, spec)
    elif kind == "motion2d":
        m = load_motion2d(path)
        if m.keypoints3d is None:
            raise MotionFormatError(path, "keypoints3d", "is missing",
                                    "ground-truth 3D keypoints to track in 3D; for a clip from a video, run "
                                    "`mimic2dm preprocess` and track its DIR/<clip>_motion3d.npz (Sfv*)")  # fmt: skip
        if m.keypoint_set != spec.keypoint_set:
            raise MotionFormatError(
                path, "keypoint_set", f"is {m.keypoint_set!r}", f"{spec.keypoint_set!r}"
            )
        kp = torch.as_tensor(resample(m.keypoints3d, m.fps, control_hz), dtype=torch.float32)
        obj = (
            None
            if m.object3d is None
            else torch.as_tensor(resample(m.object3d, m.fps, control_hz)).float()
        )
        clip = Clip3D(Path(path).stem, str(path), kp, "motion2d", object3d=obj)
    else:
        raise MotionFormatError(path, "kind", f"is {kind!r}", "a motion3d or motion2d archive")
    if clip.num_frames < MIN_CONTROL_FRAMES:
        raise MotionFormatError(path, "keypoints3d", f"has {clip.num_frames} frame(s) at {control_hz:g} Hz",
                                f">= {MIN_CONTROL_FRAMES} frames at the control rate")  # fmt: skip
    return clip


class Reference3D:
    """All 3D reference clips of a run (one keypoint set), at the control rate.

    Attributes:
        clips, kset, control_hz; lengths ``[C]``, offsets ``[C]`` (global frame of each
        clip's first frame), keypoints ``[C, Tmax, K, 3]`` padded with each clip's last frame.
    """

    def __init__(self, clips: list[Clip3D], keypoint_set: str, control_hz: float):
        if not clips:
            raise ValueError("Reference3D: no reference files")
        self.clips, self.control_hz = list(clips), float(control_hz)
        self.kset: KeypointSet = load_keypoint_set(keypoint_set)
        self.lengths = torch.tensor([c.num_frames for c in clips])
        self.offsets = torch.cat(
            [torch.zeros(1, dtype=torch.long), torch.cumsum(self.lengths, 0)[:-1]]
        )
        self.max_len = int(self.lengths.max())
        K = self.kset.num_keypoints
        self.keypoints = torch.zeros(len(clips), self.max_len, K, 3)
        for c, clip in enumerate(clips):
            self.keypoints[c, : clip.num_frames] = clip.keypoints3d
            self.keypoints[c, clip.num_frames :] = clip.keypoints3d[-1]

    @classmethod
    def from_files(cls, paths, control_hz: float, spec) -> Reference3D:
        """The reference files ``paths`` for character ``spec``."""
        return cls([load_clip3d(p, control_hz, spec) for p in paths], spec.keypoint_set, control_hz)

    @property
    def total_frames(self) -> int:
        return int(self.lengths.sum())

    def to(self, device) -> Reference3D:
        self.lengths, self.offsets = self.lengths.to(device), self.offsets.to(device)
        self.keypoints = self.keypoints.to(device)
        return self

    def valid_starts(self) -> torch.Tensor:
        """``[F]`` bool: every frame but each clip's last (it has no future)."""
        ok = torch.ones(self.total_frames, dtype=torch.bool)
        ok[(self.offsets + self.lengths - 1).cpu()] = False
        return ok

    def initial_states(self, template: SimState, spec, mode: str = "auto") -> SimState:
        """One state per global frame ``[F]``, as the 2D tracker fills its buffers
        (:func:`mimic2dm.tasks.tracking2d.initial.initial_states`): a Motion3D's own states,
        else the character's pose fitted to the 3D keypoints (``mode=default_pose``: the
        default pose placed under the reference)."""
        from mimic2dm.tasks.tracking2d.initial import initial_states

        return initial_states(self, template, spec, mode)
