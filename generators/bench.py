"""``mimic2dm bench generate``: streaming 2D motion generation speed on one CPU core.

Measures frames/s of the streaming path the hierarchical controller (``mimic2dm control``)
consumes: GPT tokens with a sliding context, tokenizer decoding in chunks,
de-normalisation and ``G^-1`` into pixels, with ``torch.set_num_threads(1)``; reports
the ratio to real time (30 fps).
Without a checkpoint it times randomly initialised models of the paper's sizes (speed
does not depend on the weights).

``--model-type rsmt`` times RSMT instead: transitions streamed frame by frame at batch 1
(:meth:`~mimic2dm.generators.rsmt.inference.RSMT.stream`, the path of ``mimic2dm
transition``) between two frames of a synthetic clip, after one untimed warm-up transition.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
import typer
from mimic2dm.generators.data import FeatureStats
from mimic2dm.generators.gpt import GPT, GPTConfig
from mimic2dm.generators.sample import (
    LoadedGenerator,
    MotionStream,
    PixelStream,
    Placement,
    load_generator,
)
from mimic2dm.generators.vqvae import VQVAE, VQVAEConfig

from mimic2dm.utils.cli import check_choice, exit_on
from mimic2dm.utils.reporting import (
    JsonOption,
    json_to_stdout,
    library_output_to_log,
    write_json_report,
)

REAL_TIME_FPS = 30.0
TARGET_FPS = 1000.0


def random_generator(num_views: int = 1, block_size: int = 17) -> LoadedGenerator:
    """Untrained GPT (4 layers, 4 heads, width 128) + tokenizer (512 x 128, l = 4) for COCO-17."""
    tok = VQVAE(VQVAEConfig()).eval()
    tok.quantizer.codebook.normal_()
    gpt = GPT(GPTConfig(block_size=block_size, num_classes=3, num_views=num_views)).eval()
    D = tok.config.in_dim
    stats = FeatureStats(torch.zeros(D), torch.full((D,), 0.05))
    data = {"keypoint_set": "coco17", "fps": REAL_TIME_FPS, "label_names": ["a", "b", "c"]}
    return LoadedGenerator("gpt", gpt, stats, tok, data, "random weights")


def bench_generate(checkpoint: str | Path | None = None, frames: int = 2000, chunk: int = 8, seed: int = 0,
                   warmup_frames: int = 128) -> dict:  # fmt: skip
    """Time streaming generation of ``frames`` frames (per view) on one thread.

    Args:
        checkpoint: a GPT generator checkpoint / run dir, or None for random weights.
        frames: timed frames; ``warmup_frames`` are generated first and not timed.
        chunk: tokens per view decoded per call.

    Returns:
        dict with ``frames_per_s``, ``realtime_ratio`` (vs 30 fps), ``ms_per_frame`` and settings.
    """
    gen = load_generator(checkpoint) if checkpoint else random_generator()
    if gen.model_type != "gpt":
        raise ValueError(
            f"{checkpoint}: bench generate times GPT streaming; this is a {gen.model_type} checkpoint"
        )
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        g = torch.Generator().manual_seed(seed)
        stream = MotionStream(
            gen.model,
            gen.tokenizer,
            gen.stats,
            0 if gen.data.get("label_names") else -1,
            1.0,
            None,
            g,
            chunk,
        )
        pixels = PixelStream(Placement(), gen.num_views)
        n = 0
        while n < warmup_frames:
            n += pixels.push(stream.next_chunk()).shape[1]
        n, t0 = 0, time.perf_counter()
        while n < frames:
            n += pixels.push(stream.next_chunk()).shape[1]
        dt = time.perf_counter() - t0
    finally:
        torch.set_num_threads(prev)
    fps = n / dt
    return {"frames": n, "seconds": dt, "frames_per_s": fps, "ms_per_frame": 1e3 / fps, "realtime_ratio": fps / REAL_TIME_FPS,
            "target_frames_per_s": TARGET_FPS, "meets_target": fps >= TARGET_FPS, "threads": 1, "chunk_tokens": chunk,
            "num_views": gen.num_views, "block_size": gen.model.config.block_size, "checkpoint": str(checkpoint or "random weights")}  # fmt: skip


def _glide_clip(frames: int) -> torch.Tensor:
    """RSMT frames ``[frames, 180]`` of the humanoid's rest pose gliding along +x at 1.3 m/s
    (a stand-in motion: streaming speed does not depend on it)."""
    from mimic2dm.generators.rsmt import features as F

    from mimic2dm.characters import humanoid
    from mimic2dm.characters.mocap import HumanMocap, human_fk

    root = torch.tensor(humanoid.OFFSETS[0]).repeat(frames, 1)
    root[:, 0] = torch.arange(frames) * 1.3 / F.FPS
    rot = torch.zeros(frames, len(humanoid.BODY_NAMES), 4)
    rot[..., 3] = 1.0
    clip = HumanMocap(F.FPS, root, rot, torch.tensor(humanoid.OFFSETS), humanoid.PARENTS, humanoid.BODY_NAMES)  # fmt: skip
    return F.clip_features(*human_fk(clip), F.FPS)


def bench_rsmt(checkpoint: str | Path | None = None, transitions: int = 5, frames: int = 60, seed: int = 0,
               warmup: int = 1) -> dict:  # fmt: skip
    """Time ``transitions`` RSMT transitions of ``frames`` frames each, streamed at batch 1 on one thread.

    Args:
        checkpoint: an RSMT sampler run dir / checkpoint, or None for random weights of the
            default sizes.
        warmup: untimed transitions first.

    Returns:
        dict with ``frames_per_s``, ``realtime_ratio`` (vs 30 fps), ``ms_per_frame`` and settings.

    Raises:
        FileNotFoundError / ValueError: no checkpoint, or one of another kind.
    """
    from mimic2dm.generators.rsmt.inference import load_rsmt, random_rsmt

    rsmt = load_rsmt(checkpoint) if checkpoint else random_rsmt(seed)
    style_frames = rsmt.sampler.cfg.style_frames
    clip = _glide_clip(max(frames + 1, style_frames))
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        start, target, style = clip[:1], clip[frames : frames + 1], clip[None, :style_frames]
        phase0 = rsmt.phase_at(clip, 0)[None]
        g = torch.Generator().manual_seed(seed)
        for _ in range(warmup):
            for _ in rsmt.stream(start, phase0, target, frames, style, g):
                pass
        n, t0 = 0, time.perf_counter()
        for _ in range(transitions):
            for _ in rsmt.stream(start, phase0, target, frames, style, g):
                n += 1
        dt = time.perf_counter() - t0
    finally:
        torch.set_num_threads(prev)
    fps = n / dt
    return {"model_type": "rsmt", "frames": n, "seconds": dt, "frames_per_s": fps, "ms_per_frame": 1e3 / fps,
            "realtime_ratio": fps / REAL_TIME_FPS, "target_frames_per_s": REAL_TIME_FPS, "meets_target": fps >= REAL_TIME_FPS,
            "threads": 1, "batch": 1, "transitions": transitions, "transition_frames": frames,
            "style_frames": style_frames, "checkpoint": str(checkpoint or "random weights")}  # fmt: skip


def bench_generate_cmd(
    checkpoint: Path | None = typer.Option(
        None,
        "--checkpoint",
        help="GPT generator (or with --model-type rsmt, RSMT sampler) run dir / checkpoint "
        "(default: random weights).",
    ),
    frames: int = typer.Option(2000, min=1, help="Frames timed (per view)."),
    chunk: int = typer.Option(8, min=1, help="Tokens per view decoded per call."),
    seed: int = typer.Option(0, help="Sampling seed."),
    json_out: JsonOption = None,
    model_type: str = typer.Option(
        "gpt", "--model-type", help="gpt: streaming GPT; rsmt: streaming RSMT transitions."
    ),
    transitions: int = typer.Option(5, min=1, help="rsmt: transitions timed (after one warm-up)."),
    transition_frames: int = typer.Option(60, min=1, help="rsmt: frames per transition."),
) -> None:
    """Frames/s of streaming GPT generation incl. tokenizer decoding on one CPU core, vs real
    time (30 fps); ``--model-type rsmt``: of RSMT transitions at batch 1."""
    check_choice(model_type, ("gpt", "rsmt"), "--model-type")
    if model_type == "rsmt":
        with exit_on(ValueError, FileNotFoundError), library_output_to_log("bench"):
            r = bench_rsmt(checkpoint, transitions, transition_frames, seed)
        typer.echo(f"streaming RSMT transitions ({r['checkpoint']}, batch 1, 1 thread, {transitions} x {transition_frames} frames): "
                   f"{r['frames_per_s']:,.0f} frames/s = {r['realtime_ratio']:.1f}x real time at 30 fps "
                   f"({r['ms_per_frame']:.3f} ms/frame; real time: {'met' if r['meets_target'] else 'NOT met'})",
                   err=json_to_stdout(json_out))  # fmt: skip
        write_json_report(r, json_out)
        return
    with library_output_to_log("bench"):
        r = bench_generate(checkpoint, frames, chunk, seed)
    typer.echo(f"streaming generation ({r['checkpoint']}, {r['num_views']} view(s), 1 thread): "
               f"{r['frames_per_s']:,.0f} frames/s = {r['realtime_ratio']:.1f}x real time at 30 fps "
               f"({r['ms_per_frame']:.3f} ms/frame; target {TARGET_FPS:.0f} frames/s: {'met' if r['meets_target'] else 'NOT met'})",
               err=json_to_stdout(json_out))  # fmt: skip
    write_json_report(r, json_out)


app = typer.Typer(add_completion=False)
app.command("generate")(bench_generate_cmd)

if __name__ == "__main__":
    app()
