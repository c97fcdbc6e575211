"""``mimic2dm demo``: the main job on the embedded default, with no external data.

1. Train the view-agnostic 2D tracker (rl-games PPO, MuJoCo on CPU, in-process envs) on
   the project's own demo clip (a keyframed humanoid motion projected to one static
   view, made on the fly) for a few minutes, with wandb (offline) and TensorBoard logs.
2. Evaluate the best checkpoint deterministically on the clip: DESIGN-10 metrics as
   JSON, an overlay picture of reference vs projected keypoints, and a rendered video.
3. Evaluate the same network freshly initialised (the untrained baseline) the same way.
"""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console


def run_demo(out: str | Path, minutes: float = 4.0, num_envs: int = 64, seed: int = 0) -> dict:
    """Train for ``minutes`` of wall time, evaluate, and write everything into ``out``."""
    from mimic2dm.eval import evaluate
    from mimic2dm.rl.policy import load_policy, untrained_policy
    from mimic2dm.train import compose_config, train

    console = Console()
    out = Path(out).resolve()
    cfg = compose_config(
        [
            "data=demo",
            f"run_dir={out / 'train'}",
            f"seed={seed}",
            f"train.num_envs={num_envs}",
            "train.max_epochs=1000000",
            f"train.max_seconds={minutes * 60:.0f}",
            "train.torch_threads=1",
        ]
    )
    console.print(
        f"[bold]training[/] the 2D tracker on the demo clip for {minutes:g} min -> {out / 'train'}"
    )
    summary = train(cfg)
    ckpt_dir = out / "train" / "checkpoints"
    ckpt = ckpt_dir / "best.pt" if (ckpt_dir / "best.pt").is_file() else ckpt_dir / "last.pt"
    clip = out / "train" / "data" / "demo_clip.npz"
    console.print(f"[bold]evaluating[/] {ckpt} on {clip}")
    report = evaluate(ckpt, [clip], 1, out / "eval.json", out / "overlay.png", out / "rollout.mp4")
    baseline = evaluate(untrained_policy(load_policy(ckpt)), [clip], 1, out / "eval_untrained.json")
    result = {
        "trained": {k: v for k, v in report.items() if k != "sequences"},
        "untrained": {k: v for k, v in baseline.items() if k != "sequences"},
        "training": {k: summary.get(k) for k in ("epochs", "frames", "wall_s") if k in summary},
        "outputs": [str(out / n) for n in ("eval.json", "overlay.png", "rollout.mp4", "train")],
    }
    (out / "demo.json").write_text(json.dumps(result, indent=2, default=str))
    console.print_json(json.dumps(result, default=str))
    return result
