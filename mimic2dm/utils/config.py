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
    """``schema`` (a dataclass) filled from ``values`` (a dict or an OmegaConf node).

    Raises:
        ValueError: unknown keys or wrong types, naming ``where`` and the key.
    """
    try:
        node = OmegaConf.merge(OmegaConf.structured(schema), values)
        return _tuples(OmegaConf.to_object(node))
    except Exception as e:  # noqa: BLE001 - re-raised with the config's name
        raise ValueError(f"config {where}: {e}") from None


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
