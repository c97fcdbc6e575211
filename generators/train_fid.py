"""``mimic2dm-train-fid``: train, freeze and version the 2D-motion FID feature extractor.

    mimic2dm-train-fid run_dir=runs/fid train.max_steps=1500
    mimic2dm-train-fid resume=runs/fid train.max_steps=3000     # continue exactly

Writes ``RUN/fid_extractor.pt`` (weights, normalisation, config and the SHA-256
version hash; what ``fid=RUN`` of the generator app loads) and ``RUN/metrics.json``:
the hash, the FID between the real training and held-out views (the floor a
generator can reach), the FID of the held-out set against itself (~0), diversity
and the held-out label accuracy of the auxiliary classifier.
"""

from __future__ import annotations

from dataclasses import asdict

import hydra
import torch
from mimic2dm.generators import runs
from mimic2dm.generators.config import parse, validate
from mimic2dm.generators.data import WindowSampler
from mimic2dm.generators.fid import (
    FIDConfig,
    FIDExtractor,
    MotionEncoder,
    diversity,
    extractor_loss,
    fid,
    positive_pairs,
    real_windows,
)
from omegaconf import DictConfig

from mimic2dm.utils.checkpoint import atomic_torch_save
from mimic2dm.utils.validate import exit_on_config_error

KIND = runs.FID_TRAINING_KIND


def final_report(
    ext: FIDExtractor, train_s: WindowSampler, held_s: WindowSampler, limit: int
) -> dict:
    """Hash, reference FIDs, diversity and held-out label accuracy of a frozen extractor."""
    tr, he = real_windows(train_s, limit), real_windows(held_s, limit)
    ft, fh = ext.features(*tr[:2]), ext.features(*he[:2])
    out = {"fid_extractor": ext.version, "fid_train_vs_heldout": fid(ft, fh), "fid_heldout_self": fid(fh, fh),
           "diversity_heldout": diversity(fh), "num_train_windows": len(ft), "num_heldout_windows": len(fh)}  # fmt: skip
    if ext.model.config.num_classes > 0 and bool((he[2] >= 0).any()):
        ok = he[2] >= 0
        out["label_accuracy"] = float((ext.classify(*he[:2])[ok] == he[2][ok]).float().mean())
    return out


def train(cfg: DictConfig) -> dict:
    """Train (or resume) the extractor of ``cfg``, freeze it and report; returns the metrics."""
    app = validate(cfg, "fid")
    run = runs.open_run(cfg, KIND)
    clips, held, stats = runs.load_data(run)
    mcfg = parse(FIDConfig, cfg.model, "model", in_dim=clips.dim, num_keypoints=clips.num_keypoints,
                 window=int(cfg.window), num_classes=len(clips.label_names))  # fmt: skip
    model = MotionEncoder(mcfg)
    sampler, held_s = (
        WindowSampler(clips, mcfg.window, stats),
        WindowSampler(held, mcfg.window, stats),
    )
    bs = app.train.batch_size
    extra = {
        "model_config": asdict(mcfg),
        "stats": stats.to_dict(),
        "data": runs.data_info(clips, cfg.gen_data.get("label_key")),
    }

    def loss_fn() -> dict:
        a, b = positive_pairs(sampler, bs, mcfg.max_shift, run.gen)
        return extractor_loss(model, a, b, run.gen)

    def eval_fn() -> dict:
        model.eval()
        g = torch.Generator().manual_seed(1234)  # fixed pairs, global RNG untouched
        with torch.no_grad():
            a, b = positive_pairs(held_s, min(256, len(held_s)), mcfg.max_shift, g)
            out = extractor_loss(model, a, b, g)
        return {k: float(v) for k, v in out.items()}

    step = runs.fit(run, model, app, loss_fn, eval_fn, extra, "nce", "fid")
    ext = FIDExtractor(model, stats)
    atomic_torch_save(ext.payload(), run.dir / "fid_extractor.pt")
    metrics = {
        "step": step,
        **eval_fn(),
        **final_report(ext, sampler, held_s, int(cfg.eval_windows)),
    }
    return runs.finish(run, metrics, "fid")


@hydra.main(config_path=runs.CONF_DIR, config_name="train_fid", version_base="1.3")
def main(cfg: DictConfig) -> None:
    """Console entry point ``mimic2dm-train-fid``."""
    with exit_on_config_error():
        m = train(cfg)
    print(f"FID extractor {m['fid_extractor']}: FID train vs held-out {m['fid_train_vs_heldout']:.3f}, "
          f"held-out vs itself {m['fid_heldout_self']:.2e}, diversity {m['diversity_heldout']:.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
