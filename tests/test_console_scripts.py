"""The Hydra console scripts compose their configs from any working directory."""

import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


@pytest.mark.parametrize(
    "script",
    [
        "mimic2dm-train",
        "mimic2dm-train-tokenizer",
        "mimic2dm-train-generator",
        "mimic2dm-train-fid",
    ],
)
def test_console_script_composes_config_outside_the_repo(script, tmp_path):
    res = subprocess.run(
        [str(BIN / script), "--cfg", "job", "--resolve"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    assert "seed:" in res.stdout
