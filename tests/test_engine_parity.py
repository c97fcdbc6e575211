"""Every registered engine backend against MuJoCo's own ``mj_step`` loop (tests/engine_parity.py).

Backends that are not installed (``newton`` without ``pip install -e .[newton]``) are
skipped with the reason. Newton builds take ~30 s each here (Warp kernels load from its
cache; the first run compiles them for minutes), so its cases are marked slow.
"""

from __future__ import annotations

import pytest
import torch
from engine_parity import (
    DEFAULT_TOLERANCE_M,
    MOCAP,
    TOLERANCE_M,
    make_case,
    mocap_case,
    parity_error,
    reference_keypoints,
    standing_case,
)

from mimic2dm.engines import ENGINES, engine_names

FALLING_WINDOW_S = {"newton": 0.2}
"""Seconds of the random falling case compared against ``TOLERANCE_M`` (default: all 1 s).
Newton's float32 contacts drift apart later (measured 1 s: up to 4.9 cm on the dog)."""
FALLING_DRIFT_M = 0.1
"""Bound on the whole 1 s falling rollout for backends with a shorter window: a wrong
order map or quaternion convention is off by far more than this within a step."""


def _backend_or_skip(name: str) -> None:
    try:
        ENGINES.load(name)
    except ImportError as err:
        pytest.skip(f"engine {name!r} is not installed here: {err}")


def _marks(name: str):
    return pytest.param(name, marks=[pytest.mark.slow] if name != "mujoco" else [])


ENGINES_UNDER_TEST = [_marks(n) for n in engine_names()]


@pytest.mark.parametrize("character", ["humanoid", "dog"])
@pytest.mark.parametrize("name", ENGINES_UNDER_TEST)
def test_backend_matches_plain_mj_step(name, character):
    """Lifted, tilted, moving starts falling onto the floor (1 s, 4 envs)."""
    _backend_or_skip(name)
    case = make_case(character, num_envs=4, steps=30, seed=1)
    err = parity_error(name, case)
    tol = TOLERANCE_M.get(name, DEFAULT_TOLERANCE_M)
    window = round(FALLING_WINDOW_S.get(name, 1.0) * case.options.control_hz)
    assert float(err[:window].max()) <= tol, (
        f"{name}/{character}: keypoints differ by up to {err[:window].max():.2e} m "
        f"in the first {window} steps"
    )
    assert float(err.max()) <= max(tol, FALLING_DRIFT_M), f"{name}/{character}: {err.max():.2e} m"


@pytest.mark.parametrize("character", ["humanoid", "dog"])
@pytest.mark.parametrize("name", ENGINES_UNDER_TEST)
def test_backend_standing_one_second(name, character):
    """The default pose held by its PD targets for 1 s: keypoints within the tolerance."""
    _backend_or_skip(name)
    case = standing_case(character, seconds=1.0)
    err = parity_error(name, case)
    tol = TOLERANCE_M.get(name, DEFAULT_TOLERANCE_M)
    assert float(err.max()) <= tol, f"{name}/{character} standing: {err.max():.2e} m"


@pytest.mark.skipif(not (MOCAP / "cmu_walk.npz").is_file(), reason=f"cmu_walk.npz not in {MOCAP}")
@pytest.mark.parametrize("name", ENGINES_UNDER_TEST)
def test_backend_follows_mocap_targets(name):
    """0.2 s of PD targets from cmu_walk's retargeted poses, from the clip's states."""
    _backend_or_skip(name)
    case = mocap_case("cmu_walk", seconds=0.2, num_envs=4)
    err = parity_error(name, case)
    tol = TOLERANCE_M.get(name, DEFAULT_TOLERANCE_M)
    assert float(err.max()) <= tol, f"{name} cmu_walk 0.2 s: {err.max():.2e} m"


def test_the_reference_moves_and_the_harness_sees_a_difference():
    """The comparison is not vacuous: the bodies fall and move, and other targets change the keypoints."""
    case = make_case("dog", num_envs=2, steps=20, seed=2)
    ref = reference_keypoints(case)
    assert float((ref[-1] - ref[0]).norm(dim=-1).max()) > 0.05
    other = make_case("dog", num_envs=2, steps=20, seed=2)
    other.targets = other.targets + 0.2
    assert float((reference_keypoints(other) - ref).norm(dim=-1).max()) > TOLERANCE_M["mujoco"]
    assert torch.isfinite(ref).all()


@pytest.mark.skipif(not (MOCAP / "cmu_walk.npz").is_file(), reason=f"cmu_walk.npz not in {MOCAP}")
def test_mocap_case_walks_and_its_targets_matter():
    """The walk case moves the body by far more than the tolerance, and its targets drive it."""
    case = mocap_case("cmu_walk", seconds=0.2, num_envs=2)
    ref = reference_keypoints(case)
    assert float((ref[-1] - ref[0]).norm(dim=-1).max()) > 0.1
    held = mocap_case("cmu_walk", seconds=0.2, num_envs=2)
    held.targets = held.states.dof_pos.expand_as(held.targets).clone()
    assert float((reference_keypoints(held) - ref).norm(dim=-1).max()) > TOLERANCE_M["newton"]
