"""``mimic2dm-train-tokenizer``: train the VQ-VAE motion tokenizer (paper B.4).

    mimic2dm-train-tokenizer run_dir=runs/tok train.max_steps=3000
    mimic2dm-train-tokenizer resume=runs/tok train.max_steps=6000   # continue exactly

Config: ``conf/train_tokenizer.yaml`` (data: ``gen_data`` group, logging: ``logger``).
Writes ``RUN/checkpoints/{last,best}.pt`` (model, EMA codebook, optimiser, RNG, the
dataset's normalisation and labels) and ``RUN/metrics.json`` (reconstruction error in
1080p pixels after ``G^-1``, codebook usage and perplexity on the held-out views).
"""

from __future__ import annotations

from dataclasses import asdict

import hydra
import torch
from mimic2dm.generators import runs
from mimic2dm.generators.data import ClipSet, WindowSampler, load_clips, prepare_data
from mimic2dm.generators.vqvae import VQVAE, VQVAEConfig, evaluate_tokenizer
from omegaconf import DictConfig

KIND = "mimic2dm.tokenizer"


def data_info(clips: ClipSet, label_key: str | None) -> dict:
    """What a checkpoint records about its data (keypoint set, fps, labels, image size)."""
    return {"keypoint_set": clips.keypoint_set, "fps": clips.fps, "label_names": list(clips.label_names),
            "label_key": label_key, "image_size": list(clips.image_size), "files": len(clips.files)}  # fmt: skip


def load_train_and_eval(
    cfg: DictConfig, label_names=None, keypoint_set=None
) -> tuple[ClipSet, ClipSet]:
    """Training clips and evaluation clips (the held-out directory, else the training set)."""
    train_dir, held_dir = prepare_data(cfg.gen_data)
    key = cfg.gen_data.get("label_key")
    train = load_clips(train_dir, key, label_names, keypoint_set)
    held = load_clips(held_dir, key, train.label_names, train.keypoint_set) if held_dir else train
    return train, held


def train(cfg: DictConfig) -> dict:
    """Train (or resume) the tokenizer described by ``cfg``; returns the final metrics."""
    run = runs.open_run(cfg, KIND)
    state = run.state
    if state is not None:  # a resumed run keeps the data's labels and normalisation
        from mimic2dm.generators.data import FeatureStats

        clips, held = load_train_and_eval(
            cfg, state["data"]["label_names"], state["data"]["keypoint_set"]
        )
        stats = FeatureStats.from_dict(state["stats"])
    else:
        clips, held = load_train_and_eval(cfg)
        stats = clips.compute_stats()
    mcfg = VQVAEConfig(in_dim=clips.dim, num_keypoints=clips.num_keypoints, **cfg.model)
    sampler = WindowSampler(clips, int(cfg.window), stats)
    eval_sampler = WindowSampler(held, int(cfg.window), stats)
    model = VQVAE(mcfg)
    optimizer = torch.optim.AdamW(model.parameters(), lr=float(cfg.train.lr), betas=(0.9, 0.99),
                                  weight_decay=float(cfg.train.weight_decay))  # fmt: skip
    step = runs.restore(run, model, optimizer)
    extra = {"model_config": asdict(mcfg), "stats": stats.to_dict(), "data": data_info(clips, cfg.gen_data.get("label_key")),
             "window": int(cfg.window)}  # fmt: skip
    bs = int(cfg.train.batch_size)

    def loss_fn() -> dict:
        b = sampler.sample(bs, run.gen)
        return model(b.x, b.fmask, b.kmask)[1]

    def eval_fn() -> dict:
        return evaluate_tokenizer(
            model, eval_sampler, stats, int(cfg.train.eval_stride), int(cfg.train.eval_windows)
        )

    def save_fn(s: int, metric: float | None) -> None:
        runs.save(run, s, model, optimizer, extra, metric)

    step = runs.train_loop(
        run, model, optimizer, step, cfg.train, loss_fn, eval_fn, save_fn, "recon_px", "tokenizer"
    )
    metrics = {
        "step": step,
        **eval_fn(),
        "train_windows": len(sampler),
        "eval_windows_total": len(eval_sampler),
    }
    run.logger.log_json("metrics", metrics)
    run.logger.close()
    return metrics


@hydra.main(config_path=runs.CONF_DIR, config_name="train_tokenizer", version_base="1.3")
def main(cfg: DictConfig) -> None:
    """Console entry point ``mimic2dm-train-tokenizer``."""
    m = train(cfg)
    print(f"tokenizer: recon {m['recon_px']:.2f} px (pose {m['recon_pose_px']:.2f} px) at 1080p, "
          f"codebook usage {m['usage']:.3f}, perplexity {m['perplexity']:.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
