"""``stand``: hold the default pose (a tiny task: the platform's smoke test)."""

from mimic2dm.tasks.base import TaskEntry
from mimic2dm.tasks.stand.task import StandConfig, StandTask

ENTRY = TaskEntry(
    name="stand",
    description="stand still: hold the default pose and root height (a tiny task for tests)",
    config_cls=StandConfig,
    build=lambda spec, engine, seed: StandTask(engine, ENTRY.parse_config(spec.config), seed),
)
