"""What the importer tests share: the ``mimic2dm data`` app and the bad-input check."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from mimic2dm.motion.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def assert_refused(res, out: Path, *words: str) -> None:
    """Exit 1, one ``error:`` line naming ``words`` (file, field...), and no file written."""
    assert res.exit_code == 1, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    for w in words:
        assert w in lines[0], (w, lines[0])
    assert not out.exists() and not list(out.parent.glob(f".{out.name}*"))
