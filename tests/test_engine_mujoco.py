"""The MuJoCo engine, tested for real: shapes, physics, exact resets, determinism, parity."""

from __future__ import annotations

import json
import pathlib

import mujoco
import numpy as np
import pytest
import torch

from mimic2dm.characters import CHARACTERS
from mimic2dm.engines import load_engine
from mimic2dm.engines.base import SimState
from mimic2dm.engines.mujoco_engine import MujocoEngine
from mimic2dm.geometry.rotations import quat_from_axis_angle, quat_rotate, wxyz_to_xyzw

THREADS = 2  # the CI machines have 2 cores, shared


def make(character: str = "humanoid", num_envs: int = 4, objects=(), **kw) -> MujocoEngine:
    """A MuJoCo engine; ``kw`` are ``EngineOptions`` fields."""
    return load_engine("mujoco", character, num_envs, objects, num_threads=THREADS, **kw)


def random_targets(engine: MujocoEngine, gen: torch.Generator, scale: float = 0.05) -> torch.Tensor:
    """Default pose + ``scale`` rad Gaussian noise, within the joint ranges."""
    lo, hi = engine.get_dof_limits()
    mid = engine.default_state(1).dof_pos
    t = mid + scale * torch.randn(engine.num_envs, engine.num_dofs, generator=gen)
    return torch.maximum(torch.minimum(t, hi), lo)


def random_states(engine: MujocoEngine, n: int, gen: torch.Generator) -> SimState:
    """Near the default pose, lifted 0.3 m (no deep floor penetration), random velocities."""
    s = engine.default_state(n)
    s.root_pos[:, :2] += torch.randn(n, 2, generator=gen)
    s.root_pos[:, 2] += 0.3
    axis = torch.nn.functional.normalize(torch.randn(n, 3, generator=gen), dim=-1)
    s.root_rot = quat_from_axis_angle(axis, 0.2 * torch.rand(n, generator=gen))
    s.root_lin_vel = 0.5 * torch.randn(n, 3, generator=gen)
    s.root_ang_vel = 0.5 * torch.randn(n, 3, generator=gen)
    lo, hi = engine.get_dof_limits()
    s.dof_pos = torch.maximum(
        torch.minimum(s.dof_pos + 0.2 * torch.randn(n, engine.num_dofs, generator=gen), hi), lo
    )
    s.dof_vel = 0.5 * torch.randn(n, engine.num_dofs, generator=gen)
    if engine.num_objects:
        s.object_lin_vel = torch.randn(n, engine.num_objects, 3, generator=gen)
        s.object_ang_vel = torch.randn(n, engine.num_objects, 3, generator=gen)
    return s


def assert_states_equal(a: SimState, b: SimState, atol: float = 0.0) -> None:
    for name, x in vars(a).items():
        torch.testing.assert_close(getattr(b, name), x, rtol=0.0, atol=atol, msg=name)


def check_readouts(engine: MujocoEngine) -> None:
    n = engine.num_envs
    shapes = {k: (n, *v) for k, v in SimState.shapes(engine.num_dofs, engine.num_objects).items()}
    state = engine.get_state()
    pos, rot = engine.get_body_poses()
    out = {
        **vars(state),
        "keypoints": engine.get_keypoints(),
        "contacts": engine.get_contacts(),
        "body_pos": pos,
        "body_rot": rot,
        "nonfinite": engine.nonfinite_envs(),
    }
    shapes.update(
        keypoints=(n, engine.num_keypoints, 3), contacts=(n, engine.num_contacts),
        body_pos=(n, engine.num_bodies, 3), body_rot=(n, engine.num_bodies, 4), nonfinite=(n,),
    )  # fmt: skip
    for name, x in out.items():
        assert tuple(x.shape) == shapes[name], name
        if name == "nonfinite":
            assert x.dtype == torch.bool and not x.any()
        else:
            assert x.dtype == torch.float32 and torch.isfinite(x).all(), name


# ----------------------------------------------------------------------------- lifecycle
@pytest.mark.parametrize("character", CHARACTERS.names())
@pytest.mark.parametrize("objects", [(), ("ball",)])
def test_create_reset_step_every_character(character, objects):
    gen = torch.Generator().manual_seed(0)
    with make(character, 3, objects) as engine:
        assert engine.substeps == 2 and engine.num_objects == len(objects)
        check_readouts(engine)
        for _ in range(5):
            engine.step(random_targets(engine, gen))
        check_readouts(engine)
        engine.reset(torch.tensor([1]))
        engine.step()
        check_readouts(engine)


@pytest.mark.parametrize("character", ["humanoid", "dog"])
def test_pd_standing_pose_holds_for_2s(character):
    with make(character, 2) as engine:
        targets = engine.default_state().dof_pos
        h0 = engine.get_state().root_pos[:, 2].clone()
        torso = engine.body_names.index("torso") if "torso" in engine.body_names else 0
        z = torch.tensor([0.0, 0.0, 1.0])
        for _ in range(round(2.0 / engine.control_dt)):
            engine.step(targets)
            h = engine.get_state().root_pos[:, 2]
            assert (h > 0.8 * h0).all(), f"root fell to {h.tolist()} from {h0.tolist()}"
        up = quat_rotate(engine.get_body_poses()[1][:, torso], z)
        assert (up[:, 2] > 0.95).all(), up
        assert (engine.get_contacts() == 1.0).all(), "standing: every contact body on the floor"


def test_contacts_off_in_the_air():
    with make("humanoid", 2) as engine:
        s = engine.default_state()
        s.root_pos[:, 2] += 1.0
        engine.reset(state=s)
        engine.step()
        assert (engine.get_contacts() == 0.0).all()


def test_ball_rests_on_the_floor():
    with make("humanoid", 2, ("ball",)) as engine:
        for _ in range(30):
            engine.step()
        s = engine.get_state()
        radius = engine.model.geom_size[
            mujoco.mj_name2id(engine.model, mujoco.mjtObj.mjOBJ_GEOM, "ball_geom"), 0
        ]
        torch.testing.assert_close(
            s.object_pos[:, 0, 2], torch.full((2,), float(radius)), atol=2e-3, rtol=0
        )


# ----------------------------------------------------------------------------- exact resets
def test_ball_contact_with_the_character_is_reported():
    """The ball's contact sensor sees the character's foot, and nothing else (not the floor)."""
    e = MujocoEngine("humanoid", 3, objects=("ball",))
    s = e.default_state()
    ankle = e.get_keypoints()[0, e.character.keypoint_names.index("right_ankle")]
    s.object_pos[0, 0] = torch.tensor([float(ankle[0]) + 0.2, float(ankle[1]), 0.11])  # at the toes
    s.object_pos[1, 0] = torch.tensor([1.5, 0.0, 0.11])  # on the floor, 1.5 m ahead
    s.object_pos[2, 0] = torch.tensor([float(ankle[0]) + 0.2, float(ankle[1]) + 0.5, 0.11])
    e.reset(None, s)
    np.testing.assert_array_equal(e.get_object_contacts().numpy(), [[1.0], [0.0], [0.0]])
    e.step(s.dof_pos)
    assert e.get_object_contacts()[1, 0] == 0.0


def test_reset_subset_reproduces_state_and_leaves_others_untouched():
    gen = torch.Generator().manual_seed(1)
    with make("humanoid", 6, ("ball",)) as engine:
        for _ in range(5):
            engine.step(random_targets(engine, gen))
        before = engine.get_state()
        kp_before = engine.get_keypoints()
        ids = torch.tensor([4, 1])
        given = random_states(engine, 2, gen)
        engine.reset(ids, given)
        after = engine.get_state()
        assert_states_equal(given, after.index(ids), atol=1e-6)
        others = torch.tensor([0, 2, 3, 5])
        assert_states_equal(before.index(others), after.index(others))
        assert torch.equal(engine.get_keypoints()[others], kp_before[others])
        # Positions and velocities are exact (float32 -> float64 -> float32).
        for name in ("root_pos", "root_rot", "dof_pos", "dof_vel", "root_lin_vel", "object_pos"):
            assert torch.equal(getattr(after.index(ids), name), getattr(given, name)), name


def test_reset_holds_pd_targets_at_the_given_pose():
    with make("humanoid", 2) as engine:
        s = random_states(engine, 2, torch.Generator().manual_seed(2))
        engine.reset(state=s)
        np.testing.assert_array_equal(
            engine._ctrl[:, engine.index.dof_ctrl], s.dof_pos.double().numpy()
        )


# ----------------------------------------------------------------------------- determinism and parity
def test_two_engines_from_the_same_state_step_identically():
    gen = torch.Generator().manual_seed(3)
    a, b = make("humanoid", 4, ("ball",)), make("humanoid", 4, ("ball",))
    for _ in range(7):  # a carries history (warmstart, contacts) that a reset must erase
        a.step(random_targets(a, gen))
    start = random_states(a, 4, gen)
    a.reset(state=start)
    b.reset(state=start)
    for _ in range(20):
        t = random_targets(a, gen)
        a.step(t)
        b.step(t)
    assert not a.nonfinite_envs().any(), (
        "states must stay finite for the comparison to mean anything"
    )
    assert_states_equal(a.get_state(), b.get_state())
    assert torch.equal(a.get_keypoints(), b.get_keypoints())
    assert torch.equal(a.get_contacts(), b.get_contacts())
    a.close()
    b.close()


def test_trajectory_matches_plain_mj_step():
    """The batch (threads, persistent datas, stage skipping) changes nothing in the physics."""
    gen = torch.Generator().manual_seed(4)
    with make("humanoid", 3) as engine:
        engine.reset(state=random_states(engine, 3, gen))
        refs = [engine.get_mjdata(i) for i in range(3)]
        for _ in range(10):
            t = random_targets(engine, gen)
            engine.step(t)
            for i, d in enumerate(refs):
                d.ctrl[engine.index.dof_ctrl] = t[i].double().numpy()
                for _ in range(engine.substeps):
                    mujoco.mj_step(engine.model, d)
        for i, d in enumerate(refs):
            np.testing.assert_array_equal(engine._qpos[i], d.qpos)
            np.testing.assert_array_equal(engine._qvel[i], d.qvel)


def test_keypoints_and_body_poses_match_mj_kinematics():
    gen = torch.Generator().manual_seed(5)
    with make("humanoid", 3, ("ball",)) as engine:
        engine.reset(state=random_states(engine, 3, gen))
        for _ in range(4):
            engine.step(random_targets(engine, gen))
        kp, (pos, rot) = engine.get_keypoints(), engine.get_body_poses()
        m = engine.model
        sites = [
            mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_SITE, s)
            for s in engine.character.keypoint_sites
        ]
        bodies = [mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, b) for b in engine.body_names]
        d = mujoco.MjData(m)
        for i in range(3):
            d.qpos[:] = engine._qpos[i]
            mujoco.mj_kinematics(m, d)
            np.testing.assert_allclose(kp[i].numpy(), d.site_xpos[sites], rtol=0, atol=1e-6)
            np.testing.assert_allclose(pos[i].numpy(), d.xpos[bodies], rtol=0, atol=1e-6)
            ref_rot = wxyz_to_xyzw(torch.from_numpy(d.xquat[bodies])).float()
            torch.testing.assert_close(rot[i], ref_rot, rtol=0, atol=1e-6)


def test_velocities_are_world_frame():
    gen = torch.Generator().manual_seed(6)
    with make("humanoid", 2, ("ball",)) as engine:
        engine.reset(state=random_states(engine, 2, gen))
        engine.step(random_targets(engine, gen))
        s = engine.get_state()
        m, root = (
            engine.model,
            mujoco.mj_name2id(engine.model, mujoco.mjtObj.mjOBJ_BODY, engine.character.root_body),
        )
        ball = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "ball")
        for i in range(2):
            d, v = engine.get_mjdata(i), np.zeros(6)
            for body, ang, lin in (
                (root, s.root_ang_vel[i], s.root_lin_vel[i]),
                (ball, s.object_ang_vel[i, 0], s.object_lin_vel[i, 0]),
            ):
                # XBODY: at the body frame origin (BODY would be the centre of mass); world axes.
                mujoco.mj_objectVelocity(m, d, mujoco.mjtObj.mjOBJ_XBODY, body, v, 0)
                np.testing.assert_allclose(ang.numpy(), v[:3], rtol=0, atol=1e-5)
                np.testing.assert_allclose(lin.numpy(), v[3:], rtol=0, atol=1e-5)


# ----------------------------------------------------------------------------- divergence
@pytest.mark.parametrize("character", ["humanoid", "dog"])
def test_exploration_noise_stays_finite_at_default_dt(character):
    """What an untrained policy does: +-0.3 rad Gaussian PD target noise for 1 s."""
    gen = torch.Generator().manual_seed(7)
    with make(character, 16) as engine:
        for _ in range(30):
            engine.step(random_targets(engine, gen, 0.3))
        assert not engine.nonfinite_envs().any()


def test_nonfinite_detection_and_recovery():
    with make("humanoid", 4) as engine:
        engine.step()
        assert not engine.nonfinite_envs().any()
        engine._qvel[2, 7] = np.nan  # inject divergence into one env
        engine._qpos[3, 9] = 1e12
        engine.step()
        bad = engine.nonfinite_envs()
        assert bad.tolist() == [False, False, True, True]
        assert torch.isfinite(engine.get_state().root_pos[:2]).all(), "other envs unaffected"
        reset = engine.reset_nonfinite()
        assert reset.tolist() == [2, 3]
        assert not engine.nonfinite_envs().any()
        assert_states_equal(engine.get_state().index(reset), engine.default_state(2))
        for _ in range(3):
            engine.step()
        check_readouts(engine)
        assert engine.reset_nonfinite().numel() == 0


# ----------------------------------------------------------------------------- bad inputs
def test_bad_inputs_give_clear_errors():
    with make("humanoid", 4) as engine:
        j = engine.num_dofs
        with pytest.raises(
            ValueError, match=rf"targets must have shape \[4, {j}\], got \[4, {j - 1}\]"
        ):
            engine.step(torch.zeros(4, j - 1))
        with pytest.raises(ValueError, match=rf"targets must have shape \[4, {j}\]"):
            engine.set_pd_targets(torch.zeros(j))
        with pytest.raises(TypeError, match="targets must be a floating-point tensor"):
            engine.step(torch.zeros(4, j, dtype=torch.long))
        with pytest.raises(TypeError, match="targets must be a torch.Tensor"):
            engine.step(np.zeros((4, j)))
        with pytest.raises(ValueError, match="targets contain NaN"):
            engine.step(torch.full((4, j), float("nan")))
        with pytest.raises(TypeError, match="env_ids must be a 1-D LongTensor"):
            engine.reset(torch.tensor([0.0]))
        with pytest.raises(ValueError, match=r"env_ids must be in \[0, 4\)"):
            engine.reset(torch.tensor([4]))
        with pytest.raises(ValueError, match="env_ids must be distinct"):
            engine.reset(torch.tensor([1, 1]))
        bad = engine.default_state(2)
        bad.dof_pos = torch.zeros(3, j)
        with pytest.raises(
            ValueError, match=rf"state.dof_pos must have shape \[2, {j}\], got \[3, {j}\]"
        ):
            engine.reset(torch.tensor([0, 1]), bad)
    with pytest.raises(
        KeyError, match=r"character: unknown character 'robot'.*valid names: .*humanoid"
    ):
        make("robot")
    with pytest.raises(
        ValueError, match=r"engine.physics_hz=60.0: expected a whole multiple .*control_hz=40"
    ):
        make(control_hz=40.0, physics_hz=60.0)
    with pytest.raises(ValueError, match=r"engine.control_dt=0.025: expected a known key"):
        make(control_dt=0.025)
    with pytest.raises(ValueError, match="num_envs must be a positive int"):
        make(num_envs=0)
    with pytest.raises(KeyError, match=r"unknown object 'cube'"):
        make(objects=("cube",))
    with pytest.raises(ValueError, match=r"engine.name=.bullet.: expected one of mujoco, newton"):
        load_engine("bullet", "humanoid", 1)


def test_scene_without_sensors_is_rejected():
    from mimic2dm.characters import build_scene_xml

    xml = build_scene_xml("humanoid", with_sensors=False)
    with pytest.raises(ValueError, match="no framepos sensor on keypoint site .*with_sensors=True"):
        make(scene_xml=xml)


def test_timesteps_are_configurable():
    with make("humanoid", 2, control_hz=50.0, physics_hz=200.0) as engine:
        assert engine.substeps == 4 and engine.model.opt.timestep == 0.005
        engine.step()
        assert float(engine._batch.bind("time")[0]) == pytest.approx(0.02)


# ----------------------------------------------------------------------------- benchmark
def test_bench_engine_and_cli(tmp_path):
    from typer.testing import CliRunner

    from mimic2dm.engines.bench_cli import app

    out = tmp_path / "bench.json"
    res = CliRunner().invoke(
        app, ["engine", "--num-envs", "4", "--seconds", "0.3", "--threads", "2", "--json", str(out)]
    )
    assert res.exit_code == 0, res.output
    result = json.loads(out.read_text())
    for key in ("engine_env_steps_per_s", "raw_env_steps_per_s", "single_env_steps_per_s"):
        assert result[key] > 0
    assert result["engine_vs_raw"] == pytest.approx(
        result["engine_env_steps_per_s"] / result["raw_env_steps_per_s"]
    )
    assert "single-env Python loop" in res.output


def test_mujoco_order_map_is_model_order_and_wxyz():
    with make("dog", 1) as engine:
        m = engine.order_map
        assert m.quat == "wxyz" and m.dof_names == engine.dof_names
        ids = [
            mujoco.mj_name2id(engine.model, mujoco.mjtObj.mjOBJ_JOINT, n)
            for n in m.backend_dof_names
        ]
        assert ids == sorted(ids)
        # the body read-out equals MuJoCo's xquat rows converted by the map
        data = engine.get_mjdata(0)
        bids = [
            mujoco.mj_name2id(engine.model, mujoco.mjtObj.mjOBJ_BODY, n) for n in engine.body_names
        ]
        _, rot = engine.get_body_poses()
        ref = m.quat_to_canonical(torch.from_numpy(data.xquat[bids]).float())
        assert torch.allclose(rot[0], ref, atol=1e-6)


def test_conf_engine_keys_reach_the_engine_unchanged():
    """Every key of conf/engine/mujoco.yaml is an EngineOptions field and arrives in the engine."""
    import dataclasses

    from omegaconf import OmegaConf

    from mimic2dm.engines.base import EngineOptions
    from mimic2dm.train import compose_config

    path = pathlib.Path(__file__).resolve().parents[1] / "conf" / "engine" / "mujoco.yaml"
    yaml = OmegaConf.to_container(OmegaConf.load(path))
    fields = {f.name for f in dataclasses.fields(EngineOptions)}
    assert set(yaml) <= fields, (
        f"{path}: keys {sorted(set(yaml) - fields)} are not EngineOptions fields"
    )
    # the engine group as Hydra composes it for a run, every value changed
    changed = {"num_threads": 2, "physics_hz": 120.0, "control_hz": 40.0, "persistent": False}
    assert set(changed) | {"name", "device"} == set(yaml), (
        "give every new yaml key a changed value here"
    )
    cfg = compose_config([f"engine.{k}={v}" for k, v in changed.items()])
    options = EngineOptions.from_mapping(OmegaConf.to_container(cfg.engine), str(path))
    with load_engine(options, "humanoid", 1) as engine:
        for key, value in {**yaml, **changed}.items():
            assert getattr(engine.options, key) == value, key
        assert engine.num_threads == 2 and engine.persistent is False and engine.substeps == 3
        assert engine.model.opt.timestep == 1 / 120 and engine.device == torch.device("cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_device_option_puts_every_tensor_on_the_device_and_changes_nothing():
    gen = torch.Generator().manual_seed(8)
    with make("humanoid", 3) as cpu, make("humanoid", 3, device="cuda") as gpu:
        assert gpu.device.type == "cuda"
        start = random_states(cpu, 3, gen)
        cpu.reset(None, start)
        gpu.reset(None, start.to("cuda"))
        for _ in range(5):
            t = random_targets(cpu, gen)
            cpu.step(t)
            gpu.step(t.to("cuda"))
        out = [gpu.get_keypoints(), gpu.get_contacts(), *gpu.get_body_poses(), gpu.nonfinite_envs(),
               *vars(gpu.get_state()).values(), *gpu.get_dof_limits()]  # fmt: skip
        assert all(x.device.type == "cuda" for x in out)
        assert torch.equal(gpu.get_keypoints().cpu(), cpu.get_keypoints())
        assert_states_equal(cpu.get_state(), gpu.get_state().to("cpu"))
