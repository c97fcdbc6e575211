"""One registry pattern for the whole project: a dict, ``register``, ``load``.

Entries may be objects or zero-argument factories; lazily imported backends register a
factory that imports on first use so that optional dependencies stay optional.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Named entries of one kind (characters, engines, tasks...)."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Callable[[], T]] = {}
        self._descriptions: dict[str, str] = {}

    def register(
        self, name: str, factory: Callable[[], T], *, overwrite: bool = False, description: str = ""
    ) -> None:
        """Register ``factory`` under ``name`` (with a one-line ``description`` for listings);
        re-registering needs ``overwrite=True``."""
        if name in self._entries and not overwrite:
            raise KeyError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = factory
        self._descriptions[name] = description

    def describe(self) -> dict[str, str]:
        """``{name: one-line description}`` of every entry, sorted by name."""
        return {n: self._descriptions.get(n, "") for n in self.names()}

    def names(self) -> list[str]:
        """Sorted registered names."""
        return sorted(self._entries)

    def load(self, name: str) -> T:
        """Build the entry ``name``; the error lists the valid names."""
        try:
            factory = self._entries[name]
        except KeyError:
            raise KeyError(
                f"unknown {self.kind} {name!r}; valid names: {', '.join(self.names()) or '(none)'}"
            ) from None
        return factory()

    def __contains__(self, name: str) -> bool:
        return name in self._entries
