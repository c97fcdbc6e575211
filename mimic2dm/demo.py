"""``mimic2dm demo``: the main job on the embedded default, with no external data.

1. Train the view-agnostic 2D tracker (rl-games PPO, MuJoCo on CPU, in-process envs) on
   the project's own demo clip (a keyframed humanoid motion projected to one static
   view, made on the fly) for a few minutes, with wandb (offline) and TensorBoard logs.
2. Evaluate the last checkpoint deterministically on the clip: metrics of docs/design.md section 10 as
   JSON, an overlay picture of reference vs projected keypoints, and a rendered video
   (skipped, and said so, where no OpenGL back-end works: :func:`mimic2dm.render.gl_backend`).
3. Evaluate the same network freshly initialised (the untrained baseline) the same way.
"""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console


def demo_config(out: Path, minutes: float = 4.0, num_envs: int | None = None, seed: int = 0):
    """The training config of the demo: its own ``OUT/train`` run, replaced on every demo
    (``overwrite=true``: a second ``make demo`` must not be refused as a reused run dir)."""
    from mimic2dm.train import compose_config

    return compose_config(
        [
            "data=demo",
            f"run_dir={Path(out) / 'train'}",
            "overwrite=true",
            f"seed={seed}",
            *([f"train.num_envs={num_envs}"] if num_envs else []),
            "train.max_epochs=1000000",
            f"train.max_seconds={minutes * 60:.0f}",
            # the demo clip marches in place: standing starts suit it (tests/test_rl_learning.py)
            "task.initial_state=default_pose",
        ]
    )


def run_demo(
    out: str | Path, minutes: float = 4.0, num_envs: int | None = None, seed: int = 0
) -> dict:
    """Train for ``minutes`` of wall time (the training defaults; ``num_envs`` overrides
    theirs), evaluate, and write everything into ``out``."""
    from mimic2dm.eval import evaluate
    from mimic2dm.render import gl_backend, no_gl_message
    from mimic2dm.rl.policy import load_policy, untrained_policy
    from mimic2dm.train import one_line_errors, summary_signal, train
    from mimic2dm.utils.reporting import library_output_to_log

    console = Console()
    out = Path(out).resolve()
    # probed before training so that its videos and ours use the same answer
    backend = gl_backend()
    (out / "rollout.mp4").unlink(missing_ok=True)  # a stale video must not pass for this run's
    video = out / "rollout.mp4" if backend is not None else None
    if video is None:
        console.print(f"[yellow]no video[/]: the demo skips rollout.mp4: {no_gl_message()}")
    else:
        console.print(f"rendering videos with MuJoCo's {backend} back-end")
    cfg = demo_config(out, minutes, num_envs, seed)
    console.print(
        f"[bold]training[/] the 2D tracker on the demo clip for {minutes:g} min -> {out / 'train'}"
    )
    with one_line_errors():  # a busy or unwritable run dir: one line, exit 1
        summary = train(cfg)
    if summary[
        "interrupted"
    ]:  # SIGINT / SIGTERM: training saved its checkpoint; nothing to evaluate
        console.print(f"stopped by {summary['signal']}: the demo ends without its evaluation")
        raise SystemExit(128 + summary_signal(summary))
    ckpt_dir = out / "train" / "checkpoints"
    ckpt = ckpt_dir / "last.pt"  # the weights training ended with, not the best running return
    clip = out / "train" / "data" / "demo_clip.npz"
    console.print(f"[bold]evaluating[/] {ckpt} on {clip}")
    with library_output_to_log("eval"):  # rl-games prints when it builds the network
        report = evaluate(ckpt, [clip], 1, out / "eval.json", out / "overlay.png", video)
    if video is not None and not video.is_file():  # GL failed here after a good probe
        console.print("[yellow]no video[/]: rendering failed (see the warning above)")
        video = None
    with library_output_to_log("eval"):
        baseline = evaluate(
            untrained_policy(load_policy(ckpt)), [clip], 1, out / "eval_untrained.json"
        )
    result = {
        "trained": {k: v for k, v in report.items() if k != "sequences"},
        "untrained": {k: v for k, v in baseline.items() if k != "sequences"},
        "training": {k: summary.get(k) for k in ("epochs", "frames", "wall_s") if k in summary},
        "outputs": [str(out / n) for n in ("eval.json", "overlay.png", "train")]
        + ([str(video)] if video is not None else []),
        "video": str(video) if video is not None else f"skipped: {no_gl_message()}",
    }
    (out / "demo.json").write_text(json.dumps(result, indent=2, default=str))
    console.print_json(json.dumps(result, default=str))
    return result
