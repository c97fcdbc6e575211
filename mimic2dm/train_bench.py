"""``mimic2dm bench train``: PPO samples/s with the envs in-process, in 1 and in 2 Ray actors
(an app beside :mod:`mimic2dm.train`).

The three measurements run in one process, one after the other, on the same config
(the demo clip, the real network, ``num_envs`` envs in total), each for ``seconds`` of
training after its first (warm-up) epoch; Ray's start-up and the actors' start are not
timed. Samples/s are PPO's: env steps collected and trained on per second of
rollout + update.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import typer
from rich.table import Table

from mimic2dm.utils.reporting import (
    JsonOption,
    human_console,
    library_output_to_log,
    write_json_report,
)

MODES = (
    ("in-process", "ray=none", 0),
    ("ray, 1 actor", "ray=local", 1),
    ("ray, 2 actors", "ray=local", 2),
)


def _harmonic(rates: list[float]) -> float:
    rates = [r for r in rates if r > 0]
    return len(rates) / sum(1.0 / r for r in rates) if rates else 0.0


def _measure(
    run_dir: Path, group: str, actors: int, num_envs: int, seconds: float, extra: list[str]
) -> dict:
    from mimic2dm.train import compose_config, train

    overrides = [
        f"run_dir={run_dir}", group, f"train.num_envs={num_envs}", f"train.max_seconds={seconds}",
        "train.max_epochs=100000", "train.checkpoint.enabled=false", "logger.wandb=false",
        "logger.tensorboard=false", "progress=false", *extra,
    ]  # fmt: skip
    if actors:
        overrides += [f"ray.num_actors={actors}", "ray.actor_cpus=0.5"]
    s = train(compose_config(overrides))
    timed = s["history"][1:] or s["history"]
    return {
        "epochs": len(timed),
        "samples_per_s": _harmonic([h.get("perf/samples_per_s", 0.0) for h in timed]),
        "env_steps_per_s": _harmonic([h.get("perf/env_steps_per_s", 0.0) for h in timed]),
    }


def bench_train(
    num_envs: int = 64,
    seconds: float = 20.0,
    overrides: list[str] | None = None,
    out_dir: str | Path | None = None,
) -> dict:
    """Measure PPO samples/s in-process, with 1 and with 2 Ray actors, in this process.

    Args:
        num_envs: total envs in every mode.
        seconds: timed training per mode (after one warm-up epoch).
        overrides: extra tracker-config overrides (e.g. ``train.horizon_length=16``).
        out_dir: where the three short runs go (default: a temporary dir).

    Returns:
        ``{"modes": {name: {samples_per_s, env_steps_per_s, epochs}}, "ratios": {name: x / in-process}}``.
    """
    import ray

    from mimic2dm.rl.config import RayConfig
    from mimic2dm.rl.vecenv import init_ray

    root = Path(out_dir or tempfile.mkdtemp(prefix="m2d_bench_"))
    results, owns = {}, False
    try:
        for name, group, actors in MODES:
            if actors and not ray.is_initialized():
                owns = init_ray(RayConfig(enabled=True), root)
            results[name] = _measure(
                root / name.replace(" ", "_").replace(",", ""),
                group,
                actors,
                num_envs,
                seconds,
                list(overrides or []),
            )
    finally:
        if owns:
            ray.shutdown()
    base = results["in-process"]["samples_per_s"] or float("nan")
    return {
        "num_envs": num_envs, "seconds": seconds, "modes": results,
        "ratios": {k: v["samples_per_s"] / base for k, v in results.items()},
    }  # fmt: skip


def _table(result: dict) -> Table:
    table = Table(
        title=f"PPO training throughput, {result['num_envs']} envs, {result['seconds']:g} s per mode"
    )
    for col in ("envs hosted", "PPO samples/s", "env steps/s", "epochs timed", "vs in-process"):
        table.add_column(col, justify="left" if col == "envs hosted" else "right")
    for name, r in result["modes"].items():
        table.add_row(
            name,
            f"{r['samples_per_s']:,.0f}",
            f"{r['env_steps_per_s']:,.0f}",
            str(r["epochs"]),
            f"{result['ratios'][name]:.2f}x",
        )
    return table


def bench_train_command(
    num_envs: int = typer.Option(64, help="Total envs in every mode."),
    seconds: float = typer.Option(20.0, help="Timed training seconds per mode."),
    override: list[str] = typer.Option(
        [], "--override", "-o", help="Tracker config override (repeatable)."
    ),
    json_out: JsonOption = None,
) -> None:
    """PPO samples/s with the envs in-process, in 1 and in 2 Ray actors (same run, ratios)."""
    with library_output_to_log("bench"):
        result = bench_train(num_envs, seconds, override)
    human_console(json_out).print(_table(result))
    write_json_report(result, json_out)
