"""``mimic2dm-train`` (``python -m mimic2dm.train``): train a policy on a registered task
(default: the view-agnostic 2D tracker; ``task=stand`` and any other ``conf/task`` entry).

A Hydra app over ``conf/tracker.yaml`` (groups ``task``, ``character``, ``engine``,
``data``, ``train``, ``logger``, ``ray``). The config is read here only: it becomes a
``TaskSpec`` (what every env is built from) and rl-games' params dict, once. Then envs
are built in-process or in Ray actors (:mod:`mimic2dm.rl.vecenv`), and the PPO agent
(:mod:`mimic2dm.rl.agent`) trains, logging through :mod:`mimic2dm.rl.observer`.

``resume=RUN_DIR`` continues a run from ``RUN_DIR/checkpoints/last.pt`` with its saved
config; ``key=value`` overrides given with it (e.g. ``train.max_epochs=400``) apply on
top, config groups cannot change. :func:`train` is the same thing as a function.

Ctrl-C (SIGINT) during training ends the run at the end of the current epoch with a final
checkpoint and ``summary.json`` (``"interrupted": true``), and the app exits with 130
(``resume=RUN_DIR`` continues from there); a second Ctrl-C stops at once, leaving the
last checkpoint written before it. rl-games' prints go to the run's log, not the console.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

log = logging.getLogger(__name__)

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
GROUPS = ("task", "character", "engine", "data", "train", "logger", "ray")

if not OmegaConf.has_resolver("m2d_root"):
    # the project root, so that paths in configs do not depend on the working directory
    OmegaConf.register_new_resolver("m2d_root", lambda: str(CONF_DIR.parent))
if not OmegaConf.has_resolver("m2d_or"):
    # ``${m2d_or:a,b}``: a unless it is null/empty (resume runs write into their own run dir)
    OmegaConf.register_new_resolver(
        "m2d_or", lambda a, b: b if a in (None, "", "null", "None") else a
    )
if not OmegaConf.has_resolver("m2d_character"):
    # ``${m2d_character:NAME,FIELD}``: a per-character fact read from its CharacterSpec, so
    # conf/character/*.yaml refers to the spec instead of copying it
    def _character_fact(name: str, field: str):
        from mimic2dm.characters import load_character

        return getattr(load_character(str(name)), str(field))

    OmegaConf.register_new_resolver("m2d_character", _character_fact)


def compose_config(overrides: Sequence[str] = ()) -> DictConfig:
    """The tracker config as ``mimic2dm-train OVERRIDES...`` would compose it (no Hydra app needed)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="tracker", overrides=list(overrides))


def effective_config(cfg: DictConfig, resume_overrides: Sequence[str] = ()) -> DictConfig:
    """The config a run uses: ``cfg``, or for ``resume`` the run's saved config plus overrides.

    Raises:
        FileNotFoundError: the run to resume has no ``config.yaml``.
        ValueError: an override tries to change a config group on resume.
    """
    if not cfg.get("resume"):
        return cfg
    run_dir = Path(str(cfg.resume))
    saved_path = run_dir / "config.yaml"
    if not saved_path.is_file():
        raise FileNotFoundError(
            f"resume={run_dir}: no config.yaml there (not a tracker run directory)"
        )
    saved = OmegaConf.load(saved_path)
    for o in resume_overrides:
        key = o.split("=", 1)[0].lstrip("+~")
        if key in GROUPS:
            raise ValueError(
                f"resume: config group {key!r} cannot change on resume (got override {o!r})"
            )
    views_before = OmegaConf.select(saved, "task.num_views")
    saved = OmegaConf.merge(
        saved, OmegaConf.from_dotlist([o.lstrip("+") for o in resume_overrides])
    )
    if OmegaConf.select(saved, "task.num_views") != views_before:
        # resume restores the envs' episodes, whose views are drawn per env: their count is fixed
        raise ValueError(f"resume: task.num_views cannot change on resume ({views_before} in {saved_path}); "
                         f"start a new run from its weights with init_from={run_dir}")  # fmt: skip
    saved.resume, saved.run_dir = str(run_dir), str(run_dir)
    return saved


def _meta(cfg: DictConfig, spec, params: dict, env_info: dict) -> dict:
    """What checkpoints carry to rebuild the network and the envs (see mimic2dm.rl.policy)."""
    return {
        "network": params["network"],
        "obs_dim": int(env_info["observation_space"].shape[0]),
        "action_dim": int(env_info["action_space"].shape[0]),
        "normalize_value": bool(params["config"]["normalize_value"]),
        "task_spec": spec.to_dict(),
        "config": OmegaConf.to_container(cfg, resolve=True),
    }


def _evaluator(spec) -> Callable | None:
    """``fn(model, epoch, frame, video_path)``: the task's evaluation of the current policy
    on the first training file (None when the task has no evaluation or no data)."""
    from mimic2dm.tasks.registry import load_task

    if load_task(spec.task).evaluate is None or not spec.data:
        return None

    def run(model, epoch: int, frame: int, video_out) -> dict:
        from mimic2dm.eval import evaluate
        from mimic2dm.rl.policy import Policy

        return evaluate(
            Policy(model, spec, {}, epoch, frame), list(spec.data[:1]), views=1, video_out=video_out
        )

    return run


def _resume_checkpoint(cfg: DictConfig) -> Path | None:
    if not cfg.get("resume"):
        return None
    path = Path(str(cfg.resume)) / "checkpoints" / "last.pt"
    if not path.is_file():
        raise FileNotFoundError(f"resume={cfg.resume}: no checkpoints/last.pt to continue from")
    return path


def _build_agent(cfg: DictConfig, tc, vec_env, observer, run_dir: Path, spec, epoch_callback):
    from rl_games.torch_runner import Runner

    import mimic2dm.rl.network  # noqa: F401 - registers the network builder
    from mimic2dm.rl.agent import TrackerAgent
    from mimic2dm.rl.config import ALGO_NAME, rl_games_params

    info = vec_env.get_env_info()
    params = rl_games_params(
        tc, vec_env.obs_layout(), vec_env.num_envs, int(cfg.seed), str(run_dir), spec.task
    )
    params["mimic2dm"] = {
        "run_dir": str(run_dir), "checkpoint": dataclasses.asdict(tc.checkpoint), "max_seconds": tc.max_seconds,
        "collect_threads": tc.collect_threads, "epoch_callback": epoch_callback, "meta": _meta(cfg, spec, params, info),
    }  # fmt: skip
    params["config"]["env_info"], params["config"]["vec_env"] = info, vec_env
    runner = Runner(algo_observer=observer)
    runner.algo_factory.register_builder(ALGO_NAME, lambda **kw: TrackerAgent(**kw))
    runner.load_config(params)  # not Runner.load: it would deep-copy the live vecenv
    return runner.algo_factory.create(ALGO_NAME, base_name="run", params=runner.params)


def _summary(agent, observer, run_dir: Path, wall: float, resumed_from) -> dict:
    tail = observer.history[-5:]

    def mean(key: str) -> float | None:
        vals = [h[key] for h in tail if key in h]
        return sum(vals) / len(vals) if vals else None

    ck = run_dir / "checkpoints"
    return {
        "run_dir": str(run_dir), "epochs": int(agent.epoch_num), "frames": int(agent.frame),
        "resumed_from_epoch": resumed_from, "wall_s": wall,
        "episode_length": mean("episode/length"), "episode_return": mean("episode/return"),
        "reward": mean("reward/total"), "samples_per_s": mean("perf/samples_per_s"),
        "env_steps_per_s": mean("perf/env_steps_per_s"),
        "actor_restarts": int(sum(h.get("ray/actor_restarts", 0) for h in observer.history)),
        "last_checkpoint": str(ck / "last.pt") if (ck / "last.pt").is_file() else None,
        "best_checkpoint": str(ck / "best.pt") if (ck / "best.pt").is_file() else None,
        "interrupted": bool(agent.stop_requested), "history": observer.history,
    }  # fmt: skip


def train(
    cfg: DictConfig, resume_overrides: Sequence[str] = (), epoch_callback: Callable | None = None
) -> dict:
    """Train (or resume) a tracker run.

    Args:
        cfg: composed tracker config (:func:`compose_config`); ``cfg.run_dir`` must be set
            unless called from the Hydra app or resuming.
        resume_overrides: ``key=value`` changes to a resumed run's saved config.
        epoch_callback: ``fn(agent)`` after every epoch (tests, tools).

    Returns:
        Summary dict (also written to ``RUN_DIR/summary.json``): run_dir, epochs, frames,
        means of the last epochs (episode length / return, reward, samples/s),
        checkpoints, per-epoch history.
    """
    from mimic2dm.rl.config import task_spec_from_cfg, validate_config
    from mimic2dm.rl.data import prepare_data
    from mimic2dm.rl.observer import TrackerObserver
    from mimic2dm.rl.vecenv import make_vecenv
    from mimic2dm.utils.checkpoint import load_checkpoint, seed_everything
    from mimic2dm.utils.reporting import library_output_to_log
    from mimic2dm.utils.run_logging import RunLogger, save_resolved_config

    cfg = effective_config(cfg, resume_overrides)
    if not cfg.get("run_dir"):
        raise ValueError("train(cfg): set cfg.run_dir (the Hydra app sets it to its output dir)")
    run_dir = Path(str(cfg.run_dir)).resolve()
    tc, rc = validate_config(cfg)  # before anything is written: bad values leave no run dir
    ckpt = _resume_checkpoint(cfg)
    seed_everything(int(cfg.seed))
    save_resolved_config(cfg, run_dir)
    data_files = prepare_data(cfg.data, run_dir)
    spec = task_spec_from_cfg(cfg, data_files)
    if ckpt is not None and int(load_checkpoint(ckpt)["epoch"]) >= tc.max_epochs:
        log.warning(
            "resume: %s is already at train.max_epochs=%d; nothing to do", ckpt, tc.max_epochs
        )
    lg = cfg.logger
    logger = RunLogger(run_dir, config=OmegaConf.to_container(cfg, resolve=True), project=str(lg.project),
                       use_wandb=bool(lg.wandb), use_tensorboard=bool(lg.tensorboard), name=f"{cfg.name}-{run_dir.name}")  # fmt: skip
    observer = TrackerObserver(logger, log_every=int(lg.log_every), progress=bool(cfg.progress),
                               video_every=int(lg.get("video_every", 0)), evaluator=_evaluator(spec),
                               video_fps=spec.control_hz)  # fmt: skip
    vec_env = None
    t0 = time.perf_counter()
    try:
        with library_output_to_log("rl_games"):  # its set-up and end-of-run prints
            vec_env = make_vecenv(spec, tc.num_envs, int(cfg.seed), rc, run_dir, tc.env_groups)
            agent = _build_agent(cfg, tc, vec_env, observer, run_dir, spec, epoch_callback)
            if ckpt is not None:
                agent.restore(str(ckpt))
            elif cfg.get("init_from"):
                init_weights(agent, str(cfg.init_from))
                if tc.learning_rate > FINE_TUNE_LR:
                    log.warning(FINE_TUNE_WARNING, tc.learning_rate, FINE_TUNE_LR)
            if agent.epoch_num < tc.max_epochs:
                with _stop_on_sigint(agent):
                    agent.train()
    finally:
        observer.close()
        logger.close()
        if vec_env is not None:
            vec_env.close()
    summary = _summary(agent, observer, run_dir, time.perf_counter() - t0, agent.resumed_from)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
    log.info(
        "run %s: %d epochs, %d frames, episode length %s",
        run_dir,
        summary["epochs"],
        summary["frames"],
        summary["episode_length"],
    )
    if summary["interrupted"]:
        log.warning("interrupted at epoch %d; checkpoint %s; continue with resume=%s",
                    summary["epochs"], summary["last_checkpoint"], run_dir)  # fmt: skip
    return summary


FINE_TUNE_LR = 1e-4
"""The learning rate the fine-tuning recipe uses with ``init_from`` (docs/tasks.md)."""
FINE_TUNE_WARNING = (
    "init_from at train.learning_rate=%g: a fresh optimiser at this rate moves a trained policy "
    "far in its first updates (KL 4-6 per epoch on cmu_walk at 1e-3, collapsing its episodes "
    "to ~1 step); fine-tune at train.learning_rate=%g (docs/tasks.md)"
)


def init_weights(agent, source: str) -> Path:
    """Start ``agent`` from the network weights (normalisers included) of the checkpoint
    ``source`` (a ``.pt`` or a run dir: its ``checkpoints/last.pt``); the optimiser, epoch
    counters and envs start fresh. The network is view-count free, so a 1-view tracker can
    be fine-tuned with ``task.num_views=2``.

    Raises:
        FileNotFoundError: no checkpoint there; ValueError: its network does not fit this run's.
    """
    from mimic2dm.utils.checkpoint import load_checkpoint

    path = Path(source)
    path = path / "checkpoints" / "last.pt" if path.is_dir() else path
    if not path.is_file():
        raise FileNotFoundError(
            f"init_from={source}: no checkpoint there (a .pt or a run dir with checkpoints/last.pt)"
        )
    ck = load_checkpoint(path)
    if "model" not in ck:
        raise ValueError(f"init_from={path}: not a tracker checkpoint (no 'model' weights)")
    try:
        agent.set_weights(ck)
    except RuntimeError as e:  # shape mismatch: other keypoints, character, network sizes
        raise ValueError(f"init_from={path}: its network does not fit this run's (same task, character "
                         f"and network sizes needed; only the view count may differ): {e}") from None  # fmt: skip
    log.info("initialised the network from %s (epoch %s)", path, ck.get("epoch"))
    return path


@contextlib.contextmanager
def _stop_on_sigint(agent) -> Iterator[None]:
    """First Ctrl-C: finish the epoch, save and stop (:meth:`TrackerAgent.request_stop`);
    a second one raises ``KeyboardInterrupt`` at once. Only the main thread can do this."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigint(signum, frame) -> None:
        if agent.stop_requested:
            raise KeyboardInterrupt
        agent.request_stop()
        log.warning("Ctrl-C: stopping when epoch %d is complete, with a checkpoint (Ctrl-C again: "
                    "stop now, without one)", agent.epoch_num)  # fmt: skip

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _new_dirs(hc, cfg: DictConfig) -> list[Path]:
    """Directories this invocation creates: Hydra's output dir (holding only ``.hydra`` and its
    log so far), ``run_dir`` when it does not exist yet, and a multirun's sweep dir. A resumed
    run creates none."""
    if cfg.get("resume"):
        return []
    out = []
    for d in {Path(hc.runtime.output_dir).resolve(), Path(str(cfg.run_dir)).resolve()}:
        if not d.exists() or all(p.name == ".hydra" or p.suffix == ".log" for p in d.iterdir()):
            out.append(d)
    if hc.mode.name == "MULTIRUN":
        out.append(Path(hc.sweep.dir).resolve())
    return out


def _remove_new_dirs(dirs: list[Path]) -> None:
    """Remove the run dirs of a run that failed validation (a sweep dir only once it is empty
    but for Hydra's ``multirun.yaml``)."""
    import shutil

    for d in dirs:
        if d.is_dir() and {p.name for p in d.iterdir()} <= {"multirun.yaml"}:
            shutil.rmtree(d, ignore_errors=True)
        elif d.is_dir() and not (d / "multirun.yaml").exists():
            shutil.rmtree(d, ignore_errors=True)


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="tracker")
def _app(cfg: DictConfig) -> float | None:
    import sys

    from hydra.core.hydra_config import HydraConfig

    from mimic2dm.motion.format import MotionFormatError
    from mimic2dm.utils.validate import ConfigError, full_errors

    hc = HydraConfig.get()
    overrides = (
        [o for o in hc.overrides.task if not o.startswith("resume=")] if cfg.get("resume") else []
    )
    if not cfg.get("run_dir"):
        cfg.run_dir = hc.runtime.output_dir
    new_dirs = _new_dirs(hc, cfg)
    try:
        summary = train(cfg, resume_overrides=overrides)
    except (ConfigError, MotionFormatError) as e:
        # a config or clip that fails validation: one line, exit 1, no run dir left behind
        _remove_new_dirs(sorted(new_dirs, key=lambda d: -len(d.parts)))  # job dirs before sweep
        if full_errors():
            raise
        print(f"error: {e}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    if summary["interrupted"]:
        raise SystemExit(130)  # 128 + SIGINT: what a shell reports for a job stopped by Ctrl-C
    return objective_value(summary, str(cfg.get("objective") or "episode/return"))


def objective_value(summary: dict, key: str) -> float | None:
    """The run's value for sweepers (Optuna): the last logged ``key`` of the per-epoch history
    (``eval/...`` keys exist only at evaluation epochs, every ``logger.video_every``)."""
    for h in reversed(summary["history"]):
        if key in h:
            return float(h[key])
    log.warning("objective=%s was never logged in %s (eval/* needs logger.video_every > 0 "
                "dividing train.max_epochs): returning None", key, summary["run_dir"])  # fmt: skip
    return None


def main() -> None:
    """Console entry point ``mimic2dm-train``."""
    try:
        _app()
    except KeyboardInterrupt:
        # Ctrl-C before training started, or a second one: no traceback, the usual status
        print("interrupted", file=sys.stderr, flush=True)
        raise SystemExit(130) from None


if __name__ == "__main__":
    main()
