"""A tracker checkpoint of an older tracking task (tests/data/legacy_ckpt: a 2-epoch tiny run,
converted from checkpoint format 1 by scripts/convert_legacy_checkpoint.py) loads, evaluates
and rolls out with the numbers it had; an unconverted checkpoint is refused by name."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from mimic2dm.tasks.base import TaskSpec
from mimic2dm.tasks.registry import make_task

from mimic2dm.eval import evaluate
from mimic2dm.rl.envstate import load_task_state
from mimic2dm.rl.policy import CHECKPOINT_VERSION, load_policy, rollout_stats
from mimic2dm.utils.checkpoint import atomic_torch_save, load_checkpoint

DATA = Path(__file__).parent / "data" / "legacy_ckpt"
CKPT, CLIP = DATA / "tracker.pt", DATA / "clip.npz"
EXPECTED = json.loads((DATA / "expected.json").read_text())


def test_legacy_checkpoint_loads_as_a_task_spec():
    p = load_policy(CKPT)
    spec = p.env_spec
    assert isinstance(spec, TaskSpec) and spec.task == "tracking2d" and spec.character == "humanoid"
    assert spec.config["reward"]["scales"] == {"pos": 0.6, "vel": 0.1, "obj": 0.2, "reg": 0.1}
    assert "w_pos" not in spec.config["reward"] and spec.config["view_mode"] == "clip"
    assert spec.engine == {"name": "mujoco", "num_threads": 1, "physics_hz": 60.0}
    assert TaskSpec.from_dict(spec.to_dict()) == spec


def test_legacy_checkpoint_evaluates_with_the_numbers_of_its_time():
    rep = evaluate(str(CKPT), [CLIP], views=1)
    want = EXPECTED["eval_views1"]
    seq = rep["sequences"][0]
    for k, v in want.items():
        assert seq[k] == pytest.approx(v, rel=1e-4), k
    p = load_policy(CKPT)
    st = rollout_stats(
        p, dataclasses.replace(p.env_spec, data=(str(CLIP),)), num_envs=4, steps=20, seed=0
    )
    # the velocity and regulariser terms were redefined since (velocities in image
    # heights per second, a regulariser that varies across policies), and the total with them;
    # the episodes and the position term are what that checkpoint produced then
    redefined = {"reward", "reward/vel", "reward/reg"}
    for k, v in EXPECTED["rollout_stats_4envs_20steps_seed0"].items():
        if k not in redefined:
            assert st[k] == pytest.approx(v, rel=1e-5), k
    assert {"episode_length", "reward/pos"} <= set(EXPECTED["rollout_stats_4envs_20steps_seed0"])


def test_legacy_env_state_restores_into_todays_task():
    """The checkpoint's env state (ASI buffers, episodes in flight) loads into a task built now."""
    ck = load_checkpoint(CKPT)
    snap = ck["env_state"]["tasks"][0]
    spec = dataclasses.replace(load_policy(CKPT).env_spec, data=(str(CLIP),))
    task = make_task(spec, snap["num_envs"], seed=5)
    assert load_task_state(task, snap) is True
    assert (task.asi.scores == snap["task"]["asi"]["scores"]).all()
    assert (task.frame == snap["episodes"]["tensors"]["frame"]).all()
    assert (task.source.clip == snap["episodes"]["tensors"]["clip"]).all()
    obs = task.observe()
    assert obs.shape == (snap["num_envs"], task.obs_dim)
    task.close()


def test_a_checkpoint_of_another_format_version_is_refused_by_name(tmp_path):
    ck = load_checkpoint(CKPT)
    assert ck["meta"]["format_version"] == CHECKPOINT_VERSION == 2
    old = {
        **ck,
        "version": 1,
        "meta": {k: v for k, v in ck["meta"].items() if k != "format_version"},
    }
    atomic_torch_save(old, tmp_path / "v1.pt")
    with pytest.raises(ValueError) as e:
        load_policy(tmp_path / "v1.pt")
    msg = str(e.value)
    assert str(tmp_path / "v1.pt") in msg and "version 1, expected 2" in msg
    assert "scripts/convert_legacy_checkpoint.py" in msg
    newer = {**ck, "meta": {**ck["meta"], "format_version": 3}}
    atomic_torch_save(newer, tmp_path / "v3.pt")
    with pytest.raises(ValueError, match="v3.pt: checkpoint format version 3, expected 2"):
        load_policy(tmp_path / "v3.pt")


def test_the_converter_turns_both_version_1_layouts_into_loadable_checkpoints(tmp_path):
    """Version 1 stored the task as ``meta['env_spec']`` first and as ``meta['task_spec']``
    later; scripts/convert_legacy_checkpoint.py converts either, weights unchanged."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "convert_legacy_checkpoint",
        Path(__file__).parents[1] / "scripts" / "convert_legacy_checkpoint.py",
    )
    conv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conv)
    ck = load_checkpoint(CKPT)
    later_v1 = {
        **{k: v for k, v in ck.items() if k != "train_seconds"},
        "version": 1,
        "meta": {k: v for k, v in ck["meta"].items() if k != "format_version"},
    }
    atomic_torch_save(later_v1, tmp_path / "v1.pt")
    assert conv.main([str(tmp_path / "v1.pt"), str(tmp_path / "v2.pt")]) == 0
    back = load_checkpoint(tmp_path / "v2.pt")
    assert back["meta"]["format_version"] == CHECKPOINT_VERSION and "version" not in back
    assert back["meta"]["task_spec"] == ck["meta"]["task_spec"] and back["train_seconds"] == 0.0
    p = load_policy(tmp_path / "v2.pt")
    assert p.env_spec == load_policy(CKPT).env_spec
    # a file that is not a version-1 checkpoint: one line, exit 1, nothing written
    assert conv.main([str(tmp_path / "v2.pt"), str(tmp_path / "again.pt")]) == 1
    assert not (tmp_path / "again.pt").exists()
