"""Characters, props and scenes, compiled and simulated with real MuJoCo."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
from shared_data import AI4ANIMATION_DOGS

from mimic2dm.characters import (
    CHARACTERS,
    build_scene_xml,
    humanoid,
    load_character,
    load_object,
    sensor_layout,
)
from mimic2dm.utils.paths import mocap_dir

MOCAP = mocap_dir()
ALL = CHARACTERS.names()


def _scene(name, objects=(), dt=1 / 60, sensors=True):
    return mujoco.MjModel.from_xml_string(build_scene_xml(name, objects, dt, sensors))


def test_registry_names_and_error():
    assert {"humanoid", "dog"} <= set(ALL)
    with pytest.raises(KeyError) as err:
        load_character("x")
    for name in ALL:
        assert name in str(err.value)
    with pytest.raises(KeyError, match="ball"):
        load_object("nope")


@pytest.mark.parametrize("name", ALL)
def test_character_alone_and_scene_compile(name):
    spec = load_character(name)
    alone = mujoco.MjModel.from_xml_string(spec.mjcf)
    assert alone.nq == spec.nq and alone.nu == 0
    assert tuple(alone.body(i).name for i in range(1, alone.nbody)) == spec.body_names
    m = _scene(name, ["ball"])
    assert m.nu == spec.num_dof and m.nq == spec.nq + 7
    assert tuple(m.actuator(i).name for i in range(m.nu)) == spec.dof_names
    # actuators are PD on the joint of the same name, with the spec's gains and limits
    for j, dof in enumerate(spec.dof_names):
        assert m.joint(m.actuator_trnid[j, 0]).name == dof
        assert m.actuator_gainprm[j, 0] == pytest.approx(spec.kp[j])
        assert m.actuator_biasprm[j, 1:3] == pytest.approx([-spec.kp[j], -spec.kd[j]])
        assert m.actuator_forcerange[j] == pytest.approx(
            [-spec.torque_limit[j], spec.torque_limit[j]]
        )
        assert m.actuator_ctrlrange[j] == pytest.approx(spec.joint_range[j])
        assert m.jnt_range[m.actuator_trnid[j, 0]] == pytest.approx(spec.joint_range[j])
    assert np.all(spec.joint_range[:, 0] < 0) and np.all(spec.joint_range[:, 1] > 0)


@pytest.mark.parametrize("name", ALL)
def test_sensor_order_matches_keypoints(name):
    spec = load_character(name)
    m = _scene(name, ["ball"])
    layout = sensor_layout(name, ["ball"])
    assert m.nsensordata == layout["object_contacts"].stop
    names = [m.sensor(i).name for i in range(m.nsensor)]
    expected = [f"kp_{k}" for k in spec.keypoint_names] + ["obj_ball"]
    expected += [f"touch_{b}" for b in spec.contact_bodies] + ["hit_ball"]
    assert names == expected
    d = mujoco.MjData(m)
    rng = np.random.default_rng(0)
    d.qpos[: spec.nq] = spec.default_pose.qpos()
    d.qpos[7 : spec.nq] = rng.uniform(*spec.joint_range.T)
    mujoco.mj_forward(m, d)
    kp = d.sensordata[layout["keypoints"]].reshape(-1, 3)
    sites = np.stack([d.site(s).xpos for s in spec.keypoint_sites])
    np.testing.assert_allclose(kp, sites, atol=1e-12)
    np.testing.assert_allclose(d.sensordata[layout["objects"]], d.body("ball").xpos, atol=1e-12)
    # site_offsets reproduce the sites from body frames (FK-independent definition)
    for k, (body, off) in enumerate(spec.site_offsets):
        b = d.body(body)
        np.testing.assert_allclose(b.xpos + b.xmat.reshape(3, 3) @ off, kp[k], atol=1e-9)


@pytest.mark.parametrize("name", ALL)
def test_default_pose_stands_and_touch_sensors(name):
    spec = load_character(name)
    m = _scene(name, dt=1 / 60)
    d = mujoco.MjData(m)
    d.qpos[:] = spec.default_pose.qpos()
    d.ctrl[:] = spec.default_pose.dof_pos
    mujoco.mj_forward(m, d)
    contacts = d.sensordata[sensor_layout(name)["contacts"]]
    assert np.all(contacts == 0), "default pose must start just above the floor"
    for _ in range(600):  # 10 s
        mujoco.mj_step(m, d)
    contacts = d.sensordata[sensor_layout(name)["contacts"]]
    weight = float(m.body_subtreemass[1]) * 9.81
    assert np.all(contacts > 0.05 * weight), contacts
    assert contacts.sum() == pytest.approx(weight, rel=0.1)
    height = d.qpos[2]
    assert height > 0.95 * spec.default_pose.root_pos[2], height
    assert np.abs(d.qvel).max() < 0.05


def test_humanoid_structure():
    spec = load_character("humanoid")
    assert spec.num_dof == 28 and spec.keypoint_set == "coco17"
    m = mujoco.MjModel.from_xml_string(spec.mjcf)
    assert 60.0 <= m.body_subtreemass[1] <= 70.0
    assert m.njnt == 29  # freejoint + 28 hinges
    assert all(m.jnt_type[i] == mujoco.mjtJoint.mjJNT_HINGE for i in range(1, m.njnt))
    # hands carry no joint; 1-DoF elbows / knees are about local y
    assert m.body_jntnum[m.body("right_hand").id] == 0
    for j in ("right_elbow_y", "left_elbow_y", "right_knee_y", "left_knee_y"):
        np.testing.assert_array_equal(m.joint(j).axis, [0, 1, 0])
    # parents mirror the mocap tree
    parents = [m.body_parentid[m.body(b).id] - 1 for b in spec.body_names]
    assert tuple(parents) == humanoid.PARENTS


def test_humanoid_offsets_equal_mocap():
    path = MOCAP / "cmu_walk.npz"
    if not path.exists():
        pytest.skip(f"mocap data absent: {path}")
    data = np.load(path)
    spec = load_character("humanoid")
    m = mujoco.MjModel.from_xml_string(spec.mjcf)
    assert tuple(data["node_names"]) == spec.body_names
    assert tuple(data["parents"]) == humanoid.PARENTS
    offsets = np.stack([m.body(b).pos for b in spec.body_names[1:]])
    np.testing.assert_allclose(offsets, data["local_translation"][1:], atol=1e-7, rtol=0)
    np.testing.assert_allclose(
        np.array(humanoid.OFFSETS), data["local_translation"], atol=1e-7, rtol=0
    )


def test_ball_object():
    ball = load_object("ball")
    assert ball.radius == pytest.approx(0.11) and ball.mass == pytest.approx(0.43)
    m = _scene("humanoid", ["ball"], dt=1 / 240)
    d = mujoco.MjData(m)
    spec = load_character("humanoid")
    d.qpos[: spec.nq] = spec.default_pose.qpos()
    d.ctrl[:] = spec.default_pose.dof_pos
    assert m.body("ball").mass[0] == pytest.approx(0.43)
    adr = m.jnt_dofadr[m.joint("ball_root").id]
    d.qvel[adr] = 3.0  # roll along +x, away from the character
    speeds = []
    for _ in range(480):  # 2 s
        mujoco.mj_step(m, d)
        speeds.append(np.linalg.norm(d.qvel[adr : adr + 3]))
    assert d.body("ball").xpos[2] == pytest.approx(0.11, abs=2e-3)  # rests on the floor
    assert 0.2 < speeds[-1] < speeds[60]  # rolling friction slows it, it keeps rolling


@pytest.mark.parametrize("name", ["humanoid", "dog", "dog_spine"])
def test_per_character_facts_come_from_the_spec(name):
    """fall height, detector class and pose model: one copy, on the CharacterSpec."""
    from mimic2dm.motion.keypoint_sets import load_keypoint_set
    from mimic2dm.train import CONF_DIR, compose_config
    from mimic2dm.video.pipeline import subject_of

    spec = load_character(name)
    text = (CONF_DIR / "character" / f"{name}.yaml").read_text()
    assert "fall_height: ${m2d_character:" in text  # the yaml refers to the spec, no copy
    cfg = compose_config([f"character={name}"])
    assert cfg.character.fall_height == spec.fall_height > 0
    assert cfg.task.fall_height == spec.fall_height
    assert subject_of(name) == (spec.keypoint_set, spec.detector_class)
    assert spec.detector_class in ("person", "dog") and spec.pose_model
    assert spec.keypoint_names == load_keypoint_set(spec.keypoint_set).names


@pytest.mark.parametrize(
    ("clip", "character", "lift_range"),
    [("cmu_walk", "humanoid", (0.045, 0.06)), ("cmu_hop", "humanoid", (0.0, 0.01)),
     ("dog_trot", "dog", (0.01, 0.04) if AI4ANIMATION_DOGS else (0.0, 0.01))],
)  # fmt: skip
def test_ground_keypoints_lifts_mocap_onto_the_characters_own_feet(clip, character, lift_range):
    """The shared CMU walk puts the ankle at 0 m, 5 cm under the humanoid's flat-foot ankle; the
    hop is already (almost) grounded; the AI4Animation dog's paws are 1-4 cm under, the
    DeepMimic dog's (the shipped clips) within 1 cm (measured 0.8 mm). After the lift the lowest
    foot keypoint sits exactly at its standing height, and only z moved."""
    from mimic2dm.characters.clips import load_mocap_keypoints
    from mimic2dm.characters.feet import character_feet, ground_keypoints

    path = MOCAP / f"{clip}.npz"
    if not path.exists():
        pytest.skip(f"mocap data absent: {path}")
    kp = load_mocap_keypoints(path).keypoints
    out, lift = ground_keypoints(kp, character)
    assert lift_range[0] <= lift <= lift_range[1], lift
    assert out.dtype == np.float32 and out.shape == kp.shape
    np.testing.assert_allclose(out[..., :2], kp[..., :2], atol=1e-6)
    np.testing.assert_allclose(out[..., 2] - kp[..., 2], lift, atol=1e-5)
    idx, ground = character_feet(load_character(character))
    assert (out[:, idx, 2] >= ground.numpy()[None] - 1e-5).all()
    assert np.isclose((out[:, idx, 2] - ground.numpy()[None]).min(), 0.0, atol=1e-5)
    again, lift2 = ground_keypoints(out, character)  # already grounded: nothing moves
    assert lift2 < 1e-5 and np.allclose(again, out, atol=1e-5)


def test_ground_keypoints_never_lowers_and_rejects_bad_input():
    from mimic2dm.characters.feet import character_feet, ground_keypoints

    idx, ground = character_feet(load_character("humanoid"))
    kp = np.zeros((4, 17, 3), np.float32)
    kp[:, :, 2] = 1.0  # everything high above the floor: left where it is
    out, lift = ground_keypoints(kp, "humanoid")
    assert lift == 0.0 and np.array_equal(out, kp)
    kp[2, idx[0], 2] = -0.10  # one ankle 10 cm in the floor on one frame: that frame decides
    kp[1, idx[1], 2] = np.nan  # a missing keypoint is ignored
    out, lift = ground_keypoints(kp, "humanoid")
    assert np.isclose(lift, float(ground[0]) + 0.10, atol=1e-6)
    with pytest.raises(ValueError, match=r"keypoints: expected \[T, 17, 3\].*got \[4, 15, 3\]"):
        ground_keypoints(np.zeros((4, 15, 3)), "humanoid")
    nofeet = np.zeros((4, 17, 3))
    nofeet[:, idx, :] = np.nan
    with pytest.raises(ValueError, match="no foot keypoint"):
        ground_keypoints(nofeet, "humanoid")
