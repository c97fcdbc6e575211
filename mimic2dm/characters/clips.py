"""Shared motion-capture clips read through the characters' kinematics.

``shared/data/mocap`` holds CMU human clips (``cmu_*.npz``: local rotations), dog
clips (``dog_*.npz``: joint positions) and DeepMimic motions (``deepmimic/**/*.txt``, read
in memory into those layouts by :mod:`mimic2dm.motion.deepmimic`, exactly as
``mimic2dm data import-deepmimic`` writes them). They become character references here, not in
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
    if path.suffix.lower() == ".txt":
        return "deepmimic"
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
        "(local_rotation), a dog clip (positions), a DeepMimic motion (.txt) or a Motion3D file"
    )


def load_deepmimic_clip(
    path: str | os.PathLike,
    character_file: str | os.PathLike | None = None,
    fps: float | None = None,
    dtype=None,
):
    """A DeepMimic motion (``.txt``) as the clip its ``.npz`` import would load as.

    The motion goes through :func:`mimic2dm.motion.deepmimic.import_deepmimic` in memory and
    becomes a :class:`~mimic2dm.characters.mocap.HumanMocap` (humanoid3d, what
    ``load_cmu_clip`` gives for the ``cmu_*.npz`` that ``data import-deepmimic`` writes) or a
    :class:`~mimic2dm.characters.mocap.DogMocap` (dog3d).

    Args:
        path: the motion file.
        character_file: its DeepMimic character file; default the one in a ``characters/``
            folder beside the clip or one level up whose joints fit the frames
            (:func:`mimic2dm.motion.deepmimic.find_character_file`).
        fps: output frame rate (default the file's).
        dtype: float dtype of the tensors (default float32).

    Raises:
        MotionFormatError: naming the file and the field (no fitting character file, frames...).
    """
    import torch

    from mimic2dm.characters.mocap import DogMocap, HumanMocap
    from mimic2dm.geometry.rotations import quat_normalize
    from mimic2dm.motion import deepmimic
    from mimic2dm.motion.format import MotionFormatError

    path = Path(path)
    if character_file is None:
        character_file = deepmimic.find_character_file(path, deepmimic.frame_width(path))
        if character_file is None:
            raise MotionFormatError(path, "character file", "is not given and no single characters/*.txt beside the clip (or one up) fits its frames", "a DeepMimic character file")  # fmt: skip
    kind, arrays, _ = deepmimic.import_deepmimic(path, character_file, fps)
    dtype = dtype or torch.float32
    if kind == "dog3d":
        return DogMocap(float(arrays["fps"]), torch.as_tensor(arrays["positions"], dtype=dtype),
                        tuple(str(n) for n in arrays["joint_names"]), str(path))  # fmt: skip
    return HumanMocap(
        fps=float(arrays["fps"]),
        root_translation=torch.as_tensor(arrays["root_translation"], dtype=dtype),
        local_rotation=quat_normalize(torch.as_tensor(arrays["local_rotation"], dtype=dtype)),
        offsets=torch.as_tensor(arrays["local_translation"], dtype=dtype),
        parents=tuple(int(p) for p in arrays["parents"]),
        names=tuple(str(n) for n in arrays["node_names"]),
        source=str(path),
    )


def _load_clip(path: Path, kind: str, dtype=None):
    """``(clip, character)`` of a ``cmu``, ``dog`` or ``deepmimic`` clip (:func:`_clip_kind`)."""
    import torch

    from mimic2dm.characters import mocap

    dtype = dtype or torch.float32
    if kind == "deepmimic":
        clip = load_deepmimic_clip(path, dtype=dtype)
    elif kind == "cmu":
        clip = mocap.load_cmu_clip(path, dtype=dtype)
    else:
        clip = mocap.load_dog_clip(path, dtype=dtype)
    return clip, "humanoid" if isinstance(clip, mocap.HumanMocap) else "dog"


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

    from mimic2dm.characters import retarget

    path = Path(path)
    kind = _clip_kind(path)
    if kind == "motion3d":
        return load_motion3d(path)
    clip, character = _load_clip(path, kind, torch.float64)
    if character == "humanoid":
        qpos = retarget.retarget_human(clip)
    else:
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
    """3D keypoints of a shared mocap clip (``cmu_*.npz``, ``dog_*.npz``, a DeepMimic ``.txt``)
    or a Motion3D file.

    Human clips (CMU, DeepMimic humanoid3d) give COCO-17 keypoints of the ``humanoid``; dog
    clips (and dog3d) ``dog17`` keypoints of the ``dog`` (the characters' own keypoint
    definitions). A DeepMimic motion is read through :func:`load_deepmimic_clip` with the
    character file beside it, so its keypoints are those of its ``data import-deepmimic`` npz.

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

    clip, character = _load_clip(path, kind)
    if character == "humanoid":
        kp, kset = mocap.human_keypoints(clip), "coco17"
    else:
        kp, kset = mocap.dog_keypoints(clip), "dog17"
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
