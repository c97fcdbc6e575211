"""A CI-sized learning test: a short PPO run on the demo clip must track it much better than
the untrained network (deterministic rollouts from the same starts, the training task)."""

from mimic2dm.rl.policy import load_policy, rollout_stats, untrained_policy
from mimic2dm.train import compose_config, train


def test_short_ppo_run_beats_the_untrained_policy(tmp_path):
    cfg = compose_config([
        f"run_dir={tmp_path / 'run'}", "train.max_epochs=40", "train.checkpoint.save_frequency=40",
        "logger.wandb=false", "logger.tensorboard=false", "progress=false", "train.torch_threads=1",
        "train.network.encoder_units=[256]", "train.network.head_units=[128,128]",
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
