"""``mimic2dm bench engine``: engine throughput against raw MuJoCo and a single-env loop."""

from __future__ import annotations

import typer
from rich.table import Table

from mimic2dm.utils.reporting import (
    JsonOption,
    human_console,
    library_output_to_log,
    write_json_report,
)

app = typer.Typer(
    help="Benchmarks (ratios against baselines measured in the same run).", no_args_is_help=True
)


@app.callback()
def _group() -> None:
    """Benchmarks (ratios against baselines measured in the same run)."""


def _table(result: dict) -> Table:
    a = result["engine_env_steps_per_s"]
    table = Table(
        title=(
            f"{result['character']}: {result['num_envs']} envs, {result['threads']} threads, "
            f"{result['substeps']} physics steps / control step"
        )
    )
    table.add_column("what")
    table.add_column("env-steps/s", justify="right")
    table.add_column("engine / this", justify="right")
    rows = (
        ("engine (step + keypoints to torch)", a),
        ("raw mujoco.rollout, no read-out", result["raw_env_steps_per_s"]),
        ("single-env Python loop", result["single_env_steps_per_s"]),
    )
    for name, rate in rows:
        table.add_row(name, f"{rate:,.0f}", f"{a / rate:.2f}x")
    return table


@app.command()
def engine(
    character: str = typer.Option("humanoid", help="Character: humanoid | dog."),
    num_envs: int = typer.Option(64, help="Parallel envs."),
    seconds: float = typer.Option(2.0, help="Timed seconds per measurement (three measurements)."),
    threads: int = typer.Option(0, help="Worker threads; 0 = all cores available."),
    ball: bool = typer.Option(False, help="Add a ball to the scene."),
    json_out: JsonOption = None,
) -> None:
    """Measure MuJoCo engine env-steps/s against raw rollout and a single-env loop."""
    from mimic2dm.engines.bench import bench_engine

    with library_output_to_log("bench"):
        result = bench_engine(
            character, num_envs, seconds, threads or None, ("ball",) if ball else ()
        )
    human_console(json_out).print(_table(result))
    write_json_report(result, json_out)
