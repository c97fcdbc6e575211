"""``mimic2dm rollouts``: multi-view generator data made by the tracker (paper appendix B.5).

The tracker follows single-view 2D clips (no 3D needed, e.g. clips extracted from
videos); the simulated character's 3D keypoints are recorded and projected into ``V``
virtual cameras with the geometry of the generators' training pairs
(``generators/data.py``, ``build_view_dataset``): view ``v`` at azimuth ``a + 90 v`` deg,
all views with the same elevation, distance and focal length (one camera seed), the
camera mode drawn per set from static / tracking / dynamic (``--camera-modes``), 1920x1080 at the control
rate. ``V = 2`` gives exactly the orthogonal pairs of ``gen_data=cmu_views``. Each set is
one ``.npz`` 2D-motion file (labels copied from the source clip, the simulated 3D
keypoints kept as ``keypoints3d``), which ``gen_data=dir gen_data.dir=OUT`` accepts.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

from mimic2dm import metrics
from mimic2dm.geometry.virtual import CAMERA_MODES, VirtualCameraConfig
from mimic2dm.motion.format import Motion2D, save_motion2d
from mimic2dm.utils.validate import check

MANIFEST = "manifest.json"


def project_views(kp3: np.ndarray, keypoint_set: str, fps: float, num_views: int, mode: str, azimuth: float,
                  seed: int, labels: dict | None = None) -> Motion2D:  # fmt: skip
    """``kp3 [T, K, 3]`` seen by ``num_views`` cameras at azimuths ``azimuth + 90 v`` (same seed:
    same elevation, distance and focal), stacked as the views of one ``Motion2D``."""
    from mimic2dm.motion.synth import synthesize_views

    views = []
    for v in range(num_views):
        a = azimuth + 90.0 * v
        cfg = VirtualCameraConfig(azimuth_range_deg=(a, a))
        views.append(synthesize_views(kp3, keypoint_set, fps, num_views=1, camera=mode, seed=seed,
                                      camera_config=cfg, labels=labels))  # fmt: skip
    cat = {}
    for k in ("keypoints", "confidence", "camera_R", "camera_t", "camera_intrinsics"):
        arrs = [getattr(v, k) for v in views]
        if k.startswith("camera"):  # static and moving views together: per frame for all
            F = max(a.shape[1] for a in arrs)
            arrs = [np.broadcast_to(a, (1, F, *a.shape[2:])) for a in arrs]
        cat[k] = np.concatenate(arrs)
    meta = {**views[0].meta, "azimuths_deg": [azimuth + 90.0 * v for v in range(num_views)],
            "views": "azimuth steps of 90 deg"}  # fmt: skip
    return Motion2D(keypoint_set=keypoint_set, fps=fps, image_size=views[0].image_size, keypoints3d=views[0].keypoints3d,
                    labels=dict(labels or {}), meta=meta, **cat)  # fmt: skip


@torch.no_grad()
def track_clips(policy, data: list[str]) -> tuple[list[dict], object]:
    """Run ``policy`` over every view of every clip (no early termination).

    Returns:
        per sequence ``{clip, view, kp3d [T, K, 3], success, error_2d_px, labels}`` and the library.
    """
    from mimic2dm.tasks.tracking2d import roll_out_sequences

    task, lib, seqs, _, _, rec = roll_out_sequences(policy, data, views=1, states=False)
    task.close()
    kp3d, uv, ref, mask, front = (rec[k] for k in ("kp3d", "uv", "ref", "mask", "front"))
    out = []
    for i, (c, vs) in enumerate(seqs):
        clip = lib.clips[c]
        n = clip.num_frames
        err = metrics.reprojection_errors(
            uv[i, :n, 0],
            ref[i, :n, 0],
            mask[i, :n, 0],
            int(clip.image_height[vs[0]]),
            front[i, :n, 0],
        )
        out.append({"clip": clip.name, "view": vs[0], "kp3d": kp3d[i, :n].numpy(), "labels": dict(clip.labels),
                    "success": bool(metrics.success(err)), "error_2d_px": float(metrics.mean_error_2d(err))})  # fmt: skip
    return out, lib


def write_rollouts(tracker: str, data: list[str], views: int, out: str | Path, sets: int = 4, seed: int = 0,
                   random_weights: bool = False, camera_modes: tuple[str, ...] = CAMERA_MODES) -> dict:  # fmt: skip
    """Track ``data`` and write ``sets`` multi-view clips per tracked sequence into ``out``.

    ``camera_modes``: the modes each set's cameras are drawn from (``("static",)`` for
    generators that drive ``mimic2dm control``, whose cameras hold still between chunks).

    Returns:
        The manifest (also written as ``out/manifest.json``).
    """
    from mimic2dm.rl.policy import load_policy, untrained_policy

    check("--views", views, ge=1, integer=True)
    check("--sets", sets, ge=1, integer=True)
    check("--seed", seed, ge=0, integer=True)
    bad = [m for m in camera_modes if m not in CAMERA_MODES]
    if bad or not camera_modes:
        raise ValueError(
            f"--camera-modes {','.join(camera_modes)}: each must be one of {', '.join(CAMERA_MODES)}"
        )
    policy = load_policy(tracker)
    policy = untrained_policy(policy, seed) if random_weights else policy
    rolls, lib = track_clips(policy, data)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    fps = float(policy.env_spec.control_hz)
    written, per_seq = [], []
    for r in rolls:
        for j in range(sets):
            mode = camera_modes[int(rng.integers(len(camera_modes)))]
            az, cam_seed = float(rng.uniform(0.0, 360.0)), int(rng.integers(2**31 - 1))
            m = project_views(r["kp3d"], lib.kset.name, fps, views, mode, az, cam_seed, r["labels"])
            m.meta |= {"source": r["clip"], "source_view": r["view"], "tracker": str(tracker),
                       "random_weights": random_weights, "rollout_success": r["success"],
                       "rollout_error_2d_px": r["error_2d_px"], "generator": "mimic2dm.control.rollouts"}  # fmt: skip
            path = out / f"{Path(r['clip']).stem}_v{r['view']}_{j:03d}.npz"
            save_motion2d(m, path)
            written.append(path.name)
        per_seq.append({k: r[k] for k in ("clip", "view", "success", "error_2d_px")})
    manifest = {"tracker": str(tracker), "random_weights": random_weights, "views": views, "sets": sets, "seed": seed,
                "geometry": f"view v at azimuth a + 90 v deg; same elevation/distance/focal; mode from {'/'.join(camera_modes)}",
                "files": len(written), "rollouts": per_seq,
                "success_rate": float(np.mean([r["success"] for r in per_seq]))}  # fmt: skip
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest
