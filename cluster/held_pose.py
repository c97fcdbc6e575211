"""How well a preprocessed clip's initial states stand: every frame's fitted pose is
simulated (MuJoCo) with PD targets equal to its own joint angles for a few control steps,
and the worst keypoint's 2D error against the clip's keypoints is reported (at 1080p),
beside the fit's shape: the centre of mass's distance from the feet, the
feet's tilt and the camera's roll (docs/preprocess.md "Stance").

    python cluster/held_pose.py PRE.npz [PRE.npz ...] [--steps 6] [--json OUT.json]
        [--override KEY=VALUE ...]

``PRE.npz``: an output of ``mimic2dm preprocess`` (humanoid). ``--override``: trainer
config overrides (``task.action_scale=2``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import torch


def fit_shape(path: Path) -> dict:
    """Median over frames of the centre of mass's horizontal distance from the nearest
    segment between two feet (m), median tilt of the flatter foot (deg) and the camera's
    roll (deg) of a preprocessed clip."""
    from mimic2dm.characters.registry import load_character
    from mimic2dm.motion.format import MotionFormatError, load_motion2d
    from mimic2dm.preprocess import losses
    from mimic2dm.preprocess.kinematics import CharacterModel

    try:
        m = load_motion2d(path)
    except MotionFormatError as e:
        raise SystemExit(str(e)) from None
    if m.init_character is None or m.init_root_pos is None:
        raise SystemExit(
            f"{path}: field 'init_root_pos' is missing, expected the initial states that "
            "`mimic2dm preprocess` writes ([T, 3])"
        )
    cm = CharacterModel(load_character(m.init_character))
    args = [torch.as_tensor(x) for x in (m.init_root_pos, m.init_root_quat, m.init_dof_pos)]
    com = cm.com(*args)
    _, contact = cm.forward(*args)
    cz = contact[..., 2] - cm.contact_radius
    every = torch.ones(cz.shape[0], int(cm.contact_group.max()) + 1)  # as if every foot stood
    d, _, _, _ = losses.support_offset(com[..., :2], contact, cz, cm.contact_group, stance=every)
    out = {"com_from_feet_m": float(d.median())}
    if len(cm.flat_feet):
        _, rot = cm.bodies(*args)
        tilt = torch.rad2deg(torch.arccos(rot[:, cm.flat_feet, 2, 2].clamp(-1, 1))).amin(-1)
        out["foot_tilt_deg"] = float(tilt.median())
    R = np.asarray(m.camera_R).reshape(-1, 3, 3)[0]
    out["camera_roll_deg"] = math.degrees(math.asin(float(np.clip(R[0, 2], -1, 1))))
    return out


def held_errors(path: Path, steps: int, overrides: list[str]) -> list[float]:
    """Median over frames of the worst keypoint's 2D error (1080p) after each control step."""
    from mimic2dm.tasks.registry import build_engine
    from mimic2dm.tasks.tracking2d.asi import ASIConfig
    from mimic2dm.tasks.tracking2d.factory import tracking_config
    from mimic2dm.tasks.tracking2d.reference import ReferenceLibrary
    from mimic2dm.tasks.tracking2d.source import ClipReference
    from mimic2dm.tasks.tracking2d.task import Tracking2DTask

    from mimic2dm.app.runspec import task_spec_from_cfg
    from mimic2dm.train import compose_config

    clip = str(path)
    cfg = compose_config(["data=files", f"data.clips=[{clip}]", *overrides])
    spec = task_spec_from_cfg(cfg, [clip])
    tc = dataclasses.replace(tracking_config(spec), early_termination=False,
                             max_episode_steps=10**9, asi=ASIConfig(enabled=False))  # fmt: skip
    lib = ReferenceLibrary.from_files([clip], spec.control_hz, view_mode="clip")
    T = int(lib.clips[0].num_frames)
    engine = build_engine(spec, T)
    task = Tracking2DTask(engine, ClipReference(lib, T, 1, engine.device), tc, seed=0)
    starts = lib.offsets[0] + torch.arange(T)
    states = task.asi.sample_states(starts, task.gen)
    task.start_episodes(torch.arange(T), starts, states, torch.zeros(T, 1, dtype=torch.long))
    hold = ((states.dof_pos - task.act_offset) / task.act_scale).clamp(-1, 1)
    scale = 1080.0 / float(lib.clips[0].image_height[0])
    out = []
    for _ in range(steps):
        task.advance(hold)
        task.refresh()
        uv, _ = task.project_character()
        ref, mask = task.reference(task.frame)
        err = torch.where(mask, (uv - ref).norm(dim=-1), torch.nan)[:, 0]
        worst = np.nanmax(err.numpy(), axis=1) * scale
        out.append(float(np.nanmedian(worst)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("clips", nargs="+", type=Path)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--override", action="append", default=[])
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    rows = []
    for clip in a.clips:
        row = {"clip": str(clip), **fit_shape(clip),
               "held_worst_px_1080": held_errors(clip, a.steps, a.override)}  # fmt: skip
        rows.append(row)
        print(f"{clip.name:24s} held {row['held_worst_px_1080'][-1]:6.1f} px after {a.steps} steps"
              f"  com {row['com_from_feet_m']:.2f} m  tilt {row.get('foot_tilt_deg', float('nan')):5.1f}"
              f"  roll {row['camera_roll_deg']:5.1f}")  # fmt: skip
    if a.json:
        a.json.write_text(
            json.dumps({"overrides": a.override, "steps": a.steps, "clips": rows}, indent=1)
        )


if __name__ == "__main__":
    main()
