"""The engine interface without a simulator: the ABC's checks, SimState, the registry."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest
import torch

import mimic2dm
from mimic2dm.characters import load_character
from mimic2dm.engines import ENGINES, engine_names, load_engine, preload_backend
from mimic2dm.engines.base import Engine, EngineLayout, SimState, substeps_for


class KinematicEngine(Engine):
    """A fake backend: joints jump to their targets, nothing else moves. Tests the base class only."""

    def _build(self) -> EngineLayout:
        spec = self.character
        self.closed = False
        self.targets = torch.zeros(self.num_envs, len(spec.dof_names))
        return EngineLayout(
            spec.dof_names, spec.body_names, spec.keypoint_names, spec.contact_bodies, self.objects
        )

    def _default_state(self) -> SimState:
        pose, j, o = self.character.default_pose, len(self.character.dof_names), len(self.objects)
        return SimState(
            root_pos=torch.tensor(pose.root_pos, dtype=torch.float32)[None],
            root_rot=torch.tensor(pose.root_quat, dtype=torch.float32)[None],
            root_lin_vel=torch.zeros(1, 3), root_ang_vel=torch.zeros(1, 3),
            dof_pos=torch.tensor(pose.dof_pos, dtype=torch.float32)[None], dof_vel=torch.zeros(1, j),
            object_pos=torch.zeros(1, o, 3), object_rot=torch.tensor([0.0, 0, 0, 1]).expand(1, o, 4),
            object_lin_vel=torch.zeros(1, o, 3), object_ang_vel=torch.zeros(1, o, 3),
        )  # fmt: skip

    def _set_pd_targets(self, targets):
        self.targets = targets.clone()

    def _step(self):
        self.state.dof_vel = (self.targets - self.state.dof_pos) / self.control_dt
        self.state.dof_pos = self.targets.clone()

    def _get_state(self):
        return self.state.clone()

    def _get_body_poses(self):
        pos = self.state.root_pos[:, None].expand(-1, self.num_bodies, 3).clone()
        return pos, self.state.root_rot[:, None].expand(-1, self.num_bodies, 4).clone()

    def _get_keypoints(self):
        return self.state.root_pos[:, None].expand(-1, self.num_keypoints, 3).clone()

    def _get_contacts(self):
        return torch.ones(self.num_envs, self.num_contacts)

    def _reset(self, env_ids, state):
        if not hasattr(self, "state"):
            self.state = state.clone()
        for name, value in vars(state).items():
            getattr(self.state, name)[env_ids] = value
        self.targets[env_ids] = state.dof_pos

    def _nonfinite_envs(self):
        return ~(
            torch.isfinite(self.state.dof_pos).all(1) & torch.isfinite(self.state.root_pos).all(1)
        )

    def _close(self):
        self.closed = True


@pytest.fixture()
def engine():
    with KinematicEngine("humanoid", 5, ("ball",)) as e:
        yield e
    assert e.closed


def test_engine_is_abstract():
    with pytest.raises(TypeError, match="abstract"):
        Engine("humanoid", 1)

    class Partial(KinematicEngine):
        _step = Engine._step

    with pytest.raises(TypeError, match="_step"):
        Partial("humanoid", 1)


def test_lifecycle_through_the_base_class(engine):
    spec = load_character("humanoid")
    assert (engine.num_envs, engine.num_dofs, engine.num_objects) == (5, len(spec.dof_names), 1)
    assert engine.num_keypoints == len(spec.keypoint_names) and engine.num_contacts == len(
        spec.contact_bodies
    )
    assert engine.substeps == 2 and engine.device == torch.device("cpu")
    start = engine.get_state()
    assert torch.equal(start.dof_pos, engine.default_state().dof_pos), (
        "engines start in the default state"
    )
    targets = torch.full((5, engine.num_dofs), 0.1, dtype=torch.float64)  # converted to float32
    engine.step(targets)
    assert engine.get_state().dof_pos.dtype == torch.float32
    assert torch.allclose(engine.get_state().dof_pos, torch.full((5, engine.num_dofs), 0.1))
    engine.reset(torch.tensor([3, 0]))
    s = engine.get_state()
    assert torch.equal(s.dof_pos[[0, 3]], start.dof_pos[[0, 3]])
    assert torch.allclose(s.dof_pos[[1, 2, 4]], torch.full((3, engine.num_dofs), 0.1))
    engine.reset(torch.zeros(0, dtype=torch.long))  # no-op
    lo, hi = engine.get_dof_limits()
    assert lo.shape == hi.shape == (engine.num_dofs,) and (lo < hi).all()


def test_nonfinite_and_reset_nonfinite(engine):
    engine.step(torch.full((5, engine.num_dofs), 0.2))
    bad = engine.get_state()
    bad.dof_pos[1, 0] = float("nan")
    bad.root_pos[4, 2] = float("inf")
    engine.reset(state=bad)  # NaN is accepted: that is how divergence gets injected here
    assert engine.nonfinite_envs().tolist() == [False, True, False, False, True]
    assert engine.reset_nonfinite().tolist() == [1, 4]
    assert not engine.nonfinite_envs().any()
    assert torch.equal(engine.get_state().dof_pos[[1, 4]], engine.default_state(2).dof_pos)
    assert torch.allclose(engine.get_state().dof_pos[0], torch.full((engine.num_dofs,), 0.2))


def test_argument_errors_name_the_argument_and_shape(engine):
    j = engine.num_dofs
    with pytest.raises(ValueError, match=rf"targets must have shape \[5, {j}\], got \[5, 3\]"):
        engine.step(torch.zeros(5, 3))
    with pytest.raises(TypeError, match=r"env_ids must be a 1-D LongTensor \[M\], got torch.int32"):
        engine.reset(torch.tensor([1], dtype=torch.int32))
    with pytest.raises(TypeError, match="state must be a SimState"):
        engine.reset(torch.tensor([1]), {"dof_pos": torch.zeros(1, j)})
    s = engine.default_state(1)
    s.object_rot = torch.zeros(1, 4)
    with pytest.raises(
        ValueError, match=r"state.object_rot must have shape \[1, 1, 4\], got \[1, 4\]"
    ):
        engine.reset(torch.tensor([1]), s)
    with pytest.raises(TypeError, match="objects must be a sequence of names"):
        KinematicEngine("humanoid", 1, "ball")


@pytest.mark.parametrize(
    ("control_dt", "physics_dt", "expected"),
    [(1 / 30, 1 / 60, 2), (1 / 30, 1 / 30, 1), (0.02, 0.005, 4), (1 / 30, 1 / 240, 8)],
)
def test_substeps(control_dt, physics_dt, expected):
    assert substeps_for(control_dt, physics_dt) == expected


@pytest.mark.parametrize(
    ("control_dt", "physics_dt", "match"),
    [
        (0.025, 1 / 60, r"control_dt \(0.025 s\) must be a whole multiple \(>= 1\) of physics_dt"),
        (1 / 120, 1 / 60, "whole multiple"),
        (0.0, 1 / 60, "control_dt must be a positive number"),
        (1 / 30, float("nan"), "physics_dt must be a positive number"),
    ],
)
def test_bad_timesteps(control_dt, physics_dt, match):
    with pytest.raises(ValueError, match=match):
        substeps_for(control_dt, physics_dt)
    with pytest.raises(ValueError, match=match):
        KinematicEngine("humanoid", 1, control_dt=control_dt, physics_dt=physics_dt)


def test_sim_state_helpers():
    s = KinematicEngine("dog", 1, ("ball",)).default_state(4)
    assert s.num_envs == 4
    sub = s.index(torch.tensor([2, 0]))
    assert sub.num_envs == 2 and sub.object_pos.shape == (2, 1, 3)
    c = s.clone()
    c.dof_pos += 1
    assert not torch.equal(c.dof_pos, s.dof_pos)
    shapes = SimState.shapes(num_dofs=s.dof_pos.shape[1], num_objects=1)
    assert all(tuple(getattr(s, k).shape[1:]) == v for k, v in shapes.items())


# ----------------------------------------------------------------------------- registry
def test_registry_and_lazy_gpu_entries():
    assert engine_names() == ["isaacgym", "mujoco", "newton"]
    for name in ("isaacgym", "newton"):
        with pytest.raises(ImportError, match=rf"engine '{name}' needs a GPU machine"):
            load_engine(name, "humanoid", 1)
    with pytest.raises(
        KeyError, match="unknown engine 'physx'; valid names: isaacgym, mujoco, newton"
    ):
        ENGINES.load("physx")
    assert issubclass(ENGINES.load("mujoco"), Engine)


def test_engines_package_imports_no_torch_and_no_simulator():
    code = "import sys, mimic2dm.engines; print('torch' in sys.modules, 'mujoco' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_isaacgym_must_come_before_torch():
    preload_backend("mujoco")  # nothing to pre-import
    with pytest.raises(ImportError, match="isaacgym must be imported before torch"):
        preload_backend("isaacgym")


def test_isaacgym_import_rule_lives_in_one_place():
    root = pathlib.Path(mimic2dm.__file__).parent.parent
    pattern = re.compile(r"import isaacgym|import_module\(\"isaacgym\"\)")
    hits = [
        p.relative_to(root).as_posix()
        for d in ("mimic2dm", "tasks", "generators")
        for p in (root / d).rglob("*.py")
        if pattern.search(p.read_text())
    ]
    assert hits == ["mimic2dm/engines/__init__.py"]
