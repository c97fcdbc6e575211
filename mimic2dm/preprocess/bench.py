"""``mimic2dm bench preprocess``: video frames per second of preprocessing.

The clip: a humanoid mocap clip (default the shared ``cmu_walk``; the built-in demo clip
when it is absent) resampled to ``--fps`` and played forwards and backwards until it
lasts ``--seconds``, seen by one static virtual camera, stripped. Measured in the same
run, interleaved (best of ``--repeats``): the full preprocessing (every heading
hypothesis) and, as the baseline, the same with a single hypothesis; the table gives
frames/s, the ratio between the two and the ratio to the target (30 frames/s).
One torch thread by default: the batches are small, and on the shared 2-core machines
a second intra-op thread made it 20x slower (measured 2026-11-30).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.table import Table

from mimic2dm.utils.paths import mocap_dir
from mimic2dm.utils.reporting import JsonOption, human_console, write_json_report

TARGET_FPS = 30.0


def _ping_pong(x: np.ndarray, frames: int) -> np.ndarray:
    """``x [T, ...]`` played forwards then backwards until ``frames`` long (no jumps)."""
    loop = np.concatenate([x, x[-2:0:-1]]) if x.shape[0] > 2 else x
    reps = int(np.ceil(frames / loop.shape[0]))
    return np.concatenate([loop] * reps)[:frames]


def bench_clip(clip: Path | None, seconds: float, fps: float):
    """The stripped single-view benchmark clip (:class:`~mimic2dm.motion.format.Motion2D`)."""
    from mimic2dm.motion.synth import resample, synthesize_views
    from mimic2dm.preprocess.clipio import strip_clip

    if clip is not None or (mocap_dir() / "cmu_walk.npz").is_file():
        from mimic2dm.characters.clips import load_mocap_keypoints

        k3 = load_mocap_keypoints(clip or (mocap_dir() / "cmu_walk.npz"))
        kp, src_fps = k3.keypoints, k3.fps
    else:
        from mimic2dm.characters.demo_clip import make_demo_clip

        m3, m2 = make_demo_clip(seconds=4.0, fps=fps)
        kp, src_fps = m2.keypoints3d, m2.fps
    kp = _ping_pong(resample(kp, src_fps, fps), int(round(seconds * fps)))
    return strip_clip(synthesize_views(kp, "coco17", fps, seed=0))


def bench_preprocess(
    clip: Path | None, seconds: float, fps: float, threads: int, headings: int, repeats: int = 2
) -> dict:
    """Time preprocessing of the benchmark clip with ``headings`` hypotheses and with one
    (``repeats`` interleaved runs of each, the fastest kept)."""
    import torch

    from mimic2dm.characters.registry import load_character
    from mimic2dm.preprocess.optimize import PreprocessConfig, fit_clip

    if threads:
        torch.set_num_threads(threads)
    m = bench_clip(clip, seconds, fps)
    spec = load_character("humanoid")
    args = (spec, m.keypoints[0], m.confidence[0], m.mask()[0], m.fps, m.image_size)
    fit_clip(
        *args, PreprocessConfig(headings=1, iters=2, lm_iters=1, hypothesis_iters=1)
    )  # warm-up
    out = {"frames": m.num_frames, "fps": fps, "seconds_of_video": m.num_frames / fps,
           "threads": torch.get_num_threads(), "headings": headings}  # fmt: skip
    for _ in range(repeats):  # interleaved, so that both runs see the same load; best of each kept
        for name, h in (("all_hypotheses", headings), ("one_hypothesis", 1)):
            t0 = time.perf_counter()
            fit = fit_clip(*args, PreprocessConfig(headings=h))
            dt = time.perf_counter() - t0
            if name not in out or dt < out[name]["seconds"]:
                out[name] = {"seconds": dt, "frames_per_s": m.num_frames / dt,
                             "stages_s": {k: v for k, v in fit.info.items() if k.startswith("seconds_")}}  # fmt: skip
    return out


def bench_preprocess_cmd(
    clip: Annotated[
        Path | None, typer.Option(help="Human mocap clip (default: shared cmu_walk).")
    ] = None,
    seconds: Annotated[float, typer.Option(min=0.5, help="Length of the benchmark clip.")] = 10.0,
    fps: Annotated[float, typer.Option(min=1.0, help="Video frame rate.")] = 30.0,
    threads: Annotated[int, typer.Option(min=0, help="Torch threads (0 = torch's default).")] = 1,
    headings: Annotated[int, typer.Option(min=1, help="Heading hypotheses of the full run.")] = 8,
    repeats: Annotated[
        int, typer.Option(min=1, help="Interleaved runs of each; the fastest is kept.")
    ] = 2,
    json_out: JsonOption = None,
) -> None:
    """Measure preprocessing speed (video frames/s) of a humanoid clip, all heading hypotheses included."""
    r = bench_preprocess(clip, seconds, fps, threads, headings, repeats)
    table = Table(title=f"preprocess: {r['frames']} frames ({r['seconds_of_video']:g} s at {fps:g} fps), "
                        f"{r['threads']} torch thread(s)")  # fmt: skip
    for col in ("run", "seconds", "frames/s", "vs one hypothesis", "vs target 30 fps"):
        table.add_column(col, justify="right")
    base = r["one_hypothesis"]["frames_per_s"]
    for name in ("all_hypotheses", "one_hypothesis"):
        x = r[name]
        table.add_row(name.replace("_", " "), f"{x['seconds']:.2f}", f"{x['frames_per_s']:.1f}",
                      f"{x['frames_per_s'] / base:.2f}x", f"{x['frames_per_s'] / TARGET_FPS:.2f}x")  # fmt: skip
    human_console(json_out).print(table)
    write_json_report(r, json_out)
