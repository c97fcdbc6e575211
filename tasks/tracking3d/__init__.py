"""3D keypoint tracking (DeepMimic / PHC style): the 3D-GT and Sfv* baselines of paper
Table 1, trained with the same PPO, network and engines as the 2D tracker."""

from mimic2dm.tasks.common.entry import reference_entry
from mimic2dm.tasks.tracking3d.config import Tracking3DConfig

ENTRY = reference_entry(
    "tracking3d",
    "3D keypoint tracking of a Motion3D or a clip's ground-truth 3D (the 3D-GT / Sfv* baselines)",
    Tracking3DConfig,
    build="mimic2dm.tasks.tracking3d.task:build",
    evaluate="mimic2dm.tasks.tracking3d.evaluation:evaluate",
)
