"""What the command-line apps share: option checks, one error line and its exit code.

- A value outside its choices or range is a usage error: :func:`check_choice`,
  :func:`check_positive` and :func:`refuse` raise ``typer.BadParameter`` naming the
  option; typer prints it under the usage line and exits 2.
- Bad input (a file, a field, a model that does not load) prints one line
  ``error: <message>`` on stderr and exits 1: :func:`fail`, or :func:`exit_on` around the
  work that raises.

Usage::

    check_choice(camera, CAMERA_MODES, "--camera")
    check_positive(fps, "--fps")
    with exit_on(ValueError, OSError, prefix=f"{src}: "):
        clip = load(src)
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import typer
from rich.console import Console

from mimic2dm.utils.reporting import human_console

__all__ = ["check_choice", "check_positive", "console", "error", "exit_on", "fail", "refuse"]


def console(stderr: bool = False) -> Console:
    """A console for tables and summary lines (stdout, or stderr), wide when not a terminal."""
    return human_console("-" if stderr else None, highlight=False)


def refuse(message: str, option: str) -> NoReturn:
    """Usage error on ``option`` (exit 2): ``Invalid value for OPTION: MESSAGE``."""
    raise typer.BadParameter(message, param_hint=option)


def check_choice(
    value: Any, choices: Collection[Any], option: str, names: Iterable[str] | None = None
) -> None:
    """Refuse ``value`` unless it is one of ``choices`` (listed as ``names``, default the choices).

    Message: ``'x' is not one of a, b, c``.
    """
    if value not in choices:
        refuse(f"{value!r} is not one of {', '.join(names or choices)}", option)


def check_positive(value: float | None, option: str, message: str = "must be > 0") -> None:
    """Refuse a ``value`` that is not > 0 (NaN included); None passes."""
    if value is not None and not value > 0:
        refuse(message, option)


def error(message: str) -> None:
    """Print ``error: MESSAGE`` on stderr."""
    typer.echo(f"error: {message}", err=True)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print ``error: MESSAGE`` on stderr and exit with ``code``."""
    error(message)
    raise typer.Exit(code)


@contextmanager
def exit_on(*errors: type[BaseException], prefix: str = "") -> Iterator[None]:
    """Turn ``errors`` raised inside the block into ``error: PREFIX<error>`` and exit 1."""
    try:
        yield
    except errors as e:
        error(f"{prefix}{e}")
        raise typer.Exit(1) from None
