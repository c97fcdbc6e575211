"""RSMT (stylised motion transitions) as a high-level controller: a :class:`ChunkStream` of
canonical 2D features made from a 3D world motion.

The GPT and diffusion generators make canonical 2D motion directly; RSMT makes 3D frames of
the 15-body humanoid (``generators/rsmt``). :class:`RSMTChunks` keeps a 3D world motion and
hands the controller the same raw canonical features ``[V, n, D]`` as the other streams, so
the rest of control (``G^-1``, re-anchoring, the tracker) is unchanged:

- **Start.** A frame of the current style's example clip, drawn by the stream's RNG, placed at
  the world origin facing +x (the simulated character's default facing), with the example's
  frames before it as motion history and its phase from the example (``RSMT.phase_at``).
- **Transitions.** Repeatedly ``RSMT.stream`` generates :data:`TRANSITION_FRAMES` frames (1 s)
  from the last frame to a target: a frame of the current style's example clip, turned to
  face the current heading (the pelvis's yaw) and moved so that its pelvis lies ahead of the
  current pelvis along that heading by the example's own average pelvis speed x 1 s. The style
  input is a window of ``style_frames`` frames of the example (all of it when shorter). The
  next transition starts from the last generated frame, with the phase the phase model reads
  from the last ``window`` generated frames.
- **2D.** Each transition's frames (with the frame it starts from) become COCO-17 keypoints
  (``features.to_local`` -> the cmu layout on the humanoid's skeleton -> ``human_keypoints``),
  are projected by ``V`` cameras of the controller's follow-camera convention
  (:class:`~mimic2dm.control.reference.FollowCamera` defaults, view ``v`` at azimuth
  ``a + 90 v``), placed on the transition's first frame and still during it (the generated
  root motion is motion over the ground, as the ``chunk`` follow cameras read it), and
  converted by ``G`` (``to_canonical``). Row ``i`` holds frame ``i``'s pose and its motion to
  frame ``i + 1``, so a chunk holds the transition's start frame and its first 29 frames.
  ``a`` is the controller's default azimuth for the episode seed (the one
  ``Controller.run`` draws without ``--azimuth``), so the reference shows the motion as the
  controller's cameras see a character facing +x.
- **Styles.** Label ``i`` is the checkpoint's ``styles[i]``; ``--skill``/``--switch 5:zombie``
  name them as they name a GPT's labels. No label (``-1``) means ``walk`` when the model has
  it, else its first style. :meth:`RSMTChunks.set_label` makes the next transition use the new
  style's target and example.
- **Example clips.** Checkpoints store no clips. A style's example is the first file that the
  corpus config ``conf/rsmt_data/deepmimic_styles.yaml`` lists for it under the shared mocap
  folder; without that folder, the DeepMimic clips of ``tests/fixtures/deepmimic``
  (:data:`FALLBACK_CLIPS`: run, stealthy, walk, zombie) of a source checkout.
- **Untrained** (``--random-weights --random-model rsmt``, or ``--random-weights`` with an RSMT
  ``--generator``): ``random_rsmt`` with the fallback styles (or the checkpoint's).
"""

from __future__ import annotations

import glob
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from mimic2dm.control.generator import CONF_DIR, ChunkStream
from mimic2dm.control.reference import FollowCamera
from mimic2dm.generators.data import FeatureStats
from mimic2dm.generators.sample import LoadedGenerator
from mimic2dm.motion.canonical import body_scale, to_canonical
from mimic2dm.motion.keypoint_sets import COCO17

MODEL_TYPE = "rsmt"
"""``model_type`` of RSMT generators (the stream registry's key, ``--random-model rsmt``)."""
TRANSITION_FRAMES = 30
"""Frames per generated transition (1 s at RSMT's 30 fps)."""
CORPUS_CONFIG = CONF_DIR / "rsmt_data" / "deepmimic_styles.yaml"
FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "deepmimic"
FALLBACK_CLIPS = {
    "run": FIXTURES / "humanoid3d_run.txt",
    "stealthy": FIXTURES / "humanoid3d_stealthy_walk.txt",
    "walk": FIXTURES / "humanoid3d_walk.txt",
    "zombie": FIXTURES / "humanoid3d_zombie_walk.txt",
}
"""Style examples when the shared mocap folder is absent (DeepMimic clips, MIT licence)."""


@dataclass
class StyleExample:
    """A style's example clip: ``x [T, 180]`` world frames, its average pelvis ``speed`` (m/s)."""

    path: Path
    x: torch.Tensor
    speed: float


def pelvis_speed(x: torch.Tensor, fps: float = 30.0) -> float:
    """Mean horizontal pelvis speed (m/s) of frames ``x [T, 180]`` over windows of up to 1 s
    (the net displacement per window, so the gait's sway does not count)."""
    w = min(round(fps), x.shape[0] - 1)
    if w < 1:
        return 0.0
    p = x[:, 0:2]
    return float((p[w:] - p[:-w]).norm(dim=-1).mean() * fps / w)


def style_clip_paths(styles: list[str], config: Path = CORPUS_CONFIG) -> list[Path]:
    """One example clip per style: the first file the corpus config lists for it under its
    root (the shared mocap folder by default), else :data:`FALLBACK_CLIPS`.

    Raises:
        ValueError: a style with neither (naming the folder searched).
    """
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(OmegaConf.load(config), resolve=True) if config.is_file() else {}
    if cfg.get("root"):
        root = Path(cfg["root"])
    else:
        from mimic2dm.utils.paths import mocap_dir

        root = mocap_dir()
    out = []
    for s in styles:
        hits = [sorted(glob.glob(str(root / p))) for p in (cfg.get("styles") or {}).get(s, [])]
        found = next((Path(h[0]) for h in hits if h), None)
        if found is None and s in FALLBACK_CLIPS and FALLBACK_CLIPS[s].is_file():
            found = FALLBACK_CLIPS[s]
        if found is None:
            raise ValueError(f"RSMT style {s!r}: no example clip ({config.name} lists none under "
                             f"{root}, and there is no fallback clip for it)")  # fmt: skip
        out.append(found)
    return out


def load_style_example(path: Path) -> StyleExample:
    """The example clip at ``path`` (DeepMimic ``.txt`` or ``cmu_*.npz``) at 30 fps."""
    from mimic2dm.generators.rsmt.data import read_motion

    x = read_motion(Path(path))
    return StyleExample(Path(path), x, pelvis_speed(x))


def world_keypoints(frames: torch.Tensor) -> torch.Tensor:
    """COCO-17 keypoints ``[n, 17, 3]`` of RSMT frames ``[n, 180]`` (forward kinematics of their
    local rotations on the humanoid's skeleton, from the pelvis position)."""
    from mimic2dm.characters.mocap import human_keypoints
    from mimic2dm.generators.rsmt import features as F

    return human_keypoints(F.to_mocap(frames))


def project_features(kp: torch.Tensor, cams: tuple) -> torch.Tensor:
    """Raw canonical features ``[V, n - 1, D]`` of keypoints ``[n, K, 3]`` seen by cameras
    ``(R [V, 3, 3], t [V, 3], k [V, 4])`` (the last frame only gives the motion into it)."""
    from mimic2dm.geometry.camera import MIN_DEPTH, project_points

    R, t, k = cams
    out = []
    for v in range(R.shape[0]):
        uv, depth = project_points(R[v], t[v], k[v], kp)
        out.append(to_canonical(uv, COCO17, depth > MIN_DEPTH).features()[:-1])
    return torch.stack(out)


def default_azimuth(seed: int) -> float:
    """View 0's azimuth (deg) the controller draws for ``seed`` without ``--azimuth``."""
    return float(np.random.default_rng(seed).uniform(0, 360))


@dataclass
class RSMTGenerator(LoadedGenerator):
    """An RSMT posing as a generator (``model_type="rsmt"``; ``model`` is its sampler).

    Attributes:
        rsmt: the loaded :class:`~mimic2dm.generators.rsmt.inference.RSMT`.
        clips: example clip per style (``rsmt.styles`` order).
        views: ``V``, the cameras the 3D motion is projected by.
    """

    rsmt: object = None
    clips: list[Path] = field(default_factory=list)
    views: int = 1
    _examples: dict = field(default_factory=dict, repr=False)

    @property
    def num_views(self) -> int:
        return self.views

    def example(self, style: int) -> StyleExample:
        """The example clip of style ``style`` (read on first use)."""
        if style not in self._examples:
            self._examples[style] = load_style_example(self.clips[style])
        return self._examples[style]

    def default_style(self) -> int:
        """The style of label ``-1``: ``walk`` when the model has it, else its first."""
        return self.rsmt.styles.index("walk") if "walk" in self.rsmt.styles else 0


def rsmt_generator(rsmt, clips: list[Path] | None = None, views: int = 1) -> RSMTGenerator:
    """The generator of a loaded RSMT; ``clips``: example per style (default: :func:`style_clip_paths`)."""
    from mimic2dm.generators.rsmt import features as F

    clips = list(clips) if clips is not None else style_clip_paths(rsmt.styles)
    data = {"keypoint_set": COCO17.name, "fps": F.FPS, "label_names": list(rsmt.styles),
            "label_key": "style", "image_size": [1920, 1080], "style_clips": [str(p) for p in clips]}  # fmt: skip
    D = 2 * COCO17.num_keypoints + 3
    gen = RSMTGenerator(MODEL_TYPE, rsmt.sampler, FeatureStats(torch.zeros(D), torch.ones(D)), None,
                        data, rsmt.source, rsmt=rsmt, clips=clips, views=int(views))  # fmt: skip
    gen.stats.scale_px = _body_size_px(gen.example(gen.default_style()).x[:1])
    return gen


def _body_size_px(frame: torch.Tensor) -> float:
    """Body size (pixels at 1080p) of a frame ``[1, 180]`` in a default follow camera."""
    from mimic2dm.geometry.camera import project_points

    kp = world_keypoints(frame)[0]
    R, t, k = FollowCamera(1, 90.0).place(kp[list(COCO17.root)].mean(0))
    uv, _ = project_points(R[0], t[0], k[0], kp)
    return float(body_scale(uv[None], torch.ones(1, COCO17.num_keypoints, dtype=torch.bool), COCO17)[0])  # fmt: skip


def load_rsmt_generator(path: str | Path) -> RSMTGenerator:
    """The generator of an RSMT sampler checkpoint (``mimic2dm-train-rsmt part=sampler``)."""
    from mimic2dm.generators.rsmt.inference import load_rsmt

    return rsmt_generator(load_rsmt(path))


def random_rsmt_generator(seed: int = 0, styles: list[str] | None = None) -> RSMTGenerator:
    """An untrained RSMT (``random_rsmt``) of ``styles`` (default: :data:`FALLBACK_CLIPS`'s)."""
    from mimic2dm.generators.rsmt.inference import random_rsmt

    styles = sorted(FALLBACK_CLIPS) if styles is None else list(styles)
    rsmt = random_rsmt(seed, tuple(styles))
    rsmt.source = "random weights (rsmt)"
    return rsmt_generator(rsmt)


def reinitialised_rsmt(gen: RSMTGenerator, seed: int = 0) -> RSMTGenerator:
    """``gen``'s styles and example clips with an untrained RSMT: an untrained baseline."""
    from mimic2dm.generators.rsmt.inference import random_rsmt

    rsmt = random_rsmt(seed, tuple(gen.rsmt.styles))
    rsmt.source = f"random weights ({gen.source})"
    return rsmt_generator(rsmt, gen.clips, gen.views)


def is_rsmt_checkpoint(path: str | Path) -> bool:
    """Whether ``path`` (a ``.pt`` or a run directory) holds an RSMT sampler checkpoint."""
    from mimic2dm.generators.rsmt.inference import SAMPLER_KIND
    from mimic2dm.generators.runs import resolve_checkpoint
    from mimic2dm.utils.checkpoint import load_checkpoint

    try:
        d = load_checkpoint(resolve_checkpoint(path))
    except (FileNotFoundError, ValueError):
        return False
    return isinstance(d, dict) and d.get("kind") == SAMPLER_KIND


class RSMTChunks(ChunkStream):
    """RSMT transitions of :data:`TRANSITION_FRAMES` frames, as canonical 2D features (module doc)."""

    model_type = MODEL_TYPE

    def __init__(self, gen: RSMTGenerator, label, generator, temperature=1.0, top_k=None):
        from mimic2dm.generators.rsmt import features as F

        super().__init__(gen, label, generator, temperature, top_k)
        self.camera = FollowCamera(gen.num_views, default_azimuth(int(generator.initial_seed())))
        ex = self.example
        f0 = self._draw(ex.x.shape[0])
        yaw, shift = F.canonical_transform(ex.x[f0])
        window = gen.rsmt.phase.cfg.window
        # world frames [h, 180]: the example up to f0, f0 at the origin facing +x
        self.history = F.transform(ex.x[max(0, f0 + 1 - window) : f0 + 1], yaw, shift)
        self.phase = gen.rsmt.phase_at(ex.x, f0)

    @property
    def style(self) -> int:
        """The current style index (label ``-1``: the generator's default style)."""
        return self.gen.default_style() if self.label < 0 else self.label

    @property
    def example(self) -> StyleExample:
        """The current style's example clip."""
        return self.gen.example(self.style)

    def _draw(self, n: int) -> int:
        return int(torch.randint(n, (1,), generator=self.rng))

    def target(self, frame: torch.Tensor) -> torch.Tensor:
        """The target ``[180]`` of a transition from ``frame [180]`` (module doc)."""
        from mimic2dm.generators.rsmt import features as F

        ex = self.example
        x = ex.x[self._draw(ex.x.shape[0])][None]
        yaw, shift = F.canonical_transform(x[0])
        h = F.heading(frame)
        ahead = ex.speed * TRANSITION_FRAMES / F.FPS
        pos = frame[0:2] + ahead * torch.stack([torch.cos(h), torch.sin(h)])
        return F.transform(F.transform(x, yaw, shift), h, pos)[0]

    def style_window(self) -> torch.Tensor:
        """``[L, 180]``: ``style_frames`` frames of the current example (all when shorter)."""
        x = self.example.x
        L = min(self.gen.rsmt.sampler.cfg.style_frames, x.shape[0])
        s = self._draw(x.shape[0] - L + 1)
        return x[s : s + L]

    def next_chunk(self) -> torch.Tensor:
        rsmt = self.gen.rsmt
        start = self.history[-1]
        target, style = self.target(start), self.style_window()
        frames = rsmt.transition(start[None], self.phase[None], target[None], TRANSITION_FRAMES,
                                 style[None], self.rng)[0]  # fmt: skip
        window = rsmt.phase.cfg.window
        self.history = torch.cat([self.history, frames])[-window:]
        self.phase = rsmt.phase_at(self.history, self.history.shape[0] - 1)
        kp = world_keypoints(torch.cat([start[None], frames]))
        cams = self.camera.place(kp[0, list(COCO17.root)].mean(0))
        return project_features(kp, cams)
