"""``mimic2dm-train-rsmt``: train one part of RSMT (a separate job per part).

    mimic2dm-train-rsmt part=phase run_dir=runs/rsmt/phase
    mimic2dm-train-rsmt part=manifold phase=runs/rsmt/phase run_dir=runs/rsmt/manifold
    mimic2dm-train-rsmt part=sampler manifold=runs/rsmt/manifold run_dir=runs/rsmt/sampler
    mimic2dm-train-rsmt part=classifier run_dir=runs/rsmt/classifier
    mimic2dm-train-rsmt resume=runs/rsmt/sampler train.max_steps=6000   # continue exactly

Config: ``conf/train_rsmt.yaml`` (corpus: the ``rsmt_data`` group). Every part writes
``RUN/checkpoints/{last,best}.pt`` (atomic; exact resume as the other generator apps) and
``RUN/metrics.json``. A later part's checkpoint carries the earlier parts it was trained on
(the sampler's holds the manifold and the phase model), so ``mimic2dm transition --model
RUN`` needs only the sampler run.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path

import hydra
import torch
from hydra.experimental.callback import Callback
from mimic2dm.generators import runs
from mimic2dm.generators.config import AppConfig, TrainConfig, check_run, parse
from mimic2dm.generators.optim import OptimConfig
from mimic2dm.generators.rsmt import data as rdata
from mimic2dm.generators.rsmt import phase as rphase
from mimic2dm.generators.rsmt.manifold import ManifoldConfig, MotionManifold
from mimic2dm.generators.rsmt.sampler import MotionSampler, SamplerConfig
from omegaconf import DictConfig, OmegaConf

from mimic2dm.utils.validate import ConfigError, exit_on_config_error

log = logging.getLogger(__name__)

PARTS = ("phase", "manifold", "sampler", "classifier")
KINDS = {p: f"mimic2dm.rsmt_{p}" for p in PARTS}
"""Checkpoint ``kind`` of each part."""
BETAS = (0.5, 0.9)
"""The paper's Adam betas (with AMSGrad: ``optim.name=amsgrad``)."""
TRAIN_EXTRA = ("window", "min_window", "max_window")
"""Part-specific ``train:`` keys: the manifold's window, the classifier's window range."""
EVAL_SEED = 12345
"""Seed of the fixed held-out evaluation cases (never used for training batches)."""


def model_class(part: str):
    if part == "phase":
        return rphase.PhaseConfig
    if part == "manifold":
        return ManifoldConfig
    if part == "sampler":
        return SamplerConfig
    from mimic2dm.generators.rsmt.classifier import StyleClassifierConfig

    return StyleClassifierConfig


DERIVED = {
    "manifold": ("phase_dim",),
    "sampler": ("phase_channels",),
    "classifier": ("num_styles",),
}
"""Model fields the app sets from the upstream parts or the data."""


def validate(cfg: DictConfig) -> tuple[TrainConfig, OptimConfig]:
    """Check the config before anything is written (one-line :class:`ConfigError`)."""
    check_run(cfg)
    part = cfg.part
    if part not in PARTS:
        raise ConfigError("part", part, "one of " + ", ".join(PARTS))
    parse(rdata.CorpusConfig, cfg.rsmt_data, "rsmt_data")
    excl = DERIVED.get(part, ())
    parse(model_class(part), cfg.model[part], f"model.{part}", excl, **{k: 2 for k in excl})
    need = {"manifold": "phase", "sampler": "manifold"}.get(part)
    if need and not cfg.resume and not cfg.get(need):
        raise ConfigError(need, cfg.get(need), f"the {need} run directory (part={part} needs {need}=RUN_DIR)")  # fmt: skip
    if need and cfg.get(need):
        runs.resolve_checkpoint(cfg.get(need))
    node = {
        k: v
        for k, v in OmegaConf.to_container(cfg.train, resolve=True).items()
        if k not in TRAIN_EXTRA
    }
    tr = parse(TrainConfig, node, "train")
    return tr, parse(OptimConfig, cfg.optim, "optim")


def load_part(path, part: str) -> dict:
    """The checkpoint of a finished ``part`` run (directory or file), checked for its kind."""
    from mimic2dm.utils.checkpoint import load_checkpoint

    p = runs.resolve_checkpoint(path)
    d = load_checkpoint(p)
    if d.get("kind") != KINDS[part]:
        raise ConfigError(part, str(path), f"a run of part={part} (its checkpoint kind is {d.get('kind')!r})")  # fmt: skip
    return d


def phase_model(d: dict) -> rphase.PeriodicAutoencoder:
    """The frozen phase model stored in a phase, manifold or sampler checkpoint."""
    src = d if d.get("kind") == KINDS["phase"] else d["phase"]
    m = rphase.PeriodicAutoencoder(rphase.PhaseConfig(**src["model_config"]))
    m.load_state_dict(src["model"])
    return m.eval().requires_grad_(False)


def manifold_model(d: dict) -> MotionManifold:
    """The frozen manifold of a manifold checkpoint."""
    m = MotionManifold(ManifoldConfig(**d["model_config"]), rdata.Stats.from_dict(d["stats"]))
    m.load_state_dict(d["model"])
    return m.eval().requires_grad_(False)


def _upstream(cfg: DictConfig, run: runs.Run) -> dict:
    """The parts this run builds on: from its own checkpoint when resuming."""
    if run.state is not None:
        return {k: run.state[k] for k in ("phase", "manifold") if k in run.state}
    out = {}
    if cfg.part == "manifold":
        out["phase"] = _payload(load_part(cfg.phase, "phase"))
    if cfg.part == "sampler":
        m = load_part(cfg.manifold, "manifold")
        out["manifold"], out["phase"] = _payload(m), m["phase"]
    return out


def _payload(d: dict) -> dict:
    keep = ("kind", "model", "model_config", "stats", "styles")
    return {k: d[k] for k in keep if k in d}


def train(cfg: DictConfig) -> dict:
    """Train (or resume) the part of ``cfg``; returns its final metrics."""
    tr, optim = validate(cfg)
    if cfg.resume:  # the part is the resumed run's
        saved = OmegaConf.load(Path(cfg.resume) / "config.yaml") if (Path(cfg.resume) / "config.yaml").is_file() else None  # fmt: skip
        if saved is not None and saved.part != cfg.part:
            raise ConfigError("part", cfg.part, f"{saved.part} (the part of the run to resume)")
    part = cfg.part
    run = runs.open_run(cfg, KINDS[part])
    corpus_cfg = parse(rdata.CorpusConfig, cfg.rsmt_data, "rsmt_data")
    up = _upstream(cfg, run)
    try:
        train_set, held = rdata.load_corpus(corpus_cfg)
    except (ValueError, OSError) as e:
        if isinstance(e, ConfigError):
            raise
        raise ConfigError("rsmt_data", corpus_cfg.name, f"clips that can be read: {e}") from None
    if not held.clips:
        held = train_set
    runs.start_logging(run)
    job = JOBS[part](cfg, run, train_set, held, up, tr)
    extra = {"model_config": asdict(job.mcfg), "styles": train_set.styles, "corpus": train_set.summary(),
             "held_out": [c.name for c in held.clips], **up, **job.extra}  # fmt: skip

    app = AppConfig(train=tr, optim=optim)
    step = runs.fit(run, job.model, app, job.loss_fn, job.eval_fn, extra, job.metric, part, BETAS)
    metrics = {"step": step, "part": part, **job.eval_fn(), "corpus": train_set.summary()}
    return runs.finish(run, metrics, part)


class PhaseJob:
    metric = "mse"

    def __init__(self, cfg, run, train_set, held, up, tr):
        self.mcfg = parse(rphase.PhaseConfig, cfg.model.phase, "model.phase")
        mean, std = (run.state["stats"]["mean"], run.state["stats"]["std"]) if run.state else rphase.velocity_stats(train_set)  # fmt: skip
        mean, std = torch.as_tensor(mean), torch.as_tensor(std)
        self.model = rphase.PeriodicAutoencoder(self.mcfg, mean, std)
        self.extra = {"stats": {"mean": mean.tolist(), "std": std.tolist()}}
        self.run, self.train_set, self.bs = run, train_set, tr.batch_size
        g = torch.Generator().manual_seed(EVAL_SEED)
        self.eval_v = rphase.sample_velocity_windows(held, 256, self.model, g)

    def loss_fn(self) -> dict:
        return self.model.loss(rphase.sample_velocity_windows(self.train_set, self.bs, self.model, self.run.gen))  # fmt: skip

    @torch.no_grad()
    def eval_fn(self) -> dict:
        self.model.eval()
        return {"mse": float(self.model.loss(self.eval_v)["mse"])}


class ManifoldJob:
    metric = "pos_err_m"

    def __init__(self, cfg, run, train_set, held, up, tr):
        pm = phase_model(up)
        rphase.add_phases(pm, train_set, held)
        self.mcfg = parse(ManifoldConfig, cfg.model.manifold, "model.manifold", ("phase_dim",), phase_dim=2 * pm.cfg.channels)  # fmt: skip
        stats = rdata.Stats.from_dict(run.state["stats"]) if run.state else rdata.compute_stats(train_set)  # fmt: skip
        self.model = MotionManifold(self.mcfg, stats)
        self.extra = {"stats": stats.to_dict()}
        self.run, self.train_set, self.bs = run, train_set, tr.batch_size
        self.window = int(cfg.train.get("window", 25))
        g = torch.Generator().manual_seed(EVAL_SEED)
        self.eval_w = rdata.sample_windows(held, 128, self.window, g)

    def loss_fn(self) -> dict:
        w = rdata.sample_windows(self.train_set, self.bs, self.window, self.run.gen)
        return self.model.rollout_loss(w.x, w.phase["p"])

    @torch.no_grad()
    def eval_fn(self) -> dict:
        self.model.eval()
        st = torch.get_rng_state()
        torch.manual_seed(EVAL_SEED)
        out = self.model.rollout_loss(self.eval_w.x, self.eval_w.phase["p"])
        torch.set_rng_state(st)
        return {k: float(out[k]) for k in ("rec", "pos_err_m", "foot")}


class SamplerJob:
    metric = "last_err_m"

    def __init__(self, cfg, run, train_set, held, up, tr):
        pm = phase_model(up)
        rphase.add_phases(pm, train_set, held)
        manifold = manifold_model(up["manifold"])
        self.mcfg = parse(SamplerConfig, cfg.model.sampler, "model.sampler", ("phase_channels",), phase_channels=pm.cfg.channels)  # fmt: skip
        self.model = MotionSampler(self.mcfg, manifold)
        self.extra = {"stats": up["manifold"]["stats"]}
        self.run, self.train_set, self.held, self.bs = run, train_set, held, tr.batch_size
        self.eval_cases = [self._batch(held, 64, n, torch.Generator().manual_seed(EVAL_SEED + n)) for n in (30, 60)]  # fmt: skip

    def _batch(self, corpus, n: int, frames: int, gen: torch.Generator):
        frames = min(frames, max(c.frames for c in corpus.clips) - 1)
        w = rdata.sample_windows(corpus, n, frames + 1, gen)
        sf = min(self.mcfg.style_frames, max(c.frames for c in self.train_set.clips))
        style = rdata.sample_windows(self.train_set, n, sf, gen, styles=w.style).x
        return w, style

    def loss_fn(self) -> dict:
        c = self.mcfg
        hi = min(c.max_frames, max(x.frames for x in self.train_set.clips) - 1)
        frames = int(torch.randint(min(c.min_frames, hi), hi + 1, (1,), generator=self.run.gen))
        w, style = self._batch(self.train_set, self.bs, frames, self.run.gen)
        return self.model.loss(w.x, w.phase, style, self.run.gen)

    @torch.no_grad()
    def eval_fn(self) -> dict:
        self.model.eval()
        out = {}
        for w, style in self.eval_cases:
            g = torch.Generator().manual_seed(EVAL_SEED)
            r = self.model.loss(w.x, w.phase, style, g)
            n = w.x.shape[1] - 1
            out[f"last_err_m_{n}"] = float(r["last_err_m"])
            out[f"rec_{n}"] = float(r["rec"])
        out["last_err_m"] = sum(v for k, v in out.items() if k.startswith("last_err_m_")) / len(self.eval_cases)  # fmt: skip
        return out


class ClassifierJob:
    metric = "error_rate"

    def __init__(self, cfg, run, train_set, held, up, tr):
        from mimic2dm.generators.rsmt import classifier as rc

        self.rc = rc
        self.mcfg = parse(rc.StyleClassifierConfig, cfg.model.classifier, "model.classifier", ("num_styles",), num_styles=len(train_set.styles))  # fmt: skip
        stats = rdata.Stats.from_dict(run.state["stats"]) if run.state else rdata.compute_stats(train_set)  # fmt: skip
        self.model = rc.StyleClassifier(self.mcfg, stats.mean, stats.std)
        self.extra = {"stats": stats.to_dict()}
        self.run, self.train_set, self.bs = run, train_set, tr.batch_size
        self.lengths = (int(cfg.train.get("min_window", 30)), int(cfg.train.get("max_window", 60)))
        g = torch.Generator().manual_seed(EVAL_SEED)
        self.eval_sets = []
        for n in self.lengths:
            n = min(n, max(c.frames for c in held.clips))
            self.eval_sets.append(rdata.sample_windows(held, 256, n, g))

    def loss_fn(self) -> dict:
        lo, hi = self.lengths
        hi = min(hi, max(c.frames for c in self.train_set.clips))
        n = int(torch.randint(min(lo, hi), hi + 1, (1,), generator=self.run.gen))
        styles = torch.randint(len(self.train_set.styles), (self.bs,), generator=self.run.gen)
        w = rdata.sample_windows(self.train_set, self.bs, n, self.run.gen, styles=styles)
        return self.rc.classifier_loss(self.model, w.x, w.style)

    @torch.no_grad()
    def eval_fn(self) -> dict:
        self.model.eval()
        out = {}
        for w in self.eval_sets:
            acc = float((self.model.predict(w.x) == w.style).float().mean())
            out[f"accuracy_{w.x.shape[1]}"] = acc
        out["accuracy"] = sum(out.values()) / len(out)
        out["error_rate"] = 1.0 - out["accuracy"]
        return out


JOBS = {
    "phase": PhaseJob,
    "manifold": ManifoldJob,
    "sampler": SamplerJob,
    "classifier": ClassifierJob,
}


class ValidateCallback(Callback):
    """Config checks before Hydra makes the run directory (one line, exit 1)."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        with exit_on_config_error():
            validate(config)


@hydra.main(config_path=runs.CONF_DIR, config_name="train_rsmt", version_base="1.3")
def main(cfg: DictConfig) -> None:
    """Console entry point ``mimic2dm-train-rsmt``."""
    with exit_on_config_error():
        m = train(cfg)
    nums = ", ".join(f"{k} {v:.4g}" for k, v in m.items() if isinstance(v, float))
    print(f"rsmt {m['part']}: step {m['step']}, {nums}")


if __name__ == "__main__":
    main()
