"""Output options checked before any work: ``mimic2dm eval --picture/--video/--json`` and
``mimic2dm export --out`` name the option, the path and the errno in one line, exit 1.

Tests run as root, where ``chmod 0555`` does not stop writes: an unwritable place is made
as a path under a regular file (``ENOTDIR``), which stops root too."""

import pytest
from typer.testing import CliRunner

from mimic2dm.cli import app


@pytest.fixture
def blocker(tmp_path):
    f = tmp_path / "a_file"
    f.write_text("x")
    return f


def run(*args: str):
    res = CliRunner().invoke(app, list(args))
    assert res.exit_code == 1, res.output
    assert "Traceback" not in res.output, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    lines = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, res.output
    return lines[0]


# a checkpoint that does not exist: the option must be refused before it is even looked for
EVAL = ["eval", "/nonexistent/last.pt", "--data", "/nonexistent/clip.npz"]


@pytest.mark.parametrize("option, value, expected", [
    ("--picture", "out.jpgx", ".png or .jpg"),
    ("--picture", "-", ".png or .jpg"),
    ("--video", "out.mp3", ".mp4"),
    ("--json", "out.yaml", ".json file name, or - for stdout"),
])  # fmt: skip
def test_eval_refuses_a_wrong_extension_before_any_work(tmp_path, option, value, expected):
    line = run(*EVAL, option, str(tmp_path / value) if value != "-" else "-")
    assert line.startswith(f"error: {option}=") and expected in line


@pytest.mark.parametrize("option, name", [("--json", "r.json"), ("--picture", "p.png")])
def test_eval_refuses_an_unwritable_output_naming_path_and_errno(blocker, option, name):
    line = run(*EVAL, option, str(blocker / name))
    assert f"{option} {blocker / name}: [Errno 20] Not a directory" in line


def test_export_refuses_an_unwritable_out_dir(blocker):
    line = run("export", "/nonexistent/last.pt", "--out", str(blocker / "exported"))
    assert f"--out {blocker / 'exported'}: [Errno 20] Not a directory" in line


def test_check_writable_sees_read_only_file_systems(tmp_path, monkeypatch):
    import os

    from mimic2dm.utils.rundir import RunDirError, check_writable

    # root passes every permission check but not a read-only mount: access() says EROFS
    monkeypatch.setattr(os, "access", lambda p, mode: False)
    with pytest.raises(RunDirError, match=r"--out .*: \[Errno (13|30)\]"):
        check_writable(tmp_path / "x", "--out", is_dir=True)


def test_a_json_write_that_fails_after_the_evaluation_is_one_line(tmp_path, monkeypatch):
    import errno
    import os

    def full_disk(report, dest):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dest))

    monkeypatch.setattr("mimic2dm.eval.evaluate", lambda *a, **k: {"success_rate": 1.0})
    monkeypatch.setattr("mimic2dm.cli.write_json_report", full_disk)
    out = tmp_path / "r.json"
    line = run(*EVAL, "--json", str(out))
    assert line == f"error: cannot write {out}: [Errno 28] No space left on device"
