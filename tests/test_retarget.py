"""Mocap loading, forward kinematics and retargeting, checked against real MuJoCo.

Run with ``-rP`` to see the measured retargeting errors.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from shared_data import AI4ANIMATION_DOGS

from mimic2dm.characters import load_character
from mimic2dm.characters.mocap import (
    DOG17_FROM_MOCAP,
    DOG17_NAMES,
    dog_head_frame,
    dog_keypoints,
    human_fk,
    human_keypoints,
    load_cmu_clip,
    load_dog_clip,
)
from mimic2dm.characters.retarget import (
    joint_limit_violation,
    kinematic_replay,
    retarget_dog,
    retarget_human,
    rigid_fit,
    solve_keypoint_ik,
)
from mimic2dm.geometry.rotations import (
    heading_angle,
    matrix_to_quat,
    quat_from_axis_angle,
    quat_mul,
    quat_to_matrix,
    wxyz_to_xyzw,
    xyzw_to_wxyz,
)
from mimic2dm.utils.paths import mocap_dir

MOCAP = mocap_dir()
HUMAN_CLIPS = ("cmu_walk", "cmu_run", "cmu_hop")
DOG_CLIPS = ("dog_trot", "dog_pace")
# Bounds for the dog (metres), explained in docs/characters.md: the mocap dog's
# shoulders slide on the trunk, its spine bends, its head turns and its legs are not
# planar, none of which a rigid trunk with 3-DoF legs can follow exactly.
DOG_BOUNDS = {"dog": (0.03, 0.07), "dog_spine": (0.015, 0.05)}  # (mean, max)
# On the DeepMimic dog3d gaits (shipped in tests/fixtures/shared), whose proportions are further
# from the robot dog's, bounds relative to the clip's nose-to-tail-root length (0.92 m): measured
# mean 6.2 %, max 11.4 % of it for both characters and gaits; bounds with about 20 % margin.
DOG_BOUNDS_PER_LENGTH = (0.075, 0.135)  # (mean, max)


def _travel_direction(clip) -> torch.Tensor:
    """The unit horizontal direction the clip's root (hips) moves, first frame to last."""
    hips = clip.joint("Hips")
    return torch.nn.functional.normalize(hips[-1, :2] - hips[0, :2], dim=0)


def _clip_path(name: str) -> Path:
    path = MOCAP / f"{name}.npz"
    if not path.exists():
        pytest.skip(f"mocap data absent: {path} (shared/data/mocap is not checked out)")
    return path


def _errors(a, b) -> np.ndarray:
    return np.linalg.norm(np.asarray(a) - np.asarray(b), axis=-1)


# ----------------------------------------------------------------------------- humans
@pytest.mark.parametrize("clip_name", HUMAN_CLIPS)
def test_human_retarget_replays_keypoints(clip_name):
    clip = load_cmu_clip(_clip_path(clip_name))
    spec = load_character("humanoid")
    qpos = retarget_human(clip)
    assert qpos.shape == (clip.num_frames, spec.nq)
    err = _errors(kinematic_replay(spec, qpos), human_keypoints(clip))
    print(
        f"{clip_name}: keypoint error mean {err.mean() * 1e3:.5f} mm, max {err.max() * 1e3:.5f} mm"
    )
    assert err.max() <= 0.01
    assert err.max() <= 1e-5, "humanoid retargeting is an exact reparameterisation"
    violation = joint_limit_violation(spec, qpos)
    bad = {
        n: round(math.degrees(v), 2)
        for n, v in zip(spec.dof_names, violation, strict=True)
        if v > 0
    }
    assert not bad, f"joint limits clip {clip_name}: {bad} (deg)"


@pytest.mark.parametrize("clip_name", HUMAN_CLIPS)
def test_human_fk_equals_tree_fk_of_retargeted_pose(clip_name):
    clip = load_cmu_clip(_clip_path(clip_name), dtype=torch.float64)
    spec = load_character("humanoid")
    qpos = retarget_human(clip)
    pos, rot = spec.tree.fk(qpos[:, :3], wxyz_to_xyzw(qpos[:, 3:7]), qpos[:, 7:])
    ref_pos, ref_rot = human_fk(clip)
    # the clips store float32 offsets, the humanoid their decimal values: ~2e-8 m apart
    torch.testing.assert_close(pos, ref_pos, atol=1e-7, rtol=0)
    dot = (rot * ref_rot).sum(-1).abs()  # q and -q are the same rotation
    torch.testing.assert_close(dot, torch.ones_like(dot), atol=1e-9, rtol=0)
    # the elbows bend one way and the knees the other, as declared in the joint ranges
    dof = dict(zip(spec.dof_names, qpos[:, 7:].T, strict=True))
    assert dof["right_elbow_y"].max() <= 0.0 and dof["left_elbow_y"].max() <= 0.0
    assert dof["right_knee_y"].min() >= 0.0 and dof["left_knee_y"].min() >= 0.0


def test_human_keypoints_sit_on_joints():
    clip = load_cmu_clip(_clip_path("cmu_walk"))
    kp = human_keypoints(clip)
    pos, _ = human_fk(clip)
    spec = load_character("humanoid")
    assert kp.shape == (clip.num_frames, 17, 3)
    names = list(spec.keypoint_names)
    torch.testing.assert_close(
        kp[:, names.index("left_wrist")], pos[:, clip.names.index("left_hand")]
    )
    torch.testing.assert_close(
        kp[:, names.index("right_knee")], pos[:, clip.names.index("right_shin")]
    )
    head = pos[:, clip.names.index("head")]
    nose = kp[:, names.index("nose")]
    assert ((nose - head).norm(dim=-1) - math.hypot(0.09, 0.17)).abs().max() < 1e-5


# ----------------------------------------------------------------------------- FK parity
@pytest.mark.parametrize("name", ["humanoid", "dog", "dog_spine"])
def test_torch_fk_matches_mujoco(name):
    spec = load_character(name)
    gen = torch.Generator().manual_seed(0)
    t = 8
    lo, hi = (torch.as_tensor(spec.joint_range[:, i].copy()) for i in (0, 1))
    dof = lo + (hi - lo) * torch.rand(t, spec.num_dof, generator=gen, dtype=torch.float64)
    quat = torch.nn.functional.normalize(
        torch.randn(t, 4, generator=gen, dtype=torch.float64), dim=-1
    )
    pos = torch.randn(t, 3, generator=gen, dtype=torch.float64)
    kp = spec.tree.keypoints(spec.site_offsets, pos, quat, dof)
    qpos = torch.cat([pos, xyzw_to_wxyz(quat), dof], dim=-1)
    np.testing.assert_allclose(kinematic_replay(spec, qpos), kp.numpy(), atol=1e-9)


# ----------------------------------------------------------------------------- dogs
@pytest.mark.parametrize("clip_name", DOG_CLIPS)
def test_dog_keypoint_mapping(clip_name):
    clip = load_dog_clip(_clip_path(clip_name))
    kp = dog_keypoints(clip)
    assert kp.shape == (clip.num_frames, 17, 3)
    for name, joint in DOG17_FROM_MOCAP.items():
        torch.testing.assert_close(kp[:, DOG17_NAMES.index(name)], clip.joint(joint))
    head, axes = dog_head_frame(clip)
    eye = axes.transpose(1, 2) @ (kp[:, :2] - head[:, None]).transpose(1, 2)  # head frame
    torch.testing.assert_close(
        axes.transpose(1, 2) @ axes, torch.eye(3).expand_as(axes), atol=1e-5, rtol=0
    )
    assert torch.all(eye[:, 1, 0] > 0) and torch.all(eye[:, 1, 1] < 0)  # left eye on the left
    assert torch.all(eye[:, 2, :] > 0)  # eyes above the snout axis
    # the dog faces where it goes: nose ahead of the tail along its root's travel
    ahead = _travel_direction(clip)
    assert torch.all((kp[:, 2, :2] - kp[:, 4, :2]) @ ahead > 0)
    if AI4ANIMATION_DOGS:  # the AI4Animation dog faces -x: nose ahead of the tail along -x
        assert torch.all(kp[:, 2, 0] < kp[:, 4, 0])


@pytest.mark.parametrize("name", ["dog", "dog_spine"])
@pytest.mark.parametrize("clip_name", DOG_CLIPS)
def test_dog_retarget_replays_keypoints(name, clip_name):
    clip = load_dog_clip(_clip_path(clip_name))
    spec = load_character(name)
    qpos = retarget_dog(clip, spec)
    assert qpos.shape == (clip.num_frames, spec.nq)
    err = _errors(kinematic_replay(spec, qpos), dog_keypoints(clip))
    worst = spec.keypoint_names[int(err.max(0).argmax())]
    print(
        f"{name} {clip_name}: keypoint error mean {err.mean() * 100:.2f} cm, "
        f"max {err.max() * 100:.2f} cm ({worst}); per-keypoint max (cm): "
        + ", ".join(
            f"{k} {v * 100:.1f}" for k, v in zip(spec.keypoint_names, err.max(0), strict=True)
        )
    )
    if AI4ANIMATION_DOGS:
        mean_bound, max_bound = DOG_BOUNDS[name]
    else:
        kp = dog_keypoints(clip)
        length = float((kp[:, 2] - kp[:, 4]).norm(dim=-1).mean())  # nose to tail root
        mean_bound, max_bound = (b * length for b in DOG_BOUNDS_PER_LENGTH)
    assert err.mean() <= mean_bound and err.max() <= max_bound, (err.mean(), err.max())
    assert np.all(joint_limit_violation(spec, qpos) <= 1e-9)
    heading = heading_angle(wxyz_to_xyzw(qpos[:, 3:7]))
    if AI4ANIMATION_DOGS:
        assert torch.all(heading.abs() > 0.75 * math.pi), "robot faces +x, mocap dog -x: root must turn"  # fmt: skip
    # the robot's root faces where the mocap dog goes (within 45 degrees)
    ahead = _travel_direction(clip).to(heading.dtype)
    facing = torch.stack([heading.cos(), heading.sin()], dim=-1)
    assert torch.all(facing @ ahead > math.cos(0.25 * math.pi)), heading


@pytest.mark.parametrize("name", ["dog", "dog_spine"])
def test_keypoint_ik_recovers_a_reachable_pose(name):
    spec = load_character(name)
    gen = torch.Generator().manual_seed(1)
    t = 16
    dof0 = torch.tensor(spec.default_pose.dof_pos).expand(t, -1)
    lo, hi = (torch.as_tensor(spec.joint_range[:, i].copy()) for i in (0, 1))
    dof = (
        dof0 + 0.3 * (2 * torch.rand(t, spec.num_dof, generator=gen, dtype=torch.float64) - 1)
    ).clamp(lo, hi)
    yaw = 2 * math.pi * torch.rand(t, generator=gen, dtype=torch.float64)
    quat = quat_from_axis_angle(
        torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64).expand(t, 3), yaw
    )
    pos = torch.randn(t, 3, generator=gen, dtype=torch.float64) * 0.5
    target = spec.tree.keypoints(spec.site_offsets, pos, quat, dof)
    # start from the default pose and a root 0.2 rad / 5 cm off
    tilt = quat_from_axis_angle(
        torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64).expand(t, 3), torch.full((t,), 0.2)
    )
    qpos = solve_keypoint_ik(spec, target, pos + 0.05, quat_mul(quat, tilt), dof0, iters=60)
    err = _errors(kinematic_replay(spec, qpos), target)
    assert err.max() < 1e-4, err.max()


def test_rigid_fit_recovers_transform():
    gen = torch.Generator().manual_seed(2)
    src = torch.randn(6, 3, generator=gen, dtype=torch.float64)
    quat = torch.nn.functional.normalize(
        torch.randn(4, 4, generator=gen, dtype=torch.float64), dim=-1
    )
    rot = quat_to_matrix(quat)
    trans = torch.randn(4, 3, generator=gen, dtype=torch.float64)
    dst = (rot[:, None] @ src[None, :, :, None]).squeeze(-1) + trans[:, None]
    r, t = rigid_fit(src, dst)
    torch.testing.assert_close(r, rot)
    torch.testing.assert_close(t, trans)
    assert torch.allclose(matrix_to_quat(r).abs(), torch.where(quat[:, 3:] < 0, -quat, quat).abs())


# ----------------------------------------------------------------------------- loader errors
def test_loader_errors_name_file_and_key(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.npz"):
        load_cmu_clip(tmp_path / "nope.npz")
    bad = tmp_path / "bad_human.npz"
    np.savez(bad, node_names=np.array(["pelvis"] * 15), parents=np.zeros(15, int), fps=60.0)
    with pytest.raises(KeyError, match=r"bad_human\.npz.*'local_translation'"):
        load_cmu_clip(bad)
    np.savez(
        bad,
        node_names=np.array(["pelvis"] * 15),
        parents=np.zeros(15, int),
        local_translation=np.zeros((15, 3)),
        local_rotation=np.zeros((4, 14, 4)),
        root_translation=np.zeros((4, 3)),
        fps=60.0,
    )
    with pytest.raises(ValueError, match=r"bad_human\.npz.*'local_rotation'.*\[\*, 15, 4\]"):
        load_cmu_clip(bad)
    dog = tmp_path / "bad_dog.npz"
    np.savez(dog, joint_names=np.array(["x"] * 27), positions=np.zeros((3, 27, 3)), fps=60.0)
    with pytest.raises(ValueError, match=r"bad_dog\.npz.*'joint_names'"):
        load_dog_clip(dog)
    np.savez(dog, positions=np.zeros((3, 27, 3)), fps=60.0)
    with pytest.raises(KeyError, match=r"bad_dog\.npz.*'joint_names'"):
        load_dog_clip(dog)


@pytest.mark.parametrize("name", ["humanoid", "dog"])
def test_analytic_ik_jacobian_matches_central_differences(name):
    """The Levenberg-Marquardt Jacobian (one forward kinematics) against the central
    differences of the residual it linearises (2 P forward kinematics)."""
    from mimic2dm.characters.retarget import _jacobian, _residual

    spec = load_character(name)
    g = torch.Generator().manual_seed(0)
    T, J = 4, len(spec.tree.dof_body)
    p = torch.cat([torch.randn(T, 3, generator=g), 0.7 * torch.randn(T, 3, generator=g),
                   0.3 * torch.randn(T, J, generator=g)], -1).double()  # fmt: skip
    q0 = torch.nn.functional.normalize(torch.randn(T, 4, generator=g), dim=-1).double()
    target = torch.randn(T, spec.num_keypoints, 3, generator=g).double()
    eps = 1e-6
    cols = []
    for i in range(p.shape[1]):
        d = torch.zeros_like(p)
        d[:, i] = eps
        cols.append(
            (_residual(spec, p + d, q0, target) - _residual(spec, p - d, q0, target)) / (2 * eps)
        )
    numeric = torch.stack(cols, -1)
    assert torch.allclose(_jacobian(spec, p, q0, target), numeric, atol=1e-6)
