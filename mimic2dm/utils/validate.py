"""Range checks of config values, run at start-up before anything is created.

Every check raises :class:`ConfigError` naming the key, the value and what is allowed,
so that apps can print one line (``error: train.gamma=2.0: expected 0 < x <= 1``) and
exit 1 instead of failing later inside torch or MuJoCo. Schemas call the checks from
``__post_init__``; apps wrap their start-up in :func:`exit_on_config_error`.

Usage::

    from mimic2dm.utils.validate import ConfigError, check, check_device, check_choice

    @dataclass
    class OptimConfig:
        lr: float = 1e-3
        device: str = "cpu"

        def __post_init__(self):
            check("optim.lr", self.lr, gt=0)
            check_device("optim.device", self.device)

    with exit_on_config_error():    # in a CLI / Hydra app: one line on stderr, exit 1
        cfg = load(...)
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = [
    "ConfigError",
    "check",
    "check_choice",
    "check_device",
    "exit_on_config_error",
    "full_errors",
]


class ConfigError(ValueError):
    """A config value outside its allowed range.

    Attributes:
        key: dotted key (``train.learning_rate``) or option name (``--top-k``).
        value: the rejected value.
        allowed: what is allowed, in words (``x > 0``, ``one of cpu, cuda``).
    """

    def __init__(self, key: str, value: Any, allowed: str):
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"{key}={value!r}: expected {allowed}")


def _fmt(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def check(
    key: str,
    value: Any,
    *,
    gt: float | None = None,
    ge: float | None = None,
    lt: float | None = None,
    le: float | None = None,
    integer: bool = False,
    optional: bool = False,
) -> Any:
    """Check that a number lies in a range; returns ``value`` unchanged.

    Args:
        key: name shown in the error (``train.gamma``, ``--views``).
        value: the number (NaN is always refused; bools are not numbers here).
        gt, ge, lt, le: open/closed bounds (``gt=0, le=1``: ``0 < x <= 1``).
        integer: the value must be an int.
        optional: ``None`` passes.

    Raises:
        ConfigError: out of range, not a number, or NaN.
    """
    if value is None and optional:
        return value
    lo = f"{_fmt(gt)} < " if gt is not None else f"{_fmt(ge)} <= " if ge is not None else ""
    hi = f" < {_fmt(lt)}" if lt is not None else f" <= {_fmt(le)}" if le is not None else ""
    kind = "an integer" if integer else "a number"
    if lo and hi:
        allowed = f"{kind} with {lo}x{hi}"
    elif lo:  # "a number > 0", "an integer >= 1"
        allowed = f"{kind} > {_fmt(gt)}" if gt is not None else f"{kind} >= {_fmt(ge)}"
    else:
        allowed = f"{kind}{hi}" if hi else kind
    if optional:
        allowed += " (or null)"
    number = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, number) or math.isnan(value):
        raise ConfigError(key, value, allowed)
    if (
        (gt is not None and not value > gt)
        or (ge is not None and not value >= ge)
        or (lt is not None and not value < lt)
        or (le is not None and not value <= le)
    ):
        raise ConfigError(key, value, allowed)
    return value


def check_choice(key: str, value: Any, choices: Iterable[Any]) -> Any:
    """Check that ``value`` is one of ``choices``; returns it.

    Raises:
        ConfigError: listing the choices.
    """
    choices = list(choices)
    if value not in choices:
        raise ConfigError(key, value, "one of " + ", ".join(map(str, choices)))
    return value


def check_device(key: str, value: str) -> str:
    """Check a torch device string: ``cpu``, ``cuda``/``cuda:N`` only with such a GPU, ``mps`` if present.

    Raises:
        ConfigError: malformed, or the device does not exist on this machine.
    """
    import torch

    try:
        dev = torch.device(value)
    except (RuntimeError, TypeError):
        raise ConfigError(key, value, "a torch device (cpu, cuda, cuda:N)") from None
    if dev.type == "cpu":
        return value
    if dev.type == "cuda":
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n == 0:
            raise ConfigError(key, value, "cpu (torch sees no CUDA GPU on this machine)")
        if dev.index is not None and dev.index >= n:
            raise ConfigError(key, value, f"cpu or cuda:0..cuda:{n - 1} ({n} GPU(s) visible)")
        return value
    if dev.type == "mps" and torch.backends.mps.is_available():
        return value
    raise ConfigError(key, value, "cpu or cuda (a device present on this machine)")


def full_errors() -> bool:
    """Whether the user asked for full tracebacks (``HYDRA_FULL_ERROR=1``)."""
    return os.environ.get("HYDRA_FULL_ERROR", "") not in ("", "0")


@contextmanager
def exit_on_config_error(exit_code: int = 1) -> Iterator[None]:
    """Turn a :class:`ConfigError` (or a run directory that cannot be used,
    :class:`mimic2dm.utils.rundir.RunDirError`) into ``error: <message>`` on stderr and
    ``SystemExit(exit_code)``.

    With ``HYDRA_FULL_ERROR=1`` the error propagates with its traceback instead.
    """
    from mimic2dm.utils.rundir import RunDirError

    try:
        yield
    except (ConfigError, RunDirError) as e:
        if full_errors():
            raise
        print(f"error: {e}", file=sys.stderr, flush=True)
        raise SystemExit(exit_code) from None
