"""Motion-capture clips: loading, forward kinematics and keypoints (torch).

Two clip formats (plain ``.npz``, z-up, metres, see ``shared/data/mocap/README.md``):

- humans (:class:`HumanMocap`): the 15-body skeleton of
  :mod:`mimic2dm.characters.humanoid`, local rotations (xyzw) + root translation;
- dogs (:class:`DogMocap`): 27 global joint positions per frame (AI4Animation
  skeleton; the dog faces -x).

Keypoints come out in the keypoint-set order of the matching character (COCO-17 for
the humanoid, ``dog17`` for the dog), so they can be compared directly with the
character's sites.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mimic2dm.characters import humanoid
from mimic2dm.characters.kinematics import keypoints_from_bodies
from mimic2dm.geometry.rotations import quat_mul, quat_normalize, quat_rotate
from mimic2dm.motion.keypoint_sets import DOG17

__all__ = [
    "DogMocap",
    "HumanMocap",
    "dog_head_frame",
    "dog_keypoints",
    "human_fk",
    "human_keypoints",
    "keypoints_from_bodies",
    "load_cmu_clip",
    "load_dog_clip",
]

DOG_JOINT_NAMES: tuple[str, ...] = (
    "Hips", "Spine", "Spine1", "Neck", "Head", "HeadSite",
    "LeftShoulder", "LeftArm", "LeftForeArm", "LeftHand", "LeftHandSite",
    "RightShoulder", "RightArm", "RightForeArm", "RightHand", "RightHandSite",
    "LeftUpLeg", "LeftLeg", "LeftFoot", "LeftFootSite",
    "RightUpLeg", "RightLeg", "RightFoot", "RightFootSite",
    "Tail", "Tail1", "Tail1Site",
)  # fmt: skip
"""Joint order of the dog clips."""

DOG17_NAMES: tuple[str, ...] = DOG17.names
"""AP-10K keypoint order (``keypoint_set="dog17"``; the keypoint set is the one source)."""

DOG17_FROM_MOCAP: dict[str, str] = {
    "nose": "HeadSite",  # tip of the head chain = snout
    "neck": "Neck",
    "root_of_tail": "Tail",
    "left_shoulder": "LeftArm",  # shoulder joint; "LeftShoulder" is the scapula root
    "left_elbow": "LeftForeArm",
    "left_front_paw": "LeftHandSite",  # toe end, on the ground in stance
    "right_shoulder": "RightArm",
    "right_elbow": "RightForeArm",
    "right_front_paw": "RightHandSite",
    "left_hip": "LeftUpLeg",
    "left_knee": "LeftLeg",  # stifle
    "left_back_paw": "LeftFootSite",
    "right_hip": "RightUpLeg",
    "right_knee": "RightLeg",
    "right_back_paw": "RightFootSite",
}
"""dog17 keypoints read directly from mocap joints; the eyes come from the head frame."""

DOG_EYE_OFFSET = (0.45, 0.035, 0.035)
"""Eyes in the mocap head frame: (fraction of Head->HeadSite along the snout,
lateral half-distance m, height m above the snout axis). See :func:`dog_head_frame`."""


@dataclass(frozen=True, eq=False)
class HumanMocap:
    """A human clip on the 15-body skeleton.

    Attributes:
        fps: frames per second.
        root_translation: ``[T, 3]`` root (pelvis) position per frame.
        local_rotation: ``[T, 15, 4]`` xyzw; row 0 is the root's global rotation,
            others are rotations relative to the parent body.
        offsets: ``[15, 3]`` joint offsets from the parent (row 0: rest height).
        parents: parent index per body, -1 for the root.
        names: body names.
        source: file the clip was read from.
    """

    fps: float
    root_translation: torch.Tensor
    local_rotation: torch.Tensor
    offsets: torch.Tensor
    parents: tuple[int, ...]
    names: tuple[str, ...]
    source: str = ""

    @property
    def num_frames(self) -> int:
        return self.root_translation.shape[0]


@dataclass(frozen=True, eq=False)
class DogMocap:
    """A dog clip: global joint positions.

    Attributes:
        fps: frames per second.
        positions: ``[T, 27, 3]`` global joint positions (z-up, m).
        joint_names: 27 names, see :data:`DOG_JOINT_NAMES`.
        source: file the clip was read from.
    """

    fps: float
    positions: torch.Tensor
    joint_names: tuple[str, ...]
    source: str = ""

    @property
    def num_frames(self) -> int:
        return self.positions.shape[0]

    def joint(self, name: str) -> torch.Tensor:
        """``[T, 3]`` positions of the mocap joint ``name``."""
        try:
            return self.positions[:, self.joint_names.index(name)]
        except ValueError:
            raise KeyError(
                f"{self.source}: no dog joint {name!r}; joints: {self.joint_names}"
            ) from None


# ----------------------------------------------------------------------------- loading
def _read_npz(path: str | Path, shapes: dict[str, tuple]) -> dict[str, np.ndarray]:
    """Read ``path`` and check each key's shape pattern (``None`` = any size)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"mocap clip not found: {path}")
    with np.load(path) as data:
        out = {}
        for key, pattern in shapes.items():
            if key not in data.files:
                raise KeyError(f"{path}: missing key {key!r} (found: {sorted(data.files)})")
            arr = data[key]
            ok = arr.ndim == len(pattern) and all(
                p is None or p == s for p, s in zip(pattern, arr.shape, strict=True)
            )
            if not ok:
                want = "[" + ", ".join("*" if p is None else str(p) for p in pattern) + "]"
                raise ValueError(
                    f"{path}: key {key!r} has shape {list(arr.shape)}, expected {want}"
                )
            out[key] = arr
    return out


def load_cmu_clip(path: str | Path, dtype: torch.dtype = torch.float32) -> HumanMocap:
    """Load a human clip (``cmu_*.npz``).

    Args:
        path: the ``.npz`` file.
        dtype: float dtype of the returned tensors.

    Returns:
        :class:`HumanMocap`; rotations renormalised.

    Raises:
        FileNotFoundError / KeyError / ValueError naming the file and the bad key.
    """
    nb = len(humanoid.BODY_NAMES)
    arr = _read_npz(
        path,
        {
            "node_names": (nb,),
            "parents": (nb,),
            "local_translation": (nb, 3),
            "local_rotation": (None, nb, 4),
            "root_translation": (None, 3),
            "fps": (),
        },
    )
    rot, root = arr["local_rotation"], arr["root_translation"]
    if rot.shape[0] != root.shape[0] or rot.shape[0] == 0:
        raise ValueError(
            f"{path}: local_rotation has {rot.shape[0]} frames, root_translation {root.shape[0]}"
        )
    parents = tuple(int(p) for p in arr["parents"])
    if parents[0] != -1 or any(not 0 <= p < i for i, p in enumerate(parents[1:], 1)):
        raise ValueError(
            f"{path}: key 'parents' must be -1 then indices of earlier bodies, got {parents}"
        )
    return HumanMocap(
        fps=float(arr["fps"]),
        root_translation=torch.as_tensor(root, dtype=dtype),
        local_rotation=quat_normalize(torch.as_tensor(rot, dtype=dtype)),
        offsets=torch.as_tensor(arr["local_translation"], dtype=dtype),
        parents=parents,
        names=tuple(str(n) for n in arr["node_names"]),
        source=str(path),
    )


def load_dog_clip(path: str | Path, dtype: torch.dtype = torch.float32) -> DogMocap:
    """Load a dog clip (``dog_*.npz``).

    Args:
        path: the ``.npz`` file.
        dtype: float dtype of the returned tensors.

    Returns:
        :class:`DogMocap`.

    Raises:
        FileNotFoundError / KeyError / ValueError naming the file and the bad key.
    """
    nj = len(DOG_JOINT_NAMES)
    arr = _read_npz(path, {"joint_names": (nj,), "positions": (None, nj, 3), "fps": ()})
    names = tuple(str(n) for n in arr["joint_names"])
    if names != DOG_JOINT_NAMES:
        raise ValueError(f"{path}: key 'joint_names' is {names}, expected {DOG_JOINT_NAMES}")
    if arr["positions"].shape[0] == 0 or not np.isfinite(arr["positions"]).all():
        raise ValueError(f"{path}: key 'positions' is empty or not finite")
    return DogMocap(
        fps=float(arr["fps"]),
        positions=torch.as_tensor(arr["positions"], dtype=dtype),
        joint_names=names,
        source=str(path),
    )


# ----------------------------------------------------------------------------- humans
def human_fk(clip: HumanMocap) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward kinematics of a human clip.

    Returns:
        ``(pos [T, 15, 3], rot [T, 15, 4] xyzw)``: global body-origin positions (= joint
        positions) and global body rotations, in ``clip.names`` order.
    """
    t = clip.num_frames
    pos: list[torch.Tensor] = [clip.root_translation]
    rot: list[torch.Tensor] = [clip.local_rotation[:, 0]]
    for j in range(1, len(clip.parents)):
        p = clip.parents[j]
        rot.append(quat_mul(rot[p], clip.local_rotation[:, j]))
        pos.append(pos[p] + quat_rotate(rot[p], clip.offsets[j].expand(t, 3)))
    return torch.stack(pos, dim=1), torch.stack(rot, dim=1)


def human_keypoints(clip: HumanMocap) -> torch.Tensor:
    """COCO-17 keypoints ``[T, 17, 3]`` of a human clip (the humanoid's site offsets)."""
    missing = {b for b, _ in humanoid.SITE_OFFSETS} - set(clip.names)
    if missing:
        raise KeyError(f"{clip.source}: skeleton lacks bodies {sorted(missing)}")
    pos, rot = human_fk(clip)
    return keypoints_from_bodies(humanoid.SITE_OFFSETS, clip.names, pos, rot)


# ----------------------------------------------------------------------------- dogs
def _unit(v: torch.Tensor) -> torch.Tensor:
    return v / v.norm(dim=-1, keepdim=True).clamp_min(1e-9)


def dog_head_frame(clip: DogMocap) -> tuple[torch.Tensor, torch.Tensor]:
    """Head frame of a dog clip.

    x = snout direction (Head -> HeadSite); y = the dog's left, taken from the shoulders
    (RightArm -> LeftArm) and made orthogonal to x; z = x cross y (up).

    Returns:
        ``(origin [T, 3] = Head, axes [T, 3, 3])`` with axes as matrix columns.
    """
    head = clip.joint("Head")
    fwd = _unit(clip.joint("HeadSite") - head)
    left = clip.joint("LeftArm") - clip.joint("RightArm")
    left = _unit(left - (left * fwd).sum(-1, keepdim=True) * fwd)
    up = torch.cross(fwd, left, dim=-1)
    return head, torch.stack([fwd, left, up], dim=-1)


def dog_keypoints(clip: DogMocap) -> torch.Tensor:
    """dog17 keypoints ``[T, 17, 3]`` of a dog clip, AP-10K order.

    Mapping in :data:`DOG17_FROM_MOCAP`; eyes are placed in :func:`dog_head_frame` at
    :data:`DOG_EYE_OFFSET` (the mocap has no eye markers).
    """
    head, axes = dog_head_frame(clip)
    snout = (clip.joint("HeadSite") - head).norm(dim=-1, keepdim=True)
    frac, half_width, height = DOG_EYE_OFFSET
    out = []
    for name in DOG17_NAMES:
        if name in DOG17_FROM_MOCAP:
            out.append(clip.joint(DOG17_FROM_MOCAP[name]))
            continue
        side = half_width if name == "left_eye" else -half_width
        local = torch.cat(
            [frac * snout, torch.full_like(snout, side), torch.full_like(snout, height)], -1
        )
        out.append(head + (axes @ local.unsqueeze(-1)).squeeze(-1))
    return torch.stack(out, dim=1)
