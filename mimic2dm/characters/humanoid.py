"""The 15-body, 28-DoF humanoid, generated as MJCF from the mocap skeleton.

Bodies, parents and joint offsets are exactly those of the CMU clips' skeleton (the
AMP / DeepMimic humanoid skeleton), so retargeting a clip is an exact change of
parameterisation (:func:`mimic2dm.characters.retarget.retarget_human`):

- 3-DoF joints (abdomen, neck, shoulders, hips, ankles) are three hinges about the
  child body's local x, y, z declared in that order, so the local rotation is
  ``Rx(a) Ry(b) Rz(c)`` (``quat_from_euler_xyz``);
- elbows and knees are one hinge about local y (elbows bend with negative angles,
  knees with positive ones, as in the mocap data);
- hands have no joint.

The character faces +x, left is +y. Geometry, masses and gains are our own choices;
see ``docs/characters.md``.
"""

from __future__ import annotations

import math

import numpy as np

from mimic2dm.characters.base import CharacterSpec, DefaultPose
from mimic2dm.characters.builder import (
    BodyDef,
    GeomDef,
    JointDef,
    SiteDef,
    build_mjcf,
    build_tree,
    joint_table,
    site_offsets,
)
from mimic2dm.motion.keypoint_sets import COCO17

BODY_NAMES: tuple[str, ...] = (
    "pelvis", "torso", "head",
    "right_upper_arm", "right_lower_arm", "right_hand",
    "left_upper_arm", "left_lower_arm", "left_hand",
    "right_thigh", "right_shin", "right_foot",
    "left_thigh", "left_shin", "left_foot",
)  # fmt: skip
"""Body order = mocap ``node_names`` order = MuJoCo body order (depth first)."""

PARENTS: tuple[int, ...] = (-1, 0, 1, 1, 3, 4, 1, 6, 7, 0, 9, 10, 0, 12, 13)

# Mocap ``local_translation`` (float32 values, printed at round-trip precision).
# Row 0 is the rest height of the root; it is not a body offset.
OFFSETS: tuple[tuple[float, float, float], ...] = (
    (0.0, 0.0, 1.0),
    (0.0, 0.0, 0.236151),
    (0.0, 0.0, 0.223894),
    (-0.02405, -0.18311, 0.2435),
    (0.0, 0.0, -0.274788),
    (0.0, 0.0, -0.258947),
    (-0.02405, 0.18311, 0.2435),
    (0.0, 0.0, -0.274788),
    (0.0, 0.0, -0.258947),
    (0.0, -0.084887, 0.0),
    (0.0, 0.0, -0.421546),
    (0.0, 0.0, -0.40987),
    (0.0, 0.084887, 0.0),
    (0.0, 0.0, -0.421546),
    (0.0, 0.0, -0.40987),
)

_D = math.pi / 180.0
# Actuated joints per body: (joint prefix, axes, [range per axis in degrees]).
# Ranges are generous: the CMU walk / run / hop clips retarget without clipping
# (tests/test_retarget.py checks it).
_JOINTS: dict[str, tuple[str, str, tuple[tuple[float, float], ...]]] = {
    "torso": ("abdomen", "xyz", ((-60, 60), (-60, 90), (-60, 60))),
    "head": ("neck", "xyz", ((-60, 60), (-90, 70), (-80, 80))),
    "right_upper_arm": ("right_shoulder", "xyz", ((-170, 60), (-180, 90), (-90, 90))),
    "right_lower_arm": ("right_elbow", "y", ((-160, 2),)),
    "left_upper_arm": ("left_shoulder", "xyz", ((-60, 170), (-180, 90), (-90, 90))),
    "left_lower_arm": ("left_elbow", "y", ((-160, 2),)),
    "right_thigh": ("right_hip", "xyz", ((-70, 40), (-140, 60), (-60, 60))),
    "right_shin": ("right_knee", "y", ((-2, 160),)),
    "right_foot": ("right_ankle", "xyz", ((-40, 40), (-70, 70), (-50, 50))),
    "left_thigh": ("left_hip", "xyz", ((-40, 70), (-140, 60), (-60, 60))),
    "left_shin": ("left_knee", "y", ((-2, 160),)),
    "left_foot": ("left_ankle", "xyz", ((-40, 40), (-70, 70), (-50, 50))),
}

# PD gains and torque limits per joint group: (kp N m/rad, kd N m s/rad, limit N m).
# Documented in docs/characters.md. The ankles must out-stiffen the inverted pendulum
# of the whole body (2 kp_ankle = 1200 > m g h_com ~ 530 N m/rad, with margin for
# the knees and hips sagging too): with these gains the default pose, with zero
# targets, stands for 10 s at physics_dt 1/60 (tests/test_characters.py).
GAINS: dict[str, tuple[float, float, float]] = {
    "abdomen": (600.0, 60.0, 200.0),
    "neck": (200.0, 20.0, 50.0),
    "shoulder": (300.0, 30.0, 100.0),
    "elbow": (200.0, 20.0, 70.0),
    "hip": (500.0, 50.0, 250.0),
    "knee": (500.0, 50.0, 250.0),
    "ankle": (600.0, 60.0, 200.0),
}

# The ``humanoid_amp`` variant: gains close to the AMP-style humanoid
# with light armature (docs/characters.md). The ankles keep 600/60: at AMP's 400/40 this
# body does not stand with zero targets (the inverted-pendulum bound above).
AMP_GAINS: dict[str, tuple[float, float, float]] = {
    **GAINS,  # hips, knees and ankles as above
    "abdomen": (1000.0, 100.0, 200.0),
    "neck": (500.0, 50.0, 50.0),
    "shoulder": (400.0, 40.0, 100.0),
    "elbow": (300.0, 30.0, 70.0),
}
AMP_ARMATURE = 0.02

# Geoms per body: (type, attributes, mass kg). Total mass 63.4 kg.
_GEOMS: dict[str, list[tuple[str, dict, float]]] = {
    "pelvis": [("capsule", {"fromto": (0, -0.05, 0.02, 0, 0.05, 0.02), "size": 0.085}, 9.0)],
    "torso": [
        ("sphere", {"pos": (0, 0, 0.0), "size": 0.08}, 7.0),
        ("capsule", {"fromto": (-0.01, -0.07, 0.13, -0.01, 0.07, 0.13), "size": 0.11}, 12.0),
    ],
    "head": [("sphere", {"pos": (0, 0, 0.175), "size": 0.095}, 5.0)],
    "upper_arm": [("capsule", {"fromto": (0, 0, -0.05, 0, 0, -0.225), "size": 0.045}, 2.0)],
    "lower_arm": [("capsule", {"fromto": (0, 0, -0.05, 0, 0, -0.19), "size": 0.04}, 1.2)],
    "hand": [("sphere", {"pos": (0, 0, 0), "size": 0.04}, 0.5)],
    "thigh": [("capsule", {"fromto": (0, 0, -0.06, 0, 0, -0.36), "size": 0.055}, 7.0)],
    "shin": [("capsule", {"fromto": (0, 0, -0.045, 0, 0, -0.355), "size": 0.05}, 3.5)],
    "foot": [("box", {"pos": (0.045, 0, -0.0225), "size": (0.11, 0.045, 0.0275)}, 1.0)],
}
FOOT_SOLE_DEPTH = 0.05
"""Distance from the ankle (foot body origin) down to the sole (m)."""

KEYPOINT_NAMES: tuple[str, ...] = COCO17.names
"""COCO-17 order (the keypoint set is the one source of the names)."""

SITE_OFFSETS: tuple[tuple[str, tuple[float, float, float]], ...] = (
    ("head", (0.09, 0.0, 0.17)),
    ("head", (0.075, 0.035, 0.20)),
    ("head", (0.075, -0.035, 0.20)),
    ("head", (0.0, 0.085, 0.18)),
    ("head", (0.0, -0.085, 0.18)),
    ("left_upper_arm", (0.0, 0.0, 0.0)),
    ("right_upper_arm", (0.0, 0.0, 0.0)),
    ("left_lower_arm", (0.0, 0.0, 0.0)),
    ("right_lower_arm", (0.0, 0.0, 0.0)),
    ("left_hand", (0.0, 0.0, 0.0)),
    ("right_hand", (0.0, 0.0, 0.0)),
    ("left_thigh", (0.0, 0.0, 0.0)),
    ("right_thigh", (0.0, 0.0, 0.0)),
    ("left_shin", (0.0, 0.0, 0.0)),
    ("right_shin", (0.0, 0.0, 0.0)),
    ("left_foot", (0.0, 0.0, 0.0)),
    ("right_foot", (0.0, 0.0, 0.0)),
)
"""Per COCO-17 keypoint: (body, offset in the body frame). Joints sit at body origins."""

KEY_BODIES = ("head", "right_hand", "left_hand", "right_foot", "left_foot")
CONTACT_BODIES = ("right_foot", "left_foot")


def _body_kind(name: str) -> str:
    return name.removeprefix("right_").removeprefix("left_")


def _joint_group(joint_name: str) -> str:
    for group in GAINS:
        if group in joint_name:
            return group
    raise KeyError(joint_name)


def humanoid_bodies() -> list[BodyDef]:
    """The 15 bodies in MuJoCo order, with joints, geoms and sites.

    Joint names are ``f"{prefix}_{axis}"`` (e.g. ``"right_hip_y"``); 28 in all.
    """
    bodies = []
    for idx, name in enumerate(BODY_NAMES):
        prefix, axes, ranges = _JOINTS.get(name, ("", "", ()))
        joints = tuple(
            JointDef(f"{prefix}_{ax}", "xyz".index(ax), (lo * _D, hi * _D))
            for ax, (lo, hi) in zip(axes, ranges, strict=True)
        )
        geoms = tuple(
            GeomDef(t, m, a) for t, a, m in _GEOMS.get(name, _GEOMS.get(_body_kind(name), []))
        )
        sites = [
            SiteDef(k, off)
            for k, (b, off) in zip(KEYPOINT_NAMES, SITE_OFFSETS, strict=True)
            if b == name
        ]
        if name in CONTACT_BODIES:
            foot = _GEOMS["foot"][0][1]
            sites.append(
                SiteDef(f"{name}_touch", foot["pos"], "box", tuple(v + 0.01 for v in foot["size"]))
            )
        pos = (0.0, 0.0, 0.0) if idx == 0 else OFFSETS[idx]
        bodies.append(BodyDef(name, PARENTS[idx], pos, joints, geoms, tuple(sites)))
    return bodies


_DEFAULTS = {
    "joint": {"armature": 0.1, "damping": 0.0, "limited": "true"},
    "geom": {"condim": 3, "friction": (1.0, 0.005, 0.0001), "rgba": (0.8, 0.6, 0.4, 1)},
    "site": {"rgba": (1, 0, 0, 0.5), "group": 3},
}


def humanoid_mjcf() -> str:
    """MJCF ``<mujoco>`` document of the humanoid alone (freejoint root, no actuators)."""
    return build_mjcf("humanoid", humanoid_bodies(), _DEFAULTS)


def make_humanoid(variant: str = "default") -> CharacterSpec:
    """Build the humanoid :class:`CharacterSpec` (28 actuated DoF, 63.4 kg).

    Args:
        variant: ``default`` (registry ``humanoid``: :data:`GAINS`, armature 0.1) or ``amp``
            (registry ``humanoid_amp``: :data:`AMP_GAINS`, armature :data:`AMP_ARMATURE`).
    """
    if variant not in ("default", "amp"):
        raise ValueError(f"humanoid variant {variant!r} is not one of default, amp")
    bodies = humanoid_bodies()
    table = joint_table(bodies)
    names = tuple(j for j, _ in table)
    table_gains = AMP_GAINS if variant == "amp" else GAINS
    gains = np.array([table_gains[_joint_group(j)] for j in names])
    defaults = _DEFAULTS
    if variant == "amp":
        defaults = {**_DEFAULTS, "joint": {**_DEFAULTS["joint"], "armature": AMP_ARMATURE}}
    stand_height = -(OFFSETS[10][2] + OFFSETS[11][2]) + FOOT_SOLE_DEPTH
    return CharacterSpec(
        name="humanoid" if variant == "default" else f"humanoid_{variant}",
        keypoint_set="coco17",
        keypoint_names=KEYPOINT_NAMES,
        keypoint_sites=KEYPOINT_NAMES,
        site_offsets=site_offsets(bodies, KEYPOINT_NAMES),
        body_names=BODY_NAMES,
        dof_names=names,
        kp=gains[:, 0],
        kd=gains[:, 1],
        torque_limit=gains[:, 2],
        joint_range=np.array([rng for _, rng in table]),
        root_body="pelvis",
        key_bodies=KEY_BODIES,
        contact_bodies=CONTACT_BODIES,
        default_pose=DefaultPose(
            root_pos=(0.0, 0.0, stand_height + 0.002),
            root_quat=(0.0, 0.0, 0.0, 1.0),
            dof_pos=np.zeros(len(names)),
        ),
        mjcf=build_mjcf("humanoid", bodies, defaults),
        tree=build_tree(bodies),
        fall_height=0.3,
        detector_class="person",
        pose_model="vitpose-b",
    )
