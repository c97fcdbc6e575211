"""Reference sources of the tracking task: the clip library (with its object track) and a
stream of 2D frames pushed at run time."""

from __future__ import annotations

import pytest
import torch
from fake_engine import KinematicEngine
from mimic2dm.tasks.tracking2d.asi import ASIConfig
from mimic2dm.tasks.tracking2d.config import TrackingConfig
from mimic2dm.tasks.tracking2d.reference import ReferenceLibrary, clip_from_motion
from mimic2dm.tasks.tracking2d.source import ClipReference, StreamingReference
from mimic2dm.tasks.tracking2d.task import Tracking2DTask
from task_helpers import standing_clip

# the starts these tests were written for (the shipped config starts from the clip's 3D pose)
DEFAULT_POSE = dict(
    initial_state="default_pose", initial_ground=False, asi=ASIConfig(start_sampling="uniform")
)


def clip_task(m2, n: int, objects=()) -> Tracking2DTask:
    lib = ReferenceLibrary([clip_from_motion(m2, 30.0, "c")], m2.keypoint_set)
    return Tracking2DTask(
        KinematicEngine("humanoid", n, objects),
        ClipReference(lib, n, 1),
        TrackingConfig(**DEFAULT_POSE),
    )


def test_the_clip_library_carries_the_object_track():
    m2 = standing_clip("humanoid", ball=True)
    clip = clip_from_motion(m2, 30.0, "c")
    assert clip.object_uv.shape == (1, 20, 2) and clip.object_valid.all()
    assert torch.allclose(clip.object_uv, torch.from_numpy(m2.object_center).float())
    src = ClipReference(ReferenceLibrary([clip], m2.keypoint_set), 2, 1)
    src.begin(torch.arange(2), torch.tensor([0, 5]), torch.Generator())
    uv, ok = src.objects(torch.tensor([0, 5]))
    assert uv.shape == (2, 1, 2) and ok.all() and torch.allclose(uv[1, 0], clip.object_uv[0, 5])


def test_object_reward_only_where_it_applies():
    """``obj`` (and ``foot_ball``, which also needs contact bodies) need an object in the engine
    and a track in the reference; else they are left out."""
    with_ball = clip_task(standing_clip("humanoid", ball=True), 2, objects=("ball",))
    r = with_ball.step(torch.zeros(2, with_ball.action_dim))
    assert (
        set(r.terms) == {"pos", "vel", "reg", "ori", "contact", "scale", "obj", "foot_ball"}
        and ((r.terms["obj"] >= 0) & (r.terms["obj"] <= 1)).all()
    )
    # initial states put the ball on the clip's 3D track: the 2D error starts at ~0
    assert (r.terms["obj"] > 0.99).all()
    st = with_ball.asi.sample_states(torch.zeros(2, dtype=torch.long), with_ball.gen)
    st.object_pos[:, 0] = torch.tensor([0.0, 0.0, 0.11])  # the ball moved off its track
    with_ball.start_episodes(torch.arange(2), torch.zeros(2, dtype=torch.long), st)
    r = with_ball.step(torch.zeros(2, with_ball.action_dim))
    assert (r.terms["obj"] < 0.9).all()
    no_track = clip_task(standing_clip("humanoid"), 2, objects=("ball",))
    assert set(no_track.step(torch.zeros(2, no_track.action_dim)).terms) == {
        "pos",
        "vel",
        "reg",
        "ori",
        "contact",
        "scale",
    }
    no_ball = clip_task(standing_clip("humanoid", ball=True), 2)
    assert set(no_ball.step(torch.zeros(2, no_ball.action_dim)).terms) == {
        "pos",
        "vel",
        "reg",
        "ori",
        "contact",
        "scale",
    }


def stream_and_clip(n: int = 2):
    m2 = standing_clip("humanoid", frames=30)
    cam = (m2.camera_R[:, 0], m2.camera_t[:, 0], m2.camera_intrinsics[:, 0])
    src = StreamingReference("coco17", n, 1, cam, m2.image_size[1], capacity=8)
    return m2, src


def test_streaming_reference_follows_pushed_frames():
    m2, src = stream_and_clip()
    with pytest.raises(ValueError, match="push a frame"):
        Tracking2DTask(KinematicEngine("humanoid", 2), src, TrackingConfig(**DEFAULT_POSE))
    kp = torch.from_numpy(m2.keypoints[0]).float()  # [T, K, 2]
    src.push(kp[0])
    task = Tracking2DTask(
        KinematicEngine("humanoid", 2), src, TrackingConfig(**DEFAULT_POSE, max_episode_steps=50)
    )
    assert task.observe().shape == (2, task.obs_dim)
    # the character stands in the default pose: it matches the pushed reference
    for t in range(1, 12):  # more frames than the capacity: old ones are dropped
        src.push(kp[t] + t)  # the reference drifts one pixel per frame
        r = task.step(torch.zeros(2, task.action_dim))
        assert torch.isfinite(r.obs).all() and not r.truncated.any()  # a stream has no end
        ref, _ = task.reference(task.frame)
        assert torch.allclose(ref[0, 0], kp[t] + t)
    assert r.terms["pos"].min() > 0.9
    # future frames not pushed yet read as the newest one
    uv, _, _ = src.keypoints(task.frame[:, None] + torch.arange(1, 3))
    assert torch.allclose(uv[0, 0, 1], kp[11] + 11)
    assert task.observe_values(torch.ones(2)) == 0  # stream starts are not replayed: no ASI
    state = src.episode_state()
    src.push(kp[12])
    src.load_episode_state(state)
    assert src.pushed == 12


def test_streaming_reference_rejects_bad_frames():
    m2, src = stream_and_clip()
    with pytest.raises(ValueError, match="uv must be \\[K, 2\\].*K=17, got \\[16, 2\\]"):
        src.push(torch.zeros(16, 2))
    with pytest.raises(ValueError, match="camera: expected R \\[2, 3, 3\\]"):
        StreamingReference(
            "coco17", 2, 2, (m2.camera_R[:, 0], m2.camera_t[:, 0], m2.camera_intrinsics[:, 0]), 1080
        )
    kp = torch.from_numpy(m2.keypoints[0, 0]).float()
    kp[3] = float("nan")  # unseen keypoints are masked
    src.push(kp)
    _, mask, root = src.keypoints(torch.zeros(2, dtype=torch.long))
    assert not mask[0, 0, 3] and mask[0, 0].sum() == 16 and torch.isfinite(root).all()


def test_static_tracking_cameras_draw_follow_and_static_views_alike_often():
    """`task.camera_mode=static_tracking`: each episode's virtual view comes from a follow
    camera (moving with the root) or a static one, about half each; the task's config accepts it."""
    import dataclasses

    import numpy as np

    from mimic2dm.characters.demo_clip import make_demo_clip

    _, m2 = make_demo_clip(seconds=2.0)
    walk = np.linspace(0.0, 2.0, len(m2.keypoints3d))[:, None, None] * np.array([1.0, 0.0, 0.0])
    m2 = dataclasses.replace(
        m2, keypoints3d=(m2.keypoints3d + walk).astype(np.float32)
    )  # the root moves 2 m
    lib = ReferenceLibrary([clip_from_motion(m2, 30.0, "c")], m2.keypoint_set, view_mode="virtual",
                           camera_mode="static_tracking")  # fmt: skip
    views = lib.episode_views(torch.zeros(200, dtype=torch.long), torch.Generator().manual_seed(0))
    n = lib.lengths[0]
    moving = (views.cam_t[:, 0, :n] - views.cam_t[:, 0, :1]).abs().amax(dim=(1, 2)) > 1e-4
    assert 70 <= int(moving.sum()) <= 130, int(moving.sum())
    assert TrackingConfig(camera_mode="static_tracking").camera_mode == "static_tracking"
    with pytest.raises(Exception, match="task.camera_mode='follow'"):
        TrackingConfig(camera_mode="follow")
