"""Errors that say where bad input is: the file, the record (line or index, and id) and the field."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


class CurriculumError(Exception):
    """Base class of the toolkit's own errors."""


class DataError(CurriculumError, ValueError):
    """A record that cannot be read faithfully.

    ``kind`` is a short machine name: ``invalid_json`` (truncated or invalid JSON, NaN/Infinity, nesting too
    deep, content after the list), ``invalid_utf8``, ``invalid_parquet``, ``missing_field``, ``wrong_type``,
    ``empty_question``, ``empty_answer``, ``no_gold``, ``dangling_supporting_fact``, ``conflicting_id`` (an id
    reused by a different question); the message names the file, the record and the field.
    """

    def __init__(self, message: str, *, kind: str, path: str | None = None, record: str | None = None,
                 field: str | None = None) -> None:
        self.kind = kind
        self.path = path
        self.record = record
        self.field = field
        where = ", ".join(x for x in (path, record, f"field {field!r}" if field else None) if x)
        super().__init__(f"{where}: {message}" if where else message)


class InputIsADirectoryError(CurriculumError, IsADirectoryError):
    """A directory given where one data file is expected (the message names it and says what to pass)."""


class WrongDatasetError(CurriculumError, ValueError):
    """A file that belongs to another dataset (or to none the toolkit knows)."""


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
