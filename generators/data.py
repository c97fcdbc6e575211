"""Windows of canonical 2D motion for the generators (paper 3.4, docs/design.md section 9).

A directory of 2D-motion files (``mimic2dm.motion.format``) becomes a :class:`ClipSet`:
every view of every file is mapped by ``G`` (:func:`to_canonical`) to per-frame
features ``[T, 2K + 3]`` (local pose, root velocity, log-scale velocity), concatenated
along time, with its keypoint mask, per-frame root and body size (for ``G^-1``) and a
per-clip label (``labels[label_key]``, the condition ``y``). The last frame of each
view is dropped because its global motion is unknown.

Masked keypoints are never fed as bare zeros: batches carry the feature mask, the
models take the keypoint mask as extra input channels and every loss is masked.
Normalisation statistics (:class:`FeatureStats`) are computed on visible entries only
and are saved inside every model checkpoint.

:func:`build_view_dataset` makes a reproducible training directory from the CMU clips
projected through many random orthogonal view pairs (``python -m
mimic2dm.generators.data --out DIR``, or the ``gen_data`` Hydra group).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import typer

from mimic2dm.geometry.virtual import CAMERA_MODES, VirtualCameraConfig
from mimic2dm.motion.canonical import CanonicalMotion, from_canonical, to_canonical
from mimic2dm.motion.format import Motion2D, MotionFormatError, load_motion2d, save_motion2d
from mimic2dm.motion.keypoint_sets import load_keypoint_set
from mimic2dm.utils.paths import mocap_dir as shared_mocap_dir

REFERENCE_HEIGHT = 1080
"""Pixel errors are reported at 1080p (docs/design.md section 1)."""

DEFAULT_MOCAP_DIR = shared_mocap_dir()
"""The shared mocap clips when this module was imported; builds ask again (``MIMIC2DM_SHARED``)."""
DEFAULT_CLIPS = ("cmu_walk", "cmu_run", "cmu_hop")
MANIFEST = "manifest.json"


# ----------------------------------------------------------------------------- statistics
@dataclass
class FeatureStats:
    """Per-channel normalisation of canonical features ``[D]`` (visible entries only).

    Attributes:
        mean, std: ``[D]`` float32.
        scale_px: median body size at 1080p (pixels), for placing generated motion.
        root_frac: ``[2]`` median first-frame root as a fraction of (width, height).
    """

    mean: torch.Tensor
    std: torch.Tensor
    scale_px: float = 150.0
    root_frac: tuple[float, float] = (0.5, 0.55)

    def normalize(self, f: torch.Tensor) -> torch.Tensor:
        """``[..., D]`` raw -> normalised."""
        return (f - self.mean) / self.std

    def denormalize(self, f: torch.Tensor) -> torch.Tensor:
        """``[..., D]`` normalised -> raw canonical features."""
        return f * self.std + self.mean

    def to_dict(self) -> dict:
        return {"mean": self.mean.clone(), "std": self.std.clone(), "scale_px": self.scale_px,
                "root_frac": tuple(self.root_frac)}  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict) -> FeatureStats:
        return cls(d["mean"].float(), d["std"].float(), float(d["scale_px"]), tuple(d["root_frac"]))


def feature_mask(mask: torch.Tensor) -> torch.Tensor:
    """Keypoint mask ``[..., K]`` -> feature mask ``[..., 2K + 3]`` (global motion always valid)."""
    m = mask.bool().repeat_interleave(2, dim=-1)
    return torch.cat([m, m.new_ones(*m.shape[:-1], 3)], dim=-1)


# ----------------------------------------------------------------------------- clip set
@dataclass
class ClipSet:
    """Canonical clip-views of a directory, concatenated along time.

    Attributes:
        feats: ``[N, D]`` raw canonical features of all frames (``D = 2K + 3``).
        mask: ``[N, K]`` bool, observed keypoints.
        root: ``[N, 2]`` per-frame root (pixels); ``scale``: ``[N]`` body size (pixels).
        offsets: ``[C + 1]`` long, item ``c`` spans ``offsets[c]:offsets[c+1]``.
        labels: ``[C]`` long label id (``-1``: no label).
        group: ``[C]`` long file index; ``view``: ``[C]`` long view index in the file.
        px_scale: ``[C]`` factor from the file's pixels to 1080p pixels.
        label_names: label id -> name.
        keypoint_set, fps: shared by every file.
        image_size: ``(width, height)`` of the first file.
        files: file paths in group order.
    """

    feats: torch.Tensor
    mask: torch.Tensor
    root: torch.Tensor
    scale: torch.Tensor
    offsets: torch.Tensor
    labels: torch.Tensor
    group: torch.Tensor
    view: torch.Tensor
    px_scale: torch.Tensor
    label_names: list[str]
    keypoint_set: str
    fps: float
    image_size: tuple[int, int]
    files: list[str]

    @property
    def num_items(self) -> int:
        return int(self.labels.shape[0])

    @property
    def lengths(self) -> torch.Tensor:
        """``[C]`` frames per item."""
        return self.offsets[1:] - self.offsets[:-1]

    @property
    def dim(self) -> int:
        return int(self.feats.shape[1])

    @property
    def num_keypoints(self) -> int:
        return int(self.mask.shape[1])

    def item(self, c: int) -> dict[str, torch.Tensor]:
        """Frames of item ``c``: ``feats [T, D]``, ``mask [T, K]``, ``root [T, 2]``, ``scale [T]``."""
        a, b = int(self.offsets[c]), int(self.offsets[c + 1])
        return {
            "feats": self.feats[a:b],
            "mask": self.mask[a:b],
            "root": self.root[a:b],
            "scale": self.scale[a:b],
        }

    def compute_stats(self, min_std: float = 1e-3) -> FeatureStats:
        """Masked mean/std over all frames, plus the median placement of the clips."""
        fm = feature_mask(self.mask).float()
        n = fm.sum(0).clamp_min(1.0)
        mean = (self.feats * fm).sum(0) / n
        var = (((self.feats - mean) ** 2) * fm).sum(0) / n
        starts = self.offsets[:-1]
        w, h = self.image_size
        scale_px = float((self.scale[starts] * self.px_scale).median())
        root = self.root[starts] / torch.tensor([float(w), float(h)])
        frac = (float(root[:, 0].median()), float(root[:, 1].median()))
        return FeatureStats(mean.float(), var.sqrt().clamp_min(min_std).float(), scale_px, frac)


def _label_of(
    m: Motion2D, path: Path, label_key: str | None, names: list[str] | None
) -> str | None:
    if not label_key:
        return None
    label = m.labels.get(label_key)
    if label is not None and names is not None and label not in names:
        raise MotionFormatError(
            path,
            f"labels.{label_key}",
            f"is {label!r}",
            f"one of {', '.join(names)} (the model's labels)",
        )
    return label


def canonical_view(kp: np.ndarray, mask: np.ndarray, kset) -> tuple[torch.Tensor, ...]:
    """``G`` of one view; drops the last frame (unknown global motion)."""
    cm = to_canonical(torch.as_tensor(kp, dtype=torch.float32), kset, torch.as_tensor(mask))
    _, (r, s) = from_canonical(cm)
    f = cm.features()
    return f[:-1], cm.mask[:-1], r[:-1], s[:-1]


def list_motion_files(directory: str | Path) -> list[Path]:
    """Sorted ``*.npz`` 2D-motion files of ``directory`` (error if there is none)."""
    d = Path(directory)
    if not d.is_dir():
        raise FileNotFoundError(f"2D-motion directory not found: {d}")
    files = sorted(p for p in d.glob("*.npz") if p.is_file())
    if not files:
        raise FileNotFoundError(f"{d}: no 2D-motion files (*.npz)")
    return files


def _file_rows(
    path: Path, g: int, meta: dict, keypoint_set: str | None, min_frames: int
) -> list[tuple]:
    """Canonical rows ``(feats, mask, root, scale, group, view, px_scale, motion)`` of a file's views.

    ``meta`` holds the keypoint set, fps and image size of the first file; every later
    file must agree (error naming the file and field).
    """
    m = load_motion2d(path)
    meta.setdefault("keypoint_set", keypoint_set or m.keypoint_set)
    meta.setdefault("fps", m.fps)
    meta.setdefault("image_size", m.image_size)
    if m.keypoint_set != meta["keypoint_set"]:
        raise MotionFormatError(
            path,
            "keypoint_set",
            f"is {m.keypoint_set!r}",
            f"{meta['keypoint_set']!r} like the other files",
        )
    if abs(m.fps - meta["fps"]) > 1e-6:
        raise MotionFormatError(
            path, "fps", f"is {m.fps}", f"{meta['fps']} like the other files (resample first)"
        )
    kset = load_keypoint_set(m.keypoint_set)
    masks, rows = m.mask(), []
    for v in range(m.num_views):
        if masks[v].any(axis=1).sum() < 2:
            continue
        f, mk, r, s = canonical_view(m.keypoints[v], masks[v], kset)
        if f.shape[0] >= min_frames:
            rows.append((f, mk, r, s, g, v, REFERENCE_HEIGHT / m.image_size[1], m))
    return rows


def load_clips(
    directory: str | Path,
    label_key: str | None = "skill",
    label_names: list[str] | None = None,
    keypoint_set: str | None = None,
    min_frames: int = 2,
) -> ClipSet:
    """Load and canonicalise every view of every 2D-motion file of ``directory``.

    Args:
        directory: folder of ``.npz`` files written by ``save_motion2d``.
        label_key: key of ``Motion2D.labels`` used as the condition (None: no labels).
        label_names: fixed label vocabulary (a trained model's); unknown labels are an
            error. None: the sorted labels found.
        keypoint_set: required keypoint set (a trained model's); None: the first file's.
        min_frames: views with fewer canonical frames are skipped.

    Returns:
        A :class:`ClipSet`.

    Raises:
        MotionFormatError naming the file and field on inconsistent input.
    """
    rows, labels, meta = [], [], {}
    files = list_motion_files(directory)
    for g, path in enumerate(files):
        for row in _file_rows(path, g, meta, keypoint_set, min_frames):
            rows.append(row[:7])
            labels.append(_label_of(row[7], path, label_key, label_names))
    if not rows:
        raise ValueError(f"{directory}: no view with at least {min_frames} usable frames")
    names = label_names if label_names is not None else sorted({x for x in labels if x is not None})
    lens = torch.tensor([r[0].shape[0] for r in rows])
    return ClipSet(
        feats=torch.cat([r[0] for r in rows]).float(),
        mask=torch.cat([r[1] for r in rows]),
        root=torch.cat([r[2] for r in rows]).float(),
        scale=torch.cat([r[3] for r in rows]).float(),
        offsets=torch.cat([torch.zeros(1, dtype=torch.long), lens.cumsum(0)]),
        labels=torch.tensor(
            [names.index(x) if x is not None else -1 for x in labels], dtype=torch.long
        ),
        group=torch.tensor([r[4] for r in rows], dtype=torch.long),
        view=torch.tensor([r[5] for r in rows], dtype=torch.long),
        px_scale=torch.tensor([r[6] for r in rows], dtype=torch.float32),
        label_names=list(names),
        keypoint_set=meta["keypoint_set"],
        fps=float(meta["fps"]),
        image_size=tuple(meta["image_size"]),
        files=[str(p) for p in files],
    )


# ----------------------------------------------------------------------------- windows
@dataclass
class WindowBatch:
    """A batch of ``B`` windows of ``W`` frames.

    Attributes:
        x: ``[B, W, D]`` normalised features, masked entries set to 0 (the mean).
        fmask: ``[B, W, D]`` bool feature mask; ``kmask``: ``[B, W, K]`` keypoint mask.
        y: ``[B]`` label ids (``-1``: none).
        root0: ``[B, 2]``, ``scale0``: ``[B]`` first-frame root and size (pixels).
        px_scale: ``[B]`` factor to 1080p pixels.
        item: ``[B]`` item ids; ``start``: ``[B]`` first frame within the item.
    """

    x: torch.Tensor
    fmask: torch.Tensor
    kmask: torch.Tensor
    y: torch.Tensor
    root0: torch.Tensor
    scale0: torch.Tensor
    px_scale: torch.Tensor
    item: torch.Tensor
    start: torch.Tensor


class WindowSampler:
    """Fixed-length windows of a :class:`ClipSet` (every start position of every item).

    Args:
        clips: the clip set.
        window: ``W`` frames per window.
        stats: normalisation applied to the features.
    """

    def __init__(self, clips: ClipSet, window: int, stats: FeatureStats):
        self.clips, self.window, self.stats = clips, int(window), stats
        lens = clips.lengths
        items = [torch.full((max(0, int(n) - window + 1),), c) for c, n in enumerate(lens)]
        self.index_item = torch.cat(items) if items else torch.zeros(0, dtype=torch.long)
        if self.index_item.numel() == 0:
            longest = int(lens.max()) if len(lens) else 0
            raise ValueError(
                f"no clip has {window} frames (longest: {longest}); use a shorter window"
            )
        first = torch.cat([torch.arange(len(t)) for t in items])
        self.index_start = first

    def __len__(self) -> int:
        return int(self.index_item.numel())

    def batch(self, idx: torch.Tensor) -> WindowBatch:
        """Windows number ``idx [B]`` of the index."""
        c, s = self.index_item[idx], self.index_start[idx]
        rows = self.clips.offsets[c][:, None] + s[:, None] + torch.arange(self.window)
        fm = feature_mask(self.clips.mask[rows])
        x = torch.where(fm, self.stats.normalize(self.clips.feats[rows]), torch.zeros(()))
        first = rows[:, 0]
        return WindowBatch(
            x=x, fmask=fm, kmask=self.clips.mask[rows], y=self.clips.labels[c],
            root0=self.clips.root[first], scale0=self.clips.scale[first],
            px_scale=self.clips.px_scale[c], item=c, start=s,
        )  # fmt: skip

    def sample(self, batch_size: int, generator: torch.Generator) -> WindowBatch:
        """``batch_size`` windows drawn uniformly with ``generator``."""
        return self.batch(torch.randint(len(self), (batch_size,), generator=generator))

    def iterate(self, batch_size: int, stride: int = 1, limit: int | None = None):
        """Deterministic pass over windows whose start is a multiple of ``stride``."""
        idx = torch.nonzero(self.index_start % max(1, stride) == 0).flatten()
        if limit is not None and len(idx) > limit:
            idx = idx[torch.linspace(0, len(idx) - 1, limit).round().long()]
        for i in range(0, len(idx), batch_size):
            yield self.batch(idx[i : i + batch_size])


# ----------------------------------------------------------------------------- G^-1
def features_to_pixels(
    feats: torch.Tensor, root0: torch.Tensor, scale0: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``G^-1`` of raw canonical features, continuing past the last frame.

    Args:
        feats: ``[T, D]`` raw canonical features (row ``t`` holds the motion ``t -> t+1``).
        root0: ``[2]`` root of frame 0 (pixels); ``scale0``: ``[]`` body size (pixels).

    Returns:
        keypoints ``[T, K, 2]`` (pixels), and the root ``[2]`` and size ``[]`` of frame
        ``T`` (where a following chunk starts).
    """
    ext = torch.cat([feats, torch.zeros_like(feats[:1])])
    x, (r, s) = from_canonical(CanonicalMotion.from_features(ext, root0, scale0))
    return x[:-1], r[-1], s[-1]


def window_pixel_errors(
    pred: torch.Tensor, batch: WindowBatch, stats: FeatureStats
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reconstruction errors of normalised windows ``pred [B, W, D]`` against ``batch``.

    Returns:
        ``(full [B], pose [B])`` mean errors (1080p pixels) over visible keypoints: after
        the full ``G^-1`` (decoded global motion integrated), and of the local pose
        only (true root and size).
    """
    K = batch.kmask.shape[-1]
    raw_p, raw_t = stats.denormalize(pred), stats.denormalize(batch.x)
    full, pose = [], []
    for b in range(pred.shape[0]):
        xp, _, _ = features_to_pixels(raw_p[b], batch.root0[b], batch.scale0[b])
        xt, (_, s) = from_canonical(
            CanonicalMotion.from_features(raw_t[b], batch.root0[b], batch.scale0[b])
        )
        m = batch.kmask[b].float()
        d = (xp - xt).norm(dim=-1)
        full.append((d * m).sum() / m.sum().clamp_min(1))
        lp = raw_p[b, :, : 2 * K].reshape(-1, K, 2)
        lt = raw_t[b, :, : 2 * K].reshape(-1, K, 2)
        dp = (lp - lt).norm(dim=-1) * s[:, None]
        pose.append((dp * m).sum() / m.sum().clamp_min(1))
    return torch.stack(full) * batch.px_scale, torch.stack(pose) * batch.px_scale


# ----------------------------------------------------------------------------- dataset builder
@dataclass
class ViewDatasetSpec:
    """How :func:`build_view_dataset` makes a directory (recorded in its manifest).

    Attributes:
        clips: mocap clip stems in ``mocap_dir`` (label = stem without ``cmu_``/``dog_``).
        pairs: orthogonal view pairs per clip; each file holds one pair (``V = 2``).
        seed: seeds cameras (azimuth, elevation, distance, focal, camera mode).
        fps: resample the 3D clips to this rate before projecting.
        camera_modes: modes drawn per pair (``static``, ``tracking``, ``dynamic``).
        noise_px, drop_prob: detector noise and dropped keypoints (see ``synth``).
        elevation_range_deg: camera elevation range of every pair (``None``: the
            ``VirtualCameraConfig`` default of docs/design.md section 1, -10 to 35 deg); the controller's follow camera is
            at 10 deg, and canonical 2D motion seen from another elevation cannot be matched
            by the character seen from 10 deg (docs/control.md).
        min_seconds: a clip shorter than this is looped (its gait cycle repeated with the
            root motion carried on, :func:`mimic2dm.motion.looping.loop_keypoints`) until it
            lasts this long; the dog clips are single cycles, shorter than a 32-frame window.
            0: every clip as recorded.
    """

    clips: tuple[str, ...] = DEFAULT_CLIPS
    pairs: int = 64
    seed: int = 0
    fps: float = 30.0
    camera_modes: tuple[str, ...] = ("static", "tracking", "dynamic")
    noise_px: float = 0.0
    drop_prob: float = 0.0
    min_seconds: float = 0.0
    elevation_range_deg: tuple[float, float] | None = None

    def digest(self) -> str:
        d = {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()}
        if not d["min_seconds"]:  # specs from before looping existed keep their digest
            del d["min_seconds"]
        if d["elevation_range_deg"] is None:  # and so do specs from before the elevation option
            del d["elevation_range_deg"]
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def _pair(
    kp3: np.ndarray,
    kset: str,
    fps: float,
    mode: str,
    az: float,
    seed: int,
    spec: ViewDatasetSpec,
    label: str,
):
    """Two views of ``kp3 [T, K, 3]`` at azimuths ``az`` and ``az + 90`` deg, same elevation/distance/focal."""
    from mimic2dm.motion.synth import synthesize_views

    views = []
    for a in (az, az + 90.0):
        cfg = VirtualCameraConfig(azimuth_range_deg=(a, a))
        if spec.elevation_range_deg is not None:
            cfg = dataclasses.replace(cfg, elevation_range_deg=tuple(spec.elevation_range_deg))
        views.append(synthesize_views(kp3, kset, fps, num_views=1, camera=mode, seed=seed, noise_px=spec.noise_px,
                                      drop_prob=spec.drop_prob, camera_config=cfg, labels={"skill": label}))  # fmt: skip
    cat = {}
    for k in ("keypoints", "confidence", "camera_R", "camera_t", "camera_intrinsics"):
        arrs = [getattr(v, k) for v in views]
        if k.startswith("camera"):  # a static and a moving view: store both per frame
            F = max(a.shape[1] for a in arrs)
            arrs = [np.broadcast_to(a, (1, F, *a.shape[2:])) for a in arrs]
        cat[k] = np.concatenate(arrs)
    meta = {**views[0].meta, "azimuths_deg": [az, az + 90.0], "views": "orthogonal pair"}
    return Motion2D(keypoint_set=kset, fps=fps, image_size=views[0].image_size, keypoints3d=views[0].keypoints3d,
                    labels={"skill": label}, meta=meta, **cat)  # fmt: skip


def build_view_dataset(
    out_dir: str | Path, spec: ViewDatasetSpec, mocap_dir: str | Path | None = None
) -> list[Path]:
    """Project mocap clips through ``spec.pairs`` random orthogonal view pairs each.

    Writes ``<clip>_<i>.npz`` (``V = 2`` views, labels ``{"skill": <clip>}``) and
    ``manifest.json`` (the spec and its digest) into ``out_dir``; deterministic in
    ``spec.seed``.

    Args:
        out_dir: output folder (created).
        spec: what to build.
        mocap_dir: folder of the clips (default: :func:`mimic2dm.utils.paths.mocap_dir`,
            ``$MIMIC2DM_SHARED/data/mocap`` or ``../shared/data/mocap`` next to the repo).

    Returns:
        The written file paths.
    """
    from mimic2dm.characters.clips import clip_skill, load_mocap_keypoints
    from mimic2dm.motion.looping import loop_keypoints
    from mimic2dm.motion.synth import resample

    bad = [m for m in spec.camera_modes if m not in CAMERA_MODES]
    if bad or not spec.camera_modes:
        raise ValueError(
            f"camera_modes {list(spec.camera_modes)}: each must be one of {', '.join(CAMERA_MODES)}"
        )
    if spec.pairs < 1 or spec.fps <= 0 or spec.min_seconds < 0:
        raise ValueError(
            "build_view_dataset: need pairs >= 1, fps > 0 and min_seconds >= 0, got "
            f"pairs={spec.pairs}, fps={spec.fps}, min_seconds={spec.min_seconds}"
        )
    src = Path(mocap_dir) if mocap_dir else shared_mocap_dir()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(spec.seed)
    written = []
    for name in spec.clips:
        clip = load_mocap_keypoints(src / f"{name}.npz")
        kp3, loop = clip.keypoints, None
        if (len(kp3) - 1) / clip.fps < spec.min_seconds:
            kp3, _, loop = loop_keypoints(
                kp3, clip.keypoint_set, clip.fps, seconds=spec.min_seconds
            )
        kp3 = resample(kp3, clip.fps, spec.fps)
        label = clip_skill(name)
        for i in range(spec.pairs):
            mode = spec.camera_modes[int(rng.integers(len(spec.camera_modes)))]
            az, seed = float(rng.uniform(0.0, 360.0)), int(rng.integers(2**31 - 1))
            m = _pair(kp3, clip.keypoint_set, spec.fps, mode, az, seed, spec, label)
            m.meta["source"] = f"{name}.npz"
            if loop is not None:
                m.meta["loop"] = loop
            path = out / f"{name}_{i:04d}.npz"
            save_motion2d(m, path)
            written.append(path)
    manifest = {"spec": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(spec).items()},
                "digest": spec.digest(), "files": len(written)}  # fmt: skip
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return written


def spec_from_config(
    build: Any, seed_key: str = "seed", pairs_key: str = "pairs"
) -> ViewDatasetSpec:
    """A :class:`ViewDatasetSpec` from a ``gen_data.build`` config node."""
    return ViewDatasetSpec(
        clips=tuple(build.clips), pairs=int(build[pairs_key]), seed=int(build[seed_key]), fps=float(build.fps),
        camera_modes=tuple(build.camera_modes), noise_px=float(build.noise_px), drop_prob=float(build.drop_prob),
        min_seconds=float(build.get("min_seconds") or 0.0),
        elevation_range_deg=_range_or_none(build.get("elevation_range_deg")),
    )  # fmt: skip


def _range_or_none(r: Any) -> tuple[float, float] | None:
    """A ``[lo, hi]`` config entry as a float pair (``None`` stays ``None``)."""
    if r is None:
        return None
    lo, hi = (float(x) for x in r)
    if lo > hi:
        raise ValueError(
            f"gen_data.build.elevation_range_deg: expected [lo, hi] with lo <= hi, got {list(r)}"
        )
    return (lo, hi)


def ensure_view_dataset(
    out_dir: str | Path, spec: ViewDatasetSpec, mocap_dir: str | Path | None = None
) -> Path:
    """Build ``out_dir`` unless it already holds a dataset of the same spec.

    Raises:
        ValueError when ``out_dir`` holds a dataset built from a different spec.
    """
    out = Path(out_dir)
    man = out / MANIFEST
    if man.is_file():
        digest = json.loads(man.read_text()).get("digest")
        if digest != spec.digest():
            raise ValueError(
                f"{out}: holds a dataset of another spec ({man}); choose another gen_data.dir or delete it"
            )
        return out
    build_view_dataset(out, spec, mocap_dir)
    return out


def prepare_data(gen_data: Any) -> tuple[Path, Path | None]:
    """Apps' entry: build the ``gen_data`` directories when a ``build`` spec is given.

    Returns:
        ``(train_dir, heldout_dir or None)``.
    """
    train = Path(gen_data.dir)
    held = Path(gen_data.heldout_dir) if gen_data.get("heldout_dir") else None
    build = gen_data.get("build")
    if build:
        ensure_view_dataset(train, spec_from_config(build), build.get("mocap_dir"))
        if held is not None:
            ensure_heldout_views(held, build)
    return train, held


def ensure_heldout_views(held: Path, build: Any) -> Path:
    """Build (once) the held-out views of a ``gen_data.build`` spec (its ``heldout_seed``,
    ``heldout_pairs``) in ``held``; returns ``held``."""
    return ensure_view_dataset(
        held, spec_from_config(build, "heldout_seed", "heldout_pairs"), build.get("mocap_dir")
    )


def main(
    out: Path = typer.Option(Path("runs/gen_data/cmu_views/train"), help="Output folder."),
    pairs: int = typer.Option(64, help="Orthogonal view pairs per clip."),
    seed: int = typer.Option(0, help="Seed of the cameras."),
    fps: float = typer.Option(30.0, help="Frame rate of the written clips."),
    clips: str = typer.Option(
        ",".join(DEFAULT_CLIPS), help="Comma-separated clip stems in --mocap-dir."
    ),
    camera_modes: str = typer.Option(
        "static,tracking,dynamic", help="Comma-separated camera modes."
    ),
    noise_px: float = typer.Option(0.0, help="Std of the Gaussian pixel noise."),
    drop_prob: float = typer.Option(0.0, help="Probability of dropping a keypoint."),
    mocap_dir: Path | None = typer.Option(
        None,
        help="Folder of the clips (default $MIMIC2DM_SHARED/data/mocap, else ../shared/data/mocap).",
    ),
    min_seconds: float = typer.Option(
        0.0, help="Loop clips shorter than this to this length (the dog's single cycles)."
    ),
) -> None:
    """Build a training directory of 2D views of mocap clips (see :func:`build_view_dataset`)."""
    spec = ViewDatasetSpec(
        tuple(clips.split(",")),
        pairs,
        seed,
        fps,
        tuple(camera_modes.split(",")),
        noise_px,
        drop_prob,
        min_seconds,
    )
    files = build_view_dataset(out, spec, mocap_dir)
    print(f"wrote {len(files)} files ({2 * len(files)} views) to {out} (digest {spec.digest()})")


if __name__ == "__main__":
    typer.run(main)
