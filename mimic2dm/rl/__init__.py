"""The tracker's learner: rl-games PPO with a view-aggregation network, in-process or
Ray-hosted envs, checkpoints with exact resume, logging, and a loadable policy.

Public API: :func:`mimic2dm.rl.policy.load_policy`, :func:`mimic2dm.train.train`,
:func:`mimic2dm.rl.bench.bench_train`, :func:`mimic2dm.rl.vecenv.make_vecenv`.
"""
