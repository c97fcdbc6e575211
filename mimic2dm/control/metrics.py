"""Table 3 of the paper for controlled runs: success, 2D error to the generated
reference, FID and diversity of the simulated motion, generator latency.

FID compares 32-frame canonical windows of the simulated character's 2D projections
against real motion with the project's FID extractor (``generators/fid.py``). The
character is projected for this through static cameras at the control views' azimuths,
placed as the generator data's static views are (:func:`static_views`), not through the
controller's follow cameras (whose re-placement would show up as jumps of the root, and
which hold the root still in the image where real motion moves across it), so the
windows describe the simulated motion itself as the real set's cameras would see it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mimic2dm import metrics
from mimic2dm.control.controller import STAGES, Record
from mimic2dm.generators.fid import (
    FIDConfig,
    FIDExtractor,
    MotionEncoder,
    diversity,
    fid,
    real_windows,
)
from mimic2dm.geometry.camera import Camera
from mimic2dm.motion.canonical import to_canonical
from mimic2dm.motion.keypoint_sets import KeypointSet
from mimic2dm.utils.reporting import markdown_rows

WINDOW_STRIDE = 8
"""Frames between the starts of the FID windows of a run."""


@dataclass
class FIDSet:
    """A frozen extractor and the real windows FID is measured against.

    Attributes:
        extractor: the feature extractor; trained: False for an untrained one (smoke runs).
        real: raw canonical windows ``[N, W, D]`` and their mask ``[N, W, K]``.
        source: where the real windows came from.
    """

    extractor: FIDExtractor
    trained: bool
    real: tuple[torch.Tensor, torch.Tensor]
    source: str

    def describe(self) -> dict:
        return {"fid_extractor": self.extractor.version, "fid_extractor_trained": self.trained,
                "fid_real": self.source, "fid_num_real": int(self.real[0].shape[0])}  # fmt: skip


def load_fid_set(real_dir: str | Path, keypoint_set: str, extractor: str | Path | None,
                 limit: int = 2048) -> FIDSet:  # fmt: skip
    """Real windows of ``real_dir`` (2D-motion files) and an extractor (None: untrained, seed 0)."""
    from mimic2dm.generators.data import WindowSampler, load_clips
    from mimic2dm.generators.fid import load_fid_extractor

    clips = load_clips(real_dir, label_key=None, keypoint_set=keypoint_set)
    if extractor is not None:
        ext, trained = load_fid_extractor(extractor), True
    else:
        torch.manual_seed(0)
        model = MotionEncoder(FIDConfig(in_dim=clips.dim, num_keypoints=clips.num_keypoints))
        ext, trained = FIDExtractor(model, clips.compute_stats()), False
    sampler = WindowSampler(clips, ext.window, ext.stats)
    feats, kmask, _ = real_windows(sampler, limit)
    return FIDSet(ext, trained, (feats, kmask), str(real_dir))


def tracking_cameras(kp3d: torch.Tensor, kset: KeypointSet, azimuths_deg: list[float], elevation_deg: float,
                     distance: float, focal: float, width: int = 1920, height: int = 1080) -> list[Camera]:  # fmt: skip
    """Per-frame cameras that keep a fixed offset from the root of ``kp3d [T, K, 3]``, one per azimuth."""
    from mimic2dm.geometry.camera import DEG, spherical_offset

    root = kp3d[:, list(kset.root)].mean(1)

    def offset(a: float) -> torch.Tensor:
        return spherical_offset(
            *(
                torch.tensor(x, dtype=torch.float32)
                for x in (a * DEG, elevation_deg * DEG, distance)
            )
        )

    return [Camera.look_at(root + offset(a), root, focal, width, height) for a in azimuths_deg]


def static_views(kp3d: torch.Tensor, kset: KeypointSet, azimuths_deg: list[float], elevation_deg: float,
                 focal: float, width: int = 1920, height: int = 1080) -> list[Camera]:  # fmt: skip
    """One static camera per azimuth for the root path of ``kp3d [T, K, 3]``, placed as the
    generator data's static views are (``sample_camera(..., "static")``: aimed at the middle of
    the path, as far as it takes to keep the whole path in the image)."""
    from mimic2dm.geometry.virtual import VirtualCameraConfig, sample_camera

    root = kp3d[:, list(kset.root)].mean(1)
    cfgs = [
        VirtualCameraConfig(width=width, height=height, focal_range=(focal, focal),
                            azimuth_range_deg=(a, a), elevation_range_deg=(elevation_deg, elevation_deg))
        for a in azimuths_deg
    ]  # fmt: skip
    return [sample_camera(root, "static", config=c) for c in cfgs]


def windows(feats: torch.Tensor, W: int, stride: int = WINDOW_STRIDE) -> torch.Tensor:
    """``[n, W, D]`` windows of ``feats [T, D]`` starting every ``stride`` frames (none if ``T < W``)."""
    if feats.shape[0] < W:
        return feats.new_zeros(0, W, feats.shape[1])
    return feats.unfold(0, W, stride).permute(0, 2, 1).contiguous()


def simulated_windows(
    rec: Record, kset: KeypointSet, cams: list[Camera], W: int, frames: int | None = None
) -> torch.Tensor:
    """Canonical windows ``[n, W, D]`` of the simulated keypoints seen through ``cams``.

    ``frames``: only the first ``frames`` steps (e.g. those before a fall, :func:`upright_steps`).
    """
    kp = rec.stacked("kp3d")
    out = []
    for cam in cams:
        uv, _ = cam.project(kp)
        out.append(windows(to_canonical(uv[:frames], kset).features()[:-1], W))
    return torch.cat(out)


def upright_steps(rec: Record, fall_height: float) -> int:
    """Leading steps of ``rec`` before its root first drops below ``fall_height`` (all if never)."""
    h = np.asarray(rec.root_height)
    return int(np.argmax(h < fall_height)) if bool((h < fall_height).any()) else len(h)


def generated_windows(rec: Record, W: int) -> torch.Tensor:
    """Windows ``[n, W, D]`` of the raw canonical features the generator handed over."""
    g = torch.cat(rec.generated, dim=1)
    return torch.cat([windows(g[v], W) for v in range(g.shape[0])])


def episode_metrics(rec: Record, hz: float, height: int, fall_height: float) -> dict:
    """Success, 2D error and latency of one run."""
    err = metrics.reprojection_errors(
        rec.stacked("uv"), rec.stacked("ref"), rec.stacked("mask"), height, rec.stacked("front")
    )
    err = err.transpose(0, 1)  # [V, T, K]
    worst = metrics.max_error_per_frame(err).amax(0)  # [T] the worst view of each step
    over = worst > metrics.SUCCESS_THRESHOLD_PX
    up = upright_steps(rec, fall_height)
    fell = up < len(rec.root_height)
    within = bool(metrics.success(err).all())
    total = sum(rec.stage_seconds.values())
    return {
        "success": within and not fell, "fell": fell,
        "fall_time_s": up / hz if fell else None,
        "error_within_bound": within, "error_2d_px": float(metrics.mean_error_2d(err).mean()),
        "error_2d_px_per_view": [float(x) for x in metrics.mean_error_2d(err)],
        "max_error_2d_px": float(worst.max()),
        # where the bound is lost: the worst step, the first step over it, the share over it
        "max_error_time_s": int(worst.argmax()) / hz,
        "first_over_bound_s": int(over.float().argmax()) / hz if bool(over.any()) else None,
        "over_bound_share": float(over.float().mean()),
        "generator_ms_per_frame": 1e3 * rec.gen_seconds / max(rec.gen_frames, 1),
        "steps": len(rec.uv), "chunks": len(rec.chunks),
        "steps_per_s": len(rec.uv) / max(total, 1e-9),
        "stage_share": {k: rec.stage_seconds[k] / max(total, 1e-9) for k in STAGES},
    }  # fmt: skip


def table3(
    episodes: list[dict],
    sim: torch.Tensor,
    gen: torch.Tensor,
    fid_set: FIDSet | None,
    upright: torch.Tensor | None = None,
) -> dict:
    """Aggregate episode metrics; FID / diversity over the pooled windows of all episodes.

    ``upright``: the simulated windows that end before a fall (``fid_upright``); a fallen
    character's poses are far from any real one and dominate ``fid`` whenever episodes fall.
    """
    out = {
        "episodes": len(episodes),
        "success_rate": float(np.mean([e["success"] for e in episodes])),
        "fall_rate": float(np.mean([e["fell"] for e in episodes])),
        "error_2d_px": float(np.mean([e["error_2d_px"] for e in episodes])),
        "max_error_2d_px": float(np.max([e["max_error_2d_px"] for e in episodes])),
        "generator_ms_per_frame": float(np.mean([e["generator_ms_per_frame"] for e in episodes])),
        "success_threshold_px": metrics.SUCCESS_THRESHOLD_PX,
    }
    if fid_set is None:
        return out
    ext = fid_set.extractor
    fr = ext.features(*fid_set.real)
    out |= fid_set.describe() | {
        "fid_windows_simulated": int(sim.shape[0]),
        "fid_windows_generated": int(gen.shape[0]),
    }
    pools = [("", sim), ("_generated", gen)]
    if upright is not None:
        out["fid_windows_upright"] = int(upright.shape[0])
        pools.append(("_upright", upright))
    for name, w in pools:
        if w.shape[0] >= 2:
            f = ext.features(w)
            out[f"fid{name}"] = fid(f, fr)
            out[f"diversity{name}"] = diversity(f)
        else:  # a run shorter than one window: nothing to compare
            out[f"fid{name}"] = out[f"diversity{name}"] = None
    out["diversity_real"] = diversity(fr)
    return out


TABLE3_COLUMNS = (
    ("success", lambda r: f"{100 * r['success_rate']:.0f} %"),
    ("falls", lambda r: f"{100 * r['fall_rate']:.0f} %"),
    ("mean time to fall (s)", lambda r: _fmt(_mean_fall_time(r), 1)),
    ("2D error (px)", lambda r: _fmt(r["error_2d_px"], 1)),
    ("max 2D error (px)", lambda r: _fmt(r["max_error_2d_px"], 1)),
    ("FID (simulated)", lambda r: _fmt(r.get("fid"), 1)),
    ("FID (simulated, before falls)", lambda r: _fmt(r.get("fid_upright"), 1)),
    ("FID (generated)", lambda r: _fmt(r.get("fid_generated"), 1)),
    ("diversity (simulated / generated / real)",
     lambda r: "/".join(_fmt(r.get(k), 2) for k in ("diversity", "diversity_generated", "diversity_real"))),
    ("generator ms / frame", lambda r: _fmt(r["generator_ms_per_frame"], 2)),
)  # fmt: skip
"""Columns of :func:`table3_markdown`: name and how a ``mimic2dm control --json`` report fills it."""


def _fmt(x: float | None, digits: int) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _mean_fall_time(report: dict) -> float | None:
    t = [
        e["fall_time_s"] for e in report.get("per_episode", []) if e.get("fall_time_s") is not None
    ]
    return float(np.mean(t)) if t else None


def table3_markdown(reports: list[tuple[str, dict]]) -> str:
    """The paper's Table 3 as markdown: one row per ``(name, report)`` of ``mimic2dm control``.

    The row also names the generator type, the skill, the views and the episode count, so
    rows of different runs stay comparable at a glance (FID only at the same extractor).
    """
    head = ["run", "generator", "skill", "views", "episodes", *(c for c, _ in TABLE3_COLUMNS)]
    rows = [[name, str(r.get("generator_type", "-")), str(r.get("settings", {}).get("skill") or "-"),
             str(r.get("views", "-")), str(r["episodes"]), *(f(r) for _, f in TABLE3_COLUMNS)]
            for name, r in reports]  # fmt: skip
    return "\n".join(markdown_rows(head, rows)) + "\n"
