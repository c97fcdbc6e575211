"""The ``mimic2dm`` command: one entry point, one sub-command group per subsystem."""

from __future__ import annotations

import typer

from mimic2dm.engines.bench_cli import app as bench_app
from mimic2dm.generators.bench import bench_generate_cmd
from mimic2dm.generators.sample import sample_cmd
from mimic2dm.motion.cli import app as data_app
from mimic2dm.train_bench import bench_train_command
from mimic2dm.video.cli import bench_pose, extract, pose_app

app = typer.Typer(
    name="mimic2dm",
    help="Mimic2DM: learn physics-based character control from 2D keypoints of ordinary videos.",
    no_args_is_help=True,
    add_completion=False,
)
app.add_typer(data_app, name="data", help="2D/3D motion data: synthesise views, validate files.")
app.add_typer(
    bench_app, name="bench", help="Benchmarks (ratios against baselines measured in the same run)."
)
app.add_typer(
    pose_app, name="pose", help="Pose models: convert mmpose checkpoints, list architectures."
)
app.command("extract")(extract)
bench_app.command("pose")(bench_pose)
bench_app.command("generate")(bench_generate_cmd)
bench_app.command("train")(bench_train_command)
app.command("sample")(sample_cmd)


LISTABLE = ("tasks", "characters", "engines", "objects")


@app.command("list")
def list_cmd(
    what: str = typer.Argument(..., help="One of: tasks, characters, engines, objects."),
) -> None:
    """Print what is registered (tasks, characters, engines or objects), one line each."""
    from mimic2dm.characters import CHARACTERS, OBJECTS
    from mimic2dm.engines import ENGINES
    from mimic2dm.tasks.registry import describe_tasks

    if what not in LISTABLE:
        typer.echo(f"error: cannot list {what!r}; choose one of: {', '.join(LISTABLE)}", err=True)
        raise typer.Exit(2)
    found = {"tasks": describe_tasks, "characters": CHARACTERS.describe, "engines": ENGINES.describe,
             "objects": OBJECTS.describe}[what]()  # fmt: skip
    width = max(map(len, found), default=0)
    for name, desc in found.items():
        typer.echo(f"{name:<{width}}  {desc}".rstrip())


@app.command()
def demo(
    out: str = typer.Option("runs/demo", help="Output directory."),
    minutes: float = typer.Option(4.0, help="Training wall time (minutes)."),
    num_envs: int = typer.Option(64, help="Parallel environments."),
    seed: int = typer.Option(0, help="Random seed."),
) -> None:
    """Train the 2D tracker on the project's demo clip (MuJoCo on CPU), then evaluate it."""
    from mimic2dm.demo import run_demo

    run_demo(out, minutes=minutes, num_envs=num_envs, seed=seed)


@app.command("eval")
def eval_cmd(
    checkpoint: str = typer.Argument(
        ..., help="Tracker checkpoint (.pt) written by mimic2dm-train."
    ),
    data: list[str] = typer.Option(
        ..., "--data", help="2D-motion file(s) with cameras; repeat for several."
    ),
    views: int = typer.Option(
        1, help="Views tracked at once (1: 2D tracking; >= 2: view aggregation)."
    ),
    json_out: str = typer.Option(None, "--json", help="Write the report here."),
    picture: str = typer.Option(
        None, help="Overlay picture of reference vs projected keypoints (.png)."
    ),
    video: str = typer.Option(
        None, help="Rendered rollout with the reference drawn over it (.mp4)."
    ),
) -> None:
    """Run a tracker deterministically over every clip and view; report DESIGN-10 metrics."""
    from rich.console import Console

    from mimic2dm.eval import evaluate

    try:
        report = evaluate(checkpoint, data, views, json_out, picture, video)
    except (ValueError, FileNotFoundError, KeyError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from e
    summary = {k: v for k, v in report.items() if k != "sequences"}
    Console().print_json(data=summary)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
