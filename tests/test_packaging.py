"""Packaging: tasks/ and generators/ install as mimic2dm subpackages, the CLI is wired."""

import importlib.util
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAPPING = {"mimic2dm": "mimic2dm", "mimic2dm.tasks": "tasks", "mimic2dm.generators": "generators"}


def package_dirs() -> set[str]:
    found = set()
    for name, folder in MAPPING.items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base).parts
            found.add(".".join((name, *rel)))
    return found


def test_every_package_directory_is_listed_in_pyproject():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert cfg["package-dir"] == MAPPING
    assert package_dirs() - set(cfg["packages"]) == set(), (
        "add the missing packages to pyproject.toml"
    )


def test_tasks_and_generators_are_subpackages_not_top_level():
    import mimic2dm.generators
    import mimic2dm.tasks

    assert Path(mimic2dm.tasks.__file__).parent == ROOT / "tasks"
    assert Path(mimic2dm.generators.__file__).parent == ROOT / "generators"
    code = "import importlib.util,sys; sys.exit(0 if importlib.util.find_spec('tasks') is None and importlib.util.find_spec('generators') is None else 1)"
    assert subprocess.run([sys.executable, "-c", code], cwd="/").returncode == 0


def test_console_entry_point_lists_subcommands():
    assert importlib.util.find_spec("mimic2dm.cli") is not None
    out = subprocess.run(
        [sys.executable, "-m", "mimic2dm.cli", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for sub in ("data", "bench", "demo"):
        assert sub in out
