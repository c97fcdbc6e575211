"""Offscreen rendering of simulated motion through the project's pinhole cameras.

MuJoCo renders offscreen through one of three GL back-ends (Linux): OSMesa (software),
EGL (Mesa's software EGL on CPU machines, the driver's on GPU machines) or GLFW (needs a
display). Which one works depends on the machine, and a GLFW start that failed aborts the
whole process when it is tried again, so :func:`gl_backend` probes the back-ends once per
process, each in a short child process that exits on its own, and remembers the first
that rendered a frame. This process then renders only through that back-end, by its
explicit ``mujoco.<backend>.GLContext`` (MuJoCo's ``Renderer`` would use the back-end
bound when ``mujoco`` was first imported, often before the probe). A back-end that fails
in this process is never tried again. Where none works, :func:`try_render` warns once and
returns None, so training and evaluation go on without videos.

``MUJOCO_GL`` set by the user (``osmesa``, ``egl``, ``glfw``, ...) restricts the probe to
that back-end; when unset, the probe's choice is written to it, for child processes.
"""

from __future__ import annotations

import ctypes.util
import importlib
import logging
import math
import os
import platform
import re
import subprocess
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from mimic2dm.engines.base import SimState
    from mimic2dm.geometry.camera import Camera
    from mimic2dm.motion.keypoint_sets import KeypointSet

# Probe order per OS (what MuJoCo itself supports there).
GL_BACKENDS = {"Linux": ("osmesa", "egl", "glfw"), "Darwin": ("cgl", "glfw")}
_OFF = ("disable", "disabled", "off", "false", "0")
_MUJOCO_GL_NAMES = {"osmesa": "osmesa", "egl": "egl", "cgl": "cgl"}  # any other value means GLFW
_LIBS = {"osmesa": ("OSMesa", "libosmesa6"), "egl": ("EGL", "libegl1")}
_PROBE_TIMEOUT_S = 120.0


class RenderUnavailable(RuntimeError):
    """No OpenGL back-end for MuJoCo's offscreen renderer works in this process."""


@dataclass
class GLProbe:
    """The outcome of probing the GL back-ends: the one that works (or None) and why the
    others did not."""

    backend: str | None
    failures: dict[str, str] = field(default_factory=dict)
    user_choice: bool = False  # MUJOCO_GL was set before the probe

    def reason(self) -> str:
        """One line: why each back-end tried was rejected."""
        return "; ".join(f"{b}: {why}" for b, why in self.failures.items()) or "none tried"


_probe: GLProbe | None = None
_warned = False

# Run in a child process: make a GL context on one back-end and render one frame, exactly
# as :class:`_Offscreen` does in this process.
_CHILD = "import sys; from mimic2dm.render import _probe_child; sys.exit(_probe_child(sys.argv[1]))"


def _candidates() -> tuple[list[str], dict[str, str]]:
    """Back-ends to try, in order (``MUJOCO_GL`` restricts them to one), and early rejects."""
    env = os.environ.get("MUJOCO_GL", "").strip().lower()
    if not env:
        return list(GL_BACKENDS.get(platform.system(), ("glfw",))), {}
    if env in _OFF:
        return [], {"MUJOCO_GL": f"set to {env!r} (rendering turned off)"}
    return [_MUJOCO_GL_NAMES.get(env, "glfw")], {}


def _precheck(backend: str) -> str | None:
    """Why ``backend`` cannot work without starting a process (a missing library), or None."""
    if backend in _LIBS:
        lib, pkg = _LIBS[backend]
        if ctypes.util.find_library(lib) is None:
            return f"lib{lib} not found (Debian/Ubuntu package {pkg})"
    return None


def _probe_in_subprocess(backend: str) -> str | None:
    """Render one frame with ``backend`` in a child process; None if it worked, else why not."""
    env = dict(os.environ, MUJOCO_GL=backend)
    root = str(Path(__file__).resolve().parents[1])  # this package, installed or not
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    try:
        res = subprocess.run([sys.executable, "-c", _CHILD, backend], env=env,
                             capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S)  # fmt: skip
    except subprocess.TimeoutExpired:
        return f"no frame within {_PROBE_TIMEOUT_S:.0f} s"
    if res.returncode == 0 and "rendered" in res.stdout:
        return None
    lines = [ln.strip() for ln in (res.stderr + res.stdout).splitlines() if ln.strip()]
    # GLFW says why (no DISPLAY) in a warning; MuJoCo's error after it is generic
    lines = [ln for ln in lines if "GLFWError" in ln][:1] or lines[-1:] or ["no output"]
    how = f"killed by signal {-res.returncode}" if res.returncode < 0 else f"exit {res.returncode}"
    why = re.sub(r"^\S+:\d+: ", "", lines[0])[:240]  # drop a warning's "file.py:917: "
    return f"{why} ({how})"


def _probe_child(backend: str) -> int:
    """Child side of the probe: 0 (and 'rendered') if ``backend`` renders a frame."""
    import mujoco

    model = mujoco.MjModel.from_xml_string(
        "<mujoco><worldbody><light pos='0 0 2'/><geom size='.2'/></worldbody></mujoco>"
    )
    r = _Offscreen(model, 16, 16, backend)
    try:
        frame = r.render(mujoco.MjData(model), mujoco.MjvCamera())
    finally:
        r.close()
    print("rendered", frame.shape)
    return 0


def probe_gl() -> GLProbe:
    """Probe the GL back-ends once per process (see the module docstring); cached."""
    global _probe
    if _probe is None:
        user_choice = bool(os.environ.get("MUJOCO_GL", "").strip())
        candidates, failures = _candidates()
        backend = None
        for b in candidates:
            why = _precheck(b) or _probe_in_subprocess(b)
            if why is None:
                backend = b
                break
            failures[f"{b} (MUJOCO_GL)" if user_choice else b] = why
        if backend is not None and not user_choice:
            # MuJoCo binds its back-end at import: child processes started from here get this one
            os.environ["MUJOCO_GL"] = backend
        _probe = GLProbe(backend, failures, user_choice)
    return _probe


def gl_backend() -> str | None:
    """The GL back-end this process renders with (probed once), or None where none works."""
    return probe_gl().backend


def no_gl_message() -> str:
    """Why there is no video here, and what fixes it."""
    fix = (
        "unset MUJOCO_GL to let mimic2dm try each back-end"
        if probe_gl().user_choice
        else "install Mesa's OSMesa (libosmesa6) or EGL (libegl1), which both render on the CPU"
    )
    return (
        f"no OpenGL back-end works for MuJoCo's offscreen renderer ({probe_gl().reason()}); {fix}"
    )


def _mark_failed(backend: str, err: BaseException) -> None:
    """``backend`` failed in this process: never try it (or any other) again here."""
    p = probe_gl()
    p.failures[backend] = f"failed in this process after a good probe ({type(err).__name__}: {err})"
    p.backend = None


class _Offscreen:
    """MuJoCo offscreen renderer on an explicit GL back-end (``[H, W, 3]`` uint8 frames)."""

    def __init__(self, model, height: int, width: int, backend: str):
        import mujoco

        self.mj, self.model = mujoco, model
        # PyOpenGL logs an INFO line on import that Hydra's console handler would show
        logging.getLogger("OpenGL.acceleratesupport").setLevel(logging.WARNING)
        self.gl = importlib.import_module(f"mujoco.{backend}").GLContext(width, height)
        self.ctx = None
        try:
            self.gl.make_current()
            self.ctx = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_150.value)
            mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN.value, self.ctx)
        except BaseException:
            self.close()
            raise
        self.scene = mujoco.MjvScene(model, maxgeom=10000)
        self.opt, self.pert = mujoco.MjvOption(), mujoco.MjvPerturb()
        self.rect = mujoco.MjrRect(0, 0, width, height)

    def render(self, data, camera) -> np.ndarray:
        """One RGB frame of ``data`` seen by the ``MjvCamera`` ``camera``."""
        mj = self.mj
        self.gl.make_current()
        mj.mjv_updateScene(self.model, data, self.opt, self.pert, camera,
                           mj.mjtCatBit.mjCAT_ALL.value, self.scene)  # fmt: skip
        mj.mjr_render(self.rect, self.scene, self.ctx)
        out = np.empty((self.rect.height, self.rect.width, 3), np.uint8)
        mj.mjr_readPixels(out, None, self.rect, self.ctx)
        return np.flipud(out)

    def close(self) -> None:
        """Free the GL context now: left to interpreter exit, EGL prints errors."""
        if self.ctx is not None:
            self.ctx.free()
            self.ctx = None
        if self.gl is not None:
            self.gl.free()
            self.gl = None


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
    from mimic2dm.characters.scene import build_model
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

    Raises:
        RenderUnavailable: where no GL back-end works in this process.
    """
    import mujoco
    import torch
    from PIL import Image, ImageDraw

    from mimic2dm.characters.scene import build_model
    from mimic2dm.engines.base import SimState
    from mimic2dm.utils.draw import REF_COLOR, draw_skeleton

    backend = gl_backend()
    if backend is None:
        raise RenderUnavailable(no_gl_message())
    if isinstance(qpos, SimState):
        qpos = states_to_qpos(character, objects, qpos)
    model = build_model(character, objects, with_sensors=False)
    width = int(round(height * camera.width / camera.height)) // 2 * 2
    model.vis.global_.offwidth = max(model.vis.global_.offwidth, width)
    model.vis.global_.offheight = max(model.vis.global_.offheight, height)
    try:
        renderer = _Offscreen(model, height, width, backend)
    except Exception as e:  # noqa: BLE001 - any failure to make a context: this back-end is out
        _mark_failed(backend, e)
        raise RenderUnavailable(no_gl_message()) from e
    data = mujoco.MjData(model)
    T = qpos.shape[0]
    R, tt, k = (x.numpy() for x in camera.params(torch.arange(T)))
    frames = np.zeros((T, height, width, 3), np.uint8)
    scale = height / camera.height
    try:
        for i in range(T):
            data.qpos[:] = qpos[i]
            mujoco.mj_forward(model, data)
            model.vis.global_.fovy = math.degrees(2 * math.atan(camera.height / (2 * k[i, 1])))
            img = renderer.render(data, _free_camera(mujoco, R[i], tt[i]))
            if ref_uv is not None:
                pil = Image.fromarray(img)
                draw_skeleton(
                    ImageDraw.Draw(pil),
                    ref_uv[i],
                    ref_mask[i],
                    kset.edges,
                    REF_COLOR,
                    scale,
                    width=2,
                )
                img = np.asarray(pil)
            frames[i] = img
    finally:
        renderer.close()
    return frames


def warn_no_video() -> None:
    """Warn, once per process, that videos are skipped because no GL back-end works."""
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(f"video rendering skipped: {no_gl_message()}. Training and evaluation "
                      "go on without videos.", stacklevel=3)  # fmt: skip


def try_render(*args, **kwargs) -> np.ndarray | None:
    """:func:`render_qpos`, or None (with a warning) where it fails: a video never stops a run."""
    try:
        return render_qpos(*args, **kwargs)
    except RenderUnavailable:
        warn_no_video()
    except Exception as e:  # noqa: BLE001 - a broken video must not end a training run
        warnings.warn(f"video rendering failed ({type(e).__name__}: {e}); going on without it",
                      stacklevel=2)  # fmt: skip
    return None


def write_video(path, frames: np.ndarray, fps: float) -> None:
    """Write ``frames [T, H, W, 3]`` uint8 as an mp4."""
    import imageio.v2 as imageio

    imageio.mimsave(str(path), list(frames), fps=fps, macro_block_size=1)
