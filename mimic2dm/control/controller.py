"""The hierarchical controller: generator -> ``G^-1`` -> streaming reference -> frozen
tracker -> engine, one control step at a time (paper 3.4, docs/design.md section 9).

Every ``chunk_frames`` control steps (and at a skill switch) a chunk starts: the follow
cameras are re-placed on the character's 3D root, the next generated frames are
integrated by ``G^-1`` from the character's current projected root and body size, and
they replace the reference from the current frame on. In between, the tracker policy
acts on the task's observation and the engine steps; the simulation never pauses.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from mimic2dm.control.generator import ChunkStream, open_stream
from mimic2dm.control.reference import (
    ControlReference,
    FollowCamera,
    anchor_chunk,
    blend_start,
    character_anchor,
    lateral_path,
    level_path,
    pose_chunk,
    start_offset,
)
from mimic2dm.control.start import MATCH_FRAMES, StartLibrary, match_start
from mimic2dm.generators.sample import LoadedGenerator
from mimic2dm.tasks.registry import build_engine
from mimic2dm.tasks.tracking2d import Tracking2DTask, streaming_config, streaming_task
from mimic2dm.utils.validate import check

STAGES = ("generator", "g_inverse", "observation", "policy", "physics")
"""Timed stages of one control step (``g_inverse`` includes re-anchoring and the push)."""

LEVEL_WINDOW = 30
"""Frames over which ``step`` cameras remove the generated root's vertical drift (:func:`level_path`)."""

FOLLOW_MODES = ("chunk", "step")
"""How the follow cameras move (:class:`ControlSettings` ``follow``)."""


@dataclass
class ControlSettings:
    """One controlled run.

    Attributes:
        seconds: simulated time; skill: first condition label (None: unconditional).
        switches: ``[(time_s, skill)]`` label changes (each starts a new chunk).
        chunk_frames: control steps between re-anchoring (8 rather than 32: real and
            generated walks stay up more often and stay nearer their reference with 8,
            docs/control.md).
        seed: generator sampling and camera azimuth (when ``camera.azimuth_deg`` is None).
        temperature, top_k: generator sampling.
        camera: the follow cameras (``azimuth_deg=None``: drawn from the seed).
        record_states: keep engine states for a video.
        start_states: start from the best-matching state of this library
            (:mod:`mimic2dm.control.start`; None: the default pose); the match also picks
            the azimuth, so ``azimuth_deg`` is then ignored.
        depth_rescale: convert the generated log-size velocity from the body size of the
            generator's data to the character's size in the follow camera
            (:func:`~mimic2dm.control.reference.anchor_chunk`'s ``data_scale``).
        start_blend: after a matched start, the reference starts at the character's own
            projection and eases into the generated frames over this many control steps
            (across chunks) (:func:`~mimic2dm.control.reference.blend_start`; 0: no blend).
        follow: how the follow cameras move. ``chunk``: re-placed on the character at each
            chunk start and still during the chunk (the generated global motion moves the
            reference in the image). ``step``: placed on the character at each chunk start,
            then moved every step along the root path that the generated image motion
            describes (:func:`~mimic2dm.control.reference.lateral_path`, vertical drift
            removed by :func:`~mimic2dm.control.reference.level_path`) and, along what no view
            sees, with the character; the reference is drawn at a fixed root and size, as the
            tracker's ``tracking`` training cameras show a clip. The generated size velocity
            is not used (docs/control.md).
    """

    seconds: float = 20.0
    skill: str | None = None
    switches: list[tuple[float, str]] = field(default_factory=list)
    chunk_frames: int = 8
    seed: int = 0
    temperature: float = 1.0
    top_k: int | None = None
    azimuth_deg: float | None = None
    elevation_deg: float = 10.0
    distance: float = 5.0
    focal: float = 1400.0
    record_states: bool = False
    start_states: StartLibrary | None = None
    depth_rescale: bool = False
    start_blend: int = 0
    follow: str = "chunk"

    def __post_init__(self) -> None:
        if self.follow not in FOLLOW_MODES:
            raise ValueError(f"--follow {self.follow!r}: expected one of {', '.join(FOLLOW_MODES)}")
        check("--seconds", self.seconds, gt=0)
        check("--start-blend", self.start_blend, ge=0, integer=True)
        check("--seed", self.seed, ge=0, integer=True)
        check("--chunk-frames", self.chunk_frames, ge=1, integer=True)
        check("--temperature", self.temperature, ge=0)
        if self.top_k is not None:
            check("--top-k", self.top_k, ge=1, integer=True)
        for t, _ in self.switches:
            check("--switch time", t, ge=0, lt=self.seconds)


def parse_switch(spec: str) -> tuple[float, str]:
    """``"10:run"`` -> ``(10.0, "run")``."""
    t, sep, skill = spec.partition(":")
    try:
        if not sep or not skill:
            raise ValueError
        return float(t), skill
    except ValueError:
        raise ValueError(f"--switch {spec!r}: expected TIME_S:SKILL, e.g. 10:run") from None


@dataclass
class Record:
    """What one run recorded, per control step ``T`` (views ``V``, keypoints ``K``).

    Attributes:
        uv, ref: ``[T, V, K, 2]`` character projection and reference (pixels, the step's cameras).
        mask: ``[T, V, K]`` reference mask (observed reference keypoints).
        front: ``[T, V, K]`` character keypoints in front of the camera.
        kp3d: ``[T, K, 3]`` simulated keypoints (m); root_height: ``[T]``.
        cam_R, cam_t, cam_k: ``[T, V, ...]`` the cameras of each step.
        labels: ``[T]`` condition label id of each step.
        chunks: ``[(step, root [V, 2], scale [V], ref_root [V, 2])]`` at each chunk start.
        generated: ``[V, n, D]`` raw canonical features handed to the reference.
        gen_frames, gen_seconds: frames the generator made and the time it took.
        stage_seconds: time per stage (:data:`STAGES`); states: engine states (video).
        azimuth_deg: view 0's azimuth; start: the matched start state (``match_start``) or None.
    """

    uv: list = field(default_factory=list)
    ref: list = field(default_factory=list)
    mask: list = field(default_factory=list)
    front: list = field(default_factory=list)
    kp3d: list = field(default_factory=list)
    root_height: list = field(default_factory=list)
    cam_R: list = field(default_factory=list)
    cam_t: list = field(default_factory=list)
    cam_k: list = field(default_factory=list)
    labels: list = field(default_factory=list)
    chunks: list = field(default_factory=list)
    generated: list = field(default_factory=list)
    gen_frames: int = 0
    gen_seconds: float = 0.0
    stage_seconds: dict = field(default_factory=lambda: dict.fromkeys(STAGES, 0.0))
    states: list = field(default_factory=list)
    azimuth_deg: float = 0.0
    start: dict | None = None

    def stacked(self, name: str) -> torch.Tensor:
        return torch.stack(getattr(self, name))


class Controller:
    """A frozen tracker driven by a generator, for one character (one env).

    Args:
        policy: ``.act(obs)`` and ``.env_spec`` (the tracker's ``TaskSpec``).
        gen: the generator (its keypoint set and frame rate must match the tracker's).
        engine_threads: MuJoCo threads (1: one core).
    """

    def __init__(self, policy, gen: LoadedGenerator, engine_threads: int | None = 1):
        spec = policy.env_spec
        if spec.task != "tracking2d":
            raise ValueError(
                f"--tracker: a tracking2d checkpoint is needed, this one trained {spec.task!r}"
            )
        if engine_threads is not None:
            spec = spec.with_engine(num_threads=engine_threads)
        self.policy, self.gen, self.spec = policy, gen, spec
        self.V = gen.num_views
        self.cfg = streaming_config(spec, self.V)
        self.engine = build_engine(spec, 1)
        kset = self.engine.character.keypoint_set
        if kset != gen.data["keypoint_set"]:
            self.engine.close()
            raise ValueError(f"--generator {gen.source}: keypoint set {gen.data['keypoint_set']!r}, but the "
                             f"tracker's character {spec.character!r} uses {kset!r}")  # fmt: skip
        if abs(float(gen.data["fps"]) - spec.control_hz) > 1e-6:
            self.engine.close()
            raise ValueError(f"--generator {gen.source}: {gen.data['fps']} fps, the tracker controls at "
                             f"{spec.control_hz} Hz (they must match)")  # fmt: skip
        self.hz = float(spec.control_hz)
        self._data_scale: float | None = None  # set per run (ControlSettings.depth_rescale)
        self._start_offset: torch.Tensor | None = None  # set per run (ControlSettings.start_blend)
        self._follow = "chunk"  # set per run (ControlSettings.follow)
        self._plan: tuple | None = None  # step cameras: (first step, targets [n, 3], null [3, m])
        self._vz_history = torch.zeros(0)  # step cameras: vertical root steps played (level_path)

    def close(self) -> None:
        self.engine.close()

    def _task(self, cam: FollowCamera) -> tuple[Tracking2DTask, ControlReference]:
        R, t, k = cam.place(torch.tensor([0.0, 0.0, 1.0]))
        src = ControlReference(self.engine.character.keypoint_set, 1, self.V, (R, t, k), cam.height,
                               self.hz, capacity=256, device=self.engine.device)  # fmt: skip
        src.push(torch.zeros(self.V, src.kset.num_keypoints, 2))  # a frame to start the episode at
        return streaming_task(self.spec, self.engine, src), src

    def run(self, s: ControlSettings) -> Record:
        """Control the character for ``s.seconds``; returns what it recorded."""
        az = (
            s.azimuth_deg
            if s.azimuth_deg is not None
            else float(np.random.default_rng(s.seed).uniform(0, 360))
        )
        cam = FollowCamera(self.V, az, s.elevation_deg, s.distance, s.focal,
                           self.cfg.camera.width, self.cfg.camera.height)  # fmt: skip
        task, src = self._task(cam)
        # the generator data's body size, in this camera's pixels (FeatureStats: at 1080p)
        self._data_scale = (float(self.gen.stats.scale_px) * self.cfg.camera.height / 1080.0
                            if s.depth_rescale else None)  # fmt: skip
        self._follow = s.follow
        self._vz_history = torch.zeros(0)
        label = self.gen.label_id(s.skill)
        stream = open_stream(self.gen, label, s.seed, s.temperature, s.top_k)
        switches = sorted((round(t * self.hz), self.gen.label_id(k)) for t, k in s.switches)
        T = max(1, round(s.seconds * self.hz))
        rec, buf, next_chunk = Record(), None, 0
        if s.start_states is not None:
            buf, cam = self._start(task, s.start_states, stream, cam, rec)
        blend = s.start_blend if s.start_states is not None else 0
        self._start_offset = None  # set by the first chunk when blending
        rec.azimuth_deg = cam.azimuth_deg
        for step in range(T):
            while switches and switches[0][0] <= step:
                label = switches.pop(0)[1]
                stream.set_label(label)
                buf, next_chunk = None, step  # old-label frames are dropped; a chunk starts now
            if step == next_chunk:
                buf = self._chunk(task, src, stream, cam, buf, step, s.chunk_frames, rec, blend)
                next_chunk = step + s.chunk_frames
            if s.follow == "step":
                self._follow_step(task, src, cam, step, rec)
            self._record(task, src, rec, label, s.record_states)
            t0 = time.perf_counter()
            obs = task.observe()
            t1 = time.perf_counter()
            act = self.policy.act(obs)
            t2 = time.perf_counter()
            task.advance(act)
            t3 = time.perf_counter()
            for name, dt in (("observation", t1 - t0), ("policy", t2 - t1), ("physics", t3 - t2)):
                rec.stage_seconds[name] += dt
        return rec

    def _start(self, task, lib: StartLibrary, stream: ChunkStream, cam: FollowCamera, rec: Record):
        """Generate the first frames, start the character from the library state that matches
        them best, with the follow cameras at the matched azimuth."""
        t0 = time.perf_counter()
        buf = stream.next_chunk()
        while buf.shape[1] < MATCH_FRAMES:
            buf = torch.cat([buf, stream.next_chunk()], dim=1)
        rec.gen_frames += buf.shape[1]
        t1 = time.perf_counter()
        rec.gen_seconds += t1 - t0
        rec.stage_seconds["generator"] += t1 - t0
        kset = task.source.kset
        m = match_start(lib, buf, cam, kset)
        state = lib.states.index(slice(m["index"], m["index"] + 1)).to(self.engine.device)
        task.start_episodes(torch.zeros(1, dtype=torch.long, device=task.device),
                            torch.zeros(1, dtype=torch.long, device=task.device), state)  # fmt: skip
        rec.start = m
        rec.stage_seconds["g_inverse"] += time.perf_counter() - t1
        return buf, dataclasses.replace(cam, azimuth_deg=m["azimuth_deg"])

    def _chunk(self, task, src: ControlReference, stream: ChunkStream, cam: FollowCamera, buf, step: int,
               L: int, rec: Record, blend: int = 0) -> torch.Tensor:  # fmt: skip
        """Start a chunk at ``step``: cameras on the character, next frames anchored to its
        projection (and, with ``blend``, eased in from it: :func:`blend_start`)."""
        need = L + self.cfg.num_future
        t0 = time.perf_counter()
        while buf is None or buf.shape[1] < need:
            new = stream.next_chunk()
            rec.gen_frames += new.shape[1]
            buf = new if buf is None else torch.cat([buf, new], dim=1)
        t1 = time.perf_counter()
        kp = task.engine.get_keypoints()[0]
        root3d = kp[list(src.kset.root)].mean(0).cpu()
        R, t, k = cam.place(root3d)
        src.set_camera(R, t, k)
        task.refresh()  # the task caches projections per physics state: the cameras moved
        uv, valid = task.project_character()
        root, scale = character_anchor(uv[0], valid[0], src.kset)
        feats = buf[:, :need]
        if self._follow == "step":
            steps, null = lateral_path(feats, R, scale, src.kset, cam.distance, cam.focal)
            off = level_path(steps, self._vz_history, LEVEL_WINDOW)
            targets = root3d + off
            self._vz_history = torch.cat([self._vz_history, steps[:L, 2]])[-LEVEL_WINDOW:]
            self._plan = (step, targets, null)
            cams = cam.place(targets)  # [need, V, ...]; _follow_step moves them along `null`
            pix = pose_chunk(feats, root, scale, src.kset)
        else:
            cams = None
            pix = anchor_chunk(feats, root, scale, src.kset, self._data_scale)
        if blend and step < blend:
            if self._start_offset is None:
                self._start_offset = start_offset(pix[:, 0], uv[0].cpu(), valid[0].cpu())
            pix = blend_start(pix, self._start_offset, step, blend)
        src.rewind(step)
        for i in range(need):
            src.push(pix[:, i], camera=None if cams is None else tuple(c[i] for c in cams))
        t2 = time.perf_counter()
        _, _, ref_root = src.keypoints(torch.tensor([step], device=src.device))
        rec.chunks.append((step, root, scale, ref_root[0].cpu()))
        rec.generated.append(buf[:, :L])
        rec.gen_seconds += t1 - t0
        rec.stage_seconds["generator"] += t1 - t0
        rec.stage_seconds["g_inverse"] += t2 - t1
        return buf[:, L:]

    def _follow_step(
        self, task, src: ControlReference, cam: FollowCamera, step: int, rec: Record
    ) -> None:
        """``step`` cameras: this step's planned root, moved to the character along the
        directions no view sees (:func:`lateral_path`'s ``null``), so the cameras keep their
        distance to the character there."""
        t0 = time.perf_counter()
        first, targets, null = self._plan
        target = targets[step - first]
        if null.shape[1]:
            root = task.engine.get_keypoints()[0][list(src.kset.root)].mean(0).cpu()
            target = target + null @ (null.T @ (root - target))
        src.set_frame_camera(step, *cam.place(target))
        task.refresh()
        rec.stage_seconds["g_inverse"] += time.perf_counter() - t0

    def _record(self, task, src: ControlReference, rec: Record, label: int, states: bool) -> None:
        uv, valid = task.project_character()
        ref, mask = task.reference(task.frame)
        R, t, k = src.cameras(task.frame)
        kp = task.engine.get_keypoints()[0]
        rec.uv.append(uv[0].cpu())
        rec.ref.append(ref[0].cpu())
        rec.mask.append(mask[0].cpu())
        rec.front.append(valid[0].cpu())
        rec.kp3d.append(kp.cpu())
        rec.root_height.append(float(task.engine.get_state().root_pos[0, 2]))
        rec.cam_R.append(R[0].cpu())
        rec.cam_t.append(t[0].cpu())
        rec.cam_k.append(k[0].cpu())
        rec.labels.append(int(label))
        if states:
            rec.states.append(task.engine.get_state().index(slice(0, 1)))
