"""``mimic2dm demo``: the main job on the embedded default, with no external data.

1. Make the project's own demo clip (keyframed humanoid motion, projected to 2D) and
   write it as a versioned 2D-motion file.
2. Load it back through the validating loader, build the batched MuJoCo engine, start
   every env at the clip's first pose with a small random perturbation, and PD-track
   the clip's joint angles open loop (the kinematic baseline a learned tracker beats).
3. Project the simulated keypoints through the clip's camera and report the DESIGN-10
   metrics (JSON) with an overlay picture of reference vs simulated keypoints.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch
from rich.console import Console

from mimic2dm import metrics
from mimic2dm.engines import load_engine
from mimic2dm.engines.base import SimState
from mimic2dm.geometry.camera import project_points
from mimic2dm.motion.demo import make_demo_clip
from mimic2dm.motion.format import load_motion2d, save_motion2d
from mimic2dm.motion.keypoint_sets import load_keypoint_set
from mimic2dm.utils.draw import overlay_grid


def _start_states(engine, motion3d, num_envs: int, noise: float, gen: torch.Generator) -> SimState:
    s = engine.default_state(num_envs)
    s.root_pos[:] = torch.as_tensor(motion3d.root_pos[0], dtype=torch.float32)
    s.root_rot[:] = torch.as_tensor(motion3d.root_quat[0], dtype=torch.float32)
    dof = torch.as_tensor(motion3d.dof_pos[0], dtype=torch.float32)
    s.dof_pos[:] = dof + noise * torch.randn(num_envs, dof.shape[0], generator=gen)
    lo, hi = engine.get_dof_limits()
    s.dof_pos[:] = torch.maximum(torch.minimum(s.dof_pos, hi), lo)
    return s


def run_demo(out: str | Path, num_envs: int = 16, seed: int = 0, noise: float = 0.05) -> dict:
    """Run the demo and write ``demo_clip.npz``, ``metrics.json`` and ``overlay.png`` into ``out``."""
    console = Console()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    m3, m2 = make_demo_clip(seed=seed)
    clip_path = out / "demo_clip.npz"
    save_motion2d(m2, clip_path)
    m2 = load_motion2d(clip_path)
    console.print(
        f"demo clip: {m2.num_frames} frames at {m2.fps:g} fps, {m2.num_views} view -> {clip_path}"
    )
    gen = torch.Generator().manual_seed(seed)
    engine = load_engine("mujoco", "humanoid", num_envs=num_envs, control_dt=1.0 / m2.fps)
    engine.reset(state=_start_states(engine, m3, num_envs, noise, gen))
    cam = m2.cameras()[0]
    T = m2.num_frames
    sim_kp = torch.zeros(num_envs, T, engine.num_keypoints, 3)
    sim_kp[:, 0] = engine.get_keypoints()
    t0 = time.perf_counter()
    targets = torch.as_tensor(m3.dof_pos, dtype=torch.float32)
    for t in range(1, T):
        engine.step(targets[t].expand(num_envs, -1))
        sim_kp[:, t] = engine.get_keypoints()
    wall = time.perf_counter() - t0
    R, tr, k = cam.params(torch.arange(T))
    uv, _ = project_points(R, tr, k, sim_kp)  # per-frame cameras broadcast over envs
    ref = torch.from_numpy(np.nan_to_num(m2.keypoints[0])).float()
    mask = torch.from_numpy(m2.mask()[0])
    err = metrics.reprojection_errors(
        uv, ref.expand_as(uv), mask.expand(num_envs, -1, -1), cam.height
    )
    result = {
        "clip": str(clip_path),
        "num_envs": num_envs,
        "env_steps_per_s": num_envs * (T - 1) / wall,
        "success_rate": float(metrics.success(err).float().mean()),
        "error_2d_px": float(metrics.mean_error_2d(err).mean()),
        "mpjpe_mm": float(
            metrics.mpjpe_mm(
                sim_kp, torch.from_numpy(m2.keypoints3d).float().expand_as(sim_kp)
            ).mean()
        ),
        "jitter": float(metrics.jitter(sim_kp, m2.fps).mean()),
        "nonfinite_envs": int(engine.nonfinite_envs().sum()),
    }
    (out / "metrics.json").write_text(json.dumps(result, indent=2))
    frames = np.linspace(0, T - 1, 6).round().astype(int).tolist()
    kset = load_keypoint_set(m2.keypoint_set)
    overlay_grid(ref.numpy(), uv[0].numpy(), mask.numpy(), kset, tuple(m2.image_size), frames).save(
        out / "overlay.png"
    )
    engine.close()
    console.print_json(json.dumps(result))
    console.print(f"wrote {out / 'metrics.json'} and {out / 'overlay.png'}")
    return result
