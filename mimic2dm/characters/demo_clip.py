"""A demo clip the project makes itself: no external data needed for ``make demo``.

A keyframed humanoid motion (march in place with arm swing, then a squat) is eased
between keyframes with a smoothstep (zero velocity at each keyframe, so it is C1), its
root height is set so the supporting foot stays on the floor, and its 3D keypoints come
from MuJoCo forward kinematics (:func:`kinematic_replay`). One static virtual camera
turns it into a 2D clip with 3D ground truth.
"""

from __future__ import annotations

import numpy as np

from mimic2dm.motion.format import Motion2D, Motion3D
from mimic2dm.motion.synth import synthesize_views

# Keyframe poses in degrees; unlisted joints are 0. Signs follow the humanoid: hips and
# shoulders flex forward with negative y, knees bend positive, elbows negative, the
# torso leans forward with positive abdomen_y; right arm abducts with negative x.
_ARMS_DOWN = {
    "right_shoulder_x": -10.0,
    "left_shoulder_x": 10.0,
    "right_elbow_y": -15.0,
    "left_elbow_y": -15.0,
}
POSES: dict[str, dict[str, float]] = {
    "stand": dict(_ARMS_DOWN),
    "left_knee_up": {
        **_ARMS_DOWN, "left_hip_y": -70.0, "left_knee_y": 90.0, "left_ankle_y": -20.0,
        "right_shoulder_y": -40.0, "left_shoulder_y": 30.0, "right_elbow_y": -50.0, "left_elbow_y": -20.0,
        "abdomen_z": 5.0,
    },
    "right_knee_up": {
        **_ARMS_DOWN, "right_hip_y": -70.0, "right_knee_y": 90.0, "right_ankle_y": -20.0,
        "left_shoulder_y": -40.0, "right_shoulder_y": 30.0, "left_elbow_y": -50.0, "right_elbow_y": -20.0,
        "abdomen_z": -5.0,
    },
    "squat": {
        "left_hip_y": -80.0, "right_hip_y": -80.0, "left_knee_y": 110.0, "right_knee_y": 110.0,
        "left_ankle_y": -30.0, "right_ankle_y": -30.0, "abdomen_y": 25.0, "neck_y": -20.0,
        "right_shoulder_y": -80.0, "left_shoulder_y": -80.0, "right_shoulder_x": -10.0, "left_shoulder_x": 10.0,
        "right_elbow_y": -10.0, "left_elbow_y": -10.0,
    },
}  # fmt: skip

KEYFRAMES: tuple[tuple[float, str], ...] = (
    (0.0, "stand"), (0.5, "left_knee_up"), (1.0, "stand"), (1.5, "right_knee_up"),
    (2.0, "stand"), (2.75, "squat"), (3.5, "stand"), (4.0, "stand"),
)  # fmt: skip
"""(time s, pose) of one 4 s cycle; longer clips repeat it."""


def _pose_vector(pose: dict[str, float], dof_names: tuple[str, ...]) -> np.ndarray:
    unknown = set(pose) - set(dof_names)
    if unknown:
        raise KeyError(f"demo pose uses unknown joints {sorted(unknown)}")
    return np.radians([pose.get(n, 0.0) for n in dof_names])


def keyframed_dofs(times: np.ndarray, dof_names: tuple[str, ...]) -> np.ndarray:
    """Joint angles ``[T, J]`` (rad) at ``times [T]`` (s), smoothstep-eased between keyframes."""
    key_t = np.array([t for t, _ in KEYFRAMES])
    key_q = np.stack([_pose_vector(POSES[p], dof_names) for _, p in KEYFRAMES])
    period = key_t[-1]
    tt = np.mod(times, period)
    i = np.clip(np.searchsorted(key_t, tt, side="right") - 1, 0, len(key_t) - 2)
    u = (tt - key_t[i]) / (key_t[i + 1] - key_t[i])
    s = (u * u * (3 - 2 * u))[:, None]
    return (1 - s) * key_q[i] + s * key_q[i + 1]


def _support_root(dof: np.ndarray, dof_names: tuple[str, ...], stand_z: float) -> np.ndarray:
    """Root positions ``[T, 3]`` that keep the lower (supporting) ankle at its standing place."""
    from mimic2dm.characters.humanoid import OFFSETS

    thigh, shin = -OFFSETS[10][2], -OFFSETS[11][2]
    drops, fwd = [], []
    for side in ("left", "right"):
        h = dof[:, dof_names.index(f"{side}_hip_y")]
        k = dof[:, dof_names.index(f"{side}_knee_y")]
        drops.append(thigh * np.cos(h) + shin * np.cos(h + k))
        fwd.append(-thigh * np.sin(h) - shin * np.sin(h + k))  # ankle ahead of the hip
    drops, fwd = np.stack(drops), np.stack(fwd)
    support = np.argmax(drops, axis=0)
    cols = np.arange(dof.shape[0])
    root = np.zeros((dof.shape[0], 3))
    root[:, 0] = -fwd[support, cols]
    root[:, 2] = stand_z - (thigh + shin) + drops[support, cols]
    return root


def make_demo_motion3d(seconds: float = 4.0, fps: float = 30.0) -> Motion3D:
    """The keyframed humanoid motion as a :class:`Motion3D` (with its 3D keypoints).

    Args:
        seconds: clip length (the 4 s cycle repeats).
        fps: frame rate.

    Returns:
        ``Motion3D`` of ``humanoid`` with ``T = round(seconds * fps)`` frames, joint
        angles inside the humanoid's limits, keypoints from ``kinematic_replay``.
    """
    from mimic2dm.characters.registry import load_character
    from mimic2dm.characters.retarget import kinematic_replay

    spec = load_character("humanoid")
    T = max(2, int(round(seconds * fps)))
    times = np.arange(T) / fps
    dof = keyframed_dofs(times, spec.dof_names)
    dof = np.clip(dof, spec.joint_range[:, 0], spec.joint_range[:, 1])
    root = _support_root(dof, spec.dof_names, float(spec.default_pose.root_pos[2]))
    quat = np.tile(np.asarray(spec.default_pose.root_quat, dtype=np.float64), (T, 1))
    m = Motion3D(
        "humanoid",
        fps,
        root.astype(np.float32),
        quat.astype(np.float32),
        dof.astype(np.float32),
        meta={"source": "mimic2dm.characters.demo_clip", "keyframes": [list(k) for k in KEYFRAMES]},
    )
    m.keypoints3d = np.asarray(kinematic_replay(spec, m.qpos()), dtype=np.float32)
    m.keypoint_set = spec.keypoint_set
    m.validate()
    return m


def make_demo_clip(
    seconds: float = 4.0, fps: float = 30.0, seed: int = 0
) -> tuple[Motion3D, Motion2D]:
    """Demo 3D reference and its 1-view 2D clip through a static virtual camera.

    Args:
        seconds: clip length.
        fps: frame rate.
        seed: camera seed.

    Returns:
        ``(Motion3D, Motion2D)``; the 2D clip has cameras and 3D ground truth.
    """
    m3 = make_demo_motion3d(seconds, fps)
    m2 = synthesize_views(
        m3.keypoints3d,
        m3.keypoint_set,
        fps,
        num_views=1,
        camera="static",
        seed=seed,
        labels={"skill": "march_squat"},
        meta={"source": "mimic2dm.characters.demo_clip", "character": "humanoid"},
    )
    return m3, m2
