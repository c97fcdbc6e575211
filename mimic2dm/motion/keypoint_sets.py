"""Keypoint sets: names, the root and body-size definitions of the canonical transform, and
the skeleton edges used for drawing.

``coco17`` is the COCO/ViTPose human order; ``dog17`` is an AP-10K-like animal order.
"""

from __future__ import annotations

from dataclasses import dataclass

from mimic2dm.utils.registry import Registry

# A segment joins the mean of one group of keypoints to the mean of another.
Segment = tuple[tuple[int, ...], tuple[int, ...]]


@dataclass(frozen=True)
class KeypointSet:
    """A named, ordered set of 2D/3D keypoints.

    Attributes:
        name: registry name (stored in every 2D-motion file).
        names: keypoint names in order, length ``K``.
        root: indices averaged into the 2D root (docs/design.md section 9: hip midpoint / body centre).
        scale_segments: segments whose mean 2D length is the per-frame body size.
        edges: pairs of indices drawn as bones.
        flip: left/right index pairs (for mirroring augmentations).
    """

    name: str
    names: tuple[str, ...]
    root: tuple[int, ...]
    scale_segments: tuple[Segment, ...]
    edges: tuple[tuple[int, int], ...]
    flip: tuple[tuple[int, int], ...]

    @property
    def num_keypoints(self) -> int:
        return len(self.names)

    def index(self, name: str) -> int:
        """Index of keypoint ``name``; the error lists the valid names."""
        try:
            return self.names.index(name)
        except ValueError:
            raise KeyError(
                f"keypoint set {self.name!r} has no keypoint {name!r}; valid: {', '.join(self.names)}"
            ) from None


COCO17 = KeypointSet(
    name="coco17",
    names=(
        "nose", "left_eye", "right_eye", "left_ear", "right_ear",
        "left_shoulder", "right_shoulder", "left_elbow", "right_elbow", "left_wrist", "right_wrist",
        "left_hip", "right_hip", "left_knee", "right_knee", "left_ankle", "right_ankle",
    ),
    root=(11, 12),
    scale_segments=(((5, 6), (11, 12)),),
    edges=(
        (0, 1), (0, 2), (1, 3), (2, 4), (5, 6), (5, 7), (7, 9), (6, 8), (8, 10),
        (5, 11), (6, 12), (11, 12), (11, 13), (13, 15), (12, 14), (14, 16),
    ),
    flip=((1, 2), (3, 4), (5, 6), (7, 8), (9, 10), (11, 12), (13, 14), (15, 16)),
)  # fmt: skip

DOG17 = KeypointSet(
    name="dog17",
    names=(
        "left_eye", "right_eye", "nose", "neck", "root_of_tail",
        "left_shoulder", "left_elbow", "left_front_paw", "right_shoulder", "right_elbow", "right_front_paw",
        "left_hip", "left_knee", "left_back_paw", "right_hip", "right_knee", "right_back_paw",
    ),
    root=(5, 8, 11, 14),
    # body length alone collapses in front views; legs keep the size defined there
    scale_segments=(((5, 8), (11, 14)), ((5,), (7,)), ((8,), (10,)), ((11,), (13,)), ((14,), (16,))),
    edges=(
        (0, 1), (0, 2), (1, 2), (2, 3), (3, 5), (3, 8), (3, 4), (4, 11), (4, 14),
        (5, 6), (6, 7), (8, 9), (9, 10), (11, 12), (12, 13), (14, 15), (15, 16),
    ),
    flip=((0, 1), (5, 8), (6, 9), (7, 10), (11, 14), (12, 15), (13, 16)),
)  # fmt: skip

KEYPOINT_SETS: Registry[KeypointSet] = Registry("keypoint set")
KEYPOINT_SETS.register("coco17", lambda: COCO17)
KEYPOINT_SETS.register("dog17", lambda: DOG17)


def load_keypoint_set(name: str) -> KeypointSet:
    """The keypoint set ``name`` (``coco17``, ``dog17``)."""
    return KEYPOINT_SETS.load(name)
