"""View-agnostic 2D tracking task (paper 3.2-3.3): engine-free observations, rewards,
terminations and adaptive state initialisation; the reference comes from a
:class:`~mimic2dm.tasks.tracking2d.source.ReferenceSource`.

What apps use to drive a tracker from outside (:mod:`.streaming`): :func:`streaming_task`,
:func:`streaming_config`, :func:`observation_layout`, :func:`roll_out_sequences`, the
stream :class:`StreamingReference` (and :func:`gather`, how a source reads its buffers)."""

from mimic2dm.tasks.common.entry import reference_entry
from mimic2dm.tasks.tracking2d.config import TrackingConfig, upgrade_spec
from mimic2dm.tasks.tracking2d.evaluation import roll_out_sequences
from mimic2dm.tasks.tracking2d.source import StreamingReference, gather
from mimic2dm.tasks.tracking2d.streaming import (
    observation_layout,
    streaming_config,
    streaming_task,
)
from mimic2dm.tasks.tracking2d.task import Tracking2DTask

__all__ = ["ENTRY", "StreamingReference", "Tracking2DTask", "check_clip", "gather",
           "observation_layout", "roll_out_sequences", "streaming_config", "streaming_task"]  # fmt: skip


def check_clip(motion) -> str | None:
    """``TaskEntry.check_data``: a 2D clip with cameras per view (the reference is projected
    through them), or what is expected instead."""
    from mimic2dm.motion.format import Motion2D

    if not isinstance(motion, Motion2D):
        return "a 2D-motion clip (kind 'motion2d'); a Motion3D is tracked by task=tracking3d"
    if not motion.has_cameras:
        return ("a clip with cameras per view; this one has none (a video clip): run "
                "`mimic2dm preprocess` on it first and train on its output (docs/preprocess.md)")  # fmt: skip
    return None


ENTRY = reference_entry(
    "tracking2d",
    "view-agnostic 2D keypoint tracking of reference clips (paper 3.2-3.3)",
    TrackingConfig,
    build="mimic2dm.tasks.tracking2d.factory:build",
    evaluate="mimic2dm.tasks.tracking2d.evaluation:evaluate",
    check_data=check_clip,
    upgrade_spec=upgrade_spec,
)
