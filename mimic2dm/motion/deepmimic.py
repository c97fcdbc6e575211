"""DeepMimic motion clips (``.txt``) and character files, read into the shared mocap layouts.

A DeepMimic character file is JSON whose ``Skeleton.Joints`` list gives each joint's
``Name``, ``Type`` (``none`` for the root, ``spherical``, ``revolute``, ``fixed``),
``Parent`` and ``AttachX/Y/Z`` (offset from the parent joint, metres, y-up). A motion
file is JSON with ``Loop`` and ``Frames``: one row per frame, ``[duration, root position
(3), root rotation (4, wxyz), then per non-root joint in the character file's order a
quaternion (wxyz) for a spherical joint, one angle about the joint's z axis for a revolute
one, nothing for a fixed one]``. Everything is y-up.

Two characters are recognised by their joint names:

- ``humanoid3d`` -> the ``cmu_*.npz`` layout (:func:`humanoid_arrays`): the same 15 bodies
  as the CMU clips, local rotations xyzw, z-up;
- ``dog3d`` -> the ``dog_*.npz`` layout (:func:`dog_arrays`): the 27 AI4Animation joint
  names with global positions, z-up (:data:`DOG3D_TO_MOCAP` says where each comes from).

Pure numpy/scipy: the characters package reads the result like any shared clip.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.spatial.transform import Rotation

from mimic2dm.motion.format import MotionFormatError
from mimic2dm.motion.loaders import Y_UP_TO_Z_UP

JOINT_DOFS = {"none": 7, "spherical": 4, "revolute": 1, "fixed": 0}
"""Numbers per joint in a frame row (the root's 7: position and quaternion)."""

HUMANOID3D_TO_CMU: dict[str, str] = {
    "pelvis": "root", "torso": "chest", "head": "neck",
    "right_upper_arm": "right_shoulder", "right_lower_arm": "right_elbow", "right_hand": "right_wrist",
    "left_upper_arm": "left_shoulder", "left_lower_arm": "left_elbow", "left_hand": "left_wrist",
    "right_thigh": "right_hip", "right_shin": "right_knee", "right_foot": "right_ankle",
    "left_thigh": "left_hip", "left_shin": "left_knee", "left_foot": "left_ankle",
}  # fmt: skip
"""CMU clip body (``cmu_*.npz`` ``node_names`` order) -> humanoid3d joint: a body's origin is its joint."""

CMU_PARENTS = (-1, 0, 1, 1, 3, 4, 1, 6, 7, 0, 9, 10, 0, 12, 13)
"""``parents`` of the CMU clips (the 15-body humanoid tree)."""

DOG3D_TO_MOCAP: dict[str, tuple[str, tuple[float, float, float]]] = {
    "Hips": ("root", (0, 0, 0)), "Spine": ("spine0", (0, 0, 0)), "Spine1": ("spine1", (0, 0, 0)),
    "Neck": ("neck", (0, 0, 0)), "Head": ("head", (0, 0, 0)),
    # dog3d's head box spans y -0.135..0.055 in the head frame, whose -y is the snout
    "HeadSite": ("head", (0.08, -0.135, 0.0)),  # front face of the head box: the snout tip
    "LeftShoulder": ("left_shoulder", (0, 0, 0)),  # no scapula in dog3d: at the shoulder joint
    "LeftArm": ("left_shoulder", (0, 0, 0)), "LeftForeArm": ("left_forearm", (0, 0, 0)),
    "LeftHand": ("left_hand", (0, 0, 0)), "LeftHandSite": ("left_finger", (0, 0, 0)),
    "RightShoulder": ("right_shoulder", (0, 0, 0)),
    "RightArm": ("right_shoulder", (0, 0, 0)), "RightForeArm": ("right_forearm", (0, 0, 0)),
    "RightHand": ("right_hand", (0, 0, 0)), "RightHandSite": ("right_finger", (0, 0, 0)),
    "LeftUpLeg": ("left_upper_leg", (0, 0, 0)), "LeftLeg": ("left_leg", (0, 0, 0)),
    "LeftFoot": ("left_foot", (0, 0, 0)), "LeftFootSite": ("left_toe", (0, 0, 0)),
    "RightUpLeg": ("right_upper_leg", (0, 0, 0)), "RightLeg": ("right_leg", (0, 0, 0)),
    "RightFoot": ("right_foot", (0, 0, 0)), "RightFootSite": ("right_toe", (0, 0, 0)),
    "Tail": ("tail0", (0, 0, 0)), "Tail1": ("tail1", (0, 0, 0)),
    "Tail1Site": ("tail1", (-0.2, 0.0, 0.0)),  # tail tip: one tail0->tail1 length further
}  # fmt: skip
"""``dog_*.npz`` joint (AI4Animation names, their order) -> (dog3d joint, point in that joint's
frame, metres, y-up). The dog3d toes/fingers are its end effectors, so they stand in for the
``*Site`` paw tips."""

_A = Rotation.from_matrix(Y_UP_TO_Z_UP)


def _fail(path, field: str, problem: str, expected: str):
    raise MotionFormatError(path, field, problem, expected)


@dataclass(frozen=True)
class DeepMimicCharacter:
    """The joint tree of a DeepMimic character file.

    Attributes:
        names, types, parents: per joint, file order (joint 0 is the root).
        offsets: ``[J, 3]`` attachment to the parent joint (metres, y-up).
        source: file read.
    """

    names: tuple[str, ...]
    types: tuple[str, ...]
    parents: tuple[int, ...]
    offsets: np.ndarray
    source: str = ""

    @property
    def frame_width(self) -> int:
        """Numbers per motion frame: the duration plus each joint's values."""
        return 1 + sum(JOINT_DOFS[t] for t in self.types)

    @property
    def kind(self) -> str | None:
        """``humanoid3d``, ``dog3d`` or None (another skeleton)."""
        names = set(self.names)
        if names == set(HUMANOID3D_TO_CMU.values()):
            return "humanoid3d"
        if names == {j for j, _ in DOG3D_TO_MOCAP.values()}:
            return "dog3d"
        return None


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        _fail(path, "(file)", "does not exist", f"a DeepMimic {what} (JSON)")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        _fail(path, "(file)", f"is not valid JSON ({e})", f"a DeepMimic {what} (JSON)")


def _joint(path, i: int, j: Any) -> tuple[str, str, int, list[float]]:
    field = f"Skeleton.Joints[{i}]"
    keys = ("Name", "Type", "Parent", "AttachX", "AttachY", "AttachZ")
    if not isinstance(j, dict) or any(k not in j for k in keys):
        _fail(path, field, "lacks a key", "Name, Type, Parent, AttachX/Y/Z per joint")
    if j["Type"] not in JOINT_DOFS or (j["Type"] == "none") != (i == 0):
        _fail(path, f"{field}.Type", f"is {j['Type']!r}", "'none' for joint 0 (the root), else spherical, revolute or fixed")  # fmt: skip
    if not (
        isinstance(j["Parent"], int) and (j["Parent"] == -1 if i == 0 else 0 <= j["Parent"] < i)
    ):
        _fail(path, f"{field}.Parent", f"is {j['Parent']!r}", "-1 for the root, else the index of an earlier joint")  # fmt: skip
    if any(abs(float(j.get(f"AttachTheta{a}", 0.0))) > 1e-9 for a in "XYZ"):
        _fail(path, f"{field}.AttachTheta", "is not zero", "joint frames aligned with their parent (AttachTheta 0)")  # fmt: skip
    return str(j["Name"]), j["Type"], int(j["Parent"]), [float(j[f"Attach{a}"]) for a in "XYZ"]


def load_character(path: str | os.PathLike) -> DeepMimicCharacter:
    """Read a DeepMimic character file (``Skeleton.Joints``).

    Raises:
        MotionFormatError: naming the file and the joint field that is wrong.
    """
    data = _read_json(Path(path), "character file")
    joints = data.get("Skeleton", {}).get("Joints") if isinstance(data, dict) else None
    if not isinstance(joints, list) or not joints:
        _fail(path, "Skeleton.Joints", "is missing or empty", "a list of joints (root first)")
    rows = [_joint(path, i, j) for i, j in enumerate(joints)]
    return DeepMimicCharacter(
        names=tuple(r[0] for r in rows),
        types=tuple(r[1] for r in rows),
        parents=tuple(r[2] for r in rows),
        offsets=np.array([r[3] for r in rows], dtype=np.float64),
        source=str(path),
    )


def load_frames(path: str | os.PathLike, char: DeepMimicCharacter) -> tuple[np.ndarray, str]:
    """``(frames [N, width], loop)`` of a DeepMimic motion file, checked against ``char``."""
    data = _read_json(Path(path), "motion file")
    frames = data.get("Frames") if isinstance(data, dict) else None
    if not isinstance(frames, list) or not frames:
        _fail(path, "Frames", "is missing or empty", "a list of frames [duration, root pos, root rot, joints...]")  # fmt: skip
    width = char.frame_width
    for i, row in enumerate(frames):
        if not isinstance(row, list) or len(row) != width:
            n = len(row) if isinstance(row, list) else type(row).__name__
            _fail(path, f"Frames[{i}]", f"has {n} numbers", f"{width} numbers a frame for {Path(char.source).name} ({len(char.names)} joints)")  # fmt: skip
    try:
        a = np.array(frames, dtype=np.float64)
    except (TypeError, ValueError):
        _fail(path, "Frames", "holds a non-number", "numbers only")
    if not np.isfinite(a).all():
        i = int(np.argwhere(~np.isfinite(a))[0, 0])
        _fail(path, f"Frames[{i}]", "has a non-finite number", "finite numbers")
    return a, str(data.get("Loop", "none"))


def frame_rate(path, durations: np.ndarray, fps: float | None) -> tuple[float, bool]:
    """``(fps, uniform)``: ``fps`` or ``1 / median duration``, and whether the frames are evenly
    spaced at it (else they are resampled). The last frame's duration is not used (often 0)."""
    d = durations[:-1] if len(durations) > 1 else durations
    if (d <= 0).any():
        i = int(np.flatnonzero(d <= 0)[0])
        _fail(path, f"Frames[{i}][0]", f"is a duration of {d[i]:g} s", "frame durations > 0 (all but the last frame)")  # fmt: skip
    if fps is not None and not (np.isfinite(fps) and fps > 0):
        _fail(path, "fps", f"is {fps}", "a frame rate > 0 (--fps)")
    rate = 1.0 / float(np.median(d))
    if abs(rate - round(rate)) < 1e-3 * rate:  # 0.033332 s is 30 fps written with 6 digits
        rate = float(round(rate))
    uniform = bool(np.abs(d * rate - 1.0).max() < 1e-2)
    if fps is None:
        return rate, uniform
    return float(fps), uniform and abs(fps - rate) < 1e-6 * rate


def local_rotations(char: DeepMimicCharacter, frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(root_pos [N, 3], quat [N, J, 4] xyzw)``: each joint's rotation in its parent's frame
    (the root's in the world), y-up; revolute joints turn about their z axis, fixed ones not."""
    n = len(frames)
    quat = np.zeros((n, len(char.names), 4))
    quat[..., 3] = 1.0
    quat[:, 0] = frames[:, [5, 6, 7, 4]]  # wxyz -> xyzw
    col = 8
    for j, kind in enumerate(char.types[1:], 1):
        if kind == "spherical":
            quat[:, j] = frames[:, [col + 1, col + 2, col + 3, col]]
        elif kind == "revolute":
            half = 0.5 * frames[:, col]
            quat[:, j, 2], quat[:, j, 3] = np.sin(half), np.cos(half)
        col += JOINT_DOFS[kind]
    norm = np.linalg.norm(quat, axis=-1, keepdims=True)
    return frames[:, 1:4].copy(), quat / np.maximum(norm, 1e-12)


def resample(times: np.ndarray, pos: np.ndarray, quat: np.ndarray, fps: float):
    """Positions (linear) and rotations (slerp) at ``0, 1/fps, ...`` up to ``times[-1]``."""
    t = np.arange(int(np.floor(times[-1] * fps + 1e-6)) + 1) / fps
    i = np.clip(np.searchsorted(times, t, side="right") - 1, 0, len(times) - 2)
    w = np.clip((t - times[i]) / np.maximum(times[i + 1] - times[i], 1e-12), 0.0, 1.0)
    p = pos[i] + w[:, None] * (pos[i + 1] - pos[i])
    shape = quat.shape[1:-1]
    a = Rotation.from_quat(quat[i].reshape(-1, 4))
    b = Rotation.from_quat(quat[i + 1].reshape(-1, 4))
    step = (a.inv() * b).as_rotvec() * np.repeat(w, int(np.prod(shape)))[:, None]
    q = (a * Rotation.from_rotvec(step)).as_quat().reshape(len(t), *shape, 4)
    return p, q


def global_transforms(char: DeepMimicCharacter, root_pos: np.ndarray, quat: np.ndarray):
    """``(pos [N, J, 3], rot)`` of every joint in the (y-up) world; ``rot`` is a list of
    per-joint :class:`Rotation` stacks over the frames."""
    n, nj = quat.shape[:2]
    pos = np.zeros((n, nj, 3))
    rot: list[Rotation] = []
    for j in range(nj):
        local = Rotation.from_quat(quat[:, j])
        p = char.parents[j]
        if p < 0:
            pos[:, j], g = root_pos, local
        else:
            pos[:, j], g = pos[:, p] + rot[p].apply(char.offsets[j]), rot[p] * local
        rot.append(g)
    return pos, rot


def humanoid_arrays(char: DeepMimicCharacter, root_pos, quat, fps: float) -> dict[str, np.ndarray]:
    """The ``cmu_*.npz`` arrays of a humanoid3d motion: bodies in CMU order, y-up -> z-up.

    The world and every body frame turn by the same rotation ``A`` ((x, y, z) -> (x, -z, y)),
    so a local rotation ``q`` becomes ``A q A^-1`` and an offset ``o`` becomes ``A o``. Row 0
    of ``local_translation`` (the root's, unused by forward kinematics) is the first frame's
    root height.
    """
    idx = [char.names.index(HUMANOID3D_TO_CMU[b]) for b in HUMANOID3D_TO_CMU]
    parents = tuple(-1 if char.parents[i] < 0 else idx.index(char.parents[i]) for i in idx)
    if parents != CMU_PARENTS:
        _fail(char.source, "Skeleton.Joints", f"form the tree {parents}", f"the humanoid3d tree {CMU_PARENTS}")  # fmt: skip
    n = len(quat)
    q = Rotation.from_quat(quat[:, idx].reshape(-1, 4))
    local = (_A * q * _A.inv()).as_quat().reshape(n, len(idx), 4)
    local[local[..., 3] < 0] *= -1.0  # one hemisphere, as in the CMU clips
    root = root_pos @ Y_UP_TO_Z_UP.T
    offsets = char.offsets[idx] @ Y_UP_TO_Z_UP.T
    offsets[0] = (0.0, 0.0, root[0, 2])
    return {
        "node_names": np.array(list(HUMANOID3D_TO_CMU)),
        "parents": np.array(CMU_PARENTS, dtype=np.int64),
        "local_translation": offsets.astype(np.float32),
        "local_rotation": local.astype(np.float32),
        "root_translation": root.astype(np.float32),
        "fps": np.array(fps, dtype=np.float32),
    }


def dog_arrays(char: DeepMimicCharacter, root_pos, quat, fps: float) -> dict[str, np.ndarray]:
    """The ``dog_*.npz`` arrays of a dog3d motion: 27 AI4Animation joints (:data:`DOG3D_TO_MOCAP`)
    as global positions, y-up -> z-up (the dog3d dog faces +x, the AI4Animation one -x; positions
    carry no facing convention, so none is imposed)."""
    pos, rot = global_transforms(char, root_pos, quat)
    out = []
    for joint, point in DOG3D_TO_MOCAP.values():
        j = char.names.index(joint)
        out.append(pos[:, j] + rot[j].apply(np.asarray(point, dtype=np.float64)))
    positions = np.stack(out, axis=1) @ Y_UP_TO_Z_UP.T
    return {
        "joint_names": np.array(list(DOG3D_TO_MOCAP)),
        "positions": positions.astype(np.float32),
        "fps": np.array(fps, dtype=np.float32),
    }


def find_character_file(clip: Path, width: int) -> Path | None:
    """The character file in a ``characters/`` folder beside the clip (or one level up) whose
    frame width is ``width``; None when there is none or more than one."""
    found = []
    for folder in (clip.parent / "characters", clip.parent.parent / "characters"):
        for f in sorted(folder.glob("*.txt")) if folder.is_dir() else ():
            try:
                if load_character(f).frame_width == width:
                    found.append(f)
            except MotionFormatError:
                continue
    return found[0] if len(found) == 1 else None


def frame_width(path: str | os.PathLike) -> int:
    """Numbers in the first frame of a motion file (picks the character file)."""
    data = _read_json(Path(path), "motion file")
    frames = data.get("Frames") if isinstance(data, dict) else None
    if not isinstance(frames, list) or not frames or not isinstance(frames[0], list):
        _fail(path, "Frames", "is missing or empty", "a list of frames [duration, root pos, root rot, joints...]")  # fmt: skip
    return len(frames[0])


def import_deepmimic(
    path: str | os.PathLike, character_file: str | os.PathLike, fps: float | None = None
) -> tuple[str, dict[str, np.ndarray], dict[str, Any]]:
    """Convert a DeepMimic motion into the shared mocap layout of its character.

    Args:
        path: the motion ``.txt``; character_file: its character ``.txt``.
        fps: output frame rate; default the file's (``1 / median frame duration``, rounded
            to an integer within 0.1%). Frames are resampled (linear positions, slerp
            rotations, by the durations' time line) only when they are not evenly spaced at
            that rate or ``fps`` differs from it.

    Returns:
        ``(kind, arrays, info)``: ``"humanoid3d"`` with the ``cmu_*.npz`` arrays or
        ``"dog3d"`` with the ``dog_*.npz`` arrays; ``info`` has ``loop``, ``fps``,
        ``source_frames``, ``resampled``.

    Raises:
        MotionFormatError: naming the file and field (frame width, durations, joints...).
    """
    char = load_character(character_file)
    kind = char.kind
    if kind is None:
        _fail(character_file, "Skeleton.Joints", f"are {list(char.names)}", "the humanoid3d or dog3d joints of DeepMimic")  # fmt: skip
    frames, loop = load_frames(path, char)
    rate, uniform = frame_rate(path, frames[:, 0], fps)
    root, quat = local_rotations(char, frames)
    norm = np.linalg.norm(quat, axis=-1)
    if (np.abs(norm - 1.0) > 1e-3).any():  # a zero quaternion has no rotation to normalise to
        t, j = (int(v) for v in np.argwhere(np.abs(norm - 1.0) > 1e-3)[0])
        _fail(path, f"Frames[{t}]", f"has a zero quaternion for joint {char.names[j]!r}", "unit (or at least non-zero) quaternions wxyz")  # fmt: skip
    if not uniform and len(frames) > 1:
        times = np.concatenate([[0.0], np.cumsum(frames[:-1, 0])])
        root, quat = resample(times, root, quat, rate)
    if len(root) < 2:
        _fail(path, "Frames", f"gives {len(root)} frame at {rate:g} fps", "at least 2 frames")
    arrays = (humanoid_arrays if kind == "humanoid3d" else dog_arrays)(char, root, quat, rate)
    info = {"loop": loop, "fps": rate, "source_frames": len(frames), "resampled": not uniform}
    return kind, arrays, info
