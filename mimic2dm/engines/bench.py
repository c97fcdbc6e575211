"""Engine throughput against two baselines measured in the same run on the same model.

- ``engine``: :class:`MujocoEngine` control steps with keypoint read-out into torch.
- ``raw``: ``mujoco.rollout`` on the same model, ``N`` states, the same thread count and
  no read-out: what this machine's cores can do at C speed.
- ``single``: one ``MjData`` stepped in a Python loop (set ctrl, ``mj_step`` x substeps,
  read the keypoint sites), as a gymnasium-style env written by hand would.

All rates are env-steps per second (one env-step = one control step of one env).
"""

from __future__ import annotations

import platform
import time
from collections.abc import Callable

import mujoco
import numpy as np
import torch
from mujoco import rollout as mj_rollout

from mimic2dm.engines.base import EngineOptions
from mimic2dm.engines.mujoco_engine import MujocoEngine, default_num_threads


def _best_rates(
    loops: dict[str, tuple[Callable[[], object], int]], seconds: float, rounds: int
) -> dict[str, float]:
    """Best work-units-per-second of each loop, timed in interleaved rounds.

    The machines are shared: interleaving exposes every loop to the same load and the
    best round is the least disturbed one.

    Args:
        loops: name -> (zero-argument call, work units per call).
        seconds: total timed seconds per loop, split over ``rounds``.
        rounds: number of interleaved rounds.
    """
    best = dict.fromkeys(loops, 0.0)
    for fn, _ in loops.values():
        fn()  # warm-up: thread pools, caches
    for _ in range(rounds):
        for name, (fn, work) in loops.items():
            n, t0 = 0, time.perf_counter()
            while (dt := time.perf_counter() - t0) < seconds / rounds:
                fn()
                n += 1
            best[name] = max(best[name], n * work / dt)
    return best


def _engine_loop(engine: MujocoEngine, targets: torch.Tensor):
    def control_step():
        engine.step(targets)
        return engine.get_keypoints()

    return control_step, engine.num_envs


def _raw_loop(
    engine: MujocoEngine,
    pool: mj_rollout.Rollout,
    targets: np.ndarray,
    threads: int,
    chunk: int = 30,
):
    """``mujoco.rollout`` of ``chunk`` control steps per call, the last state fed back."""
    model, n, sub = engine.model, engine.num_envs, engine.substeps
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    state0 = np.empty(mujoco.mj_stateSize(model, spec))
    mujoco.mj_getState(model, engine.get_mjdata(0), state0, spec)
    init = np.repeat(state0[None], n, axis=0)
    control = np.ascontiguousarray(np.broadcast_to(targets[None, None], (n, sub * chunk, model.nu)))
    out = np.empty((n, sub * chunk, init.shape[1]))
    models, datas = [model] * n, [mujoco.MjData(model) for _ in range(max(threads, 1))]

    def call():
        # skip_checks: no Python-side shape checks and no sensordata recorded (C speed).
        pool.rollout(
            models,
            datas,
            init,
            control,
            skip_checks=True,
            nstep=sub * chunk,
            state=out,
            sensordata=None,
        )
        init[:] = out[:, -1]

    return call, n * chunk


def _single_loop(engine: MujocoEngine, targets: np.ndarray):
    model, sub = engine.model, engine.substeps
    data = engine.get_mjdata(0)
    sites = [
        mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_SITE, s)
        for s in engine.character.keypoint_sites
    ]

    def control_step():
        data.ctrl[:] = targets
        for _ in range(sub):
            mujoco.mj_step(model, data)
        return data.site_xpos[sites].copy()

    return control_step, 1


def bench_engine(
    character: str = "humanoid",
    num_envs: int = 64,
    seconds: float = 2.0,
    threads: int | None = None,
    objects: tuple[str, ...] = (),
    rounds: int = 4,
) -> dict:
    """Measure engine, raw and single-env throughput on one model.

    Args:
        character: registry name or ``CharacterSpec``.
        num_envs: ``N`` envs for the engine and raw rollouts.
        seconds: timed seconds of each of the three measurements.
        threads: worker threads (default: cores available).
        objects: props to add to the scene.
        rounds: interleaved rounds the seconds are split into; the best round counts.

    Returns:
        Dict with ``engine_env_steps_per_s``, ``raw_env_steps_per_s``,
        ``single_env_steps_per_s``, ``engine_vs_raw``, ``engine_vs_single`` and the setup.
    """
    threads = default_num_threads() if threads is None else threads
    engine = MujocoEngine(character, num_envs, objects, EngineOptions(num_threads=threads))
    try:
        targets = engine.default_state().dof_pos
        ctrl = np.zeros(engine.model.nu)
        ctrl[engine.index.dof_ctrl] = targets[0].numpy()
        with mj_rollout.Rollout(nthread=threads if threads > 1 else 0) as pool:
            loops = {
                "engine": _engine_loop(engine, targets),
                "raw": _raw_loop(engine, pool, ctrl, threads),
                "single": _single_loop(engine, ctrl),
            }
            rates = _best_rates(loops, seconds, rounds)
        a, b, c = rates["engine"], rates["raw"], rates["single"]
        return {
            "character": engine.character.name,
            "objects": list(objects),
            "num_envs": num_envs,
            "threads": threads,
            "substeps": engine.substeps,
            "physics_dt": engine.physics_dt,
            "control_dt": engine.control_dt,
            "seconds": seconds,
            "rounds": rounds,
            "engine_env_steps_per_s": a,
            "raw_env_steps_per_s": b,
            "single_env_steps_per_s": c,
            "engine_vs_raw": a / b,
            "engine_vs_single": a / c,
            "mujoco": mujoco.__version__,
            "cpu": platform.processor() or platform.machine(),
            "cores_available": default_num_threads(),
        }
    finally:
        engine.close()


def _keypoint_parity(engine, reference: MujocoEngine, targets: torch.Tensor) -> float:
    """Largest keypoint distance (m) between two engines from the same state and targets.

    Args:
        engine, reference: engines with the same character and ``num_envs``.
        targets: ``[T, N, J]`` PD targets applied to both, one per control step.
    """
    state = reference.get_state()
    engine.reset(None, state.to(engine.device))
    worst = 0.0
    for t in range(targets.shape[0]):
        engine.step(targets[t].to(engine.device))
        reference.step(targets[t])
        d = (engine.get_keypoints().cpu() - reference.get_keypoints()).norm(dim=-1).max()
        worst = max(worst, float(d))
    return worst


def bench_backend(
    name: str,
    character: str = "humanoid",
    num_envs: int = 64,
    seconds: float = 2.0,
    threads: int | None = None,
    device: str = "cpu",
    rounds: int = 4,
) -> dict:
    """Throughput and MuJoCo parity of engine ``name``, with the MuJoCo engine as baseline.

    Both engines simulate ``num_envs`` copies of ``character`` at the default rates; the
    MuJoCo engine uses ``threads`` CPU threads. Parity: from the default standing state,
    (a) 1 s holding the pose, (b) 0.2 s of PD targets offset from it by fixed random
    angles (N(0, 0.1) rad, seed 0); the largest keypoint distance over every step.

    Returns:
        Dict with ``engine_env_steps_per_s``, ``mujoco_env_steps_per_s``,
        ``engine_vs_mujoco``, ``parity_standing_1s_m``, ``parity_targets_0.2s_m`` and the setup.
    """
    from mimic2dm.engines import load_engine

    threads = default_num_threads() if threads is None else threads
    t0 = time.perf_counter()
    engine = load_engine(EngineOptions(name=name, device=device), character, num_envs)
    build_s = time.perf_counter() - t0
    reference = MujocoEngine(character, num_envs, (), EngineOptions(num_threads=threads))
    try:
        hold = reference.default_state().dof_pos
        lo, hi = reference.get_dof_limits()
        gen = torch.Generator().manual_seed(0)
        offset = 0.1 * torch.randn(hold.shape, generator=gen)
        steps = lambda s: round(s / reference.control_dt)  # noqa: E731
        standing = _keypoint_parity(engine, reference, hold.expand(steps(1.0), *hold.shape))
        reference.reset()
        moved = torch.clamp(hold + offset, lo, hi)
        driven = _keypoint_parity(engine, reference, moved.expand(steps(0.2), *hold.shape))
        engine.reset()
        reference.reset()
        rates = _best_rates(
            {
                "engine": _engine_loop(engine, hold.to(engine.device)),
                "mujoco": _engine_loop(reference, hold),
            },
            seconds,
            rounds,
        )
        a, b = rates["engine"], rates["mujoco"]
        return {
            "engine": name,
            "device": str(engine.device),
            "character": engine.character.name,
            "num_envs": num_envs,
            "threads": threads,
            "substeps": engine.substeps,
            "seconds": seconds,
            "rounds": rounds,
            "build_s": build_s,
            "engine_env_steps_per_s": a,
            "mujoco_env_steps_per_s": b,
            "engine_vs_mujoco": a / b,
            "parity_standing_1s_m": standing,
            "parity_targets_0.2s_m": driven,
            "cpu": platform.processor() or platform.machine(),
            "cores_available": default_num_threads(),
        }
    finally:
        engine.close()
        reference.close()
