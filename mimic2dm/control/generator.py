"""Generators as endless streams of canonical 2D motion for the controller.

A :class:`ChunkStream` hands out raw canonical features ``[V, n, D]`` (local pose, root
velocity, log-scale velocity; ``D = 2K + 3``) chunk after chunk, with a condition label
that may change between chunks. One stream class per registered generator type
(``generators/model_types.py``), looked up by the checkpoint's ``model_type``, so no
command needs a ``--generator-type``:

- ``gpt``: :class:`~mimic2dm.generators.sample.MotionStream` (tokens from a sliding
  context with a key/value cache, decoded 8 tokens = 32 frames at a time);
- ``diffusion``: one DDPM window at a time, each new window holding the last ``overlap``
  frames of the previous one (replacement inpainting, as ``sample_long``);
- ``replay``: no model, the canonical motion of a real 2D clip played back in a loop
  (:func:`replay_generator`, ``mimic2dm control --reference CLIP``): the same loop with real
  motion in place of generated motion, the reference row of Table 3;
- ``rsmt``: an RSMT sampler checkpoint (``kind`` ``mimic2dm.rsmt_sampler``): 3D stylised
  transitions projected into the follow cameras' view, the label being the style
  (:mod:`mimic2dm.control.rsmt_stream`).
"""

from __future__ import annotations

import abc
from pathlib import Path
from typing import ClassVar

import numpy as np
import torch
from omegaconf import OmegaConf

from mimic2dm.generators.data import FeatureStats
from mimic2dm.generators.model_types import generator_type
from mimic2dm.generators.sample import LoadedGenerator, MotionStream, load_generator
from mimic2dm.motion.canonical import body_scale
from mimic2dm.utils.registry import Registry

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"
DEFAULT_LABELS = {"coco17": ["hop", "run", "walk"], "dog17": ["pace", "trot"]}
"""Labels of untrained generators (``--random-weights``): the sorted skills, as the training
data names them (``gen_data=cmu_views``: CMU walk/run/hop; ``gen_data=dog_views``: the dog's
looped trot and pace)."""


class ChunkStream(abc.ABC):
    """Raw canonical features of ``V`` views, chunk by chunk.

    Args:
        gen: the loaded generator.
        label: condition label id (``-1``: unconditional).
        generator: torch RNG (same seed, same motion).
        temperature, top_k: sampling (GPT).
    """

    model_type: ClassVar[str]

    def __init__(self, gen: LoadedGenerator, label: int, generator: torch.Generator,
                 temperature: float = 1.0, top_k: int | None = None):  # fmt: skip
        self.gen, self.label, self.rng = gen, int(label), generator
        self.temperature, self.top_k = temperature, top_k

    @property
    def num_views(self) -> int:
        return self.gen.num_views

    @abc.abstractmethod
    def next_chunk(self) -> torch.Tensor:
        """The next frames ``[V, n, D]`` (raw canonical features, ``n >= 1``)."""

    def set_label(self, label: int) -> None:
        """Condition the frames generated from now on on ``label``."""
        self.label = int(label)


class GPTChunks(ChunkStream):
    """GPT tokens (cached sliding context) decoded 32 frames at a time."""

    model_type = "gpt"

    def __init__(self, gen, label, generator, temperature=1.0, top_k=None):
        super().__init__(gen, label, generator, temperature, top_k)
        self.stream = MotionStream(gen.model, gen.tokenizer, gen.stats, self.label, temperature, top_k, generator)  # fmt: skip

    def next_chunk(self) -> torch.Tensor:
        return self.stream.next_chunk()

    def set_label(self, label: int) -> None:
        super().set_label(label)
        self.stream.tokens.set_condition(torch.tensor([self.label]))


class DiffusionChunks(ChunkStream):
    """DDPM windows; each continues the last ``overlap`` frames of the previous one."""

    model_type = "diffusion"

    def __init__(self, gen, label, generator, temperature=1.0, top_k=None):
        super().__init__(gen, label, generator, temperature, top_k)
        self.last: torch.Tensor | None = None  # normalised frames of the previous window

    def next_chunk(self) -> torch.Tensor:
        m = self.gen.model
        k = m.config.overlap
        known = self.last[:, self.last.shape[1] - k :] if (self.last is not None and k) else None
        x = m.sample(torch.tensor([self.label]), self.rng, known)
        new = x if self.last is None else x[:, k:]
        self.last = x
        return self.gen.stats.denormalize(new)


class ReplayGenerator(LoadedGenerator):
    """A real clip's canonical motion posing as a generator (``model_type="replay"``).

    ``data["features"]`` holds the raw canonical features ``[V, T, D]`` of the clip's views.
    """

    @property
    def num_views(self) -> int:
        return int(self.data["features"].shape[0])


class ReplayChunks(ChunkStream):
    """The clip's frames, 32 at a time, from its first frame, starting over at its end.

    The condition label is ignored (a clip has the one skill it has)."""

    model_type = "replay"
    chunk = 32

    def __init__(self, gen, label, generator, temperature=1.0, top_k=None):
        super().__init__(gen, label, generator, temperature, top_k)
        self.pos = 0

    def next_chunk(self) -> torch.Tensor:
        f = self.gen.data["features"]
        idx = (self.pos + torch.arange(self.chunk)) % f.shape[1]
        self.pos += self.chunk
        return f[:, idx]


def replay_generator(path: str | Path, views: int = 1) -> ReplayGenerator:
    """The canonical motion of views ``0..views-1`` of the 2D clip at ``path`` (``G`` per view).

    Its fps must be the tracker's control rate (checked by the controller); keypoints the
    clip misses are filled as the generators' training data fills them.
    """
    from mimic2dm.generators.data import canonical_view
    from mimic2dm.motion.format import load_motion2d
    from mimic2dm.motion.keypoint_sets import load_keypoint_set

    m = load_motion2d(path)
    if not 1 <= views <= m.num_views:
        raise ValueError(f"--reference {path}: {views} view(s) asked, the clip has {m.num_views}")
    if m.num_frames < 3:
        raise ValueError(f"--reference {path}: {m.num_frames} frames, expected >= 3")
    kset = load_keypoint_set(m.keypoint_set)
    feats = torch.stack(
        [canonical_view(m.keypoints[v], m.confidence[v] > 0, kset)[0] for v in range(views)]
    )
    skill = m.labels.get("skill")
    data = {"keypoint_set": m.keypoint_set, "fps": float(m.fps), "features": feats,
            "label_names": [skill] if skill else [], "label_key": "skill"}  # fmt: skip
    D = feats.shape[-1]
    # the clip's own median body size at 1080p (the generators' FeatureStats.scale_px)
    size = [float(body_scale(torch.as_tensor(m.keypoints[v]).float(), torch.as_tensor(m.confidence[v] > 0),
                             kset).median()) for v in range(views)]  # fmt: skip
    stats = FeatureStats(
        torch.zeros(D), torch.ones(D), scale_px=float(np.median(size)) * 1080.0 / m.image_size[1]
    )
    return ReplayGenerator("replay", torch.nn.Identity(), stats, None, data, str(path))


STREAMS: Registry[type[ChunkStream]] = Registry("generator stream")
STREAMS.register("gpt", lambda: GPTChunks)
STREAMS.register("diffusion", lambda: DiffusionChunks)
STREAMS.register("replay", lambda: ReplayChunks)
STREAMS.register("rsmt", lambda: _rsmt_stream().RSMTChunks)


def _rsmt_stream():
    from mimic2dm.control import rsmt_stream

    return rsmt_stream


def open_stream(gen: LoadedGenerator, label: int, seed: int, temperature: float = 1.0,
                top_k: int | None = None) -> ChunkStream:  # fmt: skip
    """The stream of ``gen``'s registered type (``gen.model_type``)."""
    if gen.model_type not in STREAMS:
        raise ValueError(f"{gen.source}: generator type {gen.model_type!r} cannot stream; "
                         f"streamable types: {', '.join(STREAMS.names())}")  # fmt: skip
    g = torch.Generator().manual_seed(int(seed))
    return STREAMS.load(gen.model_type)(gen, label, g, temperature, top_k)


# ----------------------------------------------------------------------------- untrained
def _model_settings(model: str) -> tuple[str, dict]:
    path = CONF_DIR / "model" / f"{model}.yaml"
    if not path.is_file():
        names = sorted([p.stem for p in (CONF_DIR / "model").glob("*.yaml")] + ["rsmt"])
        raise ValueError(f"--random-model {model!r}: expected one of {', '.join(names)}")
    kw = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    kw.pop("name", None)
    return str(kw.pop("type")), kw


def random_generator(model: str, keypoint_set: str, mean_pose: np.ndarray, fps: float = 30.0,
                     labels: list[str] | None = None, seed: int = 0) -> LoadedGenerator:  # fmt: skip
    """An untrained generator of ``conf/model/<model>.yaml`` (and the default tokenizer).

    Its normalisation centres the local pose on ``mean_pose [K, 2]`` (canonical units,
    e.g. the character's default pose seen from the side) with small spreads, so that
    untrained output stays a plausible body for a smoke run. ``model="rsmt"``: an untrained
    RSMT sampler (the humanoid's ``coco17`` only; ``labels``: its styles).
    """
    from mimic2dm.generators.vqvae import VQVAE, VQVAEConfig

    if model == "rsmt":
        if keypoint_set != "coco17":
            raise ValueError(f"--random-model rsmt: RSMT drives the humanoid (coco17), not {keypoint_set!r}")  # fmt: skip
        return _rsmt_stream().random_rsmt_generator(seed, labels)

    mtype, settings = _model_settings(model)
    labels = list(labels if labels is not None else DEFAULT_LABELS.get(keypoint_set, []))
    K = int(mean_pose.shape[0])
    D = 2 * K + 3
    torch.manual_seed(seed)
    gtype = generator_type(mtype)
    tok = None
    if gtype.needs_tokenizer:
        tok = VQVAE(VQVAEConfig(in_dim=D, num_keypoints=K)).eval()
        tok.quantizer.codebook.normal_()
        cfg = gtype.config(settings, vocab_size=tok.config.codebook_size, num_classes=len(labels))
    else:
        cfg = gtype.config(settings, in_dim=D, num_classes=len(labels))
    net = gtype.model_class()(cfg).eval()
    mean = torch.zeros(D)
    mean[: 2 * K] = torch.as_tensor(mean_pose, dtype=torch.float32).reshape(-1)
    std = torch.cat([torch.full((2 * K,), 0.05), torch.tensor([0.02, 0.02, 0.002])])
    data = {
        "keypoint_set": keypoint_set,
        "fps": float(fps),
        "label_names": labels,
        "label_key": "skill",
    }
    return LoadedGenerator(
        mtype, net, FeatureStats(mean, std), tok, data, f"random weights ({model})"
    )


def reinitialised(gen: LoadedGenerator, seed: int = 0) -> LoadedGenerator:
    """``gen``'s architecture (and statistics) with fresh weights: an untrained baseline."""
    if gen.model_type == "rsmt":
        return _rsmt_stream().reinitialised_rsmt(gen, seed)
    torch.manual_seed(seed)
    net = generator_type(gen.model_type).build(dict(vars(gen.model.config))).eval()
    tok = None
    if gen.tokenizer is not None:
        tok = type(gen.tokenizer)(gen.tokenizer.config).eval()
        tok.quantizer.codebook.normal_()
    return LoadedGenerator(
        gen.model_type, net, gen.stats, tok, dict(gen.data), f"random weights ({gen.source})"
    )


def load_any_generator(path: str | Path) -> LoadedGenerator:
    """:func:`~mimic2dm.generators.sample.load_generator` (a ``.pt`` or a run directory), or
    an RSMT sampler's generator when the checkpoint's ``kind`` is ``mimic2dm.rsmt_sampler``."""
    try:
        return load_generator(path)
    except ValueError:
        rs = _rsmt_stream()
        if not rs.is_rsmt_checkpoint(path):
            raise
    return rs.load_rsmt_generator(path)
