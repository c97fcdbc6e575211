"""The preprocessing accuracy grid (docs/preprocess.md): single static views of the
shared mocap clips, each made by `mimic2dm data synth`, stripped by `mimic2dm data strip`,
fitted by `fit_clip` and scored against the unstripped clip by `report.accuracy`.

    python cluster/preprocess_grid.py [--set grid|heldout|noisy|all] [--views NAME,...]
        [--override KEY=VALUE ...] [--workers 2] [--json OUT.json]

grid: seeds 0-3 at 30 fps, seed 0 at 60 fps, seed 0 with 3 px noise and 10 % dropped
keypoints, for walk, run and hop, and the two dog clips (20 views); heldout: seeds 4-7 at
30 fps of walk, run and hop (12 views, never used to choose a default); noisy: seeds 1-3
with noise and drops (9 views); all: the three. ``--override`` sets a
``PreprocessConfig`` field (``lm_iters=10``). The shared data: ``$MIMIC2DM_SHARED`` (default
``../shared`` beside the repository). One torch thread per view, ``--workers`` at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("MIMIC2DM_SHARED", ROOT.parent / "shared"))
M2D = str(Path(sys.executable).parent / "mimic2dm")


def views(which: str) -> list[tuple[str, str, str, list[str]]]:
    """``(name, mocap clip, character, data synth flags)`` of each view of ``which``."""
    out = []
    if which in ("grid", "all"):
        for c in ("walk", "run", "hop"):
            out += [(f"{c}_s{s}", f"cmu_{c}", "humanoid", ["--seed", str(s)]) for s in range(4)]
            out.append((f"{c}_60fps", f"cmu_{c}", "humanoid", ["--seed", "0", "--fps", "60"]))
            out.append((f"{c}_noisy", f"cmu_{c}", "humanoid",
                        ["--seed", "0", "--noise-px", "3", "--drop-prob", "0.1"]))  # fmt: skip
        out += [(f"dog_{c}", f"dog_{c}", "dog", ["--seed", "0"]) for c in ("trot", "pace")]
    if which in ("heldout", "all"):
        for c in ("walk", "run", "hop"):
            out += [(f"{c}_h{s}", f"cmu_{c}", "humanoid", ["--seed", str(s)]) for s in range(4, 8)]
    if which in ("noisy", "all"):
        for c in ("walk", "run", "hop"):
            out += [(f"{c}_noisy_s{s}", f"cmu_{c}", "humanoid",
                     ["--seed", str(s), "--noise-px", "3", "--drop-prob", "0.1"]) for s in range(1, 4)]  # fmt: skip
    return out


def fit_view(view, overrides: dict, work: str) -> dict:
    import torch

    torch.set_num_threads(1)
    from mimic2dm.characters.registry import load_character
    from mimic2dm.motion.format import load_motion2d
    from mimic2dm.preprocess.clipio import preprocessed_clip
    from mimic2dm.preprocess.optimize import PreprocessConfig, fit_clip
    from mimic2dm.preprocess.report import accuracy

    name, clip, character, flags = view
    gt_path, video_path = f"{work}/{name}.npz", f"{work}/{name}_video.npz"
    fps = [] if "--fps" in flags else ["--fps", "30"]
    for cmd in (
        ["data", "synth", str(SHARED / "data" / "mocap" / f"{clip}.npz"), "--character", character,
         "--views", "1", "--camera", "static", *fps, *flags, "--out", gt_path],
        ["data", "strip", gt_path, "--out", video_path],
    ):  # fmt: skip
        subprocess.run([M2D, *cmd], check=True, capture_output=True)
    m, gt = load_motion2d(video_path), load_motion2d(gt_path)
    cfg = PreprocessConfig(**overrides)
    fit = fit_clip(load_character(character), m.keypoints[0], m.confidence[0], m.mask()[0],
                   m.fps, m.image_size, cfg)  # fmt: skip
    acc = accuracy(m, preprocessed_clip(m, fit, character, {}), gt)
    return {"view": name, "clip": clip, "character": character, "synth": flags, **acc}


def _value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", choices=("grid", "heldout", "noisy", "all"), default="grid")
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--views", help="comma-separated view names of the set (default: all of them)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    if bad := [o for o in a.override if "=" not in o]:
        ap.error(f"--override {bad[0]!r}: expected KEY=VALUE")
    overrides = {k: _value(v) for k, v in (o.split("=", 1) for o in a.override)}
    from dataclasses import fields

    from mimic2dm.preprocess.optimize import PreprocessConfig

    known = {f.name for f in fields(PreprocessConfig)}
    if unknown := sorted(set(overrides) - known):
        ap.error(
            f"--override {', '.join(unknown)}: not a PreprocessConfig field ({', '.join(sorted(known))})"
        )
    try:
        PreprocessConfig(**overrides)
    except (TypeError, ValueError) as e:
        ap.error(f"--override: {e}")
    vs = views(a.set)
    if a.views:
        wanted, known = a.views.split(","), {v[0] for v in vs}
        if unknown := [w for w in wanted if w not in known]:
            ap.error(
                f"--views: {', '.join(unknown)} not in --set {a.set} ({', '.join(sorted(known))})"
            )
        vs = [v for v in vs if v[0] in wanted]
    with tempfile.TemporaryDirectory() as work, ProcessPoolExecutor(a.workers) as ex:
        rows = list(ex.map(fit_view, vs, [overrides] * len(vs), [work] * len(vs)))
    for r in rows:
        print(f"{r['view']:12s} mpjpe {r['mpjpe_mm']:6.1f} mm  reproj {r['reprojection_px']:5.2f} px"
              f"  cam rot {r['camera_rotation_deg']:5.1f} deg")  # fmt: skip
    clean = [
        r["mpjpe_mm"] for r in rows if r["character"] == "humanoid" and "noisy" not in r["view"]
    ]
    summary = {
        "overrides": overrides,
        "set": a.set,
        "mean_mpjpe_mm_noise_free_humanoid": float(np.mean(clean)) if clean else None,
        "noise_free_over_80_mm": [r["view"] for r in rows if "noisy" not in r["view"] and r["mpjpe_mm"] > 80],
        "noisy_over_100_mm": [r["view"] for r in rows if "noisy" in r["view"] and r["mpjpe_mm"] > 100],
        "max_reprojection_px": max(r["reprojection_px"] for r in rows),
    }  # fmt: skip
    print(json.dumps(summary))
    if a.json:
        a.json.write_text(json.dumps({"summary": summary, "views": rows}, indent=1))


if __name__ == "__main__":
    main()
