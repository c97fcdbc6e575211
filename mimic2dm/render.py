"""Offscreen rendering of simulated motion through the project's pinhole cameras.

Renders with MuJoCo's offscreen renderer (OSMesa on headless CPU machines, EGL on GPU
machines: ``MUJOCO_GL``); where no GL context can be made, :func:`try_render` warns once
and returns None so that training and evaluation go on without videos.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image, ImageDraw

from mimic2dm.characters.scene import build_model
from mimic2dm.engines.base import SimState
from mimic2dm.geometry.camera import Camera
from mimic2dm.motion.keypoint_sets import KeypointSet
from mimic2dm.utils.draw import REF_COLOR, draw_skeleton

_warned = False


def _free_camera(mujoco, R: np.ndarray, t: np.ndarray):
    """An ``MjvCamera`` at the pinhole camera's pose (no roll: our cameras keep z up)."""
    centre = -R.T @ t
    fwd = R[2]
    cam = mujoco.MjvCamera()
    cam.type = mujoco.mjtCamera.mjCAMERA_FREE
    d = 3.0
    cam.lookat[:] = centre + d * fwd
    cam.distance = d
    cam.azimuth = math.degrees(math.atan2(fwd[1], fwd[0]))
    cam.elevation = math.degrees(math.asin(float(np.clip(fwd[2], -1, 1))))
    return cam


def states_to_qpos(character, objects: Sequence[str], states: SimState) -> np.ndarray:
    """MuJoCo ``qpos [T, nq]`` of engine states in the render scene's layout.

    The layout (freejoint wxyz quaternions, joint order) is the MuJoCo backend's
    :class:`~mimic2dm.engines.mujoco_engine.QposLayout`, looked up by name in the scene.
    """
    from mimic2dm.engines.base import resolve_character
    from mimic2dm.engines.mujoco_engine import QposLayout

    model = build_model(character, objects, with_sensors=False)
    return QposLayout.build(model, resolve_character(character), tuple(objects)).qpos(states)


def render_qpos(
    character: str,
    qpos: np.ndarray | SimState,
    camera: Camera,
    objects: Sequence[str] = (),
    height: int = 360,
    ref_uv: np.ndarray | None = None,
    ref_mask: np.ndarray | None = None,
    kset: KeypointSet | None = None,
) -> np.ndarray:
    """Render MuJoCo ``qpos [T, nq]`` frames through ``camera`` (static or per-frame).

    Args:
        character, objects: the scene.
        qpos: MuJoCo positions per frame, or engine states ``[T]`` (see :func:`states_to_qpos`).
        camera: the pinhole camera (principal point assumed at the image centre).
        height: output height in pixels; width follows the camera's aspect ratio.
        ref_uv, ref_mask, kset: optional reference keypoints ``[T, K, 2]`` (camera pixels)
            drawn over the frames.

    Returns:
        ``[T, height, width, 3]`` uint8 frames.
    """
    import mujoco

    if isinstance(qpos, SimState):
        qpos = states_to_qpos(character, objects, qpos)
    model = build_model(character, objects, with_sensors=False)
    width = int(round(height * camera.width / camera.height)) // 2 * 2
    model.vis.global_.offwidth = max(model.vis.global_.offwidth, width)
    model.vis.global_.offheight = max(model.vis.global_.offheight, height)
    data = mujoco.MjData(model)
    renderer = mujoco.Renderer(model, height, width)
    T = qpos.shape[0]
    R, tt, k = (x.numpy() for x in camera.params(torch.arange(T)))
    frames = np.zeros((T, height, width, 3), np.uint8)
    scale = height / camera.height
    for i in range(T):
        data.qpos[:] = qpos[i]
        mujoco.mj_forward(model, data)
        model.vis.global_.fovy = math.degrees(2 * math.atan(camera.height / (2 * k[i, 1])))
        renderer.update_scene(data, camera=_free_camera(mujoco, R[i], tt[i]))
        img = renderer.render()
        if ref_uv is not None:
            pil = Image.fromarray(img)
            draw_skeleton(
                ImageDraw.Draw(pil), ref_uv[i], ref_mask[i], kset, REF_COLOR, scale, width=2
            )
            img = np.asarray(pil)
        frames[i] = img
    renderer.close()
    return frames


def try_render(*args, **kwargs) -> np.ndarray | None:
    """:func:`render_qpos`, or None with one warning per process where no GL is available."""
    global _warned
    try:
        return render_qpos(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - any GL failure means: no video, go on
        if not _warned:
            warnings.warn(f"video rendering skipped: no usable OpenGL ({type(e).__name__}: {e}); "
                          "install OSMesa (libosmesa6) or set MUJOCO_GL=egl on a GPU machine", stacklevel=2)  # fmt: skip
            _warned = True
        return None


def write_video(path, frames: np.ndarray, fps: float) -> None:
    """Write ``frames [T, H, W, 3]`` uint8 as an mp4."""
    import imageio.v2 as imageio

    imageio.mimsave(str(path), list(frames), fps=fps, macro_block_size=1)
