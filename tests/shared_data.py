"""Where the tests find the shared data, and why a test skips when part of it is missing.

The shared data (``../shared`` next to the project, or ``$MIMIC2DM_SHARED``) is used when its
``data/mocap/cmu_walk.npz`` is there. Elsewhere (a user's checkout) the tests use the clips
the project ships in ``tests/fixtures/shared``: the CMU clips (BSD-3) and two DeepMimic dog
clips (MIT) in the same ``data/mocap`` layout; ``tests/fixtures/shared/README.md`` gives
their sources. Importing this module (``conftest.py`` does, before any test module) points
``MIMIC2DM_SHARED`` there, so the tests' ``mocap_dir()``, the configs' ``${shared_dir}`` and
the command lines the tests start all read the same folder; the library itself only reads
``MIMIC2DM_SHARED`` and never looks at the fixtures.

Data that may not ship (the AI4Animation dog clips, CC BY-NC; Penn Action, research use only)
and shared files too big to ship stay in the shared data. The dog tests run on either dog
data set: :data:`AI4ANIMATION_DOGS` says which one is in use, so that a test asserts the
AI4Animation clips' own numbers on them and, on the DeepMimic dogs, what it measures from the
clip itself. The tests of the full AIST++ sequences and of all DeepMimic clips run on the
shipped cuts where those are absent; the markers below skip the few tests that need data that
never ships, saying what is missing and how to get it.
"""

from __future__ import annotations

import filecmp
import os
from pathlib import Path

import pytest

from mimic2dm.utils.paths import ENV_VAR, mocap_dir, shared_dir

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SHIPPED_SHARED = FIXTURES / "shared"
HINT = f"set {ENV_VAR} to the project's shared data (../shared)"


def _use_shipped_clips_where_the_shared_data_is_absent() -> bool:
    if (mocap_dir() / "cmu_walk.npz").is_file():
        return False
    os.environ[ENV_VAR] = str(SHIPPED_SHARED)
    return True


#: True where the tests run on the shipped clips (no shared data found).
ON_SHIPPED_CLIPS = _use_shipped_clips_where_the_shared_data_is_absent()


def _dog_clips_are_ai4animations() -> bool:
    """Whether ``mocap_dir()/dog_trot.npz`` is the AI4Animation trot: anything but the shipped
    DeepMimic trot (the two share the ``dog_*.npz`` layout; a missing clip skips its tests)."""
    shipped = SHIPPED_SHARED / "data" / "mocap" / "dog_trot.npz"
    path = mocap_dir() / "dog_trot.npz"
    return not (path.is_file() and filecmp.cmp(path, shipped, shallow=False))


#: True where the dog clips are AI4Animation's motion capture (the shared data's), False on
#: the shipped DeepMimic dog3d gaits: the dog tests assert the AI4Animation clips' own frame
#: counts, facing and bounds on the first, and what they measure from the clip on the second.
AI4ANIMATION_DOGS = _dog_clips_are_ai4animations()

#: The 2D keypoint files of ``shared/data/video2d``: a marker for each data set that the
#: tests cannot replace by a shipped cut.
VIDEO2D = shared_dir() / "data" / "video2d"
#: The full AIST++ sequences (9 views x 12 s, 4 MB; ``tests/fixtures/aistpp`` holds 2 s of one
#: view, which the tests use where these are absent).
AISTPP = VIDEO2D / "aistpp"
needs_penn_action = pytest.mark.skipif(
    not (VIDEO2D / "penn_action").is_dir(),
    reason=f"needs the Penn Action clips (research use only, not shipped): {HINT}",
)
needs_badja_files = pytest.mark.skipif(
    not (VIDEO2D / "badja").is_dir(),
    reason=f"needs BADJA's rs_dog, dog and dog-agility files (the shipped fixture is 20 "
    f"frames of rs_dog): {HINT}",
)

#: The DeepMimic clips: ``shared/data/mocap/deepmimic`` (16 humanoid clips, dog gaits and
#: characters) where it is there, else the few in ``tests/fixtures/deepmimic`` (same layout).
_SHARED_DEEPMIMIC = shared_dir() / "data" / "mocap" / "deepmimic"
ALL_DEEPMIMIC_CLIPS = _SHARED_DEEPMIMIC.is_dir()
DEEPMIMIC = _SHARED_DEEPMIMIC if ALL_DEEPMIMIC_CLIPS else FIXTURES / "deepmimic"
