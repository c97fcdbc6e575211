"""Readers of annotated 2D keypoint datasets: Penn Action (``.mat``) and BADJA (JSON).

- Penn Action (:func:`load_penn_action`): one MATLAB file per clip with ``x``, ``y``,
  ``visibility`` ``[T, 13]``, ``dimensions`` (height, width, frames) and ``nframes``.
  Its 13 joints are COCO-17 slots 5-16 plus the head, which goes onto the nose slot; the
  eyes and ears are masked (confidence 0). Visibility is the confidence (1 or 0).
- BADJA (:func:`load_badja`): a JSON list of annotated frames ``{joints [37, 2] (row, col),
  visibility [37], image_path}``, mapped onto ``dog17`` by :data:`BADJA_TO_DOG17`; the
  dog17 keypoints BADJA does not annotate are masked. The frame number in each
  ``image_path`` places the entry on the time line: frames between annotated ones are
  kept, with every keypoint masked, so the clip's time runs at the video's frame rate.

Both are single-view clips without cameras (``mimic2dm preprocess`` estimates them).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from mimic2dm.motion.format import Motion2D, MotionFormatError
from mimic2dm.motion.keypoint_sets import COCO17, DOG17
from mimic2dm.motion.loaders import _read_json

PENN_FPS = 30.0
"""Penn Action's videos are about 30 fps (the files do not say)."""

PENN_JOINTS = (
    "head", "left_shoulder", "right_shoulder", "left_elbow", "right_elbow", "left_wrist",
    "right_wrist", "left_hip", "right_hip", "left_knee", "right_knee", "left_ankle", "right_ankle",
)  # fmt: skip
"""Penn Action's joint order."""

PENN_TO_COCO17 = (0, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16)
"""COCO-17 slot of each Penn Action joint: the head stands in for the nose."""

BADJA_NUM_JOINTS = 37

BADJA_TO_DOG17: dict[str, int | None] = {
    "left_eye": None, "right_eye": None,
    "nose": 33,  # nose tip
    "neck": 15,  # neck_lower
    "root_of_tail": 25,  # tail_0
    "left_shoulder": None,  # upper_left_0 is not annotated
    "left_elbow": 12,  # upper_left_1
    "left_front_paw": 14,  # upper_left_3
    "right_shoulder": None,  # upper_right_0 is not annotated
    "right_elbow": 8,  # upper_right_1
    "right_front_paw": 10,  # upper_right_3
    "left_hip": None,  # lower_left_0 is not annotated
    "left_knee": 22,  # lower_left_1 (stifle)
    "left_back_paw": 24,  # lower_left_3
    "right_hip": None,  # lower_right_0 is not annotated
    "right_knee": 18,  # lower_right_1 (stifle)
    "right_back_paw": 20,  # lower_right_3
}  # fmt: skip
"""dog17 keypoint -> BADJA joint slot (``joint_catalog.py``: 0-32 SMAL joints, 33 nose tip,
35/36 ears); None: BADJA has no annotation there, the keypoint is masked."""


def _fail(path, field: str, problem: str, expected: str):
    raise MotionFormatError(path, field, problem, expected)


def _check_fps(path, fps: float, option: str = "--fps") -> float:
    if not (isinstance(fps, (int, float)) and np.isfinite(fps) and fps > 0):
        _fail(path, "fps", f"is {fps}", f"a frame rate > 0 ({option})")
    return float(fps)


def _clip(path, kp, conf, kset, fps, size, meta, fmt) -> Motion2D:
    """A single-view clip; refuses one whose keypoints are all masked."""
    finite = np.isfinite(kp).all(-1)
    conf = np.where(finite, np.nan_to_num(np.clip(conf, 0.0, 1.0), nan=0.0), 0.0)
    if not (conf > 0).any():
        _fail(path, "keypoints", "are all missing or invisible", "some visible keypoints")
    kp = np.where(finite[..., None], kp, np.nan)
    m = Motion2D(
        keypoints=kp[None].astype(np.float32),
        confidence=conf[None].astype(np.float32),
        keypoint_set=kset,
        fps=fps,
        image_size=tuple(int(v) for v in size),
        meta={"source": str(path), "source_format": fmt, "random_weights": False, **(meta or {})},
    )
    m.validate(path)
    return m


# ----------------------------------------------------------------------------- Penn Action
def _read_mat(path: Path) -> dict[str, Any]:
    import scipy.io

    if not path.is_file():
        _fail(path, "(file)", "does not exist", "a Penn Action .mat file")
    try:
        return scipy.io.loadmat(path)
    except Exception as e:  # noqa: BLE001 - truncated/corrupt MATLAB files fail in many ways
        _fail(path, "(file)", f"could not be read ({type(e).__name__}: {e})", "a MATLAB .mat file (scipy.io.loadmat)")  # fmt: skip


def _mat_array(path, data: dict, name: str, shape: tuple, what: str) -> np.ndarray:
    """A numeric field of shape ``shape`` (``None``: any size >= 1)."""
    if name not in data:
        _fail(path, name, "is missing", what)
    try:
        a = np.asarray(data[name], dtype=np.float64)
    except (TypeError, ValueError):
        _fail(path, name, f"is not numeric ({np.asarray(data[name]).dtype})", what)
    if a.ndim != len(shape) or any(s is not None and s != n for s, n in zip(shape, a.shape, strict=True)) or 0 in a.shape:  # fmt: skip
        _fail(path, name, f"has shape {list(a.shape)}", what)
    return a


def _mat_str(data: dict, name: str) -> str | None:
    v = np.asarray(data.get(name, [])).ravel()
    return str(v[0]) if v.size and isinstance(v[0], str) else None


def load_penn_action(
    path: str | os.PathLike, *, fps: float = PENN_FPS, meta: dict[str, Any] | None = None
) -> Motion2D:
    """Read one Penn Action clip (``NNNN.mat``) into a single-view ``coco17`` :class:`Motion2D`.

    Args:
        path: the ``.mat`` file.
        fps: frame rate of the video (default 30; the files have none).
        meta: merged into the clip's ``meta`` (``action`` and ``pose`` are added from the file).

    Returns:
        ``Motion2D`` (V = 1, image size from ``dimensions``): the 13 joints on their COCO-17
        slots (head on the nose), eyes and ears NaN with confidence 0, visibility as confidence.

    Raises:
        MotionFormatError: naming the file and the field (shapes, frame counts, sizes).
    """
    path = Path(path)
    fps = _check_fps(path, fps)
    data = _read_mat(path)
    x = _mat_array(path, data, "x", (None, 13), "[T, 13] pixel columns (13 Penn Action joints)")
    T = x.shape[0]
    y = _mat_array(path, data, "y", (T, 13), f"[T, 13] = [{T}, 13] pixel rows like 'x'")
    vis = _mat_array(path, data, "visibility", (T, 13), f"[T, 13] = [{T}, 13] flags like 'x'")
    dims = _mat_array(path, data, "dimensions", (None, None), "(height, width, frames)").ravel()
    if dims.size != 3 or (dims[:2] <= 0).any():
        _fail(path, "dimensions", f"is {dims.tolist()}", "(height, width, frames) with height, width > 0")  # fmt: skip
    if int(dims[2]) != T:
        _fail(path, "dimensions", f"says {int(dims[2])} frames but 'x' has {T}", f"frames = {T} (the rows of x, y, visibility)")  # fmt: skip
    if "nframes" in data:
        n = int(_mat_array(path, data, "nframes", (None, None), "the frame count").ravel()[0])
        if n % 256 != T % 256:  # a uint8 nframes wraps above 255 frames
            _fail(path, "nframes", f"is {n} but 'x' has {T} rows", f"nframes = {T}")
    kp = np.full((T, COCO17.num_keypoints, 2), np.nan)
    conf = np.zeros((T, COCO17.num_keypoints))
    kp[:, PENN_TO_COCO17] = np.stack([x, y], axis=-1)
    conf[:, PENN_TO_COCO17] = (vis > 0).astype(np.float64)
    info = {"action": _mat_str(data, "action"), "pose": _mat_str(data, "pose")}
    info = {k: v for k, v in info.items() if v is not None} | (meta or {})
    return _clip(path, kp, conf, "coco17", fps, (dims[1], dims[0]), info, "penn_action")


# ----------------------------------------------------------------------------- BADJA
def _frame_number(path, i: int, entry: dict) -> int:
    """The video frame of a BADJA entry: the last number in its ``image_path``'s file name."""
    name = entry.get("image_path")
    digits = re.findall(r"\d+", Path(name).stem) if isinstance(name, str) else []
    if not digits:
        _fail(path, f"[{i}].image_path", f"is {name!r}", "an image file name with its frame number, e.g. .../00013.jpg")  # fmt: skip
    return int(digits[-1])


def _badja_entry(path, i: int, entry: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(xy [37, 2], visibility [37])`` of one entry (joints are stored (row, col))."""
    if not isinstance(entry, dict) or "joints" not in entry or "visibility" not in entry:
        _fail(path, f"[{i}]", "lacks 'joints' or 'visibility'", "{joints [37, 2], visibility [37], image_path}")  # fmt: skip
    try:
        rc = np.asarray(entry["joints"], dtype=np.float64)
        vis = np.asarray(entry["visibility"], dtype=np.float64)
    except (TypeError, ValueError):
        _fail(path, f"[{i}].joints", "is not numeric", f"[{BADJA_NUM_JOINTS}, 2] (row, col) pixels")
    if rc.shape != (BADJA_NUM_JOINTS, 2):
        _fail(path, f"[{i}].joints", f"has shape {list(rc.shape)}", f"[{BADJA_NUM_JOINTS}, 2] (row, col) pixels")  # fmt: skip
    if vis.shape != (BADJA_NUM_JOINTS,):
        _fail(path, f"[{i}].visibility", f"has shape {list(vis.shape)}", f"[{BADJA_NUM_JOINTS}] flags")  # fmt: skip
    return rc[:, ::-1], vis


def load_badja(
    path: str | os.PathLike,
    *,
    fps: float,
    image_size: tuple[int, int],
    meta: dict[str, Any] | None = None,
) -> Motion2D:
    """Read a BADJA annotation JSON into a single-view ``dog17`` :class:`Motion2D`.

    Args:
        path: the JSON file (a list of annotated frames).
        fps: frame rate of the video (the files have none).
        image_size: ``(width, height)`` of the video (the files have none).
        meta: merged into the clip's ``meta`` (``annotated_frames``, the video frame numbers,
            is added).

    Returns:
        ``Motion2D`` (V = 1) spanning the first to the last annotated video frame: frame
        ``n - first`` holds the entry whose ``image_path`` names frame ``n``; frames without
        an entry are masked. Keypoints come from :data:`BADJA_TO_DOG17`; visibility is the
        confidence.

    Raises:
        MotionFormatError: naming the file and the entry's field.
    """
    fps = _check_fps(path, fps)
    if len(image_size) != 2 or min(image_size) <= 0:
        _fail(path, "image_size", f"is {tuple(image_size)}", "(width, height) > 0 (--image-size WxH)")  # fmt: skip
    data = _read_json(path)
    if not isinstance(data, list) or not data:
        _fail(path, "(file)", f"is {'an empty list' if data == [] else 'a JSON ' + type(data).__name__}", "a non-empty list of {joints, visibility, image_path}")  # fmt: skip
    numbers = [_frame_number(path, i, e if isinstance(e, dict) else {}) for i, e in enumerate(data)]
    seen: dict[int, int] = {}
    for i, n in enumerate(numbers):
        if n in seen:
            _fail(path, f"[{i}].image_path", f"repeats frame {n} of entry [{seen[n]}]", "one entry per video frame")  # fmt: skip
        seen[n] = i
    first = min(numbers)
    T = max(numbers) - first + 1
    slots = [(DOG17.index(k), j) for k, j in BADJA_TO_DOG17.items() if j is not None]
    kp = np.full((T, DOG17.num_keypoints, 2), np.nan)
    conf = np.zeros((T, DOG17.num_keypoints))
    for i, (entry, n) in enumerate(zip(data, numbers, strict=True)):
        xy, vis = _badja_entry(path, i, entry)
        for k, j in slots:
            kp[n - first, k], conf[n - first, k] = xy[j], float(vis[j] > 0)
    info = {"annotated_frames": sorted(numbers)} | (meta or {})
    return _clip(path, kp, conf, "dog17", fps, image_size, info, "badja")
