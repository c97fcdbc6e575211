"""``mimic2dm compare``: paper Table 1 — several runs evaluated on one clip, one table.

Each run's last checkpoint is evaluated by its task's registry ``evaluate`` on an
evaluation clip made from ``--data``: the clip's 2D keypoints (what every method is
asked to reproduce), its ground-truth 3D keypoints, and a camera per run:

- ``camera="run"`` (default): the camera the run trained with, when its training clip
  shows the same 2D keypoints (a preprocessed clip's estimated camera; for a Motion3D from
  ``mimic2dm preprocess``, the preprocessed clip beside it). The ground truth is then moved
  into that camera's world (``X' = R_run^T (R_gt X + t_gt - t_run)``), so root-aligned
  MPJPE equals the camera-frame one. Runs with no such clip use the clip's own camera.
- ``camera="data"``: the ``--data`` clip's camera for every run.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from mimic2dm.motion.format import Motion2D, load_motion2d, read_kind, save_motion2d
from mimic2dm.utils.reporting import markdown_rows

COLUMNS = (
    ("method", "method", "{}"), ("success_rate", "success (%)", "pct"),
    ("error_2d_px", "2D error (px)", "{:.1f}"), ("max_error_2d_px", "max 2D error (px)", "{:.1f}"),
    ("object_error_2d_px", "object 2D error (px)", "{:.1f}"),
    ("mpjpe_mm", "MPJPE (mm)", "{:.1f}"), ("jitter", "jitter (m/s³)", "{:.0f}"),
    ("foot_skating_m_s", "foot skating (m/s)", "{:.3f}"),
    ("ground_penetration_mm", "penetration (mm)", "{:.1f}"), ("floating_mm", "floating (mm)", "{:.1f}"),
)  # fmt: skip
"""``(report key, table header, format)`` of the table's columns."""


def describe_run(spec) -> str:
    """The method a run stands for, from its task and reference data (paper Table 1 names)."""
    first = spec.data[0] if spec.data else None
    if spec.task == "tracking3d" and first:
        if read_kind(first) == "motion3d":
            return "Sfv* (tracks preprocessed 3D)"
        return "3D-GT (tracks ground-truth 3D)"
    if spec.task == "tracking2d" and first:
        m = load_motion2d(first) if Path(first).exists() else None
        if m is not None and (m.has_initial_states or m.est_keypoints3d is not None):
            return "Mimic2DM (preprocessed)"
        return "Mimic2DM (ground-truth cameras)"
    return spec.task


def camera_clip(spec, data: Motion2D) -> tuple[Motion2D, str] | None:
    """The clip whose camera the run trained with, and its path, when it shows ``data``'s
    2D keypoints (same frames, views and image size); None otherwise."""
    for f in spec.data[:1]:
        cand = Path(f)
        if (
            read_kind(f) == "motion3d"
        ):  # preprocess writes DIR/<clip>_motion3d.npz beside DIR/<clip>.npz
            cand = cand.with_name(cand.name.removesuffix("_motion3d.npz") + ".npz")
        if not cand.exists() or read_kind(cand) != "motion2d":
            continue
        m = load_motion2d(cand)
        same = (m.has_cameras and m.keypoints.shape == data.keypoints.shape
                and tuple(m.image_size) == tuple(data.image_size)
                and np.allclose(np.nan_to_num(m.keypoints), np.nan_to_num(data.keypoints), atol=1e-3))  # fmt: skip
        if same:
            return m, str(cand)
    return None


def _per_frame(x: np.ndarray, T: int) -> np.ndarray:
    return np.broadcast_to(x, (x.shape[0], T, *x.shape[2:]))


_ESTIMATES = ("est_keypoints3d", "init_character", "init_root_pos", "init_root_quat", "init_root_lin_vel",
              "init_root_ang_vel", "init_dof_pos", "init_dof_vel")  # fmt: skip
"""The fields ``mimic2dm preprocess`` estimates (3D keypoints, per-frame initial states)."""


def eval_clip(data: Motion2D, cam: Motion2D | None) -> Motion2D:
    """``data`` seen through ``cam``'s cameras, its ground truth moved into ``cam``'s world
    through view 0 (``cam=None``: ``data`` unchanged).

    ``cam``'s estimates (a preprocessed clip's ``est_keypoints3d`` and initial states) come
    along: a run trained on a preprocessed clip starts its evaluation from the state it
    trained from (the honest setting: no ground truth), not from a pose fitted to the ground
    truth, which in the estimated world stands at the wrong height and scale."""
    if cam is None or cam is data:
        return data
    T = data.num_frames
    R0, t0 = _per_frame(data.camera_R, T)[0], _per_frame(data.camera_t, T)[0]
    R1, t1 = _per_frame(cam.camera_R, T)[0], _per_frame(cam.camera_t, T)[0]

    def move(x):  # world of data -> camera -> world of cam
        return np.einsum("tji,tkj->tki", R1, np.einsum("tij,tkj->tki", R0, x) + (t0 - t1)[:, None])

    kp3d = None if data.keypoints3d is None else move(data.keypoints3d)
    obj = None if data.object3d is None else move(data.object3d[:, None])[:, 0]
    return replace(data, camera_R=cam.camera_R, camera_t=cam.camera_t, camera_intrinsics=cam.camera_intrinsics,
                   keypoints3d=kp3d, object3d=obj, **{k: getattr(cam, k) for k in _ESTIMATES})  # fmt: skip


def compare(run_dirs: list[str | Path], data: str | Path, camera: str = "run") -> dict:
    """Evaluate each run's last checkpoint on ``data``; returns ``{"data", "camera", "rows"}``.

    Raises:
        ValueError: ``data`` has no cameras or no ground truth, a run has no checkpoint, or
            its task has no evaluation — naming the file.
    """
    from mimic2dm.rl.policy import load_policy
    from mimic2dm.tasks.registry import load_task

    if camera not in ("run", "data"):
        raise ValueError(f"--camera {camera!r} is not one of run, data")
    clip = load_motion2d(data)
    if not clip.has_cameras or clip.keypoints3d is None:
        raise ValueError(f"{data}: --data needs a clip with cameras and ground-truth keypoints3d "
                         "(a synthetic clip from `mimic2dm data synth`)")  # fmt: skip
    rows = []
    with tempfile.TemporaryDirectory(prefix="m2d_compare_") as tmp:
        for i, run in enumerate(run_dirs):
            ckpt = Path(run) / "checkpoints" / "last.pt"
            if not ckpt.exists():
                raise ValueError(f"{run}: no checkpoints/last.pt (not a finished training run?)")
            policy = load_policy(ckpt)
            spec = policy.env_spec
            entry = load_task(spec.task)
            if entry.evaluate is None:
                raise ValueError(f"{run}: task {spec.task!r} has no evaluation")
            found = camera_clip(spec, clip) if camera == "run" else None
            path = Path(tmp) / f"{i}_{Path(data).stem}.npz"
            save_motion2d(eval_clip(clip, found[0] if found else None), path)
            rep = entry.evaluate(policy, [str(path)], 1, None, None, None, name=str(ckpt))
            row = {"method": describe_run(spec), "run": str(run), "task": spec.task,
                   "reference": [str(p) for p in spec.data],
                   "camera": found[1] if found else str(data)}  # fmt: skip
            row.update({k: rep[k] for k, _, _ in COLUMNS[1:] if k in rep})
            rows.append(row)
    return {"data": str(data), "camera": camera, "units": UNITS, "rows": rows}


UNITS = {"error_2d_px": "pixels at 1080p",
         "max_error_2d_px": "pixels at 1080p, worst frame (success needs it <= the bound)",
         "object_error_2d_px": "pixels at 1080p",
         "mpjpe_mm": "mm, root-aligned, against keypoints3d", "jitter": "m/s^3 (keypoints)",
         "foot_skating_m_s": "m/s, horizontal speed of feet in contact (< 5 cm above standing height)",
         "ground_penetration_mm": "mm, mean depth of the lowest foot below the ground",
         "floating_mm": "mm, mean height of the lowest foot over frames with no foot in contact"}  # fmt: skip


def _cell(v, fmt: str) -> str:
    if v is None:
        return "–"
    if fmt == "pct":
        return f"{100 * v:.0f}"
    return fmt.format(v)


def markdown_table(result: dict) -> str:
    """The comparison as a markdown table (paper Table 1's shape), with its units."""
    cols = [
        c for c in COLUMNS if c[0] != "object_error_2d_px" or any(c[0] in r for r in result["rows"])
    ]
    cells = [[_cell(r.get(k), f) for k, _, f in cols] for r in result["rows"]]
    lines = [f"Evaluated on `{result['data']}` (camera: {result['camera']}).", "",
             *markdown_rows([h for _, h, _ in cols], cells)]  # fmt: skip
    lines += ["", "Units: " + "; ".join(f"{k}: {u}" for k, u in result["units"].items()) + "."]
    return "\n".join(lines) + "\n"
