"""BVH motion files mapped onto the 15-body humanoid (the ``cmu_*.npz`` layout).

:func:`read_bvh` parses the hierarchy (joints, offsets, channels) and the motion block;
:func:`bvh_to_cmu` moves it onto the humanoid's bodies. Each humanoid body takes the world
rotation of one BVH joint, found by name (:data:`BODY_NAMES`, case-insensitive, any
``prefix:`` such as ``mixamorig:`` dropped), times a constant rest correction: the rest pose
(all channels 0) of the BVH skeleton, T-pose or not, is matched to the humanoid's (arms and
legs straight down, facing +x) by turning the whole body so its left (LeftUpLeg minus
RightUpLeg) becomes +y, then swinging each limb so its bone (joint -> mapped child joint)
lies along the humanoid's. The humanoid's own offsets are kept, so the clip is on its
skeleton; the root position is the BVH root's, scaled to metres. BVH files are y-up (turned
to z-up by ``(x, y, z) -> (x, -z, y)``) unless ``up="z"``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.spatial.transform import Rotation

from mimic2dm.motion.deepmimic import CMU_PARENTS
from mimic2dm.motion.format import MotionFormatError
from mimic2dm.motion.loaders import Y_UP_TO_Z_UP

BODY_NAMES: dict[str, tuple[str, ...]] = {
    "pelvis": ("Hips", "Hip", "Pelvis", "Root"),
    "torso": ("Spine2", "Spine1", "Chest", "UpperChest", "Spine", "Abdomen", "LowerBack"),
    "head": ("Head",),
    "right_upper_arm": ("RightArm", "RightUpArm", "RightUpperArm", "RShldr", "R_UpperArm"),
    "right_lower_arm": ("RightForeArm", "RightLowArm", "RightLowerArm", "RightElbow", "RForeArm", "R_Forearm"),
    "right_hand": ("RightHand", "RightWrist", "RHand", "R_Hand"),
    "left_upper_arm": ("LeftArm", "LeftUpArm", "LeftUpperArm", "LShldr", "L_UpperArm"),
    "left_lower_arm": ("LeftForeArm", "LeftLowArm", "LeftLowerArm", "LeftElbow", "LForeArm", "L_Forearm"),
    "left_hand": ("LeftHand", "LeftWrist", "LHand", "L_Hand"),
    "right_thigh": ("RightUpLeg", "RightThigh", "RightHip", "RightUpperLeg", "RThigh", "R_Thigh"),
    "right_shin": ("RightLeg", "RightKnee", "RightShin", "RightLowerLeg", "RShin", "R_Calf"),
    "right_foot": ("RightFoot", "RightAnkle", "RFoot", "R_Foot"),
    "left_thigh": ("LeftUpLeg", "LeftThigh", "LeftHip", "LeftUpperLeg", "LThigh", "L_Thigh"),
    "left_shin": ("LeftLeg", "LeftKnee", "LeftShin", "LeftLowerLeg", "LShin", "L_Calf"),
    "left_foot": ("LeftFoot", "LeftAnkle", "LFoot", "L_Foot"),
}  # fmt: skip
"""Humanoid body (CMU clip order) -> BVH joint names, first match wins: CMU (cgspeed) names
first, then common alternatives (Mixamo, Poser/DAZ, SMPL-like). The torso takes the upper
spine joint that the neck and arms hang from (``Spine1`` in CMU files, ``Spine2`` in Mixamo)."""

BONE_CHILD = {"torso": "head", "right_upper_arm": "right_lower_arm", "right_lower_arm": "right_hand",
              "left_upper_arm": "left_lower_arm", "left_lower_arm": "left_hand",
              "right_thigh": "right_shin", "right_shin": "right_foot",
              "left_thigh": "left_shin", "left_shin": "left_foot"}  # fmt: skip
"""Bodies whose rest direction is swung onto the BVH bone towards this child; the others
(pelvis, head, hands, feet) keep the whole-body turn only."""

UNITS = {"m": 1.0, "cm": 0.01, "mm": 0.001, "inch": 0.0254, "cmu": 0.0254 / 0.45}
"""Metres per file unit that ``scale="auto"`` chooses from (``cmu``: the CMU ASF unit,
1/0.45 inch, of the cgspeed BVH conversion)."""

HUMANOID_LEG = 0.421546 + 0.40987
"""Hip -> ankle length of the humanoid (m): what ``auto`` compares the file's rest leg with."""

_A = Rotation.from_matrix(Y_UP_TO_Z_UP)


def _fail(path, field_name: str, problem: str, expected: str):
    raise MotionFormatError(path, field_name, problem, expected)


@dataclass
class BvhJoint:
    name: str
    parent: int
    offset: np.ndarray
    channels: list[str] = field(default_factory=list)


@dataclass
class Bvh:
    """A parsed BVH file: ``joints`` (file order, end sites left out), ``motion [T, C]``."""

    joints: list[BvhJoint]
    motion: np.ndarray
    frame_time: float
    source: str = ""


class _Tokens:
    def __init__(self, path, text: str):
        self.path, self.words, self.i = path, text.split(), 0

    def next(self, what: str) -> str:
        if self.i >= len(self.words):
            _fail(self.path, "HIERARCHY", f"ends before {what}", "a complete hierarchy and MOTION block")  # fmt: skip
        self.i += 1
        return self.words[self.i - 1]

    def number(self, what: str) -> float:
        w = self.next(what)
        try:
            return float(w)
        except ValueError:
            _fail(self.path, what, f"is {w!r}", "a number")


def _parse_joint(tok: _Tokens, joints: list[BvhJoint], parent: int, end_site: bool) -> None:
    """One ``ROOT``/``JOINT``/``End Site`` block, after its keyword (recursive)."""
    name = "End Site" if end_site else tok.next("a joint name")
    if end_site:
        tok.next("Site")
    if tok.next("{") != "{":
        _fail(tok.path, name, "has no '{'", "'{ OFFSET x y z CHANNELS n ... }'")
    if tok.next("OFFSET") != "OFFSET":
        _fail(tok.path, f"{name}.OFFSET", "is missing", "OFFSET x y z first in a joint")
    offset = np.array([tok.number(f"{name}.OFFSET") for _ in range(3)])
    if end_site:
        tok.next("}")
        return
    me = len(joints)
    joints.append(BvhJoint(name, parent, offset))
    while (w := tok.next(f"the end of joint {name}")) != "}":
        if w == "CHANNELS":
            n = int(tok.number(f"{name}.CHANNELS"))
            joints[me].channels = [tok.next(f"{name}.CHANNELS").lower() for _ in range(n)]
        elif w in ("JOINT", "End"):
            _parse_joint(tok, joints, me, w == "End")
        else:
            _fail(tok.path, name, f"has an unexpected {w!r}", "CHANNELS, JOINT, End Site or }")


def read_bvh(path: str | os.PathLike) -> Bvh:
    """Parse a BVH file.

    Raises:
        MotionFormatError: naming the file and the part that is wrong (hierarchy, the frame
            count against the data lines, the frame time, a short or non-numeric line).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        _fail(path, "(file)", "does not exist", "a BVH file")
    head, sep, motion = text.partition("MOTION")
    tok = _Tokens(path, head)
    if not sep or tok.next("HIERARCHY") != "HIERARCHY" or tok.next("ROOT") != "ROOT":
        _fail(path, "(file)", "lacks HIERARCHY, ROOT or MOTION", "a BVH file (HIERARCHY ROOT ... MOTION ...)")  # fmt: skip
    joints: list[BvhJoint] = []
    _parse_joint(tok, joints, -1, False)
    return Bvh(joints, *_read_motion(path, motion, sum(len(j.channels) for j in joints)), str(path))


def _read_motion(path, text: str, width: int) -> tuple[np.ndarray, float]:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) < 2 or not lines[0].strip().startswith("Frames:") or not lines[1].strip().startswith("Frame Time:"):  # fmt: skip
        _fail(path, "MOTION", "lacks 'Frames:' or 'Frame Time:'", "'Frames: N' and 'Frame Time: dt' lines")  # fmt: skip
    try:
        n, dt = int(lines[0].split(":")[1]), float(lines[1].split(":")[1])
    except ValueError:
        _fail(path, "Frames", f"is {lines[0]!r} / {lines[1]!r}", "an integer frame count and a frame time in seconds")  # fmt: skip
    if not (np.isfinite(dt) and dt > 0):
        _fail(path, "Frame Time", f"is {dt:g}", "a frame time > 0 s")
    rows = lines[2:]
    if n < 1 or len(rows) != n:
        _fail(path, "Frames", f"is {n} but the file has {len(rows)} data lines", f"{n} lines of {width} numbers (>= 1 frame)")  # fmt: skip
    try:
        data = [np.array(r.split(), dtype=np.float64) for r in rows]
    except ValueError:
        _fail(path, "MOTION", "has a non-numeric value", "numbers only")
    bad = [i for i, r in enumerate(data) if r.size != width or not np.isfinite(r).all()]
    if bad:
        _fail(path, f"MOTION line {bad[0] + 1}", f"has {data[bad[0]].size} numbers", f"{width} finite numbers (the hierarchy's channels)")  # fmt: skip
    return np.stack(data), dt


def _bvh_global(bvh: Bvh) -> tuple[np.ndarray, list[Rotation], np.ndarray]:
    """World joint positions ``[T, J, 3]``, rotations and rest positions ``[J, 3]`` (file axes/units)."""
    T, nj = len(bvh.motion), len(bvh.joints)
    pos, rest = np.zeros((T, nj, 3)), np.zeros((nj, 3))
    rot: list[Rotation] = []
    col = 0
    for j, joint in enumerate(bvh.joints):
        local, trans = Rotation.identity(T), np.tile(joint.offset, (T, 1))
        for c in joint.channels:
            v = bvh.motion[:, col]
            col += 1
            if c.endswith("rotation"):  # channels apply in the listed order (intrinsic)
                local = local * Rotation.from_euler(c[0], v[:, None], degrees=True)
            elif c.endswith("position"):  # added to the offset, so the rest pose is all zeros
                trans[:, "xyz".index(c[0])] = joint.offset["xyz".index(c[0])] + v
        p = joint.parent
        if p < 0:
            pos[:, j], g, rest[j] = trans, local, joint.offset
        else:
            pos[:, j], g = pos[:, p] + rot[p].apply(trans), rot[p] * local
            rest[j] = rest[p] + joint.offset
        rot.append(g)
    return pos, rot, rest


def match_bodies(bvh: Bvh) -> dict[str, int]:
    """Humanoid body -> BVH joint index by :data:`BODY_NAMES`; the error lists what is missing."""
    names = {j.name.split(":")[-1].lower(): i for i, j in enumerate(bvh.joints)}
    out, missing = {}, []
    for body, options in BODY_NAMES.items():
        hit = next((names[o.lower()] for o in options if o.lower() in names), None)
        if hit is None:
            missing.append(f"{body} ({'/'.join(options[:3])})")
        out[body] = hit
    if missing:
        found = ", ".join(j.name for j in bvh.joints)
        _fail(bvh.source, "HIERARCHY", f"has no joint for {', '.join(missing)} (joints: {found})", "the humanoid's 15 bodies by the names of docs/data.md")  # fmt: skip
    return out


def auto_scale(bvh: Bvh, match: dict[str, int], rest: np.ndarray) -> tuple[float, str]:
    """``(metres per unit, unit name)``: the unit of :data:`UNITS` whose rest leg (hip ->
    ankle) is nearest the humanoid's; refused when even that leg is not 0.4-1.4 m."""
    leg = np.mean([np.linalg.norm(rest[match[f"{s}_foot"]] - rest[match[f"{s}_thigh"]]) for s in ("left", "right")])  # fmt: skip
    name = min(UNITS, key=lambda u: abs(np.log(max(leg * UNITS[u], 1e-12) / HUMANOID_LEG)))
    if not 0.4 <= leg * UNITS[name] <= 1.4:
        _fail(bvh.source, "OFFSET", f"gives a rest leg of {leg:.4g} units", "a leg of 0.4-1.4 m in m, cm, mm, inch or CMU units (else give --scale)")  # fmt: skip
    return UNITS[name], name


def _swing(a: np.ndarray, b: np.ndarray) -> Rotation:
    """The smallest rotation taking direction ``a`` to ``b``."""
    a, b = a / np.linalg.norm(a), b / np.linalg.norm(b)
    axis, c = np.cross(a, b), float(np.dot(a, b))
    if np.linalg.norm(axis) < 1e-9:
        if c > 0:
            return Rotation.identity()
        perp = np.cross(a, [1.0, 0, 0] if abs(a[0]) < 0.9 else [0, 1.0, 0])
        return Rotation.from_rotvec(np.pi * perp / np.linalg.norm(perp))
    return Rotation.from_rotvec(axis / np.linalg.norm(axis) * np.arctan2(np.linalg.norm(axis), c))


def bvh_to_cmu(bvh: Bvh, humanoid_offsets: np.ndarray, scale: float, up: str = "y") -> dict[str, np.ndarray]:  # fmt: skip
    """The ``cmu_*.npz`` arrays of a BVH clip (see the module docstring).

    Args:
        bvh: from :func:`read_bvh`.
        humanoid_offsets: ``[15, 3]`` the humanoid's ``local_translation`` (z-up, m).
        scale: metres per file unit.
        up: ``"y"`` (the BVH convention, turned to z-up) or ``"z"``.
    """
    match = match_bodies(bvh)
    pos, rot, rest = _bvh_global(bvh)
    A = _A if up == "y" else Rotation.identity()
    rest_z = A.apply(rest)
    left = rest_z[match["left_thigh"]] - rest_z[match["right_thigh"]]
    left[2] = 0.0
    if np.linalg.norm(left) < 1e-9:
        _fail(bvh.source, "OFFSET", "puts both hips at one place", "LeftUpLeg and RightUpLeg apart")
    left /= np.linalg.norm(left)
    turn = Rotation.from_matrix(np.stack([np.cross(left, [0, 0, 1.0]), left, [0, 0, 1.0]], axis=1))
    names = list(BODY_NAMES)
    glob = []
    for body in names:
        j = match[body]
        corr = turn
        if body in BONE_CHILD:
            child = names.index(BONE_CHILD[body])
            bone_h = turn.apply(humanoid_offsets[child])
            corr = _swing(bone_h, rest_z[match[BONE_CHILD[body]]] - rest_z[j]) * turn
        glob.append(A * rot[j] * A.inv() * corr)
    local = [glob[0]] + [glob[p].inv() * glob[b] for b, p in enumerate(CMU_PARENTS) if p >= 0]
    quat = np.stack([r.as_quat() for r in local], axis=1)
    quat[quat[..., 3] < 0] *= -1.0
    root = A.apply(pos[:, match["pelvis"]]) * scale
    return {"local_rotation": quat, "root_translation": root}


def import_bvh(path: str | os.PathLike, humanoid_offsets: np.ndarray, *, scale: float | None = None,
               up: str = "y", fps: float | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:  # fmt: skip
    """Read a BVH file into the ``cmu_*.npz`` arrays of the humanoid.

    Args:
        path: the ``.bvh`` file.
        humanoid_offsets: ``[15, 3]`` the humanoid's offsets (written as ``local_translation``).
        scale: metres per file unit; None: :func:`auto_scale`.
        up: the file's up axis, ``"y"`` or ``"z"``.
        fps: refused unless it matches ``1 / Frame Time`` (the frames are not resampled).

    Returns:
        ``(arrays, info)`` with ``info`` = ``scale``, ``unit``, ``joints`` (body -> BVH joint).
    """
    bvh = read_bvh(path)
    rate = 1.0 / bvh.frame_time
    if abs(rate - round(rate)) < 1e-3 * rate:  # 0.0083333 s is 120 fps
        rate = float(round(rate))
    if fps is not None and (not np.isfinite(fps) or fps <= 0 or abs(fps - rate) > 1e-3 * rate):
        _fail(path, "Frame Time", f"gives {rate:g} fps, not {fps:g}", "--fps equal to 1 / Frame Time (BVH frames are not resampled) or left out")  # fmt: skip
    if up not in ("y", "z"):
        _fail(path, "up", f"is {up!r}", "y or z")
    match = match_bodies(bvh)
    unit = "given"
    if scale is None:
        scale, unit = auto_scale(bvh, match, _bvh_global(Bvh(bvh.joints, bvh.motion[:1], 1.0))[2])
    elif not (np.isfinite(scale) and scale > 0):
        _fail(path, "scale", f"is {scale}", "metres per file unit > 0 (--scale)")
    arrays = bvh_to_cmu(bvh, np.asarray(humanoid_offsets, dtype=np.float64), scale, up)
    arrays |= {
        "node_names": np.array(list(BODY_NAMES)),
        "parents": np.array(CMU_PARENTS, dtype=np.int64),
        "local_translation": np.asarray(humanoid_offsets, dtype=np.float32),
        "fps": np.array(rate, dtype=np.float32),
    }
    arrays["local_rotation"] = arrays["local_rotation"].astype(np.float32)
    arrays["root_translation"] = arrays["root_translation"].astype(np.float32)
    joints = {b: bvh.joints[j].name for b, j in match.items()}
    return arrays, {"scale": scale, "unit": unit, "fps": rate, "joints": joints}
