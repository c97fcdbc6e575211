"""Output a script can use: JSON reports, and library prints kept off the console.

- :func:`write_json_report` writes a command's ``--json DEST`` report; ``DEST = "-"``
  means stdout, which then carries that one JSON document and nothing else.
- :func:`human_console` is where a command's tables and summaries go: stdout, or stderr
  when the JSON report has stdout.
- :func:`library_output_to_log` turns Python-level prints of libraries (rl-games prints
  ``self.seed = 0``, ``RunningMeanStd:  (1,)``, ``MAX EPOCHS NUM!``) into log records of
  ``mimic2dm.library``: they reach log files (Hydra's ``RUN_DIR/<job>.log``) and never a
  console handler.

A command that reports JSON runs its work inside :func:`library_output_to_log`, then
prints its table with :func:`human_console` and its report with :func:`write_json_report`.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

LIBRARY_LOGGER = "mimic2dm.library"

JsonOption = Annotated[
    str | None,
    typer.Option(
        "--json",
        metavar="FILE|-",
        help="Write the result as JSON to FILE; '-' prints only the JSON on stdout "
        "(tables go to stderr).",
    ),
]
"""The ``--json`` option of every command that writes a JSON report."""


def json_to_stdout(dest: str | Path | None) -> bool:
    """True when the report goes to stdout (``--json -``)."""
    return dest is not None and str(dest) == "-"


def _jsonable(obj: Any) -> Any:
    """Plain JSON values: numpy / torch scalars and arrays become numbers and lists,
    paths strings, non-finite floats ``null`` (strict JSON has no NaN)."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if obj is None or isinstance(obj, bool | int | str):
        return obj
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "tolist"):  # numpy / torch scalars and arrays
        return _jsonable(obj.tolist())
    return str(obj)


def write_json_report(obj: Any, dest: str | Path | None) -> None:
    """Write ``obj`` as a JSON document to ``dest``.

    Args:
        obj: the report (dicts, lists, numbers, strings; numpy / torch values and paths
            are converted, NaN / inf become ``null``).
        dest: None: nothing; ``"-"``: stdout (one document, newline-terminated); else a
            file path (parent folders are created), replaced atomically (a temp file in
            the same folder, then ``os.replace``), so an earlier report survives a failure.
    """
    if dest is None:
        return
    text = json.dumps(_jsonable(obj), indent=2, allow_nan=False) + "\n"
    if json_to_stdout(dest):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    path = Path(dest)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def human_console(json_dest: str | Path | None = None, **kw: Any) -> Console:
    """The console for tables and summaries: stderr when ``json_dest`` is stdout; wide when
    not a terminal, so that tables in logs and pipes are not folded into narrow columns."""
    console = Console(stderr=json_to_stdout(json_dest), **kw)
    if console.is_terminal or "width" in kw:
        return console
    return Console(stderr=json_to_stdout(json_dest), width=200, **kw)


class _LineLogger(io.TextIOBase):
    """A text stream that logs each complete line at INFO."""

    def __init__(self, logger: logging.Logger):
        self.logger, self.buf = logger, ""

    def writable(self) -> bool:
        return True

    def write(self, s: str) -> int:
        self.buf += s
        *lines, self.buf = self.buf.split("\n")
        for line in lines:
            if line.strip():
                self.logger.info(line.rstrip())
        return len(s)

    def flush(self) -> None:
        pass

    def close_line(self) -> None:
        if self.buf.strip():
            self.logger.info(self.buf.rstrip())
        self.buf = ""


def _not_library(record: logging.LogRecord) -> bool:
    return not record.name.startswith(LIBRARY_LOGGER)


def _console_handlers() -> list[logging.Handler]:
    """Handlers that write to a terminal-like stream (not files) on the way to the root."""
    out, lg = [], logging.getLogger(LIBRARY_LOGGER)
    while lg is not None:
        out += [h for h in lg.handlers
                if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)]  # fmt: skip
        lg = lg.parent if lg.propagate else None
    return out


@contextlib.contextmanager
def library_output_to_log(name: str = "") -> Iterator[None]:
    """Inside the block, ``print`` output becomes INFO records of ``mimic2dm.library[.name]``.

    The records reach file handlers (e.g. Hydra's job log) but are filtered out of the
    console handlers present when the block starts; with no logging configured they are
    dropped. Only Python-level ``sys.stdout`` writes are caught (not C-level output), in
    every thread, so the block belongs around library calls, not around our own
    console output (a rich progress bar must hold its own reference to the real stdout).
    """
    logger = logging.getLogger(f"{LIBRARY_LOGGER}.{name}" if name else LIBRARY_LOGGER)
    stream = _LineLogger(logger)
    handlers = [h for h in _console_handlers() if _not_library not in h.filters]
    for h in handlers:
        h.addFilter(_not_library)
    try:
        with contextlib.redirect_stdout(stream):
            yield
    finally:
        stream.close_line()
        for h in handlers:
            h.removeFilter(_not_library)


def markdown_rows(head: list[str], rows: list[list[str]]) -> list[str]:
    """Lines of a markdown table: the header, its rule and one line per row of cells."""
    return [
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
        *("| " + " | ".join(r) + " |" for r in rows),
    ]
