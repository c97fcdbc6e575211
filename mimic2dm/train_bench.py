"""``mimic2dm bench train``: PPO training speed of the current defaults against a fixed
baseline and against the serial loop, with the envs in-process, in 1 and in 2 Ray actors,
for the dog and the dribble task too, and where each epoch's time goes (an app beside
:mod:`mimic2dm.train`).

The measurements run in one process, one after the other, each for ``seconds`` of training
after its first (warm-up) epoch; Ray's start-up and the actors' start are not timed:

- ``baseline``: in-process, with :data:`BASELINE` on top of the config (64 envs,
  minibatch 512, 4 mini-epochs, 1 torch thread, 60 Hz physics, 1 MuJoCo thread, one env
  group: no overlap of physics and the learner; float32 network);
- ``serial``: the defaults with :data:`SERIAL` on top: the rollout and the update take
  turns and the physics runs at 60 Hz (the reference of the speed targets);
- ``in-process``, ``ray, 1 actor``, ``ray, 2 actors``: the config's defaults;
- with ``extra`` (default: the dog and the dribble task), ``<extra>, serial`` and
  ``<extra>`` for each: the two in-process settings on that character / task
  (:data:`EXTRAS`).

Extra overrides (``-o``) and ``--num-envs`` apply to every mode, the baseline included,
after the baseline's own; ``--set`` overrides apply to the default modes only (a
candidate setting measured against the fixed baseline and the serial loop in the same run).
The settings each mode ran with are reported. Per mode: PPO samples/s (rollout + update,
as rl-games counts them), wall samples/s (per second of epoch wall time, everything
included) and the mean epoch split into physics, task, policy inference, PPO update and
overhead (:func:`mimic2dm.rl.observer.time_breakdown`). Ratios are of wall samples/s,
against the baseline, against ``serial`` (an extra against its own serial mode) and
against ``in-process``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import typer
from rich.table import Table

from mimic2dm.rl.config import resolve_precision
from mimic2dm.rl.observer import BREAKDOWN
from mimic2dm.utils.reporting import (
    JsonOption,
    human_console,
    library_output_to_log,
    write_json_report,
)

BASELINE = (
    "train.num_envs=64", "train.minibatch_size=512", "train.mini_epochs=4", "train.torch_threads=1",
    "engine.physics_hz=60", "engine.num_threads=1", "train.env_groups=1",
    "train.network.precision=fp32",
)  # fmt: skip
"""The fixed baseline every run is compared with (overrides of the tracker config)."""

SERIAL = ("train.overlap=false", "engine.physics_hz=60")
"""The serial loop: the defaults with the rollout and the update taking turns and 60 Hz physics."""

MODES = (
    ("baseline", "ray=none", 0, BASELINE),
    ("serial", "ray=none", 0, SERIAL),
    ("in-process", "ray=none", 0, ()),
    ("ray, 1 actor", "ray=local", 1, ()),
    ("ray, 2 actors", "ray=local", 2, ()),
    ("ray, 2 actors, per-step calls", "ray=local", 2, ("ray.actor_policy=false",)),
)
"""``(name, ray group, actors, overrides)`` of every measurement, in run order."""

EXTRAS = {
    "dog": ("character=dog", "data=dog_trot"),
    "dribble": ("task=dribble", "data=dribble_cmu_run"),
}
"""Other characters / tasks measured in-process beside the humanoid (``--extra``): overrides."""
FIXED = ("baseline", "serial")
"""Modes that ``--set`` (a candidate setting) leaves alone."""

SETTINGS = {
    "num_envs": "train.num_envs", "horizon_length": "train.horizon_length",
    "minibatch_size": "train.minibatch_size", "mini_epochs": "train.mini_epochs",
    "torch_threads": "train.torch_threads", "physics_hz": "engine.physics_hz",
    "control_hz": "engine.control_hz", "engine_threads": "engine.num_threads",
    "env_groups": "train.env_groups", "ray_pipeline": "ray.pipeline", "actor_policy": "ray.actor_policy",
    "precision": "train.network.precision", "overlap": "train.overlap",
    "character": "character.name", "task": "task.name",
}  # fmt: skip
"""What the tables and the JSON report of each mode's config (name -> config key)."""


def _harmonic(rates: list[float]) -> float:
    rates = [r for r in rates if r > 0]
    return len(rates) / sum(1.0 / r for r in rates) if rates else 0.0


def summarize(history: list[dict]) -> dict:
    """Throughput and mean time breakdown of a run's per-epoch history (first epoch = warm-up).

    Returns:
        ``{epochs, samples_per_s, env_steps_per_s, wall_samples_per_s, epoch_s, update_busy_s
        (the update's own time per epoch when it ran beside the rollout, else 0),
        breakdown: {part: {s_per_epoch, share, us_per_sample}}}``.
    """
    timed = history[1:] or history
    frames = history[-1]["frame"] - (history[0]["frame"] if len(history) > 1 else 0)
    wall = sum(h.get("perf/epoch_s", 0.0) for h in timed)
    n = max(len(timed), 1)
    parts = {p: sum(h.get(f"perf/{p}_s", 0.0) for h in timed) for p in BREAKDOWN}
    return {
        "epochs": len(timed),
        "samples_per_s": _harmonic([h.get("perf/samples_per_s", 0.0) for h in timed]),
        "env_steps_per_s": _harmonic([h.get("perf/env_steps_per_s", 0.0) for h in timed]),
        "wall_samples_per_s": frames / wall if wall > 0 else 0.0,
        "epoch_s": wall / n,
        "update_busy_s": sum(h.get("perf/update_busy_s", 0.0) for h in timed) / n,
        "breakdown": {
            p: {"s_per_epoch": s / n, "share": s / wall if wall > 0 else 0.0,
                "us_per_sample": 1e6 * s / frames if frames > 0 else 0.0}
            for p, s in parts.items()
        },
    }  # fmt: skip


def _measure(run_dir: Path, group: str, actors: int, seconds: float, overrides: list[str]) -> dict:
    from omegaconf import OmegaConf

    from mimic2dm.train import compose_config, train

    base = [
        f"run_dir={run_dir}", group, f"train.max_seconds={seconds}", "train.max_epochs=100000",
        "train.checkpoint.enabled=false", "logger.wandb=false", "logger.tensorboard=false",
        "progress=false",
    ]  # fmt: skip
    if actors:
        base += [f"ray.num_actors={actors}", "ray.actor_cpus=0.5"]
    cfg = compose_config(base + overrides)
    settings = {k: OmegaConf.select(cfg, key) for k, key in SETTINGS.items()}
    settings["precision"] = resolve_precision(str(settings["precision"]), str(cfg.train.device))
    settings["ray_actors"] = actors
    return {"settings": settings, **summarize(train(cfg)["history"])}


def plan(extra: tuple[str, ...] = tuple(EXTRAS)) -> list[tuple[str, str, int, tuple[str, ...]]]:
    """Every measurement ``(name, ray group, actors, overrides)`` in run order: :data:`MODES`,
    then for each of ``extra`` (keys of :data:`EXTRAS`) its serial and default in-process modes."""
    unknown = [e for e in extra if e not in EXTRAS]
    if unknown:
        raise ValueError(f"--extra {','.join(unknown)}: expected some of {', '.join(EXTRAS)}")
    out = list(MODES)
    for e in extra:
        out += [
            (f"{e}, serial", "ray=none", 0, (*EXTRAS[e], *SERIAL)),
            (e, "ray=none", 0, EXTRAS[e]),
        ]
    return out


def reference_of(name: str) -> str:
    """The serial mode a mode's speed-up is measured against (an extra's own, else ``serial``)."""
    head = name.split(",")[0]
    return f"{head}, serial" if head in EXTRAS else "serial"


def bench_train(
    num_envs: int | None = None,
    seconds: float = 20.0,
    overrides: list[str] | None = None,
    out_dir: str | Path | None = None,
    candidate: list[str] | None = None,
    extra: tuple[str, ...] = tuple(EXTRAS),
    repeats: int = 1,
) -> dict:
    """Measure the baseline, the serial loop and the defaults (in-process, 1 and 2 Ray
    actors; the serial and default in-process modes of each ``extra``) in this process.

    Args:
        num_envs: total envs in every mode (None: each mode's own, the baseline's 64).
        seconds: timed training per mode (after one warm-up epoch).
        overrides: extra tracker-config overrides for every mode (after the baseline's).
        out_dir: where the short runs go (default: a temporary dir).
        candidate: overrides of the default modes only (after ``overrides``), not
            :data:`FIXED` ones nor the extras' serial modes.
        extra: other characters / tasks to measure (keys of :data:`EXTRAS`).
        repeats: rounds over all the modes, in turn (a machine whose speed drifts then
            drifts for every mode alike); each mode reports its median round (by wall
            samples/s) and ``rounds``, every round's wall samples/s.

    Returns:
        ``{"seconds", "baseline_overrides", "serial_overrides", "modes": {name: {settings,
        ...}} (see :func:`summarize`), "ratios": {"vs_baseline": {name: x}, "vs_serial":
        {name: x}, "vs_in_process": {name: x}, "2_actors_vs_in_process": x,
        "in_process_vs_serial": x, "per_sample_vs_baseline": {name: {part | "all": x}}}}``;
        all but the last are ratios of wall samples/s, the last of time per sample.
    """
    import ray

    from mimic2dm.rl.config import RayConfig
    from mimic2dm.rl.vecenv import init_ray

    modes = plan(tuple(extra))
    root = Path(out_dir or tempfile.mkdtemp(prefix="m2d_bench_"))
    common = list(overrides or []) + ([f"train.num_envs={num_envs}"] if num_envs else [])
    if repeats < 1:
        raise ValueError(f"--repeats must be >= 1, got {repeats}")
    rounds: dict[str, list[dict]] = {name: [] for name, *_ in modes}
    owns = False
    try:
        for k in range(repeats):
            for name, group, actors, fixed in modes:
                if actors and not ray.is_initialized():
                    owns = init_ray(RayConfig(enabled=True), root)
                run_dir = root / f"{name.replace(' ', '_').replace(',', '')}_{k}"
                own = [] if name in FIXED or name.endswith(", serial") else list(candidate or [])
                rounds[name].append(
                    _measure(run_dir, group, actors, seconds, [*fixed, *common, *own])
                )
    finally:
        if owns:
            ray.shutdown()
    results = {}
    for name, rs in rounds.items():
        ordered = sorted(rs, key=lambda r: r["wall_samples_per_s"])
        results[name] = {**ordered[(len(ordered) - 1) // 2],
                         "rounds": [r["wall_samples_per_s"] for r in rs]}  # fmt: skip

    def ratios(ref) -> dict[str, float]:
        def den(name: str) -> float:
            return results[ref(name)]["wall_samples_per_s"] or float("nan")

        return {k: v["wall_samples_per_s"] / den(k) for k, v in results.items()}

    vs_in = ratios(lambda _: "in-process")
    vs_serial = ratios(reference_of)
    return {
        "seconds": seconds, "repeats": repeats, "baseline_overrides": list(BASELINE), "serial_overrides": list(SERIAL),
        "candidate_overrides": list(candidate or []), "modes": results,
        "ratios": {"vs_baseline": ratios(lambda _: "baseline"), "vs_serial": vs_serial,
                   "vs_in_process": vs_in, "2_actors_vs_in_process": vs_in["ray, 2 actors"],
                   "per_step_calls_vs_in_process": vs_in["ray, 2 actors, per-step calls"],
                   "in_process_vs_serial": vs_serial["in-process"],
                   "per_sample_vs_baseline": _per_sample_ratios(results)},
    }  # fmt: skip


def _per_sample_ratios(results: dict) -> dict[str, dict[str, float]]:
    """``{mode: {part | "all": time per sample / the baseline's}}`` (NaN where the baseline's is 0)."""

    def us(mode: str) -> dict[str, float]:
        b = results[mode]["breakdown"]
        out = {p: b[p]["us_per_sample"] for p in BREAKDOWN}
        return {**out, "all": sum(out.values())}

    ref = us("baseline")
    return {m: {k: v / ref[k] if ref[k] > 0 else float("nan") for k, v in us(m).items()}
            for m in results}  # fmt: skip


def _tables(result: dict) -> list[Table]:
    modes, ratios = result["modes"], result["ratios"]
    rounds = result.get("repeats", 1)
    each = f", median of {rounds} rounds" if rounds > 1 else ""
    speed = Table(title=f"PPO training throughput, {result['seconds']:g} s per mode{each}")
    cols = ("mode", "envs", "minibatch\nx epochs", "physics\nHz", "overlap", "PPO\nsamples/s",
            "wall\nsamples/s", "epochs", "vs\nbaseline", "vs\nserial", "vs\nin-process")  # fmt: skip
    for col in cols:
        speed.add_column(col, justify="left" if col == "mode" else "right")
    for name, r in modes.items():
        s = r["settings"]
        speed.add_row(
            name, str(s["num_envs"]), f"{s['minibatch_size']} x {s['mini_epochs']}",
            f"{s['physics_hz']:g}", "yes" if s["overlap"] else "no", f"{r['samples_per_s']:,.0f}",
            f"{r['wall_samples_per_s']:,.0f}", str(r["epochs"]), f"{ratios['vs_baseline'][name]:.2f}x",
            f"{ratios['vs_serial'][name]:.2f}x", f"{ratios['vs_in_process'][name]:.2f}x",
        )  # fmt: skip
    split = Table(title="Mean epoch: seconds (share of the epoch)")
    per = Table(title="Milliseconds per 1,000 samples (vs baseline)")
    for t in (split, per):
        t.add_column("mode")
        if t is split:
            t.add_column("epoch", justify="right")
        for p in BREAKDOWN:
            t.add_column(p, justify="right")
    per.add_column("all", justify="right")
    for name, r in modes.items():
        b, x = r["breakdown"], ratios["per_sample_vs_baseline"][name]
        ms = {p: b[p]["us_per_sample"] for p in BREAKDOWN}  # us per sample = ms per 1,000
        ms["all"] = sum(ms.values())
        split.add_row(name, f"{r['epoch_s']:.3f}",
                      *(f"{b[p]['s_per_epoch']:.3f} ({100 * b[p]['share']:.0f}%)" for p in BREAKDOWN))  # fmt: skip
        per.add_row(name, *(f"{ms[k]:.0f} ({x[k]:.2f}x)" for k in ms))
    return [speed, split, per]


def bench_train_command(
    num_envs: int | None = typer.Option(
        None, help="Total envs in every mode (default: the baseline's 64, the config's elsewhere)."
    ),
    seconds: float = typer.Option(
        20.0, help="Timed training seconds per mode (after a warm-up epoch)."
    ),
    override: list[str] = typer.Option(
        [], "--override", "-o", help="Tracker config override for every mode (repeatable)."
    ),
    candidate: list[str] = typer.Option(
        [], "--set", help="Override of the default modes only, not the baseline (repeatable)."
    ),
    extra: str = typer.Option(
        ",".join(EXTRAS),
        help="Other characters / tasks measured in-process, comma-separated ('' for none).",
    ),
    repeats: int = typer.Option(
        1, help="Rounds over all the modes, in turn; each mode reports its median round."
    ),
    json_out: JsonOption = None,
) -> None:
    """PPO training speed: defaults vs a fixed baseline and the serial loop, in-process vs 1
    and 2 Ray actors, the dog and the dribble task beside, with each epoch's time split
    (same run, ratios)."""
    from mimic2dm.utils.cli import exit_on

    extras = tuple(e for e in extra.split(",") if e)
    with exit_on(ValueError):
        plan(extras)
        if repeats < 1:
            raise ValueError(f"--repeats must be >= 1, got {repeats}")
    with library_output_to_log("bench"):
        result = bench_train(
            num_envs, seconds, override, candidate=candidate, extra=extras, repeats=repeats
        )
    console = human_console(json_out)
    for table in _tables(result):
        console.print(table)
    r = result["ratios"]
    console.print(f"in-process vs serial: {r['in_process_vs_serial']:.2f}x; "
                  f"ray, 2 actors vs in-process: {r['2_actors_vs_in_process']:.2f}x, with the learner's "
                  f"policy in per-step calls: {r['per_step_calls_vs_in_process']:.2f}x (wall samples/s)")  # fmt: skip
    write_json_report(result, json_out)
