"""`mimic2dm eval` machinery with a fixed policy: sequences, metrics, outputs."""

import json

import pytest
import torch
from mimic2dm.tasks.base import TaskSpec
from mimic2dm.tasks.tracking2d.evaluation import sequences
from mimic2dm.tasks.tracking2d.reference import ReferenceLibrary

from mimic2dm.characters.demo_clip import make_demo_clip
from mimic2dm.eval import evaluate
from mimic2dm.motion.format import save_motion2d
from mimic2dm.motion.synth import synthesize_views

DEFAULT_POSE = {"initial_state": "default_pose", "initial_ground": False}


class HoldPose:
    """Zero actions: the PD targets hold the default pose (an untrained baseline)."""

    def __init__(self, spec):
        self.env_spec = spec

    def act(self, obs, deterministic=True):
        return torch.zeros(obs.shape[0], 28)


@pytest.fixture(scope="module")
def two_view_clip(tmp_path_factory):
    m3, m2 = make_demo_clip(seconds=1.5)
    m = synthesize_views(m2.keypoints3d, "coco17", m2.fps, num_views=2, camera="static", seed=3)
    path = tmp_path_factory.mktemp("eval") / "clip.npz"
    save_motion2d(m, path)
    return path


def test_sequences_cover_every_view(two_view_clip):
    lib = ReferenceLibrary.from_files([two_view_clip], 30.0)
    assert sequences(lib, 1) == [(0, [0]), (0, [1])]
    assert sequences(lib, 2) == [(0, [0, 1]), (0, [1, 0])]
    with pytest.raises(ValueError, match="at least 3 views"):
        sequences(lib, 3)


def test_evaluate_writes_report_and_picture(two_view_clip, tmp_path):
    out = tmp_path / "eval"
    rep = evaluate(HoldPose(TaskSpec("tracking2d", "humanoid", data=(str(two_view_clip),), config=DEFAULT_POSE)), [two_view_clip], views=1,
                   json_out=out / "eval.json", picture_out=out / "overlay.png")  # fmt: skip
    assert len(rep["sequences"]) == 2
    for s in rep["sequences"]:
        assert s["error_2d_px"] > 0 and s["max_error_2d_px"] >= s["error_2d_px"]
        assert s["success"] == (s["max_error_2d_px"] <= 100.0)
        assert s["mpjpe_mm"] > 0 and s["jitter"] >= 0
    assert json.loads((out / "eval.json").read_text())["success_rate"] == rep["success_rate"]
    assert (out / "overlay.png").stat().st_size > 1000


def test_evaluate_writes_video(two_view_clip, tmp_path, gl_backend):
    video = tmp_path / "rollout.mp4"
    evaluate(
        HoldPose(
            TaskSpec("tracking2d", "humanoid", data=(str(two_view_clip),), config=DEFAULT_POSE)
        ),
        [two_view_clip],
        video_out=video,
    )
    assert video.stat().st_size > 1000


def test_multi_view_evaluation_runs(two_view_clip):
    rep = evaluate(
        HoldPose(
            TaskSpec("tracking2d", "humanoid", data=(str(two_view_clip),), config=DEFAULT_POSE)
        ),
        [two_view_clip],
        views=2,
    )
    assert rep["views"] == 2 and all(len(s["views"]) == 2 for s in rep["sequences"])


def test_a_task_without_evaluation_is_a_clear_error():
    with pytest.raises(ValueError, match="task 'stand' has no evaluation"):
        evaluate(HoldPose(TaskSpec("stand", "humanoid")), [], views=1)
