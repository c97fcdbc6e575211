"""Where the project's shared data lives: the one place that reads ``MIMIC2DM_SHARED``.

The shared data (mocap clips, ``data/mocap``) sits next to the repository (``../shared``)
in a checkout; the Docker images mount it at ``/data/shared`` and say so with
``MIMIC2DM_SHARED`` (``docker/*.Dockerfile``). Configs reach it as ``${shared_dir}``
(``conf/tracker.yaml``, resolver ``m2d_shared`` in ``mimic2dm/train.py``), code through
:func:`shared_dir` and :func:`mocap_dir`.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "MIMIC2DM_SHARED"
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def shared_dir() -> Path:
    """``$MIMIC2DM_SHARED`` when set (and not empty), else ``../shared`` next to the project."""
    value = os.environ.get(ENV_VAR, "").strip()
    return Path(value) if value else PROJECT_ROOT.parent / "shared"


def mocap_dir() -> Path:
    """The shared mocap clips (``cmu_*.npz``, ``dog_*.npz``): ``shared_dir()/data/mocap``."""
    return shared_dir() / "data" / "mocap"
