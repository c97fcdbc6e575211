"""``mimic2dm transition``: one stylised RSMT transition between two frames of 3D clips.

    mimic2dm transition --model RUN --start walk.txt:10 --target run.npz:40 --seconds 1.5 \\
        --style run.npz --out t.npz --camera 3 --preview t.mp4 --json -

The start and the target are frames of DeepMimic humanoid3d ``.txt`` or ``cmu_*.npz`` clips
(30 fps after resampling, :func:`~mimic2dm.generators.rsmt.data.read_motion`), each in its
own file's world coordinates; the style example is the first ``--style-frames`` frames of a
clip. The sampler streams ``round(seconds * 30)`` frames one at a time
(:meth:`~mimic2dm.generators.rsmt.inference.RSMT.stream`, one torch thread); the last one
is meant to reach the target.

Outputs (written only once everything has been generated):

- ``--out OUT.npz``: the start frame then the generated frames as a ``cmu_*.npz`` clip
  (:func:`~mimic2dm.characters.mocap.load_cmu_clip` reads it; orientations from
  :func:`~mimic2dm.generators.rsmt.features.to_local`, bone lengths the humanoid's), plus
  ``global_positions [T, 15, 3]`` (the model's own joint positions) and the settings;
- with ``--camera SEED`` also ``OUT_2d.npz``: that clip seen through one static virtual
  camera drawn with SEED, as ``data synth`` would project it (a 2D clip with 3D ground truth);
- ``--preview OUT.mp4``: the COCO-17 skeleton in that camera, or in a side view;
- ``--json``: frames, seconds, last-frame error, foot skating, fastest joint, real-time factor.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import typer

from mimic2dm.utils.cli import check_positive, exit_on, fail, refuse
from mimic2dm.utils.reporting import (
    JsonOption,
    human_console,
    library_output_to_log,
    write_json_report,
)

MIN_STYLE_FRAMES = 8
"""Shortest style example (the style encoder halves the time axis twice)."""
CLIP_SUFFIXES = (".txt", ".npz")
CLIP_KINDS = "a DeepMimic humanoid3d .txt or a cmu_*.npz clip"
LOAD_ERRORS = (ValueError, OSError, KeyError)


@dataclass(frozen=True)
class FrameRef:
    """``FILE:FRAME`` of an option: a clip and a frame index at 30 fps."""

    option: str
    path: Path
    frame: int

    def __str__(self) -> str:
        return f"{self.path}:{self.frame}"


def _message(e: BaseException) -> str:
    """One line of an error (a KeyError's message without its quotes)."""
    text = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
    return " ".join(str(text).split())


def parse_frame_ref(text: str, option: str) -> FrameRef:
    """``"walk.txt:12"`` -> ``FrameRef(option, Path("walk.txt"), 12)``.

    Raises:
        ValueError: not ``FILE:FRAME`` with an integer FRAME (naming the option).
    """
    path, sep, frame = text.rpartition(":")
    try:
        index = int(frame)
    except ValueError:
        index = None
    if not sep or not path or index is None:
        raise ValueError(f"{option} {text!r}: expected FILE:FRAME ({CLIP_KINDS} and an integer frame index at 30 fps)")  # fmt: skip
    return FrameRef(option, Path(path), index)


def read_clip(path: Path, option: str):
    """Frames ``[T, 180]`` at 30 fps of the clip of ``option``.

    Raises:
        ValueError: a missing, unreadable or unsuitable file, naming the option and the file.
    """
    from mimic2dm.generators.rsmt.data import read_motion

    if path.suffix.lower() not in CLIP_SUFFIXES:
        raise ValueError(f"{option} {path}: expected {CLIP_KINDS}")
    if not path.is_file():
        raise ValueError(f"{option} {path}: no such file (expected {CLIP_KINDS})")
    try:
        x = read_motion(path)
    except LOAD_ERRORS as e:
        msg = _message(e)
        raise ValueError(
            f"{option}: {msg}" if str(path) in msg else f"{option} {path}: {msg}"
        ) from None
    if x.shape[0] == 0:
        raise ValueError(f"{option} {path}: the clip has no frames")
    return x


def frame_at(clip, ref: FrameRef):
    """Frame ``ref.frame`` ``[180]`` of ``clip [T, 180]``; ValueError with the valid range."""
    n = int(clip.shape[0])
    if not 0 <= ref.frame < n:
        raise ValueError(f"{ref.option} {ref}: frame {ref.frame} is out of range; the clip has {n} frames at 30 fps (valid: 0..{n - 1})")  # fmt: skip
    return clip[ref.frame]


def load_model(model: str | None, random_weights: bool, seed: int):
    """The RSMT of ``--model``, or an untrained one with ``--random-weights``.

    Raises:
        ValueError: both or neither given, no checkpoint, a checkpoint of another kind.
    """
    from mimic2dm.generators.rsmt.inference import load_rsmt, random_rsmt

    if random_weights and model is not None:
        raise ValueError("give --model CHECKPOINT or --random-weights, not both")
    if not random_weights and model is None:
        raise ValueError("give --model CHECKPOINT (an RSMT part=sampler run) or --random-weights")
    if random_weights:
        return random_rsmt(seed)
    try:
        return load_rsmt(model)
    except KeyError as e:
        raise ValueError(f"--model {model}: the checkpoint lacks {_message(e)!r}, expected an RSMT sampler checkpoint") from None  # fmt: skip
    except (ValueError, OSError, TypeError, AttributeError) as e:
        raise ValueError(f"--model: {_message(e)}") from None


def stream_transition(rsmt, start_clip, start_frame: int, target, frames: int, style,
                      seed: int) -> tuple:  # fmt: skip
    """Stream one transition on one torch thread.

    Args:
        rsmt: a loaded :class:`~mimic2dm.generators.rsmt.inference.RSMT`.
        start_clip: ``[T, 180]`` clip of the start frame (for its phase), start_frame: its index.
        target: ``[180]``; frames: frames to generate; style: ``[L, 180]``; seed: sampling seed.

    Returns:
        ``(motion [frames + 1, 180], seconds)``: the start frame then the generated frames,
        and the wall-clock time of the generation (the stream) alone.
    """
    import torch

    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        start = start_clip[start_frame]
        phase0 = rsmt.phase_at(start_clip, start_frame)
        gen = torch.Generator().manual_seed(seed)
        t0 = time.perf_counter()
        out = list(rsmt.stream(start[None], phase0[None], target[None], frames, style[None], gen))
        seconds = time.perf_counter() - t0
    finally:
        torch.set_num_threads(prev)
    return torch.cat([start[None], *out]), seconds


def transition_report(motion, target, seconds_taken: float) -> dict:
    """Metrics of ``motion [T, 180]`` (start frame first) against ``target [180]``."""
    from mimic2dm.generators.rsmt import metrics

    frames = int(motion.shape[0]) - 1
    return {
        "frames": frames,
        "seconds": frames / metrics.FPS,  # the requested length rounded to whole frames
        "last_frame_error_m": metrics.last_frame_error(motion[-1], target),
        "foot_skating": metrics.foot_skating(motion),
        "max_joint_speed": float(metrics.joint_speeds(motion).max()),
        "generation_seconds": seconds_taken,
        "real_time_factor": (frames / metrics.FPS) / seconds_taken,
        "frames_per_second": frames / seconds_taken,
    }


def save_cmu_clip(path: Path, motion, meta: dict) -> None:
    """Write ``motion [T, 180]`` as a ``cmu_*.npz`` clip with ``global_positions`` and ``meta``
    (one array per key; None as an empty string)."""
    import numpy as np
    from mimic2dm.generators.rsmt import features as F

    from mimic2dm.motion.format import atomic_savez

    clip = F.to_mocap(motion)
    arrays = {
        "node_names": np.array(clip.names),
        "parents": np.array(clip.parents, dtype=np.int64),
        "local_translation": clip.offsets.numpy().astype(np.float32),
        "local_rotation": clip.local_rotation.numpy().astype(np.float32),
        "root_translation": clip.root_translation.numpy().astype(np.float32),
        "fps": np.array(F.FPS, dtype=np.float32),
        "global_positions": F.positions(motion).numpy().astype(np.float32),
    }
    arrays |= {k: np.array("" if v is None else v) for k, v in meta.items()}
    atomic_savez(path, arrays)


def keypoints3d(motion, out: Path | None):
    """COCO-17 keypoints ``[T, 17, 3]`` of the transition: read back from the written clip
    (the ``data synth`` reader) when there is one, else of the same clip in memory."""
    if out is not None:
        from mimic2dm.characters.clips import load_mocap_keypoints

        return load_mocap_keypoints(out).keypoints
    from mimic2dm.generators.rsmt import features as F

    from mimic2dm.characters.mocap import human_keypoints

    return human_keypoints(F.to_mocap(motion)).numpy()


def side_camera_config(motion):
    """Camera ranges of a side view: level, looking across the pelvis's path (or its first
    heading when it hardly moves)."""
    import math

    from mimic2dm.generators.rsmt import features as F

    from mimic2dm.geometry.virtual import VirtualCameraConfig

    d = motion[-1, 0:2] - motion[0, 0:2]
    yaw = float(F.heading(motion[0])) if float(d.norm()) < 0.1 else math.atan2(float(d[1]), float(d[0]))  # fmt: skip
    az = math.degrees(yaw) + 90.0
    return VirtualCameraConfig(focal_range=(1200.0, 1200.0), azimuth_range_deg=(az, az),
                               elevation_range_deg=(5.0, 5.0), distance_range=(5.0, 5.0))  # fmt: skip


def project(kp, camera: int | None, motion, meta: dict):
    """The 2D clip of keypoints ``kp [T, 17, 3]`` through one static camera drawn with seed
    ``camera`` (:func:`~mimic2dm.motion.synth.synthesize_views`), or through a side view."""
    from mimic2dm.generators.rsmt import features as F

    from mimic2dm.motion.synth import synthesize_views

    cfg = None if camera is not None else side_camera_config(motion)
    m = synthesize_views(kp, "coco17", F.FPS, num_views=1, camera="static",
                         seed=0 if camera is None else camera, camera_config=cfg, meta=meta)  # fmt: skip
    m.meta["random_weights"] = meta.get("model") == "random weights"
    return m


def output_paths(out: Path | None, camera: int | None, preview: Path | None,
                 json_out: str | None) -> Path | None:  # fmt: skip
    """Check the outputs before any work; returns the 2D clip's path (``OUT_2d.npz``).

    Raises:
        ValueError: a wrong extension or an unwritable place, naming the option.
    """
    from mimic2dm.eval import VIDEO_EXTENSIONS, check_outputs
    from mimic2dm.utils.rundir import check_writable

    check_outputs(json_out, None, None)
    if preview is not None and preview.suffix.lower() not in VIDEO_EXTENSIONS:
        raise ValueError(f"--preview {preview}: expected a video file name ending in {', '.join(VIDEO_EXTENSIONS)}")  # fmt: skip
    if preview is not None:
        check_writable(preview, "--preview")
    if out is None:
        if camera is not None:
            raise ValueError("--camera: writes the 2D clip next to --out OUT.npz; give --out")
        return None
    if out.suffix.lower() != ".npz":
        raise ValueError(f"--out {out}: expected a .npz file name")
    check_writable(out, "--out")
    return out.with_name(out.stem + "_2d.npz") if camera is not None else None


@dataclass
class Inputs:
    """What a transition is made of, read and checked."""

    rsmt: object
    start_clip: object
    target: object
    style: object


def read_inputs(start: FrameRef, target: FrameRef, style: Path, style_frames: int | None,
                model: str | None, random_weights: bool, seed: int) -> Inputs:  # fmt: skip
    """Read the model and the clips (one read per file) and check the frames and the style."""
    rsmt = load_model(model, random_weights, seed)
    clips: dict[Path, object] = {}

    def clip(path: Path, option: str):
        key = path.resolve()
        if key not in clips:
            clips[key] = read_clip(path, option)
        return clips[key]

    start_clip = clip(start.path, start.option)
    frame_at(start_clip, start)
    goal = frame_at(clip(target.path, target.option), target)
    n = style_frames or rsmt.sampler.cfg.style_frames
    sty = clip(style, "--style")[:n]
    if sty.shape[0] < MIN_STYLE_FRAMES:
        raise ValueError(f"--style {style}: the clip has {sty.shape[0]} frames at 30 fps, expected >= {MIN_STYLE_FRAMES}")  # fmt: skip
    return Inputs(rsmt, start_clip, goal, sty)


def _summary(r: dict) -> str:
    wrote = [p for p in (r["out"], r["out_2d"], r["preview"]) if p]
    return (f"transition: {r['frames']} frames ({r['seconds']:.2f} s) in {r['generation_seconds']:.3f} s = "
            f"{r['real_time_factor']:.1f}x real time ({r['frames_per_second']:,.0f} frames/s, 1 thread); "
            f"last-frame error {r['last_frame_error_m']:.3f} m, foot skating {r['foot_skating']:.3f} m/s, "
            f"fastest joint {r['max_joint_speed']:.2f} m/s" + (f"; wrote {', '.join(wrote)}" if wrote else ""))  # fmt: skip


def transition_cmd(
    start: str = typer.Option(
        ...,
        "--start",
        metavar="FILE:FRAME",
        help=f"Start frame: {CLIP_KINDS} and a frame index at 30 fps.",
    ),
    target: str = typer.Option(
        ...,
        "--target",
        metavar="FILE:FRAME",
        help="Target frame, reached at the last generated frame.",
    ),
    seconds: float = typer.Option(
        ..., "--seconds", help="Transition length; frames = round(seconds * 30)."
    ),
    style: Path = typer.Option(
        ..., "--style", help=f"Style example: the first --style-frames frames of {CLIP_KINDS}."
    ),
    style_frames: int = typer.Option(
        None,
        "--style-frames",
        help=f"Frames of the style example (>= {MIN_STYLE_FRAMES}; default: the model's style_frames).",
    ),
    model: str = typer.Option(
        None,
        "--model",
        help="RSMT sampler run directory or checkpoint (mimic2dm-train-rsmt part=sampler).",
    ),
    random_weights: bool = typer.Option(
        False,
        "--random-weights",
        help="An untrained RSMT of the default sizes instead of --model (smoke run).",
    ),
    seed: int = typer.Option(0, "--seed", help="Sampling seed (and the untrained weights' seed)."),
    camera: int = typer.Option(
        None,
        "--camera",
        metavar="SEED",
        help="Also write OUT_2d.npz: the clip through one static virtual camera drawn with SEED.",
    ),
    out: Path = typer.Option(
        None, "--out", help="The transition as a cmu_*.npz clip (start frame first)."
    ),
    preview: Path = typer.Option(
        None, "--preview", help="Skeleton video (.mp4): --camera's view, else a side view."
    ),
    json_out: JsonOption = None,
) -> None:
    """Generate one stylised RSMT transition from a start frame to a target frame, streamed
    frame by frame on one thread; report its accuracy and speed against real time (30 fps)."""
    from mimic2dm.generators.rsmt import features as F

    check_positive(seconds, "--seconds")
    frames = round(seconds * F.FPS)
    if frames < 1 or (camera is not None and frames < 2):
        refuse(f"{seconds:g} s is {frames} frame(s) at 30 fps; expected >= {1 if camera is None else 2}", "--seconds")  # fmt: skip
    if style_frames is not None and style_frames < MIN_STYLE_FRAMES:
        refuse(f"{style_frames} frames; expected >= {MIN_STYLE_FRAMES}", "--style-frames")
    with exit_on(*LOAD_ERRORS), library_output_to_log("transition"):
        out_2d = output_paths(out, camera, preview, json_out)
        s, t = parse_frame_ref(start, "--start"), parse_frame_ref(target, "--target")
        inp = read_inputs(s, t, style, style_frames, model, random_weights, seed)
        motion, taken = stream_transition(inp.rsmt, inp.start_clip, s.frame, inp.target, frames, inp.style, seed)  # fmt: skip
    settings = {"start": str(s), "target": str(t), "style": str(style), "seconds": seconds,
                "style_frames": int(inp.style.shape[0]), "seed": seed, "model": inp.rsmt.source}  # fmt: skip
    report = {**settings, **transition_report(motion, inp.target, taken), "camera": camera,
              "out": out and str(out), "out_2d": out_2d and str(out_2d), "preview": preview and str(preview)}  # fmt: skip
    try:
        write_outputs(motion, settings, out, out_2d, camera, preview)
    except OSError as e:
        from mimic2dm.utils.rundir import error_line

        fail(error_line(e))
    human_console(json_out, highlight=False).print(_summary(report), markup=False, soft_wrap=True)
    write_json_report(report, json_out)


def write_outputs(motion, settings: dict, out: Path | None, out_2d: Path | None,
                  camera: int | None, preview: Path | None) -> None:  # fmt: skip
    """Write the clip, its 2D projection and the preview that were asked for."""
    if out is not None:
        save_cmu_clip(out, motion, settings)
    if out_2d is None and preview is None:
        return
    from mimic2dm.generators.rsmt import features as F
    from mimic2dm.generators.sample import render_preview

    from mimic2dm.motion.format import save_motion2d

    meta = {"source": str(out) if out else "", "character": "humanoid", "source_fps": F.FPS,
            "transition": settings, "model": settings["model"]}  # fmt: skip
    m = project(keypoints3d(motion, out), camera, motion, meta)
    if out_2d is not None:
        save_motion2d(m, out_2d)
    if preview is not None:
        render_preview(m, preview)
