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
``model.type`` picks the registered generator type (``generators/model_types.py``) and
with it the training job (``generators/jobs.py``); the optimiser is ``optim:``.
"""

from __future__ import annotations

import hydra
import torch
from mimic2dm.generators import runs
from mimic2dm.generators.config import GenEvalConfig, validate
from mimic2dm.generators.data import ClipSet, WindowSampler
from mimic2dm.generators.jobs import GeneratorJob
from omegaconf import DictConfig

from mimic2dm.utils.validate import ConfigError, exit_on_config_error


def evaluate_fid(
    fid_path, ev: GenEvalConfig, job: GeneratorJob, clips: ClipSet, held: ClipSet
) -> dict:
    """FID, diversity and label accuracy of generated windows against held-out real windows.

    Generated labels follow the label frequencies of the real windows; ``fid_reference``
    is the FID between real training and real held-out windows (the floor to compare to).
    """
    from mimic2dm.generators.fid import fid, fid_report, load_fid_extractor, real_windows

    ext = load_fid_extractor(runs_fid_path(fid_path))
    W, limit = ext.window, ev.real_windows
    real = real_windows(WindowSampler(held, W, job.stats), limit)
    train_real = real_windows(WindowSampler(clips, W, job.stats), limit)
    g = torch.Generator().manual_seed(ev.seed)
    n = ev.num_samples
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
    app = validate(cfg, "generator")
    name = cfg.model.name
    run = runs.open_run(cfg, runs.GENERATOR_KIND)
    st = run.state
    if st is not None and st.get("model_name") != name:
        raise ConfigError(
            "model", name, f"{st.get('model_name')} (the model of resume={cfg.resume})"
        )
    clips, held, stats = runs.load_data(run)
    job = app.gtype.job_class()(cfg, app, run, clips, held, stats)
    extra = {**job.extra, "data": runs.data_info(clips, cfg.gen_data.get("label_key"))}
    step = runs.fit(run, job.model, app, job.loss_fn, job.eval_fn, extra, job.metric, name, app.gtype.betas)  # fmt: skip
    metrics = {"step": step, "model": name, **job.eval_fn()}
    if cfg.get("fid"):
        metrics |= evaluate_fid(cfg.fid, app.eval, job, clips, held)
    return runs.finish(run, metrics, "fid" if cfg.get("fid") else None)


@hydra.main(config_path=runs.CONF_DIR, config_name="train_generator", version_base="1.3")
def main(cfg: DictConfig) -> None:
    """Console entry point ``mimic2dm-train-generator``."""
    with exit_on_config_error():
        m = train(cfg)
    print(
        f"{m['model']}: " + ", ".join(f"{k} {v:.4g}" for k, v in m.items() if isinstance(v, float))
    )


if __name__ == "__main__":
    main()
