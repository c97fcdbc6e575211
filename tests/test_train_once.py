"""A training run parses its config once and reads each clip once per process."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from rl_helpers import tiny_config, write_demo

from mimic2dm.motion import format as fmt


def _counting(counter: Counter, key: str, fn):
    def wrapped(*args, **kwargs):
        counter[key] += 1
        return fn(*args, **kwargs)

    return wrapped


def test_a_run_parses_its_config_once_and_reads_each_clip_once(tmp_path, monkeypatch):
    from mimic2dm.tasks.base import TaskEntry

    from mimic2dm.app import runspec
    from mimic2dm.engines.base import EngineOptions
    from mimic2dm.train import train

    clip = write_demo(tmp_path / "clip.npz", seconds=1.0)
    fmt.clear_load_cache()
    calls, reads = Counter(), Counter()
    real_read = fmt._read_npz

    def read(path, kind):
        reads[str(Path(path).resolve())] += 1
        return real_read(path, kind)

    monkeypatch.setattr(fmt, "_read_npz", read)
    monkeypatch.setattr(runspec, "parse_run", _counting(calls, "run", runspec.parse_run))
    monkeypatch.setattr(TaskEntry, "parse_config", _counting(calls, "task", TaskEntry.parse_config))
    engine_options = EngineOptions.from_mapping.__func__
    monkeypatch.setattr(
        EngineOptions,
        "from_mapping",
        classmethod(_counting(calls, "engine", engine_options)),
    )
    groups = 2
    cfg = tiny_config(tmp_path / "run", clip, "train.max_epochs=1", f"train.env_groups={groups}",
                      "task.initial_state=default_pose", "logger.video_every=0")  # fmt: skip
    summary = train(cfg)
    assert summary["epochs"] == 1
    # the app parses every group once; each env group's task is built from the picklable
    # TaskSpec (its config and engine options checked there, as in a Ray actor)
    assert calls == {"run": 1, "task": 1 + groups, "engine": 1 + groups}
    # checks, both env groups: one read of the clip
    assert reads == {str(clip.resolve()): 1}


def test_the_load_cache_sees_a_rewritten_clip_and_hands_out_copies(tmp_path):
    path = write_demo(tmp_path / "clip.npz", seconds=1.0)
    a = fmt.load_motion2d(path)
    a.keypoints[:] = 0.0  # a caller's change does not reach the next caller
    b = fmt.load_motion2d(path)
    assert b.keypoints.any() and b is not a
    assert fmt.read_kind(path) == "motion2d"
    write_demo(path, seconds=2.0)  # an atomic save: a new file
    assert fmt.load_motion2d(path).num_frames > b.num_frames
