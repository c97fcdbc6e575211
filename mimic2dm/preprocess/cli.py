"""``mimic2dm preprocess``: cameras and 3D initial states from 2D keypoints (paper B.1).

Per clip, writes ``OUT/<stem>.npz`` (the clip with the estimated cameras, ``est_keypoints3d``
and the ``init_*`` states; no ground truth) and ``OUT/<stem>_motion3d.npz`` (the estimated
motion as a 3D reference). With ``--gt`` it reports accuracy against the unstripped clips.
Exit codes: 0 success, 1 invalid input (the message names file, field, expectation).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from mimic2dm.motion.format import (
    Motion2D,
    MotionFormatError,
    load_motion2d,
    save_motion2d,
    save_motion3d,
)
from mimic2dm.utils.reporting import JsonOption, human_console, write_json_report


def _fail(msg: str) -> None:
    typer.echo(f"error: {msg}", err=True)
    raise typer.Exit(1)


def _single_view(m: Motion2D, path: Path, view: int | None) -> Motion2D:
    if view is None:
        if m.num_views != 1:
            _fail(
                f"{path}: field 'keypoints' has {m.num_views} views, expected 1 (pick one with --view)"
            )
        return m
    if not 0 <= view < m.num_views:
        _fail(f"--view {view}: {path} has views 0..{m.num_views - 1}")
    return m.view(view)


def _check_gt(gt: Motion2D, gt_path: Path, clip: Motion2D, clip_path: Path) -> None:
    if not gt.has_cameras or gt.keypoints3d is None:
        missing = "camera_R" if not gt.has_cameras else "keypoints3d"
        _fail(
            f"{gt_path}: field '{missing}' is missing, expected a ground-truth clip with cameras and keypoints3d"
        )
    if gt.num_frames != clip.num_frames or gt.keypoint_set != clip.keypoint_set:
        _fail(f"{gt_path}: field 'keypoints' has {gt.num_frames} frames of {gt.keypoint_set}, expected "
              f"{clip.num_frames} frames of {clip.keypoint_set} like {clip_path}")  # fmt: skip


def _progress_bar(enabled: bool):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    disable=not enabled, transient=True)  # fmt: skip


def preprocess_cmd(
    clips: Annotated[
        list[Path],
        typer.Argument(help="2D clips (.npz), e.g. from `mimic2dm extract` or `data strip`."),
    ],
    out: Annotated[Path, typer.Option("--out", help="Output folder.")],
    character: Annotated[
        str, typer.Option(help="humanoid | dog: the character to fit.")
    ] = "humanoid",
    camera: Annotated[
        str, typer.Option(help="static | dynamic (smooth per-frame extrinsics).")
    ] = "static",
    focal: Annotated[
        float | None, typer.Option(help="Focal length (px); default from the image size.")
    ] = None,
    refine_focal: Annotated[bool, typer.Option(help="Refine the focal once per clip.")] = True,
    gt: Annotated[
        list[Path] | None,
        typer.Option(help="Unstripped clip per input clip (same order): report accuracy."),
    ] = None,
    view: Annotated[int | None, typer.Option(help="View of a multi-view clip to use.")] = None,
    headings: Annotated[int, typer.Option(min=1, help="Heading hypotheses.")] = 8,
    iters: Annotated[int, typer.Option(min=0, help="Joint Adam iterations on all frames.")] = 100,
    finalists: Annotated[
        int,
        typer.Option(
            min=1,
            help="Best heading hypotheses fitted on every frame; the lowest final loss is kept.",
        ),
    ] = 2,
    root_smooth: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="Weight of the root's horizontal acceleration term (0: off; 0.5 tried, docs/preprocess.md).",
        ),
    ] = 0.0,
    threads: Annotated[
        int,
        typer.Option(min=0, help="Torch threads; 0 = torch's default (1: see docs/preprocess.md)."),
    ] = 1,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
    json_out: JsonOption = None,
) -> None:
    """Estimate cameras and the character's 3D motion from 2D keypoints (paper B.1)."""
    import torch

    from mimic2dm.characters.registry import CHARACTERS, load_character
    from mimic2dm.preprocess.clipio import fit_motion3d, preprocessed_clip
    from mimic2dm.preprocess.optimize import CAMERA_KINDS, PreprocessConfig, fit_clip
    from mimic2dm.preprocess.report import accuracy

    if character not in CHARACTERS:
        raise typer.BadParameter(
            f"{character!r} is not one of {', '.join(CHARACTERS.names())}", param_hint="--character"
        )
    if camera not in CAMERA_KINDS:
        raise typer.BadParameter(
            f"{camera!r} is not one of {', '.join(CAMERA_KINDS)}", param_hint="--camera"
        )
    if focal is not None and not focal > 0:
        raise typer.BadParameter("must be > 0 (pixels)", param_hint="--focal")
    if gt and len(gt) != len(clips):
        raise typer.BadParameter(
            f"{len(gt)} --gt file(s) for {len(clips)} clip(s): give one per clip", param_hint="--gt"
        )
    if threads:
        torch.set_num_threads(threads)
    spec = load_character(character)
    cfg = PreprocessConfig(
        camera=camera,
        focal=focal,
        refine_focal=refine_focal,
        headings=headings,
        iters=iters,
        finalists=finalists,
        w_root_smooth=root_smooth,
    )
    inputs = []
    for i, path in enumerate(clips):  # validate everything before the first long fit
        try:
            m = _single_view(load_motion2d(path), path, view)
            g = load_motion2d(gt[i]) if gt else None
        except MotionFormatError as e:
            _fail(str(e))
        if m.keypoint_set != spec.keypoint_set:
            _fail(
                f"{path}: field 'keypoint_set' is {m.keypoint_set!r}, expected {spec.keypoint_set!r} for --character {character}"
            )
        if m.num_frames < 3:
            _fail(
                f"{path}: field 'keypoints' has {m.num_frames} frame(s), expected >= 3 to preprocess"
            )
        if not m.mask().any():
            _fail(
                f"{path}: field 'confidence' masks every keypoint, expected some observed keypoints"
            )
        if g is not None:
            _check_gt(g, gt[i], m, path)
            g = g.view(view or 0)
        inputs.append((path, m, g))
    rows: list[dict[str, Any]] = []
    console = human_console(json_out)
    with _progress_bar(progress and console.is_terminal) as bar:
        for path, m, g in inputs:
            task = bar.add_task(path.name, total=None)
            fit = fit_clip(spec, m.keypoints[0], m.confidence[0], m.mask()[0], m.fps, m.image_size, cfg,
                           progress=lambda n, total, task=task: bar.update(task, advance=n, total=total))  # fmt: skip
            meta = {k: v for k, v in fit.info.items() if k != "config"} | {
                "config": fit.info["config"],
                "input": str(path),
            }
            clip_out, m3_out = out / f"{path.stem}.npz", out / f"{path.stem}_motion3d.npz"
            save_motion2d(preprocessed_clip(m, fit, character, meta), clip_out)
            save_motion3d(
                fit_motion3d(fit, character, m.keypoint_set, m.fps, {"input": str(path)}), m3_out
            )
            row = {"clip": str(path), "out": str(clip_out), "motion3d": str(m3_out), "frames": m.num_frames,
                   "seconds": fit.info["seconds"], "frames_per_s": m.num_frames / fit.info["seconds"],
                   "heading_deg": fit.info["heading_deg"], "focal_px": fit.info["focal"]}  # fmt: skip
            if g is not None:
                row |= accuracy(m, load_motion2d(clip_out), g)
            rows.append(row)
    console.print(_table(rows))
    write_json_report({"character": character, "camera": camera, "clips": rows}, json_out)


def _table(rows: list[dict[str, Any]]) -> Table:
    cols = ["clip", "frames", "frames_per_s", "reprojection_px", "mpjpe_mm", "pa_mpjpe_mm",
            "camera_rotation_deg", "camera_position_m"]  # fmt: skip
    table = Table(title="preprocess")
    for c in cols:
        table.add_column(c, overflow="fold")
    for r in rows:
        table.add_row(
            *(f"{r[c]:.3g}" if isinstance(r.get(c), float) else str(r.get(c, "-")) for c in cols)
        )
    return table


def strip_cmd(
    clip: Annotated[Path, typer.Argument(help="2D clip (.npz) to strip.")],
    out: Annotated[Path, typer.Option("--out", help="Output clip (.npz).")],
) -> None:
    """Keep only what a video gives (2D keypoints, confidences, image size, fps, object 2D
    track, labels): drop cameras, 3D ground truth and estimates."""
    from mimic2dm.preprocess.clipio import strip_clip

    try:
        m = load_motion2d(clip)
    except MotionFormatError as e:
        _fail(str(e))
    s = strip_clip(m, str(clip))
    save_motion2d(s, out)
    typer.echo(f"wrote {out}: {s.num_views} view(s) x {s.num_frames} frames, no cameras, no 3D")
