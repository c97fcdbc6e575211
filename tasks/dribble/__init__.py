"""``dribble``: soccer dribbling from 2D (paper's HOI task): the humanoid tracks the body
keypoints *and* the ball centre of a reference clip while a size-5 ball is simulated.

Built on :mod:`mimic2dm.tasks.tracking2d` (subclass, same rewards, same evaluation): the ball
centre is a 2D point observed beside the keypoints, ``obj`` is rewarded (docs/design.md section 3) and a
ball-lost termination is added. See docs/tasks.md.
"""

from mimic2dm.tasks.common.entry import reference_entry
from mimic2dm.tasks.dribble.config import DribbleConfig
from mimic2dm.tasks.tracking2d import check_clip


def _build(spec, engine, seed):
    from mimic2dm.tasks.dribble.task import DribbleTask
    from mimic2dm.tasks.tracking2d.factory import build

    return build(spec, engine, seed, DribbleTask)


def _evaluate(*args, **kwargs):
    from mimic2dm.tasks.dribble.task import DribbleTask
    from mimic2dm.tasks.tracking2d.evaluation import evaluate

    return evaluate(*args, task_cls=DribbleTask, **kwargs)


ENTRY = reference_entry(
    "dribble",
    "soccer dribbling: track 2D body keypoints and the 2D ball centre with a simulated ball",
    DribbleConfig,
    build=_build,
    evaluate=_evaluate,
    characters=("humanoid",),
    check_data=check_clip,
)
