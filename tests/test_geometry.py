"""Rotations, pinhole cameras, virtual views and the canonical 2D transform."""

import math

import pytest
import torch

from mimic2dm.geometry import rotations as rot
from mimic2dm.geometry.camera import Camera, look_at, pixel_threshold, project_points
from mimic2dm.geometry.virtual import (
    VirtualCameraConfig,
    sample_camera,
    sample_cameras,
    static_cameras,
)
from mimic2dm.motion.canonical import CanonicalMotion, body_scale, from_canonical, to_canonical
from mimic2dm.motion.keypoint_sets import COCO17, DOG17, load_keypoint_set


def random_quats(n: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return rot.quat_normalize(torch.randn(n, 4, generator=g, dtype=torch.float64))


# --- rotations -------------------------------------------------------------------------


def test_quat_matrix_roundtrip_and_rotation_agree():
    q = random_quats(500)
    m = rot.quat_to_matrix(q)
    assert torch.allclose(
        m @ m.transpose(-1, -2), torch.eye(3, dtype=q.dtype).expand(500, 3, 3), atol=1e-12
    )
    assert rot.quat_angle_between(q, rot.matrix_to_quat(m)).max() < 1e-7
    v = torch.randn(500, 3, dtype=q.dtype)
    assert torch.allclose(rot.quat_rotate(q, v), (m @ v[..., None])[..., 0], atol=1e-12)
    assert torch.allclose(rot.quat_rotate_inverse(q, rot.quat_rotate(q, v)), v, atol=1e-12)


def test_quat_mul_composes_like_matrices():
    a, b = random_quats(100, 1), random_quats(100, 2)
    assert torch.allclose(
        rot.quat_to_matrix(rot.quat_mul(a, b)),
        rot.quat_to_matrix(a) @ rot.quat_to_matrix(b),
        atol=1e-12,
    )


def test_known_rotation_about_z():
    q = rot.quat_from_axis_angle(torch.tensor([0.0, 0.0, 1.0]), torch.tensor(math.pi / 2))
    assert torch.allclose(
        rot.quat_rotate(q, torch.tensor([1.0, 0.0, 0.0])), torch.tensor([0.0, 1.0, 0.0]), atol=1e-6
    )
    assert torch.allclose(q, torch.tensor([0.0, 0.0, math.sin(math.pi / 4), math.cos(math.pi / 4)]))


@pytest.mark.parametrize(
    "pair",
    [
        (rot.quat_to_rot6d, rot.rot6d_to_quat),
        (rot.quat_to_exp_map, rot.exp_map_to_quat),
        (rot.quat_to_euler_xyz, rot.quat_from_euler_xyz),
    ],
)
def test_rotation_representation_roundtrips(pair):
    fwd, inv = pair
    q = random_quats(1000, 3)
    assert rot.quat_angle_between(inv(fwd(q)), q).max() < 1e-6


def test_euler_xyz_is_hinge_chain_order():
    angles = torch.tensor([0.3, -0.5, 1.1], dtype=torch.float64)
    ex, ey, ez = torch.eye(3, dtype=torch.float64)
    chain = rot.quat_mul(rot.quat_mul(rot.quat_from_axis_angle(ex, angles[0]), rot.quat_from_axis_angle(ey, angles[1])),
                         rot.quat_from_axis_angle(ez, angles[2]))  # fmt: skip
    assert torch.allclose(rot.quat_from_euler_xyz(angles), chain, atol=1e-12)
    assert torch.allclose(rot.quat_to_euler_xyz(chain), angles, atol=1e-12)


def test_exp_map_of_identity_is_zero_and_back():
    assert torch.allclose(rot.exp_map_to_quat(torch.zeros(3)), torch.tensor([0.0, 0.0, 0.0, 1.0]))
    assert torch.allclose(rot.quat_to_exp_map(torch.tensor([0.0, 0.0, 0.0, 1.0])), torch.zeros(3))


def test_heading_frame_removes_yaw_only():
    yaw = torch.tensor([0.0, 1.0, -2.5, 3.0], dtype=torch.float64)
    z = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64).expand(4, 3)
    y = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64).expand(4, 3)
    tilt = rot.quat_from_axis_angle(y, torch.full((4,), 0.4, dtype=torch.float64))
    q = rot.quat_mul(rot.quat_from_axis_angle(z, yaw), tilt)
    assert torch.allclose(rot.heading_angle(q), yaw, atol=1e-12)
    local = rot.quat_mul(rot.heading_quat_inv(q), q)
    assert torch.allclose(rot.heading_angle(local), torch.zeros(4, dtype=torch.float64), atol=1e-12)
    assert rot.quat_angle_between(local, tilt).max() < 1e-9


def test_wxyz_conversion():
    q = torch.tensor([0.1, 0.2, 0.3, 0.9])
    assert torch.equal(rot.xyzw_to_wxyz(q), torch.tensor([0.9, 0.1, 0.2, 0.3]))
    assert torch.equal(rot.wxyz_to_xyzw(rot.xyzw_to_wxyz(q)), q)


# --- cameras ---------------------------------------------------------------------------


def test_projection_hand_computed():
    # camera at the origin looking along world +x, z up: cam x = -world y, cam y = -world z
    R, t = look_at(torch.tensor([0.0, 0.0, 0.0]), torch.tensor([1.0, 0.0, 0.0]))
    assert torch.allclose(
        R, torch.tensor([[0.0, -1.0, 0.0], [0.0, 0.0, -1.0], [1.0, 0.0, 0.0]]), atol=1e-6
    )
    k = torch.tensor([1000.0, 1200.0, 960.0, 540.0])
    pts = torch.tensor([[2.0, 0.0, 0.0], [2.0, -0.5, 0.25], [4.0, 1.0, -1.0]])
    uv, z = project_points(R, t, k, pts)
    expected = torch.tensor(
        [
            [960.0, 540.0],
            [960 + 1000 * 0.25, 540 - 1200 * 0.125],
            [960 - 1000 * 0.25, 540 + 1200 * 0.25],
        ]
    )
    assert torch.allclose(uv, expected, atol=1e-4)
    assert torch.allclose(z, torch.tensor([2.0, 2.0, 4.0]))


def test_projection_with_translation_and_rotation():
    eye = torch.tensor([3.0, 4.0, 1.5])
    cam = Camera.look_at(eye, torch.tensor([0.0, 0.0, 1.0]), 1500.0)
    assert torch.allclose(cam.center()[0], eye, atol=1e-5)
    uv, z = cam.project(torch.tensor([[[0.0, 0.0, 1.0]]]))
    assert torch.allclose(uv[0, 0], torch.tensor([960.0, 540.0]), atol=1e-3)
    assert torch.allclose(z[0, 0], (eye - torch.tensor([0.0, 0.0, 1.0])).norm(), atol=1e-5)


def test_dynamic_camera_projects_each_frame_with_its_own_params():
    T = 5
    eye = torch.stack([torch.tensor([5.0, float(i), 1.0]) for i in range(T)])
    target = torch.zeros(T, 3) + torch.tensor([0.0, 0.0, 1.0])
    cam = Camera.look_at(eye, target, torch.linspace(1000, 1400, T))
    assert cam.is_dynamic and cam.num_frames == T
    pts = target[:, None, :]  # [T, 1, 3], the target at each frame projects to the centre
    uv, _ = cam.project(pts)
    assert torch.allclose(uv[:, 0], torch.tensor([960.0, 540.0]).expand(T, 2), atol=1e-3)
    # a fixed off-centre point lands elsewhere in each frame
    uv2, _ = cam.project(torch.tensor([0.0, 1.0, 1.0]).expand(T, 1, 3))
    assert uv2[:, 0, 0].unique().numel() == T
    R, t, k = cam.params(torch.tensor([0, 99]))  # clamps past the end
    assert torch.equal(k[1], cam.intrinsics[-1])


def test_camera_shape_errors_name_the_field():
    with pytest.raises(ValueError, match="intrinsics"):
        Camera(torch.eye(3), torch.zeros(3), torch.zeros(3), 1920, 1080)
    with pytest.raises(ValueError, match="frame count"):
        Camera(torch.eye(3).expand(4, 3, 3), torch.zeros(5, 3), torch.ones(4), 1920, 1080)


def test_camera_arrays_roundtrip():
    cam = Camera.look_at(
        torch.tensor([[4.0, 0, 2]]).expand(3, 3),
        torch.zeros(3, 3),
        torch.tensor([1e3, 1.1e3, 1.2e3]),
        640,
        480,
    )
    back = Camera.from_arrays(cam.to_arrays())
    assert back.width == 640 and back.height == 480
    assert torch.equal(back.R, cam.R) and torch.equal(back.intrinsics, cam.intrinsics)


def test_pixel_threshold_rescales_by_height():
    assert pixel_threshold(100.0, 1080) == 100.0
    assert pixel_threshold(100.0, 540) == 50.0


# --- virtual cameras -------------------------------------------------------------------


def walking_root(T: int = 60) -> torch.Tensor:
    s = torch.linspace(0, 3.0, T)
    return torch.stack([s, 0.2 * torch.sin(s), torch.full_like(s, 0.95)], dim=-1)


@pytest.mark.parametrize("mode", ["static", "tracking", "dynamic"])
def test_virtual_cameras_respect_ranges_and_see_the_root(mode):
    root = walking_root()
    cfg = VirtualCameraConfig()
    cams = sample_cameras(root, 8, mode, seed=1, config=cfg)
    for cam in cams:
        assert cam.num_frames == (1 if mode == "static" else root.shape[0])
        f = cam.intrinsics[:, 0]
        assert (f >= cfg.focal_range[0] * (1 - cfg.zoom_amplitude)).all()
        assert (f <= cfg.focal_range[1] * (1 + cfg.zoom_amplitude)).all()
        pts = root[None] if not cam.is_dynamic else root[:, None]
        uv, z = cam.project(pts)
        assert (z > 0).all()
        assert (uv[..., 0] > 0).all() and (uv[..., 0] < 1920).all()
        assert (uv[..., 1] > 0).all() and (uv[..., 1] < 1080).all()
    if mode == "tracking":
        offsets = cams[0].center() - root
        assert torch.allclose(offsets, offsets[0].expand_as(offsets), atol=1e-4)
        d = offsets[0].norm()
        assert cfg.distance_range[0] - 1e-4 <= d <= cfg.distance_range[1] + 1e-4
        el = torch.asin(offsets[0, 2] / d) * 180 / math.pi
        assert cfg.elevation_range_deg[0] - 1e-3 <= el <= cfg.elevation_range_deg[1] + 1e-3
    if mode == "dynamic":
        c = cams[0].center()
        assert torch.allclose(c, c[0].expand_as(c), atol=1e-4)  # stays in place, pans and zooms
        assert cams[0].intrinsics[:, 0].std() > 1.0


def test_virtual_cameras_are_seeded_and_vary():
    root = walking_root()
    a = sample_cameras(root, 4, "static", seed=7)
    b = sample_cameras(root, 4, "static", seed=7)
    assert all(torch.equal(x.R, y.R) for x, y in zip(a, b, strict=True))
    azimuths = {round(float(torch.atan2(c.center()[0, 1], c.center()[0, 0])), 3) for c in a}
    assert len(azimuths) == 4
    with pytest.raises(ValueError, match="static, tracking, dynamic"):
        sample_camera(root, "orbit")


def test_batched_static_cameras_are_sample_camera_draws():
    """:func:`static_cameras` draws the cameras that as many ``sample_camera(..., "static")``
    calls on the same generator do, the distance grown until the root path is in view
    (a short distance range makes most of them grow)."""
    root = walking_root()
    cfg = VirtualCameraConfig(distance_range=(1.0, 2.0))
    g = torch.Generator().manual_seed(3)
    one_by_one = [sample_camera(root, "static", g, cfg) for _ in range(32)]
    R, t, k = static_cameras(root, 32, torch.Generator().manual_seed(3), cfg)
    assert R.shape == (32, 3, 3) and t.shape == (32, 3) and k.shape == (32, 4)
    assert torch.allclose(R, torch.cat([c.R for c in one_by_one]), atol=1e-5)
    assert torch.allclose(t, torch.cat([c.t for c in one_by_one]), atol=1e-4)
    assert torch.allclose(k, torch.cat([c.intrinsics for c in one_by_one]))
    centre = 0.5 * (root.min(0).values + root.max(0).values)
    dist = (-torch.einsum("nji,nj->ni", R, t) - centre).norm(dim=-1)
    assert int((dist > cfg.distance_range[1] + 1e-3).sum()) > 16  # grown
    uv, z = project_points(R, t, k, root.expand(32, -1, 3))
    m = cfg.margin
    assert (z > 0.5).all() and (uv[..., 0] > m * 1920).all() and (uv[..., 0] < (1 - m) * 1920).all()
    assert (uv[..., 1] > m * 1080).all() and (uv[..., 1] < (1 - m) * 1080).all()


# --- canonical 2D motion ---------------------------------------------------------------


def random_motion(T=40, K=17, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    base = torch.rand(K, 2, generator=g, dtype=dtype) * 200
    drift = torch.cumsum(torch.randn(T, 1, 2, generator=g, dtype=dtype) * 5, 0)
    return 500 + base + drift + torch.randn(T, K, 2, generator=g, dtype=dtype)


@pytest.mark.parametrize("kset", [COCO17, DOG17])
def test_canonical_roundtrip_float_precision(kset):
    x = random_motion(dtype=torch.float64)
    mask = torch.rand(x.shape[:2], generator=torch.Generator().manual_seed(1)) > 0.2
    c = to_canonical(x, kset, mask)
    y, (r, s) = from_canonical(c)
    assert (y - x)[mask].abs().max() < 1e-9
    y32, _ = from_canonical(to_canonical(x.float(), kset, mask))
    assert (y32 - x.float())[mask].abs().max() < 5e-4  # float32 ulp at ~800 px is 6e-5
    assert (c.local[~mask] == 0).all()


def test_canonical_local_pose_is_invariant_to_image_translation_and_scale():
    x = random_motion()
    c = to_canonical(x, COCO17)
    moved = to_canonical(x * 2.5 + torch.tensor([-300.0, 120.0]), COCO17)
    assert torch.allclose(moved.local, c.local, atol=1e-5)
    assert torch.allclose(moved.root_vel, c.root_vel, atol=1e-5)
    assert torch.allclose(moved.log_scale_vel, c.log_scale_vel, atol=1e-5)
    assert torch.allclose(moved.scale0, c.scale0 * 2.5, rtol=1e-5)


def test_canonical_root_and_scale_known_answer():
    x = torch.zeros(3, 17, 2)
    x[:, 11] = torch.tensor([100.0, 200.0])
    x[:, 12] = torch.tensor([120.0, 200.0])
    x[:, 5] = torch.tensor([100.0, 100.0])
    x[:, 6] = torch.tensor([120.0, 100.0])
    x[1] += torch.tensor([10.0, 0.0])
    c = to_canonical(x, COCO17)
    assert torch.allclose(c.root0, torch.tensor([110.0, 200.0]))
    assert torch.allclose(c.scale0, torch.tensor(100.0))
    assert torch.allclose(c.root_vel, torch.tensor([[0.1, 0.0], [-0.1, 0.0]]))
    assert torch.allclose(c.local[0, 5], torch.tensor([-0.1, -1.0]))


def test_masked_root_keypoints_are_interpolated_not_zeroed():
    x = random_motion(T=10)
    mask = torch.ones(10, 17, dtype=torch.bool)
    mask[4, 11] = False  # one hip missing in frame 4
    c = to_canonical(x, COCO17, mask)
    _, (r, _) = from_canonical(c)
    hip_mid = x[:, [11, 12]].mean(1)
    assert torch.allclose(r[4], 0.5 * (hip_mid[3] + hip_mid[5]), atol=1e-3)
    assert (r[4] - torch.zeros(2)).norm() > 100  # not treated as zero


def test_body_scale_is_robust_to_a_single_outlier_frame():
    x = random_motion(T=31)
    s = body_scale(x, torch.ones(31, 17, dtype=torch.bool), COCO17)
    x2 = x.clone()
    x2[15, 5:7] += 400.0  # shoulders jump in one frame
    s2 = body_scale(x2, torch.ones(31, 17, dtype=torch.bool), COCO17)
    assert (s2[15] - s[15]).abs() / s[15] < 0.1


def test_features_roundtrip_and_shape_error():
    x = random_motion()
    c = to_canonical(x, COCO17)
    f = c.features()
    assert f.shape == (40, 2 * 17 + 3)
    back = CanonicalMotion.from_features(f, c.root0, c.scale0)
    assert torch.allclose(from_canonical(back)[0], x, atol=1e-3)
    with pytest.raises(ValueError, match=r"\[T, 17, 2\]"):
        to_canonical(torch.zeros(5, 16, 2), COCO17)


def test_keypoint_sets_registry():
    assert load_keypoint_set("dog17").num_keypoints == 17
    with pytest.raises(KeyError, match="coco17, dog17"):
        load_keypoint_set("h36m")
    assert COCO17.index("left_hip") == 11
