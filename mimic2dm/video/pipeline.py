"""Video -> 2D motion: detect, track the subject and the ball, estimate poses, clean up, write.

One clip is read twice with PyAV so that no clip is ever held in memory: the first pass
runs the detector on every frame, or on every ``detect_every``-th frame (keeping only
boxes), the tracks are then built over those frames and the subject chosen, and the
second pass crops the subject's box in each frame for the pose model (four rotated crops
per frame with ``rotations``). With ``detect_every > 1`` the second pass first follows the
subject's and the ball's boxes from their detections through the frames in between
(:mod:`mimic2dm.video.follow`, re-detecting when following fails). Keypoints are
then smoothed, short gaps filled and long gaps masked (:mod:`mimic2dm.video.filtering`),
and the clip is written with :func:`~mimic2dm.motion.format.save_motion2d`.

A batch (:func:`extract_videos`) writes ``<out>/<video stem>.npz`` per clip and
``<out>/manifest.json``; clips whose output already exists and validates are skipped (so a
stopped batch resumes where it stopped), and a clip that fails is recorded with its
error while the others go on.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mimic2dm.characters.registry import CHARACTERS, load_character
from mimic2dm.motion.format import (
    CONFIDENCE_THRESHOLD,
    Motion2D,
    MotionFormatError,
    load_motion2d,
    save_motion2d,
)
from mimic2dm.video.detector import Detections, Detector
from mimic2dm.video.filtering import fill_and_smooth, select_rotations
from mimic2dm.video.follow import ClipFollower, FollowConfig, Keyframes
from mimic2dm.video.io import VideoInfo, iter_frames, probe_video
from mimic2dm.video.pose import PoseEstimator
from mimic2dm.video.tracking import Track, select_ball, select_track, track_boxes

EXTRACT_VERSION = 1
"""Recorded in ``meta.extract_version`` of every clip written here."""
ROTATIONS = (0.0, 90.0, 180.0, 270.0)
BALL_CLASS = "sports ball"
MANIFEST = "manifest.json"

Advance = Callable[[int], None]


class ExtractionError(RuntimeError):
    """A clip could not be turned into a 2D motion (the message names the video)."""


@dataclass
class ExtractOptions:
    """Settings of :func:`extract_clip` / :func:`extract_videos`.

    Attributes:
        character: ``humanoid`` (COCO-17, person boxes) or ``dog`` (dog17, dog boxes).
        batch: frames per detector / pose forward pass.
        track_id: follow this track instead of the largest consistent one.
        rotations: Yu 2021 trick, pose on crops turned by 0/90/180/270 degrees (4x cost).
        ball: track the 'sports ball' class and store it as the clip's object.
        max_gap_s: longest gap (seconds) that is interpolated; longer gaps stay masked.
        smooth_sigma: Gaussian smoothing window in frames (0 = none).
        coherence: weight of temporal coherence when choosing rotations.
        random_weights: recorded in ``meta.random_weights`` (models were not trained).
        detect_every: run the detector on every K-th frame and follow the boxes in between
            (1 = every frame; the CLI picks 10 on a CPU, 1 on a GPU).
        follow: re-detection thresholds of the box follower.
        det_threads, pose_threads: torch CPU threads while detecting / estimating poses
            (None = leave torch's setting).
    """

    character: str = "humanoid"
    batch: int = 8
    track_id: int | None = None
    rotations: bool = False
    ball: bool = True
    max_gap_s: float = 0.25
    smooth_sigma: float = 1.0
    coherence: float = 1.0
    random_weights: bool = False
    extra_meta: dict[str, Any] = field(default_factory=dict)
    detect_every: int = 1
    follow: FollowConfig = field(default_factory=FollowConfig)
    det_threads: int | None = None
    pose_threads: int | None = None

    def __post_init__(self) -> None:
        if self.character not in CHARACTERS:
            raise ValueError(
                f"unknown character {self.character!r}; valid: {', '.join(CHARACTERS.names())}"
            )
        if self.batch < 1:
            raise ValueError(f"batch must be >= 1, got {self.batch}")
        if self.detect_every < 1:
            raise ValueError(f"detect_every must be >= 1, got {self.detect_every}")
        for name in ("det_threads", "pose_threads"):
            n = getattr(self, name)
            if n is not None and n < 1:
                raise ValueError(f"{name} must be >= 1 or None, got {n}")


DETECT_EVERY = {"cpu": 10, "cuda": 1}
"""Default ``detect_every`` per device: on a CPU the detector costs ~4 ViTPose-B crops per
frame, so it runs on every 10th frame (1/3 s at 30 fps); on a GPU it is cheap: every frame."""


def subject_of(character: str) -> tuple[str, str]:
    """``(keypoint set, detector class)`` of a registered character, from its CharacterSpec."""
    spec = load_character(character)
    return spec.keypoint_set, spec.detector_class


def default_detect_every(device: str | torch.device) -> int:
    """:data:`DETECT_EVERY` of ``device`` (``cuda:1`` counts as ``cuda``)."""
    return DETECT_EVERY["cuda" if str(device).startswith("cuda") else "cpu"]


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run a stage with ``n`` torch CPU threads (None: unchanged), then restore the setting."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if n:
            torch.set_num_threads(before)


@dataclass
class ClipReport:
    """One manifest row: what happened to one video."""

    clip: str
    video: str
    output: str
    status: str  # "ok" | "skipped" (valid output existed) | "failed"
    frames: int = 0
    fps: float = 0.0
    mean_confidence: float | None = None
    masked_fraction: float | None = None
    filled_fraction: float | None = None
    subject_track: int | None = None
    ball: bool | None = None
    seconds: float = 0.0
    error: str | None = None


def detect_video(
    video: str | os.PathLike,
    detector: Detector,
    batch: int,
    advance: Advance | None = None,
    every: int = 1,
    threads: int | None = None,
) -> tuple[list[Detections], list[int], int]:
    """First pass: detections of every ``every``-th frame, ``batch`` of them per forward.

    Returns:
        ``(detections, frames, T)``: one :data:`Detections` per detected frame, the indices
        of those frames (0, every, 2 every, ...) and the number of decoded frames.
    """
    dets: list[Detections] = []
    keys: list[int] = []
    todo: list[np.ndarray] = []  # copies of key frames waiting for a full batch
    T = 0
    with torch_threads(threads):
        for frames in iter_frames(video, batch):
            for i in range(-T % every, len(frames), every):
                keys.append(T + i)
                todo.append(frames[i] if every == 1 else frames[i].copy())  # free the chunk
            T += len(frames)
            while len(todo) >= batch:
                dets.extend(detector.detect(np.stack(todo[:batch])))
                todo = todo[batch:]
            if advance:
                advance(len(frames))
        if todo:
            dets.extend(detector.detect(np.stack(todo)))
    return dets, keys, T


def estimate_poses(
    video: str | os.PathLike,
    pose: PoseEstimator,
    boxes: np.ndarray,
    opts: ExtractOptions,
    advance: Advance | None = None,
    before: Callable[[np.ndarray, int], None] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Second pass: pose of the subject in every frame that has a box.

    Args:
        boxes: ``[T, 4]`` subject boxes (NaN rows = no subject in that frame).
        before: called as ``before(frames, t0)`` on each decoded chunk before its poses
            are estimated; it may write the chunk's rows of ``boxes`` (box following).

    Returns:
        ``keypoints [T, K, 2]`` (NaN where no box), ``conf [T, K]`` clipped to [0, 1], and
        the chosen rotation in degrees ``[T]``.
    """
    T, K = len(boxes), len(pose.channels)
    rots = ROTATIONS if opts.rotations else (0.0,)
    R = len(rots)
    kps = np.full((T, R, K, 2), np.nan)
    conf = np.zeros((T, R, K))
    t0 = 0
    for frames in iter_frames(video, opts.batch):
        n = len(frames)
        if t0 + n > T:
            raise ExtractionError(
                f"{video}: decoded more frames on the second pass than the first ({t0 + n} > {T})"
            )
        if before is not None:
            before(frames, t0)
        has = np.flatnonzero(np.isfinite(boxes[t0 : t0 + n]).all(1))
        if len(has):
            idx = np.repeat(has, R)
            rot = np.tile(np.asarray(rots), len(has))
            with torch_threads(opts.pose_threads):
                k, s = pose.predict(frames, boxes[t0 + idx], idx, rot)
            kps[t0 + has] = k.reshape(len(has), R, K, 2)
            conf[t0 + has] = np.clip(s, 0.0, 1.0).reshape(len(has), R, K)
        t0 += n
        if advance:
            advance(n)
    if R == 1:
        choice = np.zeros(T, dtype=np.int64)
    else:
        diag = np.linalg.norm(boxes[:, 2:] - boxes[:, :2], axis=1)
        choice = select_rotations(kps, conf, diag, opts.coherence)
    pick = np.arange(T)
    return kps[pick, choice], conf[pick, choice], np.asarray(rots)[choice]


def _ball(dets: list[Detections], keys: list[int], opts: ExtractOptions) -> Track | None:
    """The ball track over the detected frames (None when no ball was seen)."""
    empty = (np.zeros((0, 4)), np.zeros(0))
    balls = [d.get(BALL_CLASS, empty) for d in dets]
    return select_ball(track_boxes(balls, "center", frames=keys, max_missing=_max_missing(opts)))


def _ball_fields(
    boxes: np.ndarray, scores: np.ndarray, fps: float, opts: ExtractOptions
) -> dict[str, np.ndarray]:
    """Object fields of the clip (``[1, T, ...]``) from ball ``boxes [T, 4]``, ``scores [T]``."""
    T = len(boxes)
    corners, conf, _ = fill_and_smooth(
        boxes.reshape(T, 2, 2),
        np.repeat(scores[:, None], 2, 1),
        _max_gap(fps, opts),
        opts.smooth_sigma,
    )
    c = conf[:, 0]
    box = np.where((c > 0)[:, None], corners.reshape(T, 4), np.nan)
    fields = {
        "object_box": box[None],
        "object_center": (0.5 * (box[:, :2] + box[:, 2:]))[None],
        "object_confidence": c[None],
    }
    return fields


def _max_gap(fps: float, opts: ExtractOptions) -> int:
    return max(0, int(round(opts.max_gap_s * fps)))


def _max_missing(opts: ExtractOptions) -> int:
    """Frames a track may miss: 10, and at least one missed detection when detecting every K."""
    return max(10, 2 * opts.detect_every)


def _subject(
    dets: list[Detections], keys: list[int], cls: str, opts: ExtractOptions, video
) -> tuple[Track, list[Track]]:
    people = [d.get(cls, (np.zeros((0, 4)), np.zeros(0))) for d in dets]
    tracks = track_boxes(people, "iou", frames=keys, max_missing=_max_missing(opts))
    try:
        subject = select_track(tracks, opts.track_id)
    except ValueError as e:
        raise ExtractionError(f"{video}: {e}") from None
    if subject is None:
        raise ExtractionError(
            f"{video}: no {cls} detected in any of {len(dets)} detected frames; lower --det-threshold or check the video"
        )
    return subject, tracks


def build_meta(
    video: str | os.PathLike,
    info: VideoInfo,
    subject: Track,
    tracks: list[Track],
    rot_deg: np.ndarray,
    filled: np.ndarray,
    opts: ExtractOptions,
    models: dict[str, Any],
) -> dict[str, Any]:
    """``meta`` of an extracted clip (provenance, settings, tracking summary)."""
    biggest = sorted(tracks, key=lambda tr: -tr.size_score)[:10]
    return {
        "source": str(video),
        "source_format": "video",
        "random_weights": bool(opts.random_weights),
        "character": opts.character,
        "extract_version": EXTRACT_VERSION,
        **models,
        "subject_track": subject.summary(),
        "tracks": [tr.summary() for tr in biggest],
        "num_tracks": len(tracks),
        "rotations": bool(opts.rotations),
        "rotation_counts": {
            str(int(r)): int((rot_deg == r).sum())
            for r in (ROTATIONS if opts.rotations else (0.0,))
        },
        "max_gap_frames": _max_gap(info.fps, opts),
        "smooth_sigma_frames": opts.smooth_sigma,
        "filled_fraction": float(filled.mean()) if filled.size else 0.0,
        **opts.extra_meta,
    }


def extract_clip(
    video: str | os.PathLike,
    detector: Detector,
    pose: PoseEstimator,
    opts: ExtractOptions,
    advance: Advance | None = None,
) -> Motion2D:
    """Turn one video into a single-view :class:`Motion2D` (not written).

    Raises:
        VideoError: unreadable video. ExtractionError: no subject, bad track id.
    """
    info = probe_video(video)
    kset, cls = subject_of(opts.character)
    if pose.keypoint_set != kset:
        raise ValueError(
            f"pose estimator predicts {pose.keypoint_set}, character {opts.character} needs {kset}"
        )
    dets, keys, T = detect_video(
        video, detector, opts.batch, advance, opts.detect_every, opts.det_threads
    )
    subject, tracks = _subject(dets, keys, cls, opts, video)
    ball_track = _ball(dets, keys, opts) if opts.ball else None
    boxes, _ = subject.dense(T)
    follower = None
    if opts.detect_every > 1:
        follower = _follower(T, subject, ball_track, cls, detector, opts)
        boxes = follower.subject_boxes  # filled chunk by chunk during the pose pass
    kps, conf, rot_deg = estimate_poses(
        video, pose, boxes, opts, advance, follower.fill if follower else None
    )
    kps, conf, filled = fill_and_smooth(kps, conf, _max_gap(info.fps, opts), opts.smooth_sigma)
    obj: dict[str, np.ndarray] = {}
    if ball_track is not None:
        if follower is not None:
            ball_boxes, ball_scores = follower.ball_boxes, follower.ball_scores
        else:
            ball_boxes, ball_scores = ball_track.dense(T)
        obj = _ball_fields(ball_boxes, ball_scores, info.fps, opts)
    models = {**detector.info, **pose.info, "det_threshold": detector.threshold}
    meta = build_meta(video, info, subject, tracks, rot_deg, filled, opts, models)
    meta["detect_every"] = opts.detect_every
    meta["detected_frames"] = len(keys) + (follower.redetections if follower else 0)
    if follower is not None:
        meta["follow"] = follower.summary()
    meta["ball_found"] = ball_track is not None
    if ball_track is not None:
        meta["ball_track"] = ball_track.summary()
    return Motion2D(
        keypoints=kps[None].astype(np.float32),
        confidence=conf[None].astype(np.float32),
        keypoint_set=kset,
        fps=info.fps,
        image_size=info.image_size,
        meta=meta,
        **{k: v.astype(np.float32) for k, v in obj.items()},
    )


def _follower(
    T: int,
    subject: Track,
    ball: Track | None,
    cls: str,
    detector: Detector,
    opts: ExtractOptions,
) -> ClipFollower:
    """A :class:`ClipFollower` started from the subject's and the ball's detections."""

    def keys(tr: Track) -> Keyframes:
        return {t: (b, s) for t, b, s in zip(tr.frames, tr.boxes, tr.scores, strict=True)}

    def detect(frames: np.ndarray) -> list[Detections]:
        with torch_threads(opts.det_threads):
            return detector.detect(frames)

    return ClipFollower(
        T, keys(subject), keys(ball) if ball is not None else None, cls, detect, opts.follow
    )


def clip_name(video: str | os.PathLike) -> str:
    """Output name of a video: its file name without the extension."""
    return Path(video).stem


def _report_from_motion(rep: ClipReport, m: Motion2D) -> ClipReport:
    rep.frames, rep.fps = m.num_frames, float(m.fps)
    rep.mean_confidence = float(m.confidence.mean())
    rep.masked_fraction = float(1.0 - m.mask(CONFIDENCE_THRESHOLD).mean())
    rep.filled_fraction = m.meta.get("filled_fraction")
    rep.subject_track = (m.meta.get("subject_track") or {}).get("id")
    rep.ball = m.meta.get("ball_found")
    return rep


def existing_output(path: Path) -> Motion2D | None:
    """The clip at ``path`` if it exists and validates (resume), else None."""
    if not path.is_file():
        return None
    try:
        return load_motion2d(path)
    except MotionFormatError:
        return None


def write_manifest(out_dir: str | os.PathLike, reports: Sequence[ClipReport]) -> Path:
    """Merge ``reports`` into ``<out_dir>/manifest.json`` (rows keyed by clip), atomically."""
    path = Path(out_dir) / MANIFEST
    rows: dict[str, dict] = {}
    if path.is_file():
        try:
            rows = {r["clip"]: r for r in json.loads(path.read_text()).get("clips", [])}
        except (OSError, json.JSONDecodeError, KeyError, TypeError, AttributeError):
            rows = {}  # a damaged manifest is rebuilt from this run
    for r in reports:
        rows[r.clip] = asdict(r)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(
        json.dumps(
            {"version": 1, "clips": sorted(rows.values(), key=lambda r: r["clip"])}, indent=2
        )
        + "\n"
    )
    os.replace(tmp, path)
    return path


def check_names(videos: Sequence[str | os.PathLike]) -> None:
    """Two videos with the same stem would write the same file: refuse up front."""
    seen: dict[str, str] = {}
    for v in videos:
        name = clip_name(v)
        if name in seen and seen[name] != str(v):
            raise ValueError(f"videos {seen[name]} and {v} would both write {name}.npz; rename one")
        seen[name] = str(v)


def run_one(
    video: str | os.PathLike,
    out_dir: Path,
    detector: Detector,
    pose: PoseEstimator,
    opts: ExtractOptions,
    advance: Advance | None = None,
) -> tuple[ClipReport, Motion2D | None]:
    """Extract (or skip) one video of a batch; any failure is returned, not raised."""
    name = clip_name(video)
    out = out_dir / f"{name}.npz"
    rep = ClipReport(name, str(video), str(out), "ok")
    t0 = time.perf_counter()
    done = existing_output(out)
    if done is not None:
        rep.status = "skipped"
        return _report_from_motion(rep, done), done
    try:
        m = extract_clip(video, detector, pose, opts, advance)
        save_motion2d(m, out)
    except Exception as e:  # noqa: BLE001 - one bad video must not stop the batch
        rep.status, rep.error = "failed", f"{type(e).__name__}: {e}"
        rep.seconds = time.perf_counter() - t0
        return rep, None
    rep.seconds = time.perf_counter() - t0
    return _report_from_motion(rep, m), m


def _frame_total(video: str | os.PathLike) -> int | None:
    try:
        n = probe_video(video).num_frames
    except Exception:  # noqa: BLE001 - the clip's own run reports the problem
        return None
    return 2 * n if n > 0 else None  # two passes: detection, pose


def extract_videos(
    videos: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    detector: Detector,
    pose: PoseEstimator,
    opts: ExtractOptions,
    preview: str | os.PathLike | None = None,
    show_progress: bool = True,
    console=None,
) -> list[ClipReport]:
    """Extract a batch: one ``<clip>.npz`` per video plus ``manifest.json`` in ``out_dir``.

    Clips with a valid output are skipped (resume); failures are recorded and the batch
    goes on; the manifest is rewritten after every clip so an interrupted batch keeps it.

    Args:
        preview: ``OUT.mp4`` (see :func:`~mimic2dm.video.preview.preview_path`) or None.
        show_progress: draw a rich progress bar (clips and frames) on ``console``.

    Returns:
        One :class:`ClipReport` per video, in input order.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from mimic2dm.video.preview import preview_path, render_preview

    check_names(videos)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    reports: list[ClipReport] = []
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, disable=not show_progress) as progress:
        overall = progress.add_task("clips", total=len(videos))
        for video in videos:
            task = progress.add_task(f"  {clip_name(video)} (frames x2)", total=_frame_total(video))
            rep, m = run_one(
                video, out, detector, pose, opts, lambda n, t=task: progress.advance(t, n)
            )
            target = (
                preview_path(preview, rep.clip, len(videos) == 1) if preview is not None else None
            )
            if (
                target is not None
                and m is not None
                and not (rep.status == "skipped" and target.is_file())
            ):
                try:
                    render_preview(video, m, target, opts.batch)
                except Exception as e:  # noqa: BLE001 - the clip itself is fine; say so
                    rep.error = f"preview failed: {type(e).__name__}: {e}"
            reports.append(rep)
            write_manifest(out, [rep])
            progress.remove_task(task)
            progress.advance(overall)
    return reports
