"""The skeleton the tasks on a character share: episode bookkeeping and auto-reset, the step
tail that assembles a :class:`~mimic2dm.tasks.base.StepResult`, the fall / tilt /
non-finite terminations, proprioception, the reward combination, the PD action mapping,
adaptive state initialisation and the evaluation loop (docs/layout.md, "Task skeleton")."""
