"""The engine interface without a simulator: the ABC's checks, SimState, the registry."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest
import torch
from fake_engine import KinematicEngine

import mimic2dm
from mimic2dm.characters import load_character
from mimic2dm.engines import ENGINES, engine_names
from mimic2dm.engines.base import (
    Engine,
    EngineOptions,
    OrderMap,
    SimState,
    substeps_for,
)


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
    reached = torch.minimum(
        torch.maximum(targets.float(), engine.get_dof_limits()[0]), engine.get_dof_limits()[1]
    )
    assert torch.allclose(
        engine.get_state().dof_pos, reached
    )  # the fake's joints jump to (limited) targets
    engine.reset(torch.tensor([3, 0]))
    s = engine.get_state()
    assert torch.equal(s.dof_pos[[0, 3]], start.dof_pos[[0, 3]])
    assert torch.allclose(s.dof_pos[[1, 2, 4]], reached[:3])
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
    assert torch.allclose(engine.get_state().dof_pos[0], bad.dof_pos[0])  # env 0 is left alone


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


@pytest.mark.parametrize(
    "options, match",
    [
        ({"control_hz": 40.0}, r"engine.physics_hz=60.0: expected a whole multiple .*engine.control_hz=40 \(in conf/engine/x.yaml\)"),
        ({"control_hz": 120.0}, "whole multiple"),
        ({"control_hz": 0.0}, r"engine.control_hz=0.0: expected a number > 0"),
        ({"physics_hz": float("nan")}, "engine.physics_hz=nan: expected a number > 0"),
        ({"num_threads": -1}, "engine.num_threads=-1: expected an integer >= 0"),
        ({"device": "gpu7"}, "engine.device='gpu7': expected a torch device"),
        ({"threads": 2}, r"engine.threads=2: expected a known key .*EngineOptions.*conf/engine/x.yaml"),
    ],
)  # fmt: skip
def test_bad_engine_options_are_named(options, match):
    with pytest.raises(ValueError, match=match):
        EngineOptions.from_mapping(options, "conf/engine/x.yaml")


def test_engine_takes_its_options():
    o = EngineOptions(physics_hz=120.0, control_hz=30.0)
    e = KinematicEngine("humanoid", 2, (), o)
    assert e.options is o and e.substeps == 4 and e.physics_dt == 1 / 120
    assert e.device == torch.device("cpu") and e.get_state().dof_pos.device == e.device
    assert o.replace(num_threads=3).num_threads == 3 and o.num_threads == 0
    with pytest.raises(TypeError, match="options must be an EngineOptions, got dict"):
        KinematicEngine("humanoid", 1, (), {"physics_hz": 60})


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
def test_registry_and_lazy_optional_entries():
    assert engine_names() == ["mujoco", "newton"]
    try:  # newton is an optional extra: without it, loading says how to install it
        assert issubclass(ENGINES.load("newton"), Engine)
    except ImportError as err:
        assert "pip install -e .[newton]" in str(err)
    with pytest.raises(KeyError, match="unknown engine 'physx'; valid names: mujoco, newton"):
        ENGINES.load("physx")
    assert issubclass(ENGINES.load("mujoco"), Engine)


def test_engines_package_imports_no_torch_and_no_simulator():
    code = "import sys, mimic2dm.engines; print('torch' in sys.modules, 'mujoco' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_no_isaacgym_entry_or_import_anywhere():
    """Isaac Gym was removed (no registry has it; wheels need Python <= 3.8): docs/engines.md."""
    root = pathlib.Path(mimic2dm.__file__).parent.parent
    pattern = re.compile(r"import isaacgym|import_module\(\"isaacgym\"\)")
    hits = [
        p.relative_to(root).as_posix()
        for d in ("mimic2dm", "tasks", "generators")
        for p in (root / d).rglob("*.py")
        if pattern.search(p.read_text())
    ]
    assert hits == [] and "isaacgym" not in engine_names()


# ----------------------------------------------------------------------------- order map
def test_order_map_converts_a_permuted_wxyz_backend_to_the_canonical_layout():
    m = OrderMap(("a", "b", "c"), ("c", "a", "b"), ("root", "arm"), ("arm", "root"), quat="wxyz")
    assert m.dof_index == (1, 2, 0) and m.body_index == (1, 0) and not m.is_identity
    back = torch.tensor([[30.0, 10.0, 20.0]])  # c, a, b
    assert m.dofs_to_canonical(back).tolist() == [[10.0, 20.0, 30.0]]
    assert torch.equal(m.dofs_from_canonical(m.dofs_to_canonical(back)), back)
    bodies = torch.tensor([[[1.0, 1, 1], [2.0, 2, 2]]])  # arm, root
    assert m.bodies_to_canonical(bodies)[0, :, 0].tolist() == [2.0, 1.0]
    assert torch.equal(m.bodies_from_canonical(m.bodies_to_canonical(bodies)), bodies)
    wxyz = torch.tensor([1.0, 0.1, 0.2, 0.3])
    assert m.quat_to_canonical(wxyz).tolist() == pytest.approx([0.1, 0.2, 0.3, 1.0])
    assert torch.equal(m.quat_from_canonical(m.quat_to_canonical(wxyz)), wxyz)
    assert OrderMap.identity(("a",), ("r",)).is_identity
    with pytest.raises(ValueError, match=r"backend dof names \['a', 'x'\] are not a permutation"):
        OrderMap(("a", "b"), ("a", "x"), ("r",), ("r",))
    with pytest.raises(ValueError, match="quat must be 'xyzw' or 'wxyz'"):
        OrderMap(("a",), ("a",), ("r",), ("r",), quat="zyxw")


def test_engines_report_their_order_map(engine):
    assert engine.order_map.is_identity and engine.order_map.dof_names == engine.dof_names
