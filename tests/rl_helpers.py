"""Shared set-up of the learner tests: a short demo clip and tiny training configs."""

from __future__ import annotations

import os
from pathlib import Path

from mimic2dm.tasks.base import TaskSpec
from omegaconf import OmegaConf

from mimic2dm.characters.demo_clip import make_demo_clip
from mimic2dm.motion.format import save_motion2d

TINY = [
    "train.num_envs=8", "train.horizon_length=8", "train.minibatch_size=32", "train.mini_epochs=2",
    "train.network.encoder_units=[64]", "train.network.head_units=[32,32]", "train.torch_threads=1",
    "engine.num_threads=1", "logger.wandb=false", "progress=false", "train.checkpoint.save_frequency=1",
    "train.checkpoint.save_best_after=1", "train.lr_schedule=fixed",
]  # fmt: skip
"""Overrides of a run that takes a fraction of a second per epoch. The learning rate is fixed:
exact-resume tests compare a run of 2k epochs with one of k resumed to 2k, and the default
linear decay spans max_epochs, which differs between the two by design."""


def write_demo(path: Path, seconds: float = 2.0) -> Path:
    """A ``seconds``-long demo clip (one static view) at ``path``."""
    _, m2 = make_demo_clip(seconds=seconds)
    save_motion2d(m2, path)
    return path


def spec_for(clip: Path, **task) -> TaskSpec:
    """Humanoid tracking ``TaskSpec`` over one clip, one MuJoCo thread; ``task``: config changes
    (starts: the default pose, not lifted, uniform start frames, unless ``task`` says otherwise)."""
    asi = {"start_sampling": "uniform", **task.pop("asi", {})}
    config = {"initial_state": "default_pose", "initial_ground": False, "asi": asi, **task}
    return TaskSpec(
        task="tracking2d",
        character="humanoid",
        data=(str(clip),),
        engine={"name": "mujoco", "num_threads": 1},
        config=config,
    )


def tiny_config(run_dir: Path, clip: Path, *overrides: str):
    """Composed tracker config of a tiny in-process run on ``clip``."""
    from mimic2dm.train import compose_config

    cfg = compose_config([f"run_dir={run_dir}", "data=files", *TINY, *overrides])
    OmegaConf.update(cfg, "data.clips", [{"file": str(clip)}], merge=False)
    return cfg


def ray_tmp() -> str:
    """A short Ray session dir for tests (Unix socket paths are limited to 107 chars)."""
    return f"/tmp/ray_m2d_test_{os.getuid()}"


def ensure_ray():
    """A local Ray cluster (2 CPUs) shared by every test of the session; shut down at exit."""
    import atexit

    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, _temp_dir=ray_tmp(), include_dashboard=False, logging_level="warning")
        atexit.register(ray.shutdown)
    return ray


def straight_and_resumed(
    tmp_path: Path, clip: Path, k: int, *overrides: str
) -> tuple[dict, dict, dict]:
    """A tiny run of ``2k`` epochs and one of ``k`` resumed to ``2k``, with ``overrides``.

    Returns:
        ``(straight last.pt, resumed last.pt, the resumed run's summary)``; both runs' epoch
        and frame counters are checked to be ``2k`` epochs of 64 samples.
    """
    from mimic2dm.train import compose_config, train
    from mimic2dm.utils.checkpoint import load_checkpoint

    train(tiny_config(tmp_path / "straight", clip, f"train.max_epochs={2 * k}", *overrides))
    train(tiny_config(tmp_path / "split", clip, f"train.max_epochs={k}", *overrides))
    s = train(
        compose_config([f"resume={tmp_path / 'split'}"]),
        resume_overrides=[f"train.max_epochs={2 * k}"],
    )
    assert s["resumed_from_epoch"] == k and s["epochs"] == 2 * k
    a = load_checkpoint(tmp_path / "straight" / "checkpoints" / "last.pt")
    b = load_checkpoint(tmp_path / "split" / "checkpoints" / "last.pt")
    assert (a["epoch"], a["frame"]) == (b["epoch"], b["frame"]) == (2 * k, 2 * k * 8 * 8)
    return a, b, s
