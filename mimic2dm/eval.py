"""``mimic2dm eval``: run a trained policy deterministically and report its task's metrics.

Task-agnostic: the checkpoint names its task, and the task's registry entry evaluates
(for ``tracking2d``: every clip and view, metrics of docs/design.md section 10; see
:mod:`mimic2dm.tasks.tracking2d.evaluation`).
"""

from __future__ import annotations

from pathlib import Path

from mimic2dm.tasks.registry import load_task


def evaluate(checkpoint, data: list[str | Path], views: int | str | list[int] = 1, json_out=None, picture_out=None,
             video_out=None) -> dict:  # fmt: skip
    """Evaluate a policy on the files ``data``; returns (and optionally writes) the report.

    Args:
        checkpoint: a checkpoint path, or a loaded policy (``.act(obs, deterministic)``, ``.env_spec``).
        data: reference files the task evaluates on (2D-motion files with cameras for tracking).
        views: views per sequence (1: view-agnostic 2D tracking; >= 2: view aggregation); several
            counts (``[1, 2, 4]`` or ``"1,2,4"``) give ``{"views": [...], "by_views": {"1": report, ...}}``.
        json_out, picture_out, video_out: optional output paths (``json_out`` may be ``-``: stdout).
            The video is skipped with one warning where no OpenGL back-end works
            (:func:`mimic2dm.render.gl_backend`; callers that need it check that first).

    Raises:
        ValueError: the policy's task has no evaluation, or an output path is unusable
            (:func:`check_outputs`, checked first).
    """
    check_outputs(None if str(json_out) == "-" else json_out, picture_out, video_out)
    if hasattr(checkpoint, "act"):
        policy, name = checkpoint, type(checkpoint).__name__
    else:
        from mimic2dm.rl.policy import load_policy

        policy, name = load_policy(checkpoint), str(checkpoint)
    entry = load_task(policy.env_spec.task)
    if entry.evaluate is None:
        raise ValueError(
            f"task {entry.name!r} has no evaluation (its registry entry sets no `evaluate`)"
        )
    counts = parse_views(views)
    if len(counts) == 1:
        return entry.evaluate(policy, data, counts[0], json_out, picture_out, video_out, name=name)
    # several view counts: one report each (pictures and video of the first), in one JSON
    by_views = {}
    for i, v in enumerate(counts):
        by_views[str(v)] = entry.evaluate(policy, data, v, None, picture_out if i == 0 else None,
                                          video_out if i == 0 else None, name=name)  # fmt: skip
    report = {"checkpoint": name, "views": counts, "by_views": by_views}
    from mimic2dm.utils.reporting import write_json_report

    write_json_report(report, json_out or None)
    return report


VIDEO_EXTENSIONS = (".mp4", ".mov", ".mkv", ".avi", ".webm")
"""Containers ffmpeg (imageio) writes the rollout video in."""


def check_outputs(json_out=None, picture_out=None, video_out=None) -> None:
    """Refuse ``--json`` / ``--picture`` / ``--video`` paths that could not be written, before
    any work: a wrong extension (``--picture out.jpgx``, ``--picture -``: no format from the
    name), or a place that cannot be written (naming the option, path and errno).

    Raises:
        ConfigError: a wrong extension, naming the option and what it expects.
        RunDirError: an unwritable place (``--json /file/x.json: [Errno 20] Not a directory``).
    """
    from PIL import Image

    from mimic2dm.utils.rundir import check_writable
    from mimic2dm.utils.validate import ConfigError

    Image.init()
    pictures = sorted(e for e, f in Image.registered_extensions().items() if f in Image.SAVE)
    rules = [
        ("--json", json_out, (".json",), "a .json file name, or - for stdout"),
        ("--picture", picture_out, tuple(pictures), "a picture file name ending in .png or .jpg (an image format Pillow writes)"),
        ("--video", video_out, VIDEO_EXTENSIONS, f"a video file name ending in {', '.join(VIDEO_EXTENSIONS)}"),
    ]  # fmt: skip
    for option, value, extensions, expected in rules:
        if value is None or (option == "--json" and str(value) == "-"):
            continue
        if Path(str(value)).suffix.lower() not in extensions:
            raise ConfigError(option, str(value), expected)
        check_writable(value, option)


def parse_views(views) -> list[int]:
    """View counts from ``3``, ``[1, 2]`` or ``"1,2,4"`` (each >= 1, in the order given).

    Raises:
        ValueError: naming ``--views`` and what it expects.
    """
    items = str(views).split(",") if isinstance(views, (str, int)) else list(views)
    try:
        counts = [int(str(x).strip()) for x in items]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1 or len(set(counts)) != len(counts):
        raise ValueError(f"--views {views!r}: expected distinct view counts >= 1, e.g. 1 or 1,2,4")
    return counts
