"""Config dataclasses from plain mappings: the one place a config node meets its schema."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from omegaconf import OmegaConf


def _tuples(obj: Any) -> Any:
    """OmegaConf returns lists for ``tuple[...]`` fields: give them back as tuples (in place)."""
    if dataclasses.is_dataclass(obj):
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            if isinstance(v, list) and str(f.type).startswith("tuple"):
                setattr(obj, f.name, tuple(v))
            else:
                _tuples(v)
    return obj


def from_mapping(schema: type, values: Mapping | Any, where: str) -> Any:
    """``schema`` (a dataclass) filled from ``values`` (a dict or an OmegaConf node); the
    schema's ``__post_init__`` checks the ranges.

    Args:
        where: the dotted config key of ``values`` (``train``, ``task``), named in errors.

    Raises:
        ConfigError: unknown key, wrong type or value out of range, naming the full key.
    """
    from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

    from mimic2dm.utils.validate import ConfigError

    try:
        node = OmegaConf.merge(OmegaConf.structured(schema), values)
        return _tuples(OmegaConf.to_object(node))
    except ConfigError:
        raise
    except OmegaConfBaseException as e:
        cause = e.__cause__ or e.__context__
        if isinstance(cause, ConfigError):  # raised by a __post_init__ inside to_object
            raise cause from None
        sub = getattr(e, "full_key", None)
        key = f"{where}.{sub}" if sub else where
        value = None
        if sub:
            try:
                value = OmegaConf.select(OmegaConf.create(values), sub, default=None)
            except Exception:  # noqa: BLE001 - the value is only for the message
                value = None
        if isinstance(e, ConfigKeyError):
            raise ConfigError(
                key, value, f"a known key ({key} is not a field of {schema.__name__})"
            ) from None
        msg = str(e).splitlines()[0]  # OmegaConf appends full_key / object_type lines
        raise ConfigError(key, value, f"a valid value ({msg})") from None


def to_plain(obj: Any) -> Any:
    """Dataclasses, OmegaConf nodes and tuples as plain dicts / lists (for checkpoints)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if OmegaConf.is_config(obj):
        return OmegaConf.to_container(obj, resolve=True)
    if isinstance(obj, Mapping):
        return {k: to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    return obj
