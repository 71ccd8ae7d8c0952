"""Every error the retriever raises on purpose, under :class:`RetrieverError`.

Each says what went wrong and where (the file, the line and the field for a bad corpus line); ``hint``, set where
it is raised, says what to do next. ``rag-retriever`` prints both (``error: ...`` then ``hint: ...``) and exits with
status 1 (2 for a :class:`UsageError` or an :class:`UnknownNameError`: the command itself is wrong). Each also
derives from the standard class it is a case of (a bad value is a :class:`ValueError`, an unknown name a
:class:`KeyError`), so code written against those keeps working.

>>> try:
...     raise ConfigError("k = -1: must be >= 0", hint="pass k=0 or more")
... except ValueError as e:
...     (str(e), e.hint)
('k = -1: must be >= 0', 'pass k=0 or more')
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any


class RetrieverError(Exception):
    """Base class of the retriever's own errors. ``hint``: what to do next (None when the message says it)."""

    hint: str | None = None

    def __init__(self, *args: object, hint: str | None = None) -> None:
        super().__init__(*args)
        if hint is not None:
            self.hint = hint


class ConfigError(RetrieverError, ValueError):
    """A setting or option that cannot be used as given (a bad value, a contradiction)."""


class UnknownNameError(RetrieverError, KeyError):
    """A name that is not registered (a retriever kind); the message lists the known names and the closest one."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if len(self.args) == 1 else super().__str__()


class UsageError(ConfigError):
    """The command itself is wrong: a value a setting cannot take, an option of another kind. The command line
    exits with status 2 for it."""


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


class DataError(RetrieverError, ValueError):
    """A corpus line (or dataset record) that cannot be read faithfully. ``kind`` is a short machine name
    (``invalid_json``, ``invalid_utf8``, ``missing_field``, ``wrong_type``, ``empty_text``, ``conflicting_id``,
    ``corpus``, ``empty_corpus``); the message names the file, the record and the field."""

    def __init__(self, message: str, *, kind: str, path: str | None = None, record: str | None = None,
                 field: str | None = None, hint: str | None = None) -> None:
        self.kind = kind
        self.path = path
        self.record = record
        self.field = field
        self.detail = message  # without the place
        where = ", ".join(x for x in (path, record, f"field {field!r}" if field else None) if x)
        super().__init__(f"{where}: {message}" if where else message, hint=hint)


class IndexError_(RetrieverError):
    """An index folder that cannot be read, written or trusted as asked: not an index, of another format, damaged
    (a file changed since its manifest), or being written by another run. (Named with a trailing underscore, not to
    shadow the built-in ``IndexError``; :data:`RetrievalIndexError` is its public name.)"""


RetrievalIndexError = IndexError_


class EngineError(RetrieverError):
    """Ray (``--engine ray``) could not do the work: Ray is not installed, the cluster cannot be reached or lacks the
    resources asked for, or the work failed on every retry."""


@dataclass
class SkipReport:
    """What ``on_error="skip"`` skipped, counted by kind, with the first few messages of each kind."""

    counts: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    keep: int = 3

    def add(self, err: Any) -> None:
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


__all__ = ["ConfigError", "DataError", "EngineError", "IndexError_", "RetrievalIndexError", "RetrieverError",
           "SettingError", "SkipReport", "UnknownNameError", "UsageError"]
