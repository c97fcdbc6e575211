"""The in-process step path keeps tensors on the engine's device: no host copies per step.

Every registered task is stepped through the in-process vecenv (with auto-resets and
critic values) while the tensor methods that copy to the host or read a number back
(``cpu``, ``numpy``, ``tolist``, ``item``, ``float()``, ``int()``) raise. The engine is the
kinematic fake engine, registered under a name and built through the engine registry, so
the path is the one a GPU backend will run (the CPU MuJoCo backend copies at its own
boundary, which is the point of a backend). Per-step statistics are reduced to host numbers
only afterwards, as the observer does once per epoch.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from fake_engine import KinematicEngine
from mimic2dm.tasks.registry import load_task, task_names

from mimic2dm.engines import ENGINES
from mimic2dm.rl.vecenv import TaskVecEnv

HOST_READS = ("cpu", "numpy", "tolist", "item", "__float__", "__int__", "__index__")


class HostRead(AssertionError):
    pass


@contextlib.contextmanager
def no_host_reads():
    """Make every tensor method in ``HOST_READS`` raise while inside."""
    saved = {name: getattr(torch.Tensor, name) for name in HOST_READS}

    def forbid(name):
        def raiser(self, *args, **kwargs):
            raise HostRead(f"Tensor.{name} called on the step path (shape {list(self.shape)})")

        return raiser

    try:
        for name in HOST_READS:
            setattr(torch.Tensor, name, forbid(name))
        yield
    finally:
        for name, fn in saved.items():
            setattr(torch.Tensor, name, fn)


@pytest.fixture()
def kinematic_engine():
    ENGINES.register("kinematic", lambda: KinematicEngine, overwrite=True)
    yield "kinematic"
    ENGINES._entries.pop("kinematic", None)


def test_the_guard_catches_host_reads():
    """The check can fail: each forbidden call raises inside the guard, and works again after."""
    x = torch.ones(3)
    with no_host_reads():
        for call in (x.cpu, x.numpy, x.tolist, x[0].item, lambda: float(x[0]), lambda: int(x[0])):
            with pytest.raises(HostRead):
                call()
    assert float(x[0]) == 1.0 and x.tolist() == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("task", task_names())
def test_in_process_step_path_makes_no_host_reads(task, kinematic_engine, tmp_path):
    import dataclasses

    from test_tasks import spec_for

    entry = load_task(task)
    spec = dataclasses.replace(
        spec_for(task, "humanoid", tmp_path), engine={"name": kinematic_engine}
    )
    spec = (
        spec.with_config(max_episode_steps=2)
        if "max_episode_steps" in _config_keys(entry)
        else spec
    )
    env = TaskVecEnv(spec, num_envs=4, seed=0)
    try:
        device = env.task.engine.device
        env.reset()
        gen = torch.Generator().manual_seed(0)
        results = []
        with no_host_reads():
            for _ in range(5):
                env.observe_values(torch.randn(4, generator=gen).to(device))
                actions = (0.3 * torch.randn(4, env.task.action_dim, generator=gen)).to(device)
                results.append(env.step(actions))
        obs, rew, dones, infos = results[-1]
        assert obs.device == device and rew.device == device and dones.device == device
        # reduced to host numbers afterwards, as once per epoch
        ended = sum(int(d.sum()) for _, _, d, _ in results)
        if "max_episode_steps" in _config_keys(entry):
            assert ended >= 4, "the auto-reset path was not exercised"
        stats = infos.get("stats")
        if stats is not None:
            assert all(isinstance(v, float) for v in stats.metrics().values())
    finally:
        env.close()


def _config_keys(entry) -> set[str]:
    import dataclasses

    return {f.name for f in dataclasses.fields(entry.config_cls)}
