"""Run plumbing shared by the generator apps (tokenizer, generator, FID extractor).

Same conventions as the tracker: a run directory with the resolved config, wandb
(offline unless ``WANDB_MODE`` says otherwise) and TensorBoard through
:class:`RunLogger`, a rich progress bar, atomic checkpoints (``checkpoints/last.pt``,
``best.pt``) and exact resume: ``resume=RUN_DIR`` restores weights, optimiser, step
counter, the batch-sampling generator and the python/numpy/torch RNG states, so N
steps straight and N/2 + resume + N/2 give identical weights.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import shutil
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from mimic2dm.generators.config import AppConfig, TrainConfig
from mimic2dm.generators.data import ClipSet, FeatureStats, load_clips, prepare_data
from mimic2dm.generators.optim import DEFAULT_BETAS, OptimConfig, make_optimizer
from omegaconf import DictConfig, OmegaConf

from mimic2dm.utils.checkpoint import CheckpointManager, rng_state, seed_everything, set_rng_state
from mimic2dm.utils.run_logging import RunLogger, make_progress, save_resolved_config
from mimic2dm.utils.rundir import (
    NoRunError,
    RunDirError,
    RunLock,
    check_writable,
    claim_new_run,
    clean_stale_temps,
    os_error_line,
)

log = logging.getLogger(__name__)

TOKENIZER_KIND = "mimic2dm.tokenizer"
GENERATOR_KIND = "mimic2dm.generator"
FID_TRAINING_KIND = "mimic2dm.fid_training"
"""Checkpoint ``kind`` of each app (checked on resume and on load)."""

CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")
"""``../conf`` from this file, absolute: Hydra would read a relative path as a package
(``mimic2dm.conf``) because the apps run as modules of ``mimic2dm.generators``."""

# hydra.run.dir of the apps: the resumed run's directory, else the new one
OmegaConf.register_new_resolver(
    "gen.run_dir", lambda resume, run_dir: str(resume or run_dir), replace=True
)


@dataclass
class Run:
    """An open training run.

    Attributes:
        dir: run directory; logger: wandb + TensorBoard; ckpt: checkpoint manager.
        state: the checkpoint being resumed (None for a fresh run).
        gen: generator of batch sampling (saved with every checkpoint).
        kind: checkpoint kind (``mimic2dm.tokenizer`` ...), checked on resume.
    """

    dir: Path
    logger: RunLogger | None  # opened by load_data, once the data passed its checks
    ckpt: CheckpointManager
    state: dict | None
    gen: torch.Generator
    kind: str
    cfg: DictConfig
    lock: RunLock | None = None
    stop_signal: int = 0  # SIGINT / SIGTERM received: stop at the next step with a checkpoint

    def close(self) -> None:
        """Close the loggers and release the run directory."""
        if self.logger is not None:
            self.logger.close()
        if self.lock is not None:
            self.lock.release()


def resolve_checkpoint(path: str | Path, name: str = "last.pt") -> Path:
    """A checkpoint file from a file path or a run directory (``RUN/checkpoints/<name>``)."""
    p = Path(path)
    if p.is_dir():
        p = p / "checkpoints" / name
    if not p.is_file():
        raise FileNotFoundError(
            f"no checkpoint at {path} (expected a .pt file or a run directory with checkpoints/{name})"
        )
    return p


def open_run(cfg: DictConfig, kind: str) -> Run:
    """Create or resume the run of ``cfg`` (``run_dir`` / ``resume``) and seed; the config
    and the loggers are written by :func:`load_data` once the data has passed its checks.

    The run directory is locked for this process (:class:`RunLock`); a new run refuses a
    directory holding a run unless ``overwrite=true``; stale temp files of a killed
    checkpoint write are removed.

    Raises:
        RunDirError: the directory is in use, unwritable, holds another run, or the run to
            resume has no checkpoint or one of another app (one line).
    """
    if cfg.get("threads"):
        torch.set_num_threads(int(cfg.threads))
    run_dir = Path(cfg.resume or cfg.run_dir)
    if (
        cfg.resume and not (run_dir / "checkpoints" / "last.pt").is_file()
    ):  # before creating anything
        gone = "" if run_dir.is_dir() else " (no such directory)"
        raise NoRunError(f"resume={cfg.resume}: no checkpoints/last.pt in that run directory{gone}")
    check_writable(run_dir, "resume" if cfg.resume else "run_dir", is_dir=True)
    lock = RunLock(run_dir).acquire()
    atexit.register(lock.release)  # a run that fails still frees its directory
    if not cfg.resume:
        claim_new_run(run_dir, bool(cfg.get("overwrite")))
    clean_stale_temps(run_dir / "checkpoints")
    ckpt = CheckpointManager(
        run_dir, keep=int(cfg.get("keep_checkpoints", 3)), higher_is_better=False
    )
    state = _resume_state(cfg, ckpt, kind, lock) if cfg.resume else None
    seed_everything(int(cfg.seed))
    gen = torch.Generator().manual_seed(int(cfg.seed))
    return Run(run_dir, None, ckpt, state, gen, kind, cfg, lock)


def start_logging(run: Run) -> None:
    """Write the run's config and open its loggers: once its data has passed every check
    (:func:`load_data`), so that a bad dataset leaves no ``config.yaml``, ``tb/`` or ``wandb/``."""
    cfg, kind = run.cfg, run.kind
    if run.state is not None and (run.dir / "config.yaml").is_file():
        shutil.copy(
            run.dir / "config.yaml", run.dir / f"config.before_step{run.state['step']}.yaml"
        )
    save_resolved_config(cfg, run.dir)
    lg = cfg.logger
    rng = rng_state()  # the loggers start after seeding now: keep them off the training RNG streams
    run.logger = RunLogger(run.dir, OmegaConf.to_container(cfg, resolve=True), project=lg.project,
                           use_wandb=bool(lg.wandb), use_tensorboard=bool(lg.tensorboard),
                           name=f"{kind.split('.')[-1]}-{run.dir.name}")  # fmt: skip
    set_rng_state(rng)


def _resume_state(cfg: DictConfig, ckpt: CheckpointManager, kind: str, lock: RunLock) -> dict:
    state = ckpt.load_last()
    problem = None
    if state is None:
        problem = "no checkpoints/last.pt in that run directory"
    elif state.get("kind") != kind:
        problem = f"checkpoint kind {state.get('kind')!r}, expected {kind!r} (a run of another app)"
    if problem:
        lock.release()
        raise RunDirError(f"resume={cfg.resume}: {problem}")
    return state


def restore(run: Run, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Load the resumed state into ``model``/``optimizer`` and the RNGs; returns the step (0 if fresh)."""
    if run.state is None:
        return 0
    model.load_state_dict(run.state["model"])
    optimizer.load_state_dict(run.state["optimizer"])
    run.gen.set_state(run.state["sampler_rng"])
    set_rng_state(run.state["rng"])
    return int(run.state["step"])


def save(run: Run, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer, extra: dict,
         metric: float | None = None) -> Path:  # fmt: skip
    """Atomic checkpoint of everything a resume needs, plus ``extra`` (configs, stats, data info).

    Raises:
        RunDirError: the write failed (full disk...): the path, the errno text and the last
            whole checkpoint to resume from.
    """
    from mimic2dm.utils.checkpoint import CheckpointWriteError

    state = {"kind": run.kind, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "sampler_rng": run.gen.get_state(), "rng": rng_state(), **extra}  # fmt: skip
    try:
        return run.ckpt.save(state, step, metric)
    except CheckpointWriteError as e:
        last = run.ckpt.last
        point = (f"the last whole checkpoint is {last}: continue with resume={run.dir}" if last.is_file()
                 else "no whole checkpoint was written: this run cannot be resumed")  # fmt: skip
        raise RunDirError(f"{os_error_line(e)}; {point}") from None


@contextlib.contextmanager
def stop_on_signals(run: Run) -> Iterator[None]:
    """SIGINT / SIGTERM during the loop: finish the step, checkpoint and stop (a second one
    stops at once). Only the main thread can install handlers."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(signum, frame) -> None:
        if run.stop_signal:
            raise KeyboardInterrupt
        run.stop_signal = int(signum)
        log.warning("%s: stopping after this step, with a checkpoint", signal.Signals(signum).name)

    signals = (signal.SIGINT, signal.SIGTERM)
    previous = {s: signal.signal(s, on_signal) for s in signals}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _optimizer_step(model, optimizer, loss_fn, lr: float, grad_clip) -> dict:
    for group in optimizer.param_groups:
        group["lr"] = lr
    out = loss_fn()
    optimizer.zero_grad(set_to_none=True)
    out["loss"].backward()
    if grad_clip:
        torch.nn.utils.clip_grad_norm_(model.parameters(), float(grad_clip))
    optimizer.step()
    return out


def _evaluate(
    run: Run, eval_fn, step: int, max_steps: int, prefix: str, metric: str | None
) -> float | None:
    """Run ``eval_fn``, log its numbers (console and ``eval/*``); returns the ``metric`` entry."""
    res = {k: v for k, v in eval_fn().items() if isinstance(v, (int, float))}
    log.info(
        "%s step %d/%d: %s",
        prefix,
        step,
        max_steps,
        ", ".join(f"{k} {v:.4g}" for k, v in res.items()),
    )
    run.logger.log({f"eval/{k}": v for k, v in res.items()}, step)
    return res.get(metric) if metric else None


def train_loop(
    run: Run,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    step: int,
    train: TrainConfig,
    optim: OptimConfig,
    loss_fn: Callable[[], dict],
    eval_fn: Callable[[], dict] | None,
    save_fn: Callable[[int, float | None], None],
    metric: str | None = None,
    prefix: str = "train",
) -> int:
    """The straight training loop of every generator app.

    Args:
        run: the open run (logging, progress).
        model, optimizer: trained in place; ``step``: first step (resume).
        train: ``max_steps``, ``eval_every``, ``ckpt_every``; optim: learning-rate schedule, ``grad_clip``.
        loss_fn: draws a batch and returns a dict with ``loss`` (other entries are logged).
        eval_fn: deterministic evaluation (must not draw from the global RNG).
        save_fn: ``save_fn(step, metric)`` writes a checkpoint.
        metric: eval entry used for ``best.pt`` (lower is better).

    Returns:
        The final step.
    """
    max_steps, log_every = train.max_steps, max(1, int(run.cfg.logger.log_every))
    eval_every, ckpt_every = train.eval_every, train.ckpt_every
    saved = step
    model.train()
    with make_progress() as progress, stop_on_signals(run):
        task = progress.add_task(prefix, total=max_steps, completed=step, info="")
        while step < max_steps and not run.stop_signal:
            lr = optim.lr_at(step, max_steps)
            out = _optimizer_step(model, optimizer, loss_fn, lr, optim.grad_clip)
            step += 1
            if step % log_every == 0 or step == max_steps:
                scalars = {
                    f"{prefix}/{k}": float(torch.as_tensor(v).detach()) for k, v in out.items()
                }
                run.logger.log(scalars | {f"{prefix}/lr": lr}, step)
            value = None
            if eval_fn is not None and eval_every and (step % eval_every == 0 or step == max_steps):
                value = _evaluate(run, eval_fn, step, max_steps, prefix, metric)
                model.train()
            if value is not None or (ckpt_every and step % ckpt_every == 0) or step == max_steps:
                save_fn(step, value)
                saved = step
            progress.update(task, completed=step, info=f"loss {float(out['loss'].detach()):.4f}")
    if saved != step:
        save_fn(step, None)
    if run.stop_signal:
        name = signal.Signals(run.stop_signal).name
        run.close()
        log.warning("stopped by %s at step %d; checkpoint %s; continue with resume=%s", name, step, run.ckpt.last, run.dir)  # fmt: skip
        raise SystemExit(128 + run.stop_signal)  # what a shell reports for a job stopped by it
    return step


def fit(run: Run, model: torch.nn.Module, app: AppConfig, loss_fn: Callable[[], dict],
        eval_fn: Callable[[], dict] | None, extra: dict, metric: str | None, prefix: str,
        default_betas: tuple[float, float] = DEFAULT_BETAS) -> int:  # fmt: skip
    """Optimiser of ``app.optim``, resume, then :func:`train_loop` with checkpoints holding ``extra``.

    Returns:
        The final step.
    """
    optimizer = make_optimizer(model, app.optim, default_betas)
    step = restore(run, model, optimizer)

    def save_fn(s: int, value: float | None) -> None:
        save(run, s, model, optimizer, extra, value)

    return train_loop(run, model, optimizer, step, app.train, app.optim, loss_fn, eval_fn, save_fn, metric, prefix)  # fmt: skip


def finish(run: Run, metrics: dict, log_prefix: str | None = None) -> dict:
    """The apps' closing: log the float metrics under ``log_prefix/`` (if given), write
    ``RUN/metrics.json``, close the loggers; returns ``metrics``."""
    if log_prefix:
        floats = {f"{log_prefix}/{k}": v for k, v in metrics.items() if isinstance(v, float)}
        run.logger.log(floats, int(metrics["step"]))
    run.logger.log_json("metrics", metrics)
    run.close()
    return metrics


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


def load_data(run: Run) -> tuple[ClipSet, ClipSet, FeatureStats]:
    """Training clips, evaluation clips and normalisation of ``run``; a resumed run keeps
    its checkpoint's labels, keypoint set and statistics. Then the run's config and loggers
    are written (not before: a dataset that fails its checks leaves none of them).

    Raises:
        ConfigError: the clips cannot be trained on (mixed keypoint sets, too short...), one line.
    """
    from mimic2dm.motion.format import MotionFormatError
    from mimic2dm.utils.validate import ConfigError

    st = run.state
    try:
        if st is None:
            clips, held = load_train_and_eval(run.cfg)
            stats = clips.compute_stats()
        else:
            clips, held = load_train_and_eval(run.cfg, st["data"]["label_names"], st["data"]["keypoint_set"])  # fmt: skip
            stats = FeatureStats.from_dict(st["stats"])
    except (MotionFormatError, ValueError) as e:
        if isinstance(e, ConfigError):
            raise
        raise ConfigError(
            "gen_data", str(run.cfg.gen_data.get("dir")), f"clips that can be trained on: {e}"
        ) from None
    start_logging(run)
    return clips, held, stats
