"""Versioned on-disk motion formats: 2D keypoint clips and 3D reference motions.

Both are ``.npz`` archives (no pickle) with a ``format_version`` and a ``kind``
(``"motion2d"`` / ``"motion3d"``). Every load is validated and every error is a
:class:`MotionFormatError` naming the file, the field and what was expected.

2D clips (:class:`Motion2D`) hold ``V`` synchronised views of ``T`` frames of ``K``
keypoints in pixels, with a confidence per keypoint (docs/design.md section 2: below 0.3 is masked).
A keypoint may be NaN only where its confidence is 0. Optional: an object track
(ball centre / box with its own confidence), per-view cameras (static ``F = 1`` or one
per frame ``F = T``), 3D ground truth, per-clip labels and free-form ``meta``.
See ``docs/data.md`` for the field table.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from mimic2dm.geometry.camera import Camera
from mimic2dm.motion.keypoint_sets import KEYPOINT_SETS

FORMAT_VERSION = 1
"""Version written by :func:`save_motion2d` / :func:`save_motion3d`; the only one read."""

CONFIDENCE_THRESHOLD = 0.3
"""docs/design.md section 2: keypoints with a lower confidence are masked out everywhere."""

MEMORY = "<memory>"
"""Source name used in errors about objects that were not read from a file."""

MIN_CONTROL_FRAMES = 3
"""Fewest frames a clip may have at the control rate to be tracked (trained on or evaluated):
an episode starts at any frame but the last and must take at least two steps.
``data check``, training and eval all refuse shorter clips (:func:`check_trackable`)."""

DEFAULT_CONTROL_HZ = 30.0
"""Control rate ``data check`` assumes (``conf/engine``'s default ``control_hz``)."""

_KIND_NAMES = {"f": "a floating-point", "iu": "an integer", "fiu": "a numeric", "U": "a string"}
_ROT_TOL = 1e-3


class MotionFormatError(ValueError):
    """A motion file or object does not follow the format.

    Attributes:
        file: the file (or ``"<memory>"``).
        field: the offending field (``"(file)"`` when the archive itself is unreadable).
        expected: what the field should be.
    """

    def __init__(self, file: str | os.PathLike, field: str, problem: str, expected: str):
        self.file, self.field, self.expected = str(file), field, expected
        super().__init__(f"{self.file}: field '{field}' {problem}, expected {expected}")


def _shape_str(shape) -> str:
    return "[" + ", ".join(str(int(s)) for s in shape) + "]"


class _Checker:
    """Shape/dtype/value checks that bind symbolic dimensions (``V``, ``T``, ``K``...)."""

    def __init__(self, source: str | os.PathLike, **dims: int):
        self.source = source
        self.dims: dict[str, int] = dict(dims)

    def fail(self, field: str, problem: str, expected: str):
        raise MotionFormatError(self.source, field, problem, expected)

    def _expected(self, dims: tuple) -> str:
        sym = "[" + ", ".join(str(d) for d in dims) + "]"
        conc = []
        for d in dims:
            if isinstance(d, int):
                conc.append(str(d))
            elif d == "F":
                conc.append(f"1|{self.dims['T']}" if "T" in self.dims else "F")
            else:
                conc.append(str(self.dims.get(d, d)))
        return f"{sym} = [{', '.join(conc)}]"

    def array(self, name: str, x: Any, dims: tuple, kind: str = "f") -> np.ndarray:
        """Check ``x`` is an array of ``kind`` with shape ``dims``; bind unseen symbols."""
        if not isinstance(x, np.ndarray):
            self.fail(
                name, f"is a {type(x).__name__}", f"a numpy array of shape {self._expected(dims)}"
            )
        if x.dtype.kind not in kind:
            self.fail(name, f"has dtype {x.dtype}", f"{_KIND_NAMES[kind]} dtype")
        ok = x.ndim == len(dims)
        bound = dict(self.dims)
        for d, s in zip(dims, x.shape, strict=True) if ok else ():
            if isinstance(d, int):
                ok &= s == d
            elif d == "F":
                ok &= s == 1 or s == bound.get("T", s)
            elif d in bound:
                ok &= s == bound[d]
            else:
                bound[d] = s
                ok &= s >= 1
        if not ok:
            self.fail(name, f"has shape {_shape_str(x.shape)}", self._expected(dims))
        self.dims = bound
        return x

    def finite(
        self, name: str, x: np.ndarray, where: np.ndarray | None = None, why: str = ""
    ) -> None:
        """Require finite values (only where ``where`` holds, broadcast over trailing axes)."""
        bad = ~np.isfinite(x)
        if where is not None:
            bad = bad & where.reshape(where.shape + (1,) * (x.ndim - where.ndim))
        if bad.any():
            idx = [int(i) for i in np.argwhere(bad)[0]]
            self.fail(name, f"has a non-finite value at {idx}", f"finite values{why}")

    def scalar(self, name: str, x: Any, kind: str) -> Any:
        """A 0-d array or Python scalar of ``kind`` -> Python value."""
        a = np.asarray(x) if not isinstance(x, np.ndarray) else x
        if a.ndim != 0 or a.dtype.kind not in kind:
            self.fail(
                name,
                f"is {a.dtype} of shape {_shape_str(a.shape)}",
                f"a scalar of {_KIND_NAMES[kind]} dtype",
            )
        return a.item()


def _check_keypoint_set(c: _Checker, name: Any) -> str:
    valid = ", ".join(KEYPOINT_SETS.names())
    if not isinstance(name, str):
        c.fail("keypoint_set", f"is a {type(name).__name__}", f"one of {valid}")
    if name not in KEYPOINT_SETS:
        c.fail("keypoint_set", f"is {name!r}", f"one of {valid}")
    c.dims["K"] = KEYPOINT_SETS.load(name).num_keypoints
    return name


def _check_fps(c: _Checker, fps: Any) -> float:
    if isinstance(fps, bool) or not isinstance(fps, (int, float, np.integer, np.floating)):
        c.fail("fps", f"is a {type(fps).__name__}", "a number > 0")
    if not np.isfinite(fps) or fps <= 0:
        c.fail("fps", f"is {fps}", "a finite number > 0")
    return float(fps)


def _check_str_dict(c: _Checker, name: str, d: Any, values_str: bool) -> None:
    if not isinstance(d, dict) or not all(isinstance(k, str) for k in d):
        c.fail(name, f"is a {type(d).__name__}", "a dict with string keys")
    if values_str and not all(isinstance(v, str) for v in d.values()):
        c.fail(name, "has a non-string value", "a dict str -> str")
    try:
        json.dumps(d)
    except (TypeError, ValueError) as e:
        c.fail(name, f"is not JSON-serialisable ({e})", "a JSON-serialisable dict")


def _check_rotations(c: _Checker, name: str, R: np.ndarray) -> None:
    c.finite(name, R)
    err = np.abs(np.einsum("...ji,...jk->...ik", R, R) - np.eye(3)).max(initial=0.0)
    if err > _ROT_TOL or (np.linalg.det(R) <= 0).any():
        c.fail(
            name,
            f"is not a rotation (|R^T R - I| = {err:.3g})",
            "rotation matrices (orthonormal, det +1)",
        )


def _check_cameras(c: _Checker, m: Any) -> None:
    names = ("camera_R", "camera_t", "camera_intrinsics")
    present = [getattr(m, n) is not None for n in names]
    if not any(present):
        return
    for n, p in zip(names, present, strict=True):
        if not p:
            c.fail(n, "is missing", "camera_R, camera_t and camera_intrinsics together (or none)")
    _check_rotations(c, "camera_R", c.array("camera_R", m.camera_R, ("V", "F", 3, 3)))
    c.finite("camera_t", c.array("camera_t", m.camera_t, ("V", "F", 3)))
    k = c.array("camera_intrinsics", m.camera_intrinsics, ("V", "F", 4))
    c.finite("camera_intrinsics", k)
    if (k[..., 0:2] <= 0).any():
        c.fail(
            "camera_intrinsics",
            "has a focal length <= 0",
            "(fx, fy, cx, cy) with fx, fy > 0 (pixels)",
        )


def _check_confidence(c: _Checker, name: str, conf: np.ndarray) -> None:
    c.finite(name, conf)
    if conf.size and (conf.min() < 0 or conf.max() > 1):
        c.fail(name, f"has values in [{conf.min():.3g}, {conf.max():.3g}]", "values in [0, 1]")


def _check_object(c: _Checker, m: Any) -> None:
    if m.object_center is None and m.object_box is None:
        if m.object_confidence is not None:
            c.fail(
                "object_center",
                "is missing while object_confidence is given",
                "object_center and/or object_box",
            )
        return
    if m.object_confidence is None:
        c.fail("object_confidence", "is missing", "[V, T] confidences with an object track")
    oc = c.array("object_confidence", m.object_confidence, ("V", "T"))
    _check_confidence(c, "object_confidence", oc)
    why = " wherever object_confidence > 0"
    if m.object_center is not None:
        c.finite(
            "object_center", c.array("object_center", m.object_center, ("V", "T", 2)), oc > 0, why
        )
    if m.object_box is not None:
        c.finite("object_box", c.array("object_box", m.object_box, ("V", "T", 4)), oc > 0, why)


INIT_STATE_FIELDS = (
    ("init_root_pos", ("T", 3)),
    ("init_root_quat", ("T", 4)),
    ("init_root_lin_vel", ("T", 3)),
    ("init_root_ang_vel", ("T", 3)),
    ("init_dof_pos", ("T", "J")),
    ("init_dof_vel", ("T", "J")),
)
"""Per-frame initial simulation states written by ``mimic2dm preprocess`` (all or none)."""


def _check_estimates(c: _Checker, m: Any) -> None:
    """``est_keypoints3d`` and the ``init_*`` states (``J`` = the character's DoF count)."""
    if m.est_keypoints3d is not None:
        c.finite("est_keypoints3d", c.array("est_keypoints3d", m.est_keypoints3d, ("T", "K", 3)))
    names = [n for n, _ in INIT_STATE_FIELDS]
    present = [getattr(m, n) is not None for n in names]
    if not any(present) and m.init_character is None:
        return
    for n, p in zip(names, present, strict=True):
        if not p:
            c.fail(
                n, "is missing", f"all of {', '.join(names)} and init_character together (or none)"
            )
    from mimic2dm.characters.registry import CHARACTERS, load_character

    valid = ", ".join(CHARACTERS.names())
    if not isinstance(m.init_character, str) or m.init_character not in CHARACTERS:
        c.fail(
            "init_character",
            f"is {m.init_character!r}",
            f"the character of the initial states: one of {valid}",
        )
    c.dims["J"] = load_character(m.init_character).num_dof
    for n, dims in INIT_STATE_FIELDS:
        c.finite(n, c.array(n, getattr(m, n), dims))
    norm = np.linalg.norm(m.init_root_quat, axis=-1)
    if norm.size and np.abs(norm - 1).max() > _ROT_TOL:
        c.fail("init_root_quat", "has non-unit quaternions", "unit quaternions xyzw")


def _check_image_size(c: _Checker, size: Any) -> tuple[int, int]:
    try:
        a = np.asarray(size)
    except Exception:  # noqa: BLE001 - anything unconvertible is a format error
        a = np.asarray(0)
    if a.shape != (2,) or a.dtype.kind not in "iu" or (a <= 0).any():
        c.fail("image_size", f"is {size!r}", "(width, height): two positive integers (pixels)")
    return int(a[0]), int(a[1])


@dataclass(eq=False)
class Motion2D:
    """A 2D keypoint clip with ``V`` views, ``T`` frames and ``K`` keypoints.

    Attributes:
        keypoints: ``[V, T, K, 2]`` pixels; NaN only where confidence is 0.
        confidence: ``[V, T, K]`` in [0, 1]; below :data:`CONFIDENCE_THRESHOLD` is masked.
        keypoint_set: registry name (``coco17``, ``dog17``).
        fps: frames per second (> 0).
        image_size: ``(width, height)`` pixels.
        object_center: optional ``[V, T, 2]`` ball centre (pixels).
        object_box: optional ``[V, T, 4]`` object box ``(x1, y1, x2, y2)`` (pixels).
        object_confidence: ``[V, T]``, required with an object track.
        camera_R: optional ``[V, F, 3, 3]`` world-to-camera rotations, ``F`` in {1, T}.
        camera_t: optional ``[V, F, 3]`` world-to-camera translations (metres).
        camera_intrinsics: optional ``[V, F, 4]`` ``(fx, fy, cx, cy)`` pixels.
        keypoints3d: optional ``[T, K, 3]`` world ground truth (metres, z-up).
        object3d: optional ``[T, 3]`` world object position ground truth (metres).
        est_keypoints3d: optional ``[T, K, 3]`` world keypoints estimated by
            ``mimic2dm preprocess`` (never ground truth; MPJPE uses ``keypoints3d`` only).
        init_character: character of the initial states below (registry name).
        init_root_pos, init_root_lin_vel, init_root_ang_vel: optional ``[T, 3]`` per-frame
            initial simulation states from preprocessing: root position (m), linear and
            angular velocity (world frame, m/s, rad/s); init_root_quat: ``[T, 4]`` xyzw;
            init_dof_pos, init_dof_vel: ``[T, J]`` joint angles (rad) and velocities
            (rad/s) in the character's ``dof_names`` order. All or none, with init_character.
        labels: per-clip labels, e.g. ``{"skill": "dribble"}``.
        meta: free-form JSON-serialisable dict (``source``, ``random_weights``...).
    """

    keypoints: np.ndarray
    confidence: np.ndarray
    keypoint_set: str
    fps: float
    image_size: tuple[int, int]
    object_center: np.ndarray | None = None
    object_box: np.ndarray | None = None
    object_confidence: np.ndarray | None = None
    camera_R: np.ndarray | None = None
    camera_t: np.ndarray | None = None
    camera_intrinsics: np.ndarray | None = None
    keypoints3d: np.ndarray | None = None
    object3d: np.ndarray | None = None
    est_keypoints3d: np.ndarray | None = None
    init_character: str | None = None
    init_root_pos: np.ndarray | None = None
    init_root_quat: np.ndarray | None = None
    init_root_lin_vel: np.ndarray | None = None
    init_root_ang_vel: np.ndarray | None = None
    init_dof_pos: np.ndarray | None = None
    init_dof_vel: np.ndarray | None = None
    labels: dict[str, str] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, source: str | os.PathLike = MEMORY) -> None:
        """Raise :class:`MotionFormatError` (naming ``source``) unless the clip is valid."""
        c = _Checker(source)
        self.keypoint_set = _check_keypoint_set(c, self.keypoint_set)
        self.fps = _check_fps(c, self.fps)
        self.image_size = _check_image_size(c, self.image_size)
        kp = c.array("keypoints", self.keypoints, ("V", "T", "K", 2))
        conf = c.array("confidence", self.confidence, ("V", "T", "K"))
        _check_confidence(c, "confidence", conf)
        c.finite("keypoints", kp, conf > 0, " wherever confidence > 0 (NaN needs confidence 0)")
        _check_object(c, self)
        _check_cameras(c, self)
        if self.keypoints3d is not None:
            c.finite("keypoints3d", c.array("keypoints3d", self.keypoints3d, ("T", "K", 3)))
        if self.object3d is not None:
            c.finite("object3d", c.array("object3d", self.object3d, ("T", 3)))
        _check_estimates(c, self)
        _check_str_dict(c, "labels", self.labels, values_str=True)
        _check_str_dict(c, "meta", self.meta, values_str=False)

    @property
    def num_views(self) -> int:
        return int(self.keypoints.shape[0])

    @property
    def num_frames(self) -> int:
        return int(self.keypoints.shape[1])

    @property
    def num_keypoints(self) -> int:
        return int(self.keypoints.shape[2])

    @property
    def has_cameras(self) -> bool:
        return self.camera_R is not None

    @property
    def has_object(self) -> bool:
        return self.object_confidence is not None

    @property
    def has_initial_states(self) -> bool:
        """Per-frame initial simulation states from preprocessing are present."""
        return self.init_root_pos is not None

    def mask(self, threshold: float = CONFIDENCE_THRESHOLD) -> np.ndarray:
        """Observed keypoints ``[V, T, K]`` (bool): confidence >= threshold and finite."""
        return (self.confidence >= threshold) & np.isfinite(self.keypoints).all(-1)

    def view(self, v: int) -> Motion2D:
        """The single-view clip (``V = 1``) of view ``v``; 3D data is shared."""
        if not -self.num_views <= v < self.num_views:
            raise IndexError(f"view {v} out of range for a clip with {self.num_views} views")
        sl = slice(v, v + 1) if v >= 0 else slice(self.num_views + v, self.num_views + v + 1)
        per_view = (
            "keypoints",
            "confidence",
            "object_center",
            "object_box",
            "object_confidence",
            "camera_R",
            "camera_t",
            "camera_intrinsics",
        )
        kw = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in per_view:
            if kw[name] is not None:
                kw[name] = kw[name][sl]
        kw["labels"], kw["meta"] = dict(self.labels), dict(self.meta)
        return Motion2D(**kw)

    def cameras(self) -> list[Camera]:
        """One :class:`Camera` per view; a parameter constant over frames is stored once (F = 1)."""
        if not self.has_cameras:
            raise ValueError("this clip has no cameras")
        w, h = self.image_size
        out = []
        for v in range(self.num_views):
            R, t, k = (
                _collapse(x[v]) for x in (self.camera_R, self.camera_t, self.camera_intrinsics)
            )
            out.append(Camera(R, t, k, w, h))
        return out

    def summary(self) -> dict[str, Any]:
        """Short description used by ``mimic2dm data check``."""
        F = (
            max(self.camera_R.shape[1], self.camera_t.shape[1], self.camera_intrinsics.shape[1])
            if self.has_cameras
            else 0
        )
        return {
            "views": self.num_views,
            "frames": self.num_frames,
            "fps": self.fps,
            "keypoint_set": self.keypoint_set,
            "image_size": self.image_size,
            "mean_confidence": float(self.confidence.mean()),
            "masked_fraction": float(1.0 - self.mask().mean()),
            "cameras": "none" if not self.has_cameras else ("dynamic" if F > 1 else "static"),
            "object": self.has_object,
            "gt3d": self.keypoints3d is not None,
            "init_states": self.has_initial_states,
        }


def _collapse(x: np.ndarray) -> np.ndarray:
    """``[F, ...]`` -> ``[1, ...]`` when all frames are equal."""
    return x[:1] if x.shape[0] > 1 and (x == x[:1]).all() else x


def camera_arrays(cameras: list[Camera], num_frames: int) -> dict[str, np.ndarray]:
    """Stack per-view cameras into ``camera_R [V, F, 3, 3]``, ``camera_t [V, F, 3]``,
    ``camera_intrinsics [V, F, 4]`` (float32); a field is ``F = 1`` only if static in every view.

    Args:
        cameras: ``V`` cameras with ``F`` in {1, num_frames}.
        num_frames: ``T``.
    """
    out = {}
    for name, attr, tail in (
        ("camera_R", "R", (3, 3)),
        ("camera_t", "t", (3,)),
        ("camera_intrinsics", "intrinsics", (4,)),
    ):
        xs = [getattr(cam, attr).detach().cpu().numpy().astype(np.float32) for cam in cameras]
        F = max(x.shape[0] for x in xs)
        if F not in (1, num_frames):
            raise ValueError(f"camera_arrays: a camera has {F} frames, expected 1 or {num_frames}")
        out[name] = np.stack([np.broadcast_to(x, (F, *tail)) for x in xs])
    return out


# ----------------------------------------------------------------------------- disk IO
def atomic_savez(path: str | os.PathLike, arrays: dict[str, np.ndarray]) -> None:
    """Write ``arrays`` to ``path`` via a temp file in the same folder and ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez_compressed(f, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _read_npz(path: str | os.PathLike, kind: str) -> dict[str, np.ndarray]:
    """All arrays of an ``.npz`` archive; any read failure is a :class:`MotionFormatError`."""
    expected = f"a complete .npz archive written by save_{kind}"
    if not Path(path).is_file():
        raise MotionFormatError(path, "(file)", "does not exist or is not a file", expected)
    try:
        with np.load(path, allow_pickle=False) as z:
            if not isinstance(z, np.lib.npyio.NpzFile):
                raise TypeError("not an .npz archive")
            raw = {k: z[k] for k in z.files}
    except Exception as e:  # noqa: BLE001 - truncated/corrupt archives fail in many ways
        raise MotionFormatError(
            path, "(file)", f"could not be read ({type(e).__name__}: {e})", expected
        ) from None
    if not isinstance(raw, dict):
        raise MotionFormatError(path, "(file)", "is not an .npz archive", expected)
    c = _Checker(path)
    for name in ("format_version", "kind"):
        if name not in raw:
            c.fail(name, "is missing", f"{name} in every {kind} file")
    version = c.scalar("format_version", raw["format_version"], "iu")
    if version != FORMAT_VERSION:
        c.fail("format_version", f"is {version}", f"{FORMAT_VERSION} (the only supported version)")
    if c.scalar("kind", raw["kind"], "U") != kind:
        c.fail("kind", f"is {raw['kind'].item()!r}", f"{kind!r}")
    return raw


def _required(c: _Checker, raw: dict, name: str) -> np.ndarray:
    if name not in raw:
        c.fail(name, "is missing", "a required field")
    return raw[name]


def _json_field(c: _Checker, raw: dict, name: str) -> dict:
    if name not in raw:
        return {}
    try:
        d = json.loads(c.scalar(name, raw[name], "U"))
    except json.JSONDecodeError as e:
        c.fail(name, f"is not valid JSON ({e})", "a JSON object string")
    if not isinstance(d, dict):
        c.fail(name, f"is a JSON {type(d).__name__}", "a JSON object string")
    return d


def _to_disk(x: Any) -> np.ndarray:
    a = np.asarray(x)
    return a.astype(np.float32) if a.dtype.kind == "f" else a


def save_motion2d(m: Motion2D, path: str | os.PathLike) -> None:
    """Validate ``m`` and write it atomically to ``path`` (``.npz``); float arrays as float32."""
    m.validate(path)
    arrays: dict[str, np.ndarray] = {
        "format_version": np.array(FORMAT_VERSION, dtype=np.int64),
        "kind": np.array("motion2d"),
        "keypoint_set": np.array(m.keypoint_set),
        "fps": np.array(m.fps, dtype=np.float64),
        "image_size": np.array(m.image_size, dtype=np.int64),
        "labels": np.array(json.dumps(m.labels)),
        "meta": np.array(json.dumps(m.meta)),
    }
    for f in fields(Motion2D):
        x = getattr(m, f.name)
        if f.name not in arrays and x is not None:
            arrays[f.name] = _to_disk(x)
    atomic_savez(path, arrays)


def load_motion2d(path: str | os.PathLike) -> Motion2D:
    """Read and validate a 2D clip written by :func:`save_motion2d` (a file read once per
    process while it is unchanged: :func:`clear_load_cache`).

    Raises:
        MotionFormatError: naming ``path``, the field and the expectation.
    """
    return _cached_load(path, "motion2d", _load_motion2d)


def _load_motion2d(path: str | os.PathLike) -> Motion2D:
    raw = _read_npz(path, "motion2d")
    c = _Checker(path)
    kw: dict[str, Any] = {
        "keypoint_set": c.scalar("keypoint_set", _required(c, raw, "keypoint_set"), "U"),
        "fps": c.scalar("fps", _required(c, raw, "fps"), "fiu"),
        "image_size": _check_image_size(c, _required(c, raw, "image_size")),
        "keypoints": _required(c, raw, "keypoints"),
        "confidence": _required(c, raw, "confidence"),
        "labels": _json_field(c, raw, "labels"),
        "meta": _json_field(c, raw, "meta"),
    }
    if "init_character" in raw:
        kw["init_character"] = c.scalar("init_character", raw["init_character"], "U")
    for f in fields(Motion2D):
        if f.name not in kw and f.name in raw:
            kw[f.name] = raw[f.name]
    m = Motion2D.__new__(Motion2D)
    for f in fields(Motion2D):
        setattr(m, f.name, kw.get(f.name))
    m.validate(path)
    return m


def control_frames(num_frames: int, fps: float, control_hz: float) -> int:
    """Frames a clip of ``num_frames`` at ``fps`` has once resampled to ``control_hz``
    (the count :func:`mimic2dm.motion.synth.resample` produces)."""
    if num_frames <= 1 or abs(fps - control_hz) <= 1e-6:
        return int(num_frames)
    return int(np.floor((num_frames - 1) * control_hz / fps + 1e-9)) + 1


def check_trackable(
    m: Motion2D | Motion3D,
    source: str | os.PathLike = MEMORY,
    control_hz: float = DEFAULT_CONTROL_HZ,
    threshold: float = CONFIDENCE_THRESHOLD,
) -> None:
    """Refuse a valid clip that cannot be tracked: too short, or a 2D view with every keypoint masked.

    Args:
        m: the clip; source: its file (for the message).
        control_hz: the control rate it will be resampled to.
        threshold: confidence below which a keypoint is masked.

    Raises:
        MotionFormatError: fewer than :data:`MIN_CONTROL_FRAMES` frames at ``control_hz``
            (the message gives the minimum), or a view with no observed keypoint.
    """
    n = control_frames(m.num_frames, m.fps, control_hz)
    if n < MIN_CONTROL_FRAMES:
        field_name = "keypoints" if isinstance(m, Motion2D) else "root_pos"
        raise MotionFormatError(
            source, field_name,
            f"has {m.num_frames} frame(s) at {m.fps:g} fps = {n} frame(s) at the {control_hz:g} Hz control rate",
            f">= {MIN_CONTROL_FRAMES} frames at {control_hz:g} Hz "
            f"(>= {(MIN_CONTROL_FRAMES - 1) / control_hz:.3g} s) to train or evaluate on",
        )  # fmt: skip
    if isinstance(m, Motion2D):
        seen = m.mask(threshold).reshape(m.num_views, -1).any(1)
        if not seen.all():
            views = [int(v) for v in np.flatnonzero(~seen)]
            raise MotionFormatError(
                source, "confidence",
                f"masks every keypoint of view(s) {views} (all below {threshold:g} or NaN)",
                "some keypoints with confidence >= the threshold in every view",
            )  # fmt: skip


# ----------------------------------------------------------------------------- 3D references
@dataclass(eq=False)
class Motion3D:
    """A 3D reference motion of a character (kinematic reference, baselines, synthesis).

    Attributes:
        character: character registry name (``humanoid``, ``dog``).
        fps: frames per second (> 0).
        root_pos: ``[T, 3]`` root body position (metres, z-up).
        root_quat: ``[T, 4]`` root orientation, unit quaternions xyzw.
        dof_pos: ``[T, J]`` joint angles (rad) in the character's ``dof_names`` order;
            ``J = 0`` for keypoint-only motions.
        keypoints3d: optional ``[T, K, 3]`` world keypoints (metres).
        keypoint_set: set of ``keypoints3d`` (required with it).
        object_pos: optional ``[T, 3]`` object position (metres).
        meta: free-form JSON-serialisable dict.
    """

    character: str
    fps: float
    root_pos: np.ndarray
    root_quat: np.ndarray
    dof_pos: np.ndarray
    keypoints3d: np.ndarray | None = None
    keypoint_set: str | None = None
    object_pos: np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, source: str | os.PathLike = MEMORY) -> None:
        """Raise :class:`MotionFormatError` (naming ``source``) unless the motion is valid."""
        c = _Checker(source)
        if not isinstance(self.character, str) or not self.character:
            c.fail("character", f"is {self.character!r}", "a non-empty character name")
        self.fps = _check_fps(c, self.fps)
        c.finite("root_pos", c.array("root_pos", self.root_pos, ("T", 3)))
        q = c.array("root_quat", self.root_quat, ("T", 4))
        c.finite("root_quat", q)
        if np.abs(np.linalg.norm(q, axis=-1) - 1).max() > _ROT_TOL:
            c.fail("root_quat", "has non-unit quaternions", "unit quaternions xyzw")
        dof = self.dof_pos
        if isinstance(dof, np.ndarray) and dof.ndim == 2 and dof.shape[1] == 0:
            c.dims["J"] = 0  # keypoint-only motions carry no joint angles
        c.finite("dof_pos", c.array("dof_pos", dof, ("T", "J")))
        if self.keypoints3d is not None or self.keypoint_set is not None:
            if self.keypoints3d is None:
                c.fail(
                    "keypoints3d", "is missing while keypoint_set is given", "[T, K, 3] keypoints"
                )
            self.keypoint_set = _check_keypoint_set(c, self.keypoint_set)
            c.finite("keypoints3d", c.array("keypoints3d", self.keypoints3d, ("T", "K", 3)))
        if self.object_pos is not None:
            c.finite("object_pos", c.array("object_pos", self.object_pos, ("T", 3)))
        _check_str_dict(c, "meta", self.meta, values_str=False)

    @property
    def num_frames(self) -> int:
        return int(self.root_pos.shape[0])

    def qpos(self) -> np.ndarray:
        """MuJoCo ``qpos [T, 7 + J]`` of the character alone (freejoint quaternion wxyz)."""
        from mimic2dm.geometry.rotations import (
            xyzw_to_wxyz,  # torch stays out of the file format's import
        )

        return np.concatenate([self.root_pos, xyzw_to_wxyz(self.root_quat), self.dof_pos], axis=1)


def save_motion3d(m: Motion3D, path: str | os.PathLike) -> None:
    """Validate ``m`` and write it atomically to ``path`` (``.npz``)."""
    m.validate(path)
    arrays: dict[str, np.ndarray] = {
        "format_version": np.array(FORMAT_VERSION, dtype=np.int64),
        "kind": np.array("motion3d"),
        "character": np.array(m.character),
        "fps": np.array(m.fps, dtype=np.float64),
        "meta": np.array(json.dumps(m.meta)),
        "root_pos": _to_disk(m.root_pos),
        "root_quat": _to_disk(m.root_quat),
        "dof_pos": _to_disk(m.dof_pos),
    }
    if m.keypoints3d is not None:
        arrays["keypoints3d"] = _to_disk(m.keypoints3d)
        arrays["keypoint_set"] = np.array(m.keypoint_set)
    if m.object_pos is not None:
        arrays["object_pos"] = _to_disk(m.object_pos)
    atomic_savez(path, arrays)


def load_motion3d(path: str | os.PathLike) -> Motion3D:
    """Read and validate a 3D motion written by :func:`save_motion3d` (a file read once per
    process while it is unchanged: :func:`clear_load_cache`)."""
    return _cached_load(path, "motion3d", _load_motion3d)


def _load_motion3d(path: str | os.PathLike) -> Motion3D:
    raw = _read_npz(path, "motion3d")
    c = _Checker(path)
    m = Motion3D.__new__(Motion3D)
    m.character = c.scalar("character", _required(c, raw, "character"), "U")
    m.fps = c.scalar("fps", _required(c, raw, "fps"), "fiu")
    m.root_pos = _required(c, raw, "root_pos")
    m.root_quat = _required(c, raw, "root_quat")
    m.dof_pos = _required(c, raw, "dof_pos")
    m.keypoints3d = raw.get("keypoints3d")
    m.keypoint_set = (
        c.scalar("keypoint_set", raw["keypoint_set"], "U") if "keypoint_set" in raw else None
    )
    m.object_pos = raw.get("object_pos")
    m.meta = _json_field(c, raw, "meta")
    m.validate(path)
    return m


def read_kind(path: str | os.PathLike) -> str | None:
    """``"motion2d"``, ``"motion3d"`` or None (not one of our archives / unreadable)."""
    key = _file_key(path)
    with _CACHE_LOCK:
        if key in _CACHE:
            return _CACHE[key][0]
    try:
        with np.load(path, allow_pickle=False) as z:
            return str(z["kind"].item()) if "kind" in z.files else None
    except Exception:  # noqa: BLE001 - any unreadable file is "not ours"
        return None


# ------------------------------------------------------------------ the load cache
LOAD_CACHE_BYTES = 256 * 2**20
"""Most bytes of arrays the load cache keeps (least recently used clips go first)."""
_CACHE: OrderedDict[tuple, tuple[str, Any, int]] = OrderedDict()
_CACHE_LOCK = threading.Lock()


def _file_key(path: str | os.PathLike) -> tuple | None:
    """The file's identity while unchanged: resolved path, mtime, size and inode (an atomic
    save replaces the inode); None when it cannot be stat'ed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (os.path.realpath(path), st.st_mtime_ns, st.st_size, st.st_ino)


def _nbytes(m: Any) -> int:
    return sum(v.nbytes for v in vars(m).values() if isinstance(v, np.ndarray))


def _cached_load(path: str | os.PathLike, kind: str, load) -> Any:
    """``load(path)`` once per unchanged file; every caller gets its own copy (callers may
    change what they get). Training reads each clip in its checks, in every env group and
    in its evaluations."""
    key = _file_key(path)
    with _CACHE_LOCK:
        hit = _CACHE.get(key) if key is not None else None
        if hit is not None and hit[0] == kind:
            _CACHE.move_to_end(key)
            return copy.deepcopy(hit[1])
    m = load(path)
    if key is not None:
        with _CACHE_LOCK:
            _CACHE[key] = (kind, m, _nbytes(m))
            while len(_CACHE) > 1 and sum(e[2] for e in _CACHE.values()) > LOAD_CACHE_BYTES:
                _CACHE.popitem(last=False)
    return copy.deepcopy(m)


def clear_load_cache() -> None:
    """Forget every clip :func:`load_motion2d` / :func:`load_motion3d` kept."""
    with _CACHE_LOCK:
        _CACHE.clear()
