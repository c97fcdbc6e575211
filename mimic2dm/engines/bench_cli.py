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


def _new_table(title: str, *columns: str) -> Table:
    """A table titled ``title``: a ``what`` column, then ``columns`` aligned right."""
    table = Table(title=title)
    table.add_column("what")
    for column in columns:
        table.add_column(column, justify="right")
    return table


def _table(result: dict) -> Table:
    a = result["engine_env_steps_per_s"]
    title = (
        f"{result['character']}: {result['num_envs']} envs, {result['threads']} threads, "
        f"{result['substeps']} physics steps / control step"
    )
    table = _new_table(title, "env-steps/s", "engine / this")
    rows = (
        ("engine (step + keypoints to torch)", a),
        ("raw mujoco.rollout, no read-out", result["raw_env_steps_per_s"]),
        ("single-env Python loop", result["single_env_steps_per_s"]),
    )
    for name, rate in rows:
        table.add_row(name, f"{rate:,.0f}", f"{a / rate:.2f}x")
    return table


def _backend_table(result: dict) -> Table:
    title = (
        f"{result['engine']} on {result['device']}, {result['character']}: {result['num_envs']} envs "
        f"(MuJoCo: {result['threads']} threads), built in {result['build_s']:.0f} s"
    )
    table = _new_table(title, "value")
    rate = result["engine_env_steps_per_s"]
    table.add_row(f"{result['engine']} env-steps/s (step + keypoints)", f"{rate:,.0f}")
    table.add_row("MuJoCo engine env-steps/s", f"{result['mujoco_env_steps_per_s']:,.0f}")
    table.add_row(f"{result['engine']} / MuJoCo", f"{result['engine_vs_mujoco']:.2f}x")
    table.add_row(
        "keypoint error vs MuJoCo, 1 s standing", f"{result['parity_standing_1s_m']:.2e} m"
    )
    table.add_row(
        "keypoint error vs MuJoCo, 0.2 s of offset targets",
        f"{result['parity_targets_0.2s_m']:.2e} m",
    )
    return table


@app.command()
def engine(
    character: str = typer.Option("humanoid", help="Character: humanoid | dog."),
    num_envs: int = typer.Option(64, help="Parallel envs."),
    seconds: float = typer.Option(2.0, help="Timed seconds per measurement (three measurements)."),
    threads: int = typer.Option(0, help="Worker threads; 0 = all cores available."),
    ball: bool = typer.Option(False, help="Add a ball to the scene."),
    engine_name: str = typer.Option(
        "mujoco", "--engine", help="Engine to measure: mujoco | newton (others: against MuJoCo)."
    ),
    device: str = typer.Option("cpu", help="Device of a non-MuJoCo engine: cpu | cuda:N."),
    json_out: JsonOption = None,
) -> None:
    """Measure engine env-steps/s against baselines measured in the same run.

    ``--engine mujoco``: against raw ``mujoco.rollout`` and a single-env loop.
    Another engine: against the MuJoCo engine, plus its keypoint parity error against it.
    """
    from mimic2dm.engines import engine_names

    if engine_name not in engine_names():
        raise typer.BadParameter(f"unknown engine {engine_name!r}; valid: {', '.join(engine_names())}",
                                 param_hint="--engine")  # fmt: skip
    if engine_name != "mujoco" and ball:
        raise typer.BadParameter("--ball is only measured for --engine mujoco", param_hint="--ball")
    with library_output_to_log("bench"):
        if engine_name == "mujoco":
            from mimic2dm.engines.bench import bench_engine

            result = bench_engine(
                character, num_envs, seconds, threads or None, ("ball",) if ball else ()
            )
            table = _table(result)
        else:
            from mimic2dm.engines.bench import bench_backend

            result = bench_backend(
                engine_name, character, num_envs, seconds, threads or None, device
            )
            table = _backend_table(result)
    human_console(json_out).print(table)
    write_json_report(result, json_out)
