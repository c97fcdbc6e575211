"""Training clips made in the control loop (``mimic2dm control --clips-out DIR``).

A tracker trained on real clips meets generated motion only in the loop. Each controlled
episode can be written as a 2D clip the tracker's training accepts (``data=files``,
``task.view_mode=clip``): the reference the tracker was handed, as the follow cameras saw
it (per-frame cameras, so the per-chunk re-placement is kept), and the simulated
character's states at every step as per-frame initial states (``init_*``, as
``mimic2dm preprocess`` writes them) with its keypoints as ``est_keypoints3d``. The
states are physically valid by construction (they were simulated). Where the character
fell or lost the reference they no longer describe the reference, so the clip is cut
``margin`` steps before the first step whose root is below ``min_root_height`` or whose max
keypoint error exceeds ``max_error_px`` (1080p). A clip shorter than ``min_frames`` after
the cut is not written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mimic2dm import metrics
from mimic2dm.engines.base import SimState
from mimic2dm.motion.format import Motion2D, save_motion2d
from mimic2dm.utils.validate import check

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class LoopClipSettings:
    """When a controlled episode becomes a clip (module docstring).

    Attributes:
        max_error_px: cut before the first step with a keypoint further off (px at 1080p).
        min_root_height: cut before the first step with the root below this (m).
        margin: steps dropped before that step.
        min_frames: shorter clips are not written.
    """

    max_error_px: float = 300.0
    min_root_height: float = 0.5
    margin: int = 10
    min_frames: int = 45

    def __post_init__(self) -> None:
        check("--clips-max-error", self.max_error_px, gt=0)
        check("min_root_height", self.min_root_height, ge=0)
        check("margin", self.margin, ge=0, integer=True)
        check("--clips-min-frames", self.min_frames, ge=1, integer=True)


def usable_frames(rec, height: int, s: LoopClipSettings) -> int:
    """Leading steps of ``rec`` (a controller ``Record``) that make a clip (0: none)."""
    err = metrics.reprojection_errors(rec.stacked("uv"), rec.stacked("ref"), rec.stacked("mask"),
                                      height, rec.stacked("front"))  # fmt: skip
    worst = metrics.max_error_per_frame(err.transpose(0, 1)).amax(0).numpy()  # [T] over views
    bad = (worst > s.max_error_px) | (np.asarray(rec.root_height) < s.min_root_height)
    T = len(worst) if not bad.any() else max(int(np.argmax(bad)) - s.margin, 0)
    return T if T >= s.min_frames else 0


def record_to_clip(rec, T: int, kset: str, character: str, hz: float,
                   image_size: tuple[int, int], labels: dict, meta: dict) -> Motion2D:  # fmt: skip
    """The first ``T`` steps of ``rec`` (recorded with ``record_states``) as a 2D clip."""
    if len(rec.states) < T:
        raise ValueError("record_to_clip: the run was not recorded with record_states")
    ref = rec.stacked("ref")[:T].transpose(0, 1).numpy()  # [V, T, K, 2]
    mask = (rec.stacked("mask")[:T]).transpose(0, 1).numpy()
    st = SimState.cat(rec.states[:T])

    def arr(x: torch.Tensor) -> np.ndarray:
        return x.detach().cpu().numpy().astype(np.float32)

    def cams(name: str) -> np.ndarray:
        return rec.stacked(name)[:T].transpose(0, 1).numpy().astype(np.float32)

    return Motion2D(
        keypoints=np.where(mask[..., None], ref, np.nan).astype(np.float32),
        confidence=mask.astype(np.float32), keypoint_set=kset, fps=float(hz), image_size=image_size,
        camera_R=cams("cam_R"), camera_t=cams("cam_t"), camera_intrinsics=cams("cam_k"),
        est_keypoints3d=arr(rec.stacked("kp3d")[:T]), init_character=character,
        init_root_pos=arr(st.root_pos), init_root_quat=arr(st.root_rot), init_root_lin_vel=arr(st.root_lin_vel),
        init_root_ang_vel=arr(st.root_ang_vel), init_dof_pos=arr(st.dof_pos), init_dof_vel=arr(st.dof_vel),
        labels=labels, meta=meta,
    )  # fmt: skip


class LoopClipWriter:
    """Writes controlled episodes to ``out`` as ``loop_<seed>.npz`` with a manifest.

    The manifest (``manifest.json``, rewritten atomically after every episode) lists every
    episode with the steps it kept, so a stopped run loses nothing already written. Into a
    directory that has one, the episodes of earlier runs are kept; an episode of the same
    seed replaces the earlier entry (and its file).
    """

    def __init__(self, out: str | Path, settings: LoopClipSettings, character: str, kset: str,
                 hz: float, image_size: tuple[int, int], source: dict):  # fmt: skip
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.s, self.character, self.kset, self.hz, self.size = (
            settings,
            character,
            kset,
            hz,
            image_size,
        )
        self.manifest = {"source": source, "settings": settings.__dict__, "episodes": []}
        if (self.out / MANIFEST).is_file():
            try:
                self.manifest["episodes"] = json.loads((self.out / MANIFEST).read_text())[
                    "episodes"
                ]
            except (ValueError, KeyError, TypeError) as e:
                raise ValueError(f"--clips-out {self.out}: {MANIFEST} is not a loop-clip manifest "
                                 f"({e}); choose another directory") from None  # fmt: skip

    def add(self, rec, seed: int, label: str | None) -> Path | None:
        T = usable_frames(rec, self.size[1], self.s)
        path = None
        if T:
            labels = {"skill": label} if label else {}
            meta = {
                "made_by": "mimic2dm control --clips-out",
                "seed": seed,
                **self.manifest["source"],
            }
            m = record_to_clip(rec, T, self.kset, self.character, self.hz, self.size, labels, meta)
            path = self.out / f"loop_{seed}.npz"
            save_motion2d(m, path)
        eps = [e for e in self.manifest["episodes"] if e.get("seed") != seed]
        eps.append(
            {"seed": seed, "steps": len(rec.uv), "kept": T, "file": path.name if path else None}
        )
        self.manifest["episodes"] = eps
        if path is None:  # an earlier run's clip of this seed no longer describes this episode
            (self.out / f"loop_{seed}.npz").unlink(missing_ok=True)
        tmp = self.out / (MANIFEST + ".tmp")
        tmp.write_text(json.dumps(self.manifest, indent=2) + "\n")
        tmp.replace(self.out / MANIFEST)
        return path
