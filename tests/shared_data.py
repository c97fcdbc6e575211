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
and shared files too big to ship stay in the shared data: the markers below skip the tests
that need them, saying what is missing and how to get it.
"""

from __future__ import annotations

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

#: The dog clips as AI4Animation's motion capture, where a test's bounds or frame counts are
#: those clips' own (the shipped ``dog_*.npz`` are DeepMimic's dog3d gaits).
needs_ai4animation_dogs = pytest.mark.skipif(
    ON_SHIPPED_CLIPS,
    reason=f"needs the AI4Animation dog clips (CC BY-NC, not shipped): its bounds and frame "
    f"counts are theirs, the shipped dog clips are DeepMimic's; {HINT}",
)

#: The 2D keypoint files of ``shared/data/video2d``, one marker per data set.
VIDEO2D = shared_dir() / "data" / "video2d"
needs_aistpp_sequences = pytest.mark.skipif(
    not (VIDEO2D / "aistpp").is_dir(),
    reason=f"needs the full AIST++ sequences (9 views x 12 s, 4 MB; the shipped fixture is "
    f"2 s of one view): {HINT}",
)
needs_penn_action = pytest.mark.skipif(
    not (VIDEO2D / "penn_action").is_dir(),
    reason=f"needs the Penn Action clips (research use only, not shipped): {HINT}",
)
needs_badja_files = pytest.mark.skipif(
    not (VIDEO2D / "badja").is_dir(),
    reason=f"needs BADJA's rs_dog, dog and dog-agility files (the shipped fixture is 20 "
    f"frames of rs_dog): {HINT}",
)

#: The DeepMimic clips of ``shared/data/mocap/deepmimic`` (only the walk and two dog gaits
#: ship, in ``tests/fixtures/deepmimic``).
DEEPMIMIC = shared_dir() / "data" / "mocap" / "deepmimic"
needs_deepmimic_clips = pytest.mark.skipif(
    not DEEPMIMIC.is_dir(),
    reason=f"needs all 16 DeepMimic humanoid clips (1 MB, not shipped): {HINT}",
)
