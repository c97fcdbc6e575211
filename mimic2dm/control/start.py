"""Start states for controlled runs: the physical state that best matches the first
generated frames (``mimic2dm control --start-states CLIP``).

A tracker learns from states of its reference clips (ASI, docs/design.md section 7); it never starts from
the default standing pose while its reference already walks. A controlled run that starts
there falls within about a second and a half, even when the "generated" motion is a real
clip replayed (docs/control.md). So the controller can start from a library of physical
states instead: the initial states that training would build for a clip with 3D (its
fitted 3D pose) or preprocessed states, one per frame. Each episode picks the frame ``t``
and the follow camera's azimuth ``a`` whose projected motion over the next ``n`` frames is
closest, in canonical units, to the first ``n`` generated frames: local pose (per frame,
divided by the body size) and root velocity. This is motion matching on the 2D interface;
the state's velocities come with it, so the character starts in stride.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from mimic2dm.control.reference import FollowCamera
from mimic2dm.engines.base import SimState
from mimic2dm.geometry.camera import project_points
from mimic2dm.motion.canonical import body_scale, root_2d
from mimic2dm.motion.keypoint_sets import KeypointSet

MATCH_FRAMES = 8
"""Frames of generated motion a start state is matched against."""
AZIMUTHS = 24
"""Follow-camera azimuths tried (every 15 deg)."""
ROOT_VEL_WEIGHT = 4.0
"""Weight of the squared root-velocity difference against the mean squared local-pose one."""


@dataclass
class StartLibrary:
    """Candidate start states and the world keypoints of the motion that follows each.

    Attributes:
        states: ``[S]`` physical states (frame ``i`` of the library).
        keypoints3d: ``[S, K, 3]`` reference world keypoints at each state's frame.
        valid: ``[S]`` states with ``MATCH_FRAMES`` frames of the same clip after them.
        sources: where each clip's states come from (``reference_3d`` | ``preprocessed``).
        files: the clips.
    """

    states: SimState
    keypoints3d: torch.Tensor
    valid: torch.Tensor
    sources: list[str]
    files: list[str]


def load_start_library(
    paths: list[str], character, template: SimState, cfg, control_hz: float
) -> StartLibrary:
    """Initial states of the clips at ``paths`` as the tracker's training builds them.

    Args:
        paths: 2D clips with 3D keypoints or preprocessed initial states.
        character: the engine's character spec; template: its default state ``[1]``.
        cfg: the tracker's ``TrackingConfig`` (initial-state settings); control_hz: its rate.

    Raises:
        ValueError: a clip has neither 3D keypoints nor preprocessed states of this character.
    """
    from mimic2dm.tasks.tracking2d.initial import (
        ground_states,
        initial_state_sources,
        initial_states,
    )
    from mimic2dm.tasks.tracking2d.reference import ReferenceLibrary

    lib = ReferenceLibrary.from_files(list(paths), control_hz, view_mode="clip")
    sources = initial_state_sources(lib, character, "auto")
    kps = []
    for clip, src in zip(lib.clips, sources, strict=True):
        # a preprocessed clip: match on the preprocessing's own 3D estimate (the states' source)
        kp3d = {"reference_3d": clip.keypoints3d, "preprocessed": clip.est_keypoints3d}.get(src)
        if kp3d is None:
            raise ValueError(
                f"--start-states {clip.name}: the clip has neither 3D keypoints (keypoints3d) nor "
                "preprocessed states of this character (init_*, est_keypoints3d); start states need a "
                "synthetic clip with 3D ground truth or one made by `mimic2dm preprocess`"
            )
        kps.append(torch.as_tensor(kp3d, dtype=torch.float32))
    states = initial_states(lib, template, character, "auto", cfg.initial_level_feet)
    if cfg.initial_ground:
        states, _ = ground_states(states, character)
    kp = torch.cat(kps)
    valid = torch.zeros(kp.shape[0], dtype=torch.bool)
    for off, n in zip(lib.offsets.tolist(), lib.lengths.tolist(), strict=True):
        valid[off : off + max(0, n - MATCH_FRAMES)] = True
    if not valid.any():
        raise ValueError(f"--start-states: every clip is shorter than {MATCH_FRAMES + 1} frames")
    return StartLibrary(states, kp, valid, sources, [str(p) for p in paths])


def _descriptor(uv: torch.Tensor, kset: KeypointSet) -> tuple[torch.Tensor, torch.Tensor]:
    """Local pose ``[..., n, K, 2]`` (per-frame size) and root velocity ``[..., n - 1, 2]``
    (per body size) of pixel motion ``uv [..., n, K, 2]``."""
    lead, (n, K) = uv.shape[:-3], uv.shape[-3:-1]
    flat = uv.reshape(-1, K, 2)
    m = torch.isfinite(flat).all(-1)
    r = root_2d(torch.nan_to_num(flat), m, kset).reshape(*lead, n, 2)
    s = body_scale(torch.nan_to_num(flat), m, kset, window=1).reshape(*lead, n)
    local = (uv - r[..., None, :]) / s[..., None, None]
    vel = (r[..., 1:, :] - r[..., :-1, :]) / s[..., :-1, None]
    return local, vel


def match_start(lib: StartLibrary, feats: torch.Tensor, cam: FollowCamera, kset: KeypointSet,
                azimuths: int = AZIMUTHS) -> dict:  # fmt: skip
    """The library frame and camera azimuth whose motion best matches ``feats [V, n, D]``.

    Args:
        lib: the candidate states.
        feats: raw canonical features of the first generated frames (``n >= MATCH_FRAMES``).
        cam: the follow cameras (their azimuth is what is searched).
        kset: the keypoint set.

    Returns:
        ``{"index", "azimuth_deg", "cost"}``: the state's library index, view 0's azimuth, and
        the matching cost (mean squared canonical difference).
    """
    n = MATCH_FRAMES
    if feats.shape[1] < n:
        raise ValueError(f"match_start: need {n} generated frames, got {feats.shape[1]}")
    K = kset.num_keypoints
    g_local = feats[:, :n, : 2 * K].float().reshape(feats.shape[0], n, K, 2)
    g_local = g_local - g_local[..., list(kset.root), :].mean(-2, keepdim=True)
    g_vel = feats[:, : n - 1, 2 * K : 2 * K + 2].float()
    idx = torch.nonzero(lib.valid).squeeze(1)
    windows = lib.keypoints3d[idx[:, None] + torch.arange(n)]  # [S, n, K, 3]
    targets = windows[:, 0, list(kset.root)].mean(1)  # [S, 3]: the camera aims at frame 0's root
    best = (float("inf"), 0, 0.0)
    for j in range(azimuths):
        az = 360.0 * j / azimuths
        R, t, k = dataclasses.replace(cam, azimuth_deg=az).place(targets)  # [S, V, ...]
        uv, depth = project_points(R[:, :, None], t[:, :, None], k[:, :, None], windows[:, None])
        uv = torch.where((depth > 0)[..., None], uv, torch.full_like(uv, float("nan")))
        local, vel = _descriptor(uv, kset)  # [S, V, n, K, 2], [S, V, n - 1, 2]
        cost = ((local - g_local) ** 2).sum(-1).nan_to_num(1e3).mean((-1, -2, -3))
        cost = cost + ROOT_VEL_WEIGHT * ((vel - g_vel) ** 2).sum(-1).nan_to_num(1e3).mean((-1, -2))
        c, i = cost.min(0)
        if float(c) < best[0]:
            best = (float(c), int(idx[i]), az)
    return {"index": best[1], "azimuth_deg": best[2], "cost": best[0]}
