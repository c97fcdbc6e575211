"""Rendering never ends a run: the GL back-end probe, videos with and without a working
back-end (each twice in one process), and the overlay picture's legend.

The no-GL cases run in child processes: a second GLFW start after a failed one aborts the
whole process, which must not take pytest with it. OSMesa and EGL are made unusable there
the way a user's machine can: ``PYOPENGL_PLATFORM=glx``, which MuJoCo's OSMesa and EGL
back-ends both refuse; with no ``DISPLAY``, GLFW fails too.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

from mimic2dm.motion.keypoint_sets import load_keypoint_set
from mimic2dm.render import render_qpos
from mimic2dm.utils.draw import LEGEND_HEIGHT, REF_COLOR, SIM_COLOR, overlay_grid

# Renders the humanoid's default pose twice through the training/eval path (try_render),
# with mujoco imported first, as in a training process.
RENDER_TWICE = """
import mujoco, numpy as np
from mimic2dm.characters.scene import build_model
from mimic2dm.geometry.camera import Camera
from mimic2dm.render import probe_gl, try_render
q = np.tile(build_model("humanoid", with_sensors=False).qpos0, (2, 1))
cam = Camera.look_at([[4.0, 0.0, 1.2]], [[0.0, 0.0, 1.0]], 1000.0, 640, 360)
out = [try_render("humanoid", q, cam, height=90) for _ in range(2)]
print("frames", [None if f is None else round(float(f.std()), 3) for f in out])
print("probe", probe_gl().backend, sorted(probe_gl().failures))
"""


def _child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("DISPLAY", "WAYLAND_DISPLAY", "MUJOCO_GL", "PYOPENGL_PLATFORM")}  # fmt: skip
    return {**env, **extra}


def _run(code_or_args, env, timeout=180):
    args = ["-c", code_or_args] if isinstance(code_or_args, str) else code_or_args
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True,
                          timeout=timeout)  # fmt: skip


@pytest.mark.parametrize(
    "env, failed",
    [
        ({"PYOPENGL_PLATFORM": "glx"}, ["egl", "glfw", "osmesa"]),
        ({"MUJOCO_GL": "glfw"}, ["glfw (MUJOCO_GL)"]),
    ],
    ids=["osmesa-and-egl-unusable", "user-chose-glfw"],
)
def test_no_gl_skips_videos_twice_in_one_process(env, failed):
    res = _run(RENDER_TWICE, _child_env(**env))
    assert res.returncode == 0, res.stderr[-3000:]  # 134 was the GLFW abort
    assert "frames [None, None]" in res.stdout and f"probe None {failed}" in res.stdout, res.stdout
    assert res.stderr.count("video rendering skipped") == 1, res.stderr
    assert "GPU" not in res.stderr and "no OpenGL back-end works" in res.stderr
    assert "Exception ignored" not in res.stderr and "Aborted" not in res.stderr


def test_eval_video_without_gl_is_an_error_before_evaluating(tmp_path):
    # the checkpoint does not exist: the GL check comes first
    res = _run(["-m", "mimic2dm.cli", "eval", str(tmp_path / "none.pt"), "--data",
                str(tmp_path / "none.npz"), "--video", str(tmp_path / "v.mp4")],
               _child_env(PYOPENGL_PLATFORM="glx"))  # fmt: skip
    assert res.returncode == 1, res.stdout + res.stderr
    assert "--video" in res.stderr and "no OpenGL back-end works" in res.stderr
    assert "egl:" in res.stderr and "libegl1" in res.stderr and "GPU" not in res.stderr
    assert not (tmp_path / "v.mp4").exists()


def test_probed_backend_renders_twice_and_exits_cleanly(gl_backend):
    # MUJOCO_GL holds the probe's choice (conftest): the child probes that one only
    res = _run(RENDER_TWICE, _child_env(MUJOCO_GL=os.environ["MUJOCO_GL"]))
    assert res.returncode == 0, res.stderr[-3000:]
    assert f"probe {gl_backend} []" in res.stdout, res.stdout
    stds = [float(x) for x in res.stdout.split("frames [")[1].split("]")[0].split(",")]
    assert len(stds) == 2 and stds[0] > 5 and stds[0] == stds[1]
    # EGL left to interpreter exit prints EGLError tracebacks; contexts are freed before
    assert "EGLError" not in res.stderr and "Exception ignored" not in res.stderr, res.stderr
    assert "video rendering" not in res.stderr, res.stderr


def test_render_draws_the_reference_over_the_character(gl_backend):
    from mimic2dm.characters.scene import build_model
    from mimic2dm.geometry.camera import Camera

    kset = load_keypoint_set("coco17")
    q = np.tile(build_model("humanoid", with_sensors=False).qpos0, (2, 1))
    cam = Camera.look_at([[4.0, 0.0, 1.2]], [[0.0, 0.0, 1.0]], 1000.0, 640, 360)
    uv = np.stack([np.linspace(200, 440, kset.num_keypoints)] * 2, -1)[None].repeat(2, 0)
    mask = np.ones((2, kset.num_keypoints), bool)
    plain = render_qpos("humanoid", q, cam, height=180)
    drawn = render_qpos("humanoid", q, cam, height=180, ref_uv=uv, ref_mask=mask, kset=kset)
    assert plain.shape == drawn.shape == (2, 180, 320, 3)
    assert plain.std() > 5
    is_ref = (drawn == np.array(REF_COLOR, np.uint8)).all(-1)
    assert is_ref.sum() > 50 and not (plain == np.array(REF_COLOR, np.uint8)).all(-1).any()


def _has(img: np.ndarray, color) -> bool:
    return bool((img == np.array(color, np.uint8)).all(-1).any())


def test_overlay_picture_has_a_legend():
    kset = load_keypoint_set("coco17")
    K = kset.num_keypoints
    ref = np.random.default_rng(0).uniform(100, 900, (4, K, 2))
    mask = np.ones((4, K), bool)
    both = np.asarray(
        overlay_grid(ref, ref + 30, mask, kset.edges, (1920, 1080), [0, 3], tile_height=135)
    )
    assert both.shape == (135 + LEGEND_HEIGHT, 2 * 240, 3)
    legend = both[135:]
    assert _has(legend, REF_COLOR) and _has(legend, SIM_COLOR)
    assert (legend.min(-1) < 100).sum() > 30  # the labels' dark text
    ref_only = np.asarray(
        overlay_grid(ref, None, mask, kset.edges, (1920, 1080), [0], tile_height=135)
    )
    assert _has(ref_only[135:], REF_COLOR) and not _has(ref_only, SIM_COLOR)


@pytest.mark.slow
def test_demo_completes_without_any_gl_and_says_it_skips_the_video(tmp_path):
    """`mimic2dm demo` where no GL back-end works: exit 0, the reports and picture written,
    no rollout.mp4, and the console says the video is skipped."""
    out = tmp_path / "demo"
    res = _run(["-m", "mimic2dm.cli", "demo", "--out", str(out), "--minutes", "0.05", "--num-envs", "8"],
               _child_env(PYOPENGL_PLATFORM="glx", WANDB_MODE="offline"), timeout=600)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert "skips rollout.mp4" in res.stdout + res.stderr
    assert (out / "eval.json").is_file() and (out / "overlay.png").is_file()
    assert not (out / "rollout.mp4").exists()
    assert "Aborted" not in res.stderr and "Traceback" not in res.stderr
