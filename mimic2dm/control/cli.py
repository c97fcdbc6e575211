"""Commands of the controller: ``mimic2dm control``, ``mimic2dm bench control`` and
``mimic2dm rollouts`` (see docs/control.md)."""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.table import Table

from mimic2dm.utils.cli import exit_on, fail
from mimic2dm.utils.reporting import (
    JsonOption,
    human_console,
    library_output_to_log,
    write_json_report,
)

_TRACKER = typer.Option(None, "--tracker", help="Tracker checkpoint (.pt) or run directory.")
_GENERATOR = typer.Option(
    None,
    "--generator",
    help="Generator checkpoint (.pt) or run directory (gpt, diffusion or an RSMT sampler: "
    "--skill/--switch name its styles).",
)
_RANDOM = typer.Option(
    False, "--random-weights", help="Untrained tracker and generator (smoke run)."
)
_CHARACTER = typer.Option(
    "humanoid",
    "--character",
    help="Character of the untrained tracker when there is no --tracker (humanoid|dog); "
    "with --tracker it is the tracker's.",
)
_RANDOM_MODEL = typer.Option(
    "gpt",
    "--random-model",
    help="With --random-weights and no --generator: conf/model/NAME.yaml, or rsmt (an untrained "
    "RSMT sampler).",
)
LOAD_ERRORS = (ValueError, FileNotFoundError, KeyError)
"""What loading models, clips and reports raises: one line, exit 1."""

# options of ``mimic2dm control`` with long help texts
_DEPTH_RESCALE = typer.Option(False, "--depth-rescale/--no-depth-rescale", help="Convert the generated body-size velocity from the generator data's body size to the character's in the follow camera (depth motion keeps its speed; off by default: docs/control.md).")  # fmt: skip
_START_STATES = typer.Option(None, "--start-states", help="Clip(s) with 3D (or preprocessed) states: start each episode from the one that best matches the first generated frames, at the best azimuth (default: the default pose).")  # fmt: skip
_CLIPS_OUT = typer.Option(None, "--clips-out", help="Write each episode as a tracker training clip (the reference as the follow cameras saw it, the simulated states as initial states), cut before a fall or a lost reference (docs/control.md).")  # fmt: skip
_CLIPS_MAX_ERROR = typer.Option(300.0, "--clips-max-error", help="With --clips-out: cut before a keypoint this far off (px at 1080p).")  # fmt: skip
_FOLLOW = typer.Option("chunk", "--follow", help="Follow cameras: 'chunk' (re-placed at each chunk start, still in between) or 'step' (moved every step along the root path of the generated motion; docs/control.md).")  # fmt: skip
_START_BLEND = typer.Option(0, "--start-blend", help="With --start-states: ease the reference in from the character's own projection over the first N control steps (0: no blend; docs/control.md).")  # fmt: skip


def control_cmd(
    tracker: str = _TRACKER,
    generator: str = _GENERATOR,
    skill: str = typer.Option(
        None, "--skill", help="Condition label to start with (default: unconditional)."
    ),
    switch: list[str] = typer.Option(
        None, "--switch", help="TIME_S:SKILL, change the skill then (repeatable)."
    ),
    seconds: float = typer.Option(20.0, "--seconds", help="Simulated seconds per episode."),
    seed: int = typer.Option(
        0, "--seed", help="Seed of the first episode (episode i uses seed + i)."
    ),
    episodes: int = typer.Option(1, "--episodes", help="Episodes; the report aggregates them."),
    video: str = typer.Option(
        None, "--video", help="mp4 of the first episode with the reference drawn over it."
    ),
    json_out: JsonOption = None,
    random_weights: bool = _RANDOM,
    random_model: str = _RANDOM_MODEL,
    character: str = _CHARACTER,
    fid_extractor: str = typer.Option(
        None, "--fid", help="FID extractor (fid_extractor.pt or its run dir)."
    ),
    real: str = typer.Option(
        None, "--real", help="Real 2D motion for FID (default: held-out CMU views)."
    ),
    no_fid: bool = typer.Option(False, "--no-fid", help="Skip FID and diversity."),
    chunk_frames: int = typer.Option(
        8, "--chunk-frames", help="Control steps between re-anchoring (docs/control.md)."
    ),
    azimuth: float = typer.Option(
        None, "--azimuth", help="View 0's azimuth (deg; default: from the seed)."
    ),
    temperature: float = typer.Option(1.0, help="Generator sampling temperature (0: greedy)."),
    top_k: int = typer.Option(
        None, "--top-k", help="GPT: sample from the K most likely tokens only (default: all)."
    ),
    reference: str = typer.Option(
        None,
        "--reference",
        help="Instead of --generator: replay this real 2D clip's motion (looped) in the loop.",
    ),
    reference_views: int = typer.Option(
        1, "--reference-views", help="With --reference: its views 0..N-1 (N-view tracking)."
    ),
    depth_rescale: bool = _DEPTH_RESCALE,
    start_states: list[str] = _START_STATES,
    clips_out: str = _CLIPS_OUT,
    clips_max_error: float = _CLIPS_MAX_ERROR,
    clips_min_frames: int = typer.Option(
        45, "--clips-min-frames", help="With --clips-out: shorter clips are not written."
    ),
    follow: str = _FOLLOW,
    start_blend: int = _START_BLEND,
) -> None:
    """Drive a frozen tracker with a 2D motion generator in real time; report the paper's Table 3.

    ``--reference CLIP`` plays a real clip's canonical motion through the same loop (the
    cameras, ``G^-1`` and re-anchoring of generated motion): the reference row."""
    from mimic2dm.control.controller import ControlSettings, parse_switch
    from mimic2dm.control.run import load_models, run_control

    _check_outputs(video, fid_extractor, random_weights, no_fid)
    with exit_on(*LOAD_ERRORS), library_output_to_log("control"):
        s = ControlSettings(seconds=seconds, skill=skill, switches=[parse_switch(x) for x in switch or []],
                            chunk_frames=chunk_frames, seed=seed, temperature=temperature, top_k=top_k,
                            azimuth_deg=azimuth, depth_rescale=depth_rescale, start_blend=start_blend,
                            follow=follow)  # fmt: skip
        policy, gen, name = load_models(tracker, generator, random_weights, random_model,
                                        character, seed, reference, reference_views)  # fmt: skip
        clip_settings = _clip_settings(clips_out, clips_max_error, clips_min_frames)
        report = run_control(policy, gen, s, episodes, fid_extractor, real, video, not no_fid, name,
                             start_states or None, clips_out, clip_settings)  # fmt: skip
    summary = {k: v for k, v in report.items() if k not in ("per_episode", "settings")}
    human_console(json_out).print_json(data=summary)
    write_json_report(report, json_out)
    if video and not os.path.isfile(video):
        fail(f"--video {video}: rendering failed (see the warning above)")


def _check_outputs(video: str | None, fid_extractor: str | None, random_weights: bool,
                   no_fid: bool) -> None:  # fmt: skip
    """Exit 1 before any work when the video cannot be rendered or FID has no extractor."""
    if video:
        from mimic2dm.render import gl_backend, no_gl_message

        if gl_backend() is None:
            fail(f"--video {video}: {no_gl_message()}")
    if fid_extractor is None and not random_weights and not no_fid:
        fail("--fid EXTRACTOR is needed for FID (or --no-fid; --random-weights uses an untrained one)")  # fmt: skip


def _clip_settings(clips_out: str | None, max_error: float, min_frames: int):
    """The ``--clips-out`` settings (None without it)."""
    if not clips_out:
        return None
    from mimic2dm.control.clips import LoopClipSettings

    return LoopClipSettings(max_error_px=max_error, min_frames=min_frames)


def bench_control(tracker: str | None = None, generator: str | None = None, random_model: str = "gpt",
                  seconds: float = 10.0, warmup: float = 2.0, seed: int = 0,
                  character: str = "humanoid") -> dict:  # fmt: skip
    """Control steps/s of the whole loop for one character on one core (torch and MuJoCo: 1 thread).

    Returns:
        ``steps_per_s``, ``realtime_factor`` (vs 30 Hz), ms per step and share of each stage,
        and ``tracker_only_steps_per_s`` (observation + policy + physics of the same run).
    """
    import time

    import torch

    from mimic2dm.control.controller import STAGES, Controller, ControlSettings
    from mimic2dm.control.run import load_models

    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        policy, gen, name = load_models(
            tracker, generator, tracker is None or generator is None, random_model, character, seed
        )
        ctl = Controller(policy, gen, engine_threads=1)
        try:
            ctl.run(ControlSettings(seconds=warmup, skill=None, seed=seed))
            cpu0 = time.process_time()
            rec = ctl.run(ControlSettings(seconds=seconds, skill=None, seed=seed + 1))
            cpu = time.process_time() - cpu0
        finally:
            ctl.close()
    finally:
        torch.set_num_threads(prev)
    total = sum(rec.stage_seconds.values())
    steps = len(rec.uv)
    tracker_s = sum(rec.stage_seconds[k] for k in ("observation", "policy", "physics"))
    hz = ctl.hz
    return {
        "steps": steps, "seconds": total, "steps_per_s": steps / total, "realtime_factor": steps / total / hz,
        "control_hz": hz, "target_steps_per_s": hz, "meets_target": steps / total >= hz,
        "tracker_only_steps_per_s": steps / tracker_s, "steps_per_cpu_s": steps / cpu, "loop_vs_tracker_only": tracker_s / total,
        "stage_ms_per_step": {k: 1e3 * rec.stage_seconds[k] / steps for k in STAGES},
        "stage_share": {k: rec.stage_seconds[k] / total for k in STAGES},
        "generator_ms_per_frame": 1e3 * rec.gen_seconds / max(rec.gen_frames, 1),
        "generator": gen.source, "generator_type": gen.model_type, "tracker": name, "threads": 1,
        "character": ctl.spec.character,
    }  # fmt: skip


def bench_control_cmd(
    tracker: str = _TRACKER,
    generator: str = _GENERATOR,
    random_model: str = typer.Option(
        "gpt",
        "--random-model",
        help="Untrained generator of conf/model/NAME.yaml when no --generator.",
    ),
    seconds: float = typer.Option(10.0, help="Simulated seconds timed (after a 2 s warm-up)."),
    seed: int = typer.Option(0, help="Sampling seed."),
    character: str = _CHARACTER,
    json_out: JsonOption = None,
) -> None:
    """Control steps/s of generator + G^-1 + policy + physics on one core, as a real-time factor at 30 Hz."""
    with exit_on(*LOAD_ERRORS), library_output_to_log("bench"):
        r = bench_control(tracker, generator, random_model, seconds, 2.0, seed, character)
    t = Table(title=(f"control loop, {r['character']}, 1 thread ({r['generator']}; {r['tracker']}): "
                     f"{r['steps_per_s']:,.0f} steps/s = {r['realtime_factor']:.2f}x real time at "
                     f"{r['control_hz']:g} Hz (target 1x: {'met' if r['meets_target'] else 'NOT met'})"))  # fmt: skip
    t.add_column("stage")
    t.add_column("ms / step", justify="right")
    t.add_column("share", justify="right")
    for k, ms in r["stage_ms_per_step"].items():
        t.add_row(k, f"{ms:.2f}", f"{100 * r['stage_share'][k]:.1f} %")
    t.add_row("whole loop", f"{1e3 / r['steps_per_s']:.2f}", "100 %")
    t.add_row("whole loop, CPU time of this process", f"{1e3 / r['steps_per_cpu_s']:.2f}",
              f"{r['steps_per_cpu_s'] / r['control_hz']:.2f}x real time")  # fmt: skip
    t.add_row("tracker only (same run)", f"{1e3 / r['tracker_only_steps_per_s']:.2f}",
              f"loop / tracker-only speed {r['loop_vs_tracker_only']:.2f}x")  # fmt: skip
    human_console(json_out).print(t)
    write_json_report(r, json_out)


def rollouts_cmd(
    tracker: str = typer.Argument(..., help="Tracker checkpoint (.pt) or run directory."),
    data: list[str] = typer.Option(
        ..., "--data", help="Single-view 2D-motion file(s) with cameras (repeatable)."
    ),
    views: int = typer.Option(2, "--views", help="Views per written clip (azimuths a + 90 v)."),
    out: Path = typer.Option(..., "--out", help="Output directory of multi-view clips."),
    sets: int = typer.Option(4, "--sets", help="Random camera sets per rollout."),
    seed: int = typer.Option(0, "--seed", help="Seed of the cameras."),
    random_weights: bool = typer.Option(
        False, "--random-weights", help="An untrained tracker of the checkpoint's run."
    ),
    camera_modes: str = typer.Option(
        "static,tracking,dynamic",
        "--camera-modes",
        help="Camera modes drawn per set (comma-separated); 'static' for control generators.",
    ),
    json_out: JsonOption = None,
) -> None:
    """Track single-view 2D clips, project the simulated 3D keypoints into V views: generator training data."""
    from mimic2dm.control.rollouts import write_rollouts

    with exit_on(*LOAD_ERRORS), library_output_to_log("rollouts"):
        modes = tuple(m.strip() for m in camera_modes.split(",") if m.strip())
        report = write_rollouts(tracker, data, views, out, sets, seed, random_weights, modes)
    typer.echo(f"wrote {report['files']} clips ({views} views each) to {out}", err=bool(json_out))
    write_json_report(report, json_out)


def control_table_cmd(
    reports: list[Path] = typer.Argument(..., help="`mimic2dm control --json` reports."),
    markdown: Path = typer.Option(None, "--markdown", help="Also write the table to this file."),
) -> None:
    """The paper's Table 3 (markdown) from `mimic2dm control --json` reports, one row each."""
    import json

    from mimic2dm.control.metrics import table3_markdown

    rows = []
    for p in reports:
        try:
            r = json.loads(Path(p).read_text())
            if "success_rate" not in r or "episodes" not in r:
                raise KeyError("success_rate/episodes")
        except (OSError, ValueError, KeyError) as e:
            fail(f"{p}: not a `mimic2dm control --json` report ({e})")
        rows.append((Path(p).stem, r))
    table = table3_markdown(rows)
    typer.echo(table, nl=False)
    if markdown is not None:
        markdown.parent.mkdir(parents=True, exist_ok=True)
        markdown.write_text(table)
