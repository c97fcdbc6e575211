"""The ``mimic2dm`` command: one entry point, one sub-command group per subsystem."""

from __future__ import annotations

import typer

from mimic2dm.engines.bench_cli import app as bench_app
from mimic2dm.motion.cli import app as data_app

app = typer.Typer(
    name="mimic2dm",
    help="Mimic2DM: learn physics-based character control from 2D keypoints of ordinary videos.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(data_app, name="data", help="2D/3D motion data: synthesise views, validate files.")
app.add_typer(bench_app, name="bench", help="Benchmarks (ratios against baselines measured in the same run).")


@app.command()
def demo(
    out: str = typer.Option("runs/demo", help="Output directory."),
    num_envs: int = typer.Option(16, help="Parallel environments of the engine."),
    seed: int = typer.Option(0, help="Random seed."),
) -> None:
    """Run the main job on the embedded default (MuJoCo on CPU), with no external data."""
    from mimic2dm.demo import run_demo

    run_demo(out, num_envs=num_envs, seed=seed)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
