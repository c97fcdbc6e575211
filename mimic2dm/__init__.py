"""Mimic2DM: physics-based character control learned from 2D keypoints of ordinary videos."""

import ctypes.util
import os

# MuJoCo picks its offscreen GL backend when it is first imported. On a headless CPU
# machine OSMesa is the one that works; users with a GPU set MUJOCO_GL=egl themselves.
if (
    "MUJOCO_GL" not in os.environ
    and not os.environ.get("DISPLAY")
    and ctypes.util.find_library("OSMesa")
):
    os.environ["MUJOCO_GL"] = "osmesa"

__version__ = "0.1.0"
