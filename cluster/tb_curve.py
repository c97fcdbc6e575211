"""A training run's learning curve from its TensorBoard scalars, as the JSON files in
docs/results hold them (``{"run", "x": "samples", "every", TAG: [[samples, value], ...]}``).

    python cluster/tb_curve.py RUN_DIR --out CURVE.json [--every 25] [--tag TAG ...]
        [--command "mimic2dm-train ..."]

``--every N`` keeps every N-th logged point (and the last); ``--tag`` picks the scalars
(default: episode length, the terminations, the reward terms present, samples/s).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

DEFAULT_TAGS = (
    "episode/length", "reward/total", "reward/pos", "reward/obj", "reward/foot_ball",
    "termination/reprojection", "termination/ball_lost", "termination/timeout", "perf/samples_per_s",
)  # fmt: skip


def curve(run_dir: Path, tags: list[str], every: int) -> dict[str, list[list[float]]]:
    """``{tag: [[step, value], ...]}`` for the ``tags`` the run logged (others left out).

    Raises:
        ValueError: the run directory has no TensorBoard events (``RUN_DIR/tb``).
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = sorted((run_dir / "tb").glob("events*"))
    if not files:
        raise ValueError(
            f"{run_dir}: no TensorBoard events under {run_dir / 'tb'} (logger.tensorboard)"
        )
    out: dict[str, list[list[float]]] = {}
    for f in files:
        ea = EventAccumulator(str(f), size_guidance={"scalars": 0})
        ea.Reload()
        have = set(ea.Tags()["scalars"])
        for t in tags:
            if t in have:
                out.setdefault(t, []).extend([[int(e.step), float(e.value)] for e in ea.Scalars(t)])
    for t, pts in out.items():
        pts.sort()
        keep = pts[::every]
        if keep[-1] is not pts[-1]:
            keep.append(pts[-1])
        out[t] = keep
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run_dir", type=Path)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--every", type=int, default=25)
    p.add_argument("--tag", action="append", dest="tags")
    p.add_argument("--command", default=None, help="the command that made the run (recorded)")
    a = p.parse_args(argv)
    if a.every < 1:
        p.error(f"--every {a.every}: expected an integer >= 1")
    try:
        scalars = curve(a.run_dir, list(a.tags or DEFAULT_TAGS), a.every)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    doc = {"run": a.command or str(a.run_dir), "x": "samples", "every": a.every, **scalars}
    a.out.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
