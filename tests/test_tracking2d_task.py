"""The tracking task end to end: against a kinematic fake engine (task logic) and on real MuJoCo."""

import pytest
import torch
from fake_engine import KinematicEngine
from mimic2dm.tasks.tracking2d.asi import ASIConfig
from mimic2dm.tasks.tracking2d.config import TrackingConfig
from mimic2dm.tasks.tracking2d.reference import ReferenceLibrary, clip_from_motion
from mimic2dm.tasks.tracking2d.source import ClipReference
from mimic2dm.tasks.tracking2d.task import Tracking2DTask

from mimic2dm.characters.clips import load_mocap_keypoints
from mimic2dm.characters.demo_clip import make_demo_clip
from mimic2dm.engines import load_engine
from mimic2dm.geometry.virtual import VirtualCameraConfig
from mimic2dm.motion.synth import synthesize_views
from mimic2dm.utils.paths import mocap_dir

MOCAP = mocap_dir()


# the starts these tests were written for (the shipped config starts from the clip's 3D pose)
DEFAULT_POSE = dict(
    initial_state="default_pose", initial_ground=False, asi=ASIConfig(start_sampling="uniform")
)


@pytest.fixture(scope="module")
def demo():
    m3, m2 = make_demo_clip(seconds=2)
    return m3, m2


def library(m2, **kw):
    return ReferenceLibrary([clip_from_motion(m2, 30.0, "demo")], m2.keypoint_set, **kw)


def tracking(engine, lib, cfg, **kw) -> Tracking2DTask:
    """The task over the clips of ``lib``."""
    return Tracking2DTask(engine, ClipReference(lib, engine.num_envs, cfg.num_views), cfg, **kw)


def test_fake_engine_task_shapes_rewards_and_auto_reset(demo):
    m3, m2 = demo
    task = tracking(
        KinematicEngine("humanoid", 6),
        library(m2),
        TrackingConfig(**DEFAULT_POSE, max_episode_steps=10),
    )
    obs = task.observe()
    assert obs.shape == (6, task.obs_dim) and torch.isfinite(obs).all()
    assert task.obs_layout() == {"prop": task.prop_dim, "view": task.view_dim, "views": 1}
    lengths, causes = [], {}
    for _ in range(25):
        res = task.step(torch.zeros(6, task.action_dim))
        obs, r, term, trunc = res.obs, res.reward, res.terminated, res.truncated
        assert obs.shape == (6, task.obs_dim) and r.shape == (6,)
        assert ((r >= 0) & (r <= 1)).all()
        assert not (term & trunc).any()
        assert torch.equal(res.causes["timeout"], trunc)
        assert set(res.terms) == {
            "pos",
            "vel",
            "reg",
            "ori",
            "contact",
            "scale",
        }  # no object: no obj term; Yu 2021 cues and the scale cue logged
        lengths += res.episode_length[res.done].tolist()
        assert (res.episode_length[~res.done] == 0).all()
        for k, v in res.causes.items():
            causes[k] = causes.get(k, 0) + int(v.sum())
    assert lengths and max(lengths) <= 10
    assert causes["timeout"] > 0
    assert (task.steps <= 10).all()


def test_reprojection_termination_fires_on_a_wild_action(demo):
    m3, m2 = demo
    task = tracking(KinematicEngine("humanoid", 4), library(m2), TrackingConfig(**DEFAULT_POSE))
    task.observe()
    res = task.step(torch.ones(4, task.action_dim))  # every joint to one extreme
    assert res.terminated.all() and int(res.causes["reprojection"].sum()) == 4
    assert (task.steps == 0).all()  # auto-reset started new episodes


def test_nonfinite_physics_is_terminated_and_counted(demo):
    m3, m2 = demo
    eng = KinematicEngine("humanoid", 3)
    task = tracking(eng, library(m2), TrackingConfig(**DEFAULT_POSE))
    task.observe()
    eng.nan_envs[1] = True
    res = task.step(torch.zeros(3, task.action_dim))
    assert int(res.causes["nonfinite"].sum()) == 1 and res.terminated[1] and res.reward[1] == 0.0
    assert torch.isfinite(res.obs).all()


def test_camera_parameters_never_reach_the_policy(demo):
    """The same motion seen by a camera with another focal length and resolution gives the same observation."""
    m3, m2 = demo
    lib_a = library(m2)
    m2b = m2.view(0)
    m2b.camera_intrinsics = m2b.camera_intrinsics * 0.5
    m2b.keypoints = (
        m2b.keypoints - m2.camera_intrinsics[..., None, 2:4]
    ) * 0.5 + m2b.camera_intrinsics[..., None, 2:4]
    m2b.image_size = (960, 540)
    lib_b = library(m2b)
    obs = []
    for lib in (lib_a, lib_b):
        task = tracking(KinematicEngine("humanoid", 2), lib, TrackingConfig(**DEFAULT_POSE), seed=3)
        obs.append(task.observe())
    assert torch.allclose(obs[0], obs[1], atol=1e-4)


def test_values_fill_asi_buffers_and_state_dict_roundtrips(demo):
    m3, m2 = demo
    task = tracking(
        KinematicEngine("humanoid", 8), library(m2), TrackingConfig(**DEFAULT_POSE), seed=1
    )
    task.observe()
    assert not torch.isfinite(task.asi.scores).any()
    for _ in range(5):
        task.step(torch.zeros(8, task.action_dim))
        task.observe_values(torch.arange(8, dtype=torch.float32))
    assert torch.isfinite(task.asi.scores).any()
    state = task.state_dict()
    other = tracking(
        KinematicEngine("humanoid", 8), library(m2), TrackingConfig(**DEFAULT_POSE), seed=99
    )
    other.load_state_dict(state)
    assert torch.equal(other.asi.scores, task.asi.scores)
    a = task.asi.sample_frames(5, task.gen)
    b = other.asi.sample_frames(5, other.gen)
    assert torch.equal(a, b)


def test_multi_view_episodes_observe_each_view(demo):
    m3, m2 = demo
    lib = library(m2, view_mode="virtual", camera_config=VirtualCameraConfig())
    task = tracking(
        KinematicEngine("humanoid", 3), lib, TrackingConfig(**DEFAULT_POSE, num_views=2)
    )
    obs = task.observe()
    assert obs.shape[1] == task.prop_dim + 2 * task.view_dim
    v1 = obs[:, task.prop_dim : task.prop_dim + task.view_dim]
    v2 = obs[:, task.prop_dim + task.view_dim :]
    assert not torch.allclose(v1, v2)  # two different virtual cameras


@pytest.mark.parametrize("view_mode", ["virtual", "mixed"])
def test_batched_tracking_views_are_tracking_cameras_of_the_clip(demo, view_mode):
    """The batched ``tracking`` draw (one call per clip for all resetting envs) gives, per env
    and view, a camera at a fixed offset from the 3D root within the ranges, looking at it,
    and the clip's 3D keypoints projected through it; ``mixed`` keeps about half the clip views."""
    from mimic2dm.geometry.camera import project_points

    m3, m2 = demo
    cfg = VirtualCameraConfig()
    lib = library(m2, view_mode=view_mode, camera_mode="tracking", camera_config=cfg)
    clip = lib.clips[0]
    E, V, n = 16, 2, clip.num_frames
    out = lib.episode_views(torch.zeros(E, dtype=torch.long), torch.Generator().manual_seed(3), V)
    root3d = clip.keypoints3d[:, list(lib.kset.root)].mean(1)
    drawn, dists = 0, set()
    for e in range(E):
        for v in range(V):
            R, t, k = out.cam_R[e, v, :n], out.cam_t[e, v, :n], out.intrinsics[e, v, :n]
            if torch.allclose(R, clip.cam_R[0].expand_as(R)) and torch.allclose(
                out.uv[e, v, :n], clip.uv[0]
            ):
                assert view_mode == "mixed"  # a clip view kept
                continue
            drawn += 1
            centre = -torch.einsum("fji,fj->fi", R, t)
            off = centre - root3d
            dists.add(round(float(off[0].norm()), 4))
            assert torch.allclose(off, off[0].expand_as(off), atol=1e-4)  # follows the root
            assert (
                cfg.distance_range[0] - 1e-3 <= float(off[0].norm()) <= cfg.distance_range[1] + 1e-3
            )
            assert cfg.focal_range[0] <= float(k[0, 0]) <= cfg.focal_range[1]
            assert torch.allclose(k, k[0].expand_as(k))
            uv, z = project_points(R, t, k, clip.keypoints3d)
            assert torch.allclose(out.uv[e, v, :n], uv, atol=1e-3) and bool(
                out.mask[e, v, :n].all()
            )
            centre_uv, _ = project_points(R, t, k, root3d[:, None])
            assert torch.allclose(
                centre_uv[:, 0], torch.tensor([960.0, 540.0]), atol=0.5
            )  # looks at the root
            assert torch.allclose(out.root[e, v, :n], uv[:, list(lib.kset.root)].mean(1), atol=1e-3)
            assert not out.obj_valid[e, v].any() and float(out.height[e]) == cfg.height
    assert drawn == E * V if view_mode == "virtual" else 0 < drawn < E * V
    assert len(dists) == drawn  # independent cameras per env and view


def test_batched_static_views_are_static_cameras_of_the_clip(demo):
    """The batched ``static`` draw (one call per clip for all resetting envs) gives, per env
    and view, one camera for all frames, aimed at the middle of the root path within the
    ranges, and the clip's 3D keypoints projected through it."""
    from mimic2dm.geometry.camera import project_points

    m3, m2 = demo
    cfg = VirtualCameraConfig()
    lib = library(m2, view_mode="virtual", camera_mode="static", camera_config=cfg)
    clip = lib.clips[0]
    E, V, n = 16, 2, clip.num_frames
    out = lib.episode_views(torch.zeros(E, dtype=torch.long), torch.Generator().manual_seed(3), V)
    root3d = clip.keypoints3d[:, list(lib.kset.root)].mean(1)
    centre = 0.5 * (root3d.min(0).values + root3d.max(0).values)
    dists = set()
    for e in range(E):
        for v in range(V):
            R, t, k = out.cam_R[e, v, :n], out.cam_t[e, v, :n], out.intrinsics[e, v, :n]
            assert torch.equal(R, R[0].expand_as(R)) and torch.equal(t, t[0].expand_as(t))
            assert torch.equal(k, k[0].expand_as(k))
            assert cfg.focal_range[0] <= float(k[0, 0]) <= cfg.focal_range[1]
            d = float((-R[0].T @ t[0] - centre).norm())
            dists.add(round(d, 4))
            assert d >= cfg.distance_range[0] - 1e-3
            aim, _ = project_points(R[0], t[0], k[0], centre[None])
            assert torch.allclose(aim[0], torch.tensor([960.0, 540.0]), atol=0.5)
            uv, _ = project_points(R, t, k, clip.keypoints3d)
            assert torch.allclose(out.uv[e, v, :n], uv, atol=1e-3) and bool(
                out.mask[e, v, :n].all()
            )
            assert torch.allclose(out.root[e, v, :n], uv[:, list(lib.kset.root)].mean(1), atol=1e-3)
            assert not out.obj_valid[e, v].any() and float(out.height[e]) == cfg.height
    assert len(dists) == E * V  # independent cameras per env and view


@pytest.mark.parametrize("camera_mode", ["static", "tracking"])
def test_auto_views_are_virtual_only_for_clips_with_3d(demo, camera_mode):
    """``auto`` draws virtual views for the clip that has 3D keypoints and keeps the own
    views of the clip that has none (a loop-made clip); ``virtual`` refuses such a clip."""
    import dataclasses

    m3, m2 = demo
    real = clip_from_motion(m2, 30.0, "real")
    flat = dataclasses.replace(clip_from_motion(m2, 30.0, "loop"), keypoints3d=None)
    with pytest.raises(ValueError, match=r"needs 3D keypoints; clips without them: \['loop'\]"):
        ReferenceLibrary([real, flat], m2.keypoint_set, view_mode="virtual")
    lib = ReferenceLibrary([real, flat], m2.keypoint_set, view_mode="auto", camera_mode=camera_mode)
    ids = torch.tensor([0, 1, 0, 1, 1, 0])
    out = lib.episode_views(ids, torch.Generator().manual_seed(5), 2)
    n = real.num_frames
    for e, c in enumerate(ids.tolist()):
        for v in range(2):
            own = any(
                torch.allclose(out.uv[e, v, :n], lib.clips[c].uv[w]) for w in range(real.num_views)
            )
            assert own == (c == 1), (e, v, c)  # only the 3D-less clip keeps its own views


def test_keypoint_set_mismatch_is_a_clear_error(demo):
    m3, m2 = demo
    with pytest.raises(ValueError, match="dog17"):
        tracking(KinematicEngine("dog", 2), library(m2), TrackingConfig(**DEFAULT_POSE))


def test_clip_without_cameras_is_a_clear_error(demo):
    m3, m2 = demo
    m = m2.view(0)
    m.camera_R = m.camera_t = m.camera_intrinsics = None
    with pytest.raises(ValueError, match="camera_R"):
        clip_from_motion(m, 30.0, "nocam")


@pytest.mark.parametrize("character", ["humanoid", "dog"])
def test_create_reset_step_on_real_mujoco(character, demo):
    if character == "humanoid":
        m2 = demo[1]
    else:
        if not (MOCAP / "dog_trot.npz").is_file():
            pytest.skip(f"no dog_trot.npz in {MOCAP}")
        kp = load_mocap_keypoints(MOCAP / "dog_trot.npz")
        m2 = synthesize_views(
            kp.keypoints, kp.keypoint_set, kp.fps, num_views=2, camera="static", seed=0
        )
    lib = ReferenceLibrary([clip_from_motion(m2, 30.0, character)], m2.keypoint_set)
    eng = load_engine("mujoco", character, 8)
    task = tracking(eng, lib, TrackingConfig(**DEFAULT_POSE))
    assert torch.isfinite(task.observe()).all()
    g = torch.Generator().manual_seed(0)
    total = torch.zeros(8)
    for _ in range(20):
        res = task.step(0.1 * torch.randn(8, task.action_dim, generator=g))
        assert torch.isfinite(res.obs).all() and torch.isfinite(res.reward).all()
        total += res.reward
    assert (total > 0).all()
    # the character starts under its reference: the initial 2D error is far below the termination bound
    task.reset(torch.arange(8))
    uv, valid = task.project_character()
    ref, mask = task.reference(task.frame)
    err = ((uv - ref).norm(dim=-1) * mask).amax(-1)
    assert err.median() < 0.12 * task.source.heights()[0]
    eng.close()
