"""Command-line entry points of the video pipeline (mounted by ``mimic2dm/cli.py``).

- ``pose_app`` (``mimic2dm pose ...``): ``convert-mmpose``, ``list``.
- :func:`extract` (``mimic2dm extract VIDEO... --out DIR``).
- :func:`bench_pose` (``mimic2dm bench pose``).

Exit codes: 0 success; 1 a clip failed / the checkpoint could not be converted (the
message names the file and the problem); 2 bad command-line usage.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from mimic2dm.utils.cli import check_choice, console, error, exit_on, fail, refuse
from mimic2dm.utils.reporting import (
    JsonOption,
    json_to_stdout,
    library_output_to_log,
    write_json_report,
)

pose_app = typer.Typer(
    help="Pose models: convert mmpose checkpoints, list architectures.", no_args_is_help=True
)


def _check_device(device: str) -> str:
    import torch

    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        refuse(f"{device!r} is not cpu or cuda", "--device")
    if device.startswith("cuda") and not torch.cuda.is_available():
        refuse("CUDA is not available on this machine; use --device cpu", "--device")
    return device


@pose_app.command("convert-mmpose")
def convert_mmpose(
    ckpt: Annotated[
        Path, typer.Argument(help="mmpose ViTPose checkpoint (.pth): ViTPose repo or mmpose 1.x.")
    ],
    out: Annotated[Path, typer.Option("--out", help="Output folder (transformers format).")],
    dataset: Annotated[
        str,
        typer.Option(
            help="coco | ap10k | apt36k | aic | mpii | wholebody: keypoint names; ViTPose++ expert and head."
        ),
    ] = "coco",
    num_heads: Annotated[
        int | None,
        typer.Option(help="Attention heads, for a non-standard width (default from the width)."),
    ] = None,
    image_size: Annotated[
        tuple[int, int] | None,
        typer.Option(help="Input HEIGHT WIDTH if not 256 192 / 384 288 / 256 256."),
    ] = None,
    trust_checkpoint: Annotated[
        bool,
        typer.Option(help="Unpickle arbitrary objects in the file (only for files you trust)."),
    ] = False,
) -> None:
    """Map an mmpose ViTPose / ViTPose++ checkpoint onto transformers' VitPoseForPoseEstimation."""
    from mimic2dm.video.convert import ConversionError, convert_mmpose_checkpoint

    with exit_on(ConversionError):
        rec = convert_mmpose_checkpoint(ckpt, out, dataset, num_heads, image_size, trust_checkpoint)
    c = console()
    c.print(
        f"converted {ckpt} ({rec['layout']} layout{', ViTPose++ expert ' + dataset if rec['moe'] else ''}): "
        f"width {rec['hidden_size']}, {rec['num_layers']} layers, {rec['num_heads']} heads, "
        f"{rec['decoder']} decoder, {rec['num_keypoints']} keypoints, {rec['parameters']:,} parameters",
        markup=False,
    )
    c.print(f"wrote {out}; use it with: mimic2dm extract VIDEO --pose-model {out}", markup=False)


@pose_app.command("list")
def list_models() -> None:
    """Registered pose architectures and detectors, with their transformers weights."""
    from mimic2dm.video.detector import DETECTORS
    from mimic2dm.video.pose import POSE_MODELS

    table = Table(title="pose models (use a name with --random-weights, or a converted folder)")
    for col in ("name", "width/layers/heads", "decoder", "keypoints", "transformers weights"):
        table.add_column(col)
    for name in POSE_MODELS.names():
        s = POSE_MODELS.load(name)
        table.add_row(name, f"{s.hidden_size}/{s.num_layers}/{s.num_heads}", "simple" if s.simple_decoder else "classic",
                      s.layout, s.hub_id or "convert-mmpose")  # fmt: skip
    det = Table(title="detectors")
    det.add_column("name")
    det.add_column("transformers weights")
    for name in DETECTORS.names():
        det.add_row(name, DETECTORS.load(name).hub_id)
    console().print(table)
    console().print(det)


def _check_inputs(videos: list[Path], out: Path) -> None:
    """Open every video (exists, readable, a container PyAV opens, with a video stream).

    Unusable ones are reported now and fail in the manifest as before; when none is
    usable, exit 1 here, before any model is loaded.
    """
    import os

    from mimic2dm.video.io import VideoError, probe_video

    if out.exists() and not out.is_dir():
        refuse(f"{out} is a file, expected a folder", "--out")
    problems = []
    for v in videos:
        try:
            if v.is_file() and not os.access(v, os.R_OK):
                raise VideoError(v, "is not readable (permission denied)")
            probe_video(v)
        except VideoError as e:
            problems.append(str(e))
    for msg in problems:
        error(msg)
    if problems and len(problems) == len(videos):
        fail(f"none of the {len(videos)} video(s) can be read; nothing to extract")


def _report_table(reports) -> Table:
    table = Table(title="extracted clips")
    for col in (
        "clip",
        "status",
        "frames",
        "fps",
        "mean conf",
        "masked",
        "filled",
        "subject",
        "ball",
        "error",
    ):
        table.add_column(col, overflow="fold")
    fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
    for r in reports:
        table.add_row(r.clip, r.status, str(r.frames), fmt(r.fps or None, "g"), fmt(r.mean_confidence, ".3f"),
                      fmt(r.masked_fraction, ".1%"), fmt(r.filled_fraction, ".1%"), fmt(r.subject_track, "d"),
                      "-" if r.ball is None else ("yes" if r.ball else "no"), r.error or "")  # fmt: skip
    return table


# options of ``mimic2dm extract``
_ExtractOut = Annotated[Path, typer.Option("--out", help="Output folder: <clip>.npz per video + manifest.json.")]  # fmt: skip
_Character = Annotated[str, typer.Option(help="humanoid (COCO-17, person boxes) | dog (dog17, dog boxes).")]  # fmt: skip
_PoseModel = Annotated[str | None, typer.Option(help="Registry name, folder or model id (default: the character's CharacterSpec.pose_model: vitpose-b for humanoid, vitpose-plus-b-ap10k for dog).")]  # fmt: skip
_Detector = Annotated[str, typer.Option(help="Registry name (rtdetr-r18 | rtdetr-r50), folder or model id.")]  # fmt: skip
_TrackId = Annotated[int | None, typer.Option(help="Follow this track id (see meta.tracks) instead of the largest.")]  # fmt: skip
_Rotations = Annotated[bool, typer.Option(help="Yu 2021: pose on 0/90/180/270-degree crops, keep the best (4x cost).")]  # fmt: skip
_Preview = Annotated[Path | None, typer.Option(help="Write OUT.mp4 (OUT_<clip>.mp4 per clip for several videos).")]  # fmt: skip
_RandomWeights = Annotated[bool, typer.Option(help="Untrained models (offline smoke run); files say so in meta.random_weights.")]  # fmt: skip
_DetThreshold = Annotated[float | None, typer.Option(min=0.0, max=1.0, help="Detection score threshold (default 0.3; 0 with --random-weights).")]  # fmt: skip
_MaxGap = Annotated[float, typer.Option(min=0.0, help="Longest gap (seconds) that is interpolated.")]  # fmt: skip
_Smooth = Annotated[float, typer.Option(min=0.0, help="Smoothing window sigma in frames (0 = none).")]  # fmt: skip
_DetectEvery = Annotated[int | None, typer.Option(min=1, help="Detect on every K-th frame and follow the boxes in between (default 10 on cpu, 1 on cuda).")]  # fmt: skip
_DetThreads = Annotated[int, typer.Option(min=0, help="Torch CPU threads while detecting; 0 = torch default.")]  # fmt: skip
_PoseThreads = Annotated[int, typer.Option(min=0, help="Torch CPU threads for the pose model; 0 = torch default.")]  # fmt: skip


def extract(
    videos: Annotated[list[Path], typer.Argument(help="Video files (anything PyAV/FFmpeg reads).")],
    out: _ExtractOut,
    character: _Character = "humanoid",
    pose_model: _PoseModel = None,
    detector: _Detector = "rtdetr-r50",
    device: Annotated[str, typer.Option(help="cpu | cuda.")] = "cpu",
    batch: Annotated[int, typer.Option(min=1, help="Frames per detector / pose forward pass.")] = 8,
    track_id: _TrackId = None,
    rotations: _Rotations = False,
    preview: _Preview = None,
    random_weights: _RandomWeights = False,
    det_threshold: _DetThreshold = None,
    ball: Annotated[bool, typer.Option(help="Track the sports ball as the clip's object.")] = True,
    max_gap: _MaxGap = 0.25,
    smooth: _Smooth = 1.0,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
    detect_every: _DetectEvery = None,
    det_threads: _DetThreads = 0,
    pose_threads: _PoseThreads = 0,
) -> None:
    """Extract 2D keypoints (and the ball) from videos into one 2D-motion file per clip."""
    from mimic2dm.characters.registry import CHARACTERS, load_character
    from mimic2dm.video.pipeline import (
        ExtractOptions,
        check_names,
        default_detect_every,
        extract_videos,
    )

    check_choice(character, CHARACTERS, "--character", CHARACTERS.names())
    spec = load_character(character)  # its keypoint set and default pose model
    _check_device(device)
    try:
        check_names(videos)
    except ValueError as e:
        refuse(str(e), "VIDEOS")
    _check_inputs(videos, out)  # before any model loads: a typo costs a second, not minutes
    threshold = det_threshold if det_threshold is not None else (0.0 if random_weights else 0.3)
    opts = ExtractOptions(
        character, batch, track_id, rotations, ball, max_gap, smooth, random_weights=random_weights,
        detect_every=detect_every or default_detect_every(device),
        det_threads=det_threads or None, pose_threads=pose_threads or None,
    )  # fmt: skip
    det, pose = _load_models(spec, detector, pose_model or spec.pose_model, random_weights, threshold, device)  # fmt: skip
    reports = extract_videos(videos, out, det, pose, opts, preview, progress, console(stderr=True))
    console().print(_report_table(reports))
    failed = [r for r in reports if r.status == "failed"]
    for r in failed:
        error(r.error if r.video in (r.error or "") else f"{r.video}: {r.error}")
    counts = {s: sum(r.status == s for r in reports) for s in ("ok", "skipped", "failed")}
    console().print(f"{counts['ok']} extracted, {counts['skipped']} skipped (already done), "
                    f"{counts['failed']} failed; manifest: {out / 'manifest.json'}", markup=False)  # fmt: skip
    if failed:
        raise typer.Exit(1)


def _load_models(spec, detector: str, pose_model: str, random_weights: bool, threshold: float,
                 device: str):  # fmt: skip
    """``(detector, pose estimator)`` of ``extract``; exit 1 naming a model that cannot load."""
    from mimic2dm.video.detector import DETECTORS, load_detector
    from mimic2dm.video.hub import check_available
    from mimic2dm.video.pose import POSE_MODELS, ModelLoadError, load_pose_estimator

    with exit_on(ModelLoadError):
        # offline and not cached: fail now, not after ~30 s of retries or another model's load
        check_available("detector", detector, DETECTORS, random_weights)
        check_available("pose model", pose_model, POSE_MODELS, random_weights)
        det = load_detector(detector, random_weights, threshold, device)
        pose = load_pose_estimator(pose_model, spec.keypoint_set, random_weights, device)
    return det, pose


def bench_pose(
    frames: Annotated[
        int, typer.Option(min=1, help="Frames timed per batch size (at least one full batch).")
    ] = 4,
    batch: Annotated[list[int], typer.Option(help="Batch sizes (repeat the option).")] = [1, 8],  # noqa: B006
    pose_model: Annotated[
        str, typer.Option(help="Pose architecture (random weights).")
    ] = "vitpose-b",
    detector: Annotated[
        str, typer.Option(help="Detector architecture (random weights).")
    ] = "rtdetr-r50",
    device: Annotated[str, typer.Option(help="cpu | cuda.")] = "cpu",
    threads: Annotated[int, typer.Option(help="CPU threads; 0 = torch default.")] = 0,
    json_out: JsonOption = None,
    detect_every: Annotated[
        int | None,
        typer.Option(min=1, help="K of the detect-every-K path (default 10 on cpu, 1 on cuda)."),
    ] = None,
    det_threads: Annotated[
        int, typer.Option(min=0, help="Threads while detecting; 0 = --threads.")
    ] = 0,
    pose_threads: Annotated[
        int, typer.Option(min=0, help="Threads for the pose model; 0 = --threads.")
    ] = 0,
) -> None:
    """Frames/s of detection + pose (one subject per frame) at each batch size, and of the
    detect-every-K path (boxes followed in between) with its ratio to the former."""
    from mimic2dm.video.bench import bench_pose as run

    device = _check_device(device)
    with library_output_to_log("bench"):
        result = run(frames, batch, pose_model, detector, device=device, threads=threads or None,
                     detect_every=detect_every, det_threads=det_threads or None,
                     pose_threads=pose_threads or None)  # fmt: skip
    table = Table(title=(f"{result['detector']} + {result['pose_model']} (random weights), "
                         f"{result['frame_size'][0]}x{result['frame_size'][1]} frames, {result['device']}, "
                         f"{result['det_threads']}/{result['pose_threads']} threads (detect/pose)"))  # fmt: skip
    cols = ("path", "batch", "frames", "frames/s", "detect ms/frame", "follow ms/frame", "pose ms/frame")  # fmt: skip
    for col in cols:
        table.add_column(col, justify="right")
    for r in result["results"]:
        table.add_row("detect every frame", str(r["batch"]), str(r["frames"]), f"{r['frames_per_s']:.2f}",
                      f"{r['detect_ms_per_frame']:.0f}", "-", f"{r['pose_ms_per_frame']:.0f}")  # fmt: skip
    f = result["follow"]
    table.add_row(f"detect every {f['detect_every']}, follow", str(f["batch"]), str(f["frames"]),
                  f"{f['frames_per_s']:.2f}", f"{f['detect_ms_per_frame']:.0f}",
                  f"{f['follow_ms_per_frame']:.1f}", f"{f['pose_ms_per_frame']:.0f}")  # fmt: skip
    out = console(stderr=json_to_stdout(json_out))
    out.print(table)
    out.print(f"detect every {f['detect_every']} + follow: {f['frames_per_s']:.2f} frames/s vs "
              f"{f['per_frame_frames_per_s']:.2f} detecting every frame at batch {f['batch']} "
              f"(same run): {f['speedup']:.2f}x; {f['redetections']} re-detections",
              markup=False)  # fmt: skip
    write_json_report(result, json_out)
