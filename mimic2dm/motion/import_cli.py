"""``mimic2dm data import-*`` for datasets users have: Penn Action, BADJA, DeepMimic and BVH.

Registered on the ``data`` app by :func:`register` (called from ``motion/cli.py``). Like the
other importers: bad input prints one line naming the file, the field and the expected
shape, exits 1 and writes nothing (outputs are written atomically after every check).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import numpy as np
import typer

from mimic2dm.motion.format import MotionFormatError, atomic_savez, check_trackable, save_motion2d
from mimic2dm.utils.cli import console, exit_on, refuse

READ_ERRORS = (MotionFormatError, ValueError, KeyError, OSError)
"""What reading an input file raises: reported as one line, exit 1."""


def _say(msg: str) -> None:
    console().print(msg, markup=False, soft_wrap=True)


def parse_size(text: str | None, option: str = "--image-size") -> tuple[int, int] | None:
    """``"1920x1080"`` -> (1920, 1080); anything else is a BadParameter on ``option``."""
    if text is None:
        return None
    w, sep, h = text.lower().partition("x")
    if not sep or not w.isdigit() or not h.isdigit() or int(w) <= 0 or int(h) <= 0:
        refuse(f"{text!r}: expected WxH in pixels, e.g. 1920x1080", option)
    return int(w), int(h)


def write_clip(out: Path, loader: Any, *args: Any, **kwargs: Any) -> None:
    """Load a 2D clip, refuse it unless trackable, save it and print one summary line."""
    with exit_on(*READ_ERRORS):
        m = loader(*args, **kwargs)
        check_trackable(m, args[0])
    save_motion2d(m, out)
    masked = 1.0 - float(m.mask().mean())
    w, h = m.image_size
    _say(
        f"wrote {out}: {m.num_views} view(s) x {m.num_frames} frames at {m.fps:g} fps, "
        f"{m.keypoint_set}, {w}x{h}, {masked:.0%} masked, cameras {m.summary()['cameras']}"
    )


def import_penn(
    src: Annotated[Path, typer.Argument(help="Penn Action clip (.mat).")],
    out: Annotated[Path, typer.Option("--out", help="Output 2D clip (.npz).")],
    fps: Annotated[float, typer.Option(help="Frame rate of the video.")] = 30.0,
) -> None:
    """Penn Action ``.mat`` -> a single-view coco17 clip (head on the nose slot, eyes and ears
    masked, visibility as confidence, image size from ``dimensions``)."""
    from mimic2dm.motion.video2d import load_penn_action

    write_clip(out, load_penn_action, src, fps=fps)


def import_badja(
    src: Annotated[Path, typer.Argument(help="BADJA annotation JSON (e.g. rs_dog.json).")],
    out: Annotated[Path, typer.Option("--out", help="Output 2D clip (.npz).")],
    fps: Annotated[float, typer.Option(help="Frame rate of the video (the file has none).")],
    image_size: Annotated[
        str, typer.Option(help="Video size WxH in pixels (the file has none), e.g. 1920x1080.")
    ],
) -> None:
    """BADJA JSON -> a single-view dog17 clip (mapping in docs/data.md). The frame numbers of
    ``image_path`` define time: frames between annotated ones are kept, all masked."""
    from mimic2dm.motion.video2d import load_badja

    size = parse_size(image_size)
    write_clip(out, load_badja, src, fps=fps, image_size=size)


def _save_mocap(out: Path, arrays: dict[str, np.ndarray], src: Path) -> None:
    """Check the arrays read back as a shared clip (the ``data synth`` reader), then write."""
    import tempfile

    from mimic2dm.characters.clips import load_mocap_keypoints

    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "clip.npz"
        np.savez(probe, **arrays)
        kp = load_mocap_keypoints(probe).keypoints
    if not np.isfinite(kp).all():
        raise MotionFormatError(
            src, "(motion)", "gives non-finite keypoints", "finite joint values"
        )
    atomic_savez(out, arrays)


# options of ``import-deepmimic`` and ``import-bvh`` with long help texts
_CharacterFile = Annotated[Path | None, typer.Option(help="DeepMimic character file [default: the one in a characters/ folder beside the clip (or one up) whose joints fit the frames].")]  # fmt: skip
_DeepMimicFps = Annotated[float | None, typer.Option(help="Output frame rate [default: the file's, 1 / median frame duration].")]  # fmt: skip
_BvhScale = Annotated[float | None, typer.Option(help="Metres per file unit [default: auto, m/cm/mm/inch/CMU unit by the rest leg length].")]  # fmt: skip


def import_deepmimic(
    src: Annotated[
        Path, typer.Argument(help="DeepMimic motion (.txt, JSON with Loop and Frames).")
    ],
    out: Annotated[Path, typer.Option("--out", help="Output mocap clip (.npz).")],
    character_file: _CharacterFile = None,
    fps: _DeepMimicFps = None,
) -> None:
    """DeepMimic humanoid3d / dog3d motion -> the shared mocap layout (cmu_*.npz for the
    humanoid, dog_*.npz for the dog; z-up metres), ready for ``data synth``."""
    from mimic2dm.motion import deepmimic

    with exit_on(*READ_ERRORS):
        if character_file is None:
            character_file = deepmimic.find_character_file(src, deepmimic.frame_width(src))
            if character_file is None:
                raise MotionFormatError(src, "--character-file", "is not given and no single characters/*.txt beside the clip fits its frames", "--character-file PATH")  # fmt: skip
        kind, arrays, info = deepmimic.import_deepmimic(src, character_file, fps)
        _save_mocap(out, arrays, src)
    layout = "cmu_*.npz, --character humanoid" if kind == "humanoid3d" else "dog_*.npz, --character dog"  # fmt: skip
    how = "resampled" if info["resampled"] else "frames kept"
    n = len(arrays.get("root_translation", arrays.get("positions")))
    _say(f"wrote {out}: {kind} ({layout}), {n} frames at {info['fps']:g} fps ({info['source_frames']} in the file, {how}), loop {info['loop']}")  # fmt: skip


def import_bvh(
    src: Annotated[Path, typer.Argument(help="BVH motion file.")],
    out: Annotated[Path, typer.Option("--out", help="Output mocap clip (.npz, cmu_*.npz layout).")],
    scale: _BvhScale = None,
    up: Annotated[str, typer.Option(help="The file's up axis: y (BVH convention) or z.")] = "y",
    fps: Annotated[
        float | None, typer.Option(help="Expected frame rate (checked against Frame Time).")
    ] = None,
) -> None:
    """BVH -> the humanoid's 15 bodies in the cmu_*.npz layout (joint-name map in docs/data.md)."""
    from mimic2dm.characters.humanoid import OFFSETS
    from mimic2dm.motion.bvh import import_bvh as read

    if up not in ("y", "z"):
        refuse(f"{up!r} is not y or z", "--up")
    with exit_on(*READ_ERRORS):
        arrays, info = read(src, np.array(OFFSETS), scale=scale, up=up, fps=fps)
        _save_mocap(out, arrays, src)
    n = len(arrays["root_translation"])
    _say(f"wrote {out}: humanoid (cmu_*.npz, --character humanoid), {n} frames at {info['fps']:g} fps, scale {info['scale']:g} m/unit ({info['unit']})")  # fmt: skip


def register(app: typer.Typer) -> None:
    """Add the import commands of this module to the ``data`` app."""
    app.command("import-penn")(import_penn)
    app.command("import-badja")(import_badja)
    app.command("import-deepmimic")(import_deepmimic)
    app.command("import-bvh")(import_bvh)
