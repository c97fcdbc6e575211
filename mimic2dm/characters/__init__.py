"""Characters written by us as MJCF, props, scenes, mocap loaders and retargeting.

Public entry points::

    from mimic2dm.characters import load_character, build_scene_xml
    spec = load_character("humanoid")            # CharacterSpec
    xml = build_scene_xml(spec, ["ball"], physics_dt=1 / 120)

Mocap loading (``mimic2dm.characters.mocap``) and retargeting
(``mimic2dm.characters.retarget``) import torch / mujoco and are imported explicitly.
"""

from mimic2dm.characters.base import CharacterSpec, DefaultPose, ObjectSpec
from mimic2dm.characters.registry import CHARACTERS, OBJECTS, load_character, load_object
from mimic2dm.characters.scene import build_model, build_scene_xml, sensor_layout

__all__ = [
    "CHARACTERS",
    "OBJECTS",
    "CharacterSpec",
    "DefaultPose",
    "ObjectSpec",
    "build_model",
    "build_scene_xml",
    "load_character",
    "load_object",
    "sensor_layout",
]
