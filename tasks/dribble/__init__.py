"""``dribble``: soccer dribbling from 2D (paper's HOI task): the humanoid tracks the body
keypoints *and* the ball centre of a reference clip while a size-5 ball is simulated.

Built on :mod:`mimic2dm.tasks.tracking2d` (subclass, same rewards, same evaluation): the ball
centre is a 2D point observed beside the keypoints, ``obj`` is rewarded (docs/design.md section 3) and a
ball-lost termination is added. See docs/tasks.md.
"""

from mimic2dm.tasks.base import TaskEntry
from mimic2dm.tasks.dribble.config import DribbleConfig
from mimic2dm.tasks.tracking2d import check_clip


def _build(spec, engine, seed):
    from mimic2dm.tasks.dribble.task import DribbleTask
    from mimic2dm.tasks.tracking2d.factory import load_library, tracking_config
    from mimic2dm.tasks.tracking2d.source import ClipReference

    cfg = tracking_config(spec)
    source = ClipReference(load_library(spec, cfg), engine.num_envs, cfg.num_views, engine.device)
    return DribbleTask(engine, source, cfg, seed=seed)


def _evaluate(*args, **kwargs):
    from mimic2dm.tasks.dribble.task import DribbleTask
    from mimic2dm.tasks.tracking2d.evaluation import evaluate

    return evaluate(*args, task_cls=DribbleTask, **kwargs)


ENTRY = TaskEntry(
    name="dribble",
    description="soccer dribbling: track 2D body keypoints and the 2D ball centre with a simulated ball",
    config_cls=DribbleConfig,
    build=_build,
    characters=("humanoid",),
    needs_data=True,
    check_data=check_clip,
    evaluate=_evaluate,
)
