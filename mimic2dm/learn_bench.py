"""``mimic2dm bench learn``: how fast the tracker learns a clip, with the last checkpoint.

For every clip (a ``conf/data/<clip>.yaml`` recipe: shared mocap projected to one static
view) and seed, one training run with the default config for ``minutes`` of training
time (``train.max_seconds``). During training the current policy is evaluated
deterministically on the whole clip every ``eval_every`` seconds of training (these
evaluations are not counted in the budget); the first one that succeeds gives the
time-to-first-success. After training, the **last** checkpoint is evaluated the same way
(from the clip's first frame, with the initial state training used there): success, mean
and max 2D error, MPJPE, jitter, next to the reference motion's own jitter. The learning
curves (evaluation 2D error and mean training episode length against training minutes)
are saved as a PNG (drawn with PIL) and everything as JSON.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import typer
from rich.table import Table

from mimic2dm.utils.reporting import (
    JsonOption,
    human_console,
    json_to_stdout,
    library_output_to_log,
    write_json_report,
)
from mimic2dm.utils.rundir import RunDirError
from mimic2dm.utils.validate import ConfigError, full_errors

DEFAULT_CLIPS = ("cmu_walk", "cmu_run", "cmu_hop")
CLIP_OVERRIDES = {
    "dog_trot": ("character=dog",),
    "dog_pace": ("character=dog",),
    "dribble_cmu_run": ("task=dribble",),
}
"""Config overrides a clip needs: the dog clips track the dog (``--clips dog_trot,dog_pace``),
the synthetic dribble trains the ``dribble`` task (its rows add the ball's metrics)."""
OBJECT_KEYS = ("object_error_2d_px", "ball_within_reach")
"""Ball metrics of the last checkpoint's evaluation, reported for runs with a ball."""


def reference_jitter(clip_file: str | Path, control_hz: float) -> float:
    """Jitter (m/s^3) of the clip's own 3D keypoints at the control rate (NaN without 3D)."""
    from mimic2dm import metrics
    from mimic2dm.tasks.tracking2d.reference import ReferenceLibrary

    lib = ReferenceLibrary.from_files([clip_file], control_hz)
    kp = lib.clips[0].keypoints3d
    return float("nan") if kp is None else float(metrics.jitter(kp, control_hz))


class RunConfigError(ValueError):
    """A benchmark run's config cannot be composed (unknown clip, bad override)."""


def run_config(clip: str, seed: int, minutes: float, run_dir: Path, overrides: list[str]):
    """The training config of one benchmark run (``clip`` a ``data`` config name)."""
    from mimic2dm.train import compose_config

    return compose_config([
        f"data={clip}", f"run_dir={run_dir}", f"seed={seed}", f"train.max_seconds={minutes * 60:.3f}",
        "train.max_epochs=100000000", "logger.wandb=false", "logger.video_every=0", "progress=false",
        *CLIP_OVERRIDES.get(clip, ()), *overrides,
    ])  # fmt: skip


def learn_one(clip: str, seed: int, minutes: float, run_dir: Path, eval_every: float,
              overrides: list[str], cfg=None, resume_overrides: Sequence[str] = ()) -> dict:  # fmt: skip
    """Train ``clip`` (a ``data`` config name) for ``minutes``; evaluate the last checkpoint.

    ``resume_overrides``: with ``cfg.resume``, changes to the resumed run's saved config
    (e.g. a larger ``train.max_seconds``), as :func:`mimic2dm.train.train` takes them.

    ``cfg``: the run's config, already composed by :func:`run_config` (composed here if None).
    """
    from mimic2dm.eval import evaluate
    from mimic2dm.rl.policy import Policy
    from mimic2dm.tasks.base import TaskSpec
    from mimic2dm.train import train
    from mimic2dm.utils.checkpoint import load_checkpoint

    if cfg is None:
        cfg = run_config(clip, seed, minutes, run_dir, overrides)
    clock = {"start": None, "eval_s": 0.0, "last_eval": -float("inf"), "spec": None}
    evals, epoch_t = [], {}

    def train_time() -> float:
        return time.perf_counter() - clock["start"] - clock["eval_s"]

    def on_epoch(agent) -> None:
        if clock["start"] is None:
            clock["start"] = agent._train_start or time.perf_counter()
        t = train_time()
        epoch_t[int(agent.epoch_num)] = t
        if t - clock["last_eval"] < eval_every:
            return
        clock["last_eval"] = t
        t0 = time.perf_counter()
        # the run's TaskSpec, as train() built it from the config it parsed
        spec = clock["spec"] = clock["spec"] or TaskSpec.from_dict(agent.meta["task_spec"])
        rep = evaluate(
            Policy(agent.model, spec, {}, int(agent.epoch_num), int(agent.frame)),
            list(spec.data[:1]),
        )
        agent.model.train()
        dt = time.perf_counter() - t0
        clock["eval_s"] += dt
        if agent._train_start is not None:
            agent._train_start += dt  # evaluations are not part of the training budget
        evals.append({"train_s": t, "epoch": int(agent.epoch_num), "frame": int(agent.frame),
                      "success_rate": rep["success_rate"], "error_2d_px": rep["error_2d_px"],
                      "max_error_2d_px": rep["max_error_2d_px"]})  # fmt: skip

    summary = train(cfg, resume_overrides, epoch_callback=on_epoch)
    if summary["interrupted"]:  # SIGINT / SIGTERM: the run saved its checkpoint; the bench ends
        from mimic2dm.train import summary_signal

        print(f"stopped by {summary['signal']}: continue the run with resume={run_dir}",
              file=sys.stderr, flush=True)  # fmt: skip
        raise SystemExit(128 + summary_signal(summary))
    last = summary["last_checkpoint"]
    if last is None:
        raise RuntimeError(f"{run_dir}: training wrote no last.pt")
    spec = clock["spec"] or TaskSpec.from_dict(load_checkpoint(last)["meta"]["task_spec"])
    files = list(spec.data)
    final = evaluate(last, files[:1], json_out=run_dir / "eval_last.json")
    ref_jitter = reference_jitter(files[0], spec.control_hz)
    first = next((e["train_s"] for e in evals if e["success_rate"] >= 1.0), None)
    curve = [{"train_s": epoch_t[h["epoch"]], "episode_length": h.get("episode/length"),
              "reward": h.get("reward/total")} for h in summary["history"] if h["epoch"] in epoch_t]  # fmt: skip
    return {
        "clip": clip, "seed": seed, "minutes": minutes, "run_dir": str(run_dir), "checkpoint": last,
        "epochs": summary["epochs"], "frames": summary["frames"],
        "time_to_first_success_s": first, "final_success": final["success_rate"] >= 1.0,
        "success_rate": final["success_rate"], "error_2d_px": final["error_2d_px"],
        "max_error_2d_px": final["max_error_2d_px"], "mpjpe_mm": final.get("mpjpe_mm"),
        "jitter": final["jitter"], "reference_jitter": ref_jitter,
        "jitter_ratio": final["jitter"] / ref_jitter if ref_jitter > 0 else None,
        "initial_state": final.get("initial_state"), "evals": evals, "curve": curve,
        **{k: final[k] for k in OBJECT_KEYS if k in final},
    }  # fmt: skip


INIT_OVERRIDES = ("train.learning_rate=1e-4",)
"""What the runs started from ``--init-from`` add by default: the fine-tuning learning rate
(:data:`mimic2dm.train.FINE_TUNE_LR`; a fresh optimiser at the default rate wrecks a trained policy)."""


def bench_learn(clips=DEFAULT_CLIPS, minutes: float = 15.0, seeds: int = 1, out_dir: str | Path = "runs/bench_learn",
                eval_every: float | None = None, overrides: list[str] | None = None,
                first_seed: int = 0, on_run=None, init_from: str | None = None,
                init_overrides: Sequence[str] = INIT_OVERRIDES) -> dict:  # fmt: skip
    """Train and evaluate every clip x seed (``first_seed .. first_seed + seeds - 1``); see the
    module docstring.

    With ``init_from`` (a checkpoint or run dir, e.g. a distilled student) every clip x seed
    is trained twice, from scratch and from those weights (``init_from=...`` plus
    ``init_overrides``); each run's ``start`` says which, and ``speedup`` compares their
    times to first success (:func:`speedups`).

    Every run's config is composed before the first run trains, so a bad clip name or
    override fails at once, not after the runs before it. Configs are composed from
    ``conf/`` then: editing it during the benchmark does not change the later runs.

    A run whose training or evaluation raises (e.g. :class:`~mimic2dm.rl.agent.TrainingDiverged`)
    is recorded as a failure (:func:`failed_run`: never succeeded, its ``error`` the exception's
    type and message) and the next runs go on. A :class:`ConfigError` or
    :class:`~mimic2dm.utils.rundir.RunDirError` (which every run would repeat) and an
    interrupt (SIGINT / SIGTERM) still end the benchmark.

    Args:
        eval_every: training seconds between evaluations (default: ``minutes * 60 / 30``, >= 5 s).
        on_run: called with the result so far (the same dict this returns, ``runs`` holding
            the finished runs) after each run; the command writes its JSON there, so a run
            that ends the benchmark loses nothing already measured.
    """
    every = eval_every if eval_every is not None else max(5.0, minutes * 60 / 30)
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
    starts = [("scratch", list(overrides or []))]
    if init_from:
        init_from = str(Path(init_from).resolve())
        starts.append(
            ("init_from", [*(overrides or []), f"init_from={init_from}", *init_overrides])
        )
    plan = []
    for c in clips:
        for s in range(first_seed, first_seed + seeds):
            for start, ov in starts:
                tag = "" if start == "scratch" and not init_from else f"_{start}"
                run_dir = Path(out_dir).resolve() / f"{stamp}_{c}_seed{s}{tag}"
                try:
                    cfg = run_config(c, s, minutes, run_dir, ov)
                except Exception as e:
                    raise RunConfigError(
                        f"bench learn: clip {c!r}, seed {s}: cannot compose its config: {e}"
                    ) from e
                plan.append((c, s, start, ov, run_dir, cfg))
    result = {"minutes": minutes, "seeds": seeds, "eval_every_s": every, "runs": []}
    if init_from:
        result["init_from"] = str(init_from)
    for c, s, start, ov, run_dir, cfg in plan:
        try:
            row = learn_one(c, s, minutes, run_dir, every, ov, cfg=cfg)
        except (ConfigError, RunDirError):  # the command's own mistake: every run would repeat it
            raise
        except Exception as e:
            if full_errors():
                traceback.print_exc()
            print(f"bench learn: clip {c!r}, seed {s} ({start}) failed, continuing: "
                  f"{type(e).__name__}: {e}", file=sys.stderr, flush=True)  # fmt: skip
            row = failed_run(c, s, minutes, run_dir, e)
        result["runs"].append({**row, "start": start})
        if init_from:
            result["speedup"] = speedups(result["runs"], minutes)
        if on_run is not None:
            on_run(result)
    return result


def failed_run(clip: str, seed: int, minutes: float, run_dir: Path, error: BaseException) -> dict:
    """The row of a run whose training or evaluation raised ``error``: it never succeeded, its
    metrics are None and ``error`` holds the exception's type and message."""
    return {
        "clip": clip, "seed": seed, "minutes": minutes, "run_dir": str(run_dir), "checkpoint": None,
        "epochs": None, "frames": None, "time_to_first_success_s": None, "final_success": False,
        "success_rate": None, "error_2d_px": None, "max_error_2d_px": None, "mpjpe_mm": None,
        "jitter": None, "reference_jitter": None, "jitter_ratio": None, "initial_state": None,
        "evals": [], "curve": [], "error": f"{type(error).__name__}: {error}",
    }  # fmt: skip


def speedups(runs: list[dict], minutes: float) -> dict:
    """Time to first success from scratch over that from ``init_from``, per clip x seed with
    both runs, and their median. A run that never succeeded counts at its whole budget, which
    makes its ratio a bound (``bound``: ``>=`` when only the scratch run failed, ``<=`` when
    only the ``init_from`` one did, None when both did: no ratio)."""
    pairs = {}
    for r in runs:
        pairs.setdefault((r["clip"], r["seed"]), {})[r.get("start", "scratch")] = r[
            "time_to_first_success_s"
        ]
    rows, budget = [], minutes * 60.0
    for (clip, seed), p in pairs.items():
        if "scratch" not in p or "init_from" not in p:
            continue
        a, b = p["scratch"], p["init_from"]
        if a is None and b is None:
            rows.append({"clip": clip, "seed": seed, "ratio": None, "bound": None})
            continue
        bound = ">=" if a is None else "<=" if b is None else "="
        ratio = (budget if a is None else a) / max(budget if b is None else b, 1e-9)
        rows.append({"clip": clip, "seed": seed, "ratio": ratio, "bound": bound})
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    return {"pairs": rows, "median": float(np.median(ratios)) if ratios else None}


def _fmt(x, spec: str = ".1f") -> str:
    return "-" if x is None or (isinstance(x, float) and not np.isfinite(x)) else format(x, spec)


def _table(result: dict) -> Table:
    table = Table(
        title=f"learning: {result['minutes']:g} min per run, last checkpoint, deterministic"
    )
    starts = any("init_from" == r.get("start") for r in result["runs"])
    cols = ("clip", "seed", *(("start",) if starts else ()), "first success (min)", "final success", "2D err (px)", "max 2D err (px)",
            "MPJPE (mm)", "jitter (m/s^3)", "reference jitter", "jitter / ref")  # fmt: skip
    ball = any(k in r for r in result["runs"] for k in OBJECT_KEYS)
    if ball:
        cols += ("ball 2D err (px)", "ball within reach")
    for c in cols:
        table.add_column(c, justify="left" if c == "clip" else "right")
    for r in result["runs"]:
        t = r["time_to_first_success_s"]
        table.add_row(r["clip"], str(r["seed"]), *((r.get("start", "scratch"),) if starts else ()),
                      _fmt(None if t is None else t / 60, ".2f"),
                      "failed" if r.get("error") else "yes" if r["final_success"] else "no", _fmt(r["error_2d_px"]), _fmt(r["max_error_2d_px"]),
                      _fmt(r["mpjpe_mm"]), _fmt(r["jitter"]), _fmt(r["reference_jitter"]),
                      _fmt(r["jitter_ratio"], ".2f"),
                      *((_fmt(r.get(OBJECT_KEYS[0])), _fmt(r.get(OBJECT_KEYS[1]), ".2f")) if ball else ()))  # fmt: skip
    return table


EVAL_PANEL_BOUNDS = 5.0
"""The evaluation panel shows errors up to this many success bounds; larger ones sit on its top edge."""

COLORS = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
]


def plot_curves(result: dict, out: str | Path, size: tuple[int, int] = (1000, 700)):
    """Two panels (evaluation 2D error, training episode length) against training minutes.

    The error panel stops at :data:`EVAL_PANEL_BOUNDS` x the 100 px success bound.
    """
    from PIL import Image, ImageDraw

    W, H = size
    img = Image.new("RGB", size, "white")
    d = ImageDraw.Draw(img)
    panels = [("eval 2D error (px), dashed: 100 px success bound", "evals", "error_2d_px", 100.0),
              ("mean training episode length (steps)", "curve", "episode_length", None)]  # fmt: skip
    tmax = max(
        [result["minutes"]] + [p["train_s"] / 60 for r in result["runs"] for p in r["curve"]]
    )
    ph = (H - 60) // 2
    for i, (title, key, field, line) in enumerate(panels):
        x0, y0, x1, y1 = 70, 30 + i * (ph + 30), W - 20, 30 + i * (ph + 30) + ph - 30
        vals = [p[field] for r in result["runs"] for p in r[key] if p.get(field) is not None]
        vmax = max(vals + [line or 0.0, 1e-6]) * 1.05
        if line is not None:  # errors of a lost character would flatten the curve near the bound
            vmax = min(vmax, EVAL_PANEL_BOUNDS * line)
        d.rectangle([x0, y0, x1, y1], outline="black")
        d.text((x0, y0 - 14), title, fill="black")
        for f in (0.0, 0.5, 1.0):
            yy = y1 - f * (y1 - y0)
            d.text((5, yy - 6), f"{f * vmax:.0f}", fill="black")
            xx = x0 + f * (x1 - x0)
            d.text((xx - 10, y1 + 3), f"{f * tmax:.1f} min", fill="black")

        def sx(t, x0=x0, x1=x1):
            return x0 + (t / 60) / tmax * (x1 - x0)

        def sy(v, y0=y0, y1=y1, vmax=vmax):
            return y1 - min(v, vmax) / vmax * (y1 - y0)

        if line is not None:
            for xa in range(x0, x1, 12):
                d.line([xa, sy(line), min(xa + 6, x1), sy(line)], fill="gray")
        for j, r in enumerate(result["runs"]):
            pts = [(sx(p["train_s"]), sy(p[field])) for p in r[key] if p.get(field) is not None]
            color = COLORS[j % len(COLORS)]
            if len(pts) > 1:
                d.line(pts, fill=color, width=2)
            for px, py in pts if key == "evals" else pts[:0]:
                d.ellipse([px - 2, py - 2, px + 2, py + 2], fill=color)
            d.text((x1 - 150, y0 + 5 + 12 * j), f"{r['clip']} seed {r['seed']}", fill=color)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    img.save(out)
    return img


def bench_learn_command(
    clips: str = typer.Option(
        ",".join(DEFAULT_CLIPS), help="Comma-separated data configs (conf/data/<name>.yaml)."
    ),
    minutes: float = typer.Option(15.0, help="Training minutes per run (train.max_seconds)."),
    seeds: int = typer.Option(1, help="Seeds per clip (S .. S+N-1)."),
    first_seed: int = typer.Option(
        0, help="First seed S (runs of one benchmark split over several calls)."
    ),
    eval_every: float = typer.Option(
        0.0, help="Training seconds between evaluations (0: minutes*60/30, >= 5)."
    ),
    out_dir: str = typer.Option("runs/bench_learn", help="Where the runs go."),
    png: str = typer.Option("", "--png", help="Learning-curve picture (PNG)."),
    override: list[str] = typer.Option(
        [], "--override", "-o", help="Tracker config override (repeatable)."
    ),
    init_from: str = typer.Option(
        "",
        "--init-from",
        help="Also train every clip x seed from these weights (a checkpoint or run dir, "
        "e.g. a distilled student) and compare times to first success.",
    ),
    init_override: list[str] = typer.Option(
        list(INIT_OVERRIDES),
        "--init-override",
        help="Overrides of the --init-from runs only (repeatable).",
    ),
    json_out: JsonOption = None,
) -> None:
    """Time to first success and the last checkpoint's metrics per clip and seed."""
    names = [c.strip() for c in clips.split(",") if c.strip()]
    if not names or seeds < 1 or minutes <= 0:
        raise typer.BadParameter("need --clips, --seeds >= 1 and --minutes > 0")

    def save_so_far(result: dict) -> None:  # finished runs survive a later failure
        if json_out and not json_to_stdout(json_out):
            write_json_report(result, json_out)

    from mimic2dm.train import one_line_errors
    from mimic2dm.utils.rundir import check_writable

    if json_out and not json_to_stdout(json_out):
        with one_line_errors():
            check_writable(json_out, "--json")  # before hours of training
    with (
        library_output_to_log("bench"),
        one_line_errors(),
    ):  # a used or unwritable run dir: one line
        try:
            result = bench_learn(names, minutes, seeds, out_dir, eval_every or None, override,
                                 first_seed=first_seed, on_run=save_so_far, init_from=init_from or None,
                                 init_overrides=init_override)  # fmt: skip
        except RunConfigError as e:  # errors while training keep their own type and trace
            raise typer.BadParameter(str(e)) from e
    human_console(json_out).print(_table(result))
    if result.get("speedup"):
        sp = result["speedup"]
        med = "-" if sp["median"] is None else f"{sp['median']:.2f}x"
        human_console(json_out).print(f"time to first success, scratch / init_from: median {med} over "
                                      f"{len(sp['pairs'])} clip x seed pair(s)")  # fmt: skip
    if png:
        plot_curves(result, png)
        result["png"] = str(png)
    write_json_report(result, json_out)
