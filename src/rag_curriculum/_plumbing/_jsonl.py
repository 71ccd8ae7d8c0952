"""The one line-by-line JSON reader (:func:`jsonl_records`: the caller names its own error for a bad line), and the
reader for the toolkit's append-only JSONL logs (``curriculum_steps.jsonl``, ``curriculum_levels.jsonl``,
``curriculum_dynamic.jsonl``): one JSON object per line, keyed by a step or batch number; a resumed run appends a
key again, and the last record written for a key wins.

>>> import os, tempfile
>>> d = tempfile.mkdtemp(); p = os.path.join(d, "log.jsonl")
>>> _ = open(p, "w").write('{"step": 2, "x": 1}\\n\\n{"step": 1, "x": 2}\\n{"step": 2, "x": 3}\\n')
>>> read_jsonl_latest(p, "step")
[{'step': 1, 'x': 2}, {'step': 2, 'x': 3}]
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from rag_plumbing._atomic import atomic_write_bytes

__all__ = ["jsonl_records", "read_jsonl_latest", "read_state", "write_state"]


def jsonl_records(lines: Iterable[str], bad_json: Callable[[int, ValueError], Exception]) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for each line of ``lines`` that is not blank, numbered from 1; a line that is not
    JSON raises ``bad_json(line number, the JSON error)``."""
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as e:
            raise bad_json(n, e) from None
        yield n, value


def read_jsonl_latest(path: str | Path, key: str) -> list[dict[str, Any]]:
    """The records of the JSONL file ``path``, the last one per value of ``key``, sorted by that value (blank lines
    skipped). A line that is not a JSON object with ``key`` raises ValueError naming the file and the line."""
    by_key: dict[Any, dict[str, Any]] = {}

    def bad(n: int, e: ValueError) -> Exception:
        return ValueError(f"{path}, line {n}: not valid JSON ({e}); each line is one JSON object")

    with open(path, encoding="utf-8") as f:
        for n, rec in jsonl_records(f, bad):
            if not isinstance(rec, dict) or key not in rec:
                raise ValueError(f"{path}, line {n}: expected a JSON object with a {key!r} field")
            by_key[rec[key]] = rec
    return [by_key[k] for k in sorted(by_key)]


def write_state(path: str | Path, state: Any) -> None:
    """A callback's state (a JSON value) written atomically to ``path``, keys sorted: what a checkpoint keeps so
    that a resumed run goes on where it stopped."""
    atomic_write_bytes(path, json.dumps(state, sort_keys=True, indent=1).encode("utf-8"))


def read_state(path: str | Path) -> Any:
    """The state :func:`write_state` wrote to ``path``; None where there is no such file. A file that is not JSON
    (damaged, or cut short by something other than the toolkit) raises ValueError naming it."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise ValueError(f"{path}: not valid JSON ({e}): this checkpoint's state is damaged; resume from another "
                         "checkpoint, or start a new run") from None
