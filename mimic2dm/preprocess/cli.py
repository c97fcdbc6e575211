"""``mimic2dm preprocess``: cameras and 3D initial states from 2D keypoints (paper B.1).

Per clip, writes ``OUT/<stem>.npz`` (the clip with the estimated cameras, ``est_keypoints3d``
and the ``init_*`` states; no ground truth) and ``OUT/<stem>_motion3d.npz`` (the estimated
motion as a 3D reference). With ``--gt`` it reports accuracy against the unstripped clips.
Exit codes: 0 success, 1 invalid input (the message names file, field, expectation).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer
from rich.table import Table

from mimic2dm.motion.format import (
    Motion2D,
    MotionFormatError,
    load_motion2d,
    save_motion2d,
    save_motion3d,
)
from mimic2dm.motion.quality import assess
from mimic2dm.preprocess.clipio import select_views
from mimic2dm.utils.cli import check_choice, check_positive, exit_on, fail, refuse
from mimic2dm.utils.reporting import JsonOption, human_console, write_json_report

# options of ``mimic2dm preprocess`` with long help texts
_Character = Annotated[str, typer.Option(help="humanoid | dog: the character to fit.")]
_Camera = Annotated[str, typer.Option(help="static | dynamic (smooth per-frame extrinsics; one view only).")]  # fmt: skip
_Views = Annotated[str | None, typer.Option(help="Views to fit jointly, e.g. 0,4 (default: all views of the clip).")]  # fmt: skip
_HeldoutReport = Annotated[Path | None, typer.Option(help="A preprocessed clip of all views (same recording): report the 2D error of this fit in its views that were not fitted.")]  # fmt: skip
_Strict = Annotated[bool, typer.Option(help="Refuse clips with flagged keypoints or frames instead of fitting around them.")]  # fmt: skip
_Finalists = Annotated[int, typer.Option(min=1, help="Best heading hypotheses fitted on every frame; the lowest final loss is kept.")]  # fmt: skip
_RootSmooth = Annotated[float, typer.Option(min=0.0, help="Weight of the root's horizontal acceleration term (0: off; 0.5 tried, docs/preprocess.md).")]  # fmt: skip
_Stance = Annotated[bool, typer.Option(help="Stance terms: the centre of mass over the standing feet, standing feet flat on the ground (docs/preprocess.md \"Stance\").")]  # fmt: skip
_LevelRoll = Annotated[bool, typer.Option(help="Level the world with the camera's roll held at 0 (a level horizon).")]  # fmt: skip
_Threads = Annotated[int, typer.Option(min=0, help="Torch threads; 0 = torch's default (1: see docs/preprocess.md).")]  # fmt: skip


def _views(m: Motion2D, path: Path, view: int | None, views: str | None) -> list[int]:
    """The views to fit: ``--views 0,4`` / ``all``, ``--view V``, or every view of the clip."""
    if view is not None and views is not None:
        fail("give --view or --views, not both")
    if views is None or views.strip() == "all":
        ids = list(range(m.num_views)) if view is None else [view]
    else:
        try:
            ids = [int(x) for x in views.split(",") if x.strip()]
        except ValueError:
            fail(f"--views {views!r}: expected view indices separated by commas, e.g. 0,4")
    bad = [v for v in ids if not 0 <= v < m.num_views]
    if bad or not ids or len(set(ids)) != len(ids):
        fail(f"--view(s) {views if views is not None else view}: {path} has views 0..{m.num_views - 1}, "
              "expected distinct indices among them")  # fmt: skip
    return ids


def _check_gt(gt: Motion2D, gt_path: Path, clip: Motion2D, clip_path: Path, ids: list[int]) -> None:
    if not gt.has_cameras or gt.keypoints3d is None:
        missing = "camera_R" if not gt.has_cameras else "keypoints3d"
        fail(
            f"{gt_path}: field '{missing}' is missing, expected a ground-truth clip with cameras and keypoints3d"
        )
    if (
        gt.num_frames != clip.num_frames
        or gt.keypoint_set != clip.keypoint_set
        or gt.num_views <= max(ids)
    ):
        fail(f"{gt_path}: field 'keypoints' has {gt.num_views} view(s) x {gt.num_frames} frames of "
              f"{gt.keypoint_set}, expected views {ids} of {clip.num_frames} frames of {clip.keypoint_set} "
              f"like {clip_path}")  # fmt: skip


def _check_reference(ref: Motion2D, path: Path, clip: Motion2D) -> None:
    if not ref.has_cameras or ref.est_keypoints3d is None:
        fail(f"{path}: field '{'camera_R' if not ref.has_cameras else 'est_keypoints3d'}' is missing, "
              "expected a preprocessed clip (cameras and est_keypoints3d) for --heldout-report")  # fmt: skip
    if ref.num_frames != clip.num_frames or ref.keypoint_set != clip.keypoint_set:
        fail(f"{path}: field 'keypoints' has {ref.num_frames} frames of {ref.keypoint_set}, expected "
              f"{clip.num_frames} frames of {clip.keypoint_set} like the clip it scores")  # fmt: skip


def _progress_bar(enabled: bool):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    disable=not enabled, transient=True)  # fmt: skip


def _load(path: Path, gt_path: Path | None, ref_path: Path | None, view, views, spec, strict: bool):
    """Validated input of one clip: ``(path, clip of the chosen views, view ids, gt, quality, ref)``."""
    with exit_on(MotionFormatError):
        full = load_motion2d(path)
        g = load_motion2d(gt_path) if gt_path else None
        ref = load_motion2d(ref_path) if ref_path else None
    ids = _views(full, path, view, views)
    m = select_views(full, ids)
    if m.keypoint_set != spec.keypoint_set:
        fail(f"{path}: field 'keypoint_set' is {m.keypoint_set!r}, expected {spec.keypoint_set!r} "
              f"for --character {spec.name}")  # fmt: skip
    if m.num_frames < 3:
        fail(f"{path}: field 'keypoints' has {m.num_frames} frame(s), expected >= 3 to preprocess")
    if not m.mask().any():
        fail(f"{path}: field 'confidence' masks every keypoint, expected some observed keypoints")
    q = assess(m, view_ids=ids)
    if strict and q.problems:
        fail(f"{path}: {'; '.join(q.problems)} (--strict)")
    few = [ids[v] for v in range(len(ids)) if q.trusted[v].sum() < 3]
    if few:
        fail(f"{path}: view(s) {few} have fewer than 3 frames with >= {q.min_usable} usable keypoints, "
              "expected enough trusted frames to fit")  # fmt: skip
    if g is not None:
        _check_gt(g, gt_path, m, path, ids)
    if ref is not None:
        _check_reference(ref, ref_path, m)
    return path, m, ids, g, q, ref


def preprocess_cmd(
    clips: Annotated[
        list[Path],
        typer.Argument(help="2D clips (.npz), e.g. from `mimic2dm extract` or `data strip`."),
    ],
    out: Annotated[Path, typer.Option("--out", help="Output folder.")],
    character: _Character = "humanoid",
    camera: _Camera = "static",
    focal: Annotated[
        float | None, typer.Option(help="Focal length (px); default from the image size.")
    ] = None,
    refine_focal: Annotated[bool, typer.Option(help="Refine the focal once per clip.")] = True,
    gt: Annotated[
        list[Path] | None,
        typer.Option(help="Unstripped clip per input clip (same order): report accuracy."),
    ] = None,
    view: Annotated[int | None, typer.Option(help="One view of a multi-view clip to use.")] = None,
    views: _Views = None,
    heldout_report: _HeldoutReport = None,
    strict: _Strict = False,
    headings: Annotated[int, typer.Option(min=1, help="Heading hypotheses.")] = 8,
    iters: Annotated[int, typer.Option(min=0, help="Joint Adam iterations on all frames.")] = 100,
    finalists: _Finalists = 2,
    root_smooth: _RootSmooth = 0.0,
    stance: _Stance = False,
    level_roll: _LevelRoll = False,
    threads: _Threads = 1,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
    json_out: JsonOption = None,
) -> None:
    """Estimate cameras and the character's 3D motion from 2D keypoints (paper B.1)."""
    import torch

    from mimic2dm.characters.registry import load_character
    from mimic2dm.preprocess.optimize import STANCE_WEIGHTS, PreprocessConfig

    _check_options(character, camera, focal, gt, clips)
    if threads:
        torch.set_num_threads(threads)
    spec = load_character(character)
    cfg = PreprocessConfig(camera=camera, focal=focal, refine_focal=refine_focal, headings=headings,
                           iters=iters, finalists=finalists, w_root_smooth=root_smooth,
                           level_roll=level_roll, **(STANCE_WEIGHTS if stance else {}))  # fmt: skip
    # validate everything before the first long fit (and, with --strict, before writing anything)
    inputs = [_load(p, gt[i] if gt else None, heldout_report, view, views, spec, strict)
              for i, p in enumerate(clips)]  # fmt: skip
    _check_cameras(inputs, camera)
    rows: list[dict[str, Any]] = []
    console = human_console(json_out)
    with _progress_bar(progress and console.is_terminal) as bar:
        for item in inputs:
            task = bar.add_task(item[0].name, total=None)
            tick = lambda n, total, task=task: bar.update(task, advance=n, total=total)  # noqa: E731
            rows.append(_preprocess_one(item, spec, cfg, out, tick))
    console.print(_table(rows))
    write_json_report({"character": character, "camera": camera, "clips": rows}, json_out)


def _check_options(
    character: str, camera: str, focal: float | None, gt: list[Path] | None, clips: list[Path]
) -> None:
    """Usage errors of ``mimic2dm preprocess`` (exit 2)."""
    from mimic2dm.characters.registry import CHARACTERS
    from mimic2dm.preprocess.optimize import CAMERA_KINDS

    check_choice(character, CHARACTERS, "--character", CHARACTERS.names())
    check_choice(camera, CAMERA_KINDS, "--camera")
    check_positive(focal, "--focal", "must be > 0 (pixels)")
    if gt and len(gt) != len(clips):
        refuse(f"{len(gt)} --gt file(s) for {len(clips)} clip(s): give one per clip", "--gt")


def _check_cameras(inputs: list, camera: str) -> None:
    """Refuse several views with moving cameras; warn about each clip's flagged input."""
    for path, m, _, _, q, _ in inputs:
        if m.num_views > 1 and camera != "static":
            fail(
                f"{path}: {m.num_views} views are fitted with static cameras only, not --camera {camera}"
            )
        for problem in q.problems:
            typer.echo(f"warning: {path}: {problem}; fitting trusted frames only", err=True)


def _preprocess_one(item, spec, cfg, out: Path, tick) -> dict[str, Any]:
    """Fit one clip, write its outputs, return its report row."""
    from mimic2dm.preprocess.clipio import fit_motion3d, preprocessed_clip
    from mimic2dm.preprocess.multiview import fit_views
    from mimic2dm.preprocess.optimize import fit_clip

    path, m, ids, g, q, ref = item
    if m.num_views == 1:
        fit = fit_clip(spec, m.keypoints[0], m.confidence[0], q.usable[0], m.fps, m.image_size, cfg,
                       tick, q.trusted[0])  # fmt: skip
    else:
        fit = fit_views(
            spec, m.keypoints, m.confidence, q.usable, q.trusted, m.fps, m.image_size, cfg, tick
        )
    quality = {k: v for k, v in q.report().items() if k != "views"}
    meta = {k: v for k, v in fit.info.items() if k != "config"} | {
        "config": fit.info["config"], "input": str(path), "views": ids, "quality": quality,
    }  # fmt: skip
    clip_out, m3_out = out / f"{path.stem}.npz", out / f"{path.stem}_motion3d.npz"
    est = preprocessed_clip(m, fit, spec.name, meta)
    save_motion2d(est, clip_out)
    save_motion3d(fit_motion3d(fit, spec.name, m.keypoint_set, m.fps, {"input": str(path)}), m3_out)
    row = {"clip": str(path), "out": str(clip_out), "motion3d": str(m3_out), "views": ids,
           "frames": m.num_frames, "fitted_frames": fit.info["fitted_frames"],
           "seconds": fit.info["seconds"], "frames_per_s": m.num_frames / fit.info["seconds"],
           "heading_deg": fit.info["heading_deg"], "focal_px": fit.info["focal"]}  # fmt: skip
    row |= _reprojection(m, est, q, ids, g)
    row["quality"] = q.report()
    if ref is not None:
        row |= _heldout(est, ref, ids)
    return row


def _reprojection(
    m: Motion2D, est: Motion2D, q, ids: list[int], g: Motion2D | None
) -> dict[str, Any]:
    """Reprojection errors of the fitted keypoints (trusted frames, usable keypoints), over all
    views and per view; with ground truth ``g`` its accuracy (per view; the mean of the views)."""
    from mimic2dm.preprocess.report import accuracy, camera_projection, pixel_errors

    fitted = q.usable & q.trusted[..., None]
    h = m.image_size[1]
    uv = np.stack([camera_projection(est, i, est.est_keypoints3d) for i in range(m.num_views)])
    row: dict[str, Any] = pixel_errors(uv, m.keypoints, fitted, h)
    row["reprojection_px"] = row["reprojection_mean_px"]  # the name --gt reports have always used
    per_view = []
    for i, vid in enumerate(ids):
        r = {"view": vid, **pixel_errors(uv[i], m.keypoints[i], fitted[i], h)}
        if g is not None:
            r |= accuracy(
                m.view(i), est.view(i), g, view=vid, mask=fitted[i], frames=q.trusted.any(0)
            )
        per_view.append(r)
    if g is not None:  # one view: its numbers; several: their mean
        keys = [
            k
            for k, x in per_view[0].items()
            if isinstance(x, float) and not k.startswith("reprojection_")
        ]
        row |= {k: float(np.mean([r[k] for r in per_view])) for k in keys}
        row["reprojection_gt_px"] = float(np.mean([r["reprojection_gt_px"] for r in per_view]))
    row["per_view"] = per_view
    return row


def _heldout(est: Motion2D, ref: Motion2D, ids: list[int]) -> dict[str, Any]:
    """2D error of this fit's keypoints in the views of ``ref`` it did not use."""
    from mimic2dm.preprocess.multiview import heldout_errors

    ref_ids = ref.meta.get("preprocess", {}).get("views", list(range(ref.num_views)))
    held = [j for j, vid in enumerate(ref_ids) if vid not in ids]
    rq = assess(ref)
    res = heldout_errors(
        est.est_keypoints3d, ref, held, rq.usable & rq.trusted[..., None], est.est_keypoints3d
    )
    for r in res:
        r["view"] = ref_ids[r["view"]]
    mean = float(np.mean([r["reprojection_mean_px"] for r in res])) if res else float("nan")
    return {"heldout": res, "heldout_mean_px": mean,
            "heldout_mean_px_1080": mean * 1080.0 / ref.image_size[1]}  # fmt: skip


def _table(rows: list[dict[str, Any]]) -> Table:
    cols = ["clip", "frames", "fitted_frames", "reprojection_mean_px", "reprojection_median_px",
            "reprojection_max_px", "reprojection_mean_px_1080", "mpjpe_mm", "pa_mpjpe_mm",
            "camera_rotation_deg", "camera_position_m"]  # fmt: skip
    table = Table(title="preprocess")
    for c in cols:
        table.add_column(c, overflow="fold")
    cell = lambda r, c: f"{r[c]:.3g}" if isinstance(r.get(c), float) else str(r.get(c, "-"))  # noqa: E731
    for r in rows:
        table.add_row(*(cell(r, c) for c in cols))
        sub = r["per_view"] if len(r["per_view"]) > 1 else []
        for v in sub + [v | {"held": True} for v in r.get("heldout", [])]:
            name = f"  view {v['view']}" + (" (held out)" if v.get("held") else "")
            table.add_row(name, *(cell(v, c) for c in cols[1:]))
    return table


def strip_cmd(
    clip: Annotated[Path, typer.Argument(help="2D clip (.npz) to strip.")],
    out: Annotated[Path, typer.Option("--out", help="Output clip (.npz).")],
) -> None:
    """Keep only what a video gives (2D keypoints, confidences, image size, fps, object 2D
    track, labels): drop cameras, 3D ground truth and estimates."""
    from mimic2dm.preprocess.clipio import strip_clip

    with exit_on(MotionFormatError):
        m = load_motion2d(clip)
    s = strip_clip(m, str(clip))
    save_motion2d(s, out)
    typer.echo(f"wrote {out}: {s.num_views} view(s) x {s.num_frames} frames, no cameras, no 3D")
