"""Settings of the ``tracking2d`` task (``conf/task/tracking2d.yaml``; docs/design.md sections 3-7)."""

from __future__ import annotations

from dataclasses import dataclass, field

from mimic2dm.tasks.common.config import ReferenceConfig
from mimic2dm.tasks.tracking2d.asi import ASIConfig
from mimic2dm.tasks.tracking2d.reference import VIEW_MODES
from mimic2dm.tasks.tracking2d.rewards import RewardConfig

from mimic2dm.geometry.virtual import VirtualCameraConfig


@dataclass
class TrackingConfig(ReferenceConfig):
    """:class:`~mimic2dm.tasks.common.config.ReferenceConfig` plus the 2D tracker's own settings.

    ``initial_state`` ``auto``: a clip's preprocessed states, else its 3D pose fitted by IK
    when it has 3D keypoints, else the default pose (``initial.py``).

    Attributes:
        num_views: views per env (1: view-agnostic training; >= 2: 3D tracking by aggregation).
        tau_term: reprojection termination: max masked error > ``tau_term`` x image height.
        view_mode: ``clip`` | ``virtual`` | ``mixed`` (virtual and mixed need clips with 3D
            keypoints) | ``auto`` (virtual views for the clips with 3D, own views for the others).
        camera_mode: ``static`` | ``tracking`` | ``dynamic`` | ``static_tracking`` (each
            view static or tracking, even odds) (virtual cameras).
        camera: virtual camera sampling ranges.
        reward: term scales and sharpness; asi: adaptive state initialisation.
        initial_level_feet: fitted 3D poses get flat feet (``retarget.level_feet``): the
            IK leaves foot pitch free, as COCO-17 has no toe keypoint.
        privileged_3d: append to every observation what a distillation teacher may use
            (``mimic2dm-distill``): the episode's clip index, then the 3D tracker's goal
            observation of the clip's 3D keypoints (``tracking3d``'s); needs clips with 3D
            keypoints. A policy never sees it.
    """

    num_views: int = 1
    tau_term: float = 0.12
    view_mode: str = "clip"
    camera_mode: str = "static"
    camera: VirtualCameraConfig = field(default_factory=VirtualCameraConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    asi: ASIConfig = field(default_factory=ASIConfig)
    initial_level_feet: bool = False
    privileged_3d: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        from mimic2dm.tasks.tracking2d.reference import TASK_CAMERA_MODES

        from mimic2dm.utils.validate import check, check_choice

        check("task.num_views", self.num_views, ge=1, integer=True)
        check("task.tau_term", self.tau_term, gt=0)
        check_choice("task.view_mode", self.view_mode, VIEW_MODES)
        check_choice("task.camera_mode", self.camera_mode, TASK_CAMERA_MODES)


def upgrade_spec(old: dict) -> dict:
    """A ``TaskSpec`` dict from the ``EnvSpec`` stored by checkpoints of older code (before
    task registries): ``w_<term>`` weights become ``scales``, view settings move into the config."""
    cfg = dict(old.get("task", {}))
    reward = dict(cfg.get("reward", {}))
    scales = {k[2:]: reward.pop(k) for k in list(reward) if k.startswith("w_")}
    if scales:
        reward["scales"] = scales
    cfg["reward"] = reward
    for k in ("view_mode", "camera_mode", "camera"):
        if k in old:
            cfg[k] = old[k]
    # that code's starts: the default pose, not lifted, uniform start frames
    cfg.setdefault("initial_state", "default_pose")
    cfg.setdefault("initial_ground", False)
    cfg["asi"] = {"start_sampling": "uniform", **dict(cfg.get("asi", {}))}
    engine = {"name": old.get("engine", "mujoco"), **dict(old.get("engine_kwargs", {}))}
    if "physics_hz" in old:
        engine["physics_hz"] = float(old["physics_hz"])
    return {
        "task": "tracking2d", "character": old["character"], "engine": engine,
        "objects": list(old.get("objects", ())), "control_hz": float(old.get("control_hz", 30.0)),
        "config": cfg, "data": list(old.get("data", ())),
    }  # fmt: skip
