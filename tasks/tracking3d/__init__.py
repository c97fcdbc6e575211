"""3D keypoint tracking (DeepMimic / PHC style): the 3D-GT and Sfv* baselines of paper
Table 1, trained with the same PPO, network and engines as the 2D tracker."""

from mimic2dm.tasks.base import TaskEntry
from mimic2dm.tasks.tracking3d.config import Tracking3DConfig


def _build(spec, engine, seed):
    from mimic2dm.tasks.tracking3d.reference import Reference3D
    from mimic2dm.tasks.tracking3d.task import Tracking3DTask

    cfg = ENTRY.parse_config(spec.config)
    ref = Reference3D.from_files(list(spec.data), spec.control_hz, engine.character)
    return Tracking3DTask(engine, ref, cfg, seed=seed)


def _evaluate(*args, **kwargs):
    from mimic2dm.tasks.tracking3d.evaluation import evaluate

    return evaluate(*args, **kwargs)


ENTRY = TaskEntry(
    name="tracking3d",
    description="3D keypoint tracking of a Motion3D or a clip's ground-truth 3D (the 3D-GT / Sfv* baselines)",
    config_cls=Tracking3DConfig,
    build=_build,
    needs_data=True,
    evaluate=_evaluate,
)
