"""Readers of external keypoint data into :class:`Motion2D` / 3D keypoints.

Accepted inputs (details and examples in ``docs/data.md``):

- COCO keypoint JSON (:func:`load_coco_keypoints`): a COCO *results* list
  ``[{image_id, category_id, keypoints: [x, y, score] * K, score, bbox}]`` (what
  mmpose/ViTPose write for COCO evaluation), or a dict with ``images`` and
  ``annotations`` (the frame order comes from ``images``).
- mmpose prediction JSON (:func:`load_mmpose_predictions`): the per-frame list
  ``[{frame_id, instances: [{keypoints: [[x, y], ...], keypoint_scores, bbox, bbox_score}]}]``
  or the demo scripts' ``{"meta_info": ..., "instance_info": [...]}``.
- AIST++ annotations (:func:`load_aist`): ``keypoints2d/<seq>.pkl|npz``,
  ``cameras/mapping.txt`` + ``cameras/<env>.json``, optional ``keypoints3d/<seq>.pkl|npz``.
  AIST++ is y-up and in centimetres; we convert to z-up metres.
Motion-capture clips of ``shared/data/mocap`` need the characters' kinematics and are
read by :mod:`mimic2dm.characters.clips` (``load_mocap_keypoints``).

With several detections in one frame the highest-scoring one is kept; frames without
any detection get NaN keypoints with confidence 0. Scores are clipped to [0, 1].
"""

from __future__ import annotations

import json
import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.spatial.transform import Rotation

from mimic2dm.motion.format import Motion2D, MotionFormatError
from mimic2dm.motion.keypoint_sets import load_keypoint_set

AIST_FPS = 60.0
"""Frame rate of AIST++ annotations."""

AIST_IMAGE_SIZE = (1920, 1080)
"""Image size of every AIST++ video: the size of uncalibrated views (no camera file to read it from)."""

AIST_CM_TO_M = 0.01
"""AIST++ translations and 3D keypoints are in centimetres."""

Y_UP_TO_Z_UP = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])
"""Rotation taking a y-up world (AIST++) to our z-up world: (x, y, z) -> (x, -z, y)."""


def _fail(path, field: str, problem: str, expected: str):
    raise MotionFormatError(path, field, problem, expected)


def _read_json(path: str | os.PathLike) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        _fail(path, "(file)", "does not exist", "an existing JSON file")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        _fail(path, "(file)", f"is not valid JSON ({e})", "a keypoint JSON file")


def _check_rate(path, fps: Any) -> None:
    ok = isinstance(fps, (int, float, np.integer, np.floating)) and not isinstance(fps, bool)
    if not ok or not np.isfinite(fps) or fps <= 0:
        _fail(path, "fps", f"is {fps!r}", "the video's frame rate > 0 (--fps)")


def _finish(path, kp, conf, keypoint_set, fps, image_size, meta, source_format) -> Motion2D:
    """Clip scores, blank frames without detections and build a single-view clip."""
    conf = np.nan_to_num(np.clip(conf, 0.0, 1.0), nan=0.0)
    conf[~np.isfinite(kp).all(-1)] = 0.0
    if image_size is None:
        _fail(
            path,
            "image_size",
            "is unknown (the file has no image sizes)",
            "--image-size WxH (image_size=(width, height)) or width/height in the JSON's 'images'",
        )
    if not (conf > 0).any():
        _fail(path, "keypoints", "are all missing or with score 0", "some detected keypoints")
    m = Motion2D(
        keypoints=kp[None].astype(np.float32),
        confidence=conf[None].astype(np.float32),
        keypoint_set=keypoint_set,
        fps=fps,
        image_size=tuple(int(v) for v in image_size),
        meta={
            "source": str(path),
            "source_format": source_format,
            "random_weights": False,
            **(meta or {}),
        },
    )
    m.validate(path)
    return m


def _instance_array(path, field: str, values: Any, shape: tuple[int, ...], what: str) -> np.ndarray:
    try:
        a = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        a = np.zeros(0)
    if a.size != int(np.prod(shape)):
        _fail(path, field, f"has {a.size} numbers", f"{int(np.prod(shape))} numbers ({what})")
    return a.reshape(shape)


# ----------------------------------------------------------------------------- COCO
def _coco_frames(
    path, data: Any, first_image_id: int | None
) -> tuple[list, dict[Any, int], int, tuple | None]:
    """Annotations, image_id -> frame index, number of frames, image size from ``images``."""
    if isinstance(data, list):
        if not data:
            _fail(path, "(file)", "is an empty list", "a non-empty COCO results list [{image_id, keypoints, score}, ...]")  # fmt: skip
        anns = data
        ids = [a.get("image_id") for a in anns if isinstance(a, dict)]
        if not ids or not all(isinstance(i, int) for i in ids):
            _fail(
                path,
                "image_id",
                "is missing or not an integer",
                "integer image ids (frame numbers) in every result",
            )
        first = min(ids) if first_image_id is None else first_image_id
        frames = {i: i - first for i in set(ids)}
        if min(frames.values()) < 0:
            _fail(
                path, "image_id", f"is below first_image_id={first}", "image ids >= first_image_id"
            )
        return anns, frames, max(frames.values()) + 1, None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("annotations"), list)
        or not isinstance(data.get("images"), list)
    ):
        _fail(
            path,
            "(file)",
            f"is a JSON {type(data).__name__}",
            "a COCO results list or a dict with 'images' and 'annotations'",
        )
    images = data["images"]
    if not images or not all(isinstance(im, dict) and "id" in im for im in images):
        _fail(
            path,
            "images",
            "is empty or an entry lacks 'id'",
            "a list of {id, width, height[, frame_id]}",
        )

    def order(im):
        return im.get("frame_id", im.get("frame_index", im["id"]))

    ids = [im["id"] for im in images]
    if len(set(ids)) != len(ids):
        dup = next(i for n, i in enumerate(ids) if i in ids[:n])
        # a repeated id would leave an empty frame and shift the time line after it
        _fail(path, "images", f"repeat the id {dup!r}", "one entry per image id (one image per frame)")  # fmt: skip
    images = sorted(images, key=order)
    frames = {im["id"]: t for t, im in enumerate(images)}
    sizes = {(im.get("width"), im.get("height")) for im in images} - {(None, None)}
    if len(sizes) > 1:
        _fail(path, "images", f"have several sizes {sorted(sizes)}", "one image size per clip")
    return data["annotations"], frames, len(images), (sizes.pop() if sizes else None)


class _BestPerFrame:
    """Keeps the highest-scoring detection of each of ``T`` frames (NaN / 0 where none)."""

    def __init__(self, T: int, K: int):
        self.kp = np.full((T, K, 2), np.nan)
        self.conf = np.zeros((T, K))
        self.best = np.full(T, -np.inf)

    def offer(self, t: int, score: float, xy: np.ndarray, conf: np.ndarray) -> None:
        if score > self.best[t]:
            self.best[t], self.kp[t], self.conf[t] = score, xy, conf


def _coco_instance(path, i: int, a: Any, K: int, kset: str) -> tuple[float, np.ndarray, np.ndarray]:
    """``(score, xy [K, 2], confidence [K])`` of one COCO annotation / result."""
    if not isinstance(a, dict) or "keypoints" not in a:
        expected = "{image_id, keypoints: [x, y, score] * K, score}"
        _fail(path, f"annotations[{i}]", "has no 'keypoints'", expected)
    what = f"[x, y, score] for {K} keypoints of {kset}"
    trip = _instance_array(path, f"annotations[{i}].keypoints", a["keypoints"], (K, 3), what)
    if "score" in a:
        return float(a["score"]), trip[:, :2], trip[:, 2]
    visible = (trip[:, 2] > 0).astype(float)  # ground truth: COCO visibility flags
    return float(visible.mean()), trip[:, :2], visible


def load_coco_keypoints(
    path: str | os.PathLike,
    *,
    fps: float,
    image_size: tuple[int, int] | None = None,
    keypoint_set: str = "coco17",
    category_id: int | None = None,
    first_image_id: int | None = None,
    meta: dict[str, Any] | None = None,
) -> Motion2D:
    """Read COCO-style keypoint JSON into a single-view :class:`Motion2D`.

    Args:
        path: the JSON file.
        fps: frame rate of the video.
        image_size: ``(width, height)``; required unless the file has an ``images`` list
            with sizes.
        keypoint_set: set of the ``K`` keypoints (``keypoints`` has ``3 K`` numbers).
        category_id: keep only this category (default: any).
        first_image_id: results list only: the image id of frame 0 (default: the
            smallest id). Without an ``images`` list, ``image_id`` is the frame number.
        meta: merged into the clip's ``meta``.

    Returns:
        ``Motion2D`` with ``V = 1``. Annotations without ``score`` (ground truth) use
        the COCO visibility flags: ``v > 0`` -> confidence 1.
    """
    _check_rate(path, fps)
    anns, frames, T, size = _coco_frames(path, _read_json(path), first_image_id)
    K = load_keypoint_set(keypoint_set).num_keypoints
    acc = _BestPerFrame(T, K)
    for i, a in enumerate(anns):
        score, xy, conf = _coco_instance(path, i, a, K, keypoint_set)
        if category_id is not None and a.get("category_id") != category_id:
            continue
        if a.get("image_id") not in frames:
            img = a.get("image_id")
            _fail(path, f"annotations[{i}].image_id", f"is {img!r}", "an id listed in 'images'")
        acc.offer(frames[a["image_id"]], score, xy, conf)
    return _finish(path, acc.kp, acc.conf, keypoint_set, fps, image_size or size, meta, "coco")


# ----------------------------------------------------------------------------- mmpose
def _mmpose_instance(
    path, field: str, inst: Any, K: int, kset: str
) -> tuple[float, np.ndarray, np.ndarray]:
    """``(score, xy [K, 2], scores [K])`` of one mmpose instance; score = bbox_score or mean."""
    if not isinstance(inst, dict) or "keypoints" not in inst or "keypoint_scores" not in inst:
        expected = "{keypoints: [[x, y]] * K, keypoint_scores: [K]}"
        _fail(path, field, "lacks keypoints/keypoint_scores", expected)
    what = f"[x, y] for {K} keypoints of {kset}"
    xy = _instance_array(path, field + ".keypoints", inst["keypoints"], (K, 2), what)
    sc = _instance_array(
        path, field + ".keypoint_scores", inst["keypoint_scores"], (K,), f"{K} scores"
    )
    s = inst.get("bbox_score")
    if isinstance(s, list):
        s = s[0] if s else None
    return (float(s) if s is not None else float(np.nanmean(sc))), xy, sc


def _mmpose_frames(path, data: Any, first_frame_id: int | None) -> tuple[list, list[int]]:
    """The frame list and each entry's frame index (``frame_id - first``)."""
    if isinstance(data, dict) and "instance_info" in data:
        data = data["instance_info"]
    ok = isinstance(data, list) and all(isinstance(f, dict) and "instances" in f for f in data)
    if not ok or not data:
        expected = "a non-empty list [{frame_id, instances: [...]}, ...]"
        _fail(path, "instance_info", "is not a list of {frame_id, instances}", expected)
    ids = [f.get("frame_id", i) for i, f in enumerate(data)]
    if not all(isinstance(i, int) for i in ids):
        _fail(path, "frame_id", "is not an integer", "integer frame ids")
    first = min(ids) if first_frame_id is None else first_frame_id
    for i, fid in enumerate(ids):
        if fid < first:
            _fail(
                path, f"instance_info[{i}].frame_id", f"is {fid}", f"ids >= first_frame_id={first}"
            )
    return data, [fid - first for fid in ids]


def load_mmpose_predictions(
    path: str | os.PathLike,
    *,
    fps: float,
    image_size: tuple[int, int],
    keypoint_set: str = "coco17",
    first_frame_id: int | None = None,
    meta: dict[str, Any] | None = None,
) -> Motion2D:
    """Read mmpose's per-frame prediction JSON into a single-view :class:`Motion2D`.

    Args:
        path: the JSON file: a list ``[{frame_id, instances}]`` or a dict with
            ``instance_info`` holding that list.
        fps: frame rate of the video.
        image_size: ``(width, height)`` of the video.
        keypoint_set: set of the ``K`` keypoints.
        first_frame_id: ``frame_id`` of frame 0 (default: the smallest one); entries
            without ``frame_id`` are numbered by position.
        meta: merged into the clip's ``meta``.

    Returns:
        ``Motion2D`` with ``V = 1``; per frame the instance with the highest
        ``bbox_score`` (else mean keypoint score) is kept.
    """
    _check_rate(path, fps)
    data, frames = _mmpose_frames(path, _read_json(path), first_frame_id)
    K = load_keypoint_set(keypoint_set).num_keypoints
    acc = _BestPerFrame(max(frames) + 1, K)
    for i, (t, frame) in enumerate(zip(frames, data, strict=True)):
        for j, inst in enumerate(frame["instances"] or []):
            field = f"instance_info[{i}].instances[{j}]"
            acc.offer(t, *_mmpose_instance(path, field, inst, K, keypoint_set))
    return _finish(path, acc.kp, acc.conf, keypoint_set, fps, image_size, meta, "mmpose")


def load_keypoints_json(path: str | os.PathLike, **kwargs: Any) -> Motion2D:
    """Dispatch to :func:`load_mmpose_predictions` or :func:`load_coco_keypoints` by the JSON's layout."""
    data = _read_json(path)
    first = data[0] if isinstance(data, list) and data else None
    is_mmpose = (isinstance(data, dict) and "instance_info" in data) or (
        isinstance(first, dict) and "instances" in first
    )
    if is_mmpose:
        kwargs.pop("category_id", None)
        kwargs.pop("first_image_id", None)
        return load_mmpose_predictions(path, **kwargs)
    kwargs.pop("first_frame_id", None)
    return load_coco_keypoints(path, **kwargs)


# ----------------------------------------------------------------------------- AIST++
class _ArrayUnpickler(pickle.Unpickler):
    """Unpickler that only builds numpy arrays and plain containers (no arbitrary code)."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("builtins", "dict"),
        ("builtins", "list"),
        ("collections", "OrderedDict"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
    }

    def find_class(self, module: str, name: str):
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
        return super().find_class(module, name)


def _read_arrays(path: Path) -> dict[str, Any]:
    """A pickle (numpy arrays only) or ``.npz`` file as a dict."""
    try:
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
        with open(path, "rb") as f:
            data = _ArrayUnpickler(f).load()
    except FileNotFoundError:
        _fail(path, "(file)", "does not exist", "an existing .pkl or .npz file")
    except Exception as e:  # noqa: BLE001 - corrupt pickles fail in many ways
        _fail(
            path,
            "(file)",
            f"could not be read ({type(e).__name__}: {e})",
            "a pickle of numpy arrays or an .npz",
        )
    if not isinstance(data, dict):
        _fail(path, "(file)", f"holds a {type(data).__name__}", "a dict of arrays")
    return data


def _find(folder: Path, stem: str) -> Path:
    for ext in (".pkl", ".npz"):
        if (folder / f"{stem}{ext}").is_file():
            return folder / f"{stem}{ext}"
    _fail(
        folder / f"{stem}.pkl", "(file)", "does not exist", f"{stem}.pkl or {stem}.npz in {folder}"
    )


def _aist_env(anno_dir: Path, seq_name: str) -> str | None:
    """The camera setting of ``seq_name``, or None when the tree has no ``cameras/mapping.txt``."""
    mapping = anno_dir / "cameras" / "mapping.txt"
    if not mapping.is_file():
        return None
    for line in mapping.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == seq_name:
            return parts[1]
    _fail(mapping, seq_name, "is not listed", "a line '<sequence> <setting>' for the sequence")


@dataclass
class AistCamera:
    """One AIST++ camera converted to our conventions (z-up metres, OpenCV camera frame)."""

    name: str
    R: np.ndarray  # [3, 3] world-to-camera
    t: np.ndarray  # [3] metres
    intrinsics: np.ndarray  # [4] fx, fy, cx, cy
    size: tuple[int, int]


def load_aist_cameras(path: str | os.PathLike, z_up: bool = True) -> list[AistCamera]:
    """Read an AIST++ camera setting JSON (``[{name, size, matrix, rotation, translation, distortions}]``).

    ``rotation`` is a Rodrigues vector, ``translation`` is in centimetres (converted to
    metres), ``matrix`` the 3x3 intrinsics; distortions are ignored. With ``z_up`` the
    world is turned from AIST++'s y-up to our z-up frame.
    """
    data = _read_json(path)
    if not isinstance(data, list) or not data:
        _fail(path, "(file)", "is not a non-empty list", "a list of camera dicts")
    A = Y_UP_TO_Z_UP if z_up else np.eye(3)
    cams = []
    for i, c in enumerate(data):
        for key in ("name", "size", "matrix", "rotation", "translation"):
            if not isinstance(c, dict) or key not in c:
                _fail(
                    path,
                    f"[{i}].{key}",
                    "is missing",
                    "name, size, matrix, rotation, translation per camera",
                )
        K = _instance_array(path, f"[{i}].matrix", c["matrix"], (3, 3), "3x3 intrinsics")
        rvec = _instance_array(path, f"[{i}].rotation", c["rotation"], (3,), "a Rodrigues vector")
        tvec = _instance_array(
            path, f"[{i}].translation", c["translation"], (3,), "a translation in cm"
        )
        size = _instance_array(path, f"[{i}].size", c["size"], (2,), "(width, height)")
        R = Rotation.from_rotvec(rvec).as_matrix() @ A.T
        cams.append(
            AistCamera(
                str(c["name"]),
                R,
                tvec * AIST_CM_TO_M,
                np.array([K[0, 0], K[1, 1], K[0, 2], K[1, 2]]),
                (int(size[0]), int(size[1])),
            )
        )
    return cams


def _aist_keypoints3d(
    anno_dir: Path, seq_name: str, use_optim: bool, A: np.ndarray, T: int
) -> np.ndarray | None:
    folder = anno_dir / "keypoints3d"
    if not any((folder / f"{seq_name}{e}").is_file() for e in (".pkl", ".npz")):
        return None
    path = _find(folder, seq_name)
    key = "keypoints3d_optim" if use_optim else "keypoints3d"
    data = _read_arrays(path)
    if key not in data:
        _fail(path, key, "is missing", f"{key} [T, 17, 3] (cm)")
    p = np.asarray(data[key], dtype=np.float64)
    if p.shape != (T, 17, 3):
        _fail(path, key, f"has shape {list(p.shape)}", f"[T, 17, 3] = [{T}, 17, 3]")
    return (p @ A.T) * AIST_CM_TO_M


def _aist_keypoints2d(kp_path: Path) -> tuple[np.ndarray, Any]:
    """``keypoints2d [V, T, 17, 3]`` and the ``timestamps`` (or None) of a keypoint file."""
    data = _read_arrays(kp_path)
    if "keypoints2d" not in data:
        _fail(kp_path, "keypoints2d", "is missing", "keypoints2d [V, T, 17, 3]")
    k2 = np.asarray(data["keypoints2d"], dtype=np.float64)
    if k2.ndim != 4 or k2.shape[2:] != (17, 3) or 0 in k2.shape:
        _fail(
            kp_path,
            "keypoints2d",
            f"has shape {list(k2.shape)}",
            "[V, T, 17, 3] (x, y, score) with V, T >= 1",
        )
    if not np.isfinite(k2[..., :2]).any():
        _fail(kp_path, "keypoints2d", "has no finite keypoint", "some detected (non-NaN) keypoints")
    return k2, data.get("timestamps")


def _aist_fps(kp_path: Path, stamps: Any, fps: float | None) -> float:
    """The frame rate: ``fps``, checked against the file's ``timestamps`` (microseconds) if any."""
    if fps is not None and not (np.isfinite(fps) and fps > 0):
        _fail(kp_path, "fps", f"is {fps}", "a frame rate > 0 (--fps)")
    if stamps is None or np.size(stamps) < 2:
        return AIST_FPS if fps is None else float(fps)
    step = np.diff(np.asarray(stamps, dtype=np.float64).ravel())
    if not np.isfinite(step).all() or (step <= 0).any():
        _fail(kp_path, "timestamps", "are not increasing", "increasing frame times (microseconds)")
    rate = 1e6 / float(np.median(step))
    if not 1.0 <= rate <= 1000.0:  # not microseconds (e.g. frame numbers): nothing to check
        return AIST_FPS if fps is None else float(fps)
    if fps is not None and abs(rate - fps) > 0.01 * fps:
        expected = f"--fps to match the timestamps ({rate:.4g} fps) or be left out"
        _fail(kp_path, "timestamps", f"give {rate:.4g} fps, not {fps:g}", expected)
    return AIST_FPS if abs(rate - AIST_FPS) < 0.01 * AIST_FPS else round(rate, 3)


def _aist_select(
    src: Path, names: list[str], sizes: list[tuple], views: list[str] | None
) -> list[int]:
    """Indices of the kept views; they must share one image size."""
    if views is None:
        keep = list(range(len(names)))
    else:
        keep = [names.index(v) for v in views if v in names]
        if len(keep) != len(views):
            _fail(src, "name", f"lacks some of {views}", f"views among {names}")
    if len({sizes[i] for i in keep}) != 1:
        expected = "one image size (select views with views=[...])"
        _fail(src, "size", f"differs across views {sorted({sizes[i] for i in keep})}", expected)
    return keep


def _aist_camera_fields(cams: list[AistCamera], keep: list[int]) -> dict[str, np.ndarray]:
    """Static ``camera_R``, ``camera_t``, ``camera_intrinsics`` (``F = 1``) of the kept views."""
    return {
        "camera_R": np.stack([cams[i].R for i in keep])[:, None].astype(np.float32),
        "camera_t": np.stack([cams[i].t for i in keep])[:, None].astype(np.float32),
        "camera_intrinsics": np.stack([cams[i].intrinsics for i in keep])[:, None].astype(np.float32),
    }  # fmt: skip


def _aist_paths(anno: Path, seq_name: str | None) -> tuple[Path, Path, str]:
    """``(keypoints file, tree root, sequence name)`` of an annotation tree, a folder of
    keypoint files or one keypoint file (whose tree root is above ``keypoints2d/``)."""
    if anno.is_file():
        root = anno.parent.parent if anno.parent.name == "keypoints2d" else anno.parent
        return anno, root, anno.stem
    if seq_name is None:
        _fail(
            anno, "(sequence)", "is not given", "a sequence name, or a keypoints2d .pkl/.npz file"
        )
    sub = anno / "keypoints2d"
    return _find(sub if sub.is_dir() or not anno.is_dir() else anno, seq_name), anno, seq_name


def load_aist(
    anno_dir: str | os.PathLike,
    seq_name: str | None = None,
    *,
    views: list[str] | None = None,
    fps: float | None = None,
    use_optim: bool = False,
    z_up: bool = True,
    image_size: tuple[int, int] | None = None,
    meta: dict[str, Any] | None = None,
) -> Motion2D:
    """Read one AIST++ sequence (all or some views) into a multi-view :class:`Motion2D`.

    Args:
        anno_dir: AIST++ annotation folder (``keypoints2d/``, optional ``cameras/`` and
            ``keypoints3d/``), a folder holding ``<seq>.pkl|npz`` keypoint files, or one
            keypoint file (then ``seq_name`` is its stem).
        seq_name: sequence name, e.g. ``gWA_sFM_cAll_d27_mWA2_ch21``.
        views: camera names to keep (e.g. ``["c01", "c05"]``; default all, file order).
        fps: frame rate; default from the file's ``timestamps`` (microseconds; used when
            they give 1-1000 fps), else 60 (AIST++); a value that disagrees with such
            timestamps by more than 1% is refused.
        use_optim: read ``keypoints3d_optim`` instead of ``keypoints3d``.
        z_up: convert the y-up AIST++ world to z-up (default; our convention).
        image_size: ``(width, height)`` of uncalibrated views (default the dataset's
            1920x1080); calibrated views take the cameras' size.
        meta: merged into the clip's ``meta``.

    Returns:
        ``Motion2D`` with ``V`` views and, when ``cameras/mapping.txt`` and the setting's
        camera file exist, static cameras (metres); otherwise no cameras (views named
        ``c01``, ``c02``... in file order; ``mimic2dm preprocess`` estimates them).
        With ``keypoints3d/<seq>``, 3D ground truth in metres. NaN keypoints get confidence 0.
    """
    kp_path, root, seq_name = _aist_paths(Path(anno_dir), seq_name)
    k2, stamps = _aist_keypoints2d(kp_path)
    fps = _aist_fps(kp_path, stamps, fps)
    env = _aist_env(root, seq_name)
    cam_path = root / "cameras" / f"{env}.json"
    cams = load_aist_cameras(cam_path, z_up) if env is not None and cam_path.is_file() else None
    if cams is not None and len(cams) != k2.shape[0]:
        expected = f"one per camera in {cam_path.name} ({len(cams)})"
        _fail(kp_path, "keypoints2d", f"has {k2.shape[0]} views", expected)
    if cams is None:
        names = [f"c{v + 1:02d}" for v in range(k2.shape[0])]
        sizes = [tuple(image_size or AIST_IMAGE_SIZE)] * len(names)
    else:
        names, sizes = [c.name for c in cams], [c.size for c in cams]
    keep = _aist_select(cam_path if cams else kp_path, names, sizes, views)
    k2 = k2[keep]
    conf = np.nan_to_num(np.clip(k2[..., 2], 0.0, 1.0), nan=0.0)
    finite = np.isfinite(k2[..., :2]).all(-1)
    conf[~finite] = 0.0
    # a missed detection is NaN in the file: keep it out of the pixels (confidence 0 masks it)
    kp = np.where(finite[..., None], k2[..., :2], np.nan)
    A = Y_UP_TO_Z_UP if z_up else np.eye(3)
    info = {"source": str(kp_path), "source_format": "aist++", "random_weights": False}
    cam_fields = {} if cams is None else _aist_camera_fields(cams, keep)
    m = Motion2D(
        keypoints=kp.astype(np.float32),
        confidence=conf.astype(np.float32),
        keypoint_set="coco17",
        fps=fps,
        image_size=sizes[keep[0]],
        keypoints3d=_opt32(_aist_keypoints3d(root, seq_name, use_optim, A, k2.shape[1])),
        meta={**info, "views": [names[i] for i in keep], "calibrated": cams is not None, **(meta or {})},
        **cam_fields,
    )  # fmt: skip
    m.validate(kp_path)
    return m


def _opt32(x: np.ndarray | None) -> np.ndarray | None:
    return None if x is None else x.astype(np.float32)
