"""One source of defaults: the shipped group configs under ``conf/`` (every task, and each
group's default file of ``conf/tracker.yaml``; the generator apps' optimiser) equal their
schema's defaults, so code that builds a config dataclass directly runs what training runs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf

from mimic2dm.utils.config import to_plain

CONF = Path(__file__).resolve().parents[1] / "conf"

SPEC_TASK_KEYS = ("name", "control_hz", "objects")
"""Keys of a task group that go to the ``TaskSpec``, not to the task's config dataclass."""

KNOWN: dict[str, str] = {
    "engine.num_threads": (
        "EngineOptions() is also the engines' library default, where 0 (all cores) suits "
        "callers outside training; the training app sets 2 for its 2-core learner"
    ),
}
"""Shipped values that differ from the schema on purpose, with the reason."""


def _schemas() -> dict[str, tuple[str, type]]:
    from mimic2dm.generators.optim import OptimConfig
    from mimic2dm.tasks.registry import load_task, task_names

    from mimic2dm.engines.base import EngineOptions
    from mimic2dm.rl.config import RayConfig, TrainConfig
    from mimic2dm.utils.run_logging import LoggerConfig

    out = {f"task/{n}.yaml": ("task", load_task(n).config_cls) for n in task_names()}
    out["train/ppo.yaml"] = ("train", TrainConfig)
    out["ray/none.yaml"] = ("ray", RayConfig)
    out["logger/default.yaml"] = ("logger", LoggerConfig)
    out["engine/mujoco.yaml"] = ("engine", EngineOptions)
    out["optim/adamw.yaml"] = ("optim", OptimConfig)  # the generator apps'
    return out


def _load(rel: str) -> DictConfig:
    """A group file with its ``defaults:`` (same-group parents) merged in, as Hydra composes it."""
    node = OmegaConf.load(CONF / rel)
    parents = [d for d in node.pop("defaults", []) if d != "_self_"]
    folder = Path(rel).parent
    return OmegaConf.merge(*[_load(str(folder / f"{p}.yaml")) for p in parents], node)


def _diffs(node: DictConfig, default, where: str) -> list[str]:
    """Keys of ``node`` (recursively) whose value is not ``default``'s; interpolations
    (``${character.fall_height}``) are set by another group and skipped."""
    out = []
    for key in node:
        full = f"{where}.{key}"
        if OmegaConf.is_interpolation(node, key) or full in KNOWN:
            continue
        if dataclasses.is_dataclass(default):
            if not any(f.name == key for f in dataclasses.fields(default)):
                out.append(f"{full}: not a field of {type(default).__name__}")
                continue
            want = getattr(default, key)
        else:
            want = default.get(key, "<absent>")
        value = node[key]
        if isinstance(value, DictConfig) and dataclasses.is_dataclass(want):
            out += _diffs(value, want, full)
        elif to_plain(value) != to_plain(want):
            out.append(f"{full}: {to_plain(value)!r} shipped, {to_plain(want)!r} in the dataclass")
    return out


@pytest.mark.parametrize("rel", sorted(_schemas()))
def test_shipped_config_equals_the_dataclass_defaults(rel):
    where, schema = _schemas()[rel]
    node = _load(rel)
    if where == "task":
        for k in SPEC_TASK_KEYS:
            node.pop(k, None)
    bad = _diffs(node, schema(), where)
    assert not bad, f"conf/{rel} and {schema.__name__} disagree:\n" + "\n".join(bad)


def test_the_walk_sees_a_disagreement():
    from mimic2dm.tasks.tracking2d.config import TrackingConfig

    node = OmegaConf.create({"tau_term": 0.5, "asi": {"capacity": 3}, "fall_height": "${x}"})
    assert _diffs(node, TrackingConfig(), "task") == [
        "task.tau_term: 0.5 shipped, 0.12 in the dataclass",
        "task.asi.capacity: 3 shipped, 16 in the dataclass",
    ]
