"""A CI-sized learning test of the ``dribble`` task: a short PPO run on a synthetic
dribble of cmu_run collects more object (ball) reward per episode than the untrained network,
in deterministic rollouts from the same starts.

What the budget teaches is to stay up and near the ball for longer, not to kick it: the
per-step object reward falls as episodes grow (the ball rolls off its track unless kicked).
Measured 2026-12-07 on the legs-only dribble clip: per episode 13.9 trained vs 7.4 untrained
(1.89x), episodes 14.7 vs 7.5 steps; from frame 0 over the 3 s clip the ball is within reach
on 39.6 % of the frames trained, 26.4 % untrained, touched by neither (docs/tasks.md)."""

from __future__ import annotations

import pytest
from generator_helpers import MOCAP

from mimic2dm.motion.format import save_motion2d
from mimic2dm.rl.policy import load_policy, rollout_stats, untrained_policy
from mimic2dm.train import compose_config, train

DRIBBLE_EPOCHS = 60
"""The budget: 60 epochs of the default PPO settings (492k samples, 3-5 min on 2 cores)."""
BALL_WITHIN_REACH = 0.33
"""The fraction of frames the trained tracker keeps the ball within reach (1.5 m) over the 3 s
clip from frame 0 (deterministic): measured 0.396 trained, 0.264 untrained (2026-12-07)."""


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a fixed number of epochs: 3-5 min alone, 10+ min on a busy machine
def test_short_dribble_run_raises_the_object_reward(tmp_path):
    from mimic2dm.characters.dribble_clip import dribble_clip

    if not (MOCAP / "cmu_run.npz").is_file():
        pytest.skip(f"CMU clips not found in {MOCAP}")
    clip, _ = dribble_clip(MOCAP / "cmu_run.npz", seconds=3.0)
    path = tmp_path / "dribble.npz"
    save_motion2d(clip, path)
    cfg = compose_config([
        "task=dribble", "data=files", f"data.clips=[{path}]", f"run_dir={tmp_path / 'run'}",
        f"train.max_epochs={DRIBBLE_EPOCHS}", f"train.checkpoint.save_frequency={DRIBBLE_EPOCHS}",
        "logger.wandb=false", "logger.tensorboard=false", "progress=false",
    ])  # fmt: skip
    summary = train(cfg)
    assert summary["epochs"] == DRIBBLE_EPOCHS
    trained = load_policy(tmp_path / "run")
    untrained = untrained_policy(trained)
    stats = {}
    for name, p in (("trained", trained), ("untrained", untrained)):
        s = rollout_stats(p, trained.env_spec, num_envs=32, steps=90)
        whole = rollout_stats(p, trained.env_spec, num_envs=32, steps=60, early_termination=False)
        stats[name] = {
            "episode_length": s["episode_length"],
            "obj": s["reward/obj"],
            "obj_return": s["reward/obj"] * s["episode_length"],  # ball reward per episode
            "obj_whole": whole["reward/obj"],  # per step over 60 steps, no early end
        }
    print({n: {k: round(v, 3) for k, v in s.items()} for n, s in stats.items()})
    t, u = stats["trained"], stats["untrained"]
    assert t["episode_length"] > 1.2 * u["episode_length"]
    assert t["obj_return"] > 1.15 * u["obj_return"]
    # the whole 3 s clip from frame 0, deterministic: the ball stays within reach
    from mimic2dm.tasks.dribble import ENTRY

    keys = ("error_2d_px", "ball_within_reach", "object_error_2d_px", "ball_touches")
    reach = {}
    for name, p in (("trained", trained), ("untrained", untrained)):
        rep = ENTRY.evaluate(p, [str(path)], 1, None, None, None, name=name)
        print(name, {k: rep[k] for k in keys})
        reach[name] = rep["ball_within_reach"]
    assert reach["trained"] >= BALL_WITHIN_REACH and reach["trained"] > reach["untrained"], reach
