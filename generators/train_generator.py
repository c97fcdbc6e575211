"""``mimic2dm-train-generator``: train a 2D motion generator (paper 3.4, B.5, Table 3).

    mimic2dm-train-generator model=gpt tokenizer=runs/tok fid=runs/fid run_dir=runs/gpt
    mimic2dm-train-generator model=gpt_multiview tokenizer=runs/tok
    mimic2dm-train-generator model=diffusion fid=runs/fid
    mimic2dm-train-generator resume=runs/gpt train.max_steps=6000     # continue exactly

``model=gpt|gpt_multiview`` need a trained tokenizer (``tokenizer=RUN_DIR`` or a
checkpoint); its weights and normalisation are copied into the generator checkpoint,
which is therefore all ``mimic2dm sample`` needs. ``model=diffusion`` works on the
canonical windows directly (same data and budget). With ``fid=`` (a ``train_fid``
run) the run ends with FID / diversity of generated windows against the held-out views.
"""

from __future__ import annotations

from dataclasses import asdict

import hydra
import torch
from mimic2dm.generators import runs
from mimic2dm.generators.data import ClipSet, FeatureStats, WindowSampler
from mimic2dm.generators.diffusion import Diffusion, DiffusionConfig
from mimic2dm.generators.gpt import GPT, GPTConfig
from mimic2dm.generators.sample import GENERATOR_KIND
from mimic2dm.generators.tokens import TokenWindowSampler, gpt_inputs, tokenize_clips
from mimic2dm.generators.train_tokenizer import data_info, load_train_and_eval
from mimic2dm.generators.vqvae import VQVAE, VQVAEConfig, tokenizer_payload
from omegaconf import DictConfig, OmegaConf

MODEL_TYPES = {"gpt": "gpt", "gpt_multiview": "gpt", "diffusion": "diffusion"}


def _model_kwargs(cfg: DictConfig) -> dict:
    kw = OmegaConf.to_container(cfg.model, resolve=True)
    kw.pop("name", None)
    return kw


def load_tokenizer(path) -> tuple[VQVAE, FeatureStats]:
    """The frozen tokenizer of a ``train_tokenizer`` run directory or checkpoint."""
    from mimic2dm.utils.checkpoint import load_checkpoint

    if path is None:
        raise ValueError(
            "model=gpt|gpt_multiview needs tokenizer=RUN_DIR (a trained mimic2dm-train-tokenizer run)"
        )
    p = runs.resolve_checkpoint(path)
    d = load_checkpoint(p)
    if d.get("kind") != "mimic2dm.tokenizer":
        raise ValueError(f"{p}: field 'kind' is {d.get('kind')!r}, expected 'mimic2dm.tokenizer'")
    model = VQVAE(VQVAEConfig(**d["model_config"]))
    model.load_state_dict(d["model"])
    return model.eval().requires_grad_(False), FeatureStats.from_dict(d["stats"])


class GPTJob:
    """Data, model, loss and evaluation of ``model=gpt|gpt_multiview``."""

    metric = "val_nll"

    def __init__(self, cfg: DictConfig, run: runs.Run, clips: ClipSet, held: ClipSet):
        self.cfg = cfg
        self.tokenizer, self.stats = load_tokenizer(cfg.tokenizer)
        if self.tokenizer.config.in_dim != clips.dim:
            raise ValueError(
                f"tokenizer expects {self.tokenizer.config.in_dim} features per frame, the data has {clips.dim}"
            )
        kw = _model_kwargs(cfg)
        mcfg = GPTConfig(
            vocab_size=self.tokenizer.config.codebook_size, num_classes=len(clips.label_names), **kw
        )
        self.model = GPT(mcfg)
        V = mcfg.num_views
        self.train_windows = TokenWindowSampler(
            tokenize_clips(self.tokenizer, clips, self.stats, V), mcfg.block_size
        )
        self.held_windows = TokenWindowSampler(
            tokenize_clips(self.tokenizer, held, self.stats, V), mcfg.block_size
        )
        self.run, self.bs = run, int(cfg.train.batch_size)
        payload = tokenizer_payload(self.tokenizer, self.stats, {})
        self.extra = {"model_type": "gpt", "model_name": cfg.model.name, "model_config": asdict(mcfg),
                      "stats": self.stats.to_dict(), "tokenizer": payload}  # fmt: skip

    def optimizer(self) -> torch.optim.Optimizer:
        return self.model.configure_optimizers(
            float(self.cfg.train.lr), float(self.cfg.train.weight_decay)
        )

    def loss_fn(self) -> dict:
        tokens, y = self.train_windows.sample(self.bs, self.run.gen)
        idx, targets = gpt_inputs(tokens)
        _, loss = self.model(idx, y, targets)
        return {"loss": loss}

    def eval_fn(self) -> dict:
        total, n = 0.0, 0
        for tokens, y in self.held_windows.iterate(256, int(self.cfg.eval.val_windows)):
            valid = int((tokens >= 0).sum())
            total += float(sequence_nll_masked(self.model, tokens, y)) * valid
            n += valid
        nll = total / max(1, n)
        return {"val_nll": nll, "val_ppl": float(torch.exp(torch.tensor(nll)))}

    @torch.no_grad()
    def sample_windows(
        self, y: torch.Tensor, frames: int, generator: torch.Generator
    ) -> torch.Tensor:
        """Raw canonical windows ``[N * V, frames, D]`` generated from scratch for labels ``y [N]``."""
        down, V = self.tokenizer.config.downsample, self.model.config.num_views
        n = -(-frames // down)
        toks = self.model.generate(
            y, n * V, float(self.cfg.eval.temperature), self.cfg.eval.top_k or None, generator
        )
        toks = toks.reshape(len(y), n, V).permute(0, 2, 1).reshape(len(y) * V, n)
        out = torch.cat(
            [self.tokenizer.decode(toks[i : i + 256]) for i in range(0, len(toks), 256)]
        )
        return self.stats.denormalize(out[:, :frames])


@torch.no_grad()
def sequence_nll_masked(model: GPT, tokens: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean NLL (nats/token) of window batch ``tokens [B, n]`` over non-padding targets."""
    was = model.training
    model.eval()
    idx, targets = gpt_inputs(tokens)
    _, loss = model(idx, y, targets)
    model.train(was)
    return loss


class DiffusionJob:
    """Data, model, loss and evaluation of ``model=diffusion``."""

    metric = "val_loss"

    def __init__(
        self, cfg: DictConfig, run: runs.Run, clips: ClipSet, held: ClipSet, stats: FeatureStats
    ):
        self.cfg, self.run, self.stats = cfg, run, stats
        kw = _model_kwargs(cfg)
        mcfg = DiffusionConfig(in_dim=clips.dim, num_classes=len(clips.label_names), **kw)
        self.model = Diffusion(mcfg)
        self.train_windows = WindowSampler(clips, mcfg.window, stats)
        self.held_windows = WindowSampler(held, mcfg.window, stats)
        self.bs = int(cfg.train.batch_size)
        self.extra = {"model_type": "diffusion", "model_name": cfg.model.name, "model_config": asdict(mcfg),
                      "stats": stats.to_dict(), "tokenizer": None}  # fmt: skip

    def optimizer(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.model.parameters(), lr=float(self.cfg.train.lr),
                                 weight_decay=float(self.cfg.train.weight_decay))  # fmt: skip

    def loss_fn(self) -> dict:
        b = self.train_windows.sample(self.bs, self.run.gen)
        return self.model(b.x, b.fmask, b.y)

    def eval_fn(self) -> dict:
        self.model.eval()
        losses = [self.model.validation_loss(b.x, b.fmask, b.y, seed=i)
                  for i, b in enumerate(self.held_windows.iterate(256, 4, int(self.cfg.eval.val_windows)))]  # fmt: skip
        return {"val_loss": float(torch.tensor(losses).mean())}

    @torch.no_grad()
    def sample_windows(
        self, y: torch.Tensor, frames: int, generator: torch.Generator
    ) -> torch.Tensor:
        """Raw canonical windows ``[N, frames, D]`` for labels ``y [N]``."""
        out = [self.model.sample_long(y[i : i + 256], frames, self.model.config.overlap, generator)
               for i in range(0, len(y), 256)]  # fmt: skip
        return self.stats.denormalize(torch.cat(out))


def evaluate_fid(cfg: DictConfig, job, clips: ClipSet, held: ClipSet) -> dict:
    """FID, diversity and label accuracy of generated windows against held-out real windows.

    Generated labels follow the label frequencies of the real windows; ``fid_reference``
    is the FID between real training and real held-out windows (the floor to compare to).
    """
    from mimic2dm.generators.fid import fid, fid_report, load_fid_extractor, real_windows

    ext = load_fid_extractor(runs_fid_path(cfg.fid))
    W, limit = ext.window, int(cfg.eval.real_windows)
    real = real_windows(WindowSampler(held, W, job.stats), limit)
    train_real = real_windows(WindowSampler(clips, W, job.stats), limit)
    g = torch.Generator().manual_seed(int(cfg.eval.seed))
    n = int(cfg.eval.num_samples)
    y = real[2][torch.randint(len(real[2]), (n,), generator=g)]
    gen = job.sample_windows(y, W, g)
    rep = fid_report(ext, real[:2], gen)
    rep["fid_reference"] = fid(ext.features(*train_real[:2]), ext.features(*real[:2]))
    yy = y.repeat_interleave(gen.shape[0] // n)
    if ext.model.config.num_classes > 0 and bool((yy >= 0).any()):
        pred = ext.classify(gen)
        rep["label_accuracy"] = float((pred[yy >= 0] == yy[yy >= 0]).float().mean())
    return rep


def runs_fid_path(path):
    """The frozen extractor file of a ``train_fid`` run directory (or the file itself)."""
    from pathlib import Path

    p = Path(path)
    return p / "fid_extractor.pt" if p.is_dir() else p


def train(cfg: DictConfig) -> dict:
    """Train (or resume) the generator of ``cfg.model``; returns the final metrics."""
    name = cfg.model.name
    if name not in MODEL_TYPES:
        raise ValueError(f"model.name {name!r} is not one of {', '.join(MODEL_TYPES)}")
    run = runs.open_run(cfg, GENERATOR_KIND)
    st = run.state
    clips, held = load_train_and_eval(cfg, st["data"]["label_names"] if st else None,
                                      st["data"]["keypoint_set"] if st else None)  # fmt: skip
    if MODEL_TYPES[name] == "gpt":
        job = GPTJob(cfg, run, clips, held)
    else:
        stats = FeatureStats.from_dict(st["stats"]) if st else clips.compute_stats()
        job = DiffusionJob(cfg, run, clips, held, stats)
    if st is not None and st.get("model_name") != name:
        raise ValueError(
            f"resume={cfg.resume}: that run trained model={st.get('model_name')}, not {name}"
        )
    optimizer = job.optimizer()
    step = runs.restore(run, job.model, optimizer)
    extra = {**job.extra, "data": data_info(clips, cfg.gen_data.get("label_key"))}

    def save_fn(s: int, metric: float | None) -> None:
        runs.save(run, s, job.model, optimizer, extra, metric)

    step = runs.train_loop(
        run,
        job.model,
        optimizer,
        step,
        cfg.train,
        job.loss_fn,
        job.eval_fn,
        save_fn,
        job.metric,
        name,
    )
    metrics = {"step": step, "model": name, **job.eval_fn()}
    if cfg.get("fid"):
        metrics |= evaluate_fid(cfg, job, clips, held)
        run.logger.log({f"fid/{k}": v for k, v in metrics.items() if isinstance(v, float)}, step)
    run.logger.log_json("metrics", metrics)
    run.logger.close()
    return metrics


@hydra.main(config_path=runs.CONF_DIR, config_name="train_generator", version_base="1.3")
def main(cfg: DictConfig) -> None:
    """Console entry point ``mimic2dm-train-generator``."""
    m = train(cfg)
    print(
        f"{m['model']}: " + ", ".join(f"{k} {v:.4g}" for k, v in m.items() if isinstance(v, float))
    )


if __name__ == "__main__":
    main()
