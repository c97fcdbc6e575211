"""Initial states that first fill the ASI buffers (docs/design.md section 7).

Per clip, the first source that applies (``task.initial_state=auto``):

1. ``preprocessed``: the clip's own per-frame initial states (``Motion2D.init_*``,
   written by ``mimic2dm preprocess`` for the same character);
2. ``reference_3d``: the reference's own 3D pose per frame: joint angles and root fitted
   to the clip's 3D keypoints by inverse kinematics on the character's own model
   (:func:`mimic2dm.characters.retarget.fit_keypoints`), velocities by finite
   differences (reference state initialisation);
3. ``default_pose``: the character's default standing pose placed under the reference
   (at the clip's 3D root when known, turned to its heading), moving with its root.

``task.initial_state=default_pose`` forces the last. ASI then replaces these states with
ones the critic rates.

With ``task.initial_ground=true`` (:func:`ground_states`) every state whose collision
geometry reaches into the ground is lifted until its lowest point touches it. Fitted 3D
poses need it: COCO-17 has no toe keypoint, so IK leaves the foot's pitch free and a
box foot's corner can start up to 12 cm deep in the ground (shared CMU clips), which the
first physics step answers with a jump.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from mimic2dm.tasks.tracking2d.reference import ReferenceLibrary

from mimic2dm.engines.base import SimState
from mimic2dm.geometry import rotations as rot
from mimic2dm.motion.keypoint_sets import KeypointSet


def forward_yaw(kp3d: torch.Tensor, kset: KeypointSet) -> torch.Tensor:
    """Yaw ``[...]`` of the body's facing direction from 3D keypoints ``[..., K, 3]``.

    Humans: perpendicular to the hips (left minus right hip, crossed with up).
    Dogs: from the root of the tail to the neck.
    """
    if kset.name == "coco17":
        left = kp3d[..., kset.index("left_hip"), :] - kp3d[..., kset.index("right_hip"), :]
        fwd = torch.stack([left[..., 1], -left[..., 0]], dim=-1)  # left x up, in the ground plane
    else:
        fwd = (kp3d[..., kset.index("neck"), :] - kp3d[..., kset.index("root_of_tail"), :])[..., :2]
    return torch.atan2(fwd[..., 1], fwd[..., 0])


log = logging.getLogger(__name__)

INITIAL_STATE_MODES = ("auto", "default_pose")
FIT_TOLERANCE_M = 1e-3
"""Inverse kinematics stops once every frame's RMS keypoint error is below this (metres)."""
_FIT_CACHE: dict[tuple, dict[str, torch.Tensor]] = {}


def initial_state_sources(library: ReferenceLibrary, spec, mode: str = "auto") -> list[str]:
    """Per clip, where its initial states come from: ``preprocessed``, ``reference_3d`` or
    ``default_pose`` (module docstring); ``spec`` is the simulated character."""
    if mode not in INITIAL_STATE_MODES:
        raise ValueError(
            f"task.initial_state {mode!r} is not one of {', '.join(INITIAL_STATE_MODES)}"
        )
    out = []
    for clip in library.clips:
        if mode == "default_pose":
            out.append("default_pose")
        elif clip.init_states is not None and clip.init_character == spec.name:
            out.append("preprocessed")
        elif clip.keypoints3d is not None and spec.keypoint_set == library.kset.name:
            out.append("reference_3d")
        else:
            out.append("default_pose")
    return out


def fit_reference_poses(
    kp3d: torch.Tensor, spec, fps: float, level_feet: bool = False
) -> dict[str, torch.Tensor]:
    """The character's own pose and velocities per frame, fitted to 3D keypoints.

    Args:
        kp3d: ``[T, K, 3]`` keypoints of ``spec``'s keypoint set (metres, z up).
        spec: the character.
        fps: frame rate of ``kp3d`` (for the finite differences).
        level_feet: turn the feet flat (:func:`mimic2dm.characters.retarget.level_feet`)
            before the finite differences.

    Returns:
        ``root_pos [T, 3]``, ``root_quat [T, 4]`` xyzw, ``root_lin_vel``/``root_ang_vel
        [T, 3]`` (world), ``dof_pos``/``dof_vel [T, J]`` (float32). Cached per clip.
    """
    key = (
        spec.name,
        float(fps),
        bool(level_feet),
        tuple(kp3d.shape),
        hash(kp3d.detach().cpu().numpy().tobytes()),
    )
    if key in _FIT_CACHE:
        return _FIT_CACHE[key]
    disk = _disk_cache_path(kp3d, spec, fps, level_feet)
    out = _load_cached(disk)
    if out is None:
        t0 = time.perf_counter()
        log.info("initial states: fitting the %s to %d reference frames (inverse kinematics; "
                 "cached in %s for the next start)", spec.name, kp3d.shape[0], disk.parent)  # fmt: skip
        out = _fit(kp3d, spec, fps, level_feet)
        log.info(
            "initial states: %d frames fitted in %.1f s", kp3d.shape[0], time.perf_counter() - t0
        )
        _save_cached(disk, out)
    _FIT_CACHE[key] = out
    return out


def _fit(kp3d: torch.Tensor, spec, fps: float, level_feet: bool) -> dict[str, torch.Tensor]:
    from mimic2dm.characters.retarget import fit_keypoints
    from mimic2dm.characters.retarget import level_feet as level
    from mimic2dm.geometry.rotations import state_velocities as velocities

    target = kp3d.detach().cpu().double()
    q = fit_keypoints(spec, target, iters=25, tol=FIT_TOLERANCE_M)
    # frames stuck in a local minimum (e.g. mid-flip) restart from a converged neighbour
    tried = torch.full((q.shape[0],), -1, dtype=torch.long)  # the neighbour a frame restarted from
    for _ in range(3):
        err = _frame_error(spec, q, target)
        bad = err > 20 * FIT_TOLERANCE_M
        if not bad.any() or bad.all():
            break
        good = torch.nonzero(~bad).flatten()
        bad_idx = torch.nonzero(bad).flatten()
        near = good[(bad_idx[:, None] - good[None]).abs().argmin(1)]
        # a restart from the same neighbour (whose pose a good frame keeps) gives the same
        # answer again: only new pairs are solved (most of a long clip the model cannot fit
        # to 2 cm would otherwise be solved three times over)
        new = tried[bad_idx] != near
        if not new.any():
            break
        bad_idx, near = bad_idx[new], near[new]
        tried[bad_idx] = near
        redo = fit_keypoints(spec, target[bad_idx], iters=40, tol=FIT_TOLERANCE_M, init=q[near])
        better = _frame_error(spec, redo, target[bad_idx]) < err[bad_idx]
        q[bad_idx[better]] = redo[better]
    if level_feet:
        q = level(spec, q)
    quat = _continuous(torch.cat([q[:, 4:7], q[:, 3:4]], dim=-1))  # wxyz -> xyzw
    lin, ang, dof_vel = velocities(q[:, :3], quat, q[:, 7:], fps)
    out = {"root_pos": q[:, :3], "root_quat": quat, "root_lin_vel": lin, "root_ang_vel": ang,
           "dof_pos": q[:, 7:], "dof_vel": dof_vel}  # fmt: skip
    return {k: v.float() for k, v in out.items()}


CACHE_VERSION = 2
"""Bumped whenever the fit changes, so that no state of an older fit is read back."""


def cache_dir() -> Path:
    """Where fitted initial states are kept between runs: ``$MIMIC2DM_CACHE/initial_states``,
    else ``$XDG_CACHE_HOME/mimic2dm/...``, else ``~/.cache/mimic2dm/...``."""
    root = os.environ.get("MIMIC2DM_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "mimic2dm"
    )
    return Path(root) / "initial_states"


def _disk_cache_path(kp3d: torch.Tensor, spec, fps: float, level_feet: bool) -> Path:
    """A file named by everything the fit depends on: the keypoints, the character's model
    (its sites, joint ranges and default pose), the rate, ``level_feet`` and the fit's version."""
    h = hashlib.sha256(np.ascontiguousarray(kp3d.detach().cpu().numpy()).tobytes())
    model = (
        spec.site_offsets,
        np.asarray(spec.joint_range).tolist(),
        list(spec.default_pose.dof_pos),
    )
    h.update(
        repr(
            (model, spec.name, float(fps), bool(level_feet), CACHE_VERSION, FIT_TOLERANCE_M)
        ).encode()
    )
    return cache_dir() / f"{spec.name}_{kp3d.shape[0]}f_{h.hexdigest()[:24]}.pt"


def _code_digest() -> bytes:
    """The source of the fit (this module, the IK, the kinematics, the rotations): a change
    to any of them gives new cache files instead of stale states."""
    import mimic2dm.characters.kinematics as kinematics
    import mimic2dm.characters.retarget as retarget
    import mimic2dm.geometry.rotations as rotations

    h = hashlib.sha256()
    for path in (retarget.__file__, kinematics.__file__, rotations.__file__, __file__):
        h.update(Path(path).read_bytes())
    return h.digest()


def _load_cached(path: Path) -> dict[str, torch.Tensor] | None:
    try:
        out = torch.load(path, map_location="cpu", weights_only=True)
    except (OSError, RuntimeError, ValueError, EOFError):
        return None  # absent, unreadable or half-written elsewhere: fit again
    if not isinstance(out, dict) or set(out) != set(STATE_KEYS):
        return None
    log.info("initial states: %s (cached fit)", path)
    return out


def _save_cached(path: Path, out: dict[str, torch.Tensor]) -> None:
    from mimic2dm.utils.checkpoint import atomic_torch_save

    try:
        atomic_torch_save(out, path)
    except OSError as e:  # a read-only home: the next start fits again
        log.warning("initial states: not cached (%s)", e)


STATE_KEYS = ("root_pos", "root_quat", "root_lin_vel", "root_ang_vel", "dof_pos", "dof_vel")


def _frame_error(spec, q: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``[T]`` largest keypoint error (m) of poses ``q [T, 7 + J]`` (wxyz) against ``target``."""
    kp = spec.tree.keypoints(
        spec.site_offsets, q[:, :3], torch.cat([q[:, 4:7], q[:, 3:4]], -1), q[:, 7:]
    )
    return (kp - target).norm(dim=-1).max(dim=1).values


def _continuous(q: torch.Tensor) -> torch.Tensor:
    """Quaternions ``[T, 4]`` with signs flipped so consecutive ones agree (finite differences)."""
    sign = torch.ones(q.shape[0], dtype=q.dtype)
    dots = (q[1:] * q[:-1]).sum(-1)
    sign[1:] = torch.cumprod(torch.where(dots < 0, -1.0, 1.0).to(q.dtype), 0)
    return q * sign[:, None]


def _fill_poses(
    library: ReferenceLibrary, spec, out: SimState, sources: list[str], level_feet: bool = False
) -> None:
    """Overwrite the character part of ``out`` with preprocessed or fitted poses."""
    for c, (clip, src) in enumerate(zip(library.clips, sources, strict=True)):
        if src == "default_pose":
            continue
        if src == "preprocessed":
            st = clip.init_states
            if st["dof_pos"].shape[1] != out.dof_pos.shape[1]:
                raise ValueError(f"{clip.name}: init_dof_pos has {st['dof_pos'].shape[1]} joints, "
                                 f"{spec.name} has {out.dof_pos.shape[1]}")  # fmt: skip
        else:
            st = fit_reference_poses(clip.keypoints3d, spec, library.control_hz, level_feet)
        sl = slice(int(library.offsets[c]), int(library.offsets[c] + library.lengths[c]))
        out.root_pos[sl], out.root_rot[sl] = st["root_pos"], st["root_quat"]
        out.root_lin_vel[sl], out.root_ang_vel[sl] = st["root_lin_vel"], st["root_ang_vel"]
        out.dof_pos[sl], out.dof_vel[sl] = st["dof_pos"], st["dof_vel"]


def initial_states(
    library: ReferenceLibrary,
    template: SimState,
    spec,
    mode: str = "auto",
    level_feet: bool = False,
) -> SimState:
    """One state per global reference frame, from the first source of each clip that
    applies (module docstring; :func:`initial_state_sources`).

    Default-pose states are placed under the reference and move with the horizontal
    velocity of its root.

    Args:
        library: the reference clips.
        template: the engine's default state ``[1]`` (character and objects at rest).
        spec: the character (for its keypoints in the default pose).
        mode: ``auto`` (preprocessed > reference 3D > default pose) or ``default_pose``.
        level_feet: fitted (``reference_3d``) poses get flat feet (``task.initial_level_feet``).

    Returns:
        :class:`SimState` with ``library.total_frames`` rows.
    """
    sources = initial_state_sources(library, spec, mode)
    F = library.total_frames
    out = template.repeat(F)
    pose = spec.default_pose
    root_pos = torch.tensor(pose.root_pos, dtype=torch.float32)
    root_quat = torch.tensor(pose.root_quat, dtype=torch.float32)
    kp0 = spec.tree.keypoints(spec.site_offsets, root_pos.double(), root_quat.double(),
                              torch.tensor(pose.dof_pos)).float()  # fmt: skip
    yaw0 = forward_yaw(kp0, library.kset)
    root_kp0 = kp0[list(library.kset.root)].mean(0)
    z = torch.tensor([0.0, 0.0, 1.0])
    missing = [c.name for c in library.clips if c.keypoints3d is None and c.init_states is None]
    if missing and mode == "auto":
        warnings.warn(f"clips {missing} carry no 3D keypoints nor initial states: ASI starts them from the "
                      "default pose at the origin; pass preprocessed initial states instead", stacklevel=2)  # fmt: skip
    for c, clip in enumerate(library.clips):
        if clip.keypoints3d is None:
            continue
        sl = slice(int(library.offsets[c]), int(library.offsets[c] + library.lengths[c]))
        kp = clip.keypoints3d
        dyaw = forward_yaw(kp, library.kset) - yaw0
        q = rot.quat_mul(
            rot.quat_from_axis_angle(z.expand(kp.shape[0], 3), dyaw),
            root_quat.expand(kp.shape[0], 4),
        )
        # put the default pose's keypoint root over the reference root, keep standing height
        offset = rot.quat_rotate(q, (root_pos - root_kp0).expand(kp.shape[0], 3))
        target = kp[:, list(library.kset.root)].mean(1)
        pos = target + offset
        pos[:, 2] = root_pos[2]
        out.root_pos[sl], out.root_rot[sl] = pos, q
        # move with the reference from the first step (finite differences of its root)
        vel = (
            torch.gradient(target, spacing=1.0 / library.control_hz, dim=0)[0]
            if kp.shape[0] > 1
            else torch.zeros_like(target)
        )
        vel[:, 2] = 0.0
        out.root_lin_vel[sl] = vel
    _fill_poses(library, spec, out, sources, level_feet)
    _place_object(library, out)
    return out


def _place_object(library: ReferenceLibrary, out: SimState) -> None:
    """Put the first object (the ball) where the clip's 3D object track has it, rolling with
    the track's velocity (spin ``z x v / r`` with ``r`` its centre height: rolling without
    slipping, so it does not slide and lose speed to friction); clips without one keep the
    engine's default object placement."""
    if out.object_pos.shape[1] == 0:
        return
    for c, clip in enumerate(library.clips):
        if clip.object3d is None:
            continue
        sl = slice(int(library.offsets[c]), int(library.offsets[c] + library.lengths[c]))
        p = clip.object3d
        out.object_pos[sl, 0] = p
        if p.shape[0] > 1:
            v = torch.gradient(p, spacing=1.0 / library.control_hz, dim=0)[0]
            out.object_lin_vel[sl, 0] = v
            r = p[:, 2:3].clamp_min(1e-2)
            spin = torch.stack([-v[:, 1], v[:, 0], torch.zeros_like(v[:, 0])], dim=-1) / r
            out.object_ang_vel[sl, 0] = spin


def ground_states_logged(states: SimState, spec, logger) -> SimState:
    """:func:`ground_states`, logging how many states were lifted and by how much at most."""
    out, lift = ground_states(states, spec)
    logger.info("initial states: %d of %d lifted out of the ground (up to %.3f m)",
                int((lift > 0).sum()), lift.numel(), float(lift.max()) if lift.numel() else 0.0)  # fmt: skip
    return out


def ground_states(states: SimState, spec) -> tuple[SimState, torch.Tensor]:
    """``states`` with each root lifted so that no collision geometry starts below the
    ground (states above it are unchanged); returns them and the lift per state ``[F]`` (m).
    """
    from mimic2dm.characters.retarget import lowest_points

    low = lowest_points(spec, states.root_pos, states.root_rot, states.dof_pos)
    lift = torch.from_numpy(low).to(states.root_pos).neg().clamp_min(0.0)
    out = states.clone()
    out.root_pos[:, 2] += lift
    return out, lift
