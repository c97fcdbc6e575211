"""Evaluation of the tracking task (``mimic2dm eval`` on a tracking checkpoint).

Each evaluation sequence is one clip seen through ``V`` of its views (``V = 1``: every
view in turn; ``V >= 2``: 3D tracking by view aggregation, views ``v, v+1, ...``). The
policy runs from the clip's first frame to its last with no early termination, and the
The metrics of docs/design.md section 10 are computed on the whole sequence.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from mimic2dm.tasks.common.evaluation import policy_rollout, start_sequences, write_overlays
from mimic2dm.tasks.registry import build_engine
from mimic2dm.tasks.tracking2d.reference import ReferenceLibrary
from mimic2dm.tasks.tracking2d.source import ClipReference
from mimic2dm.tasks.tracking2d.streaming import streaming_task
from mimic2dm.tasks.tracking2d.task import Tracking2DTask

from mimic2dm import metrics
from mimic2dm.characters.feet import character_feet
from mimic2dm.utils.reporting import write_json_report


def sequences(lib: ReferenceLibrary, views: int) -> list[tuple[int, list[int]]]:
    """``(clip, view ids)`` pairs: every starting view of every clip with ``views`` consecutive views."""
    out = []
    for c, clip in enumerate(lib.clips):
        if clip.num_views < views:
            raise ValueError(
                f"{clip.name}: --views {views} needs a clip with at least {views} views, it has {clip.num_views}"
            )
        out += [
            (c, [(v + i) % clip.num_views for i in range(views)]) for v in range(clip.num_views)
        ]
    return out


def rollout(task: Tracking2DTask, policy, T: int, states: bool = True) -> dict:
    """``T`` deterministic control steps of ``policy`` from the task's current episodes.

    Returns per step ``[N, T, ...]``: the character's projection ``uv`` and where it is in
    front of the camera (``front``), the reference ``ref`` and its ``mask`` (views ``V``),
    the 3D keypoints ``kp3d``, the ball when there is one, and (``states``) env 0's engine
    state per step for rendering (``state0``).
    """
    N, V, K = task.N, task.V, task.K
    rec = {"uv": torch.zeros(N, T, V, K, 2), "ref": torch.zeros(N, T, V, K, 2), "mask": torch.zeros(N, T, V, K, dtype=torch.bool),
           "front": torch.zeros(N, T, V, K, dtype=torch.bool), "kp3d": torch.zeros(N, T, K, 3), "state0": []}  # fmt: skip

    def record(t: int) -> None:
        uv, front = task.project_character()
        ref, mask = task.reference(task.frame)
        rec["uv"][:, t], rec["ref"][:, t], rec["mask"][:, t] = uv.cpu(), ref.cpu(), mask.cpu()
        rec["front"][:, t] = front.cpu()
        rec["kp3d"][:, t] = task.engine.get_keypoints().cpu()
        if states:  # env 0's state, rendered by render.py
            rec["state0"].append(task.engine.get_state().index(slice(0, 1)))
        _record_object(task, rec, t, T)

    policy_rollout(task, policy, T, record)
    return rec


def _record_object(task: Tracking2DTask, rec: dict, t: int, T: int) -> None:
    """The ball at step ``t`` when the engine simulates one and the reference tracks it:
    its projected and reference 2D centres, where the reference sees it, its 3D position and
    the root's (for the object metrics)."""
    track = task.source.objects(task.frame) if task.engine.num_objects else None
    if track is None:
        return
    if "obj_uv" not in rec:
        N, V = task.N, task.V
        rec.update(obj_uv=torch.zeros(N, T, V, 2), obj_ref=torch.zeros(N, T, V, 2),
                   obj_ok=torch.zeros(N, T, V, dtype=torch.bool),
                   obj_front=torch.zeros(N, T, V, dtype=torch.bool), obj3d=torch.zeros(N, T, 3),
                   root3d=torch.zeros(N, T, 3), obj_hit=torch.zeros(N, T, dtype=torch.bool))  # fmt: skip
    sim_c, sim_ok = task.project_object()
    s = task.engine.get_state()
    rec["obj_uv"][:, t], rec["obj_ref"][:, t] = sim_c.cpu(), track[0].cpu()
    rec["obj_ok"][:, t], rec["obj_front"][:, t] = track[1].cpu(), sim_ok.cpu()
    rec["obj3d"][:, t], rec["root3d"][:, t] = s.object_pos[:, 0].cpu(), s.root_pos.cpu()
    try:
        rec["obj_hit"][:, t] = task.engine.get_object_contacts()[:, 0].cpu() > 0
    except NotImplementedError:
        rec.pop("obj_hit", None)


def _object_metrics(rec, i: int, n: int, height: float, reach_radius: float, fps: float) -> dict:
    """``object_error_2d_px`` (ball-centre error at 1080p, mean where the reference sees the
    ball), ``ball_within_reach`` (fraction of frames with the ball's ground-plane distance
    to the root at most ``reach_radius`` m) and, where the engine reports object contacts,
    ``ball_touches`` (contacts between the character and the ball that begin in the episode,
    read at every control step) and ``ball_touch_max_gap_s`` (the longest time without a
    touch starting, from the first frame on); empty without a recorded ball."""
    if "obj_uv" not in rec:
        return {}
    err = metrics.reprojection_errors(
        rec["obj_uv"][i, :n, :, None],
        rec["obj_ref"][i, :n, :, None],
        rec["obj_ok"][i, :n, :, None],
        int(height),
        rec["obj_front"][i, :n, :, None],
    )
    d = (rec["obj3d"][i, :n, :2] - rec["root3d"][i, :n, :2]).norm(dim=-1)
    out = {
        "object_error_2d_px": float(err.nanmean()),
        "ball_within_reach": float((d <= reach_radius).float().mean()),
    }
    if "obj_hit" in rec:
        hit = rec["obj_hit"][i, :n]
        starts = torch.nonzero(hit & ~torch.cat([hit.new_zeros(1), hit[:-1]])).flatten()
        edges = torch.cat([starts.new_zeros(1), starts, starts.new_full((1,), n - 1)])
        out["ball_touches"] = int(starts.numel())
        out["ball_touch_max_gap_s"] = float(edges.diff().max()) / fps if n > 1 else 0.0
    return out


def _metrics(
    rec, i: int, n: int, height: float, fps: float, gt3d: torch.Tensor | None, kset
) -> dict:
    err = metrics.reprojection_errors(
        rec["uv"][i, :n], rec["ref"][i, :n], rec["mask"][i, :n], int(height), rec["front"][i, :n]
    )  # [n, V, K]
    err = err.transpose(0, 1)  # [V, n, K]
    out = {
        "success": bool(metrics.success(err).all()),
        "error_2d_px": float(metrics.mean_error_2d(err).mean()),
        "max_error_2d_px": float(metrics.max_error_per_frame(err).max()),
        "jitter": float(metrics.jitter(rec["kp3d"][i, :n], fps)),
    }
    # the same errors in the clip's own pixels (the ones above are scaled to a 1080-px height)
    out["error_2d_px_raw"] = out["error_2d_px"] * height / metrics.REFERENCE_HEIGHT
    out["max_error_2d_px_raw"] = out["max_error_2d_px"] * height / metrics.REFERENCE_HEIGHT
    if gt3d is not None:
        sim = rec["kp3d"][i, :n]
        root = list(kset.root)
        out["mpjpe_mm"] = float(
            metrics.mpjpe_mm(
                sim - sim[:, root].mean(1, keepdim=True), gt3d - gt3d[:, root].mean(1, keepdim=True)
            )
        )
        out["mpjpe_global_mm"] = float(metrics.mpjpe_mm(sim, gt3d))
    return out


def roll_out_sequences(
    policy, data, views: int = 1, task_cls: type = Tracking2DTask, states: bool = True
):
    """Every sequence of the 2D clips ``data`` (:func:`sequences`) rolled out deterministically
    by ``policy`` from its first frame, in one env each.

    Returns:
        ``(task, lib, seqs, source, cfg, rec)``: the task (close it), the clips, the
        ``(clip, view ids)`` sequences, the reference, the settings and :func:`rollout`'s record.
    """
    spec = policy.env_spec
    lib = ReferenceLibrary.from_files([str(p) for p in data], spec.control_hz, view_mode="clip")
    seqs = sequences(lib, views)
    N = len(seqs)
    engine = build_engine(spec, N)
    source = ClipReference(lib, N, views, engine.device)
    # the initial-state source of training (cfg.initial_state): frame 0's 3D pose when known
    task = streaming_task(spec, engine, source, task_cls)
    clip_ids = torch.tensor([c for c, _ in seqs])
    start_sequences(task, lib.offsets[clip_ids], torch.tensor([v for _, v in seqs]))
    rec = rollout(task, policy, lib.max_len, states)
    return task, lib, seqs, source, task.cfg, rec


def simulated_keypoints3d(policy, data: str | Path, views: int = 1) -> np.ndarray:
    """``[T, K, 3]`` world keypoints of the simulated character (control rate), tracking the
    first sequence of the clip ``data`` (views ``0..views-1``) deterministically from its
    first frame: what held-out views are scored on."""
    task, lib, _, _, _, rec = roll_out_sequences(policy, [data], views, states=False)
    task.close()
    return rec["kp3d"][0, : lib.clips[0].num_frames].numpy()


def evaluate(policy, data: list[str | Path], views: int = 1, json_out=None, picture_out=None,
             video_out=None, name: str = "policy", task_cls: type = Tracking2DTask) -> dict:  # fmt: skip
    """Evaluate a tracker on the 2D-motion files ``data``; returns (and optionally writes) the report.

    Every sequence starts at the clip's first frame from the initial state training used
    there (``task.initial_state``: the clip's preprocessed state or its fitted 3D pose
    when it has one, else the default pose), recorded as ``initial_state``
    (``preprocessed`` | ``reference_3d`` | ``default_pose``) per sequence and overall.

    Args:
        policy: ``.act(obs, deterministic)`` and ``.env_spec`` (the run's ``TaskSpec``).
        data: 2D-motion files with cameras.
        views: views per sequence (1: view-agnostic 2D tracking; >= 2: view aggregation).
        json_out, picture_out, video_out: optional output paths.
        name: what the report calls the policy (its checkpoint path).
        task_cls: the task class (a subclass of the tracker, e.g. ``DribbleTask``).
    """
    spec = policy.env_spec
    task, lib, seqs, source, cfg, rec = roll_out_sequences(policy, data, views, task_cls)
    per_seq = []
    for i, (c, vs) in enumerate(seqs):
        clip = lib.clips[c]
        gt = clip.keypoints3d
        m = _metrics(
            rec, i, clip.num_frames, float(clip.image_height[vs[0]]), spec.control_hz, gt, lib.kset
        )
        m.update(
            metrics.plausibility(
                rec["kp3d"][i, : clip.num_frames], character_feet(spec.character), spec.control_hz
            )
        )
        m.update(_object_metrics(rec, i, clip.num_frames, float(clip.image_height[vs[0]]),
                                 float(getattr(cfg, "reach_radius", 1.5)), spec.control_hz))  # fmt: skip
        per_seq.append(
            {"clip": clip.name, "views": vs, "initial_state": source.initial_state_sources[c], **m}
        )
    kinds = sorted({s["initial_state"] for s in per_seq})
    report = {
        "checkpoint": name,
        "views": views,
        "initial_state": kinds[0] if len(kinds) == 1 else "mixed",
        "sequences": per_seq,
        "success_rate": float(np.mean([s["success"] for s in per_seq])),
        "error_2d_px": float(np.mean([s["error_2d_px"] for s in per_seq])),
        "max_error_2d_px": float(np.max([s["max_error_2d_px"] for s in per_seq])),
        "error_2d_px_raw": float(np.mean([s["error_2d_px_raw"] for s in per_seq])),
        "max_error_2d_px_raw": float(np.max([s["max_error_2d_px_raw"] for s in per_seq])),
        "jitter": float(np.mean([s["jitter"] for s in per_seq])),
    }
    if all("mpjpe_mm" in s for s in per_seq):
        report["mpjpe_mm"] = float(np.mean([s["mpjpe_mm"] for s in per_seq]))
    # with a simulated, tracked ball
    for k in ("object_error_2d_px", "ball_within_reach", "ball_touches", "ball_touch_max_gap_s"):
        if all(k in s for s in per_seq):
            report[k] = float(np.nanmean([s[k] for s in per_seq]))
    for k in (
        "foot_skating_m_s",
        "ground_penetration_mm",
        "floating_mm",
    ):  # mimic2dm.metrics.plausibility
        report[k] = float(np.mean([s[k] for s in per_seq]))
    _write_outputs(report, rec, lib, seqs, spec, json_out, picture_out, video_out)
    task.close()
    return report


def _write_outputs(report, rec, lib, seqs, spec, json_out, picture_out, video_out) -> None:
    """JSON report; overlay picture and video of the first sequence's first view."""
    write_json_report(report, json_out or None)
    c, vs = seqs[0]
    n = lib.clips[c].num_frames
    write_overlays(spec, lib.camera(c, vs[0]), lib.kset, rec["ref"][0, :n, 0].numpy(),
                   rec["uv"][0, :n, 0].numpy(), rec["mask"][0, :n, 0].numpy(), rec["state0"],
                   picture_out, video_out)  # fmt: skip
