"""The ``mimic2dm`` command: one entry point, one sub-command group per subsystem."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from mimic2dm.control.cli import bench_control_cmd, control_cmd, control_table_cmd, rollouts_cmd
from mimic2dm.corpus_bench import bench_corpus_command
from mimic2dm.engines.bench_cli import app as bench_app
from mimic2dm.generators.bench import bench_generate_cmd
from mimic2dm.generators.rsmt.cli import transition_cmd
from mimic2dm.generators.rsmt.evaluate import bench_rsmt_cmd
from mimic2dm.generators.sample import sample_cmd
from mimic2dm.imitate import imitate_cmd
from mimic2dm.jobs import jobs_app, submit_cmd
from mimic2dm.learn_bench import bench_learn_command
from mimic2dm.motion.cli import app as data_app
from mimic2dm.preprocess.bench import bench_preprocess_cmd
from mimic2dm.preprocess.cli import preprocess_cmd, strip_cmd
from mimic2dm.startup_bench import bench_startup_command
from mimic2dm.train_bench import bench_train_command
from mimic2dm.utils.cli import exit_on, fail
from mimic2dm.utils.reporting import (
    JsonOption,
    human_console,
    library_output_to_log,
    write_json_report,
)
from mimic2dm.utils.rundir import error_line
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
bench_app.command("rsmt")(bench_rsmt_cmd)
bench_app.command("train")(bench_train_command)
bench_app.command("learn")(bench_learn_command)
bench_app.command("corpus")(bench_corpus_command)
app.command("sample")(sample_cmd)
app.command("transition")(transition_cmd)
app.command("control")(control_cmd)
app.command("imitate")(imitate_cmd)
app.command("control-table")(control_table_cmd)
bench_app.command("control")(bench_control_cmd)
app.command("rollouts")(rollouts_cmd)
app.command("preprocess")(preprocess_cmd)
data_app.command("strip")(strip_cmd)
bench_app.command("preprocess")(bench_preprocess_cmd)
bench_app.command("startup")(bench_startup_command)
app.command("submit")(submit_cmd)
app.add_typer(jobs_app, name="jobs", help="Ray jobs on a cluster: list, logs, stop, fetch.")


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
        fail(f"cannot list {what!r}; choose one of: {', '.join(LISTABLE)}", code=2)
    found = {"tasks": describe_tasks, "characters": CHARACTERS.describe, "engines": ENGINES.describe,
             "objects": OBJECTS.describe}[what]()  # fmt: skip
    width = max(map(len, found), default=0)
    for name, desc in found.items():
        typer.echo(f"{name:<{width}}  {desc}".rstrip())


@app.command()
def demo(
    out: Annotated[str, typer.Option(help="Output directory.")] = "runs/demo",
    minutes: Annotated[float, typer.Option(help="Training wall time (minutes).")] = 4.0,
    num_envs: Annotated[
        int, typer.Option(help="Parallel environments (0: the training default, 256).")
    ] = 0,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
) -> None:
    """Train the 2D tracker on the project's demo clip (MuJoCo on CPU), then evaluate it."""
    from mimic2dm.demo import run_demo

    run_demo(out, minutes=minutes, num_envs=num_envs or None, seed=seed)


@app.command("eval")
def eval_cmd(
    checkpoint: str = typer.Argument(
        ..., help="Tracker checkpoint (.pt) written by mimic2dm-train."
    ),
    data: list[str] = typer.Option(
        ..., "--data", help="2D-motion file(s) with cameras; repeat for several."
    ),
    views: str = typer.Option(
        "1",
        help="Views tracked at once (1: 2D tracking; >= 2: view aggregation); several "
        "counts, e.g. 1,2,4, report every metric per count in one JSON (by_views).",
    ),
    json_out: JsonOption = None,
    picture: str = typer.Option(
        None, help="Overlay picture of reference vs projected keypoints (.png)."
    ),
    video: str = typer.Option(
        None, help="Rendered rollout with the reference drawn over it (.mp4)."
    ),
) -> None:
    """Run a tracker deterministically over every clip and view; report metrics of docs/design.md section 10."""
    from mimic2dm.eval import check_outputs, evaluate, parse_views

    try:
        parse_views(views)  # before anything is loaded
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--views") from None
    with exit_on(ValueError):
        check_outputs(json_out, picture, video)  # before any work, naming the option
    if video:
        from mimic2dm.render import gl_backend, no_gl_message

        if gl_backend() is None:  # fail before the rollout, not after it
            fail(f"--video {video}: {no_gl_message()}")
    try:
        with library_output_to_log("eval"):
            report = evaluate(checkpoint, data, views, None, picture, video)
    except (ValueError, OSError, KeyError) as e:  # OSError: a failed write, named with its errno
        fail(error_line(e))

    def brief(r: dict) -> dict:
        return {k: v for k, v in r.items() if k != "sequences"}

    summary = brief(report) if "by_views" not in report else {
        **report, "by_views": {v: brief(r) for v, r in report["by_views"].items()}}  # fmt: skip
    human_console(json_out).print_json(data=summary)
    try:
        write_json_report(report, json_out)
    except OSError as e:  # e.g. a full disk after the checks before the run
        fail(error_line(e))
    if video and not os.path.isfile(video):  # GL failed in this process after a good probe
        fail(f"--video {video}: rendering failed (see the warning above)")


@app.command("compare")
def compare_cmd(
    runs: list[str] = typer.Argument(
        ..., help="Training run directories (their checkpoints/last.pt)."
    ),
    data: str = typer.Option(
        ..., "--data", help="Clip with cameras and ground-truth 3D (synthetic)."
    ),
    camera: str = typer.Option(
        "run", help="run: each run's own training camera | data: the clip's."
    ),
    json_out: JsonOption = None,
    markdown: str = typer.Option(None, help="Write the table as markdown to this file."),
) -> None:
    """Evaluate runs on one clip and print paper Table 1 (success, 2D error, MPJPE, jitter,
    foot skating, penetration, floating); see docs/baselines.md."""
    from pathlib import Path

    from mimic2dm.compare import compare, markdown_table

    with exit_on(ValueError, FileNotFoundError, KeyError), library_output_to_log("compare"):
        result = compare(runs, data, camera)
    table = markdown_table(result)
    human_console(json_out).print(table, markup=False, highlight=False)
    if markdown:
        Path(markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(markdown).write_text(table)
    write_json_report(result, json_out)


@app.command("export")
def export_cmd(
    checkpoint: str = typer.Argument(..., help="Tracker checkpoint (.pt) or run directory."),
    out: str = typer.Option(..., "--out", help="Output directory."),
    fmt: str = typer.Option("onnx", "--format", help="onnx | torchscript."),
    data: list[str] = typer.Option(
        None, "--data", help="Clip(s) for the check rollout (default: the run's clips)."
    ),
    tolerance: float = typer.Option(1e-5, help="Largest allowed |exported - torch| error."),
) -> None:
    """Export the tracker policy (normalisation included) with a JSON description; check it
    against torch on observations of a short rollout."""
    from mimic2dm.export import export_policy

    try:
        with library_output_to_log("export"):
            desc = export_policy(checkpoint, out, fmt, data=data or None, tolerance=tolerance)
    except (ValueError, OSError, KeyError) as e:  # OSError: a failed write, named with its errno
        fail(error_line(e))
    c = desc["check"]
    typer.echo(f"wrote {os.path.join(out, desc['model'])} and {os.path.join(out, 'policy.json')}")
    typer.echo(f"max |{c['runtime']} - torch| = {c['max_abs_error']:.3g} over {c['samples']} "
               f"recorded observations (tolerance {tolerance:g})")  # fmt: skip
    if not c["passed"]:
        fail("the exported policy does not match torch", code=2)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
