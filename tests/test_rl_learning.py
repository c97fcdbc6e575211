"""A CI-sized learning test: a short PPO run on the demo clip must track it much better than
the untrained network (deterministic rollouts from the same starts, the training task)."""

import pytest

from mimic2dm.rl.policy import load_policy, rollout_stats, untrained_policy
from mimic2dm.train import compose_config, train


def test_short_ppo_run_beats_the_untrained_policy(tmp_path):
    cfg = compose_config([
        f"run_dir={tmp_path / 'run'}", "train.max_epochs=40", "train.checkpoint.save_frequency=40",
        "logger.wandb=false", "logger.tensorboard=false", "progress=false", "train.torch_threads=1",
        "train.network.encoder_units=[256]", "train.network.head_units=[128,128]",
        # the demo clip marches in place: from standing starts the untrained policy already
        # stays up, and fitted (auto) starts make it stronger still (24.6 vs 21.1 steps
        # trained / untrained with auto, 2026-11-30); the standing starts show what PPO adds
        "task.initial_state=default_pose",
    ])  # fmt: skip
    summary = train(cfg)
    assert summary["epochs"] == 40
    trained = load_policy(tmp_path / "run")
    stats = {
        name: rollout_stats(p, trained.env_spec)
        for name, p in (("trained", trained), ("untrained", untrained_policy(trained)))
    }
    for s in stats.values():
        s["return"] = s["reward"] * s["episode_length"]  # tracking reward collected per episode
    print(
        {
            n: {k: round(v, 3) for k, v in s.items() if k in ("episode_length", "reward", "return")}
            for n, s in stats.items()
        }
    )
    t, u = stats["trained"], stats["untrained"]
    assert t["episode_length"] > 1.3 * u["episode_length"]
    assert t["return"] > 1.25 * u["return"]
    assert t["termination/reprojection"] < u["termination/reprojection"] - 0.15


SHORT_WALK_FRAMES = 40
"""The first 1.3 s of cmu_walk at 30 Hz: long enough to fall, short enough to learn in CI."""
ABSOLUTE_EPOCHS = 100
"""The budget: 100 epochs of the default PPO settings (819k samples; lr decays to 0 over them)."""
ABSOLUTE_LEVEL_PX = 70.0
"""Mean 2D error (px at 1080p) the last checkpoint must beat on the whole short clip (measured
2026-11-30: 41.5 px trained, 153.7 px untrained; 60 epochs gave 56.3 px, too close to call)."""


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a fixed number of epochs: 3-5 min alone, 10+ min on a busy machine
def test_last_checkpoint_reaches_an_absolute_level_on_a_short_walk(tmp_path):
    """The learning target: the default config, a fixed sample budget, the **last** checkpoint
    evaluated deterministically from the clip's first frame (as `mimic2dm eval` does)."""
    from generator_helpers import HAVE_MOCAP, MOCAP

    from mimic2dm.characters.clips import load_mocap_keypoints
    from mimic2dm.eval import evaluate
    from mimic2dm.motion.format import save_motion2d
    from mimic2dm.motion.synth import resample, synthesize_views

    if not HAVE_MOCAP:
        pytest.skip(f"CMU clips not found in {MOCAP}")
    walk = load_mocap_keypoints(MOCAP / "cmu_walk.npz")
    kp = resample(walk.keypoints, walk.fps, 30.0)[:SHORT_WALK_FRAMES]
    clip = tmp_path / "walk_short.npz"
    save_motion2d(synthesize_views(kp, walk.keypoint_set, 30.0, camera="static", seed=0), clip)
    cfg = compose_config([
        f"run_dir={tmp_path / 'run'}", "data=files", f"data.clips=[{clip}]",
        f"train.max_epochs={ABSOLUTE_EPOCHS}", f"train.checkpoint.save_frequency={ABSOLUTE_EPOCHS}",
        "logger.wandb=false", "logger.tensorboard=false", "progress=false", "logger.video_every=0",
    ])  # fmt: skip
    summary = train(cfg)
    assert summary["epochs"] == ABSOLUTE_EPOCHS
    last = tmp_path / "run" / "checkpoints" / "last.pt"
    trained = evaluate(last, [clip])
    untrained = evaluate(untrained_policy(load_policy(last)), [clip])
    print(
        {
            k: (round(trained[k], 1), round(untrained[k], 1))
            for k in ("error_2d_px", "max_error_2d_px")
        }
    )
    assert trained["initial_state"] == "reference_3d"
    assert untrained["error_2d_px"] > 1.5 * ABSOLUTE_LEVEL_PX  # the bar is far from doing nothing
    assert trained["error_2d_px"] < ABSOLUTE_LEVEL_PX
