"""The controller uses the tracker through its public interface only: no module of
``mimic2dm/control`` imports a private name (``_x``) from another package."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CONTROL = Path(__file__).resolve().parents[1] / "mimic2dm" / "control"


def private_imports(path: Path) -> list[str]:
    """``module.name`` of every ``_``-prefixed name ``path`` imports from outside its package."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("mimic2dm.control"):
                continue
            found += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
        elif isinstance(node, ast.Import):
            found += [
                a.name for a in node.names if any(p.startswith("_") for p in a.name.split("."))
            ]
    return found


@pytest.mark.parametrize("path", sorted(CONTROL.glob("*.py")), ids=lambda p: p.name)
def test_control_imports_no_private_name_of_another_package(path):
    assert private_imports(path) == []


def test_the_check_sees_a_private_import(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("def f():\n    from mimic2dm.tasks.tracking2d.source import _gather, gather\n")
    assert private_imports(f) == ["mimic2dm.tasks.tracking2d.source._gather"]
