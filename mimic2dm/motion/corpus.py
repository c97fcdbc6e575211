"""The tracker's motion corpus: shared humanoid mocap cut into windows, with evaluation cameras.

``mimic2dm data corpus`` scans the shared mocap folder (``data/mocap/deepmimic/`` with its
``long/`` and ``sie/`` sub-folders, and the ``cmu_{walk,run,hop}.npz`` clips) and writes

- ``conf/data/corpus.yaml``: one ``make: {kind: synth, ...}`` recipe per window (grounded,
  30 fps, one static view; ``start`` / ``end`` cut a long clip), for
  ``mimic2dm-train data=corpus``;
- ``conf/data/corpus_manifest.json``: every clip and window with its source, times, frames,
  sampling weight, licence and ``EVAL_CAMERAS`` evaluation cameras drawn from
  ``EVAL_CAMERA_SEED`` (a seed training never uses) within the tracker's camera ranges
  (``conf/task/tracking2d.yaml`` ``camera``), read by ``mimic2dm bench corpus``.

Windows: a clip of at most ``WINDOW_SECONDS`` is one window; a longer one is cut every
``WINDOW_SECONDS``, the remainder is a window of its own when it lasts at least
``MIN_LAST_SECONDS``, else it joins the window before it. Times are seconds of the source
clip (frame ``i`` at ``i / fps``; a clip of ``n`` frames lasts ``(n - 1) / fps``).
"""

from __future__ import annotations

import json
import math
import re
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mimic2dm.geometry.virtual import VirtualCameraConfig
from mimic2dm.motion.format import Motion2D
from mimic2dm.utils.paths import PROJECT_ROOT
from mimic2dm.utils.validate import ConfigError

WINDOW_SECONDS = 10.0
MIN_LAST_SECONDS = 2.0
CORPUS_FPS = 30.0
EVAL_CAMERA_SEED = 1_000_003
"""Seeds the evaluation cameras; training draws its cameras from other seeds."""
EVAL_CAMERAS = 8
LEFT_OUT = ("humanoid3d_getup_facedown", "humanoid3d_getup_faceup")
"""DeepMimic clips the corpus leaves out (getting up from the ground)."""
CMU_CLIPS = ("cmu_walk", "cmu_run", "cmu_hop")
LICENSES = {
    "deepmimic": "MIT (DeepMimic, Peng et al. 2018; deepmimic/LICENSE)",
    "deepmimic/long": "MIT (DeepMimic, Peng et al. 2018; deepmimic/LICENSE)",
    "deepmimic/sie": "CC BY-NC 4.0 (Sony Interactive Entertainment; deepmimic/sie/LICENSE): "
    "non-commercial use only, never shipped",
    "cmu": "BSD-3-Clause (CMU Graphics Lab mocap, retargeted by isaac-sim/IsaacGymEnvs)",
}
"""Licence of each source folder (``mocap/README.md``, ``deepmimic/README.md``)."""
DEFAULT_YAML = PROJECT_ROOT / "conf" / "data" / "corpus.yaml"
DEFAULT_MANIFEST = PROJECT_ROOT / "conf" / "data" / "corpus_manifest.json"
TASK_CONFIG = PROJECT_ROOT / "conf" / "task" / "tracking2d.yaml"
_TIME_EPS = 1e-6


# ----------------------------------------------------------------------------- windows
def window_slice(
    num_frames: int, fps: float, start: Any, end: Any, key: str = "make", names=("start", "end")
) -> slice:
    """The frames of a clip (``num_frames`` at ``fps``) from ``start`` to ``end`` seconds.

    Args:
        start, end: seconds of the clip (None: its first / last frame); frame ``i`` is at
            ``i / fps``, and a frame on a bound is kept.
        key: the recipe the bounds come from (``data.clips[3].make``), named in errors as
            ``{key}.start`` / ``{key}.end``; ``key=""``: the bare ``names``.
        names: what errors call the two bounds (``("--start", "--end")`` on a command line).

    Raises:
        ConfigError: a bound that is not a number or outside ``0 <= start < end <= duration``,
            or a window of fewer than 2 frames, naming the bound.
    """
    k_start, k_end = (f"{key}.{n}" if key else n for n in names)
    duration = (num_frames - 1) / fps
    lo = _seconds(start, k_start, 0.0)
    hi = _seconds(end, k_end, duration)
    if not 0.0 <= lo < duration:
        raise ConfigError(k_start, start, f"seconds with 0 <= start < {duration:g} (the clip's duration)")  # fmt: skip
    if not lo < hi <= duration + 0.5 / fps:
        raise ConfigError(k_end, end, f"seconds with {lo:g} < end <= {duration:g} (start < end <= the clip's duration)")  # fmt: skip
    i0 = math.ceil(lo * fps - _TIME_EPS)
    i1 = min(math.floor(hi * fps + _TIME_EPS), num_frames - 1)
    if i1 - i0 < 1:
        raise ConfigError(k_end, end, f"a window of at least 2 frames ({1 / fps:g} s at {fps:g} fps) after start {lo:g}")  # fmt: skip
    return slice(i0, i1 + 1)


def _seconds(value: Any, key: str, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(key, value, "a finite number of seconds")
    return float(value)


def split_windows(
    duration: float, length: float = WINDOW_SECONDS, min_last: float = MIN_LAST_SECONDS
) -> list[tuple[float, float]]:
    """``(start, end)`` seconds of the windows of a clip lasting ``duration`` seconds.

    A clip of at most ``length`` is one window; longer clips are cut every ``length``, and a
    remainder shorter than ``min_last`` joins the window before it.
    """
    if duration <= length + _TIME_EPS:
        return [(0.0, duration)]
    cuts = [k * length for k in range(int(math.floor(duration / length + _TIME_EPS)) + 1)]
    if duration - cuts[-1] < min_last - _TIME_EPS:
        cuts[-1] = duration
    else:
        cuts.append(duration)
    return [(a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]


def resampled_frames(num_frames: int, src_fps: float, dst_fps: float) -> int:
    """Frames of a ``num_frames`` clip resampled to ``dst_fps`` (:func:`mimic2dm.motion.synth.resample`)."""
    if num_frames == 1 or src_fps == dst_fps:
        return num_frames
    return int(np.floor((num_frames - 1) * dst_fps / src_fps + 1e-9)) + 1


# ----------------------------------------------------------------------------- cameras
def task_camera_config(path: str | Path = TASK_CONFIG) -> VirtualCameraConfig:
    """The tracker's camera ranges: the ``camera`` section of ``conf/task/tracking2d.yaml``."""
    from omegaconf import OmegaConf

    cam = OmegaConf.to_container(OmegaConf.load(path).camera, resolve=True)
    return VirtualCameraConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in cam.items()})  # fmt: skip


def evaluation_cameras(
    name: str,
    config: VirtualCameraConfig | None = None,
    n: int = EVAL_CAMERAS,
    seed: int = EVAL_CAMERA_SEED,
) -> list[dict[str, Any]]:
    """``n`` static cameras for the window ``name``, drawn uniformly within ``config``'s ranges
    from ``seed`` and the name (a window keeps its cameras when others are added).

    Returns:
        ``{azimuth_deg, elevation_deg, distance_m, focal_px, static: True}`` per camera; the
        distance is where a static camera starts: it moves back until the window's root path
        stays inside the image margin (:func:`mimic2dm.geometry.virtual.sample_camera`).
    """
    cfg = config or VirtualCameraConfig()
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    ranges = (cfg.azimuth_range_deg, cfg.elevation_range_deg, cfg.distance_range, cfg.focal_range)
    out = []
    for _ in range(n):
        az, el, dist, focal = (float(rng.uniform(lo, hi)) for lo, hi in ranges)
        out.append({"azimuth_deg": round(az, 3), "elevation_deg": round(el, 3),
                    "distance_m": round(dist, 4), "focal_px": round(focal, 2), "static": True})  # fmt: skip
    return out


def fixed_camera_views(
    keypoints3d: np.ndarray,
    keypoint_set: str,
    fps: float,
    cameras: Sequence[dict[str, Any]],
    config: VirtualCameraConfig | None = None,
    labels: dict[str, str] | None = None,
    meta: dict[str, Any] | None = None,
) -> Motion2D:
    """A clip seen through the given static cameras (:func:`evaluation_cameras`), one view each.

    Each view is :func:`mimic2dm.motion.synth.synthesize_views` with every camera range
    narrowed to the camera's value (image size and margin from ``config``).
    """
    from dataclasses import replace

    from mimic2dm.motion.synth import synthesize_views

    cfg = config or VirtualCameraConfig()
    views = []
    for cam in cameras:
        one = replace(cfg, azimuth_range_deg=(cam["azimuth_deg"],) * 2,
                      elevation_range_deg=(cam["elevation_deg"],) * 2,
                      distance_range=(cam["distance_m"],) * 2, focal_range=(cam["focal_px"],) * 2)  # fmt: skip
        views.append(synthesize_views(keypoints3d, keypoint_set, fps, camera="static",
                                      camera_config=one, labels=labels, meta=meta))  # fmt: skip
    first = views[0]
    stacked = {k: np.concatenate([getattr(v, k) for v in views]) for k in
               ("keypoints", "confidence", "camera_R", "camera_t", "camera_intrinsics")}  # fmt: skip
    return Motion2D(keypoint_set=first.keypoint_set, fps=first.fps, image_size=first.image_size,
                    keypoints3d=first.keypoints3d, labels=first.labels,
                    meta={**first.meta, "cameras": list(cameras)}, **stacked)  # fmt: skip


# ----------------------------------------------------------------------------- the corpus
def clip_frames(path: Path) -> tuple[int, float]:
    """``(frames, fps)`` of a mocap clip as :func:`mimic2dm.characters.clips.load_mocap_keypoints`
    reads it: a DeepMimic ``.txt`` at its own rate (imported), a ``cmu_*.npz`` as stored."""
    if path.suffix == ".txt":
        from mimic2dm.motion import deepmimic

        char = deepmimic.find_character_file(path, deepmimic.frame_width(path))
        if char is None:
            raise ValueError(f"{path}: no single characters/*.txt beside it (or one up) fits its frames")  # fmt: skip
        kind, arrays, info = deepmimic.import_deepmimic(path, char)
        if kind != "humanoid3d":
            raise ValueError(f"{path}: a {kind} motion, expected humanoid3d")
        return len(arrays["root_translation"]), float(info["fps"])
    with np.load(path) as z:
        return len(z["root_translation"]), float(z["fps"])


def skill_of(stem: str) -> str:
    """The skill label of a corpus clip: ``sie_humanoid3d_run_left03`` -> ``run_left``,
    ``humanoid3d_long_walk1_mirror`` -> ``walk``, ``cmu_hop`` -> ``hop``."""
    s = re.sub(r"^(sie_)?(humanoid3d_)?(cmu_)?(long_)?", "", stem)
    return re.sub(r"\d+$", "", s.removesuffix("_mirror")) or stem


def corpus_sources(shared: Path) -> list[tuple[Path, str]]:
    """``(file, licence folder)`` of every corpus clip under ``shared/data/mocap``, in a fixed
    order: the DeepMimic humanoid clips (top level, ``long/``, ``sie/``), then the CMU clips.

    Raises:
        FileNotFoundError: a folder or CMU clip is missing.
    """
    mocap = shared / "data" / "mocap"
    out = []
    for sub, folder in (("", "deepmimic"), ("long", "deepmimic/long"), ("sie", "deepmimic/sie")):
        d = mocap / "deepmimic" / sub
        if not d.is_dir():
            raise FileNotFoundError(f"corpus: {d} is not a folder (the shared DeepMimic clips)")
        out += [(p, folder) for p in sorted(d.glob("*humanoid3d_*.txt")) if p.stem not in LEFT_OUT]
    for name in CMU_CLIPS:
        p = mocap / f"{name}.npz"
        if not p.is_file():
            raise FileNotFoundError(f"corpus: {p} does not exist (a shared CMU clip)")
        out.append((p, "cmu"))
    return out


def _fmt(t: float) -> str:
    return f"{round(t, 2):g}"


def build_corpus(shared: Path, camera_config: VirtualCameraConfig | None = None) -> dict[str, Any]:
    """The manifest of the corpus under ``shared`` (see the module docstring).

    Returns:
        ``{fps, window_seconds, ..., clips: [{name, source, windows: [...]}], windows: N, ...}``.
    """
    cfg = camera_config or task_camera_config()
    mocap = shared / "data" / "mocap"
    clips, names = [], set()
    for path, folder in corpus_sources(shared):
        if path.stem in names:
            raise ValueError(f"corpus: two clips named {path.stem} ({path})")
        names.add(path.stem)
        n, fps = clip_frames(path)
        duration = (n - 1) / fps
        cuts = split_windows(duration)
        windows = []
        for k, (a, b) in enumerate(cuts):
            name = path.stem if len(cuts) == 1 else f"{path.stem}@{_fmt(a)}-{_fmt(b)}"
            sl = window_slice(n, fps, a if k else None, b if k < len(cuts) - 1 else None, name)
            src_frames = sl.stop - sl.start
            windows.append({
                "name": name, "file": f"corpus/{name}.npz",
                "start_s": round(a, 4), "end_s": round(b, 4),
                "cut": {"start": a if k else None, "end": b if k < len(cuts) - 1 else None},
                "duration_s": round((src_frames - 1) / fps, 4),
                "frames": resampled_frames(src_frames, fps, CORPUS_FPS),
                "eval_cameras": evaluation_cameras(name, cfg),
            })  # fmt: skip
        clips.append({"name": path.stem, "source": path.relative_to(mocap).as_posix(),
                      "license_folder": folder, "license": LICENSES[folder],
                      "source_fps": fps, "source_frames": n, "duration_s": round(duration, 4),
                      "skill": skill_of(path.stem), "windows": windows})  # fmt: skip
    total = sum(w["frames"] for c in clips for w in c["windows"])
    for c in clips:
        for w in c["windows"]:
            w["weight"] = round(w["frames"] / total, 6)
    return {
        "fps": CORPUS_FPS,
        "window_seconds": WINDOW_SECONDS,
        "min_last_window_seconds": MIN_LAST_SECONDS,
        "left_out": list(LEFT_OUT),
        "eval_camera_seed": EVAL_CAMERA_SEED,
        "eval_camera_ranges": {
            k: list(getattr(cfg, k))
            for k in ("azimuth_range_deg", "elevation_range_deg", "distance_range", "focal_range")
        },  # fmt: skip
        "image_size": [cfg.width, cfg.height],
        "clips_count": len(clips),
        "windows_count": sum(len(c["windows"]) for c in clips),
        "frames": total,
        "minutes": round(total / CORPUS_FPS / 60.0, 2),
        "licenses": {
            k: v for k, v in LICENSES.items() if any(c["license_folder"] == k for c in clips)
        },  # fmt: skip
        "clips": clips,
    }


def manifest_windows(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """Every window of a manifest with its clip's ``source``, ``skill`` and ``license_folder``."""
    return [{**w, "clip": c["name"], "source": c["source"], "skill": c["skill"],
             "license_folder": c["license_folder"]} for c in manifest["clips"] for w in c["windows"]]  # fmt: skip


def corpus_yaml(manifest: dict[str, Any]) -> str:
    """``conf/data/corpus.yaml`` of a manifest: one synth recipe per window."""
    head = [
        "# Generated by `mimic2dm data corpus` (mimic2dm/motion/corpus.py): do not edit by hand.",
        f"# {manifest['clips_count']} shared humanoid clips (DeepMimic top level, long/, sie/; CMU walk, run, hop)",  # fmt: skip
        f"# in {manifest['windows_count']} windows of at most {manifest['window_seconds']:g} s, "
        f"{manifest['minutes']:g} minutes at {manifest['fps']:g} fps;",
        "# manifest (sources, windows, weights, licences, evaluation cameras): conf/data/corpus_manifest.json.",  # fmt: skip
        "# sie/ clips are CC BY-NC 4.0 (non-commercial). Train with cameras drawn per episode:",
        "#   mimic2dm-train data=corpus task.view_mode=virtual ...",
        "# and a part of it (window names, fnmatch patterns; e.g. experts: a Hydra sweep over groups):",
        "#   mimic2dm-train -m task=tracking3d data=corpus 'data.select=[humanoid3d_walk*,cmu_walk],[sie_*_run_left*]'",
        "select: null",
        "clips:",
    ]
    lines = []
    for w in manifest_windows(manifest):
        make = {"kind": "synth", "mocap": "${shared_dir}/data/mocap/" + w["source"]}
        if w["cut"]["start"] is not None:
            make["start"] = w["cut"]["start"]
        if w["cut"]["end"] is not None:
            make["end"] = w["cut"]["end"]
        make |= {"views": 1, "camera": "static", "seed": zlib.crc32(w["name"].encode()) % 1_000_000,
                 "fps": CORPUS_FPS, "ground": True}  # fmt: skip
        labels = {"window": w["name"], "skill": w["skill"], "license": w["license_folder"]}
        flow = ", ".join(f"{k}: {_scalar(v)}" for k, v in make.items())
        flow += ", labels: {" + ", ".join(f"{k}: {_scalar(v)}" for k, v in labels.items()) + "}"
        lines += [f"  - file: {_scalar(w['file'])}", f"    make: {{{flow}}}"]
    return "\n".join(head + lines) + "\n"


def _scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return json.dumps(v) if isinstance(v, str) else str(v)


def write_corpus(
    shared: Path, out: Path = DEFAULT_YAML, manifest_out: Path = DEFAULT_MANIFEST
) -> dict[str, Any]:
    """Scan ``shared`` and write the corpus config ``out`` and its manifest ``manifest_out``."""
    manifest = build_corpus(shared)
    out.parent.mkdir(parents=True, exist_ok=True)
    manifest_out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(corpus_yaml(manifest), encoding="utf-8")
    manifest_out.write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
    return manifest
