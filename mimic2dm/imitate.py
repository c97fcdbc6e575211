"""``mimic2dm imitate``: from a video or 2D keypoints to a character that imitates them.

One command for the whole chain, with only what a video gives (no camera, no 3D):

1. ``input``: videos go through ``mimic2dm extract`` (ViTPose keypoints); 2D clips
   (``.npz``) are checked against the character, the chosen views kept, and cameras and
   3D fields stripped (a synthetic clip's ground truth then only scores preprocessing).
2. ``preprocess``: camera (focal unknown), 3D motion and per-frame initial states
   (``mimic2dm preprocess``; several views are estimated jointly).
3. ``train``: the 2D tracker with the shipped defaults for ``--minutes`` of training,
   evaluated every ``minutes / 10`` for the time to first success.
4. ``evaluate``: the last checkpoint, deterministically from each clip's first frame:
   ``eval.json``, ``overlay.png`` and ``rollout.mp4`` (reference keypoints over the
   simulated character; the video is skipped, and said so, without an OpenGL back-end).

Everything goes into ``--out DIR``: ``input/``, ``preprocess/``, ``train/`` (the run
directory), the evaluation files and ``report.json`` (every stage's figures, times and
settings). ``DIR/imitate.json`` records the finished stages: Ctrl-C (or SIGTERM) leaves a
directory that ``--resume`` continues (training resumes from its last checkpoint).
"""

from __future__ import annotations

import json
import shutil
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from mimic2dm.utils.reporting import JsonOption, human_console, write_json_report

VIDEO_SUFFIXES = (".mp4", ".mkv", ".avi", ".mov", ".webm", ".m4v")
STAGES = ("input", "preprocess", "train", "evaluate")
STATE_FILE = "imitate.json"
EVALS_PER_RUN = 10
"""Evaluations during training (time to first success), evenly over the budget."""


class ImitateError(Exception):
    """Bad input or settings: one line for the user, exit 1."""


@dataclass
class ImitateSettings:
    """What a run of ``imitate`` was asked to do (saved in ``imitate.json``)."""

    inputs: list[str]
    character: str
    minutes: float = 10.0
    views: list[int] | None = None
    seed: int = 0
    num_envs: int | None = None
    overrides: list[str] = field(default_factory=list)
    pose_model: str | None = None
    detector: str = "rtdetr-r50"
    random_weights: bool = False
    heldout: str | None = None
    stance: bool = False
    level_roll: bool = False

    def same_job(self, other: ImitateSettings) -> list[str]:
        """Fields that differ in a way ``--resume`` cannot continue (minutes may grow)."""
        keys = ("inputs", "character", "views", "seed", "num_envs", "overrides", "pose_model",
                "detector", "random_weights", "heldout", "stance", "level_roll")  # fmt: skip
        return [k for k in keys if getattr(self, k) != getattr(other, k)]


# ---------------------------------------------------------------------------- state
def _load_state(out: Path) -> dict | None:
    path = out / STATE_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ImitateError(f"{path}: cannot be read ({e}); remove it to start again") from None


def _save_state(out: Path, state: dict) -> None:
    """Atomic: a stop mid-write leaves the previous state."""
    tmp = out / f".{STATE_FILE}.tmp"
    tmp.write_text(json.dumps(state, indent=2, default=str))
    tmp.replace(out / STATE_FILE)


def _start_state(out: Path, settings: ImitateSettings, resume: bool) -> dict:
    """The run's state: new (refusing a directory that holds another run) or resumed."""
    from mimic2dm.utils.rundir import LOCK_NAME

    state = _load_state(out)
    if state is None:
        held = out.exists() and any(p.name != LOCK_NAME for p in out.iterdir())
        if resume and held:
            raise ImitateError(f"--resume: {out} holds no imitate run ({STATE_FILE} missing)")
        if not resume and held:
            raise ImitateError(
                f"--out {out}: the directory is not empty; choose another or remove it"
            )
        return {"settings": asdict(settings), "stages": {}}
    if not resume:
        raise ImitateError(
            f"--out {out}: holds an imitate run; pass --resume to continue it or choose another --out"
        )
    before = ImitateSettings(**state["settings"])
    changed = before.same_job(settings)
    if changed:
        raise ImitateError(f"--resume: {', '.join(changed)} differ from the run in {out} "
                           f"({', '.join(f'{k}={getattr(before, k)!r}' for k in changed)})")  # fmt: skip
    state["settings"] = asdict(settings)  # the budget may have grown
    return state


# ---------------------------------------------------------------------------- checks
def parse_views(text: str | None) -> list[int] | None:
    """``"0,3"`` -> ``[0, 3]`` (distinct, >= 0); None stays None."""
    if text is None:
        return None
    try:
        views = [int(v) for v in text.split(",") if v.strip() != ""]
    except ValueError:
        views = []
    if not views or min(views) < 0 or len(set(views)) != len(views):
        raise typer.BadParameter(
            f"{text!r}: expected distinct view indices >= 0, e.g. 0 or 0,4", param_hint="--view"
        )
    return views


def check_inputs(inputs: list[Path], character: str, views: list[int] | None) -> list[dict]:
    """Every input, before any work: kind (``video`` | ``clip``) and what it holds.

    Raises:
        ImitateError: a missing file, an unknown format, a clip of another character's
            keypoint set, views the clip lacks, or two inputs with one name.
    """
    from mimic2dm.characters.registry import load_character
    from mimic2dm.motion.format import MotionFormatError, load_motion2d

    kset = load_character(character).keypoint_set
    out, stems = [], set()
    for path in inputs:
        if not path.is_file():
            raise ImitateError(f"{path}: no such file")
        if path.stem in stems:
            raise ImitateError(f"{path}: another input has the name {path.stem!r}; rename one")
        stems.add(path.stem)
        suffix = path.suffix.lower()
        if suffix in VIDEO_SUFFIXES:
            out.append({"path": str(path), "kind": "video"})
            continue
        if suffix != ".npz":
            raise ImitateError(f"{path}: expected a video ({', '.join(VIDEO_SUFFIXES)}) or a 2D clip "
                               "(.npz); import other formats with `mimic2dm data import-...` first")  # fmt: skip
        try:
            m = load_motion2d(path)
        except MotionFormatError as e:
            raise ImitateError(str(e)) from None
        if m.keypoint_set != kset:
            raise ImitateError(f"{path}: field 'keypoint_set' is {m.keypoint_set!r}, expected "
                               f"{kset!r} for --character {character}")  # fmt: skip
        if views is not None and max(views) >= m.num_views:
            raise ImitateError(
                f"--view {','.join(map(str, views))}: {path} has views 0..{m.num_views - 1}"
            )
        if views is None and m.num_views > 1:
            raise ImitateError(
                f"{path}: field 'keypoints' has {m.num_views} views; choose them with --view (e.g. --view 0)"
            )
        out.append(
            {"path": str(path), "kind": "clip", "views": m.num_views, "frames": m.num_frames}
        )
    return out


def check_heldout(path: Path, items: list[dict], s: ImitateSettings) -> None:
    """``--heldout``: a preprocessed clip of every view of the one input clip's recording."""
    from mimic2dm.motion.format import MotionFormatError, load_motion2d

    if len(items) != 1 or items[0]["kind"] != "clip" or not s.views:
        raise ImitateError("--heldout: needs one input clip and its tracked views (--view)")
    try:
        ref = load_motion2d(path)
    except MotionFormatError as e:
        raise ImitateError(str(e)) from None
    if not ref.has_cameras or ref.est_keypoints3d is None:
        raise ImitateError(f"{path}: field 'camera_R' or 'est_keypoints3d' is missing, expected a clip "
                           "preprocessed from all its views (`mimic2dm preprocess CLIP`)")  # fmt: skip
    if ref.num_views != items[0]["views"] or ref.num_frames != items[0]["frames"]:
        raise ImitateError(f"{path}: field 'keypoints' has {ref.num_views} views x {ref.num_frames} frames, "
                           f"expected {items[0]['views']} x {items[0]['frames']} like {items[0]['path']}")  # fmt: skip
    if len(s.views) >= ref.num_views:
        raise ImitateError("--heldout: every view is tracked, none is held out")


def _check_writable(out: Path) -> None:
    from mimic2dm.utils.rundir import RunDirError, check_writable

    try:
        check_writable(out, "--out", is_dir=True)
    except RunDirError as e:
        raise ImitateError(str(e)) from None


# ---------------------------------------------------------------------------- stages
def _select_views(m, views: list[int] | None):
    """The clip with only ``views`` (in that order), as a video gives it."""
    from mimic2dm.preprocess.clipio import select_views, strip_clip

    return strip_clip(select_views(m, views) if views else m, m.meta.get("source"))


def stage_input(out: Path, items: list[dict], s: ImitateSettings, progress: bool) -> dict:
    """2D clips in ``OUT/input`` (videos extracted, clips' views selected and stripped)."""
    from mimic2dm.motion.format import load_motion2d, save_motion2d

    dest = out / "input"
    dest.mkdir(parents=True, exist_ok=True)
    videos = [Path(i["path"]) for i in items if i["kind"] == "video"]
    if videos:
        extract_videos_to(videos, dest, s, progress)
    clips, gts = [], []
    for item in items:
        path = Path(item["path"])
        target = dest / f"{path.stem}.npz"
        if item["kind"] == "clip":
            m = load_motion2d(path)
            save_motion2d(_select_views(m, s.views), target)
            # ground truth of a synthetic clip (all its views kept): only preprocessing's
            # accuracy report uses it
            if (
                m.has_cameras
                and m.keypoints3d is not None
                and s.views in (None, list(range(m.num_views)))
            ):
                gts.append(str(path))
        clips.append(str(target))
    rows = []
    for c in clips:
        m = load_motion2d(c)
        rows.append({"clip": c, "views": m.num_views, "frames": m.num_frames, "fps": m.fps,
                     "seconds": m.num_frames / m.fps, "image_size": list(m.image_size),
                     "masked_fraction": float(1.0 - m.mask().mean())})  # fmt: skip
    return {"clips": clips, "ground_truth": gts if len(gts) == len(clips) else [], "rows": rows}


def load_video_models(s: ImitateSettings):
    """``(detector, pose estimator)`` for the ``input`` stage, as ``mimic2dm extract`` loads them.

    Raises:
        ImitateError: a model that cannot be found or loaded (the message says how to fix it).
    """
    from mimic2dm.characters.registry import load_character
    from mimic2dm.video.detector import DETECTORS, load_detector
    from mimic2dm.video.hub import check_available
    from mimic2dm.video.pose import POSE_MODELS, ModelLoadError, load_pose_estimator

    pose_model = s.pose_model or load_character(s.character).pose_model
    try:
        check_available("detector", s.detector, DETECTORS, s.random_weights)
        check_available("pose model", pose_model, POSE_MODELS, s.random_weights)
        det = load_detector(s.detector, s.random_weights, 0.0 if s.random_weights else 0.3)
        pose = load_pose_estimator(pose_model, load_character(s.character).keypoint_set,
                                   s.random_weights)  # fmt: skip
    except ModelLoadError as e:
        raise ImitateError(str(e)) from None
    return det, pose


def extract_videos_to(videos: list[Path], dest: Path, s: ImitateSettings, progress: bool) -> None:
    """Videos -> 2D clips in ``dest`` (``mimic2dm extract`` with its defaults)."""
    from rich.console import Console

    from mimic2dm.video.pipeline import ExtractOptions, default_detect_every, extract_videos

    det, pose = load_video_models(s)
    opts = ExtractOptions(character=s.character, random_weights=s.random_weights,
                          detect_every=default_detect_every("cpu"))  # fmt: skip
    reports = extract_videos(videos, dest, det, pose, opts, None, progress, Console(stderr=True))
    failed = [r for r in reports if r.status == "failed"]
    if failed:
        raise ImitateError("; ".join(f"{r.video}: {r.error}" for r in failed))


def stage_preprocess(out: Path, inputs: dict, s: ImitateSettings, progress: bool) -> dict:
    """``mimic2dm preprocess`` on every input clip (unknown camera and focal)."""
    from mimic2dm.preprocess.cli import preprocess_cmd

    dest = out / "preprocess"
    report = dest / "report.json"
    gts = [Path(g) for g in inputs["ground_truth"]] or None
    # every view of the input clips (the chosen ones) is fitted jointly
    preprocess_cmd(clips=[Path(c) for c in inputs["clips"]], out=dest, character=s.character,
                   gt=gts, progress=progress, json_out=str(report), stance=s.stance,
                   level_roll=s.level_roll)  # fmt: skip
    rep = json.loads(report.read_text())
    return {"clips": [r["out"] for r in rep["clips"]], "report": str(report), "rows": rep["clips"]}


def train_overrides(
    clips: list[str], s: ImitateSettings, run_dir: Path, num_views: int
) -> list[str]:
    """The tracker config of the ``train`` stage: the shipped defaults plus the run's settings."""
    return [
        "data=files", f"data.clips=[{','.join(clips)}]", f"character={s.character}",
        f"run_dir={run_dir}", f"seed={s.seed}", "train.max_epochs=100000000",
        f"train.max_seconds={s.minutes * 60:.3f}",
        *([f"task.num_views={num_views}"] if num_views > 1 else []),
        *([f"train.num_envs={s.num_envs}"] if s.num_envs else []),
        *s.overrides,
    ]  # fmt: skip


def stage_train(out: Path, pre: dict, s: ImitateSettings) -> dict:
    """Train (or resume) the tracker; time to first success from periodic evaluations."""
    from mimic2dm.learn_bench import learn_one
    from mimic2dm.train import compose_config

    run_dir = out / "train"
    num_views = len(s.views) if s.views else 1
    overrides = train_overrides(pre["clips"], s, run_dir, num_views)
    resumed = (run_dir / "checkpoints" / "last.pt").is_file()
    # a resumed run keeps its saved config; only the budget may change
    budget = [f"train.max_seconds={s.minutes * 60:.3f}"] if resumed else []
    cfg = compose_config(overrides + ([f"resume={run_dir}"] if resumed else []))
    every = max(5.0, s.minutes * 60 / EVALS_PER_RUN)
    res = learn_one(
        "files", s.seed, s.minutes, run_dir, every, [], cfg=cfg, resume_overrides=budget
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    return {
        "run_dir": str(run_dir), "minutes": s.minutes, "checkpoint": res["checkpoint"],
        "epochs": res["epochs"],
        "frames": res["frames"], "wall_s": summary.get("wall_s"),
        "samples_per_s": summary.get("samples_per_s"),
        "episode_length": summary.get("episode_length"), "resumed": resumed,
        "interrupted": bool(summary.get("interrupted")),
        "time_to_first_success_s": res["time_to_first_success_s"], "evals": res["evals"],
        "curve": res["curve"],
    }  # fmt: skip


def stage_evaluate(out: Path, pre: dict, train: dict, s: ImitateSettings) -> dict:
    """The last checkpoint on every clip from its first frame: JSON, overlay, video."""
    from mimic2dm.eval import evaluate
    from mimic2dm.render import gl_backend, no_gl_message
    from mimic2dm.utils.reporting import library_output_to_log

    video = out / "rollout.mp4" if gl_backend() is not None else None
    num_views = len(s.views) if s.views else 1
    with library_output_to_log("eval"):
        rep = evaluate(train["checkpoint"], pre["clips"], num_views, out / "eval.json",
                       out / "overlay.png", video)  # fmt: skip
    if s.heldout:
        rep["heldout_views"] = heldout_view_errors(train["checkpoint"], pre["clips"][0], s.heldout,
                                                   s.views or [0])  # fmt: skip
    files = {"eval": str(out / "eval.json"), "overlay": str(out / "overlay.png")}
    files["video"] = (
        str(video) if video is not None and video.is_file() else f"skipped: {no_gl_message()}"
    )
    return {**{k: v for k, v in rep.items() if k != "sequences"}, "sequences": rep["sequences"],
            "files": files}  # fmt: skip


def heldout_view_errors(checkpoint, tracked: str | Path, reference: str | Path,
                        views: list[int]) -> list[dict]:  # fmt: skip
    """2D error of the simulated character in the views of ``reference`` it never saw.

    The tracker follows ``tracked`` (the preprocessed clip of ``views``) from its first frame;
    its 3D keypoints, resampled to the clip's frames, are moved into the world of
    ``reference`` (a preprocessed clip of every view of the same recording, whose cameras were
    estimated jointly) by the ground-plane alignment of the two estimates, and projected
    through the cameras of the other views. This checks 3D without 3D ground truth.
    """
    import numpy as np

    from mimic2dm.motion.format import load_motion2d
    from mimic2dm.preprocess.multiview import heldout_errors
    from mimic2dm.rl.policy import load_policy
    from mimic2dm.tasks.tracking2d.evaluation import simulated_keypoints3d

    policy = load_policy(checkpoint)
    ref, own = load_motion2d(reference), load_motion2d(tracked)
    kp = simulated_keypoints3d(policy, tracked, own.num_views)  # control rate
    t_sim = np.arange(len(kp)) / policy.env_spec.control_hz
    t_ref = np.arange(ref.num_frames) / ref.fps
    n = int(np.searchsorted(t_ref, t_sim[-1], side="right"))
    flat = kp.reshape(len(kp), -1)
    at = np.stack([np.interp(t_ref[:n], t_sim, flat[:, j]) for j in range(flat.shape[1])], -1)
    full = np.concatenate([at, np.repeat(at[-1:], ref.num_frames - n, 0)]).reshape(
        ref.num_frames, *kp.shape[1:]
    )
    usable = ref.mask().copy()
    usable[:, n:] = False  # frames the rollout did not reach
    others = [v for v in range(ref.num_views) if v not in views]
    return heldout_errors(full, ref, others, usable, world_keypoints3d=own.est_keypoints3d)


# ---------------------------------------------------------------------------- report
REPORT_KEYS = ("success_rate", "error_2d_px", "max_error_2d_px", "error_2d_px_raw",
               "max_error_2d_px_raw", "jitter", "foot_skating_m_s", "ground_penetration_mm",
               "floating_mm")  # fmt: skip


def build_report(state: dict) -> dict:
    """``report.json``: settings, every stage's figures and time, and the headline metrics."""
    st = state["stages"]
    ev = st.get("evaluate", {}).get("result", {})
    tr = st.get("train", {}).get("result", {})
    report = {
        "settings": state["settings"],
        "stages": {k: {"seconds": v.get("seconds"), **v.get("result", {})} for k, v in st.items()},
        **{k: ev.get(k) for k in REPORT_KEYS},
        "time_to_first_success_s": tr.get("time_to_first_success_s"),
        "heldout_views": ev.get("heldout_views"),
        "heldout_error_2d_px": _mean_heldout(ev.get("heldout_views")),
        "complete": all(st.get(k, {}).get("done") for k in STAGES),
    }
    return report


def _mean_heldout(rows: list[dict] | None) -> float | None:
    """Mean over the held-out views of their mean 2D error (px at 1080p)."""
    vals = [
        r["reprojection_mean_px_1080"]
        for r in rows or []
        if r["reprojection_mean_px_1080"] == r["reprojection_mean_px_1080"]
    ]
    return sum(vals) / len(vals) if vals else None


def _summary_table(report: dict) -> Table:
    table = Table(title="imitate")
    table.add_column("stage")
    table.add_column("seconds", justify="right")
    table.add_column("figures", overflow="fold")
    for name in STAGES:
        st = report["stages"].get(name)
        if st is None:
            table.add_row(name, "-", "not run")
            continue
        table.add_row(name, f"{st.get('seconds') or 0:.1f}", _figures(name, st))
    return table


def _figures(name: str, st: dict) -> str:
    def f(x, spec=".1f"):
        return "-" if x is None else format(x, spec)

    if name == "input":
        return "; ".join(f"{Path(r['clip']).name}: {r['views']} view(s), {r['frames']} frames at "
                         f"{r['fps']:g} fps, {100 * r['masked_fraction']:.0f} % masked" for r in st["rows"])  # fmt: skip
    if name == "preprocess":
        return "; ".join(f"{Path(r['clip']).name}: reprojection {f(r.get('reprojection_mean_px_1080'))} px "
                         f"(1080p), focal {f(r.get('focal_px'), '.0f')} px" for r in st["rows"])  # fmt: skip
    if name == "train":
        return (f"{st['epochs']} epochs, {st['frames']:,} samples, first success after "
                f"{f(st['time_to_first_success_s'], '.0f')} s" + (" (interrupted)" if st["interrupted"] else ""))  # fmt: skip
    held = _mean_heldout(st.get("heldout_views"))
    return (f"success {f(st.get('success_rate'), '.2f')}, 2D error {f(st.get('error_2d_px'))} px "
            f"(raw {f(st.get('error_2d_px_raw'))}), max {f(st.get('max_error_2d_px'))} px"
            + (f"; held-out views {f(held)} px" if held is not None else ""))  # fmt: skip


# ---------------------------------------------------------------------------- driver
def run_imitate(inputs: list[Path], out: Path, settings: ImitateSettings, resume: bool = False,
                progress: bool = True, console=None) -> dict:  # fmt: skip
    """Run (or continue) every stage; returns the report (also ``OUT/report.json``).

    Raises:
        ImitateError: bad input or settings (nothing written), or a stage that failed.
        KeyboardInterrupt: stopped outside training (the directory resumes).
    """
    from rich.console import Console

    console = console or Console(stderr=True)
    out = out.resolve()
    items = check_inputs(inputs, settings.character, settings.views)
    if settings.heldout:
        check_heldout(Path(settings.heldout), items, settings)
    _check_writable(out)
    from mimic2dm.utils.rundir import RunLock

    lock = RunLock(out)  # one writer per directory, as for training runs
    busy = lock.busy_message()
    if busy:
        raise ImitateError(busy)
    state = _start_state(out, settings, resume)
    with lock:
        return _run_stages(out, items, state, settings, progress, console)


def _run_stages(out: Path, items: list[dict], state: dict, settings: ImitateSettings,
                progress: bool, console) -> dict:  # fmt: skip
    """Every stage not yet done, in order; the report of the run so far."""
    _save_state(out, state)
    runners = {
        "input": lambda: stage_input(out, items, settings, progress),
        "preprocess": lambda: stage_preprocess(out, _result(state, "input"), settings, progress),
        "train": lambda: stage_train(out, _result(state, "preprocess"), settings),
        "evaluate": lambda: stage_evaluate(out, _result(state, "preprocess"),
                                           _result(state, "train"), settings),
    }  # fmt: skip
    for i, name in enumerate(STAGES, 1):
        done = state["stages"].get(name, {}).get("done")
        if done and not (name == "train" and _train_wants_more(state, settings)):
            console.print(f"[bold]\\[{i}/{len(STAGES)}] {name}[/]: done before, kept")
            continue
        if name == "input" and (out / "input").exists():
            shutil.rmtree(out / "input")  # a stage starts from nothing it half wrote
        console.rule(f"[bold][{i}/{len(STAGES)}] {name}")
        t0 = time.perf_counter()
        result = runners[name]()
        state["stages"][name] = {"done": not result.get("interrupted", False),
                                 "seconds": time.perf_counter() - t0, "result": result}  # fmt: skip
        _save_state(out, state)
        if result.get("interrupted"):
            break
    report = build_report(state)
    write_json_report(report, out / "report.json")
    return report


def _result(state: dict, name: str) -> dict:
    return state["stages"][name]["result"]


def _train_wants_more(state: dict, s: ImitateSettings) -> bool:
    """A resumed run whose budget grew trains on (and is evaluated again)."""
    tr = state["stages"].get("train", {}).get("result", {})
    grew = s.minutes > float(tr.get("minutes") or 0.0)
    if grew:
        state["stages"].pop("evaluate", None)
    return grew


def imitate_cmd(
    inputs: Annotated[
        list[Path],
        typer.Argument(
            help="Videos, or 2D clips (.npz; other formats: `mimic2dm data import-...` first)."
        ),
    ],
    out: Annotated[Path, typer.Option("--out", help="Output directory (report.json, ...).")],
    character: Annotated[str, typer.Option(help="humanoid | dog.")] = "humanoid",
    minutes: Annotated[float, typer.Option(min=0.01, help="Training budget (wall clock).")] = 10.0,
    view: Annotated[
        str | None,
        typer.Option(help="Views of multi-view clips, e.g. 0 or 0,4 (several: tracked jointly)."),
    ] = None,
    resume: Annotated[
        bool, typer.Option(help="Continue the run in --out (after Ctrl-C, or with more minutes).")
    ] = False,
    seed: Annotated[int, typer.Option(help="Training seed.")] = 0,
    num_envs: Annotated[
        int | None, typer.Option(min=1, help="Parallel environments (default: the trainer's).")
    ] = None,
    override: Annotated[
        list[str] | None,
        typer.Option(help="Extra trainer override KEY=VALUE (repeat), e.g. task.tau_term=0.2."),
    ] = None,
    pose_model: Annotated[
        str | None, typer.Option(help="Videos: pose model (see `extract`).")
    ] = None,
    detector: Annotated[str, typer.Option(help="Videos: detector (see `extract`).")] = "rtdetr-r50",
    random_weights: Annotated[
        bool, typer.Option(help="Videos: untrained models (offline smoke run).")
    ] = False,
    heldout: Annotated[
        Path | None,
        typer.Option(
            help="A clip preprocessed from every view of the input's recording: report "
            "the 2D error of the simulated character in the views not tracked."
        ),
    ] = None,
    stance: Annotated[
        bool, typer.Option(help="Preprocess with the stance terms (see `preprocess --stance`).")
    ] = False,
    level_roll: Annotated[
        bool, typer.Option(help="Preprocess with the camera's roll held at 0.")
    ] = False,
    progress: Annotated[bool, typer.Option(help="Show progress bars.")] = True,
    json_out: JsonOption = None,
) -> None:
    """Video or 2D keypoints -> preprocess -> train -> evaluate, in one directory."""
    from mimic2dm.characters.registry import CHARACTERS
    from mimic2dm.motion.format import MotionFormatError
    from mimic2dm.utils.rundir import RunDirError
    from mimic2dm.utils.validate import ConfigError

    if character not in CHARACTERS:
        raise typer.BadParameter(
            f"{character!r} is not one of {', '.join(CHARACTERS.names())}", param_hint="--character"
        )
    settings = ImitateSettings(
        inputs=[str(p.resolve()) for p in inputs], character=character, minutes=minutes,
        views=parse_views(view), seed=seed, num_envs=num_envs, overrides=list(override or []),
        pose_model=pose_model, detector=detector, random_weights=random_weights,
        heldout=str(heldout.resolve()) if heldout else None, stance=stance, level_roll=level_roll,
    )  # fmt: skip
    console = human_console(json_out)
    # SIGTERM outside training stops like Ctrl-C (training itself saves on both)
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        report = run_imitate(inputs, out, settings, resume, progress, console)
    except (ImitateError, RunDirError, ConfigError, MotionFormatError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    except OSError as e:  # a full disk or an unwritable place met mid-stage
        typer.echo(f"error: {e.filename or out}: {e.strerror or e}; continue with --resume "
                   f"(--out {out})", err=True)  # fmt: skip
        raise typer.Exit(1) from None
    except KeyboardInterrupt as e:
        signum = getattr(e, "signum", signal.SIGINT)
        typer.echo(f"stopped by {signal.Signals(signum).name}; continue with the same command and "
                   f"--resume (--out {out})", err=True)  # fmt: skip
        raise typer.Exit(128 + signum) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    console.print(_summary_table(report))
    if not report["complete"]:
        typer.echo(f"stopped before the end; continue with the same command and --resume (--out {out})",
                   err=True)  # fmt: skip
        write_json_report(report, json_out)
        raise typer.Exit(143 if _signal_was_term(out) else 130)
    console.print(f"report: {out / 'report.json'}")
    write_json_report(report, json_out)


class _Interrupted(KeyboardInterrupt):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)


def _raise_interrupt(signum, frame) -> None:
    raise _Interrupted(signum)


def _signal_was_term(out: Path) -> bool:
    """Whether training stopped on SIGTERM (its summary says which signal)."""
    try:
        summary: dict[str, Any] = json.loads((out / "train" / "summary.json").read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return summary.get("signal") in ("SIGTERM", 15)
