"""``mimic2dm-train-tokenizer``: train the VQ-VAE motion tokenizer (paper B.4).

    mimic2dm-train-tokenizer run_dir=runs/tok train.max_steps=3000
    mimic2dm-train-tokenizer resume=runs/tok train.max_steps=6000   # continue exactly

Config: ``conf/train_tokenizer.yaml`` (data: ``gen_data`` group, optimiser: ``optim``,
logging: ``logger``); checked before the run directory is made (``generators/config.py``).
Writes ``RUN/checkpoints/{last,best}.pt`` (model, EMA codebook, optimiser, RNG, the
dataset's normalisation and labels) and ``RUN/metrics.json`` (reconstruction error in
1080p pixels after ``G^-1``, codebook usage and perplexity on the held-out views).
"""

from __future__ import annotations

from dataclasses import asdict

import hydra
from mimic2dm.generators import runs
from mimic2dm.generators.config import parse, validate
from mimic2dm.generators.data import WindowSampler
from mimic2dm.generators.vqvae import VQVAE, VQVAEConfig, evaluate_tokenizer
from omegaconf import DictConfig

from mimic2dm.utils.validate import exit_on_config_error

KIND = runs.TOKENIZER_KIND
BETAS = (0.9, 0.99)
"""Adam betas of the tokenizer when ``optim.betas`` is null."""


def train(cfg: DictConfig) -> dict:
    """Train (or resume) the tokenizer described by ``cfg``; returns the final metrics."""
    app = validate(cfg, "tokenizer")
    run = runs.open_run(cfg, KIND)
    clips, held, stats = runs.load_data(run)
    mcfg = parse(VQVAEConfig, cfg.model, "model", in_dim=clips.dim, num_keypoints=clips.num_keypoints)  # fmt: skip
    sampler = WindowSampler(clips, int(cfg.window), stats)
    eval_sampler = WindowSampler(held, int(cfg.window), stats)
    model = VQVAE(mcfg)
    extra = {"model_config": asdict(mcfg), "stats": stats.to_dict(), "data": runs.data_info(clips, cfg.gen_data.get("label_key")),
             "window": int(cfg.window)}  # fmt: skip
    bs, tr = app.train.batch_size, app.train

    def loss_fn() -> dict:
        b = sampler.sample(bs, run.gen)
        return model(b.x, b.fmask, b.kmask)[1]

    def eval_fn() -> dict:
        return evaluate_tokenizer(model, eval_sampler, stats, tr.eval_stride, tr.eval_windows)

    step = runs.fit(run, model, app, loss_fn, eval_fn, extra, "recon_px", "tokenizer", BETAS)
    metrics = {
        "step": step,
        **eval_fn(),
        "train_windows": len(sampler),
        "eval_windows_total": len(eval_sampler),
    }
    return runs.finish(run, metrics)


@hydra.main(config_path=runs.CONF_DIR, config_name="train_tokenizer", version_base="1.3")
def main(cfg: DictConfig) -> None:
    """Console entry point ``mimic2dm-train-tokenizer``."""
    with exit_on_config_error():
        m = train(cfg)
    print(f"tokenizer: recon {m['recon_px']:.2f} px (pose {m['recon_pose_px']:.2f} px) at 1080p, "
          f"codebook usage {m['usage']:.3f}, perplexity {m['perplexity']:.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
