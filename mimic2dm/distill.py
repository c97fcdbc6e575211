"""``mimic2dm-distill``: DAgger distillation of per-clip experts into one view-agnostic student.

A Hydra app over ``conf/distill.yaml`` (the tracker config, :mod:`mimic2dm.train`, plus
``experts`` and the ``distill`` block). The student is a 2D tracker of the run's task and
data (usually ``data=corpus task.view_mode=virtual``: every episode sees its clip through a
random virtual camera); each expert is a tracker checkpoint trained on some of those clips,
either a 2D tracker (it sees what the student sees) or a 3D tracker (``task=tracking3d``: it
sees the clip's 3D keypoints, privileged information the task appends for it with
``task.privileged_3d``, never given to the student). Each clip is labelled by the expert
trained on it (matched by file name).

DAgger (Ross et al. 2011): every iteration runs ``distill.steps`` control steps of all envs,
each env acting with the expert's action with probability ``beta`` and the student's
otherwise (``beta`` falls linearly from ``distill.beta_start`` to ``distill.beta_end`` over
``distill.beta_iterations``); every visited state is labelled with its expert's
deterministic action and added to a replay buffer of the last ``distill.buffer_size``
samples, on which the student's action mean is regressed (mean squared error). The
student's critic learns the discounted 2D-reward returns of the same rollouts (lambda
returns bootstrapped with itself), so PPO fine-tuning (``mimic2dm-train init_from=RUN``)
starts with a critic as well as an actor.

The student's checkpoints are tracker checkpoints (``mimic2dm eval``, ``init_from``,
``mimic2dm control``) that also carry the optimiser, the buffer, the envs' episodes and the
RNG states, so ``resume=RUN_DIR`` continues exactly. Envs run in-process or in Ray actors
(``ray=local``) as in training; progress on the console, metrics to wandb/TensorBoard;
Ctrl-C or SIGTERM stops at the end of the iteration with a checkpoint (exit 130 / 143).
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from mimic2dm.train import CONF_DIR

log = logging.getLogger(__name__)


def compose_distill_config(overrides=()) -> DictConfig:
    """The config as ``mimic2dm-distill OVERRIDES...`` would compose it (no Hydra app needed)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose(config_name="distill", overrides=list(overrides))


@dataclass
class DistillConfig:
    """The ``distill`` block (``conf/distill.yaml``).

    Attributes:
        steps: control steps of every env per iteration.
        max_iterations, max_seconds: stop at whichever comes first (0 seconds: no limit).
        beta_start, beta_end, beta_iterations: probability that an env acts with its
            expert's action, falling linearly over ``beta_iterations``.
        action_noise: std of Gaussian noise added to the executed actions (state coverage).
        buffer_size: samples kept for regression (the newest).
        batch_size, updates: minibatches per iteration and their size.
        learning_rate, value_coef, max_grad_norm: the student's optimiser.
        checkpoint_every, eval_every: iterations between checkpoints / evaluations (0: off;
            a checkpoint is always written at the end).
    """

    steps: int = 32
    max_iterations: int = 1000
    max_seconds: float = 0.0
    beta_start: float = 1.0
    beta_end: float = 0.0
    beta_iterations: int = 100
    action_noise: float = 0.05
    buffer_size: int = 65536
    batch_size: int = 2048
    updates: int = 16
    learning_rate: float = 5e-4
    value_coef: float = 0.5
    max_grad_norm: float = 1.0
    checkpoint_every: int = 10
    eval_every: int = 50

    def __post_init__(self) -> None:
        from mimic2dm.utils.validate import check

        for name in ("steps", "max_iterations", "batch_size", "updates", "buffer_size"):
            check(f"distill.{name}", getattr(self, name), ge=1, integer=True)
        for name in ("beta_start", "beta_end"):
            check(f"distill.{name}", getattr(self, name), ge=0.0, le=1.0)
        check("distill.beta_iterations", self.beta_iterations, ge=0, integer=True)
        for name in ("max_seconds", "action_noise", "value_coef"):
            check(f"distill.{name}", getattr(self, name), ge=0.0)
        check("distill.learning_rate", self.learning_rate, gt=0.0)
        check("distill.max_grad_norm", self.max_grad_norm, gt=0.0)
        for name in ("checkpoint_every", "eval_every"):
            check(f"distill.{name}", getattr(self, name), ge=0, integer=True)
        if self.batch_size > self.buffer_size:
            from mimic2dm.utils.validate import ConfigError

            raise ConfigError(
                "distill.batch_size",
                self.batch_size,
                f"at most distill.buffer_size ({self.buffer_size})",
            )

    def beta(self, iteration: int) -> float:
        """The expert's share of actions at ``iteration`` (0-based)."""
        if self.beta_iterations == 0:
            return self.beta_end
        f = min(1.0, iteration / self.beta_iterations)
        return self.beta_start + (self.beta_end - self.beta_start) * f


@dataclass
class Expert:
    """A teacher: a loaded tracker, the clips (file names) it trained on, what it observes."""

    path: Path
    policy: object
    clips: frozenset[str]
    privileged: bool  # a 3D tracker: observes the appended 3D goal, not the 2D views


def load_experts(sources: list[str]) -> list[Expert]:
    """Load the ``experts`` (checkpoints or run dirs).

    Raises:
        ConfigError: none given; FileNotFoundError / ValueError: a checkpoint that cannot
            be loaded (naming it) or a task other than tracking2d / tracking3d.
    """
    from mimic2dm.rl.policy import load_policy
    from mimic2dm.utils.validate import ConfigError

    if not sources:
        raise ConfigError(
            "experts",
            [],
            "one or more expert checkpoints (.pt or run dirs), e.g. 'experts=[runs/walk]'",
        )
    out = []
    for i, src in enumerate(sources):
        path = Path(str(src))
        ck = path / "checkpoints" / "last.pt" if path.is_dir() else path
        if not ck.is_file():
            raise FileNotFoundError(
                f"experts[{i}]={src}: no checkpoint there (a .pt or a run dir with checkpoints/last.pt)"
            )
        policy = load_policy(ck)
        task = policy.env_spec.task
        if task not in ("tracking2d", "tracking3d"):
            raise ValueError(
                f"experts[{i}]={ck}: a {task!r} policy; experts are tracking2d or tracking3d trackers"
            )
        clips = frozenset(Path(p).name for p in policy.env_spec.data)
        out.append(Expert(ck, policy, clips, task == "tracking3d"))
    return out


def expert_of_clips(experts: list[Expert], data: list[str]) -> torch.Tensor:
    """``[C]`` index of the expert labelling each clip of ``data`` (the first that trained on
    a file of the same name).

    Raises:
        ValueError: clips no expert trained on (all named).
    """
    owner, missing = [], []
    for p in data:
        name = Path(p).name
        hits = [e for e, ex in enumerate(experts) if name in ex.clips]
        owner.append(hits[0] if hits else -1)
        if not hits:
            missing.append(name)
    if missing:
        raise ValueError(f"no expert trained on {len(missing)} of the {len(data)} clips: {', '.join(missing[:10])}"
                         + (" ..." if len(missing) > 10 else "") + "; give experts for them (experts=[...])")  # fmt: skip
    return torch.tensor(owner, dtype=torch.long)


class Labeller:
    """The experts' deterministic actions for the student's env observations.

    Args:
        experts: the teachers; owner: ``[C]`` expert of each clip.
        layout: the envs' observation layout (``prop``, ``view``, ``views``, ``privileged``).
        action_dim: the student's action size.
    """

    def __init__(self, experts: list[Expert], owner: torch.Tensor, layout: dict, action_dim: int):
        self.experts, self.owner = experts, owner
        self.P = int(layout["prop"])
        self.D = self.P + int(layout["views"]) * int(layout["view"])
        self.privileged = int(layout.get("privileged", 0))
        for e in experts:
            m = e.policy.meta
            if int(m["action_dim"]) != action_dim:
                raise ValueError(
                    f"expert {e.path}: {m['action_dim']} actions, the student {action_dim} (another character?)"
                )
            want = self.P + self.privileged - 1 if e.privileged else self.D
            if int(m["obs_dim"]) != want:
                raise ValueError(f"expert {e.path}: observations of width {m['obs_dim']}, this run gives it {want} "
                                 "(the same num_future, keypoints and views are needed)")  # fmt: skip

    def student_obs(self, obs: torch.Tensor) -> torch.Tensor:
        return obs[:, : self.D]

    @torch.no_grad()
    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        """Labels ``[N, A]`` for env observations ``obs [N, D (+ privileged)]``."""
        if self.privileged:
            clip = obs[:, self.D].round().long()
        else:  # without the appended clip index, every env's clip is owned by the one expert
            clip = torch.zeros(obs.shape[0], dtype=torch.long)
        who = self.owner[clip.clamp(0, len(self.owner) - 1)]
        out = None
        for e, ex in enumerate(self.experts):
            rows = (who == e).nonzero(as_tuple=True)[0]
            if rows.numel() == 0:
                continue
            o = obs[rows]
            x = (
                torch.cat([o[:, : self.P], o[:, self.D + 1 :]], dim=-1)
                if ex.privileged
                else o[:, : self.D]
            )
            a = ex.policy.act(x, deterministic=True)
            if out is None:
                out = torch.zeros(obs.shape[0], a.shape[1])
            out[rows] = a
        return out


class Distiller:
    """The DAgger loop over a vecenv (see the module docstring).

    ``stop_requested`` / :meth:`request_stop` / ``epoch_num`` are what
    :func:`mimic2dm.train.stop_on_signals` uses.
    """

    def __init__(self, cfg: DictConfig, dc: DistillConfig, run, spec, vec_env, labeller: Labeller, run_dir: Path,
                 logger, progress: bool):  # fmt: skip
        from mimic2dm.rl.config import rl_games_params
        from mimic2dm.rl.policy import build_model
        from mimic2dm.rl.vecenv import env_info
        from mimic2dm.train import _meta

        self.cfg, self.dc, self.spec, self.vec = cfg, dc, spec, vec_env
        self.label, self.run_dir, self.logger, self.show_progress = (
            labeller,
            run_dir,
            logger,
            progress,
        )
        tc = run.train
        self.gamma, self.lam = float(tc.gamma), float(tc.tau)
        self.collect_threads = int(tc.collect_threads)
        if tc.torch_threads:
            torch.set_num_threads(int(tc.torch_threads))  # the update's, as in training
        layout = {
            k: v for k, v in vec_env.obs_layout().items() if k not in ("privileged", "critic")
        }
        A = int(vec_env.get_env_info()["action_space"].shape[0])
        params = rl_games_params(
            tc, layout, vec_env.num_envs, int(cfg.seed), str(run_dir), spec.task
        )
        self.meta = _meta(cfg, spec, params, env_info(labeller.D, A))
        self.model = build_model(
            params["network"], labeller.D, A, bool(params["config"]["normalize_value"])
        )
        self.net = self.model.a2c_network
        self.opt = torch.optim.Adam(
            [p for p in self.model.parameters() if p.requires_grad], lr=dc.learning_rate
        )
        self.N, self.A = vec_env.num_envs, A
        cap = dc.buffer_size
        self.buf = {
            "obs": torch.zeros(cap, labeller.D),
            "act": torch.zeros(cap, A),
            "ret": torch.zeros(cap),
        }
        self.buf_n, self.buf_pos = 0, 0
        self.iteration, self.samples, self.train_seconds_before = 0, 0, 0.0
        self.stop_requested, self.stop_signal = False, None
        self.history: list[dict] = []
        self._t0: float | None = None  # start of this process's loop (run)
        self._obs = None
        self.gen = torch.Generator().manual_seed(int(cfg.seed))

    # ------------------------------------------------------------------ signals
    @property
    def epoch_num(self) -> int:
        return self.iteration

    def request_stop(self, signum: int) -> None:
        self.stop_requested, self.stop_signal = True, int(signum)

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_state(self) -> dict:
        from mimic2dm.rl.policy import CHECKPOINT_VERSION
        from mimic2dm.utils.checkpoint import rng_state

        n = self.buf_n
        return {
            "model": self.model.state_dict(), "optimizer": self.opt.state_dict(),
            "epoch": self.iteration, "frame": self.samples, "iteration": self.iteration,
            "buffer": {k: v[:n].clone() for k, v in self.buf.items()}, "buffer_pos": self.buf_pos,
            "env_state": self.vec.get_env_state(), "rng": rng_state(), "gen": self.gen.get_state(),
            "train_seconds": self.train_seconds(), "history": self.history,
            "meta": {**self.meta, "format_version": CHECKPOINT_VERSION, "distill": {
                "experts": [str(e.path) for e in self.label.experts]}},
        }  # fmt: skip

    def save(self) -> Path:
        from mimic2dm.utils.checkpoint import atomic_torch_save

        path = self.run_dir / "checkpoints" / "last.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        return atomic_torch_save(self.checkpoint_state(), path)

    def restore(self, path: Path) -> None:
        from mimic2dm.rl.policy import check_checkpoint_version
        from mimic2dm.utils.checkpoint import load_checkpoint, set_rng_state

        ck = load_checkpoint(path)
        check_checkpoint_version(ck, path)
        if "buffer" not in ck:
            raise ValueError(
                f"{path}: not a distillation checkpoint (no buffer); start from its weights with init_from"
            )
        self.model.load_state_dict(ck["model"])
        self.opt.load_state_dict(ck["optimizer"])
        n = int(ck["buffer"]["obs"].shape[0])
        for k, v in ck["buffer"].items():
            self.buf[k][:n] = v
        self.buf_n, self.buf_pos = n, int(ck["buffer_pos"])
        self.iteration, self.samples = int(ck["iteration"]), int(ck["frame"])
        self.train_seconds_before = float(ck["train_seconds"])
        self.history = list(ck.get("history", []))
        self.vec.set_env_state(ck["env_state"])
        set_rng_state(ck["rng"])
        self.gen.set_state(ck["gen"])
        log.info("resumed from %s at iteration %d (%d samples)", path, self.iteration, self.samples)

    def train_seconds(self) -> float:
        return self.train_seconds_before + (
            time.perf_counter() - self._t0 if self._t0 is not None else 0.0
        )

    # ------------------------------------------------------------------ the loop
    def collect(self, beta: float) -> dict:
        """One iteration's rollout on ``train.collect_threads`` torch threads (a second one
        spins and slows the engine, docs/training.md); the labelled samples go into the buffer."""
        n = torch.get_num_threads()
        torch.set_num_threads(self.collect_threads or n)
        try:
            return self._collect(beta)
        finally:
            torch.set_num_threads(n)

    @torch.no_grad()
    def _collect(self, beta: float) -> dict:
        from mimic2dm.tasks.stats import StepStats

        T, N = self.dc.steps, self.N
        self.model.eval()
        obs = self._obs
        s_obs, labels = torch.zeros(T, N, self.label.D), torch.zeros(T, N, self.A)
        rew, done, trunc, vals = (torch.zeros(T, N) for _ in range(4))
        stats, gap = StepStats(), 0.0
        physics = 0.0
        for t in range(T):
            so = self.label.student_obs(obs)
            mu, _, v, _ = self.net({"obs": so})
            v = self.model.denorm_value(v)[:, 0]
            lab = self.label(obs)
            use = torch.rand(N, generator=self.gen) < beta
            act = torch.where(use[:, None], lab, mu)
            if self.dc.action_noise > 0:
                act = act + self.dc.action_noise * torch.randn(act.shape, generator=self.gen)
            self.vec.observe_values(v)
            obs, r, d, info = self.vec.step(act.clamp(-1.0, 1.0))
            s_obs[t], labels[t], vals[t] = so, lab, v
            rew[t], done[t], trunc[t] = (
                r.float().cpu(),
                d.float().cpu(),
                info["time_outs"].float().cpu(),
            )
            stats.merge(info["stats"])
            physics += float(info.get("physics_s", 0.0))
            gap += float((lab - mu).pow(2).mean())
        self._obs = obs
        _, _, v_last, _ = self.net({"obs": self.label.student_obs(obs)})
        ret = self._lambda_returns(rew, done, trunc, vals, self.model.denorm_value(v_last)[:, 0])
        if self.model.normalize_value:  # fold the new returns into the value statistics
            self.model.value_mean_std.train()
            self.model.value_mean_std(ret.reshape(-1, 1))
            self.model.value_mean_std.eval()
        self._push(s_obs.reshape(T * N, -1), labels.reshape(T * N, -1), ret.reshape(-1))
        self.net.update_normalizers(s_obs.reshape(T * N, -1))
        self.samples += T * N
        m = stats.metrics()
        m.update({"distill/beta": beta, "distill/action_gap": gap / T, "perf/physics_s": physics})
        return m

    def _lambda_returns(self, rew, done, trunc, vals, v_last) -> torch.Tensor:
        """TD(lambda) returns ``[T, N]``: time-outs bootstrap from the value, terminations do not."""
        T = rew.shape[0]
        ret = torch.zeros_like(rew)
        nxt_v, nxt_ret = v_last, v_last
        for t in reversed(range(T)):
            ended = done[t] > 0
            boot = torch.where(ended & (trunc[t] == 0), 0.0, 1.0)
            # a time-out bootstraps with the value of its own state (the next obs is a new episode's)
            nv = torch.where(ended, vals[t], nxt_v)
            nr = torch.where(ended, vals[t], nxt_ret)
            ret[t] = rew[t] + self.gamma * boot * ((1 - self.lam) * nv + self.lam * nr)
            nxt_v, nxt_ret = vals[t], ret[t]
        return ret

    def _push(self, obs, act, ret) -> None:
        cap, n = self.dc.buffer_size, obs.shape[0]
        idx = (self.buf_pos + torch.arange(n)) % cap
        self.buf["obs"][idx], self.buf["act"][idx], self.buf["ret"][idx] = obs, act, ret
        self.buf_pos = int((self.buf_pos + n) % cap)
        self.buf_n = min(cap, self.buf_n + n)

    def update(self) -> dict:
        """``distill.updates`` minibatches of the buffer: action MSE + value loss."""
        self.model.eval()  # eval mode: the value normaliser keeps its statistics
        la = lv = 0.0
        for _ in range(self.dc.updates):
            i = torch.randint(
                self.buf_n, (min(self.dc.batch_size, self.buf_n),), generator=self.gen
            )
            mu, _, v, _ = self.net({"obs": self.buf["obs"][i]})
            loss_a = (mu - self.buf["act"][i]).pow(2).mean()
            target = self.buf["ret"][i, None]
            if self.model.normalize_value:  # in eval mode the normaliser only normalises
                target = self.model.value_mean_std(target)
            loss_v = (v - target).pow(2).mean()
            loss = loss_a + self.dc.value_coef * loss_v
            self.opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.dc.max_grad_norm)
            self.opt.step()
            la, lv = la + loss_a.item(), lv + loss_v.item()
        return {
            "distill/action_loss": la / self.dc.updates,
            "distill/value_loss": lv / self.dc.updates,
        }

    def run(self, evaluator=None) -> None:
        from mimic2dm.utils.run_logging import make_progress

        self._t0 = time.perf_counter()
        self._obs = self.vec.reset()
        dc = self.dc
        progress = make_progress() if self.show_progress else None
        bar = (
            progress.add_task("distill", total=dc.max_iterations, completed=self.iteration, info="")
            if progress
            else None
        )
        if progress:
            progress.start()
        try:
            while self.iteration < dc.max_iterations and not self.stop_requested:
                if dc.max_seconds and self.train_seconds() >= dc.max_seconds:
                    log.info(
                        "distill.max_seconds=%g reached at iteration %d",
                        dc.max_seconds,
                        self.iteration,
                    )
                    break
                t0 = time.perf_counter()
                m = self.collect(dc.beta(self.iteration))
                m.update(self.update())
                self.iteration += 1
                wall = time.perf_counter() - t0
                m.update({"perf/samples_per_s": dc.steps * self.N / wall, "distill/samples": self.samples,
                          "distill/seconds": self.train_seconds()})  # fmt: skip
                if evaluator is not None and dc.eval_every and self.iteration % dc.eval_every == 0:
                    m.update(self._evaluate(evaluator))
                self.logger.log(m, self.iteration)
                self.history.append({k: float(v) for k, v in m.items()})
                if dc.checkpoint_every and self.iteration % dc.checkpoint_every == 0:
                    self.save()
                if progress:
                    info = f"len {m.get('episode/length', 0):.1f}  loss {m['distill/action_loss']:.4f}  beta {m['distill/beta']:.2f}"
                    progress.update(bar, completed=self.iteration, info=info)
        finally:
            if progress:
                progress.stop()
        self.save()

    def _evaluate(self, evaluator) -> dict:
        from mimic2dm.rl.policy import Policy

        r = evaluator(Policy(self.model.eval(), self.spec, {}, self.iteration, self.samples))
        return {
            f"eval/{k}": float(v)
            for k, v in r.items()
            if isinstance(v, int | float) and not isinstance(v, bool)
        }


def distill(cfg: DictConfig, resume_overrides=()) -> dict:
    """Run (or resume) a distillation; returns the summary (also ``RUN_DIR/summary.json``).

    Raises:
        ConfigError, RunDirError, ValueError, FileNotFoundError: bad settings, experts or
            run directory (one line each), before anything is written.
    """
    from mimic2dm.rl.vecenv import make_vecenv
    from mimic2dm.train import opened_run, stop_on_signals
    from mimic2dm.utils.checkpoint import seed_everything
    from mimic2dm.utils.config import from_mapping
    from mimic2dm.utils.run_logging import RunLogger

    def check(cfg, run):
        if run.task != "tracking2d":
            from mimic2dm.utils.validate import ConfigError

            raise ConfigError("task", run.task, "tracking2d (the student is a 2D tracker)")
        dc = from_mapping(
            DistillConfig, OmegaConf.to_container(cfg.distill, resolve=True), "distill"
        )
        return dc, load_experts(list(cfg.get("experts") or []))

    def check_data(spec, checked):  # every clip has an expert
        return (*checked, expert_of_clips(checked[1], list(spec.data)))

    with opened_run(cfg, resume_overrides, "distill", check, check_data) as r:
        cfg, run, spec, run_dir, ckpt = r.cfg, r.run, r.spec, r.run_dir, r.checkpoint
        dc, experts, owner = r.checked
        seed_everything(run.seed)
        env_spec = spec.with_config(privileged_3d=True)
        lg = run.logger
        logger = RunLogger(run_dir, config=OmegaConf.to_container(cfg, resolve=True), project=lg.project,
                           use_wandb=lg.wandb, use_tensorboard=lg.tensorboard, name=f"{cfg.name}-{run_dir.name}")  # fmt: skip
        vec = None
        try:
            vec = make_vecenv(
                env_spec, run.train.num_envs, run.seed, run.ray, run_dir, run.train.env_groups
            )
            A = int(vec.get_env_info()["action_space"].shape[0])
            labeller = Labeller(experts, owner, vec.obs_layout(), A)
            agent = Distiller(
                cfg, dc, run, spec, vec, labeller, run_dir, logger, bool(cfg.progress)
            )
            if ckpt is not None:
                agent.restore(ckpt)
            with stop_on_signals(agent):
                agent.run(_student_evaluator(spec))
        finally:
            logger.close()
            if vec is not None:
                vec.close()
    summary = {
        "run_dir": str(run_dir), "iterations": agent.iteration, "samples": agent.samples,
        "train_seconds": agent.train_seconds(), "experts": [str(e.path) for e in experts],
        "last_checkpoint": str(run_dir / "checkpoints" / "last.pt"), "interrupted": agent.stop_requested,
        "signal": signal.Signals(agent.stop_signal).name if agent.stop_requested else None,
        "history": agent.history,
    }  # fmt: skip
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
    return summary


def _student_evaluator(spec):
    """``fn(policy) -> report``: the student on the first clip, deterministic, from frame 0."""
    if not spec.data:
        return None

    def run(policy) -> dict:
        from mimic2dm.eval import evaluate

        return evaluate(policy, list(spec.data[:1]), views=1)

    return run


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="distill")
def _app(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    from mimic2dm.train import _new_dirs, one_line_errors, summary_signal

    hc = HydraConfig.get()
    overrides = (
        [o for o in hc.overrides.task if not o.startswith("resume=")] if cfg.get("resume") else []
    )
    if not cfg.get("run_dir"):
        cfg.run_dir = hc.runtime.output_dir
    with one_line_errors(_new_dirs(hc, cfg)):
        try:
            summary = distill(cfg, resume_overrides=overrides)
        except (ValueError, FileNotFoundError) as e:
            print(f"error: {e}", file=sys.stderr, flush=True)
            raise SystemExit(1) from None
    if summary["interrupted"]:
        raise SystemExit(128 + summary_signal(summary))


def main() -> None:
    """Console entry point ``mimic2dm-distill``."""
    from mimic2dm.train import console_main

    console_main(_app)


__all__ = [
    "DistillConfig",
    "Distiller",
    "Labeller",
    "compose_distill_config",
    "distill",
    "expert_of_clips",
    "load_experts",
    "main",
]

if __name__ == "__main__":
    main()
