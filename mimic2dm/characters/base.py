"""Character and prop descriptions shared by every engine.

A :class:`CharacterSpec` is everything an engine, a task or a retargeter needs to know
about a character, independent of any simulator: names and orders (bodies, actuated
joints, keypoints), PD gains and limits, a standing pose and the MJCF of the character
alone. :func:`mimic2dm.characters.scene.build_scene_xml` turns one into a full scene.

Conventions (see ``mimic2dm.geometry.rotations``): z-up world, metres, radians,
quaternions ``xyzw`` in every Python-facing field; MuJoCo's ``wxyz`` only appears
inside MJCF strings and ``qpos`` arrays.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from mimic2dm.characters.kinematics import KinematicTree

ROOT_JOINT = "root"
"""Name of the freejoint of every character's root body."""


def _readonly(x, dtype=np.float64) -> np.ndarray:
    a = np.array(x, dtype=dtype, copy=True)
    a.setflags(write=False)
    return a


@dataclass(frozen=True, eq=False)
class DefaultPose:
    """A standing pose.

    Attributes:
        root_pos: ``[3]`` root body position (m), feet on the floor.
        root_quat: ``[4]`` root orientation, xyzw.
        dof_pos: ``[J]`` actuated joint angles (rad), in ``dof_names`` order.
    """

    root_pos: np.ndarray
    root_quat: np.ndarray
    dof_pos: np.ndarray

    def __post_init__(self):
        object.__setattr__(self, "root_pos", _readonly(self.root_pos))
        object.__setattr__(self, "root_quat", _readonly(self.root_quat))
        object.__setattr__(self, "dof_pos", _readonly(self.dof_pos))
        if self.root_pos.shape != (3,) or self.root_quat.shape != (4,):
            raise ValueError("DefaultPose: root_pos must be [3] and root_quat [4] (xyzw)")

    def qpos(self) -> np.ndarray:
        """MuJoCo ``qpos [7 + J]`` of the character alone (freejoint quaternion wxyz)."""
        from mimic2dm.geometry.rotations import xyzw_to_wxyz  # torch stays out of the spec's import

        return np.concatenate([self.root_pos, xyzw_to_wxyz(self.root_quat), self.dof_pos])


@dataclass(frozen=True, eq=False)
class CharacterSpec:
    """Simulator-independent description of one character.

    Attributes:
        name: registry name (``"humanoid"``, ``"dog"``).
        keypoint_set: ``"coco17"`` (humans) or ``"dog17"`` (AP-10K order).
        keypoint_names: ``K`` keypoint names in keypoint-set order.
        keypoint_sites: ``K`` MJCF site names, same order as ``keypoint_names``.
        site_offsets: ``K`` pairs ``(body_name, (x, y, z))``: the body each keypoint site
            is attached to and its offset in that body's frame (m), so keypoints can be
            computed from any forward kinematics (no simulator needed).
        body_names: MJCF bodies in model order (depth first), root first.
        dof_names: ``J`` actuated hinge joints, in action order (= actuator order).
        kp: ``[J]`` PD stiffness (N m / rad).
        kd: ``[J]`` PD damping (N m s / rad).
        torque_limit: ``[J]`` actuator force limit (N m).
        joint_range: ``[J, 2]`` joint limits (rad); also the PD target range.
        root_body: name of the root body (carries the freejoint ``"root"``).
        key_bodies: bodies whose positions enter proprioception (hands, feet, head...).
        contact_bodies: bodies expected to touch the ground (feet / paws); each has a
            site ``f"{body}_touch"`` enclosing its sole, for touch sensors.
        default_pose: standing pose, see :class:`DefaultPose`.
        mjcf: XML of the character alone as a complete ``<mujoco>`` document (root
            freejoint, no floor, no actuators, no sensors).
        tree: the same bodies / offsets / hinges for torch forward kinematics
            (``spec.tree.fk``, ``spec.tree.keypoints``), equal to MuJoCo's.
        fall_height: root height (m) below which the character has fallen; the tasks get it
            through ``conf/character/<name>.yaml`` (``${m2d_character:...}``).
        detector_class: COCO detector class of the character in videos (``person``, ``dog``).
        pose_model: default 2D pose-model registry name for its keypoint set (``video.pose``).
        extra: free-form character-specific metadata (e.g. the dog's spine flag).
    """

    name: str
    keypoint_set: str
    keypoint_names: tuple[str, ...]
    keypoint_sites: tuple[str, ...]
    site_offsets: tuple[tuple[str, tuple[float, float, float]], ...]
    body_names: tuple[str, ...]
    dof_names: tuple[str, ...]
    kp: np.ndarray
    kd: np.ndarray
    torque_limit: np.ndarray
    joint_range: np.ndarray
    root_body: str
    key_bodies: tuple[str, ...]
    contact_bodies: tuple[str, ...]
    default_pose: DefaultPose
    mjcf: str
    tree: KinematicTree
    fall_height: float
    detector_class: str
    pose_model: str
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        for name in ("kp", "kd", "torque_limit", "joint_range"):
            object.__setattr__(self, name, _readonly(getattr(self, name)))
        j, k = len(self.dof_names), len(self.keypoint_names)
        checks = {
            "kp": self.kp.shape == (j,),
            "kd": self.kd.shape == (j,),
            "torque_limit": self.torque_limit.shape == (j,),
            "joint_range": self.joint_range.shape == (j, 2),
            "keypoint_sites": len(self.keypoint_sites) == k,
            "site_offsets": len(self.site_offsets) == k,
            "default_pose.dof_pos": self.default_pose.dof_pos.shape == (j,),
            "root_body": self.body_names[:1] == (self.root_body,),
            "tree.body_names": self.tree.body_names == self.body_names,
            "tree.dof_body": len(self.tree.dof_body) == j,
        }
        bad = [n for n, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"CharacterSpec {self.name!r}: inconsistent field(s) {bad}")
        missing = (
            {b for b, _ in self.site_offsets} | set(self.key_bodies) | set(self.contact_bodies)
        )
        missing -= set(self.body_names)
        if missing:
            raise ValueError(f"CharacterSpec {self.name!r}: unknown bodies {sorted(missing)}")

    @property
    def num_dof(self) -> int:
        """Number of actuated joints ``J``."""
        return len(self.dof_names)

    @property
    def num_keypoints(self) -> int:
        """Number of keypoints ``K``."""
        return len(self.keypoint_names)

    @property
    def nq(self) -> int:
        """Size of the character's MuJoCo ``qpos``: 7 (freejoint) + ``J``."""
        return 7 + self.num_dof


@dataclass(frozen=True)
class ObjectSpec:
    """A prop simulated as one free rigid body.

    Attributes:
        name: registry name and MJCF body name (its freejoint is ``f"{name}_root"``).
        body_xml: MJCF fragment: one ``<body name=name>`` with its geom(s), without
            freejoint and position; the scene builder adds both.
        radius: bounding radius (m); the default spawn height.
        mass: total mass (kg).
    """

    name: str
    body_xml: str
    radius: float
    mass: float


# ----------------------------------------------------------------------------- MJCF helpers
def fmt(values: float | Sequence[float]) -> str:
    """MJCF number list: ``[0.1, 2] -> "0.1 2"`` (``repr`` precision, no rounding)."""
    if isinstance(values, (int, float, np.floating, np.integer)):
        values = [values]
    return " ".join(repr(float(v)) if float(v) != int(v) else str(int(v)) for v in values)


def sub(parent: ET.Element, tag: str, **attrs) -> ET.Element:
    """``ET.SubElement`` with attribute values formatted by :func:`fmt` when numeric."""
    out = {}
    for key, val in attrs.items():
        out[key] = val if isinstance(val, str) else fmt(val)
    return ET.SubElement(parent, tag, out)


def to_xml(root: ET.Element) -> str:
    """Pretty-printed XML string of ``root``."""
    ET.indent(root, space="  ")
    return ET.tostring(root, encoding="unicode")


def character_root(model_name: str) -> tuple[ET.Element, ET.Element]:
    """Skeleton ``<mujoco>`` document for a character.

    Returns:
        ``(mujoco, worldbody)`` elements; the caller adds defaults and bodies.
    """
    root = ET.Element("mujoco", {"model": model_name})
    sub(root, "compiler", angle="radian", autolimits="true")
    return root, sub(root, "worldbody")
