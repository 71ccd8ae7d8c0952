"""The error machinery both distributions build their errors on: the ``hint`` every error carries, the kinds of
error both raise (a bad setting, an unknown name, a wrong command, a setting with an impossible value, a record that
cannot be read) with their messages and fields, and the report of skipped records.

Each public ``errors`` module (:mod:`rag_retriever.errors`, and rag-curriculum's, which requires this package)
derives its own classes from these under its own base class (``RetrieverError``, ``CurriculumError``), so that
catching one distribution's base catches none of the other's errors; a command line that reports either (their
hints, exit status 2 for a wrong command) catches these. Private: no stable API outside this repository.

>>> class ToolError(HintedError): ...
>>> class ToolSettingError(ToolError, SettingError): ...
>>> e = ToolSettingError("k", -1, ">= 0", flag="--k")
>>> (str(e), isinstance(e, ValueError), isinstance(e, UsageError))
('k (--k) = -1: must be >= 0', True, True)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ConfigError", "DataError", "HintedError", "SettingError", "SkipReport", "UnknownNameError",
           "UsageError"]


class HintedError(Exception):
    """Base class of both distributions' own errors. ``hint``: what to do next (None when the message says it)."""

    hint: str | None = None

    def __init__(self, *args: object, hint: str | None = None) -> None:
        super().__init__(*args)
        if hint is not None:
            self.hint = hint


class ConfigError(HintedError, ValueError):
    """A setting or option that cannot be used as given (a bad value, a contradiction)."""


class UnknownNameError(HintedError, KeyError):
    """A name that is not registered; the message lists the known names and the closest one."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if len(self.args) == 1 else super().__str__()


class UsageError(ConfigError):
    """The command itself is wrong: a command line exits with status 2 for it."""


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class SettingError(UsageError):
    """A setting with an impossible value (wrong type or out of range): names the setting, the value and what is
    allowed."""

    def __init__(self, name: str, value: Any, allowed: str, *, flag: str | None = None,
                 message: str | None = None) -> None:
        self.setting = name
        self.value = value
        self.allowed = allowed
        self.flag = flag
        label = f"{name} ({flag})" if flag and flag != name else name
        super().__init__(message or f"{label} = {_show(value)}: must be {allowed}")


class DataError(HintedError, ValueError):
    """A record that cannot be read faithfully. ``kind`` is a short machine name; the message names the file, the
    record and the field (``detail``: the message without the place)."""

    def __init__(self, message: str, *, kind: str, path: str | None = None, record: str | None = None,
                 field: str | None = None, hint: str | None = None) -> None:
        self.kind = kind
        self.path = path
        self.record = record
        self.field = field
        self.detail = message  # without the place: what a caller that names the place itself re-raises
        where = ", ".join(x for x in (path, record, f"field {field!r}" if field else None) if x)
        super().__init__(f"{where}: {message}" if where else message, hint=hint)


@dataclass
class SkipReport:
    """What ``on_error="skip"`` skipped, counted by kind, with the first few messages of each kind."""

    counts: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    keep: int = 3

    def add(self, err: DataError) -> None:
        self.counts[err.kind] += 1
        self.examples.setdefault(err.kind, [])
        if len(self.examples[err.kind]) < self.keep:
            self.examples[err.kind].append(str(err))

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> str:
        if not self.total:
            return "no records skipped"
        parts = ", ".join(f"{k}: {v}" for k, v in sorted(self.counts.items()))
        return f"skipped {self.total} record(s) ({parts})"
