"""Props simulated next to a character (one free rigid body each)."""

from __future__ import annotations

from mimic2dm.characters.base import ObjectSpec

BALL_RADIUS = 0.11
"""FIFA size-5 football radius (m) (circumference 68-70 cm)."""
BALL_MASS = 0.43
"""FIFA size-5 football mass (kg) (410-450 g)."""
BALL_FRICTION = (0.7, 0.005, 0.012)
"""Sliding, torsional and rolling friction. MuJoCo combines geom frictions with ``max``
per component, so the ball's rolling coefficient (0.012 m: a rolling ball slows by about
0.5-0.7 m/s^2, a football on grass) dominates the floor's; ``condim=6`` enables rolling
friction."""


def make_ball() -> ObjectSpec:
    """A size-5 football: solid-looking sphere with a hollow ball's inertia.

    A football is a thin shell, so its inertia is ``2/3 m r^2`` rather than the solid
    sphere's ``2/5 m r^2``; ``shellinertia`` makes MuJoCo use the shell formula.
    """
    fr = " ".join(repr(v) for v in BALL_FRICTION)
    body = (
        f'<body name="ball">'
        f'<geom name="ball_geom" type="sphere" size="{BALL_RADIUS!r}" mass="{BALL_MASS!r}" '
        f'shellinertia="true" condim="6" friction="{fr}" rgba="0.95 0.95 0.95 1"/>'
        f"</body>"
    )
    return ObjectSpec(name="ball", body_xml=body, radius=BALL_RADIUS, mass=BALL_MASS)
