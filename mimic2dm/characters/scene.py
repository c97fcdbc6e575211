"""One complete MuJoCo scene: floor + character + props + PD actuators + sensors.

Layout of the compiled model (what engines index into):

- ``qpos``: character ``[0:7]`` freejoint (pos, quat wxyz), ``[7:7+J]`` dofs in
  ``spec.dof_names`` order; then 7 per object, in the ``objects`` order given.
- ``ctrl``: ``[J]`` PD *targets* (rad) in ``dof_names`` order. Each dof has one MuJoCo
  ``position`` actuator (``kp``, ``kv = kd``, ``forcerange = ±torque_limit``,
  ``ctrlrange = joint_range``), so the PD loop runs inside MuJoCo every physics step.
- ``sensordata`` (``with_sensors=True``), see :func:`sensor_layout`:
  ``[0:3K]`` ``framepos`` of keypoint site k (named ``f"kp_{keypoint_names[k]}"``),
  world frame, keypoint order; then 3 per object: its body origin (centre), named
  ``f"obj_{name}"``; then 1 per contact body (``spec.contact_bodies`` order): ``touch``
  on site ``f"{body}_touch"``, named ``f"touch_{body}"`` (normal force, N); then 1 per
  object: a ``contact`` sensor named ``f"hit_{name}"``, the number of contacts (at most 1)
  between the object and any body of the character (its feet playing the ball).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence

from mimic2dm.characters.base import CharacterSpec, ObjectSpec, sub, to_xml
from mimic2dm.characters.registry import load_character, load_object

FLOOR_FRICTION = (1.0, 0.005, 0.0001)
"""Sliding 1.0 holds feet and paws; tiny torsional/rolling terms (the ball brings its own,
larger rolling coefficient; MuJoCo combines with max)."""

OBJECT_SPAWN_X = 1.0
"""Object i spawns at ``(OBJECT_SPAWN_X + 0.5 i, 0, radius)``; engines reset it anyway."""


def _resolve(character: str | CharacterSpec) -> CharacterSpec:
    return load_character(character) if isinstance(character, str) else character


def _resolve_objects(objects: Sequence[str | ObjectSpec]) -> list[ObjectSpec]:
    out = [load_object(o) if isinstance(o, str) else o for o in objects]
    names = [o.name for o in out]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate object names in a scene: {names}")
    return out


def _add_actuators(root: ET.Element, spec: CharacterSpec) -> None:
    act = sub(root, "actuator")
    for j, name in enumerate(spec.dof_names):
        lim = float(spec.torque_limit[j])
        sub(
            act, "position", name=name, joint=name,
            kp=float(spec.kp[j]), kv=float(spec.kd[j]),
            forcelimited="true", forcerange=(-lim, lim),
            ctrllimited="true", ctrlrange=tuple(spec.joint_range[j]),
        )  # fmt: skip


def _add_sensors(
    root: ET.Element, spec: CharacterSpec, objects: list[ObjectSpec], char_root: str
) -> None:
    sens = sub(root, "sensor")
    for name, site in zip(spec.keypoint_names, spec.keypoint_sites, strict=True):
        sub(sens, "framepos", name=f"kp_{name}", objtype="site", objname=site)
    for obj in objects:
        sub(sens, "framepos", name=f"obj_{obj.name}", objtype="xbody", objname=obj.name)
    for body in spec.contact_bodies:
        sub(sens, "touch", name=f"touch_{body}", site=f"{body}_touch")
    for obj in objects:
        sub(sens, "contact", name=f"hit_{obj.name}", body1=obj.name, subtree2=char_root,
            data="found", num=1)  # fmt: skip


def build_scene_xml(
    character: str | CharacterSpec,
    objects: Sequence[str | ObjectSpec] = (),
    physics_dt: float = 1.0 / 60.0,
    with_sensors: bool = True,
) -> str:
    """Complete MJCF of one simulated scene.

    Args:
        character: registry name or spec; its root gets the freejoint ``"root"``.
        objects: registry names (``"ball"``) or specs of props, each a free body.
        physics_dt: MuJoCo timestep (s).
        with_sensors: add keypoint / object / touch sensors (layout in the module doc).

    Returns:
        The XML string; compile with ``mujoco.MjModel.from_xml_string``.
    """
    spec = _resolve(character)
    objs = _resolve_objects(objects)
    char = ET.fromstring(spec.mjcf)
    root = ET.Element("mujoco", {"model": f"scene_{spec.name}"})
    sub(root, "compiler", angle="radian", autolimits="true")
    # implicitfast integrates actuator damping (kv) implicitly: stable PD at large dt.
    sub(root, "option", timestep=physics_dt, integrator="implicitfast")
    for tag in ("default", "asset"):
        for elem in char.findall(tag):
            root.append(elem)
    world = sub(root, "worldbody")
    sub(world, "light", name="sun", pos=(0, 0, 5), dir=(0, 0, -1), directional="true")
    sub(
        world, "geom", name="floor", type="plane", size=(0, 0, 1), condim=3,
        friction=FLOOR_FRICTION, rgba=(0.45, 0.5, 0.45, 1),
    )  # fmt: skip
    char_root = next(b.get("name") for b in char.find("worldbody") if b.tag == "body")
    for elem in char.find("worldbody"):
        world.append(elem)
    for i, obj in enumerate(objs):
        body = ET.fromstring(obj.body_xml)
        if body.tag != "body" or body.get("name") != obj.name:
            raise ValueError(f"object {obj.name!r}: body_xml must be one <body name={obj.name!r}>")
        body.set("pos", f"{OBJECT_SPAWN_X + 0.5 * i!r} 0 {obj.radius!r}")
        body.insert(0, ET.Element("freejoint", {"name": f"{obj.name}_root"}))
        world.append(body)
    _add_actuators(root, spec)
    if with_sensors:
        _add_sensors(root, spec, objs, char_root)
    return to_xml(root)


def sensor_layout(
    character: str | CharacterSpec, objects: Sequence[str | ObjectSpec] = ()
) -> dict[str, slice]:
    """Slices of ``sensordata`` in a scene built with ``with_sensors=True``.

    Returns:
        ``{"keypoints": [3K] (reshape to [K, 3]), "objects": [3 * n_objects],
        "contacts": [n_contact_bodies], "object_contacts": [n_objects]}``.
    """
    spec = _resolve(character)
    k3 = 3 * spec.num_keypoints
    o3 = 3 * len(objects)
    c = k3 + o3 + len(spec.contact_bodies)
    return {
        "keypoints": slice(0, k3),
        "objects": slice(k3, k3 + o3),
        "contacts": slice(k3 + o3, c),
        "object_contacts": slice(c, c + len(objects)),
    }


def build_model(
    character: str | CharacterSpec,
    objects: Sequence[str | ObjectSpec] = (),
    physics_dt: float = 1.0 / 60.0,
    with_sensors: bool = True,
):
    """Compile :func:`build_scene_xml` into a ``mujoco.MjModel`` (same arguments)."""
    import mujoco

    return mujoco.MjModel.from_xml_string(
        build_scene_xml(character, objects, physics_dt, with_sensors)
    )
