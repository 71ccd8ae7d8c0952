"""Small registries for the things users extend: datasets, schedules, templates, rewards, backends.

Entries may be objects or dotted paths (``"pkg.module:attr"``) resolved on first use, so registering a backend
never imports its heavy library. Names are collision-checked and typos get a "did you mean".

>>> r = Registry("schedule")
>>> r.register("linear", len)
>>> r.get("linear") is len
True
>>> r.get("liner")
Traceback (most recent call last):
...
rag_curriculum.errors.UnknownNameError: unknown schedule 'liner'; did you mean 'linear'? Known: linear

An unknown name is an :class:`~rag_curriculum.errors.UnknownNameError` (a :class:`KeyError`); registering a taken
name without ``overwrite=True`` a :class:`~rag_curriculum.errors.ConfigError` (a :class:`ValueError`).
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

from .errors import ConfigError, UnknownNameError

T = TypeVar("T")


def import_dotted(path: str) -> Any:
    """Import ``"pkg.module:attr"`` (or ``"pkg.module.attr"``)."""
    if ":" in path:
        mod, _, attr = path.partition(":")
    else:
        mod, _, attr = path.rpartition(".")
    obj = importlib.import_module(mod)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


class Registry(Generic[T]):
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Any] = {}

    def register(self, name: str, obj: T | str | None = None, *, overwrite: bool = False) -> Any:
        """Register ``obj`` (or a dotted path to it) under ``name``; usable as a decorator when ``obj`` is None."""

        def deco(o: Any) -> Any:
            if name in self._entries and not overwrite:
                raise ConfigError(f"{self.kind} {name!r} is already registered",
                                  hint="pass overwrite=True to replace it, or register it under another name")
            self._entries[name] = o
            return o

        if obj is None:
            return deco
        deco(obj)
        return None

    def get(self, name: str) -> T:
        try:
            entry = self._entries[name]
        except KeyError:
            close = difflib.get_close_matches(name, list(self._entries), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise UnknownNameError(f"unknown {self.kind} {name!r}{hint} Known: {', '.join(sorted(self._entries))}"
                                   ) from None
        if isinstance(entry, str):
            entry = import_dotted(entry)
            self._entries[name] = entry
        return entry

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
