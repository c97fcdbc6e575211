"""Shared run conventions: atomic checkpoints, RNG state, wandb-offline + TensorBoard logger."""

import random

import numpy as np
import pytest
import torch

from mimic2dm.utils.checkpoint import (
    CheckpointManager,
    atomic_torch_save,
    load_checkpoint,
    rng_state,
    seed_everything,
    set_rng_state,
)
from mimic2dm.utils.run_logging import RunLogger, save_resolved_config


def test_atomic_save_keeps_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "ck.pt"
    atomic_torch_save({"w": 1}, path)

    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        atomic_torch_save({"w": Unpicklable()}, path)
    assert load_checkpoint(path)["w"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["ck.pt"]  # no temp file left behind


def test_unreadable_checkpoint_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="bad.pt"):
        load_checkpoint(bad)
    with pytest.raises(FileNotFoundError, match="nope.pt"):
        load_checkpoint(tmp_path / "nope.pt")


def test_rng_state_roundtrip_continues_the_same_streams():
    seed_everything(3)
    state = rng_state()
    a = (random.random(), np.random.rand(), torch.rand(1).item())
    set_rng_state(state)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == a


def test_checkpoint_manager_best_last_and_snapshots(tmp_path):
    m = CheckpointManager(tmp_path, keep=2)
    for step, metric in [(1, 0.5), (2, 0.3), (3, 0.9), (4, 0.1)]:
        m.save({"step_payload": step}, step, metric=metric, snapshot=True)
    assert load_checkpoint(m.best_path)["step_payload"] == 3
    assert load_checkpoint(m.last)["step_payload"] == 4
    assert sorted(p.name for p in m.dir.glob("step_*.pt")) == [
        "step_000000003.pt",
        "step_000000004.pt",
    ]
    again = CheckpointManager(tmp_path)
    assert again.load_last()["step"] == 4 and again.best == 0.9


def test_run_logger_writes_tensorboard_wandb_offline_and_video(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    logger = RunLogger(tmp_path, {"lr": 0.1})
    logger.log({"reward/pos": 0.5, "bad": float("nan")}, step=1)
    frames = (np.random.default_rng(0).random((6, 36, 50, 3)) * 255).astype(np.uint8)
    logger.log_video("eval/rollout", frames, fps=10, step=1)
    logger.close()
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))
    assert list((tmp_path / "wandb").glob("offline-run-*"))
    video = tmp_path / "videos" / "eval_rollout_000000001.mp4"
    assert video.stat().st_size > 0
    import imageio.v2 as imageio

    assert imageio.get_reader(video).get_data(0).shape == (36, 50, 3)  # not resized
    run_id = (tmp_path / "wandb_id").read_text()
    RunLogger(tmp_path, use_tensorboard=False).close()  # a resumed run keeps its wandb id
    assert (tmp_path / "wandb_id").read_text() == run_id
    assert "lr: 0.1" in save_resolved_config({"lr": 0.1}, tmp_path).read_text()
