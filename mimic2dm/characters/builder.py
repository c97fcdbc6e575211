"""Write a character's MJCF and its :class:`KinematicTree` from one body list.

A character module lists :class:`BodyDef` entries in MuJoCo body order (depth first,
children in declaration order); :func:`build_mjcf` nests them into a ``<mujoco>``
document and :func:`build_tree` gives the matching torch kinematics, so the two can
never disagree.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mimic2dm.characters.base import ROOT_JOINT, character_root, sub, to_xml
from mimic2dm.characters.kinematics import KinematicTree

Vec3 = tuple[float, float, float]


@dataclass(frozen=True)
class JointDef:
    """An actuated hinge at the body origin: ``axis`` 0/1/2 = local x/y/z, ``range`` rad."""

    name: str
    axis: int
    range: tuple[float, float]


@dataclass(frozen=True)
class GeomDef:
    """A collision geom: MuJoCo ``type``, ``mass`` (kg) and placement attributes."""

    type: str
    mass: float
    attrs: dict


@dataclass(frozen=True)
class SiteDef:
    """A site: keypoint sites are small spheres; touch sites enclose a sole / paw."""

    name: str
    pos: Vec3
    type: str = "sphere"
    size: tuple[float, ...] = (0.01,)


@dataclass(frozen=True)
class BodyDef:
    """One body: ``parent`` index into the body list (-1 for the root), ``pos`` offset."""

    name: str
    parent: int
    pos: Vec3
    joints: tuple[JointDef, ...] = ()
    geoms: tuple[GeomDef, ...] = ()
    sites: tuple[SiteDef, ...] = ()


def _check_order(bodies: Sequence[BodyDef]) -> None:
    children: dict[int, list[int]] = {}
    for i, b in enumerate(bodies):
        children.setdefault(b.parent, []).append(i)
    order, stack = [], list(reversed(children.get(-1, [])))
    while stack:
        i = stack.pop()
        order.append(i)
        stack.extend(reversed(children.get(i, [])))
    if order != list(range(len(bodies))) or len(children.get(-1, [])) != 1:
        names = [bodies[i].name for i in order]
        raise ValueError(
            f"bodies must be listed depth first with one root; depth-first order is {names}"
        )


def build_mjcf(model: str, bodies: Sequence[BodyDef], defaults: dict[str, dict]) -> str:
    """MJCF ``<mujoco>`` document of a character alone.

    Args:
        model: model name, also the default class (``childclass`` of the root).
        bodies: depth-first body list; the root gets the freejoint ``"root"``.
        defaults: element tag -> attributes of the character's default class.

    Returns:
        XML string (no floor, actuators or sensors; see ``scene.build_scene_xml``).
    """
    _check_order(bodies)
    root, world = character_root(model)
    cls = sub(sub(root, "default"), "default", **{"class": model})
    for tag, attrs in defaults.items():
        sub(cls, tag, **attrs)
    elems: list[ET.Element] = []
    for b in bodies:
        parent = world if b.parent < 0 else elems[b.parent]
        body = sub(parent, "body", name=b.name, pos=b.pos)
        if b.parent < 0:
            body.set("childclass", model)
            sub(body, "freejoint", name=ROOT_JOINT)
        for j in b.joints:
            sub(body, "joint", name=j.name, type="hinge", axis=np.eye(3)[j.axis], range=j.range)
        for i, g in enumerate(b.geoms):
            sub(body, "geom", name=f"{b.name}_geom{i}", type=g.type, mass=g.mass, **g.attrs)
        for s in b.sites:
            sub(body, "site", name=s.name, type=s.type, pos=s.pos, size=s.size)
        elems.append(body)
    return to_xml(root)


def build_tree(bodies: Sequence[BodyDef]) -> KinematicTree:
    """The :class:`KinematicTree` of ``bodies`` (dofs in body order = qpos order)."""
    _check_order(bodies)
    dof_body = [i for i, b in enumerate(bodies) for _ in b.joints]
    axes = [j.axis for b in bodies for j in b.joints]
    offsets = np.array([(0.0, 0.0, 0.0) if b.parent < 0 else b.pos for b in bodies])
    return KinematicTree(
        body_names=tuple(b.name for b in bodies),
        parents=tuple(b.parent for b in bodies),
        offsets=offsets,
        dof_body=tuple(dof_body),
        dof_axis=np.eye(3)[axes] if axes else np.zeros((0, 3)),
    )


def site_offsets(
    bodies: Sequence[BodyDef], site_names: Sequence[str]
) -> tuple[tuple[str, Vec3], ...]:
    """``(body, offset)`` of each named site, in ``site_names`` order."""
    where = {s.name: (b.name, tuple(float(v) for v in s.pos)) for b in bodies for s in b.sites}
    missing = [n for n in site_names if n not in where]
    if missing:
        raise KeyError(f"sites not defined on any body: {missing}")
    return tuple(where[n] for n in site_names)


def joint_table(bodies: Sequence[BodyDef]) -> list[tuple[str, tuple[float, float]]]:
    """``(joint name, range)`` of all hinges in action order."""
    return [(j.name, j.range) for b in bodies for j in b.joints]
