"""The ``data`` config group: 2D-motion files to track, made on demand.

Each entry of ``data.clips`` is a path (``/abs/clip.npz``, the same as ``{file: /abs/clip.npz}``)
or a mapping that names a ``file``; when that file is absent and the entry has a ``make``
recipe, the file is written first:

- ``{kind: demo, seconds, fps, seed}``: the project's keyframed demo clip
  (:func:`mimic2dm.characters.demo_clip.make_demo_clip`);
- ``{kind: synth, mocap, views, camera, seed, fps[, start][, end][, loops | seconds][, ground]}``:
  a 3D mocap clip (``cmu_*.npz``, ``dog_*.npz``, a DeepMimic ``.txt`` with its character file
  beside it, a Motion3D file), cut to ``start``..``end`` seconds of the source clip (before
  anything else; either may be left out), its gait cycle looped ``loops`` times or to
  ``seconds``; with ``ground: true`` first lifted so that its feet are not below the character's own,
  :func:`mimic2dm.characters.feet.ground_keypoints`) projected through virtual cameras (what
  ``mimic2dm data synth`` does);
- ``{kind: dribble, mocap, views, camera, seed, seconds}``: a synthetic dribble (a looped
  run or walk with a simulated ball; what ``mimic2dm data dribble`` does);
- ``{kind: aist, anno_dir, split, one_random_view, seed}``: a folder ``file`` with one
  clip per sequence of an AIST++ split (``mimic2dm data import-aist --split``).
  A folder entry stands for the ``*.npz`` clips in it.

Relative ``file`` paths live under ``RUN_DIR/data``; relative ``mocap`` paths are taken
from the project root.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from mimic2dm.utils.validate import ConfigError

log = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _make_demo(out: Path, recipe: Mapping, key: str = "make") -> None:
    from mimic2dm.characters.demo_clip import make_demo_clip
    from mimic2dm.motion.format import save_motion2d

    _, m2 = make_demo_clip(seconds=float(recipe.get("seconds", 4.0)), fps=float(recipe.get("fps", 30.0)),
                           seed=int(recipe.get("seed", 0)))  # fmt: skip
    save_motion2d(m2, out)


def synth_motion(recipe: Mapping, key: str = "make"):
    """The 3D motion of a ``synth`` recipe before it is projected: the clip ``mocap`` cut to
    ``start``..``end``, grounded, looped and resampled as the recipe says.

    Returns:
        ``(clip, keypoints [T, K, 3], object3d [T, 3] | None, fps, meta)``: the clip read
        (:func:`mimic2dm.characters.clips.load_mocap_keypoints`), the motion, and what each
        step did (``source``, ``window_s``, ``ground_lift_m``...).

    Raises:
        ConfigError: ``start`` / ``end`` out of range, naming ``{key}.start`` / ``{key}.end``.
    """
    from mimic2dm.characters.clips import load_mocap_keypoints
    from mimic2dm.motion.synth import resample

    src = Path(str(recipe["mocap"]))
    src = src if src.is_absolute() else PROJECT_ROOT / src
    clip = load_mocap_keypoints(src)
    kp, rate = clip.keypoints, clip.fps
    obj = clip.object3d
    meta = {"source": str(src), "character": clip.character, "source_fps": clip.fps}
    if recipe.get("start") is not None or recipe.get("end") is not None:
        from mimic2dm.motion.corpus import window_slice

        cut = window_slice(len(kp), rate, recipe.get("start"), recipe.get("end"), key)
        kp, obj = kp[cut], None if obj is None else obj[cut]
        meta["window_s"] = [cut.start / rate, (cut.stop - 1) / rate]
    if recipe.get("ground"):
        from mimic2dm.characters.feet import ground_keypoints

        kp, meta["ground_lift_m"] = ground_keypoints(kp, clip.character)
        log.info("%s: lifted by %.3f m so that its feet are not below the %s's", src.name, meta["ground_lift_m"], clip.character)  # fmt: skip
    if recipe.get("loops") or recipe.get("seconds"):  # repeat the gait cycle (motion/looping.py)
        from mimic2dm.motion.looping import loop_keypoints

        kp, obj, _ = loop_keypoints(kp, clip.keypoint_set, rate, loops=recipe.get("loops"), seconds=recipe.get("seconds"), object3d=obj)  # fmt: skip
    if recipe.get("fps"):
        kp, obj, rate = resample(kp, clip.fps, float(recipe["fps"])), None if obj is None else resample(obj, clip.fps, float(recipe["fps"])), float(recipe["fps"])  # fmt: skip
    return clip, kp, obj, rate, meta


def _make_synth(out: Path, recipe: Mapping, key: str = "make") -> None:
    from mimic2dm.characters.clips import clip_skill
    from mimic2dm.motion.format import save_motion2d
    from mimic2dm.motion.synth import synthesize_views

    clip, kp, obj, rate, meta = synth_motion(recipe, key)
    m = synthesize_views(kp, clip.keypoint_set, rate, num_views=int(recipe.get("views", 1)),
                         camera=str(recipe.get("camera", "static")), seed=int(recipe.get("seed", 0)),
                         object3d=obj, meta=meta,
                         labels=dict(recipe.get("labels") or {"skill": clip_skill(Path(meta["source"]).stem)}))  # fmt: skip
    save_motion2d(m, out)


def _make_aist(out: Path, recipe: Mapping, key: str = "make") -> None:
    from mimic2dm.motion.aist import import_split

    seed = int(recipe.get("seed", 0)) if recipe.get("one_random_view", True) else None
    import_split(
        str(recipe["anno_dir"]), str(recipe.get("split", "train")), out, one_view_seed=seed
    )


def _make_dribble(out: Path, recipe: Mapping, key: str = "make") -> None:
    from mimic2dm.characters.dribble_clip import dribble_clip
    from mimic2dm.motion.format import save_motion2d

    src = Path(str(recipe["mocap"]))
    src = src if src.is_absolute() else PROJECT_ROOT / src
    try:
        m, _ = dribble_clip(src, views=int(recipe.get("views", 1)), seed=int(recipe.get("seed", 0)),
                            seconds=float(recipe.get("seconds", 10.0)),
                            camera=str(recipe.get("camera", "tracking")),
                            touch_every=int(recipe.get("touch_every", 1)))  # fmt: skip
    except (OSError, ValueError, KeyError) as e:
        raise ValueError(f"data: make.kind dribble failed for {src} ({e})") from None
    save_motion2d(m, out)


MAKERS = {"demo": _make_demo, "synth": _make_synth, "aist": _make_aist, "dribble": _make_dribble}


def clip_entries(data_cfg: Mapping) -> list[dict]:
    """The entries of ``data.clips`` as ``{file, make?}`` dicts (a plain path is ``{file: path}``).

    Raises:
        ConfigError: no clips, an entry that is neither a path nor a mapping, or a mapping
            without ``file`` (naming ``data.clips[i]``).
    """
    clips = list(data_cfg.get("clips") or [])
    if not clips:
        raise ConfigError("data.clips", [], "at least one 2D-motion file or recipe")
    out = []
    for i, entry in enumerate(clips):
        if isinstance(entry, str | Path):
            entry = {"file": str(entry)}
        elif not isinstance(entry, Mapping):
            raise ConfigError(
                f"data.clips[{i}]", entry, "a 2D-motion file path or a mapping {file, make?}"
            )
        elif not entry.get("file"):
            raise ConfigError(
                f"data.clips[{i}].file", entry.get("file"), "a 2D-motion file path (or a folder)"
            )
        out.append(dict(entry))
    return select_entries(out, data_cfg.get("select"))


def entry_name(entry: Mapping) -> str:
    """A ``data.clips`` entry's name: its recipe's ``labels.window`` (the corpus's window
    names), else its file's stem."""
    labels = (entry.get("make") or {}).get("labels") or {}
    return str(labels.get("window") or Path(str(entry["file"])).stem)


def select_entries(entries: list[dict], patterns) -> list[dict]:
    """The entries whose :func:`entry_name` matches one of ``patterns`` (``data.select``:
    fnmatch patterns; None keeps all).

    Raises:
        ConfigError: a pattern that matches no entry (naming it and a few names).
    """
    if patterns is None:
        return entries
    from fnmatch import fnmatchcase

    patterns = [patterns] if isinstance(patterns, str) else [str(p) for p in patterns]
    names = [entry_name(e) for e in entries]
    for p in patterns:
        if not any(fnmatchcase(n, p) for n in names):
            raise ConfigError("data.select", patterns, f"patterns that each match a clip; {p!r} matches none of the "
                              f"{len(names)} ({', '.join(names[:5])}{', ...' if len(names) > 5 else ''})")  # fmt: skip
    return [
        e for e, n in zip(entries, names, strict=True) if any(fnmatchcase(n, p) for p in patterns)
    ]


def prepare_data(data_cfg: Mapping, run_dir: str | Path) -> list[str]:
    """Resolve (and, where needed, make) the 2D-motion files of the ``data`` group.

    Args:
        data_cfg: the ``data`` group (``clips: [path | {file, make?}]``).
        run_dir: the run directory.

    Returns:
        Absolute paths of the files, in config order.

    Raises:
        FileNotFoundError: a file is missing and has no ``make`` recipe.
        ConfigError: no clips or a malformed entry (:func:`clip_entries`).
        ValueError: unknown recipe kind.
        ConfigError: a recipe value out of range (naming ``data.clips[i].make.<field>``).
    """
    out = []
    for i, entry in enumerate(clip_entries(data_cfg)):
        path = Path(str(entry["file"]))
        path = path if path.is_absolute() else Path(run_dir) / "data" / path
        recipe = entry.get("make")
        if not path.exists():
            if not recipe:
                raise FileNotFoundError(
                    f"data: {path} does not exist and the entry has no 'make' recipe"
                )
            kind = str(recipe.get("kind"))
            if kind not in MAKERS:
                raise ValueError(f"data: make.kind {kind!r} is not one of {', '.join(MAKERS)}")
            path.parent.mkdir(parents=True, exist_ok=True)
            MAKERS[kind](path, recipe, key=f"data.clips[{i}].make")
            log.info("made %s (%s)", path, kind)
        # a folder (e.g. an AIST++ split) stands for its clips
        out.extend(
            str(p.resolve()) for p in (sorted(path.glob("*.npz")) if path.is_dir() else [path])
        )
    return out
