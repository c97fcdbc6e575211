"""``mimic2dm-train`` (``python -m mimic2dm.train``): train a policy on a registered task
(default: the view-agnostic 2D tracker; ``task=stand`` and any other ``conf/task`` entry).

A Hydra app over ``conf/tracker.yaml`` (groups ``task``, ``character``, ``engine``,
``data``, ``train``, ``logger``, ``ray``). The config is read here only, parsed and
checked once (:func:`mimic2dm.app.runspec.parse_run`): it becomes a ``RunSpec``, the
``TaskSpec`` every env is built from and rl-games' params dict. Then envs
are built in-process or in Ray actors (:mod:`mimic2dm.rl.vecenv`), and the PPO agent
(:mod:`mimic2dm.rl.agent`) trains, logging through :mod:`mimic2dm.rl.observer`.

``resume=RUN_DIR`` continues a run from ``RUN_DIR/checkpoints/last.pt`` with its saved
config; ``key=value`` overrides given with it (e.g. ``train.max_epochs=400``) apply on
top, config groups cannot change. :func:`train` is the same thing as a function.

Ctrl-C (SIGINT) or SIGTERM (Slurm, ``docker stop``, ``ray job stop``) during training ends
the run at the end of the current epoch with a final checkpoint and ``summary.json``
(``"interrupted": true``, ``"signal"``), and the app exits with 128 + the signal, 130 or 143
(``resume=RUN_DIR`` continues from there); a second signal stops at once, leaving the
last checkpoint written before it. rl-games' prints go to the run's log, not the console.

Run directories (:mod:`mimic2dm.utils.rundir`, docs/training.md "Run directories"): one
writer per directory (a lock), a new run refuses a directory holding a run unless
``overwrite=true``, every check of a resume and of the data comes before anything is
written, and a bad setting, clip, directory or full disk is one line and exit 1.
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

from mimic2dm.utils.rundir import RunDirError

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
if not OmegaConf.has_resolver("m2d_shared"):
    # ``${m2d_shared:}``: the shared data folder, from the one function that reads MIMIC2DM_SHARED
    def _shared() -> str:
        from mimic2dm.utils.paths import shared_dir

        return str(shared_dir())

    OmegaConf.register_new_resolver("m2d_shared", _shared)
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


SHAPE_KEYS = (
    "train.num_envs", "train.env_groups", "train.network.encoder_units", "train.network.head_units",
    "train.network.separate_critic", "train.network.learn_sigma", "task.name", "task.num_views",
    "task.num_future", "task.objects", "character.name", "ray.enabled", "ray.envs_per_actor", "data.clips", "data.select",
)  # fmt: skip
"""Settings a resume cannot change: the checkpoint holds tensors shaped by them (network
layers, one state per env, ASI buffers per clip frame, the episodes' views)."""


def _resume_error(run_dir, what: str, missing: bool = False) -> RunDirError:
    from mimic2dm.utils.rundir import NoRunError

    return (NoRunError if missing else RunDirError)(f"resume={run_dir}: {what}")


def effective_config(cfg: DictConfig, resume_overrides: Sequence[str] = ()) -> DictConfig:
    """The config a run uses: ``cfg``, or for ``resume`` the run's saved config plus overrides.

    Every check of a resume happens here, before anything is written.

    Raises:
        RunDirError: no such run directory, no ``config.yaml`` or ``checkpoints/last.pt`` in
            it, or an override changes a config group or a :data:`SHAPE_KEYS` setting (one
            line naming the key and both values).
    """
    if not cfg.get("resume"):
        return cfg
    run_dir = Path(str(cfg.resume))
    saved_path = run_dir / "config.yaml"
    if not run_dir.is_dir():
        raise _resume_error(run_dir, "no such run directory", missing=True)
    if not saved_path.is_file():
        raise _resume_error(run_dir, "no config.yaml there (not a tracker run directory)", True)
    if not (run_dir / "checkpoints" / "last.pt").is_file():
        raise _resume_error(
            run_dir, "no checkpoints/last.pt to continue from (the run saved no checkpoint)", True
        )
    saved = OmegaConf.load(saved_path)
    for o in resume_overrides:
        key = o.split("=", 1)[0].lstrip("+~")
        if key in GROUPS:
            raise _resume_error(run_dir, f"config group {key!r} cannot change on resume (got {o!r}); "
                                f"start a new run from its weights with init_from={run_dir}")  # fmt: skip
    try:
        merged = OmegaConf.merge(
            saved, OmegaConf.from_dotlist([o.lstrip("+") for o in resume_overrides])
        )
    except Exception as e:  # noqa: BLE001 - OmegaConf's errors: a malformed or mistyped override
        raise _resume_error(
            run_dir, f"cannot apply the overrides {list(resume_overrides)}: {e}".splitlines()[0]
        ) from None
    for key in SHAPE_KEYS:
        before, after = OmegaConf.select(saved, key), OmegaConf.select(merged, key)
        if before != after:
            before, after = _plain(before), _plain(after)
            raise _resume_error(run_dir, f"{key} cannot change on resume ({before} in {saved_path}, {after} given): "
                                f"the checkpoint's tensors are shaped by it; start a new run from its weights "
                                f"with init_from={run_dir}")  # fmt: skip
    merged.resume, merged.run_dir = str(run_dir), str(run_dir)
    return merged


def _plain(value):
    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value


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
        raise _resume_error(cfg.resume, "no checkpoints/last.pt to continue from", True)
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
        "collect_threads": tc.collect_threads, "overlap": tc.overlap, "epoch_callback": epoch_callback, "meta": _meta(cfg, spec, params, info),
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
        "signal": signal.Signals(agent.stop_signal).name if agent.stop_requested else None,
    }  # fmt: skip


def train(
    cfg: DictConfig, resume_overrides: Sequence[str] = (), epoch_callback: Callable | None = None
) -> dict:
    """Train (or resume) a tracker run.

    Order (docs/training.md "Run directories"): config and resume checks and the checks of
    existing clips; then the run directory's lock; a new run refuses a directory holding a
    run (unless ``overwrite``); the ``data`` recipes' clips are made (``RUN_DIR/data``) and
    checked; only then are ``config.yaml``, TensorBoard and wandb written. A resumed run's
    ``config.yaml`` is rewritten once its checkpoint has been restored.

    Args:
        cfg: composed tracker config (:func:`compose_config`); ``cfg.run_dir`` must be set
            unless called from the Hydra app or resuming.
        resume_overrides: ``key=value`` changes to a resumed run's saved config.
        epoch_callback: ``fn(agent)`` after every epoch (tests, tools).

    Returns:
        Summary dict (also written to ``RUN_DIR/summary.json``): run_dir, epochs, frames,
        means of the last epochs (episode length / return, reward, samples/s),
        checkpoints, per-epoch history.

    Raises:
        ConfigError, MotionFormatError, RunDirError: a bad setting, clip or run directory
            (one-line messages).
    """
    with opened_run(cfg, resume_overrides, "train") as r:
        return _run(r.cfg, r.run, r.spec, r.run_dir, r.checkpoint, epoch_callback)


@dataclasses.dataclass
class OpenRun:
    """A run whose directory :func:`opened_run` holds: its effective config, parsed config,
    ``TaskSpec`` (data made and checked), directory, checkpoint to resume from (None: a new
    run) and what the app's own ``check`` returned."""

    cfg: DictConfig
    run: object
    spec: object
    run_dir: Path
    checkpoint: Path | None
    checked: object = None


@contextlib.contextmanager
def opened_run(cfg: DictConfig, resume_overrides: Sequence[str] = (), app: str = "train",
               check: Callable | None = None, check_data: Callable | None = None) -> Iterator[OpenRun]:  # fmt: skip
    """The run-directory protocol of the run apps (``mimic2dm-train``, ``mimic2dm-distill``;
    docs/training.md "Run directories"), holding the directory's lock while the body runs.

    Order: the effective config (:func:`effective_config`) and its parse; the app's ``check(cfg,
    run)`` (its own settings; the value is kept as ``checked``); the resume checkpoint; then
    the lock, a new run's claim on the directory, the data recipes' clips made and checked,
    ``check_data(spec, checked)`` (its value replaces ``checked``), and only then a new
    run's ``config.yaml``.
    """
    from mimic2dm.app.runspec import parse_run
    from mimic2dm.utils.run_logging import save_resolved_config
    from mimic2dm.utils.rundir import RunLock, check_writable, claim_new_run, clean_stale_temps

    cfg = effective_config(cfg, resume_overrides)
    if not cfg.get("run_dir"):
        raise ValueError(f"{app}(cfg): set cfg.run_dir (the Hydra app sets it to its output dir)")
    run_dir = Path(str(cfg.run_dir)).resolve()
    run = parse_run(cfg)  # before anything is written: bad values leave no run dir
    checked = check(cfg, run) if check is not None else None
    ckpt = _resume_checkpoint(cfg)
    check_writable(run_dir, "run_dir", is_dir=True)
    with RunLock(run_dir):
        if ckpt is None:
            claim_new_run(run_dir, bool(cfg.get("overwrite")))
        clean_stale_temps(run_dir / "checkpoints")
        spec = _prepare_data(cfg, run, run_dir)
        if check_data is not None:
            checked = check_data(spec, checked)
        if ckpt is None:
            save_resolved_config(cfg, run_dir)
        yield OpenRun(cfg, run, spec, run_dir, ckpt, checked)


def _prepare_data(cfg: DictConfig, run, run_dir: Path):
    """Make the ``data`` group's clips and check every clip (the character's keypoint set,
    one set for all, length, cameras) before the run writes anything else; returns the
    ``TaskSpec`` of the parsed run ``run``."""
    from mimic2dm.app.data import prepare_data
    from mimic2dm.app.runspec import check_data_files

    data_files = prepare_data(cfg.data, run_dir)
    if run.needs_data:
        check_data_files(cfg, run.control_hz, made=data_files)
    return run.task_spec(data_files)


def _run(cfg: DictConfig, run, spec, run_dir: Path, ckpt: Path | None, epoch_callback) -> dict:
    from mimic2dm.rl.observer import TrackerObserver
    from mimic2dm.rl.vecenv import make_vecenv
    from mimic2dm.utils.checkpoint import CheckpointWriteError, load_checkpoint, seed_everything
    from mimic2dm.utils.reporting import library_output_to_log
    from mimic2dm.utils.run_logging import RunLogger, save_resolved_config

    tc, rc = run.train, run.ray
    seed_everything(run.seed)
    if ckpt is not None and int(load_checkpoint(ckpt)["epoch"]) >= tc.max_epochs:
        log.warning(
            "resume: %s is already at train.max_epochs=%d; nothing to do", ckpt, tc.max_epochs
        )
    lg = run.logger
    logger = RunLogger(run_dir, config=OmegaConf.to_container(cfg, resolve=True), project=lg.project,
                       use_wandb=lg.wandb, use_tensorboard=lg.tensorboard, name=f"{cfg.name}-{run_dir.name}")  # fmt: skip
    observer = TrackerObserver(logger, log_every=lg.log_every, progress=bool(cfg.progress),
                               video_every=lg.video_every, evaluator=_evaluator(spec),
                               video_fps=spec.control_hz)  # fmt: skip
    vec_env = None
    t0 = time.perf_counter()
    try:
        with library_output_to_log("rl_games"):  # its set-up and end-of-run prints
            vec_env = make_vecenv(spec, tc.num_envs, run.seed, rc, run_dir, tc.env_groups)
            agent = _build_agent(cfg, tc, vec_env, observer, run_dir, spec, epoch_callback)
            _start_weights(agent, cfg, tc, ckpt)
            if ckpt is not None:
                save_resolved_config(cfg, run_dir)  # the resumed run has started: its config now
            if agent.epoch_num < tc.max_epochs:
                with stop_on_signals(agent):
                    agent.train()
    except CheckpointWriteError as e:
        raise RunDirError(_write_failure(e, run_dir)) from None
    finally:
        observer.close()
        logger.close()
        if vec_env is not None:
            vec_env.close()
    return _finish(agent, observer, run_dir, time.perf_counter() - t0)


def _start_weights(agent, cfg: DictConfig, tc, ckpt: Path | None) -> None:
    if ckpt is not None:
        agent.restore(str(ckpt))
    elif cfg.get("init_from"):
        init_weights(agent, str(cfg.init_from))
        if tc.learning_rate > FINE_TUNE_LR:
            log.warning(FINE_TUNE_WARNING, tc.learning_rate, FINE_TUNE_LR)


def _write_failure(e: OSError, run_dir: Path) -> str:
    """One line for a checkpoint that could not be written: the path, the errno text and
    the last whole checkpoint to resume from."""
    from mimic2dm.utils.checkpoint import load_checkpoint
    from mimic2dm.utils.rundir import os_error_line

    last = run_dir / "checkpoints" / "last.pt"
    try:
        point = f"the last whole checkpoint is {last} (epoch {load_checkpoint(last)['epoch']}): continue with resume={run_dir}"
    except (OSError, ValueError, KeyError):
        point = "no whole checkpoint was written: this run cannot be resumed"
    return f"{os_error_line(e)}; {point}"


def _finish(agent, observer, run_dir: Path, wall: float) -> dict:
    summary = _summary(agent, observer, run_dir, wall, agent.resumed_from)
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
    log.info("run %s: %d epochs, %d frames, episode length %s", run_dir, summary["epochs"], summary["frames"],
             summary["episode_length"])  # fmt: skip
    if summary["interrupted"]:
        log.warning("stopped by %s at epoch %d; checkpoint %s; continue with resume=%s", summary["signal"],
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


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""Signals that stop a run with a final checkpoint: Ctrl-C, and the SIGTERM of Slurm,
``docker stop``, ``ray job stop`` and ``kill``. The app exits with 128 + the signal."""


class Stopped(KeyboardInterrupt):
    """A stop signal outside the epoch loop (before training, or a second one): stop at
    once. ``signum`` gives the exit status, 128 + signum."""

    def __init__(self, signum: int = signal.SIGINT):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)


@contextlib.contextmanager
def stop_on_signals(agent) -> Iterator[None]:
    """First SIGINT / SIGTERM: finish the epoch, save and stop (:meth:`TrackerAgent.request_stop`);
    a second one raises :class:`Stopped` at once. Only the main thread can do this."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(signum, frame) -> None:
        if agent.stop_requested:
            raise Stopped(signum)
        agent.request_stop(signum)
        name = signal.Signals(signum).name
        log.warning("%s: stopping when epoch %d is complete, with a checkpoint (%s again: "
                    "stop now, without one)", name, agent.epoch_num, name)  # fmt: skip

    previous = {s: signal.signal(s, on_signal) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _raise_stopped(signum, frame) -> None:
    raise Stopped(signum)


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
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    overrides = (
        [o for o in hc.overrides.task if not o.startswith("resume=")] if cfg.get("resume") else []
    )
    if not cfg.get("run_dir"):
        cfg.run_dir = hc.runtime.output_dir
    new_dirs = _new_dirs(hc, cfg)
    with one_line_errors(new_dirs):
        summary = train(cfg, resume_overrides=overrides)
    if summary["interrupted"]:
        # 128 + the signal: what a shell reports for a job stopped by it (130 Ctrl-C, 143 SIGTERM)
        raise SystemExit(128 + summary_signal(summary))
    return objective_value(summary, str(cfg.get("objective") or "episode/return"))


def summary_signal(summary: dict) -> int:
    """The number of the signal that stopped a run (SIGINT when the summary names none)."""
    return int(signal.Signals[summary.get("signal") or "SIGINT"])


@contextlib.contextmanager
def one_line_errors(new_dirs: Sequence[Path] = ()) -> Iterator[None]:
    """A bad config, clip or run directory, or an output that cannot be written: ``error:
    <one line>`` on stderr and exit 1, the run dirs this invocation created removed
    (``HYDRA_FULL_ERROR=1``: the traceback instead)."""
    from mimic2dm.motion.format import MotionFormatError
    from mimic2dm.rl.agent import TrainingDiverged
    from mimic2dm.utils.rundir import os_error_line
    from mimic2dm.utils.validate import ConfigError, full_errors

    try:
        yield
    except TrainingDiverged as e:  # the run and its checkpoints stay
        if full_errors():
            raise
        print(f"error: {e}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    except (ConfigError, MotionFormatError, RunDirError, OSError) as e:
        _remove_new_dirs(sorted(new_dirs, key=lambda d: -len(d.parts)))  # job dirs before sweep
        if full_errors():
            raise
        line = os_error_line(e) if isinstance(e, OSError) and e.filename else str(e)
        print(f"error: {line}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None


def _preflight(argv: Sequence[str]) -> None:
    """What can be checked from the command line before Hydra creates (or writes ``.hydra/``
    into) the run directory: a ``resume=`` and its overrides, a busy or unwritable
    ``hydra.run.dir``, a directory holding a run without ``overwrite=true``. Sweeps (``-m``)
    are checked per job, in :func:`train`.

    Raises:
        RunDirError, OSError: as :func:`train` would raise them later.
    """
    from mimic2dm.utils.rundir import preflight_run_dir

    if any(
        a in ("-m", "--multirun", "-h", "--help", "--hydra-help", "-c", "--cfg", "-i", "--info")
        for a in argv
    ):
        return
    kv = dict(a.split("=", 1) for a in argv if "=" in a and not a.startswith("-"))
    if kv.get("resume") not in (None, "", "null"):
        overrides = [
            a for a in argv if "=" in a and not a.startswith(("-", "hydra.", "hydra/", "resume="))
        ]
        effective_config(OmegaConf.create({"resume": kv["resume"]}), overrides)
        preflight_run_dir(kv["resume"], "resume", resume=True, overwrite=False)
        return
    overwrite = kv.get("overwrite", "false").lower() == "true"
    for key in ("hydra.run.dir", "run_dir"):
        if kv.get(key) not in (None, "", "null"):
            preflight_run_dir(kv[key], key, resume=False, overwrite=overwrite)


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
    console_main(_app)


def console_main(app: Callable[[], object]) -> None:
    """The console entry point of a run app (``mimic2dm-train``, ``mimic2dm-distill``): the
    command line's run-directory checks before Hydra starts (:func:`_preflight`), then the
    Hydra ``app``; a stop signal outside its epoch loop exits 128 + the signal, without a
    traceback."""
    # SIGTERM before (or after) the epoch loop ends the run at once, releasing its lock
    signal.signal(signal.SIGTERM, _raise_stopped)
    try:
        with one_line_errors():
            _preflight(sys.argv[1:])
        app()
    except KeyboardInterrupt as e:
        # Ctrl-C or SIGTERM before training started, or a second one: no traceback, the usual status
        signum = getattr(e, "signum", signal.SIGINT)
        print(f"stopped by {signal.Signals(signum).name}", file=sys.stderr, flush=True)
        raise SystemExit(128 + signum) from None


if __name__ == "__main__":
    main()
