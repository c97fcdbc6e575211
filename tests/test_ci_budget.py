"""The CI's time budget for slow tests (`.ci/run` sets ``MIMIC2DM_SLOW_DEADLINE``)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


class _Item:
    def __init__(self, slow: bool):
        self.slow = slow

    def get_closest_marker(self, name):
        return object() if (name == "slow" and self.slow) else None


@pytest.mark.parametrize("offset, slow, skipped", [
    (-1, True, True), (3600, True, False), (-1, False, False),
])  # fmt: skip
def test_slow_tests_after_the_deadline_are_skipped(monkeypatch, offset, slow, skipped):
    import conftest

    monkeypatch.setenv("MIMIC2DM_SLOW_DEADLINE", str(time.time() + offset))
    if skipped:
        with pytest.raises(pytest.skip.Exception, match="CI time budget"):
            conftest.pytest_runtest_setup(_Item(slow))
    else:
        conftest.pytest_runtest_setup(_Item(slow))


def test_ci_script_sets_the_deadline_before_the_slow_suite():
    script = (ROOT / ".ci/run").read_text()
    assert script.index("MIMIC2DM_SLOW_DEADLINE") < script.index("make test-slow")
    assert script.index("CI_START=") < script.index("make setup")
    out = subprocess.run(["bash", "-n", str(ROOT / ".ci/run")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
