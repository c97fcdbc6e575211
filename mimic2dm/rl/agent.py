"""rl-games PPO agent (``a2c_continuous``) with what Mimic2DM's tracker needs on top.

:class:`TrackerAgent` subclasses rl-games' ``A2CAgent`` and

- hands the critic's (denormalised) values of every observation back to the envs
  (``vec_env.observe_values``) right after computing them, for adaptive state
  initialisation (docs/design.md section 7);
- updates the network's observation normalisers once per epoch from the rollout;
- with a vecenv of several env groups (``train.env_groups``, or Ray actors with
  ``ray.pipeline``) runs a pipelined rollout: one group's actions and step bookkeeping are
  computed while the others' physics runs, filling the same buffers as rl-games' rollout;
- writes its own checkpoints, atomically, with everything an exact resume needs: model
  and normalisers, optimiser, epoch / frame counters, learning-rate and entropy
  schedules, the envs (ASI buffers, episodes in flight, engine state), the rollout
  bookkeeping and the python / numpy / torch RNG states. ``RUN_DIR/checkpoints/last.pt``
  is written every ``save_frequency`` epochs (plus a snapshot), ``best.pt`` whenever the
  mean episode return improves, and both at the end;
- stops after ``max_seconds`` of training when asked; with ``lr_schedule: linear`` and a
  time limit, the learning rate decays linearly to zero over that time (rl-games' own
  linear schedule counts epochs, which a time-limited run does not know in advance), so
  that the last checkpoint is a settled policy;
- after :meth:`TrackerAgent.request_stop` (Ctrl-C, SIGTERM), stops when the epoch in progress is
  complete, at the point where periodic checkpoints are written, with the final checkpoint;
- with ``overlap`` (``train.overlap``), collects the next epoch's rollout on a background
  thread while the PPO update of this one runs, with a copy of the policy taken before the
  update: every batch is collected by the policy of one update before the one it trains.
  The update corrects for it as decoupled PPO does (:meth:`TrackerAgent._decouple`): the
  clip around the policy the update starts from, importance weights from the policy that
  acted. The collected batch waiting for the next epoch is part of the checkpoint, so a
  resume continues exactly.

rl-games' own checkpointing is switched off in the params (``save_frequency: 0``).
"""

from __future__ import annotations

import copy
import logging
import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from rl_games.algos_torch.a2c_continuous import A2CAgent
from rl_games.common.a2c_common import swap_and_flatten01

from mimic2dm.rl.policy import CHECKPOINT_VERSION, check_checkpoint_version
from mimic2dm.tasks.stats import StepStats
from mimic2dm.utils.checkpoint import CheckpointManager, load_checkpoint, rng_state, set_rng_state

log = logging.getLogger(__name__)


IS_TRUNCATION = 1.0
"""Largest importance weight ``pi_prox / pi_behaviour`` of a sample collected one update
behind (``train.overlap``), as V-trace truncates its ratios."""


class TimeLinearScheduler:
    """rl-games scheduler: ``lr = start * (1 - t / max_seconds)`` (floored at ``min_lr``),
    ``t`` the agent's training time so far (resumes included)."""

    def __init__(self, agent: TrackerAgent, start_lr: float, min_lr: float = 1e-6):
        self.agent, self.start_lr, self.min_lr = agent, start_lr, min_lr

    def update(self, current_lr, entropy_coef, epoch, frames, kl_dist, **kwargs):
        frac = min(1.0, self.agent.train_seconds() / self.agent.max_seconds)
        return max(self.min_lr, self.start_lr * (1.0 - frac)), entropy_coef


class TrainingDiverged(RuntimeError):
    """The PPO update produced non-finite losses: the run stops before writing any checkpoint
    of the diverged weights (the last one written keeps the weights before)."""


class _Stopped(Exception):
    """Raised at an epoch boundary to leave rl-games' loop after :meth:`TrackerAgent.request_stop`."""


class TrackerAgent(A2CAgent):
    """PPO agent; extra ``params['mimic2dm']`` keys (all optional):

    - ``run_dir``: where ``checkpoints/`` go (None: no checkpoints).
    - ``checkpoint``: :class:`~mimic2dm.rl.config.CheckpointConfig` as a dict.
    - ``max_seconds``: training-time limit (0: none).
    - ``collect_threads``: torch threads during rollouts (0: unchanged); the update keeps
      the run's ``torch_threads``.
    - ``overlap``: collect the next rollout while the update runs (module docstring).
    - ``meta``: stored in every checkpoint (resolved config, ``task_spec`` as plain data...).
    - ``epoch_callback``: ``fn(agent)`` called after every epoch (tests, tools).
    """

    def __init__(self, base_name: str, params: dict):
        extra = params.get("mimic2dm", {})
        super().__init__(base_name, params)
        ck = extra.get("checkpoint") or {}
        run_dir = extra.get("run_dir")
        self.ckpt = (
            CheckpointManager(run_dir, keep=ck.get("keep", 3))
            if run_dir and ck.get("enabled", True)
            else None
        )
        self.save_every = int(ck.get("save_frequency", 25))
        self.best_after = int(ck.get("save_best_after", 10))
        self.max_seconds = float(extra.get("max_seconds", 0.0))
        self.collect_threads = int(extra.get("collect_threads", 0))
        self.meta = extra.get("meta", {})
        self.overlap = bool(extra.get("overlap", False))
        if self.overlap and (self.has_central_value or self.is_rnn):
            raise ValueError("train.overlap needs a feed-forward policy without a central value")
        self._acting_model = None  # overlap: the copy of the policy that collects
        self._collector: ThreadPoolExecutor | None = None
        self._pending: dict | None = None  # overlap: the batch collected for the next epoch
        self._next = None  # overlap: the future of the rollout in progress
        self.epoch_callback: Callable | None = extra.get("epoch_callback")
        self.stop_requested = False
        self.stop_signal = 0  # the signal that asked to stop (SIGINT, SIGTERM)
        self.saved_epoch = self.called_back = -1
        self.resumed_from: int | None = None
        self.epoch_timing: dict[str, float] = {}
        self._runtime: dict | None = None
        self._train_start: float | None = None
        self.train_seconds_before = 0.0  # training time of the runs this one resumes
        self.budget_checked_at = 0.0  # train_seconds() when the last epoch checked the time budget
        if self.linear_lr and self.max_seconds > 0:
            self.scheduler = TimeLinearScheduler(self, float(params["config"]["learning_rate"]))

    def train_seconds(self) -> float:
        """Training time so far, earlier runs of a resumed one included (s)."""
        now = 0.0 if self._train_start is None else time.perf_counter() - self._train_start
        return self.train_seconds_before + now

    # ------------------------------------------------------------------ ASI hand-off
    def _act(self, obs: torch.Tensor) -> dict:
        """rl-games' action/value pass (``actions``, ``neglogpacs``, ``values``, ``mus``,
        ``sigmas``) by the policy that collects: the model, or its copy with ``overlap``."""
        model = self._acting_model if self._acting_model is not None else self.model
        model.eval()
        inputs = {"is_train": False, "prev_actions": None, "obs": self._preproc_obs(obs),
                  "rnn_states": self.rnn_states}  # fmt: skip
        with torch.no_grad():
            return model(inputs)

    def get_action_values(self, obs: dict) -> dict:
        """rl-games' action/value pass, then the values ``[N]`` go to the envs for ASI."""
        if self.has_central_value:
            res = super().get_action_values(obs)
        else:
            res = self._act(obs["obs"])
        self.vec_env.observe_values(res["values"][:, 0])
        return res

    def get_values(self, obs: dict) -> torch.Tensor:
        """The critic's values of ``obs`` (the end of a rollout), by the policy that collects."""
        if self.has_central_value:
            return super().get_values(obs)
        return self._act(obs["obs"])["values"]

    # ------------------------------------------------------------------ normalisers
    def prepare_dataset(self, batch_dict: dict) -> None:
        """Update the network's observation normalisers with this epoch's rollout, then as rl-games.
        With ``overlap``, then start collecting the next rollout with a copy of the policy
        as it is now, before the update (its normalisers include this rollout)."""
        net = self.model.a2c_network
        if hasattr(net, "update_normalizers"):
            net.update_normalizers(batch_dict["obses"])
        weights = self._decouple(batch_dict) if self.overlap else None
        super().prepare_dataset(batch_dict)
        if weights is not None:
            self.dataset.values_dict["advantages"] *= weights
            self._sync_acting_model()
            self._next = self._collector.submit(self._collect_in_background)

    def _decouple(self, batch: dict) -> torch.Tensor:
        """Decoupled PPO for a batch collected one update behind (``overlap``): the policy
        at the start of this update is the proximal policy. PPO's ratio and KL are taken
        against it (the batch's ``neglogpacs``, ``mus`` and ``sigmas`` become its own), and
        each sample's advantage is weighted by ``pi_prox(a) / pi_behaviour(a)``, truncated
        at :data:`IS_TRUNCATION` (Hilton et al. 2022, "Batch size-invariance for policy
        optimization"; V-trace's truncation). Returns the weights ``[B]``."""
        net, obs, actions = (
            self.model.a2c_network,
            self._preproc_obs(batch["obses"]),
            batch["actions"],
        )
        with torch.no_grad():
            if hasattr(net, "action_mean") and not self.normalize_input:  # the actor's tower only
                mu = net.action_mean(obs)
                logstd = net.logstd.expand_as(mu)
                sigma = torch.exp(logstd)
                neglogp = self.model.neglogp(actions, mu, sigma, logstd).squeeze()
            else:
                prox = self.model({"is_train": True, "prev_actions": actions, "obs": obs})
                neglogp, mu, sigma = prox["prev_neglogp"], prox["mus"], prox["sigmas"]
        log_w = batch["neglogpacs"] - neglogp  # log pi_prox - log pi_behaviour
        batch["neglogpacs"], batch["mus"], batch["sigmas"] = neglogp, mu, sigma
        return torch.exp(log_w.clamp(max=math.log(IS_TRUNCATION)))

    # ------------------------------------------------------------------ epochs
    def play_steps(self):
        """rl-games' rollout, on ``collect_threads`` torch threads: its tensors are small
        ([num_envs, ...]), so a second intra-op thread mostly contends with the engine's.
        With ``overlap``: the batch collected during the last epoch (the first epoch
        collects its own)."""
        if self.overlap:
            if self._pending is None:
                self._sync_acting_model()
                self._pending = self._collect()
            batch, self._pending = self._pending, None
            return batch
        return self._collect()

    def _collect(self) -> dict:
        if getattr(self.vec_env, "actor_policy", False):
            play = self._play_steps_in_actors
        elif self._pipelined():
            play = self._play_steps_pipelined
        else:
            play = super().play_steps
        n = torch.get_num_threads()
        if not self.collect_threads or self.collect_threads == n:
            return play()
        torch.set_num_threads(self.collect_threads)
        try:
            return play()
        finally:
            torch.set_num_threads(n)

    def _pipelined(self) -> bool:
        return (
            getattr(self.vec_env, "num_groups", 1) > 1
            and not self.has_central_value
            and not self.is_rnn
        )

    def _play_steps_pipelined(self) -> dict:
        """rl-games' rollout (same buffers, bookkeeping and GAE), over the vecenv's env groups
        in turn: group ``g``'s actions are computed and its step launched (its physics runs
        in the background) while the other groups' physics runs, and its step is finished
        (rewards, resets, next observation) while theirs runs. Every env still takes its
        ``horizon_length`` steps from the policy of this epoch."""
        env, buf = self.vec_env, self.experience_buffer.tensor_dict
        obs = self.obs["obs"].clone()
        step_time = 0.0

        def launch(n: int, g: int) -> dict:
            nonlocal step_time
            a, b = env.bounds[g]
            res = self._act(obs[a:b])
            buf["obses"][n, a:b] = obs[a:b]
            buf["dones"][n, a:b] = self.dones[a:b]
            for k in self.update_list:
                buf[k][n, a:b] = res[k]
            t0 = time.perf_counter()
            env.launch(g, self.preprocess_actions(res["actions"]), res["values"][:, 0])
            step_time += time.perf_counter() - t0
            return res

        def finish(n: int, g: int, res: dict) -> None:
            nonlocal step_time
            a, b = env.bounds[g]
            t0 = time.perf_counter()
            o, rewards, dones, infos = env.finish(g)
            step_time += time.perf_counter() - t0
            timeouts = self.cast_obs(infos["time_outs"]) if "time_outs" in infos else None
            self._record_step(n, a, b, rewards.to(self.ppo_device).unsqueeze(1), dones.to(self.ppo_device),
                              timeouts, res["values"], infos)  # fmt: skip
            obs[a:b] = o.to(obs.device)

        groups = range(env.num_groups)
        res = [launch(0, g) for g in groups]
        for n in range(self.horizon_length):
            for g in groups:
                finish(n, g, res[g])
                if n + 1 < self.horizon_length:
                    res[g] = launch(n + 1, g)
        self.obs = {"obs": obs}
        return self._rollout_batch(self.get_values(self.obs), step_time)

    def _play_steps_in_actors(self) -> dict:
        """rl-games' rollout (same buffers, bookkeeping and GAE) collected by the Ray actors
        (``ray.actor_policy``): each runs this epoch's policy on its envs for
        ``horizon_length`` steps in one call, the values going to its task for ASI as
        :meth:`get_action_values` hands them over; the learner then fills the buffers and
        replays the per-step bookkeeping (returns, lengths, episode statistics) in order."""
        if self.has_central_value or self.is_rnn:
            raise ValueError("ray.actor_policy needs a feed-forward policy without a central value")
        env, buf, H = self.vec_env, self.experience_buffer.tensor_dict, self.horizon_length
        model = self._acting_model if self._acting_model is not None else self.model
        policy = {"builder": self.network, "build_config": self._build_config(),
                  "state": {k: v.detach().cpu() for k, v in model.state_dict().items()}}  # fmt: skip
        results = env.rollout(policy, H, bool(self.clip_actions))
        t = lambda x: torch.from_numpy(np.require(x, requirements="W")).to(self.ppo_device)  # noqa: E731 - Ray's arrays are read-only
        step_time, obs, last_values = 0.0, [], []
        for (a, b), (r, restarted) in zip(env.bounds, results, strict=True):
            if restarted:  # a replacement's envs start fresh episodes: none of the old ones counts
                self.dones[a:b] = 1
                for x in (self.current_rewards, self.current_shaped_rewards, self.current_lengths):
                    x[a:b] = 0
            buf["dones"][0, a:b] = self.dones[a:b]
            buf["dones"][1:, a:b] = t(r["dones"][:-1]).to(buf["dones"].dtype)
            for k in ("obses", *self.update_list):
                buf[k][:, a:b] = t(r[k]).reshape(buf[k][:, a:b].shape)
            obs.append(t(r["last_obs"]))
            last_values.append(t(r["last_values"]))
        for n in range(H):
            step_s = max(r["step_s"][n] for r, _ in results)
            step_time += step_s
            stats = StepStats()
            for r, _ in results:
                stats.merge(r["stats"][n])
            rewards = torch.cat([t(r["rewards"][n]) for r, _ in results]).unsqueeze(1)
            dones = torch.cat([t(r["dones"][n]) for r, _ in results]).to(self.dones.dtype)
            time_outs = torch.cat([t(r["time_outs"][n]) for r, _ in results])
            infos = {"time_outs": time_outs.bool(), "stats": stats,
                     "actor_restarts": sum(k for _, k in results) if n == 0 else 0,
                     "physics_s": min(step_s, max(r["physics_s"][n] for r, _ in results))}  # fmt: skip
            self._record_step(
                n, 0, self.num_actors, rewards, dones, time_outs, buf["values"][n], infos
            )
        self.obs = {"obs": torch.cat(obs)}
        return self._rollout_batch(torch.cat(last_values), step_time)

    def _record_step(self, n: int, a: int, b: int, rewards: torch.Tensor, dones: torch.Tensor,
                     time_outs: torch.Tensor | None, values: torch.Tensor, infos: dict) -> None:  # fmt: skip
        """rl-games' per-step bookkeeping for envs ``a:b`` at step ``n``: shaped rewards (values
        bootstrapped at time-outs) into the buffer, returns and lengths, the episode meters and
        the observer's infos for the envs whose episodes ended, and ``dones``."""
        shaped = self.rewards_shaper(rewards)
        if self.value_bootstrap and time_outs is not None:
            shaped = shaped + self.gamma * values * time_outs.unsqueeze(1).float()
        self.experience_buffer.tensor_dict["rewards"][n, a:b] = shaped
        self.current_rewards[a:b] += rewards
        self.current_shaped_rewards[a:b] += shaped
        self.current_lengths[a:b] += 1
        done_ids = dones.nonzero(as_tuple=False)[:: self.num_agents] + a
        self.game_rewards.update(self.current_rewards[done_ids])
        self.game_shaped_rewards.update(self.current_shaped_rewards[done_ids])
        self.game_lengths.update(self.current_lengths[done_ids])
        self.algo_observer.process_infos(infos, done_ids)
        keep = (1.0 - dones.float()).unsqueeze(1)
        self.current_rewards[a:b] *= keep
        self.current_shaped_rewards[a:b] *= keep
        self.current_lengths[a:b] *= keep.squeeze(1)
        self.dones[a:b] = dones

    def _build_config(self) -> dict:
        """rl-games' ``build_config`` of this agent's model (as ``A2CAgent.__init__`` makes it)."""
        return {"actions_num": self.actions_num, "input_shape": self.obs_shape,
                "num_seqs": self.num_actors * self.num_agents, "value_size": self.env_info.get("value_size", 1),
                "normalize_value": self.normalize_value, "normalize_input": self.normalize_input}  # fmt: skip

    def _rollout_batch(self, last_values: torch.Tensor, step_time: float) -> dict:
        """GAE over the filled buffers and rl-games' batch dict (the tail of its ``play_steps``)."""
        buf = self.experience_buffer.tensor_dict
        mb_values, mb_rewards = buf["values"], buf["rewards"]
        mb_advs = self.discount_values(
            self.dones.float(), last_values, buf["dones"].float(), mb_values, mb_rewards
        )
        batch = self.experience_buffer.get_transformed_list(swap_and_flatten01, self.tensor_list)
        batch["returns"] = swap_and_flatten01(mb_advs + mb_values)
        batch["played_frames"] = self.batch_size
        batch["step_time"] = step_time
        return batch

    def _sync_acting_model(self) -> None:
        """The collecting copy of the policy := the model (weights, normalisers, value scale)."""
        if self._acting_model is None:
            self._acting_model = copy.deepcopy(self.model)
            self._collector = ThreadPoolExecutor(1, thread_name_prefix="m2d-collect")
        self._acting_model.load_state_dict(self.model.state_dict())

    def _collect_in_background(self) -> tuple[dict, float]:
        """The next rollout (on the collector thread, where grad mode is its own); its time."""
        t0 = time.perf_counter()
        with torch.no_grad():
            batch = self._collect()
        return batch, time.perf_counter() - t0

    def train_epoch(self):
        start = time.perf_counter()
        if self._train_start is None:
            self._train_start = start
        if self.overlap:
            out = self._train_epoch_overlapped()
        else:
            out = super().train_epoch()
        step_time, play_time, update_time, total_time = out[:4]
        self._check_finite(out[4], out[5])
        self.epoch_timing = {"step_time": step_time, "play_time": play_time, "update_time": update_time,
                             "total_time": total_time, "frames": float(self.curr_frames), "start": start,
                             "overlapped": float(self.overlap)}  # fmt: skip
        # training time across resumes, like max_epochs: a resumed run continues the budget
        self.budget_checked_at = self.train_seconds()  # what the time budget was checked against
        if self.max_seconds and self.budget_checked_at >= self.max_seconds:
            self.max_epochs = self.epoch_num  # rl-games ends the run after this epoch
        return out

    def _train_epoch_overlapped(self) -> tuple:
        """rl-games' epoch, whose :meth:`prepare_dataset` starts the next rollout in the
        background; returns when both the update and that rollout are done, with the
        rollout's times in place of the (instant) fetch of this epoch's batch. The torch
        threads are ``collect_threads`` throughout: the update and the rollout share the
        cores. The update draws no random numbers, so the rollout's draws keep their order."""
        n = torch.get_num_threads()
        threads = self.collect_threads or n
        t0 = time.perf_counter()
        torch.set_num_threads(threads)
        try:
            out = list(super().train_epoch())
        finally:  # never leave the collector running, whatever the update did
            running, self._next = self._next, None
            try:
                batch, play_time = running.result() if running is not None else ({}, 0.0)
            finally:
                torch.set_num_threads(n)
        self._pending = batch
        total = time.perf_counter() - t0
        out[0], out[1], out[3] = batch["step_time"], play_time, total
        return tuple(out)

    def _check_finite(self, actor_losses: list, critic_losses: list) -> None:
        """Raise :class:`TrainingDiverged` when this epoch's losses are not all finite."""
        losses = [
            torch.as_tensor(x).detach().float().reshape(-1) for x in (*actor_losses, *critic_losses)
        ]
        if losses and not bool(torch.isfinite(torch.cat(losses)).all()):
            where = (
                "none yet"
                if self.ckpt is None or self.saved_epoch < 0
                else (f"{self.ckpt.last} (epoch {self.saved_epoch})")
            )
            raise TrainingDiverged(
                f"epoch {self.epoch_num}: the PPO losses are not finite, so the update diverged "
                f"(often from diverging physics: check engine.physics_hz and the character); "
                f"nothing of it was saved, the last checkpoint is {where}"
            )

    def request_stop(self, signum: int = 2) -> None:
        """End training once the epoch in progress is complete, with a final checkpoint
        (safe from a signal handler: it only sets flags). ``signum``: the signal that asked
        (SIGINT = 2 by default), for the summary and the exit status."""
        self.stop_signal = int(signum)
        self.stop_requested = True

    def train(self):
        """rl-games' training loop; returns early after :meth:`request_stop`."""
        try:
            return super().train()
        except _Stopped:
            return self.mean_rewards, self.epoch_num

    def update_epoch(self) -> int:
        """Runs at the start of every epoch: epoch ``epoch_num`` is complete (frames, stats)."""
        if self.epoch_num > 0 and self.epoch_num != self.saved_epoch:
            self._after_epoch(final=self.stop_requested)
        if self.stop_requested:
            if self.epoch_num > 0 and self.epoch_num != self.saved_epoch:
                self._after_epoch(final=True)  # Ctrl-C came during the call above
            raise _Stopped
        return super().update_epoch()

    def _after_epoch(self, final: bool = False) -> None:
        if self.epoch_callback is not None and self.called_back != self.epoch_num:
            self.called_back = self.epoch_num
            self.epoch_callback(self)
        if self.ckpt is None:
            return
        metric = self.mean_rewards_value()
        best = (
            metric is not None
            and self.epoch_num >= self.best_after
            and (self.ckpt.best is None or metric > self.ckpt.best)
        )
        periodic = self.save_every > 0 and self.epoch_num % self.save_every == 0
        if final or periodic or best:
            self.ckpt.save(self.checkpoint_state(), self.epoch_num, metric if (best or final) else None,
                           snapshot=periodic or final)  # fmt: skip
            self.saved_epoch = self.epoch_num

    def mean_rewards_value(self) -> float | None:
        """Mean return of the last ``games_to_track`` episodes (None before any ended)."""
        if self.game_rewards.current_size == 0:
            return None
        return float(self.game_rewards.get_mean()[0])

    def save(self, fn: str) -> None:
        """rl-games calls this at the end of a run: write the final checkpoint."""
        self._after_epoch(final=True)

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_state(self) -> dict:
        """Everything an exact resume needs, plus ``meta`` for :func:`mimic2dm.rl.policy.load_policy`."""
        state = (
            self.get_full_state_weights()
        )  # model (+ normalisers), optimiser, epoch, frame, env state
        state.update({
            "last_lr": self.last_lr, "entropy_coef": self.entropy_coef, "mean_rewards": self.mean_rewards,
            "runtime": self._runtime_state(), "rng": rng_state(),
            "meta": {**self.meta, "format_version": CHECKPOINT_VERSION},
            "train_seconds": self.train_seconds(),
        })  # fmt: skip
        return state

    def _runtime_state(self) -> dict:
        # rl-games' AverageMeter keeps its fill count outside its buffers
        meters = {n: {"mean": getattr(self, n).mean.clone(), "size": getattr(self, n).current_size}
                  for n in ("game_rewards", "game_shaped_rewards", "game_lengths")}  # fmt: skip
        return {
            "dones": self.dones.clone(), "current_rewards": self.current_rewards.clone(),
            "current_shaped_rewards": self.current_shaped_rewards.clone(), "current_lengths": self.current_lengths.clone(),
            "meters": meters, "pending_batch": self._pending_to_save(),
        }  # fmt: skip

    def _pending_to_save(self) -> dict | None:
        """The batch waiting for the next epoch (overlap), without its timing."""
        if self._pending is None:
            return None
        return {k: v for k, v in self._pending.items() if k != "step_time"}

    def restore(self, fn: str, set_epoch: bool = True) -> None:
        """Load a checkpoint written by :meth:`checkpoint_state` (Runner calls this on resume)."""
        ck = load_checkpoint(fn)
        check_checkpoint_version(ck, fn)
        self.set_full_state_weights(ck, set_epoch=set_epoch)
        self.last_lr, self.entropy_coef = float(ck["last_lr"]), float(ck["entropy_coef"])
        self.mean_rewards = ck["mean_rewards"]
        self.train_seconds_before = float(ck["train_seconds"])
        self._runtime = ck["runtime"]
        self.saved_epoch = self.epoch_num
        self.resumed_from = self.epoch_num
        if self.ckpt is not None:
            self.ckpt.best = ck.get("best_metric")
        set_rng_state(ck["rng"])
        log.info("resumed from %s at epoch %d, frame %d", fn, self.epoch_num, self.frame)

    def env_reset(self) -> dict:
        """Start of training: after a resume the envs continue their episodes, so restore the
        rollout bookkeeping that goes with them."""
        obs = super().env_reset()
        rt, self._runtime = self._runtime, None
        if rt is not None:
            self.dones.copy_(rt["dones"])
            self.current_rewards.copy_(rt["current_rewards"])
            self.current_shaped_rewards.copy_(rt["current_shaped_rewards"])
            self.current_lengths.copy_(rt["current_lengths"])
            for n, m in rt["meters"].items():
                getattr(self, n).mean = m["mean"].clone()
                getattr(self, n).current_size = m["size"]
            # overlap: the batch collected for the next epoch (a run without overlap has
            # none and collects its next batch itself; one with overlap resumed from a
            # checkpoint without one collects it in its first epoch)
            pending = rt.get("pending_batch") if self.overlap else None
            self._pending = None if pending is None else {**pending, "step_time": 0.0}
        return obs
