"""Deprecated location: the canonical transform ``G`` moved to :mod:`mimic2dm.motion.canonical`.

It needs a keypoint set, so it lives with ``motion`` (geometry sits below motion in the
layer table, docs/layout.md). This re-export is temporary; import from motion.
"""

from mimic2dm.motion.canonical import *  # noqa: F401,F403
from mimic2dm.motion.canonical import (  # noqa: F401
    CanonicalMotion,
    body_scale,
    fill_by_interpolation,
    from_canonical,
    root_2d,
    to_canonical,
)
