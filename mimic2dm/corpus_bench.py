"""``mimic2dm bench corpus``: a tracker over every window x evaluation camera of the corpus.

Each window of the corpus manifest (``conf/data/corpus_manifest.json``, written by
``mimic2dm data corpus``) is made the way training makes it (``synth_motion``: cut,
grounded, 30 fps) and projected through the manifest's evaluation cameras (static, fixed;
:func:`mimic2dm.motion.corpus.fixed_camera_views`) into one clip of one view per camera,
cached in ``--out``. The tracker runs deterministically from each view's first frame with
``mimic2dm eval``'s machinery; a pair succeeds when the whole window's largest 2D error at
1080p is at most 100 px (:data:`mimic2dm.metrics.SUCCESS_THRESHOLD_PX`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from mimic2dm.utils.cli import fail
from mimic2dm.utils.reporting import (
    JsonOption,
    human_console,
    json_to_stdout,
    library_output_to_log,
    write_json_report,
)

TARGET_SUCCESS = 0.8
"""The success fraction over all window x camera pairs a generalist tracker should reach."""
EVAL_BATCH_WINDOWS = 8
"""Windows evaluated in one engine (8 cameras each: 64 environments)."""


def select_windows(manifest: dict, names: list[str] | None = None, max_windows: int | None = None) -> list[dict]:  # fmt: skip
    """The manifest's windows named in ``names`` (all when None), the first ``max_windows``.

    Raises:
        ValueError: a name that is not a window of the manifest.
    """
    from mimic2dm.motion.corpus import manifest_windows

    windows = manifest_windows(manifest)
    if names:
        by_name = {w["name"]: w for w in windows}
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise ValueError(f"--windows: {', '.join(unknown)} not in the manifest (e.g. {windows[0]['name']})")  # fmt: skip
        windows = [by_name[n] for n in names]
    return windows[:max_windows] if max_windows else windows


def window_views(window: dict, manifest: dict, out_dir: Path, shared: Path | None = None) -> Path:
    """``out_dir/<window>.npz``: the window seen through its evaluation cameras (made once;
    remade when the cached file's cameras differ from the manifest's)."""
    from mimic2dm.app.data import synth_motion
    from mimic2dm.motion.corpus import fixed_camera_views, task_camera_config
    from mimic2dm.motion.format import load_motion2d, save_motion2d
    from mimic2dm.utils.paths import mocap_dir

    path = out_dir / f"{window['name']}.npz"
    if path.is_file() and load_motion2d(path).meta.get("cameras") == window["eval_cameras"]:
        return path
    mocap = (shared / "data" / "mocap") if shared else mocap_dir()
    recipe = {"mocap": str(mocap / window["source"]), "start": window["cut"]["start"],
              "end": window["cut"]["end"], "fps": manifest["fps"], "ground": True}  # fmt: skip
    clip, kp, _, rate, meta = synth_motion(recipe, f"window {window['name']}")
    width, height = manifest["image_size"]
    cfg = task_camera_config()
    cfg.width, cfg.height = int(width), int(height)
    labels = {"window": window["name"], "skill": window["skill"]}
    m = fixed_camera_views(kp, clip.keypoint_set, rate, window["eval_cameras"], cfg, labels, meta)
    save_motion2d(m, path)
    return path


def bench_corpus(checkpoint: str, manifest_path: str | Path, names: list[str] | None = None,
                 max_windows: int | None = None, out_dir: str | Path = "runs/bench_corpus",
                 shared: Path | None = None, log=None) -> dict[str, Any]:  # fmt: skip
    """Evaluate ``checkpoint`` on every (window, evaluation camera) pair; returns the report.

    Returns:
        ``{checkpoint, manifest, pairs: [{window, camera, success, error_2d_px,
        max_error_2d_px, ...}], windows: [{name, success_fraction, ...}], success_fraction,
        successes, pair_count, error_2d_px, max_error_2d_px, target, meets_target}``.
    """
    from mimic2dm.eval import evaluate
    from mimic2dm.rl.policy import load_policy

    manifest = json.loads(Path(manifest_path).read_text(encoding="utf-8"))
    windows = select_windows(manifest, names, max_windows)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    policy = load_policy(checkpoint)
    if policy.env_spec.task != "tracking2d" or policy.env_spec.character != "humanoid":
        raise ValueError(f"{checkpoint}: a {policy.env_spec.task} {policy.env_spec.character} checkpoint, expected a humanoid tracking2d tracker")  # fmt: skip
    pairs: list[dict] = []
    for i in range(0, len(windows), EVAL_BATCH_WINDOWS):
        batch = windows[i : i + EVAL_BATCH_WINDOWS]
        files = [window_views(w, manifest, out_dir, shared) for w in batch]
        report = evaluate(policy, files, 1)
        by_file = {p.stem: w for p, w in zip(files, batch, strict=True)}
        for s in report["sequences"]:
            w, v = by_file[s["clip"]], s["views"][0]
            pairs.append({"window": w["name"], "camera": v, **w["eval_cameras"][v],
                          "frames": w["frames"], "success": bool(s["success"]),
                          "error_2d_px": s["error_2d_px"], "max_error_2d_px": s["max_error_2d_px"],
                          "initial_state": s["initial_state"]})  # fmt: skip
        if log:
            done = min(i + EVAL_BATCH_WINDOWS, len(windows))
            ok = sum(p["success"] for p in pairs)
            log(f"{done}/{len(windows)} windows: {ok}/{len(pairs)} pairs succeed")
    return summarize(pairs, windows, str(checkpoint), str(manifest_path))


def summarize(pairs: list[dict], windows: list[dict], checkpoint: str, manifest: str) -> dict:
    """The report of :func:`bench_corpus` from its per-pair results."""
    per_window = []
    for w in windows:
        ps = [p for p in pairs if p["window"] == w["name"]]
        per_window.append({"name": w["name"], "frames": w["frames"], "weight": w["weight"],
                           "successes": sum(p["success"] for p in ps), "pairs": len(ps),
                           "success_fraction": sum(p["success"] for p in ps) / len(ps),
                           "error_2d_px": sum(p["error_2d_px"] for p in ps) / len(ps),
                           "max_error_2d_px": max(p["max_error_2d_px"] for p in ps)})  # fmt: skip
    n_ok = sum(p["success"] for p in pairs)
    fraction = n_ok / len(pairs)
    return {
        "checkpoint": checkpoint,
        "manifest": manifest,
        "threshold_px": _threshold(),
        "pair_count": len(pairs),
        "successes": n_ok,
        "success_fraction": fraction,
        "target": TARGET_SUCCESS,
        "meets_target": fraction >= TARGET_SUCCESS,
        "error_2d_px": sum(p["error_2d_px"] for p in pairs) / len(pairs),
        "max_error_2d_px": max(p["max_error_2d_px"] for p in pairs),
        "windows": per_window,
        "pairs": pairs,
    }


def _threshold() -> float:
    from mimic2dm.metrics import SUCCESS_THRESHOLD_PX

    return SUCCESS_THRESHOLD_PX


def _table(result: dict):
    from rich.table import Table

    cams = max((p["camera"] for p in result["pairs"]), default=-1) + 1
    t = Table(title=f"window x camera: max 2D error at 1080p (px), x = over {result['threshold_px']:g}")  # fmt: skip
    t.add_column("window")
    for c in range(cams):
        t.add_column(f"cam {c}", justify="right")
    t.add_column("success", justify="right")
    t.add_column("mean px", justify="right")
    cells = {(p["window"], p["camera"]): p for p in result["pairs"]}
    for w in result["windows"]:
        row = [w["name"]]
        for c in range(cams):
            p = cells.get((w["name"], c))
            row.append(
                "" if p is None else f"{p['max_error_2d_px']:.0f}{'' if p['success'] else ' x'}"
            )
        row += [f"{w['successes']}/{w['pairs']}", f"{w['error_2d_px']:.1f}"]
        t.add_row(*row)
    t.caption = (f"{result['successes']}/{result['pair_count']} pairs succeed "
                 f"({100 * result['success_fraction']:.1f} %, target {100 * result['target']:.0f} %); "
                 f"mean 2D error {result['error_2d_px']:.1f} px")  # fmt: skip
    return t


def bench_corpus_command(
    checkpoint: str = typer.Argument(
        ..., help="Tracker checkpoint (.pt) written by mimic2dm-train."
    ),  # fmt: skip
    manifest: str = typer.Option(
        "", help="Corpus manifest [default: conf/data/corpus_manifest.json]."
    ),  # fmt: skip
    windows: str = typer.Option("", help="Comma-separated window names (default: all)."),
    max_windows: int = typer.Option(0, min=0, help="Only the first N windows (0: all)."),
    out: str = typer.Option(
        "runs/bench_corpus", "--out", help="Where the windows' evaluation views are cached."
    ),  # fmt: skip
    shared: Path = typer.Option(
        None, help="Shared data folder [default: $MIMIC2DM_SHARED or ../shared]."
    ),  # fmt: skip
    json_out: JsonOption = None,
) -> None:
    """Success of a tracker over every corpus window x evaluation camera (the 8 static cameras
    of the manifest), from each view's first frame; table and JSON (target: 80 % of pairs)."""
    from mimic2dm.motion.corpus import DEFAULT_MANIFEST
    from mimic2dm.utils.rundir import check_writable, error_line

    names = [n.strip() for n in windows.split(",") if n.strip()] or None
    console = human_console(json_out)
    try:
        if json_out and not json_to_stdout(json_out):
            check_writable(json_out, "--json")
        with library_output_to_log("bench"):
            result = bench_corpus(checkpoint, manifest or DEFAULT_MANIFEST, names, max_windows or None,
                                  out, shared, log=lambda s: console.print(s, markup=False))  # fmt: skip
    except (ValueError, OSError, KeyError) as e:
        fail(error_line(e))
    console.print(_table(result))
    write_json_report(result, json_out)
