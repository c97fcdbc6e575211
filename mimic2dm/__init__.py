"""Mimic2DM: physics-based character control learned from 2D keypoints of ordinary videos."""

# MuJoCo's offscreen GL back-end (OSMesa, EGL or GLFW) is probed when something is first
# rendered, once per process: see mimic2dm.render.gl_backend.

__version__ = "0.1.0"
