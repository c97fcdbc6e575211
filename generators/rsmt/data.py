"""RSMT's motion corpus: 3D humanoid clips labelled by style, as 30 fps frames (features.py).

The corpus config (``conf/rsmt_data/*.yaml``) lists, per style, motion files relative to
``root`` (default: the shared mocap folder, :func:`mimic2dm.utils.paths.mocap_dir`), glob
patterns allowed: DeepMimic ``.txt`` motions (read by ``data import-deepmimic``'s reader,
resampled to 30 fps) and ``cmu_*.npz`` clips (every 2nd frame of 60 fps). ``held_out`` files
are kept out of training and form the evaluation set. With ``mirror: true`` every training
clip is also used mirrored (features.mirror); the held-out clips are used as they are.

Windows are drawn from a ``torch.Generator`` (saved with every checkpoint: exact resume) and
put in the canonical frame of their first frame.
"""

from __future__ import annotations

import glob
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from mimic2dm.generators.rsmt import features as F

from mimic2dm.utils.validate import ConfigError


@dataclass
class CorpusConfig:
    """``rsmt_data:`` the style-labelled corpus.

    Attributes:
        name: a label for reports.
        root: folder the file patterns are relative to (null: the shared mocap folder).
        styles: style name -> file patterns.
        held_out: file patterns kept out of training (the evaluation clips).
        mirror: add the mirrored training clips.
        character_file: DeepMimic character file of the ``.txt`` clips (null: the one beside them).
    """

    name: str = "corpus"
    root: str | None = None
    styles: dict[str, list[str]] = field(default_factory=dict)
    held_out: list[str] = field(default_factory=list)
    mirror: bool = True
    character_file: str | None = None

    def __post_init__(self) -> None:
        if not self.styles:
            raise ConfigError("rsmt_data.styles", self.styles, "a mapping style -> [file patterns]")


@dataclass
class Clip:
    """One clip of the corpus.

    Attributes:
        name: file name (``~mirror`` appended for a mirrored copy); style: style index.
        x: frames ``[T, 180]`` in world coordinates (z-up).
        phase: per-frame phase features once computed (``phase.PhaseFeatures`` fields).
    """

    name: str
    style: int
    x: torch.Tensor
    phase: dict[str, torch.Tensor] | None = None

    @property
    def frames(self) -> int:
        return int(self.x.shape[0])


@dataclass
class Corpus:
    """Clips with their style names (index = ``Clip.style``)."""

    clips: list[Clip]
    styles: list[str]

    def of_style(self, style: int, min_frames: int = 0) -> list[int]:
        """Indices of the clips of ``style`` with at least ``min_frames`` frames."""
        return [i for i, c in enumerate(self.clips) if c.style == style and c.frames >= min_frames]

    @property
    def frames(self) -> int:
        return sum(c.frames for c in self.clips)

    def summary(self) -> dict:
        """Clips and seconds per style."""
        out = {}
        for s, name in enumerate(self.styles):
            cl = [c for c in self.clips if c.style == s]
            out[name] = {"clips": len(cl), "seconds": round(sum(c.frames for c in cl) / F.FPS, 1)}
        return out


def _root(cfg: CorpusConfig) -> Path:
    if cfg.root:
        return Path(cfg.root)
    from mimic2dm.utils.paths import mocap_dir

    return mocap_dir()


def _expand(root: Path, pattern: str, key: str) -> list[Path]:
    hits = sorted(Path(p) for p in glob.glob(str(root / pattern)))
    if not hits:
        raise ConfigError(key, pattern, f"a file or pattern matching files under {root}")
    return hits


def read_motion(path: Path, character_file: str | None = None) -> torch.Tensor:
    """Frames ``[T, 180]`` at 30 fps of a DeepMimic humanoid3d ``.txt`` or a ``cmu_*.npz`` clip.

    Raises:
        MotionFormatError / ValueError: naming the file and the field.
    """
    from mimic2dm.characters.mocap import HumanMocap, human_fk, load_cmu_clip

    if path.suffix == ".npz":
        clip = load_cmu_clip(path)
        step = clip.fps / F.FPS
        if abs(step - round(step)) > 1e-6 or round(step) < 1:
            raise ValueError(f"{path}: field 'fps' is {clip.fps:g}, expected a multiple of {F.FPS:g}")  # fmt: skip
        k = int(round(step))
        clip = HumanMocap(F.FPS, clip.root_translation[::k], clip.local_rotation[::k], clip.offsets,
                          clip.parents, clip.names, str(path))  # fmt: skip
    else:
        from mimic2dm.characters.clips import load_deepmimic_clip
        from mimic2dm.motion.format import MotionFormatError

        try:
            clip = load_deepmimic_clip(path, character_file, F.FPS)
        except MotionFormatError as e:
            if e.field != "character file":
                raise
            raise MotionFormatError(path, "character file", "is not given and none fits beside the clip", "rsmt_data.character_file") from None  # fmt: skip
        if not isinstance(clip, HumanMocap):
            raise MotionFormatError(path, "Frames", "are a dog3d motion", "a humanoid3d motion")
    pos, quat = human_fk(clip)
    return F.clip_features(pos, quat, F.FPS)


def load_corpus(cfg: CorpusConfig, min_frames: int = 2) -> tuple[Corpus, Corpus]:
    """``(train, held_out)`` corpora of ``cfg``; held-out clips keep their style labels.

    Raises:
        ConfigError: a pattern matches nothing, a file is in two styles, or a style has no
            training clip left.
    """
    root = _root(cfg)
    held = {p.resolve() for i, pat in enumerate(cfg.held_out) for p in _expand(root, pat, f"rsmt_data.held_out[{i}]")}  # fmt: skip
    styles = sorted(cfg.styles)
    seen: dict[Path, str] = {}
    train, test = [], []
    for s, name in enumerate(styles):
        for i, pat in enumerate(cfg.styles[name]):
            for p in _expand(root, pat, f"rsmt_data.styles.{name}[{i}]"):
                r = p.resolve()
                if r in seen and seen[r] != name:
                    raise ConfigError(f"rsmt_data.styles.{name}", str(p), f"a file in one style only (also in {seen[r]})")  # fmt: skip
                if r in seen:
                    continue
                seen[r] = name
                x = read_motion(p, cfg.character_file)
                if len(x) < min_frames:
                    continue
                if r in held:
                    test.append(Clip(p.name, s, x))
                    continue
                train.append(Clip(p.name, s, x))
                if cfg.mirror:
                    train.append(Clip(p.name + "~mirror", s, F.mirror(x)))
    missing = sorted(held - set(seen))
    if missing:
        raise ConfigError("rsmt_data.held_out", str(missing[0]), "a file listed under one of the styles")  # fmt: skip
    for s, name in enumerate(styles):
        if not any(c.style == s for c in train):
            raise ConfigError(f"rsmt_data.styles.{name}", cfg.styles[name], "at least one training clip")  # fmt: skip
    return Corpus(train, styles), Corpus(test, styles)


@dataclass
class Windows:
    """A batch of canonical windows.

    Attributes:
        x: ``[B, L, 180]`` in the canonical frame of frame 0.
        style: ``[B]`` style indices; clip, start: where each window comes from.
        phase: per-frame phase features ``[B, L, ...]`` when the corpus has them.
    """

    x: torch.Tensor
    style: torch.Tensor
    clip: torch.Tensor
    start: torch.Tensor
    phase: dict[str, torch.Tensor] | None = None


def clip_weights(corpus: Corpus, length: int) -> np.ndarray:
    """Sampling weight of each clip: its number of windows of ``length`` frames."""
    return np.array([max(c.frames - length + 1, 0) for c in corpus.clips], dtype=np.float64)


def window_at(
    corpus: Corpus, clip: int, start: int, length: int
) -> tuple[torch.Tensor, dict | None]:
    """Canonical window ``[length, 180]`` (and its phase slices) of one clip."""
    c = corpus.clips[clip]
    x = F.canonicalise(c.x[start : start + length])
    ph = None if c.phase is None else {k: v[start : start + length] for k, v in c.phase.items()}
    return x, ph


def sample_windows(corpus: Corpus, n: int, length: int, gen: torch.Generator,
                   styles: torch.Tensor | None = None) -> Windows:  # fmt: skip
    """``n`` windows of ``length`` frames, clips weighted by their window counts; with ``styles
    [n]`` each window comes from a clip of that style (clips shorter than ``length`` skipped).

    Raises:
        ValueError: no clip has ``length`` frames (of a requested style).
    """
    w = clip_weights(corpus, length)
    clips = torch.empty(n, dtype=torch.long)
    if styles is None:
        if w.sum() == 0:
            raise ValueError(f"no clip of the corpus has {length} frames")
        clips = torch.multinomial(torch.as_tensor(w), n, replacement=True, generator=gen)
    else:
        for s in styles.unique().tolist():
            idx = (styles == s).nonzero().flatten()
            ws = torch.as_tensor(np.where(np.array([c.style == s for c in corpus.clips]), w, 0.0))
            if ws.sum() == 0:
                raise ValueError(f"no clip of style {corpus.styles[s]!r} has {length} frames")
            clips[idx] = torch.multinomial(ws, len(idx), replacement=True, generator=gen)
    xs, phs, starts = [], [], []
    for c in clips.tolist():
        hi = corpus.clips[c].frames - length + 1
        s = int(torch.randint(hi, (1,), generator=gen))
        x, ph = window_at(corpus, c, s, length)
        xs.append(x), phs.append(ph), starts.append(s)
    phase = None if phs[0] is None else {k: torch.stack([p[k] for p in phs]) for k in phs[0]}
    style = torch.tensor([corpus.clips[c].style for c in clips.tolist()])
    return Windows(torch.stack(xs), style, clips, torch.tensor(starts), phase)


@dataclass
class Stats:
    """Per-channel normalisation: frames, frame changes and hip features (mean, std)."""

    mean: torch.Tensor
    std: torch.Tensor
    dmean: torch.Tensor
    dstd: torch.Tensor
    hmean: torch.Tensor
    hstd: torch.Tensor

    def to_dict(self) -> dict:
        return {k: v.tolist() for k, v in self.__dict__.items()}

    @classmethod
    def from_dict(cls, d: dict) -> Stats:
        return cls(**{k: torch.tensor(v, dtype=torch.float32) for k, v in d.items()})


def compute_stats(corpus: Corpus, length: int = 60, n: int = 2000, seed: int = 0) -> Stats:
    """Normalisation from ``n`` canonical windows (floors the std at 1e-3 for constant channels)."""
    gen = torch.Generator().manual_seed(seed)
    length = min(length, max(c.frames for c in corpus.clips))
    x = sample_windows(corpus, n, length, gen).x
    d = x[:, 1:] - x[:, :-1]
    h = F.hip(x)

    def ms(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        v = v.reshape(-1, v.shape[-1])
        return v.mean(0), v.std(0).clamp_min(1e-3)

    return Stats(*ms(x), *ms(d), *ms(h))
