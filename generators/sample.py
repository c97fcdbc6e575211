"""Generate 2D motion from a trained generator: ``mimic2dm sample``.

    mimic2dm sample RUN_OR_CKPT --frames 300 --condition walk --out walk.npz --preview walk.mp4

The generator makes canonical features; ``G^-1`` integrates them into pixels of a
chosen virtual view (:class:`Placement`: image size, first-frame root position and
body size; canonical motion carries no 3D camera, so choosing the view means choosing
where and how large the character starts). The result is a ``Motion2D`` file (one
view per generated view; confidence 1) in the project's format.

GPT generation streams: tokens come from a sliding-context :class:`TokenStream`, are
decoded in chunks with a few tokens of left context and right look-ahead
(:class:`MotionStream`) and integrated chunk by chunk (:class:`PixelStream`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
import torch
import typer
from mimic2dm.generators.data import FeatureStats, features_to_pixels
from mimic2dm.generators.gpt import GPT, TokenStream
from mimic2dm.generators.model_types import GeneratorType, generator_type
from mimic2dm.generators.vqvae import VQVAE, tokenizer_from_payload

from mimic2dm.utils.validate import check


@dataclass
class LoadedGenerator:
    """A generator ready to sample.

    Attributes:
        model_type: registered type (``gpt``, also multi-view, or ``diffusion``).
        model: the model of that type (eval mode).
        stats: normalisation of the canonical features the model works in.
        tokenizer: the frozen :class:`VQVAE` (GPT only).
        data: keypoint set, fps, label names, image size of the training data.
        source: checkpoint path.
    """

    model_type: str
    model: torch.nn.Module
    stats: FeatureStats
    tokenizer: VQVAE | None
    data: dict
    source: str = ""

    @property
    def gtype(self) -> GeneratorType:
        return generator_type(self.model_type, "model_type")

    @property
    def num_views(self) -> int:
        return self.gtype.num_views(self.model)

    def label_id(self, condition: str | None) -> int:
        """Label id of ``condition`` (``None``/``""``/``none``: unconditional, ``-1``)."""
        if condition is None or condition.lower() in ("", "none"):
            return -1
        names = self.data.get("label_names", [])
        if condition not in names:
            raise ValueError(
                f"condition {condition!r} is not one of this model's labels: {', '.join(names) or '(none)'}"
            )
        return names.index(condition)


def build_generator(model_type: str, config: dict) -> torch.nn.Module:
    """A fresh model of registered type ``model_type`` from its config dict."""
    return generator_type(model_type, "model_type").build(config)


def load_generator(path: str | Path) -> LoadedGenerator:
    """Load a generator checkpoint (a ``.pt`` file or a ``train_generator`` run directory)."""
    from mimic2dm.generators.runs import GENERATOR_KIND, resolve_checkpoint

    from mimic2dm.utils.checkpoint import load_checkpoint

    p = resolve_checkpoint(path)
    d = load_checkpoint(p)
    if d.get("kind") != GENERATOR_KIND:
        raise ValueError(
            f"{p}: field 'kind' is {d.get('kind')!r}, expected {GENERATOR_KIND!r} (a train_generator checkpoint)"
        )
    try:
        model = build_generator(d["model_type"], d["model_config"])
    except ValueError as e:  # an unknown type or a config out of range: name the file
        raise ValueError(f"{p}: {e}") from None
    model.load_state_dict(d["model"])
    tok = tokenizer_from_payload(d["tokenizer"])[0] if d.get("tokenizer") else None
    return LoadedGenerator(
        d["model_type"], model.eval(), FeatureStats.from_dict(d["stats"]), tok, d["data"], str(p)
    )


# ----------------------------------------------------------------------------- streaming GPT
class MotionStream:
    """GPT tokens decoded chunk by chunk into raw canonical features.

    Args:
        gpt, tokenizer, stats: the generator, its tokenizer and normalisation.
        label: label id (``-1``: unconditional).
        temperature, top_k: sampling; generator: torch RNG.
        chunk: tokens per view decoded per call; left, right: context / look-ahead tokens.
    """

    def __init__(self, gpt: GPT, tokenizer: VQVAE, stats: FeatureStats, label: int = -1, temperature: float = 1.0,
                 top_k: int | None = None, generator: torch.Generator | None = None, chunk: int = 8, left: int = 4,
                 right: int = 2):  # fmt: skip
        self.tokens = TokenStream(gpt, torch.tensor([label]), temperature, top_k, generator)
        self.tokenizer, self.stats = tokenizer.eval(), stats
        self.V = gpt.config.num_views
        self.chunk, self.left, self.right = chunk, left, right
        self.hist = torch.zeros(self.V, 0, dtype=torch.long)  # per-view tokens kept for decoding
        self.emitted = 0  # tokens per view of hist already turned into frames

    def _grow(self, per_view: int) -> None:
        n = per_view - self.hist.shape[1]
        if n > 0:
            new = (
                torch.stack([self.tokens.step() for _ in range(n * self.V)]).reshape(n, self.V).t()
            )
            self.hist = torch.cat([self.hist, new], dim=1)

    @torch.no_grad()
    def next_chunk(self) -> torch.Tensor:
        """The next ``chunk * l`` frames of every view: raw canonical features ``[V, chunk * l, D]``."""
        down = self.tokenizer.config.downsample
        self._grow(self.emitted + self.chunk + self.right)
        lo = max(0, self.emitted - self.left)
        dec = self.tokenizer.decode(self.hist[:, lo : self.emitted + self.chunk + self.right])
        a = (self.emitted - lo) * down
        out = self.stats.denormalize(dec[:, a : a + self.chunk * down])
        self.emitted += self.chunk
        drop = max(0, self.emitted - self.left)
        self.hist, self.emitted = self.hist[:, drop:], self.emitted - drop
        return out


@dataclass
class Placement:
    """Where generated motion is drawn (``G^-1`` start), per view.

    Attributes:
        width, height: image size (pixels).
        scale_px: first-frame body size at 1080p (COCO-17: torso length); rescaled to ``height``.
        root_x, root_y: first-frame root as a fraction of width / height.
    """

    width: int = 1920
    height: int = 1080
    scale_px: float = 150.0
    root_x: float = 0.5
    root_y: float = 0.55

    def start(self) -> tuple[torch.Tensor, torch.Tensor]:
        """First-frame root ``[2]`` and size ``[]`` in pixels."""
        root = torch.tensor([self.root_x * self.width, self.root_y * self.height])
        return root, torch.tensor(self.scale_px * self.height / 1080.0)


def parse_placement(spec: str | None, stats: FeatureStats, seed: int = 0) -> Placement:
    """``default`` (the training data's median placement), ``random`` (size 0.6-1.4x and
    root jittered, from ``seed``) or ``key=value,...`` over :class:`Placement`'s fields."""
    base = Placement(scale_px=stats.scale_px, root_x=stats.root_frac[0], root_y=stats.root_frac[1])
    if spec is None or spec in ("", "default"):
        return base
    if spec == "random":
        rng = np.random.default_rng(seed)
        base.scale_px *= float(rng.uniform(0.6, 1.4))
        base.root_x, base.root_y = float(rng.uniform(0.3, 0.7)), float(rng.uniform(0.4, 0.65))
        return base
    names = {f.name: f.type for f in fields(Placement)}
    for item in spec.split(","):
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or key not in names:
            raise ValueError(
                f"--camera item {item!r}: expected default, random or key=value with key in {', '.join(names)}"
            )
        try:
            setattr(base, key, int(value) if key in ("width", "height") else float(value))
        except ValueError:
            raise ValueError(f"--camera {key}={value!r}: expected a number") from None
    if base.width <= 0 or base.height <= 0 or base.scale_px <= 0:
        raise ValueError(f"--camera: width, height and scale_px must be > 0, got {asdict(base)}")
    return base


class PixelStream:
    """Chunks of canonical features integrated into pixels with ``G^-1`` (state carried across chunks).

    Args:
        placement: start of every view.
        num_views: ``V``.
    """

    def __init__(self, placement: Placement, num_views: int):
        root, scale = placement.start()
        self.root = [root.clone() for _ in range(num_views)]
        self.scale = [scale.clone() for _ in range(num_views)]

    def push(self, feats: torch.Tensor) -> torch.Tensor:
        """Raw features ``[V, n, D]`` -> keypoints ``[V, n, K, 2]`` (pixels)."""
        out = []
        for v in range(feats.shape[0]):
            x, self.root[v], self.scale[v] = features_to_pixels(
                feats[v], self.root[v], self.scale[v]
            )
            out.append(x)
        return torch.stack(out)


def generate_features(gen: LoadedGenerator, frames: int, label: int = -1, seed: int = 0, temperature: float = 1.0,
                      top_k: int | None = None) -> torch.Tensor:  # fmt: skip
    """``frames`` raw canonical frames ``[V, frames, D]``, deterministic in ``seed``."""
    check_sampling(frames, seed, temperature, top_k)
    g = torch.Generator().manual_seed(seed)
    return gen.gtype.generate(gen, frames, label, g, temperature, top_k)


def check_sampling(frames: int, seed: int, temperature: float, top_k: int | None) -> None:
    """Range checks of the sampling options (errors name the ``mimic2dm sample`` option).

    Raises:
        ConfigError: ``--frames >= 1``, ``--seed >= 0``, ``--temperature >= 0`` (0: greedy),
            ``--top-k >= 0`` (0 / None: all tokens).
    """
    check("--frames", frames, ge=1, integer=True)
    check("--seed", seed, ge=0, integer=True)
    check("--temperature", temperature, ge=0)
    if top_k is not None:
        check("--top-k", top_k, ge=0, integer=True)


def features_to_motion2d(
    feats: torch.Tensor, placement: Placement, gen: LoadedGenerator, labels: dict, meta: dict
):
    """Raw canonical frames ``[V, T, D]`` -> a validated ``Motion2D`` in the placement's image."""
    from mimic2dm.motion.format import Motion2D

    kp = PixelStream(placement, feats.shape[0]).push(feats).numpy().astype(np.float32)
    return Motion2D(keypoints=kp, confidence=np.ones(kp.shape[:3], np.float32), keypoint_set=gen.data["keypoint_set"],
                    fps=float(gen.data["fps"]), image_size=(placement.width, placement.height), labels=labels,
                    meta=meta)  # fmt: skip


def render_preview(m, path: str | Path, tile_height: int = 360) -> Path:
    """Draw every view of a ``Motion2D`` side by side into an mp4 at the clip's fps."""
    from PIL import Image, ImageDraw

    from mimic2dm.motion.keypoint_sets import load_keypoint_set
    from mimic2dm.render import write_video
    from mimic2dm.utils.draw import REF_COLOR, draw_skeleton

    kset = load_keypoint_set(m.keypoint_set)
    w, h = m.image_size
    s = tile_height / h
    tw = int(round(w * s)) // 2 * 2
    mask = m.mask()
    frames = []
    for t in range(m.num_frames):
        img = Image.new("RGB", (tw * m.num_views, tile_height), (250, 250, 250))
        d = ImageDraw.Draw(img)
        for v in range(m.num_views):
            draw_skeleton(
                d, m.keypoints[v, t], mask[v, t], kset.edges, REF_COLOR, s, (v * tw, 0), width=2
            )
            d.text((v * tw + 5, 5), f"view {v}  frame {t}", fill=(0, 0, 0))
        frames.append(np.asarray(img))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_video(path, np.stack(frames), m.fps)
    return path


def sample_motion(checkpoint: str | Path, frames: int, condition: str | None, out: str | Path, seed: int = 0,
                  camera: str | None = None, temperature: float = 1.0, top_k: int | None = None,
                  preview: str | Path | None = None):  # fmt: skip
    """Generate ``frames`` frames and write them as a 2D-motion file (and an mp4 preview).

    Returns:
        The written ``Motion2D``.
    """
    from mimic2dm.motion.format import save_motion2d

    check_sampling(frames, seed, temperature, top_k)
    gen = load_generator(checkpoint)
    label = gen.label_id(condition)
    placement = parse_placement(camera, gen.stats, seed)
    feats = generate_features(gen, frames, label, seed, temperature, top_k)
    key = gen.data.get("label_key") or "skill"
    labels = {key: condition} if label >= 0 else {}
    meta = {"generator": f"mimic2dm.generators.{gen.model_type}", "checkpoint": gen.source, "seed": seed,
            "temperature": temperature, "top_k": top_k, "placement": asdict(placement), "random_weights": False}  # fmt: skip
    m = features_to_motion2d(feats, placement, gen, labels, meta)
    save_motion2d(m, out)
    if preview is not None:
        render_preview(m, preview)
    return m


def sample_cmd(
    checkpoint: Path = typer.Argument(
        ..., help="Generator checkpoint (.pt) or train_generator run directory."
    ),
    frames: int = typer.Option(300, "--frames", min=1, help="Frames to generate."),
    condition: str = typer.Option(
        "none", "--condition", help="Label to follow (e.g. walk); none: unconditional."
    ),
    out: Path = typer.Option(..., "--out", help="Output 2D-motion file (.npz)."),
    preview: Path | None = typer.Option(None, "--preview", help="Also draw an mp4 preview here."),
    seed: int = typer.Option(0, "--seed", help="Sampling seed (same seed, same motion)."),
    camera: str = typer.Option(
        "default",
        "--camera",
        help="default | random | key=value,... of width, height, scale_px, root_x, root_y.",
    ),
    temperature: float = typer.Option(1.0, help="Sampling temperature (GPT); 0: greedy."),
    top_k: int = typer.Option(
        0, "--top-k", help="Sample among the k most likely tokens (GPT); 0: all."
    ),
) -> None:
    """Generate 2D motion into a chosen virtual view and write it in the project's 2D format."""
    try:
        m = sample_motion(
            checkpoint, frames, condition, out, seed, camera, temperature, top_k or None, preview
        )
    except (FileNotFoundError, ValueError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from None
    typer.echo(f"wrote {out}: {m.num_views} view(s) x {m.num_frames} frames ({m.keypoint_set}, {m.fps:g} fps)"
               + (f", preview {preview}" if preview else ""))  # fmt: skip


app = typer.Typer(add_completion=False)
app.command("sample")(sample_cmd)

if __name__ == "__main__":
    app()
