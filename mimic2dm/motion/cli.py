"""``mimic2dm data ...``: make, import and check motion files.

Commands:
- ``synth``: project a 3D clip through virtual cameras into a 2D clip (with 3D GT);
  ``--loops`` / ``--seconds`` repeat its gait cycle first.
- ``check``: validate 2D/3D motion files and print a summary table.
- ``import-json``: COCO / mmpose keypoint JSON -> 2D clip.
- ``import-aist``: one AIST++ sequence (calibrated or not), or a split (one file each), -> 2D clips.
- ``import-penn``, ``import-badja``: Penn Action ``.mat`` / BADJA JSON -> 2D clips.
- ``import-deepmimic``, ``import-bvh``: DeepMimic / BVH motion -> shared mocap clips (``.npz``).
- ``dribble``: a synthetic dribble (looped run/walk + simulated ball) -> 2D clip.
- ``demo``: write the built-in demo clip (no external data needed).
- ``corpus``: write the tracker's motion corpus (``conf/data/corpus.yaml``) and its manifest.

Exit codes: 0 success, 1 invalid input (message names file, field, expectation),
2 bad command-line usage.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from mimic2dm.motion import import_cli
from mimic2dm.motion.format import (
    CONFIDENCE_THRESHOLD,
    DEFAULT_CONTROL_HZ,
    MotionFormatError,
    check_trackable,
    load_motion2d,
    load_motion3d,
    read_kind,
    save_motion2d,
    save_motion3d,
)
from mimic2dm.motion.import_cli import READ_ERRORS
from mimic2dm.motion.quality import file_problems
from mimic2dm.utils.cli import check_choice, check_positive, console, error, exit_on, fail, refuse

app = typer.Typer(help="Make, import and check 2D/3D motion files.", no_args_is_help=True)

CHARACTERS = ("humanoid", "dog")

# the camera options of ``data synth``
_Distance = Annotated[str | None, typer.Option(help="Camera distance (m): a value D or a range LO:HI [default: 3:8].")]  # fmt: skip
_Focal = Annotated[str | None, typer.Option(help="Focal length (px): a value F or a range LO:HI [default: 1000:1800].")]  # fmt: skip
_Elevation = Annotated[str | None, typer.Option(help="Camera elevation (deg): a value or a range LO:HI [default: -10:35].")]  # fmt: skip
# the window options of ``data synth``: seconds of the source clip, applied before anything else
_Start = Annotated[float | None, typer.Option(help="Cut the clip from this second of the source (first).")]  # fmt: skip
_End = Annotated[float | None, typer.Option(help="Cut the clip up to this second of the source (first).")]  # fmt: skip


def _parse_labels(labels: list[str]) -> dict[str, str]:
    out = {}
    for item in labels:
        key, sep, value = item.partition("=")
        if not sep or not key:
            refuse(f"label {item!r} is not KEY=VALUE", "--label")
        out[key] = value
    return out


def _range(text: str, option: str, positive: bool) -> tuple[float, float]:
    """``"5"`` -> (5, 5); ``"3:8"`` -> (3, 8); anything else is a BadParameter on ``option``."""
    parts = text.split(":")
    try:
        lo, hi = (float(parts[0]), float(parts[-1])) if len(parts) in (1, 2) else (None, None)
    except ValueError:
        lo = hi = None
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)) or hi < lo:
        refuse(f"{text!r}: expected a number or LO:HI with LO <= HI", option)
    if positive and lo <= 0:
        refuse(f"{text!r}: must be > 0", option)
    return lo, hi


def _camera_config(*, distance: str | None, focal: str | None, elevation: str | None):
    """The camera ranges of docs/design.md section 1, narrowed by the ``data synth`` camera options (or None)."""
    from mimic2dm.geometry.virtual import VirtualCameraConfig

    ranges = {}
    if distance is not None:
        ranges["distance_range"] = _range(distance, "--distance", positive=True)
    if focal is not None:
        ranges["focal_range"] = _range(focal, "--focal", positive=True)
    if elevation is not None:
        ranges["elevation_range_deg"] = _range(elevation, "--elevation", positive=False)
    return VirtualCameraConfig(**ranges) if ranges else None


def _character_matches(clip_character: str, clip_set: str, character: str) -> bool:
    if clip_character == character:
        return True
    from mimic2dm.characters.registry import load_character

    return load_character(character).keypoint_set == clip_set


@app.command()
def synth(
    mocap: Annotated[
        Path,
        typer.Argument(
            help="3D clip: CMU .npz, dog .npz (shared/data/mocap), DeepMimic .txt or a Motion3D file."
        ),
    ],
    out: Annotated[Path, typer.Option("--out", help="Output 2D clip (.npz).")],
    character: Annotated[
        str, typer.Option(help="humanoid | dog: the character the clip belongs to.")
    ] = "humanoid",
    views: Annotated[int, typer.Option(min=1, help="Number of virtual cameras V.")] = 1,
    camera: Annotated[str, typer.Option(help="static | tracking | dynamic.")] = "static",
    seed: Annotated[int, typer.Option(help="Seed of the cameras and the noise.")] = 0,
    noise_px: Annotated[float, typer.Option(min=0.0, help="Std of Gaussian pixel noise.")] = 0.0,
    drop_prob: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Probability of dropping a keypoint.")
    ] = 0.0,
    fps: Annotated[float | None, typer.Option(help="Resample the clip to this frame rate.")] = None,
    label: Annotated[
        list[str] | None, typer.Option(help="Per-clip label KEY=VALUE (repeatable).")
    ] = None,
    loops: Annotated[
        int | None,
        typer.Option(min=1, help="Repeat the clip's gait cycle N times (root motion carried on)."),
    ] = None,
    seconds: Annotated[
        float | None, typer.Option(help="Loop the clip's gait cycle until it lasts T seconds.")
    ] = None,
    start: _Start = None,
    end: _End = None,
    ground: Annotated[
        bool,
        typer.Option(
            help="First lift the 3D motion so that no foot keypoint is lower than the "
            "character's own flat foot puts it (the lift goes into the clip's meta)."
        ),
    ] = False,
    distance: _Distance = None,
    focal: _Focal = None,
    elevation: _Elevation = None,
) -> None:
    """Project a 3D clip through V virtual cameras into a 2D clip (keeps 3D GT and cameras).

    Cameras are drawn from the ranges of docs/design.md section 1; ``--distance``, ``--focal`` and ``--elevation``
    narrow them, e.g. ``--distance 5 --focal 1400 --elevation 10 --camera tracking`` is the
    follow camera of ``mimic2dm control`` (azimuth stays random).

    With ``--loops`` or ``--seconds`` the clip's gait cycle is repeated first, each loop
    starting where the previous one ended (heading included), seams blended. With
    ``--ground`` the motion is first lifted by the smallest constant height that keeps every
    foot keypoint at or above its height in the character's standing pose. ``--start`` /
    ``--end`` (seconds of the source clip) cut it before any of that. A DeepMimic ``.txt``
    is read with the character file beside it (as ``data import-deepmimic`` would).
    """
    from mimic2dm.motion.synth import synthesize_views

    _check_synth_options(character, camera, fps, loops, seconds)
    labels = _parse_labels(label or [])
    camera_config = _camera_config(distance=distance, focal=focal, elevation=elevation)
    clip = _load_clip(mocap, character)
    meta = {"source": str(mocap), "character": clip.character, "source_fps": clip.fps}
    if camera_config is not None:
        meta["camera_ranges"] = {
            k: list(getattr(camera_config, k))
            for k in ("distance_range", "focal_range", "elevation_range_deg")
        }
    if start is not None or end is not None:
        from mimic2dm.motion.corpus import window_slice

        with exit_on(ValueError, prefix=f"{mocap}: "):
            cut = window_slice(len(clip.keypoints), clip.fps, start, end, "", ("--start", "--end"))
        clip.keypoints = clip.keypoints[cut]
        clip.object3d = None if clip.object3d is None else clip.object3d[cut]
        meta["window_s"] = [cut.start / clip.fps, (cut.stop - 1) / clip.fps]
    kp, obj, rate = _prepare_motion(clip, mocap, character, meta, ground, loops, seconds, fps)
    m = synthesize_views(kp, clip.keypoint_set, rate, num_views=views, camera=camera, seed=seed,
                         noise_px=noise_px, drop_prob=drop_prob, object3d=obj,
                         camera_config=camera_config, labels=labels, meta=meta)  # fmt: skip
    try:  # e.g. --fps 0.1 on a short clip leaves a single frame: nothing to track
        check_trackable(m, out)
    except MotionFormatError as e:
        fail(f"{e} (not written; use a higher --fps or a longer clip)")
    save_motion2d(m, out)
    console().print(
        f"wrote {out}: {m.num_views} view(s) x {m.num_frames} frames at {m.fps:g} fps, "
        f"{m.keypoint_set}, {camera} cameras",
        markup=False,
        soft_wrap=True,
    )


def _check_synth_options(
    character: str, camera: str, fps: float | None, loops: int | None, seconds: float | None
) -> None:
    """Usage errors of ``data synth`` (exit 2)."""
    from mimic2dm.geometry.virtual import CAMERA_MODES

    check_choice(character, CHARACTERS, "--character")
    check_choice(camera, CAMERA_MODES, "--camera")
    check_positive(fps, "--fps")
    if loops is not None and seconds is not None:
        refuse("give --loops or --seconds, not both", "--seconds")
    check_positive(seconds, "--seconds")


def _load_clip(mocap: Path, character: str):
    """The 3D keypoints of ``mocap`` (:func:`mimic2dm.characters.clips.load_mocap_keypoints`),
    refused (exit 1) unless they fit ``character``."""
    from mimic2dm.characters.clips import load_mocap_keypoints

    with exit_on(OSError, ValueError, KeyError):
        clip = load_mocap_keypoints(mocap)
    if not _character_matches(clip.character, clip.keypoint_set, character):
        fail(f"{mocap}: a {clip.character} clip ({clip.keypoint_set}) cannot be used with --character {character}")  # fmt: skip
    return clip


def _prepare_motion(clip, mocap: Path, character: str, meta: dict, ground: bool,
                    loops: int | None, seconds: float | None, fps: float | None):  # fmt: skip
    """``(keypoints, object3d, fps)`` of ``clip`` grounded, looped and resampled as asked;
    what each step did goes into ``meta``."""
    from mimic2dm.motion.synth import resample

    kp, obj, rate = clip.keypoints, clip.object3d, clip.fps
    if ground:
        from mimic2dm.characters.feet import ground_keypoints

        with exit_on(ValueError, prefix=f"{mocap}: "):
            kp, meta["ground_lift_m"] = ground_keypoints(kp, character)
    if loops is not None or seconds is not None:
        from mimic2dm.motion.looping import loop_keypoints

        with exit_on(ValueError, prefix=f"{mocap}: "):
            kp, obj, meta["loop"] = loop_keypoints(
                kp, clip.keypoint_set, rate, loops=loops, seconds=seconds, object3d=obj
            )
    if fps is not None:
        kp, rate = resample(kp, clip.fps, fps), fps
        obj = None if obj is None else resample(obj, clip.fps, fps)
    return kp, obj, rate


def _row(path: Path, threshold: float, control_hz: float) -> list[str]:
    """Summary cells of one valid, trackable file (raises MotionFormatError otherwise)."""
    if read_kind(path) == "motion3d":
        m3 = load_motion3d(path)
        check_trackable(m3, path, control_hz)
        kps = m3.keypoint_set or "-"
        obj = "yes" if m3.object_pos is not None else "no"
        return [
            str(path),
            f"motion3d ({m3.character})",
            "-",
            str(m3.num_frames),
            f"{m3.fps:g}",
            kps,
            "-",
            "-",
            "-",
            "-",
            obj,
            "yes" if m3.keypoints3d is not None else "no",
        ]
    m = load_motion2d(path)
    check_trackable(m, path, control_hz, threshold)
    s = m.summary()
    masked = 1.0 - float(m.mask(threshold).mean())
    return [
        str(path),
        "motion2d",
        str(s["views"]),
        str(s["frames"]),
        f"{s['fps']:g}",
        s["keypoint_set"],
        f"{s['image_size'][0]}x{s['image_size'][1]}",
        f"{s['mean_confidence']:.3f}",
        f"{masked:.1%}",
        s["cameras"],
        "yes" if s["object"] else "no",
        "yes" if s["gt3d"] else "no",
    ]


@app.command()
def check(
    files: Annotated[list[Path], typer.Argument(help="Motion files (.npz) to validate.")],
    threshold: Annotated[
        float, typer.Option(help="Confidence below which a keypoint is masked.")
    ] = CONFIDENCE_THRESHOLD,
    control_hz: Annotated[
        float,
        typer.Option(
            min=1e-6, help="Control rate the clips will be tracked at (for the length check)."
        ),
    ] = DEFAULT_CONTROL_HZ,
) -> None:
    """Validate motion files and print a summary; exit code 1 if any file is invalid.

    A clip must also be trackable: long enough at the control rate (the error gives the
    minimum) and with some observed keypoint in every view. A valid clip with keypoints far
    outside the image, frames too poor to fit or long missing stretches gets a warning line
    per problem (``mimic2dm.motion.quality``; the exit code stays 0).
    """
    table = Table(title="motion files")
    for col in (
        "file",
        "kind",
        "views",
        "frames",
        "fps",
        "keypoints",
        "image",
        "mean conf",
        "masked",
        "cameras",
        "object",
        "3D GT",
    ):
        table.add_column(col, overflow="fold")
    failures: list[str] = []
    # valid files with keypoints or frames a fit cannot trust (motion/quality.py)
    flags: list[str] = []
    for path in files:
        try:
            table.add_row(*_row(path, threshold, control_hz))
            flags += file_problems(path, threshold)
        except MotionFormatError as e:
            failures.append(str(e))
    if table.row_count:
        console().print(table)
    for msg in failures:
        error(msg)
    for msg in flags:
        console(stderr=True).print(f"warning: {msg}", markup=False, soft_wrap=True)
    ok = len(files) - len(failures)
    console().print(f"{ok}/{len(files)} file(s) valid", markup=False)
    if failures:
        raise typer.Exit(1)


@app.command("import-json")
def import_json(
    src: Annotated[Path, typer.Argument(help="COCO results / COCO dict / mmpose prediction JSON.")],
    out: Annotated[Path, typer.Option("--out", help="Output 2D clip (.npz).")],
    fps: Annotated[float, typer.Option(help="Frame rate of the video.")],
    width: Annotated[
        int | None, typer.Option(help="Image width (px), if the JSON has none.")
    ] = None,
    height: Annotated[
        int | None, typer.Option(help="Image height (px), if the JSON has none.")
    ] = None,
    image_size: Annotated[
        str | None,
        typer.Option(help="Image size WxH (px), if the JSON has none (or --width/--height)."),
    ] = None,
    keypoint_set: Annotated[str, typer.Option(help="coco17 | dog17.")] = "coco17",
    random_weights: Annotated[
        bool, typer.Option(help="Mark keypoints from an untrained pose model.")
    ] = False,
) -> None:
    """Convert keypoint JSON (COCO or mmpose layout) into a single-view 2D clip."""
    from mimic2dm.motion.import_cli import parse_size
    from mimic2dm.motion.loaders import load_keypoints_json

    if (width is None) != (height is None) or (width is not None and min(width, height) <= 0):
        refuse("give both, > 0 (or --image-size WxH)", "--width/--height")
    if image_size is not None and width is not None:
        refuse("give --image-size or --width/--height, not both", "--image-size")
    size = parse_size(image_size) or ((width, height) if width else None)
    _convert(
        out,
        load_keypoints_json,
        src,
        fps=fps,
        image_size=size,
        keypoint_set=keypoint_set,
        meta={"random_weights": random_weights},
    )


def _check_aist_options(anno_dir, seq, split, view, one_random_view) -> None:
    """Usage errors of ``import-aist`` (exit 2)."""
    from mimic2dm.motion.aist import SPLITS

    single = anno_dir.is_file()
    if split is None and seq is None and not single:
        refuse("give --seq or --split (one of them), or a keypoint file", "--seq/--split")
    if split is not None and (seq is not None or single):
        refuse("give --seq or --split, not both", "--seq/--split")
    if split is not None:
        check_choice(split, SPLITS, "--split")
    if one_random_view and view:
        refuse("give --view or --one-random-view, not both", "--view")


# options of ``import-aist`` with long help texts
_Seq = Annotated[str | None, typer.Option(help="Sequence name, e.g. gWA_sFM_cAll_d27_mWA2_ch21 (not with a file).")]  # fmt: skip
_Split = Annotated[str | None, typer.Option(help="train | val | test: every sequence of splits/crossmodal_<split>.txt minus ignore_list.txt, one file each.")]  # fmt: skip
_View = Annotated[list[str] | None, typer.Option(help="Camera name to keep (repeatable; default all).")]  # fmt: skip
_OneRandomView = Annotated[bool, typer.Option(help="Keep one randomly drawn camera view per sequence (in meta).")]  # fmt: skip
_AistFps = Annotated[float | None, typer.Option(help="Frame rate [default: from the file's timestamps, else 60].")]  # fmt: skip
_AistImageSize = Annotated[str | None, typer.Option(help="WxH of uncalibrated views (no camera file) [default: 1920x1080].")]  # fmt: skip


@app.command("import-aist")
def import_aist(
    anno_dir: Annotated[
        Path,
        typer.Argument(
            help="AIST++ annotation folder (aist_plusplus_final), a folder of keypoints2d "
            "<seq>.pkl files, or one such .pkl/.npz file."
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", help="Output 2D clip (.npz); with --split, a folder.")
    ],
    seq: _Seq = None,
    split: _Split = None,
    view: _View = None,
    one_random_view: _OneRandomView = False,
    seed: Annotated[int, typer.Option(help="Seed of --one-random-view.")] = 0,
    fps: _AistFps = None,
    image_size: _AistImageSize = None,
) -> None:
    """Convert AIST++ sequences (2D keypoints, cameras, 3D keypoints) into 2D clips.

    One sequence (``--seq``, or a single keypoint file), or a whole split (``--split``); all
    views, ``--view`` ones, or ``--one-random-view``. The 3D keypoints are kept as ground
    truth for evaluation. Without ``cameras/mapping.txt`` or the setting's camera file the
    views stay uncalibrated (named c01, c02... in file order) for ``mimic2dm preprocess``.
    """
    from mimic2dm.motion.aist import import_sequence, import_split
    from mimic2dm.motion.import_cli import parse_size

    _check_aist_options(anno_dir, seq, split, view, one_random_view)
    draw = seed if one_random_view else None
    opts = {"fps": fps, "image_size": parse_size(image_size)}
    if split is None:
        name = seq if seq is not None else anno_dir.stem
        _convert(out, import_sequence, anno_dir, name, views=view or None, one_view_seed=draw, **opts)  # fmt: skip
        return
    with exit_on(*READ_ERRORS):
        files = import_split(anno_dir, split, out, one_view_seed=draw, views=view or None, **opts)
    how = (
        f"one random view (seed {seed})"
        if one_random_view
        else "views " + (",".join(view) if view else "all")
    )
    console().print(
        f"wrote {len(files)} clip(s) of the {split} split to {out}: {how}",
        markup=False,
        soft_wrap=True,
    )


def _convert(out: Path, loader: Any, *args: Any, **kwargs: Any) -> None:
    with exit_on(*READ_ERRORS):
        m = loader(*args, **kwargs)
    save_motion2d(m, out)
    cams = m.summary()["cameras"]
    console().print(
        f"wrote {out}: {m.num_views} view(s) x {m.num_frames} frames at {m.fps:g} fps, cameras {cams}",
        markup=False,
        soft_wrap=True,
    )


@app.command()
def dribble(
    mocap: Annotated[
        Path, typer.Argument(help="Running or walking human clip (CMU .npz or Motion3D).")
    ],
    out: Annotated[Path, typer.Option("--out", help="Output 2D clip (.npz) with the ball track.")],
    views: Annotated[int, typer.Option(min=1, help="Number of virtual cameras V.")] = 1,
    seed: Annotated[int, typer.Option(help="Seed of the cameras.")] = 0,
    seconds: Annotated[float, typer.Option(min=0.5, help="Length of the dribble.")] = 10.0,
    camera: Annotated[
        str,
        typer.Option(help="static | tracking | dynamic (static views of a long run are far away)."),
    ] = "tracking",
    touch_every: Annotated[
        int,
        typer.Option(min=1, help="The kicking foot touches the ball once every N of its strides."),
    ] = 1,
) -> None:
    """Compose a synthetic dribble: the running clip's gait looped, and a size-5 ball moved in
    MuJoCo only by the clip's own legs (the kicking foot touches it late in its swing, every
    N strides), both projected through V virtual cameras. Prints the replay error (the ball
    that a kinematic copy of the written body moves, against the written ball) and refuses a
    clip above 5 cm mean / 15 cm max.

    A stand-in for real dribbling clips (``mimic2dm extract`` detects the ball in your videos).
    """
    from mimic2dm.characters.dribble_clip import dribble_clip
    from mimic2dm.geometry.virtual import CAMERA_MODES

    check_choice(camera, CAMERA_MODES, "--camera")
    with exit_on(OSError, ValueError, KeyError, prefix=f"{mocap}: "):
        m, d = dribble_clip(mocap, views=views, seed=seed, seconds=seconds, camera=camera,
                            touch_every=touch_every)  # fmt: skip
    save_motion2d(m, out)
    seen = float(m.object_confidence.mean())
    rep = d.info["replay_error_m"]
    console().print(
        f"wrote {out}: {m.num_views} view(s) x {m.num_frames} frames at {m.fps:g} fps; "
        f"{len(d.touches)} touches in {d.info['strides']} strides of the {d.info['kick_foot']} "
        f"foot, ball travel {d.info['ball_travel_ratio']:.0%} of the root's; replay error "
        f"{100 * rep['mean']:.2f} cm mean, {100 * rep['max']:.2f} cm max; ball visible in "
        f"{seen:.0%} of view-frames",
        markup=False,
        soft_wrap=True,
    )


@app.command("corpus")
def corpus(
    shared: Annotated[
        Path | None,
        typer.Option(help="Shared data folder [default: $MIMIC2DM_SHARED or ../shared]."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Corpus config to write [default: conf/data/corpus.yaml]."),
    ] = None,  # fmt: skip
    manifest: Annotated[
        Path | None,
        typer.Option(help="Manifest JSON to write [default: conf/data/corpus_manifest.json]."),
    ] = None,  # fmt: skip
) -> None:
    """Write the tracker's motion corpus (conf/data/corpus.yaml, data=corpus) and its manifest:
    every shared humanoid clip (DeepMimic top level, long/, sie/; CMU walk, run, hop; not the
    two get-up clips), clips over 10 s cut into 10 s windows, with sampling weights, licences
    and 8 evaluation cameras per window (``mimic2dm bench corpus``)."""
    from mimic2dm.motion import corpus as corpus_mod
    from mimic2dm.utils.paths import shared_dir

    out = out or corpus_mod.DEFAULT_YAML
    manifest = manifest or corpus_mod.DEFAULT_MANIFEST
    with exit_on(OSError, ValueError):
        m = corpus_mod.write_corpus(shared or shared_dir(), out, manifest)
    console().print(
        f"wrote {out} and {manifest}: {m['clips_count']} clips, {m['windows_count']} windows, "
        f"{m['minutes']:g} minutes at {m['fps']:g} fps",
        markup=False,
        soft_wrap=True,
    )


@app.command()
def demo(
    out_dir: Annotated[Path, typer.Argument(help="Folder for demo_3d.npz and demo_2d.npz.")],
    seconds: Annotated[float, typer.Option(min=0.5, help="Clip length.")] = 4.0,
    fps: Annotated[float, typer.Option(min=1.0, help="Frame rate.")] = 30.0,
    seed: Annotated[int, typer.Option(help="Camera seed.")] = 0,
) -> None:
    """Write the built-in keyframed humanoid demo clip (3D reference + 1-view 2D clip)."""
    from mimic2dm.characters.demo_clip import make_demo_clip

    m3, m2 = make_demo_clip(seconds=seconds, fps=fps, seed=seed)
    save_motion3d(m3, out_dir / "demo_3d.npz")
    save_motion2d(m2, out_dir / "demo_2d.npz")
    console().print(
        f"wrote {out_dir}/demo_3d.npz and demo_2d.npz ({m2.num_frames} frames)", markup=False
    )


import_cli.register(app)
