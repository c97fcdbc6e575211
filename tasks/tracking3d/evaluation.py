"""Evaluation of the 3D tracker (``mimic2dm eval`` / ``mimic2dm compare`` on a tracking3d run).

The policy tracks its own references (the run's ``TaskSpec.data``) from their first frame
to their last with no early termination. The evaluated files ``data`` say what the
rollout is measured against: paired one to one with the run's references when the counts
and frame counts match (the same clip: a ground-truth clip, or the preprocessed one),
otherwise each file's own ``keypoints3d`` is tracked. A 2D-motion file gives the 2D metrics
of the 2D tracker through its cameras (success, 2D error; object 2D error with an object
track), its ``keypoints3d`` the MPJPE; every rollout gets jitter, the 3D tracking error and
the physical-plausibility measures of :func:`mimic2dm.metrics.plausibility`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from mimic2dm.tasks.common.evaluation import (
    evaluation_config,
    policy_rollout,
    start_sequences,
    write_overlays,
)
from mimic2dm.tasks.registry import build_engine
from mimic2dm.tasks.tracking3d.reference import Reference3D, load_clip3d
from mimic2dm.tasks.tracking3d.task import Tracking3DTask

from mimic2dm import metrics
from mimic2dm.characters import load_character
from mimic2dm.characters.feet import character_feet
from mimic2dm.geometry.camera import MIN_DEPTH, project_points
from mimic2dm.motion.format import read_kind
from mimic2dm.utils.reporting import write_json_report


def _references(spec, data: list[str], character) -> tuple[Reference3D, list[str]]:
    """The clips to track for ``data`` and, per clip, which file it came from."""
    hz = spec.control_hz
    if len(spec.data) == len(data):
        try:
            own = [load_clip3d(p, hz, character) for p in spec.data]
        except (FileNotFoundError, ValueError):
            own = None  # the run's files moved: fall back to the evaluated files' 3D
        if own is not None:
            meas = [_frames(p, hz) for p in data]
            if all(c.num_frames == n for c, n in zip(own, meas, strict=True)):
                return Reference3D(own, character.keypoint_set, hz), [c.path for c in own]
    clips = [load_clip3d(p, hz, character) for p in data]
    return Reference3D(clips, character.keypoint_set, hz), [c.path for c in clips]


def _frames(path: str, hz: float) -> int:
    from mimic2dm.motion.format import control_frames, load_motion2d, load_motion3d

    m = load_motion3d(path) if read_kind(path) == "motion3d" else load_motion2d(path)
    return control_frames(m.num_frames, m.fps, hz)


def _measure_clip(path: str, hz: float):
    """The 2D clip (cameras, 2D keypoints, GT) of ``path`` at ``hz``, or None (no cameras)."""
    if read_kind(path) != "motion2d":
        return None
    from mimic2dm.tasks.tracking2d.reference import clip_from_motion

    from mimic2dm.motion.format import load_motion2d

    m = load_motion2d(path)
    return clip_from_motion(m, hz, Path(path).stem) if m.has_cameras else None


def _rollout(task: Tracking3DTask, policy, T: int) -> dict:
    N, K = task.N, task.K
    rec = {"kp3d": torch.zeros(N, T, K, 3), "obj": torch.zeros(N, T, 3), "states": []}

    def record(t: int) -> None:
        rec["kp3d"][:, t] = task.engine.get_keypoints().cpu()
        s = task.engine.get_state()
        if task.engine.num_objects:
            rec["obj"][:, t] = s.object_pos[:, 0].cpu()
        rec["states"].append(s.index(slice(0, 1)))

    policy_rollout(task, policy, T, record)
    return rec


def _metrics_2d(clip, kp3d: torch.Tensor, obj: torch.Tensor | None) -> dict:
    """2D metrics of a rollout ``kp3d [T, K, 3]`` in every view of ``clip``."""
    n, out = clip.num_frames, {}
    errs, obj_errs = [], []
    for v in range(clip.num_views):
        uv, depth = project_points(
            clip.cam_R[v, :n], clip.cam_t[v, :n], clip.intrinsics[v, :n], kp3d[:n]
        )
        errs.append(
            metrics.reprojection_errors(
                uv, clip.uv[v, :n], clip.mask[v, :n], int(clip.image_height[v]), depth > MIN_DEPTH
            )
        )
        if obj is not None and clip.object_uv is not None:
            ouv, od = project_points(
                clip.cam_R[v, :n], clip.cam_t[v, :n], clip.intrinsics[v, :n], obj[:n, None]
            )
            obj_errs.append(
                metrics.reprojection_errors(
                    ouv,
                    clip.object_uv[v, :n, None],
                    clip.object_valid[v, :n, None],
                    int(clip.image_height[v]),
                    od > MIN_DEPTH,
                )
            )
    err = torch.stack(errs)  # [V, n, K]
    out["success"] = bool(metrics.success(err).all())
    out["error_2d_px"] = float(metrics.mean_error_2d(err).mean())
    out["max_error_2d_px"] = float(metrics.max_error_per_frame(err).max())
    if obj_errs:
        out["object_error_2d_px"] = float(metrics.mean_error_2d(torch.stack(obj_errs)).mean())
    return out


def evaluate(policy, data: list[str | Path], views: int = 1, json_out=None, picture_out=None,
             video_out=None, name: str = "policy") -> dict:  # fmt: skip
    """Evaluate a 3D tracker on ``data``; returns (and optionally writes) the report.

    Args:
        policy: ``.act(obs, deterministic)`` and ``.env_spec`` (the run's ``TaskSpec``).
        data: files to measure against (see the module docstring).
        views: unused (a 3D tracker sees no view); every view of a 2D clip is measured.
        json_out, picture_out, video_out: optional outputs (picture / video need cameras).
        name: what the report calls the policy.
    """
    spec = policy.env_spec
    character = load_character(spec.character)
    data = [str(p) for p in data]
    from mimic2dm.tasks.tracking3d import ENTRY

    cfg = evaluation_config(ENTRY.parse_config(spec.config))
    ref, tracked = _references(spec, data, character)
    N = len(ref.clips)
    task = Tracking3DTask(build_engine(spec, N), ref, cfg, seed=0)
    start_sequences(task, ref.offsets.clone())
    rec = _rollout(task, policy, ref.max_len)
    hz, root = spec.control_hz, list(ref.kset.root)
    feet = character_feet(character)
    per_seq = []
    for i, path in enumerate(data):
        n = int(ref.lengths[i])
        sim, target = rec["kp3d"][i, :n], ref.keypoints[i, :n].cpu()
        m = {"clip": Path(path).stem, "tracked": tracked[i],
             "track_3d_mm": float(metrics.mpjpe_mm(sim, target)),
             "jitter": float(metrics.jitter(sim, hz))}  # fmt: skip
        m["success_3d"] = bool((sim - target).norm(dim=-1).mean(-1).max() <= cfg.term_distance)
        clip = _measure_clip(path, hz)
        if clip is not None and clip.num_frames == n:
            obj = rec["obj"][i, :n] if task.engine.num_objects else None
            m.update(_metrics_2d(clip, sim, obj))
            gt = clip.keypoints3d
            if gt is not None:
                align = lambda x: x - x[:, root].mean(1, keepdim=True)  # noqa: E731
                m["mpjpe_mm"] = float(metrics.mpjpe_mm(align(sim), align(gt)))
                m["mpjpe_global_mm"] = float(metrics.mpjpe_mm(sim, gt))
        m.update(metrics.plausibility(sim, feet, hz))
        m.setdefault("success", m["success_3d"])
        per_seq.append(m)
    report = {"checkpoint": name, "views": views, "sequences": per_seq}
    # the worst frame of all, as tracking2d reports it
    if all("max_error_2d_px" in s for s in per_seq):
        report["max_error_2d_px"] = float(max(s["max_error_2d_px"] for s in per_seq))
    for k in ("success", "error_2d_px", "object_error_2d_px", "mpjpe_mm", "jitter", "track_3d_mm",
              "foot_skating_m_s", "ground_penetration_mm", "floating_mm"):  # fmt: skip
        if all(k in s for s in per_seq):
            report["success_rate" if k == "success" else k] = float(
                np.mean([s[k] for s in per_seq])
            )
    write_json_report(report, json_out or None)
    _pictures(rec, ref, data, spec, picture_out, video_out)
    task.close()
    return report


def _pictures(rec, ref: Reference3D, data, spec, picture_out, video_out) -> None:
    """Overlay picture / video of the first sequence in its first view (needs cameras)."""
    if not (picture_out or video_out):
        return
    clip = _measure_clip(data[0], spec.control_hz)
    if clip is None:
        import warnings

        warnings.warn(
            f"{data[0]} has no cameras: no picture or video of the 3D tracker", stacklevel=2
        )
        return
    from mimic2dm.tasks.tracking2d.reference import ReferenceLibrary

    n = int(ref.lengths[0])
    cam = ReferenceLibrary([clip], ref.kset.name, control_hz=spec.control_hz).camera(0, 0)
    R, t, k = cam.params(torch.arange(n))
    sim = project_points(R, t, k, rec["kp3d"][0, :n])[0].numpy()
    write_overlays(spec, cam, ref.kset, clip.uv[0, :n].numpy(), sim, clip.mask[0, :n].numpy(),
                   rec["states"], picture_out, video_out)  # fmt: skip
