"""``mimic2dm bench startup``: time and peak memory from nothing to a built tracking task
(clip read, reference, initial states, ASI buffers) for a short and a long clip.

Each measurement runs in a fresh process (its peak RSS is the measurement's), first cold
(no cached initial states: the inverse kinematics of every frame runs), then warm (the
fitted states read back from the cache, :func:`mimic2dm.tasks.tracking2d.initial.cache_dir`).
The clips are the shared CMU walk looped to each length and projected to one static view
(what ``mimic2dm data synth --seconds`` makes). Printed: seconds and peak MB per clip and
mode, and the long clip's ratios to the short one's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import typer
from rich.table import Table

from mimic2dm.utils.reporting import JsonOption, human_console, write_json_report

CHILD = """
import json, resource, sys, time
t0 = time.perf_counter()
import torch
torch.set_num_threads(1)
from mimic2dm.tasks.base import TaskSpec
from mimic2dm.tasks.registry import make_task
t1 = time.perf_counter()
spec = TaskSpec(task="tracking2d", character="humanoid", data=(sys.argv[1],),
                engine={"name": "mujoco", "num_threads": 1}, config={"initial_state": "auto"})
task = make_task(spec, int(sys.argv[2]), 0)
t2 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "build_s": t2 - t1,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def make_clip(seconds: float, out: Path) -> Path:
    """The shared CMU walk looped to ``seconds``, one static view, 30 fps, at ``out``."""
    from mimic2dm.app.data import MAKERS
    from mimic2dm.utils.paths import mocap_dir

    MAKERS["synth"](out, {"mocap": str(mocap_dir() / "cmu_walk.npz"), "seconds": seconds, "views": 1,
                          "camera": "static", "seed": 0, "fps": 30.0})  # fmt: skip
    return out


def measure(clip: Path, num_envs: int, cache: Path) -> dict:
    """Build the tracking task on ``clip`` in a fresh process with ``cache`` as the cache."""
    env = {**os.environ, "MIMIC2DM_CACHE": str(cache)}
    res = subprocess.run([sys.executable, "-c", CHILD, str(clip), str(num_envs)], capture_output=True,
                         text=True, env=env, check=False)  # fmt: skip
    if res.returncode != 0:
        raise RuntimeError(
            f"bench startup: building the task on {clip} failed: {res.stderr[-2000:]}"
        )
    return json.loads(res.stdout.strip().splitlines()[-1])


def bench_startup(seconds: tuple[float, float] = (5.0, 60.0), num_envs: int = 64) -> dict:
    """Cold and warm start-up of the short and the long clip; see the module docstring.

    Returns:
        ``{"clips": {"<s>s": {"frames", "cold": {...}, "warm": {...}}}, "ratios": {"cold_s",
        "warm_s", "cold_extra_mb", "warm_extra_mb"}}`` (long over short; extra MB: long minus short).
    """
    with tempfile.TemporaryDirectory(prefix="m2d_startup_") as tmp:
        root, out = Path(tmp), {}
        for s in seconds:
            clip = make_clip(s, root / f"walk_{s:g}s.npz")
            cache = root / f"cache_{s:g}"
            cold = measure(clip, num_envs, cache)
            warm = measure(clip, num_envs, cache)
            out[f"{s:g}s"] = {"seconds": s, "cold": cold, "warm": warm}
    short, long = out[f"{seconds[0]:g}s"], out[f"{seconds[1]:g}s"]
    ratios = {
        f"{mode}_s": long[mode]["build_s"] / max(short[mode]["build_s"], 1e-9)
        for mode in ("cold", "warm")
    }
    ratios |= {
        f"{mode}_extra_mb": long[mode]["peak_mb"] - short[mode]["peak_mb"]
        for mode in ("cold", "warm")
    }
    return {"num_envs": num_envs, "clips": out, "ratios": ratios}


def bench_startup_command(
    seconds: str = typer.Option("5,60", help="Short and long clip lengths (s), comma-separated."),
    num_envs: int = typer.Option(64, min=1, help="Envs of the task."),
    json_out: JsonOption = None,
) -> None:
    """Start-up time and peak memory of a tracking task: a short vs a long clip, cold and warm."""
    try:
        pair = tuple(float(x) for x in seconds.split(","))
    except ValueError:
        pair = ()
    if len(pair) != 2 or min(pair) <= 0:
        raise typer.BadParameter(
            "expected two clip lengths in seconds, e.g. 5,60", param_hint="--seconds"
        )
    r = bench_startup(pair, num_envs)
    table = Table(title=f"start-up of a tracking task ({num_envs} envs), fresh process each")
    for col in ("clip", "cold s", "cold peak MB", "warm s", "warm peak MB"):
        table.add_column(col, justify="right")
    for name, c in r["clips"].items():
        table.add_row(name, f"{c['cold']['build_s']:.1f}", f"{c['cold']['peak_mb']:.0f}",
                      f"{c['warm']['build_s']:.1f}", f"{c['warm']['peak_mb']:.0f}")  # fmt: skip
    q = r["ratios"]
    human_console(json_out).print(table)
    human_console(json_out).print(
        f"long / short: cold {q['cold_s']:.1f}x the time, {q['cold_extra_mb']:+.0f} MB; "
        f"warm {q['warm_s']:.1f}x the time, {q['warm_extra_mb']:+.0f} MB"
    )
    write_json_report(r, json_out)
