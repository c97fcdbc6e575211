"""Vectorised envs for rl-games (``IVecEnv``): in the learner's process, or in Ray actors.

Both host batches of any registered :class:`~mimic2dm.tasks.base.Task`, built by
``make_task`` from one picklable ``TaskSpec``, and use nothing but the ``Task`` API;
every env resets itself when its episode ends. Terminations and time-outs are both
reported as ``dones``; ``infos['time_outs']`` marks the time-outs so that rl-games
bootstraps them, ``infos['stats']`` is the step's
:class:`~mimic2dm.tasks.stats.StepStats` (reward terms, ended episodes, causes) and
``infos['physics_s']`` the seconds of the step spent in the engine's step (with Ray: the
largest over the actors, which step in parallel), for the training time breakdown.

Tasks may use the critic's values of the states behind the last observation (adaptive
state initialisation does): the agent calls :meth:`observe_values` before each step. The
in-process env hands them to its task at once; the Ray env sends each actor its slice
with the next step.

A Ray actor that dies (or stays silent for ``step_timeout_s``) is replaced by a new one
whose envs start fresh episodes; its envs report ``dones = 1`` (as time-outs) for that
step and training continues. Each replacement is logged and counted
(``infos['actor_restarts']``).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import threading
import time
from pathlib import Path

import numpy as np
import torch
from rl_games.common.gym_compat import spaces
from rl_games.common.ivecenv import IVecEnv

from mimic2dm.rl.config import RayConfig
from mimic2dm.rl.envstate import load_task_state, task_state
from mimic2dm.tasks.base import TaskSpec
from mimic2dm.tasks.registry import make_task
from mimic2dm.tasks.stats import StepStats

log = logging.getLogger(__name__)

RAY_SOCKET_DIR_MAX = 40
"""Longest Ray temp dir we use: its session sockets add ~65 chars under a 107-char limit."""


def env_info(obs_dim: int, action_dim: int) -> dict:
    """The ``env_info`` rl-games expects (Box spaces, one agent, one value)."""
    return {
        "observation_space": spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32),
        "action_space": spaces.Box(-1.0, 1.0, (action_dim,), np.float32),
        "agents": 1,
        "value_size": 1,
    }


class TaskVecEnv(IVecEnv):
    """All envs in the learner's process: one task, or ``groups`` tasks stepped in turn.

    With ``groups > 1`` the envs are split into that many tasks (group ``g`` seeded
    ``seed + 1000 g``, as Ray actors are), each with its own engine, whose physics runs on
    its own background thread (``Engine.step_async``). The learner's pipelined rollout
    (:class:`~mimic2dm.rl.agent.TrackerAgent`, through :meth:`launch` / :meth:`finish`)
    then computes one group's policy actions and task step while another group's
    physics runs: on 2 cores the Python work of the rollout and the engine overlap
    instead of taking turns (docs/training.md "Speed"). :meth:`step` steps every group
    (all physics in parallel) for callers that do not pipeline.

    Args:
        spec: what to build (with groups, each engine gets ``num_threads // groups`` threads, >= 1).
        num_envs: number of envs ``N``.
        seed: the task's seed.
        groups: number of env groups (``N`` must split evenly).
    """

    def __init__(
        self,
        spec: TaskSpec,
        num_envs: int,
        seed: int = 0,
        groups: int = 1,
        serial_physics: bool = True,
    ):
        if groups < 1 or num_envs % groups:
            raise ValueError(
                f"train.env_groups={groups} does not split train.num_envs={num_envs} evenly"
            )
        self.spec, self.num_envs, self.seed_value = spec, num_envs, seed
        if groups > 1:
            threads = int(spec.engine.get("num_threads", 0) or os.cpu_count() or 1)
            spec = spec.with_engine(num_threads=max(1, threads // groups))
        n = num_envs // groups
        self.tasks = [make_task(spec, n, seed + 1000 * g) for g in range(groups)]
        if groups > 1 and serial_physics:  # one group's physics at a time, beside the learner
            lock = threading.Lock()
            for t in self.tasks:
                t.engine.step_lock = lock
        self.task = self.tasks[0]
        self.bounds = [(g * n, (g + 1) * n) for g in range(groups)]
        self._launched = [(0.0, 0.0)] * groups  # engine time counters at each group's launch
        self._restored = False

    @property
    def num_groups(self) -> int:
        return len(self.tasks)

    def get_env_info(self) -> dict:
        return env_info(self.task.obs_dim, self.task.action_dim)

    def obs_layout(self) -> dict[str, int]:
        return self.task.obs_layout()

    def reset(self) -> torch.Tensor:
        """Observation ``[N, D]``; every env starts a new episode unless a checkpoint was just loaded."""
        if not self._restored:
            for t in self.tasks:
                t.reset(torch.arange(t.num_envs, device=t.device))
        self._restored = False
        return torch.cat([t.observe() for t in self.tasks])

    def observe_values(self, values: torch.Tensor) -> None:
        """Critic values ``[N]`` of the states behind the last observation."""
        v = values.detach().reshape(-1).float()
        for t, (a, b) in zip(self.tasks, self.bounds, strict=True):
            t.observe_values(v[a:b].to(t.device))

    def launch(self, g: int, actions: torch.Tensor, values: torch.Tensor | None = None) -> None:
        """Start group ``g``'s step with its ``actions [n, A]`` (``values [n]``: the critic's
        values of the observation they came from, for ASI); its physics runs in the
        background until :meth:`finish`."""
        t = self.tasks[g]
        if values is not None:
            t.observe_values(values.detach().reshape(-1).float().to(t.device))
        self._launched[g] = (t.engine.physics_seconds, t.engine.wait_seconds)
        t.step_begin(actions.detach().float().to(t.device))

    def finish(self, g: int):
        """Finish group ``g``'s step: ``obs [n, D]``, ``rewards [n]``, ``dones [n]`` uint8, ``infos``
        (``physics_s``: time spent waiting for its physics; ``physics_busy_s``: the physics' own time)."""
        engine = self.tasks[g].engine
        busy, waited = self._launched[g]
        r = self.tasks[g].step_end()
        infos = {"time_outs": r.truncated, "stats": StepStats.of(r), "actor_restarts": 0,
                 "physics_s": engine.wait_seconds - waited, "physics_busy_s": engine.physics_seconds - busy}  # fmt: skip
        return r.obs, r.reward, r.done.to(torch.uint8), infos

    def step(self, actions: torch.Tensor):
        """Actions ``[N, A]`` -> ``obs [N, D]``, ``rewards [N]``, ``dones [N]`` uint8, ``infos``."""
        actions = actions.detach().float()
        if self.num_groups == 1:
            engine = self.task.engine
            before = engine.physics_seconds
            r = self.task.step(actions.to(self.task.device))
            infos = {"time_outs": r.truncated, "stats": StepStats.of(r), "actor_restarts": 0,
                     "physics_s": engine.physics_seconds - before}  # fmt: skip
            return r.obs, r.reward, r.done.to(torch.uint8), infos
        for g, (a, b) in enumerate(self.bounds):
            self.launch(g, actions[a:b])
        parts = [self.finish(g) for g in range(self.num_groups)]
        stats = StepStats()
        for p in parts:
            stats.merge(p[3]["stats"])
        infos = {"time_outs": torch.cat([p[3]["time_outs"] for p in parts]), "stats": stats, "actor_restarts": 0,
                 "physics_s": sum(p[3]["physics_s"] for p in parts)}  # fmt: skip
        return tuple(torch.cat([p[i] for p in parts]) for i in range(3)) + (infos,)

    def stats(self) -> dict[str, float]:
        """The task's statistics (e.g. ASI), averaged over the groups (``*replacements`` summed)."""
        return _merge_stats([t.stats() for t in self.tasks])

    def get_env_state(self) -> dict:
        return {"kind": "tasks", "tasks": [task_state(t) for t in self.tasks]}

    def set_env_state(self, env_state: dict | None) -> None:
        if env_state is None:
            return
        saved = env_state["tasks"]
        same = len(saved) == len(self.tasks)
        restored = [
            load_task_state(t, saved[i % len(saved)], same) for i, t in enumerate(self.tasks)
        ]
        self._restored = all(restored)
        if not self._restored:
            log.warning(
                "checkpoint envs (%d batch(es)) do not match this run's (%d envs in %d group(s)): "
                "restored the task's buffers only", len(saved), self.num_envs, self.num_groups,
            )  # fmt: skip

    def close(self) -> None:
        for t in self.tasks:
            t.close()


def _merge_stats(all_stats: list[dict[str, float]]) -> dict[str, float]:
    """Per-batch task statistics averaged (``*replacements`` summed)."""
    if not all_stats:
        return {}
    out = {k: float(np.mean([s[k] for s in all_stats])) for k in all_stats[0]}
    for k in out:
        if k.endswith("replacements"):
            out[k] = float(sum(s[k] for s in all_stats))
    return out


class EnvActor:
    """A Ray actor hosting one task batch (wrapped with ``ray.remote`` by :class:`RayVecEnv`);
    what crosses the process boundary is host data (numpy arrays, host ``StepStats``)."""

    def __init__(self, spec: TaskSpec, num_envs: int, seed: int):
        torch.set_num_threads(1)
        torch.manual_seed(seed)  # the policy's action noise (``rollout``); the task has its own RNG
        self.task = make_task(spec, num_envs, seed)
        self.obs: torch.Tensor | None = None  # the last observation (``rollout`` starts from it)
        self.model = None  # the policy of ``rollout``, built on its first call

    def describe(self) -> dict:
        return {"obs_dim": self.task.obs_dim, "action_dim": self.task.action_dim, "layout": self.task.obs_layout(),
                "pid": os.getpid()}  # fmt: skip

    def reset(self, new_episodes: bool = True) -> np.ndarray:
        if new_episodes:
            self.task.reset(torch.arange(self.task.num_envs, device=self.task.device))
        self.obs = self.task.observe()
        return self.obs.cpu().numpy()

    def step(self, actions: np.ndarray, values: np.ndarray | None):
        dev = self.task.device
        if values is not None:
            self.task.observe_values(torch.tensor(values, device=dev))  # Ray hands read-only arrays
        before = self.task.engine.physics_seconds
        r = self.task.step(torch.tensor(actions, device=dev))
        host = lambda x: x.cpu().numpy()  # noqa: E731
        return (
            host(r.obs),
            host(r.reward),
            host(r.done),
            host(r.truncated),
            StepStats.of(r).to_host(),
            self.task.engine.physics_seconds - before,
        )

    def rollout(self, policy: dict, horizon: int, clip_actions: bool = True) -> dict:
        """``horizon`` steps of every env with the learner's policy acting (``ray.actor_policy``):
        rl-games' action/value pass on the last observation (the values go to the task for
        ASI, as the learner's rollout hands them over), the clamped actions stepped, and per
        step what the learner's buffers take. ``policy``: ``builder`` (rl-games' model
        builder), ``build_config`` and ``state`` (the model's state dict: weights,
        normalisers and value scale at the start of this epoch); the model is built once.

        Returns:
            host arrays ``obses [H, n, D]``, ``actions``, ``mus``, ``sigmas [H, n, A]``,
            ``neglogpacs [H, n]``, ``values [H, n, 1]`` (denormalised), ``rewards``,
            ``dones``, ``time_outs [H, n]``; ``last_obs [n, D]`` and its ``last_values
            [n, 1]``; ``stats`` (one host ``StepStats`` per step), ``step_s`` and
            ``physics_s`` per step (seconds in the task's step and in its physics).
        """
        if self.obs is None:
            self.reset(False)
        dev, n = self.task.device, self.task.num_envs
        if self.model is None:
            # its random initial weights are overwritten: they must not draw from the action
            # noise's RNG; rl-games prints its normalisers' shapes
            with contextlib.redirect_stdout(io.StringIO()), torch.random.fork_rng(devices=[]):
                self.model = policy["builder"].build(policy["build_config"]).to(dev)
        model = self.model
        model.load_state_dict(policy["state"])
        model.eval()
        obs, out = self.obs, {k: [] for k in ("obses", "actions", "mus", "sigmas", "neglogpacs",
                                             "values", "rewards", "dones", "time_outs")}  # fmt: skip
        stats, step_s, physics_s = [], [], []
        with torch.no_grad():
            for _ in range(horizon):
                res = model(
                    {"is_train": False, "prev_actions": None, "obs": obs, "rnn_states": None}
                )
                self.task.observe_values(res["values"][:, 0].to(dev))
                actions = res["actions"].clamp(-1.0, 1.0) if clip_actions else res["actions"]
                before, t0 = self.task.engine.physics_seconds, time.perf_counter()
                r = self.task.step(actions.to(dev))
                step_s.append(time.perf_counter() - t0)
                physics_s.append(self.task.engine.physics_seconds - before)
                for k in ("actions", "mus", "sigmas", "neglogpacs", "values"):
                    out[k].append(res[k])
                out["obses"].append(obs)
                out["rewards"].append(r.reward)
                out["dones"].append(r.done)
                out["time_outs"].append(r.truncated)
                stats.append(StepStats.of(r).to_host())
                obs = r.obs
            last = model({"is_train": False, "prev_actions": None, "obs": obs, "rnn_states": None})
        self.obs = obs
        host = {k: torch.stack(v).cpu().numpy() for k, v in out.items()}
        host["neglogpacs"] = host["neglogpacs"].reshape(horizon, n)
        return {**host, "last_obs": obs.cpu().numpy(), "last_values": last["values"].cpu().numpy(),
                "stats": stats, "step_s": step_s, "physics_s": physics_s}  # fmt: skip

    def stats(self) -> dict[str, float]:
        return self.task.stats()

    def get_state(self) -> dict:
        """The task's state, and the action noise's RNG (``rollout``)."""
        return {**task_state(self.task), "actor_torch_rng": torch.get_rng_state()}

    def set_state(self, state: dict, episodes: bool = True) -> bool:
        if state.get("actor_torch_rng") is not None:
            torch.set_rng_state(state["actor_torch_rng"])
        restored = load_task_state(self.task, state, episodes)
        self.obs = None  # observed again from the restored state
        return restored


RAY_INLINE_RESULT_BYTES = 8 << 20
"""Largest task result a local cluster started here returns inline, in the reply (Ray's
default, 100 KiB, sends an actor's step results, e.g. 128 envs' observations of 140 KiB,
through the object store; inline, two actors' round trips were ~2 ms shorter per call in one
measurement, docs/training.md). Joined clusters keep their own setting
(``RAY_max_direct_call_object_size`` where they are started)."""


def ray_temp_dir(run_dir: str | Path | None, configured: str | None = None) -> str:
    """Ray's session dir: ``configured``, else ``RUN_DIR/ray`` when short enough for Unix sockets."""
    if configured:
        return str(configured)
    if run_dir is not None:
        path = Path(run_dir).resolve() / "ray"
        if len(str(path)) <= RAY_SOCKET_DIR_MAX:
            return str(path)
    return f"/tmp/ray_m2d_{os.getuid()}"


def init_ray(rc: RayConfig, run_dir: str | Path | None = None) -> bool:
    """Join ``rc.address`` or start a local Ray cluster; reuse one already initialised here.

    Returns:
        True when this call started (or connected) Ray and so should shut it down.
    """
    import ray

    if ray.is_initialized():
        return False
    kw = {"include_dashboard": False, "logging_level": logging.WARNING, "log_to_driver": True}
    # A Ray job's driver (`mimic2dm submit`) gets its cluster's address in RAY_ADDRESS.
    address = rc.address or os.environ.get("RAY_ADDRESS")
    if address:
        ray.init(address=address, **kw)
        log.info("joined the Ray cluster at %s", address)
    else:
        tmp = ray_temp_dir(run_dir, rc.temp_dir)
        ray.init(num_cpus=rc.num_cpus or os.cpu_count(), _temp_dir=tmp,
                 _system_config={"max_direct_call_object_size": RAY_INLINE_RESULT_BYTES}, **kw)  # fmt: skip
        log.info("started a local Ray cluster (session files in %s)", tmp)
    return True


class RayVecEnv(IVecEnv):
    """Envs spread over Ray actors, one task batch each; results concatenated in actor order.

    Args:
        spec: what every actor builds (its MuJoCo threads set to ``rc.threads_per_actor``).
        counts: envs of each actor (``sum(counts) = N``).
        seed: run seed; actor ``i`` seeds its task with ``seed + 1000 i`` (replacements add
            ``100003 x`` their generation).
        rc: Ray settings (``actor_cpus``, ``step_timeout_s``).
        owns_ray: shut Ray down on :meth:`close`.
    """

    def __init__(
        self, spec: TaskSpec, counts: list[int], seed: int, rc: RayConfig, owns_ray: bool = False
    ):
        import ray

        self.ray, self.rc, self.owns_ray = ray, rc, owns_ray
        # every backend takes num_threads (GPU backends ignore it)
        spec = spec.with_engine(num_threads=rc.threads_per_actor)
        self.spec, self.counts, self.seed_value = spec, list(counts), seed
        self.num_envs = sum(self.counts)
        self.bounds_ = np.cumsum([0, *self.counts])
        self._inflight: dict[int, tuple] = {}  # pipelined steps sent to actors, by actor
        # SPREAD (a soft strategy): actors go to different nodes when they can, and a replacement
        # goes to any node with room, e.g. a surviving one after its node died.
        self._actor_cls = ray.remote(EnvActor).options(
            num_cpus=rc.actor_cpus, max_restarts=0, scheduling_strategy="SPREAD"
        )
        self.generation = [0] * len(self.counts)
        self.actors = [self._spawn(i) for i in range(len(self.counts))]
        self.info = ray.get(self.actors[0].describe.remote())
        self._values: np.ndarray | None = None
        self._restored: list[bool] | None = None  # per actor, set by set_env_state until reset()
        self._state_backup: list[dict] | None = None
        self.restarts = 0
        self.events: list[dict] = []

    def _spawn(self, i: int):
        seed = self.seed_value + 1000 * i + 100003 * self.generation[i]
        return self._actor_cls.remote(self.spec, self.counts[i], seed)

    def get_env_info(self) -> dict:
        return env_info(self.info["obs_dim"], self.info["action_dim"])

    def obs_layout(self) -> dict[str, int]:
        return dict(self.info["layout"])

    def _slices(self, x: np.ndarray) -> list[np.ndarray]:
        return [x[a:b] for a, b in zip(self.bounds_[:-1], self.bounds_[1:], strict=True)]

    def reset(self) -> torch.Tensor:
        """Observation ``[N, D]``; new episodes everywhere unless a checkpoint was just loaded."""
        restored = self._restored or [False] * len(self.actors)
        refs = [a.reset.remote(not r) for a, r in zip(self.actors, restored, strict=True)]
        self._restored, self._values = None, None
        return torch.from_numpy(np.concatenate(self.ray.get(refs)))

    def observe_values(self, values: torch.Tensor) -> None:
        """Critic values ``[N]``; each actor gets its slice with the next :meth:`step`."""
        self._values = values.detach().reshape(-1).float().cpu().numpy()

    @property
    def num_groups(self) -> int:
        """Env groups of the learner's pipelined rollout: the actors (``ray.pipeline``), else 1."""
        return len(self.actors) if self.rc.pipeline else 1

    @property
    def bounds(self) -> list[tuple[int, int]]:
        return [(int(a), int(b)) for a, b in zip(self.bounds_[:-1], self.bounds_[1:], strict=True)]

    def launch(self, g: int, actions: torch.Tensor, values: torch.Tensor | None = None) -> None:
        """Send actor ``g`` its step (``actions [n, A]``, critic ``values [n]``); it runs in the
        actor's process until :meth:`finish`."""
        v = None if values is None else values.detach().reshape(-1).float().cpu().numpy()
        self._inflight[g] = (
            self.actors[g].step.remote(actions.detach().float().cpu().numpy(), v),
            time.perf_counter(),
        )

    def finish(self, g: int):
        """Actor ``g``'s step: ``obs [n, D]``, ``rewards [n]``, ``dones [n]`` uint8, ``infos``
        (``physics_s``: the part of the wait that the actor's physics can account for;
        ``physics_busy_s``: the actor's physics time)."""
        ref, _ = self._inflight.pop(g)
        t0 = time.perf_counter()
        r, restarted = self._get(g, ref)
        waited = time.perf_counter() - t0
        infos = {"time_outs": torch.from_numpy(r[3]).bool(), "stats": StepStats().merge(r[4]),
                 "actor_restarts": restarted, "physics_s": min(waited, r[5]), "physics_busy_s": r[5]}  # fmt: skip
        return (
            torch.from_numpy(r[0]),
            torch.from_numpy(r[1]),
            torch.from_numpy(r[2]).to(torch.uint8),
            infos,
        )

    @property
    def _lost(self) -> tuple[type[Exception], ...]:
        """Errors that mean an actor's answer is gone: the actor died, it did not answer in
        ``step_timeout_s``, or its result object was lost with its node (a node killed between
        the actor's reply and this process's ``get`` raises ``ObjectReconstructionFailedError``,
        an ``ObjectLostError``, not ``RayActorError``)."""
        ex = self.ray.exceptions
        return (ex.RayActorError, ex.GetTimeoutError, ex.ObjectLostError)

    def _get(self, i: int, ref) -> tuple[tuple, int]:
        """Actor ``i``'s step result, or a replacement actor's fresh start (and 1) if it died."""
        try:
            return self.ray.get(ref, timeout=self.rc.step_timeout_s), 0
        except self._lost as err:
            return self._replace(i, err), 1

    def step(self, actions: torch.Tensor):
        """Actions ``[N, A]`` -> ``obs [N, D]``, ``rewards [N]``, ``dones [N]`` uint8, ``infos``."""
        acts = self._slices(actions.detach().float().cpu().numpy())
        vals = self._slices(self._values) if self._values is not None else [None] * len(self.actors)
        self._values = None
        refs = [a.step.remote(x, v) for a, x, v in zip(self.actors, acts, vals, strict=True)]
        results, restarted = [], 0
        for i, ref in enumerate(refs):
            r, k = self._get(i, ref)
            results.append(r)
            restarted += k
        cat = lambda i: torch.from_numpy(np.concatenate([r[i] for r in results]))  # noqa: E731
        stats = StepStats()
        for r in results:
            stats.merge(r[4])
        infos = {"time_outs": cat(3).bool(), "stats": stats, "actor_restarts": restarted,
                 "physics_s": max(r[5] for r in results)}  # fmt: skip
        return cat(0), cat(1), cat(2).to(torch.uint8), infos

    @property
    def actor_policy(self) -> bool:
        """The actors run the policy and collect whole rollouts (``ray.actor_policy``)."""
        return bool(self.rc.actor_policy)

    def rollout(
        self, policy: dict, horizon: int, clip_actions: bool = True
    ) -> list[tuple[dict, int]]:
        """Every actor's :meth:`EnvActor.rollout` of ``horizon`` steps by ``policy`` (put once
        in the object store), in actor order, each with 1 if the actor died and its
        replacement collected the rollout from fresh episodes (else 0)."""
        model_ref = self.ray.put(policy)
        refs = [a.rollout.remote(model_ref, horizon, clip_actions) for a in self.actors]
        out = []
        for i, ref in enumerate(refs):
            try:
                out.append((self.ray.get(ref, timeout=self.rc.step_timeout_s), 0))
            except self._lost as err:
                self._replace(i, err)  # a fresh actor (checkpointed ASI buffers), new episodes
                out.append((self.ray.get(self.actors[i].rollout.remote(model_ref, horizon, clip_actions),
                                         timeout=self.rc.step_timeout_s), 1))  # fmt: skip
        self._values = None
        return out

    def _replace(self, i: int, err: Exception):
        """Start a new actor in slot ``i``; its envs report done (as time-outs) this step."""
        log.warning(
            "Ray env actor %d died (%s: %s); starting a replacement",
            i,
            type(err).__name__,
            str(err)[:200],
        )
        try:
            self.ray.kill(self.actors[i], no_restart=True)
        except Exception:  # noqa: BLE001 - it is gone already
            pass
        self.generation[i] += 1
        self.actors[i] = self._spawn(i)
        backup = self._state_backup[i] if self._state_backup is not None else None
        if backup is not None:  # its ASI buffers start from the last checkpoint's, not from scratch
            self.ray.get(self.actors[i].set_state.remote(backup, False))
        obs = self.ray.get(self.actors[i].reset.remote(False))
        n = self.counts[i]
        self.restarts += 1
        self.events.append(
            {
                "time": time.time(),
                "actor": i,
                "generation": self.generation[i],
                "error": type(err).__name__,
            }
        )
        return (
            obs,
            np.zeros(n, dtype=np.float32),
            np.ones(n, dtype=bool),
            np.ones(n, dtype=bool),
            StepStats(),
            0.0,
        )

    def _call_all(self, method: str, *args_per_actor) -> list:
        """``method`` on every actor; None for an actor found dead (the next step replaces it)."""
        refs = [
            getattr(a, method).remote(*(x[i] for x in args_per_actor))
            for i, a in enumerate(self.actors)
        ]
        out = []
        for i, ref in enumerate(refs):
            try:
                out.append(self.ray.get(ref, timeout=self.rc.step_timeout_s))
            except self._lost as err:
                log.warning(
                    "Ray env actor %d did not answer %s (%s); it is replaced at the next step",
                    i,
                    method,
                    type(err).__name__,
                )
                out.append(None)
        return out

    def stats(self) -> dict[str, float]:
        """The tasks' statistics averaged over the live actors (``*replacements`` summed)."""
        return _merge_stats([s for s in self._call_all("stats") if s is not None])

    def get_env_state(self) -> dict:
        """Every actor's task state; a dead actor's slot keeps its last snapshot (or None)."""
        tasks = self._call_all("get_state")
        backup = self._state_backup or [None] * len(tasks)
        tasks = [t if t is not None else backup[i] for i, t in enumerate(tasks)]
        self._state_backup = tasks
        return {"kind": "tasks", "tasks": tasks}

    def set_env_state(self, env_state: dict | None) -> None:
        if env_state is None:
            return
        saved = env_state["tasks"]
        same = len(saved) == len(self.actors)
        if not same:
            log.warning(
                "checkpoint has %d env batches, this run %d actors: restored the tasks' buffers only",
                len(saved),
                len(self.actors),
            )
        picks = [saved[i % len(saved)] for i in range(len(self.actors))]
        live = [i for i, st in enumerate(picks) if st is not None]
        refs = [self.actors[i].set_state.remote(picks[i], same) for i in live]
        restored = dict(zip(live, self.ray.get(refs), strict=True))
        self._restored = [restored.get(i, False) for i in range(len(self.actors))]
        self._state_backup = picks

    def close(self) -> None:
        for a in self.actors:
            try:
                self.ray.kill(a, no_restart=True)
            except Exception:  # noqa: BLE001
                pass
        if self.owns_ray and self.ray.is_initialized():
            self.ray.shutdown()


def make_vecenv(
    spec: TaskSpec,
    num_envs: int,
    seed: int,
    rc: RayConfig,
    run_dir: str | Path | None = None,
    groups: int = 1,
) -> IVecEnv:
    """The vecenv the ``ray`` config asks for.

    Args:
        spec: env spec.
        num_envs: total envs (with Ray: split evenly over ``rc.num_actors`` unless
            ``rc.envs_per_actor`` is set, which then decides the total).
        seed: run seed.
        rc: Ray settings (``enabled: false`` -> in-process).
        run_dir: for Ray's session files.
        groups: in-process: env groups whose physics overlaps the learner's work on the
            others (``train.env_groups``); with Ray, the actors play that part.
    """
    if not rc.enabled:
        return TaskVecEnv(spec, num_envs, seed, groups)
    if rc.num_actors < 1:
        raise ValueError(f"ray.num_actors must be >= 1, got {rc.num_actors}")
    if rc.envs_per_actor:
        counts = [rc.envs_per_actor] * rc.num_actors
    else:
        if num_envs % rc.num_actors:
            raise ValueError(
                f"train.num_envs={num_envs} does not split over ray.num_actors={rc.num_actors}; set ray.envs_per_actor"
            )
        counts = [num_envs // rc.num_actors] * rc.num_actors
    owns = init_ray(rc, run_dir)
    try:
        return RayVecEnv(spec, counts, seed, rc, owns_ray=owns)
    except BaseException:
        if owns:
            import ray

            ray.shutdown()
        raise
