"""Clip files around preprocessing: ``data strip`` and the preprocessed outputs.

- :func:`strip_clip` keeps what a video gives (2D keypoints, confidences, image size,
  fps, the object's 2D track, labels, meta) and drops the cameras, every 3D field and
  every estimate;
- :func:`preprocessed_clip` is the input (stripped) plus the estimated cameras in the
  camera fields, ``est_keypoints3d`` and the ``init_*`` states; ``keypoints3d`` stays
  reserved for ground truth and is never written;
- :func:`fit_motion3d` is the estimated 3D motion as a :class:`Motion3D` reference (what a
  two-stage baseline tracks).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import numpy as np

from mimic2dm.motion.format import Motion2D, Motion3D

VIDEO_FIELDS = (
    "keypoints", "confidence", "keypoint_set", "fps", "image_size",
    "object_center", "object_box", "object_confidence", "labels", "meta",
)  # fmt: skip
"""Fields a clip made from a video has; :func:`strip_clip` drops all others."""


def strip_clip(m: Motion2D, source: str | None = None) -> Motion2D:
    """The clip as a video would give it: :data:`VIDEO_FIELDS` only.

    ``meta`` gains ``stripped_from`` (``source``) and loses nothing else.
    """
    kw: dict[str, Any] = {
        f.name: getattr(m, f.name) for f in fields(Motion2D) if f.name in VIDEO_FIELDS
    }
    kw["labels"] = dict(m.labels)
    kw["meta"] = {**m.meta, "stripped_from": source or "<memory>"}
    return Motion2D(**kw)


def select_views(m: Motion2D, ids: list[int]) -> Motion2D:
    """The clip with views ``ids`` only (in that order); 3D data is shared."""
    if list(ids) == list(range(m.num_views)):
        return m
    s = [m.view(v) for v in ids]
    per_view = ("keypoints", "confidence", "object_center", "object_box", "object_confidence",
                "camera_R", "camera_t", "camera_intrinsics")  # fmt: skip
    kw = {f.name: getattr(s[0], f.name) for f in fields(Motion2D)}
    for name in per_view:
        if kw[name] is not None:
            kw[name] = np.concatenate([getattr(x, name) for x in s])
    return Motion2D(**kw)


def preprocessed_clip(m: Motion2D, fit, character: str, meta: dict[str, Any]) -> Motion2D:
    """``m`` stripped, plus the estimates of ``fit`` (:class:`~mimic2dm.preprocess.optimize.FitResult`).

    Args:
        m: input clip, one view per camera of ``fit``.
        character: registry name of the character the states belong to.
        meta: stored under ``meta["preprocess"]``.
    """
    out = strip_clip(m, m.meta.get("stripped_from"))
    out.meta = {k: v for k, v in out.meta.items() if k != "stripped_from"} | {"preprocess": meta}
    if "stripped_from" in m.meta:
        out.meta["stripped_from"] = m.meta["stripped_from"]
    # one view: cameras [F, ...]; several (multiview.fit_views): [V, F, ...]
    per_view = fit.camera_R.ndim == 4
    for name in ("camera_R", "camera_t", "camera_intrinsics"):
        x = getattr(fit, name).astype(np.float32)
        setattr(out, name, x if per_view else x[None])
    out.est_keypoints3d = fit.keypoints3d
    out.init_character = character
    out.init_root_pos, out.init_root_quat = fit.root_pos, fit.root_quat
    out.init_root_lin_vel, out.init_root_ang_vel = fit.root_lin_vel, fit.root_ang_vel
    out.init_dof_pos, out.init_dof_vel = fit.dof_pos, fit.dof_vel
    out.validate()
    return out


def fit_motion3d(
    fit, character: str, keypoint_set: str, fps: float, meta: dict[str, Any]
) -> Motion3D:
    """The estimated motion as a 3D reference (joint angles, root, keypoints)."""
    return Motion3D(
        character=character, fps=fps, root_pos=fit.root_pos, root_quat=fit.root_quat,
        dof_pos=fit.dof_pos, keypoints3d=fit.keypoints3d, keypoint_set=keypoint_set,
        meta={"source": "mimic2dm preprocess", **meta},
    )  # fmt: skip
