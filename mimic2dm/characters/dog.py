"""A quadruped robot dog sized to the AI4Animation dog clips.

Bodies (MuJoCo order): ``trunk`` (root, origin midway between the hip joints; rear
half, carries the hind legs and the tail keypoint), ``chest`` (front half, origin at the
mid-back point of the mocap ``Spine1``), ``head`` (origin at the mocap ``Neck``), then
for each leg ``{side}_{front|hind}_upper_leg`` and ``..._lower_leg``.

Joints, 3 per leg (12 in all): ``*_hip_x`` (ab/adduction), ``*_hip_y`` (flexion),
``*_knee_y``. The front knee (elbow) bends with negative angles, the hind knee
(stifle) with positive ones, like the animal. With ``spine=True`` the chest and the
head get 2 DoF each (``spine_y``, ``spine_z``, ``neck_y``, ``neck_z``: pitch, yaw),
16 in all; without it both are welded to the trunk.

The robot faces +x (the mocap dog faces -x: retargeting turns it). All dimensions
were measured on the clips (``docs/characters.md``): a Procrustes mean of the trunk
points (hips, shoulders, neck, tail) over both clips gives the joint positions; leg
links are the mean mocap segment lengths shoulder->elbow, elbow->paw tip (wrist and
toes folded into one link), hip->stifle, stifle->paw tip. The mocap elbow sticks out
sideways while the paw comes in under the body, so elbow and paw do not lie in a plane
through the shoulder: each knee sits ``KNEE_LATERAL`` outward of its hip (the mean
offset of that plane in the clips), which cuts the worst retargeting error by 25-50 %.
"""

from __future__ import annotations

import dataclasses
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
from mimic2dm.characters.mocap import DOG17_NAMES, DOG_EYE_OFFSET

# Trunk-frame points (x forward, y left, z up; origin = hip-joint midpoint), metres.
HIP = (0.0, 0.0475, 0.0)  # left hip; right is mirrored
SHOULDER = (0.48, 0.085, 0.0)  # left shoulder joint (mocap LeftArm)
SPINE = (0.234, 0.0, 0.06)  # chest origin (mocap Spine1)
NECK = (0.457, 0.0, 0.079)  # head origin (mocap Neck)
TAIL = (-0.018, 0.0, 0.067)  # root of the tail (mocap Tail)
HEAD = (0.583, 0.0, 0.134)  # mocap Head joint (back of the skull)
SNOUT_LENGTH = 0.17  # mocap Head -> HeadSite
SNOUT_PITCH = math.atan2(0.031, 0.1544)  # snout axis 11 deg above the trunk x axis

FRONT_LINKS = (0.152, 0.242)  # shoulder->elbow, elbow->paw
HIND_LINKS = (0.160, 0.265)  # hip->stifle, stifle->paw
KNEE_LATERAL = {"front": 0.06, "hind": 0.04}  # knee offset away from the midline (m), see doc
PAW_RADIUS = 0.025
STAND_HEIGHT = 0.36  # hip / shoulder joint height of the default pose (mocap mean 0.34-0.37)

_D = math.pi / 180.0
# Joint ranges (deg). Front knee <= 0, hind knee >= 0; the clips retarget inside them.
HIP_X_RANGE = (-50.0, 50.0)
HIP_Y_RANGE = (-90.0, 90.0)
FRONT_KNEE_RANGE = (-150.0, 5.0)
HIND_KNEE_RANGE = (-5.0, 150.0)
SPINE_RANGE = (-30.0, 30.0)
NECK_RANGE = (-60.0, 60.0)

# (kp N m/rad, kd N m s/rad, torque limit N m) per joint group; docs/characters.md.
GAINS: dict[str, tuple[float, float, float]] = {
    "hip_x": (150.0, 6.0, 60.0),
    "hip_y": (200.0, 8.0, 80.0),
    "knee_y": (200.0, 8.0, 100.0),
    "spine": (300.0, 15.0, 120.0),
    "neck": (60.0, 3.0, 25.0),
}

LEGS = ("left_front", "right_front", "left_hind", "right_hind")
KEY_BODIES = ("head",) + tuple(f"{leg}_lower_leg" for leg in LEGS)
CONTACT_BODIES = tuple(f"{leg}_lower_leg" for leg in LEGS)


def _sub(a, b) -> tuple[float, float, float]:
    return tuple(float(x - y) for x, y in zip(a, b, strict=True))


def head_points() -> dict[str, tuple[float, float, float]]:
    """Nose and eyes in the trunk frame, placed like :func:`mocap.dog_keypoints` does."""
    fwd = np.array([math.cos(SNOUT_PITCH), 0.0, math.sin(SNOUT_PITCH)])
    up = np.array([-fwd[2], 0.0, fwd[0]])
    head = np.array(HEAD)
    frac, half_width, height = DOG_EYE_OFFSET
    eye = head + frac * SNOUT_LENGTH * fwd + height * up
    return {
        "nose": tuple(head + SNOUT_LENGTH * fwd),
        "left_eye": (eye[0], half_width, eye[2]),
        "right_eye": (eye[0], -half_width, eye[2]),
    }


def _knee_pos(leg: str) -> tuple[float, float, float]:
    """Knee (elbow / stifle) position in the upper-leg frame: link length, lateral offset."""
    side, end = leg.split("_")
    length = (FRONT_LINKS if end == "front" else HIND_LINKS)[0]
    lateral = KNEE_LATERAL[end] * (1.0 if side == "left" else -1.0)
    return (0.0, lateral, -math.sqrt(length**2 - lateral**2))


def _leg(leg: str, parent: int, origin) -> list[BodyDef]:
    """Upper and lower leg bodies of ``leg`` attached at ``origin`` (parent frame)."""
    side, end = leg.split("_")
    front = end == "front"
    names = {"front": ("shoulder", "elbow", "front_paw"), "hind": ("hip", "knee", "back_paw")}[end]
    knee_range = FRONT_KNEE_RANGE if front else HIND_KNEE_RANGE
    knee = _knee_pos(leg)
    paw = (0.0, 0.0, -(FRONT_LINKS if front else HIND_LINKS)[1])
    upper = BodyDef(
        f"{leg}_upper_leg", parent, origin,
        joints=(
            JointDef(f"{leg}_hip_x", 0, (HIP_X_RANGE[0] * _D, HIP_X_RANGE[1] * _D)),
            JointDef(f"{leg}_hip_y", 1, (HIP_Y_RANGE[0] * _D, HIP_Y_RANGE[1] * _D)),
        ),
        geoms=(GeomDef("capsule", 1.5 if front else 1.8, {"fromto": (0, 0, 0, *knee), "size": 0.03}),),
        sites=(SiteDef(f"{side}_{names[0]}", (0.0, 0.0, 0.0)),),
    )  # fmt: skip
    lower = BodyDef(
        f"{leg}_lower_leg", -1, knee,
        joints=(JointDef(f"{leg}_knee_y", 1, (knee_range[0] * _D, knee_range[1] * _D)),),
        geoms=(
            GeomDef("capsule", 0.6, {"fromto": (0, 0, 0, *paw), "size": 0.022}),
            GeomDef("sphere", 0.15, {"pos": paw, "size": PAW_RADIUS}),
        ),
        sites=(
            SiteDef(f"{side}_{names[1]}", (0.0, 0.0, 0.0)),
            SiteDef(f"{side}_{names[2]}", paw),
            SiteDef(f"{leg}_lower_leg_touch", paw, "sphere", (PAW_RADIUS + 0.01,)),
        ),
    )  # fmt: skip
    return [upper, lower]


def dog_bodies(spine: bool = False) -> list[BodyDef]:
    """The dog's 11 bodies in MuJoCo order (see the module doc)."""
    spine_j = (JointDef("spine_y", 1, (SPINE_RANGE[0] * _D, SPINE_RANGE[1] * _D)),
               JointDef("spine_z", 2, (SPINE_RANGE[0] * _D, SPINE_RANGE[1] * _D)))  # fmt: skip
    neck_j = (JointDef("neck_y", 1, (NECK_RANGE[0] * _D, NECK_RANGE[1] * _D)),
              JointDef("neck_z", 2, (NECK_RANGE[0] * _D, NECK_RANGE[1] * _D)))  # fmt: skip
    hp = head_points()
    mirror = lambda p: (p[0], -p[1], p[2])  # noqa: E731
    trunk = BodyDef(
        "trunk", -1, (0.0, 0.0, 0.0),
        geoms=(GeomDef("box", 7.0, {"pos": (0.1, 0, 0.035), "size": (0.15, 0.075, 0.06)}),),
        sites=(SiteDef("root_of_tail", TAIL),),
    )  # fmt: skip
    chest = BodyDef(
        "chest", 0, SPINE, joints=spine_j if spine else (),
        geoms=(GeomDef("box", 7.0, {"pos": (0.12, 0, -0.03), "size": (0.12, 0.08, 0.065)}),),
        sites=(SiteDef("neck", _sub(NECK, SPINE)),),
    )  # fmt: skip
    head_geoms = (
        GeomDef("capsule", 0.5, {"fromto": (0, 0, 0, *_sub(HEAD, NECK)), "size": 0.04}),
        GeomDef("sphere", 1.2, {"pos": _sub(HEAD, NECK), "size": 0.06}),
        GeomDef(
            "capsule", 0.3, {"fromto": (*_sub(HEAD, NECK), *_sub(hp["nose"], NECK)), "size": 0.03}
        ),
    )
    head = BodyDef(
        "head", 1, _sub(NECK, SPINE), joints=neck_j if spine else (), geoms=head_geoms,
        sites=tuple(SiteDef(n, _sub(hp[n], NECK)) for n in ("left_eye", "right_eye", "nose")),
    )  # fmt: skip
    bodies = [trunk, chest, head]
    for leg in LEGS:
        front = leg.endswith("front")
        origin = _sub(SHOULDER, SPINE) if front else HIP
        origin = origin if leg.startswith("left") else mirror(origin)
        upper, lower = _leg(leg, 1 if front else 0, origin)
        # depth first: front legs hang from the chest, listed right after it
        bodies += [upper, dataclasses.replace(lower, parent=len(bodies))]
    return bodies


def _stance_angles(leg: str, height: float) -> tuple[float, float]:
    """Hip flexion and knee angles putting the paw straight below the hip, ``height`` down.

    Works in the leg's sagittal plane (the lateral knee offset moves it sideways only).
    """
    front = leg.endswith("front")
    l1, l2 = -_knee_pos(leg)[2], (FRONT_LINKS if front else HIND_LINKS)[1]
    cos_k = (height**2 - l1**2 - l2**2) / (2 * l1 * l2)
    knee = math.acos(max(-1.0, min(1.0, cos_k))) * (-1.0 if front else 1.0)
    x, z = -l2 * math.sin(knee), -l1 - l2 * math.cos(knee)  # paw in the hip frame
    return math.atan2(x, -z), knee


# Armature 0.05 (motor reflected inertia) keeps the light lower legs stable under
# kp = 200 at physics_dt = 1/60 (with 0.01 they chatter; tests/test_characters.py).
_DEFAULTS = {
    "joint": {"armature": 0.05, "damping": 0.0, "limited": "true"},
    "geom": {"condim": 3, "friction": (1.0, 0.005, 0.0001), "rgba": (0.55, 0.45, 0.35, 1)},
    "site": {"rgba": (1, 0, 0, 0.5), "group": 3},
}


def make_dog(spine: bool = False) -> CharacterSpec:
    """Build the dog :class:`CharacterSpec`.

    Args:
        spine: add the 2-DoF spine and 2-DoF neck (16 actuated DoF instead of 12).

    Returns:
        The spec; registry names ``"dog"`` (``spine=False``) and ``"dog_spine"``.
    """
    bodies = dog_bodies(spine)
    table = joint_table(bodies)
    names = tuple(j for j, _ in table)
    gains = np.array([next(v for k, v in GAINS.items() if k in j) for j in names])
    dof_pos = np.zeros(len(names))
    for leg in LEGS:
        hip_y, knee = _stance_angles(leg, STAND_HEIGHT - PAW_RADIUS)
        dof_pos[names.index(f"{leg}_hip_y")] = hip_y
        dof_pos[names.index(f"{leg}_knee_y")] = knee
    return CharacterSpec(
        name="dog_spine" if spine else "dog",
        keypoint_set="dog17",
        keypoint_names=DOG17_NAMES,
        keypoint_sites=DOG17_NAMES,
        site_offsets=site_offsets(bodies, DOG17_NAMES),
        body_names=tuple(b.name for b in bodies),
        dof_names=names,
        kp=gains[:, 0],
        kd=gains[:, 1],
        torque_limit=gains[:, 2],
        joint_range=np.array([rng for _, rng in table]),
        root_body="trunk",
        key_bodies=KEY_BODIES,
        contact_bodies=CONTACT_BODIES,
        default_pose=DefaultPose((0.0, 0.0, STAND_HEIGHT + 0.002), (0.0, 0.0, 0.0, 1.0), dof_pos),
        mjcf=build_mjcf("dog", bodies, _DEFAULTS),
        tree=build_tree(bodies),
        fall_height=0.15,
        detector_class="dog",
        pose_model="vitpose-plus-b-ap10k",
        extra={"spine": spine},
    )
