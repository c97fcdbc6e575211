"""Registries of characters and props: ``load_character("humanoid")``, ``load_object("ball")``.

Specs are built once per process and cached (they are frozen, arrays read-only).
"""

from __future__ import annotations

import functools

from mimic2dm.characters.base import CharacterSpec, ObjectSpec
from mimic2dm.utils.registry import Registry

CHARACTERS: Registry[CharacterSpec] = Registry("character")
OBJECTS: Registry[ObjectSpec] = Registry("object")


@functools.cache
def _humanoid(variant: str = "default") -> CharacterSpec:
    from mimic2dm.characters.humanoid import make_humanoid

    return make_humanoid(variant)


@functools.cache
def _dog(spine: bool = False) -> CharacterSpec:
    from mimic2dm.characters.dog import make_dog

    return make_dog(spine=spine)


@functools.cache
def _ball() -> ObjectSpec:
    from mimic2dm.characters.objects import make_ball

    return make_ball()


CHARACTERS.register(
    "humanoid", _humanoid, description="CMU 15-body humanoid, 28 DoF, COCO-17 keypoints"
)
CHARACTERS.register("humanoid_amp", functools.partial(_humanoid, "amp"),
                    description="the humanoid with AMP-style PD gains and armature 0.02")  # fmt: skip
CHARACTERS.register("dog", _dog, description="robot dog, 12 DoF, dog17 keypoints")
CHARACTERS.register("dog_spine", functools.partial(_dog, spine=True),
                    description="robot dog with spine and neck joints, 16 DoF, dog17 keypoints")  # fmt: skip
OBJECTS.register("ball", _ball, description="size-5 football (0.11 m radius, 0.43 kg)")


def load_character(name: str) -> CharacterSpec:
    """The registered character ``name``; ``KeyError`` listing valid names otherwise."""
    return CHARACTERS.load(name)


def load_object(name: str) -> ObjectSpec:
    """The registered prop ``name``; ``KeyError`` listing valid names otherwise."""
    return OBJECTS.load(name)
