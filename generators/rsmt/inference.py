"""Using a trained RSMT: load a sampler checkpoint and stream transitions frame by frame.

:class:`RSMT` holds the sampler (with its frozen manifold), the phase model and the style
names. :meth:`RSMT.stream` works in world coordinates: it puts the start frame, the target
and the style example in the start frame's canonical frame, runs the sampler one frame at a
time and yields each new frame moved back into the world (``[B, 180]``), so a caller can
project, play or track a frame as soon as it exists.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from mimic2dm.generators.rsmt import features as F
from mimic2dm.generators.rsmt import phase as rphase
from mimic2dm.generators.rsmt.data import Stats
from mimic2dm.generators.rsmt.manifold import ManifoldConfig, MotionManifold
from mimic2dm.generators.rsmt.sampler import MotionSampler, SamplerConfig

SAMPLER_KIND = "mimic2dm.rsmt_sampler"


@dataclass
class RSMT:
    """A loaded RSMT: ``sampler`` (holding the manifold), ``phase`` model, ``styles`` names."""

    sampler: MotionSampler
    phase: rphase.PeriodicAutoencoder
    styles: list[str]
    source: str = ""

    def phase_at(self, clip: torch.Tensor, frame: int) -> torch.Tensor:
        """Phase vector ``[2C]`` of ``clip [T, 180]`` at ``frame`` (its centred window)."""
        lo = max(0, frame - self.phase.cfg.window)
        hi = min(clip.shape[0], frame + self.phase.cfg.window + 1)
        return rphase.clip_phases(self.phase, clip[lo:hi])["p"][frame - lo]

    @torch.no_grad()
    def stream(self, start: torch.Tensor, phase0: torch.Tensor, target: torch.Tensor, frames: int,
               style: torch.Tensor, gen: torch.Generator | None = None) -> Iterator[torch.Tensor]:  # fmt: skip
        """World frames ``[B, 180]`` 1..``frames`` of the transition from ``start [B, 180]`` (phase
        ``[B, 2C]``) to ``target [B, 180]``, in the style of ``style [B, L, 180]`` (any place)."""
        yaw, shift = F.canonical_transform(start)
        cs = F.transform(start[:, None], yaw, shift)[:, 0]
        ct = F.transform(target[:, None], yaw, shift)[:, 0]
        sty = F.canonicalise(style)
        for out in self.sampler.rollout(cs, phase0, ct, frames, sty, gen):
            yield untransform(out.frame[:, None], yaw, shift)[:, 0]

    def transition(self, *args, **kwargs) -> torch.Tensor:
        """:meth:`stream` collected: ``[B, frames, 180]``."""
        return torch.stack(list(self.stream(*args, **kwargs)), 1)


def untransform(x: torch.Tensor, yaw: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`features.transform` (``[..., T, 180]``)."""
    zero = torch.zeros_like(yaw)
    return F.transform(F.transform(x, zero, -shift), -yaw, torch.zeros_like(shift))


def load_rsmt(path: str | Path) -> RSMT:
    """The RSMT of a ``mimic2dm-train-rsmt part=sampler`` run directory or checkpoint.

    Raises:
        FileNotFoundError: no checkpoint; ValueError: a checkpoint of another kind (one line).
    """
    from mimic2dm.generators import runs

    from mimic2dm.utils.checkpoint import load_checkpoint

    p = runs.resolve_checkpoint(path)
    d = load_checkpoint(p)
    if d.get("kind") != SAMPLER_KIND:
        raise ValueError(f"{p}: field 'kind' is {d.get('kind')!r}, expected {SAMPLER_KIND!r} (a part=sampler run)")  # fmt: skip
    m = d["manifold"]
    manifold = MotionManifold(ManifoldConfig(**m["model_config"]), Stats.from_dict(m["stats"]))
    sampler = MotionSampler(SamplerConfig(**d["model_config"]), manifold)
    sampler.load_state_dict(d["model"])
    ph = rphase.PeriodicAutoencoder(rphase.PhaseConfig(**d["phase"]["model_config"]))
    ph.load_state_dict(d["phase"]["model"])
    return RSMT(sampler.eval(), ph.eval(), list(d["styles"]), str(p))


def random_rsmt(seed: int = 0, styles: tuple[str, ...] = ("walk",)) -> RSMT:
    """An untrained RSMT of the default sizes (smoke runs and speed: speed does not depend on
    the weights); identity normalisation."""
    torch.manual_seed(seed)
    pc = rphase.PhaseConfig()
    z = torch.zeros(F.D)
    o = torch.ones(F.D)
    stats = Stats(z, o, z.clone(), o.clone(), torch.zeros(F.HIP), torch.ones(F.HIP))
    manifold = MotionManifold(ManifoldConfig(phase_dim=2 * pc.channels), stats)
    sampler = MotionSampler(SamplerConfig(phase_channels=pc.channels), manifold)
    return RSMT(
        sampler.eval(), rphase.PeriodicAutoencoder(pc).eval(), list(styles), "random weights"
    )
