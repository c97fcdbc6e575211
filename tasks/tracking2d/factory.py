"""Build a tracking task (engine + reference clips) from a plain, picklable spec, so that
the learner's process and every Ray actor build identical environments."""

from __future__ import annotations

from dataclasses import dataclass, field

from mimic2dm.tasks.tracking2d.reference import ReferenceLibrary
from mimic2dm.tasks.tracking2d.task import Tracking2DTask, TrackingConfig

from mimic2dm.engines import load_engine
from mimic2dm.geometry.virtual import VirtualCameraConfig


@dataclass
class EnvSpec:
    """Everything needed to build a batch of tracking envs.

    Attributes:
        character: character registry name (``humanoid``, ``dog``).
        data: 2D-motion files (``.npz``) of the reference clips.
        objects: props (``("ball",)`` for dribbling).
        engine: engine registry name; engine_kwargs: its options (``num_threads``...).
        control_hz / physics_hz: control and simulation rates.
        view_mode: ``clip`` | ``virtual`` | ``mixed`` (see ReferenceLibrary).
        camera_mode: virtual camera kind (``static``, ``tracking``, ``dynamic``).
        camera: virtual camera sampling ranges.
        task: task settings.
    """

    character: str
    data: tuple[str, ...]
    objects: tuple[str, ...] = ()
    engine: str = "mujoco"
    engine_kwargs: dict = field(default_factory=dict)
    control_hz: float = 30.0
    physics_hz: float = 60.0
    view_mode: str = "clip"
    camera_mode: str = "static"
    camera: VirtualCameraConfig = field(default_factory=VirtualCameraConfig)
    task: TrackingConfig = field(default_factory=TrackingConfig)


def make_task(spec: EnvSpec, num_envs: int, seed: int = 0) -> Tracking2DTask:
    """Build the engine and the task described by ``spec`` with ``num_envs`` envs."""
    if not spec.data:
        raise ValueError(
            "EnvSpec.data: no reference clip given (expected one or more 2D-motion .npz files)"
        )
    library = ReferenceLibrary.from_files(
        list(spec.data),
        spec.control_hz,
        view_mode=spec.view_mode,
        camera_mode=spec.camera_mode,
        camera_config=spec.camera,
    )
    engine = load_engine(spec.engine, spec.character, num_envs=num_envs, objects=tuple(spec.objects),
                         control_dt=1.0 / spec.control_hz, physics_dt=1.0 / spec.physics_hz, **spec.engine_kwargs)  # fmt: skip
    return Tracking2DTask(engine, library, spec.task, seed=seed)
