"""Shared test set-up.

MuJoCo binds its offscreen GL back-end when it is first imported, so the back-end is
picked here, before any test module imports mujoco, by the probe the code itself uses
(:func:`mimic2dm.render.gl_backend`: OSMesa, EGL, then GLFW, each tried in a child
process); the choice goes to ``MUJOCO_GL`` for this process and those the tests start.
Tests that need a rendered video take the ``gl_backend`` fixture: it skips them, with the
reason, where no back-end works.

The shared data is resolved here too (``shared_data``, imported before any test module):
``../shared`` or ``$MIMIC2DM_SHARED`` where it is found, else the permissively licensed clips
shipped in ``tests/fixtures/shared``; the header of the test report says which.
"""

import os
import tempfile

import pytest
import shared_data
import torch

from mimic2dm.render import gl_backend as probe_gl_backend
from mimic2dm.render import no_gl_message

os.environ.setdefault("WANDB_MODE", "offline")
# initial-state fits are cached per test session, not in the user's cache folder: a test
# never reads a fit that another checkout or an older fit code left behind
os.environ.setdefault("MIMIC2DM_CACHE", tempfile.mkdtemp(prefix="mimic2dm_test_cache_"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
probe_gl_backend()


def pytest_report_header(config) -> str:
    """Which shared data the tests read."""
    note = " (the clips shipped with the tests)" if shared_data.ON_SHIPPED_CLIPS else ""
    return f"shared data: {shared_data.shared_dir()}{note}"


def pytest_runtest_setup(item) -> None:
    """A slow test that would start after ``$MIMIC2DM_SLOW_DEADLINE`` (Unix time; `.ci/run`
    sets it so that the whole CI stays within its time budget) is skipped, with the reason."""
    deadline = os.environ.get("MIMIC2DM_SLOW_DEADLINE")
    if deadline and item.get_closest_marker("slow") is not None:
        import time

        if time.time() > float(deadline):
            pytest.skip("CI time budget spent (MIMIC2DM_SLOW_DEADLINE): slow test not started")


@pytest.fixture
def gl_backend() -> str:
    """The GL back-end videos render with; skips the test where none works."""
    backend = probe_gl_backend()
    if backend is None:
        pytest.skip(f"no video: {no_gl_message()}")
    return backend


@pytest.fixture(scope="module")
def one_torch_thread():
    """Run a module's tests with one torch thread (restored afterwards)."""
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(prev)


@pytest.fixture(autouse=True)
def _drop_log_handlers_added_by_the_test():
    """Remove root-logger handlers a test added (an in-process Hydra app installs a stream
    handler on pytest's capture stream; once that stream closes, later log calls print
    "--- Logging error ---")."""
    import logging

    root = logging.getLogger()
    before = list(root.handlers)
    yield
    for h in list(root.handlers):
        if h not in before:
            root.removeHandler(h)
