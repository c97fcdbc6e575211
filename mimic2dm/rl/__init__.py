"""The learner, for any registered task: rl-games PPO with a view-aggregation network,
in-process or Ray-hosted envs, checkpoints with exact resume, logging, and a loadable
policy. It sees tasks only through :class:`mimic2dm.tasks.base.Task`.

Public API: :func:`mimic2dm.rl.policy.load_policy`, :func:`mimic2dm.rl.vecenv.make_vecenv`;
the apps :func:`mimic2dm.train.train` and :func:`mimic2dm.train_bench.bench_train` use it.
"""
