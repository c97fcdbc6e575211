"""View-agnostic 2D tracking task (paper 3.2-3.3): engine-free observations, rewards,
terminations and adaptive state initialisation; the reference comes from a
:class:`~mimic2dm.tasks.tracking2d.source.ReferenceSource`."""

from mimic2dm.tasks.base import TaskEntry
from mimic2dm.tasks.tracking2d.config import TrackingConfig, upgrade_spec


def _build(spec, engine, seed):
    from mimic2dm.tasks.tracking2d.factory import build

    return build(spec, engine, seed)


def _evaluate(*args, **kwargs):
    from mimic2dm.tasks.tracking2d.evaluation import evaluate

    return evaluate(*args, **kwargs)


ENTRY = TaskEntry(
    name="tracking2d",
    description="view-agnostic 2D keypoint tracking of reference clips (paper 3.2-3.3)",
    config_cls=TrackingConfig,
    build=_build,
    needs_data=True,
    evaluate=_evaluate,
    upgrade_spec=upgrade_spec,
)
