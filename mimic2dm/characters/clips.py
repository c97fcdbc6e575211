"""Shared motion-capture clips read through the characters' kinematics.

``shared/data/mocap`` holds CMU human clips (``cmu_*.npz``: local rotations) and dog
clips (``dog_*.npz``: joint positions). They become character references here, not in
``motion/``, because reading them needs the characters (skeletons, retargeting, MuJoCo
forward kinematics) and ``motion`` sits below ``characters`` (docs/layout.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mimic2dm.geometry.rotations import wxyz_to_xyzw
from mimic2dm.motion.format import Motion3D, load_motion3d, read_kind


def _opt32(x: np.ndarray | None) -> np.ndarray | None:
    return None if x is None else x.astype(np.float32)


@dataclass
class Keypoints3D:
    """3D keypoints of a reference clip.

    Attributes:
        keypoints: ``[T, K, 3]`` world keypoints (metres, z-up), float32.
        keypoint_set: name of the set.
        character: character the clip belongs to (``humanoid``, ``dog``...).
        fps: frames per second.
        object3d: optional ``[T, 3]`` object positions.
        source: file read.
    """

    keypoints: np.ndarray
    keypoint_set: str
    character: str
    fps: float
    object3d: np.ndarray | None = None
    source: str = ""


def _clip_kind(path: Path) -> str:
    if read_kind(path) == "motion3d":
        return "motion3d"
    try:
        with np.load(path, allow_pickle=False) as z:
            files = set(z.files)
    except Exception as e:  # noqa: BLE001
        raise ValueError(f"{path}: not a readable .npz clip ({type(e).__name__}: {e})") from None
    if "local_rotation" in files:
        return "cmu"
    if "positions" in files:
        return "dog"
    raise ValueError(
        f"{path}: unknown clip layout with keys {sorted(files)}; expected a CMU clip "
        "(local_rotation), a dog clip (positions) or a Motion3D file"
    )


def motion3d_keypoints(m: Motion3D) -> np.ndarray:
    """``[T, K, 3]`` keypoints of a :class:`Motion3D`: stored ones, else MuJoCo kinematic replay."""
    if m.keypoints3d is not None:
        return np.asarray(m.keypoints3d, dtype=np.float32)
    from mimic2dm.characters.retarget import kinematic_replay

    return np.asarray(kinematic_replay(m.character, m.qpos()), dtype=np.float32)


def mocap_to_motion3d(path: str | os.PathLike) -> Motion3D:
    """Retarget a shared mocap clip onto its character as a :class:`Motion3D` reference.

    Human clips are retargeted exactly (``retarget_human``), dog clips by inverse
    kinematics (``retarget_dog``); ``keypoints3d`` is the character's own keypoints
    replayed from the retargeted ``qpos`` (consistent with ``dof_pos``).
    """
    import torch

    from mimic2dm.characters import mocap, retarget

    path = Path(path)
    kind = _clip_kind(path)
    if kind == "motion3d":
        return load_motion3d(path)
    if kind == "cmu":
        clip, character = mocap.load_cmu_clip(path, dtype=torch.float64), "humanoid"
        qpos = retarget.retarget_human(clip)
    else:
        clip, character = mocap.load_dog_clip(path, dtype=torch.float64), "dog"
        qpos = retarget.retarget_dog(clip)
    q = qpos.detach().cpu().numpy().astype(np.float64)
    quat = wxyz_to_xyzw(q[:, 3:7])  # MuJoCo's free-joint quaternion is wxyz
    quat /= np.linalg.norm(quat, axis=1, keepdims=True)
    m = Motion3D(
        character,
        float(clip.fps),
        q[:, :3],
        quat,
        q[:, 7:],
        meta={"source": str(path), "retargeted": kind},
    )
    m.keypoints3d = retarget.kinematic_replay(character, q).astype(np.float32)
    m.keypoint_set = _character_keypoint_set(character)
    m.validate()
    return m


def clip_skill(stem: str) -> str:
    """The skill label of a shared mocap clip from its file stem: ``cmu_walk`` -> ``walk``,
    ``dog_trot`` -> ``trot`` (the generators' condition labels and the tracking clips' ``skill``)."""
    return stem.split("_", 1)[1] if "_" in stem else stem


def load_mocap_keypoints(path: str | os.PathLike) -> Keypoints3D:
    """3D keypoints of a shared mocap clip (``cmu_*.npz``, ``dog_*.npz``) or a Motion3D file.

    Human clips give COCO-17 keypoints of the ``humanoid``; dog clips ``dog17``
    keypoints of the ``dog`` (the characters' own keypoint definitions).

    Raises:
        ValueError / KeyError / FileNotFoundError naming the file.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"clip not found: {path}")
    kind = _clip_kind(path)
    if kind == "motion3d":
        m = load_motion3d(path)
        kp = motion3d_keypoints(m)
        kset = m.keypoint_set or _character_keypoint_set(m.character)
        return Keypoints3D(kp, kset, m.character, m.fps, _opt32(m.object_pos), str(path))
    from mimic2dm.characters import mocap

    if kind == "cmu":
        clip = mocap.load_cmu_clip(path)
        kp, kset, character = mocap.human_keypoints(clip), "coco17", "humanoid"
    else:
        clip = mocap.load_dog_clip(path)
        kp, kset, character = mocap.dog_keypoints(clip), "dog17", "dog"
    return Keypoints3D(
        kp.detach().cpu().numpy().astype(np.float32),
        kset,
        character,
        float(clip.fps),
        None,
        str(path),
    )


def _character_keypoint_set(character: str) -> str:
    from mimic2dm.characters.registry import load_character

    return load_character(character).keypoint_set
