"""Streaming readers for the file layouts users have: a JSON list, JSON Lines, or Parquet.

Each reader yields ``(where, record)``: ``where`` says where the record is ("line 12", "index 5", "row 7"),
so errors can name it. Nothing is skipped here silently: unreadable input raises :class:`DataError`, or, when a
``skip`` callback is given, is reported through it and reading goes on where that is possible.
"""

from __future__ import annotations

import gc
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from ..errors import DataError

Raw = tuple[str, Any]
SkipFn = Callable[[DataError], None]

PARQUET_BATCH_ROWS = 2048
BOM = b"\xef\xbb\xbf"


def detect_format(path: Path) -> str:
    """``"parquet"``, ``"json"`` (one JSON list) or ``"jsonl"``; by magic bytes first, then the first character."""
    with open(path, "rb") as f:
        head = f.read(4)
        if head == b"PAR1":
            return "parquet"
        f.seek(0)
        chunk = f.read(1 << 16)
    text = chunk.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not text:
        raise DataError("the file is empty", kind="invalid_json", path=str(path))
    if text[:1] == b"[":
        return "json"
    if text[:1] == b"{":
        return "jsonl"
    raise DataError(
        f"not JSON, JSON Lines or Parquet (starts with {text[:20]!r})", kind="invalid_json", path=str(path)
    )


def _line_col(data: bytes, pos: int) -> str:
    line = data.count(b"\n", 0, pos) + 1
    col = pos - (data.rfind(b"\n", 0, pos) + 1) + 1
    return f"line {line}, column {col}"


def _parse_whole(data: bytes) -> Any:
    """orjson.loads with the cyclic GC paused: the parse makes millions of acyclic objects, and the full
    collections their allocation keeps triggering would otherwise dominate it."""
    was = gc.isenabled()
    gc.disable()
    try:
        return orjson.loads(data)
    finally:
        if was:
            gc.enable()


def iter_json_list(path: Path, skip: SkipFn | None = None) -> Iterator[Raw]:
    """Parse a JSON list at C speed, then hand records out one by one, releasing each as it goes so a consumer
    that does not keep them holds no more memory than the parse itself."""
    data = path.read_bytes()
    if data.startswith(BOM):
        data = data[len(BOM):]
    try:
        records = _parse_whole(data)
    except orjson.JSONDecodeError as e:
        pos = getattr(e, "pos", None)
        where = _line_col(data, pos) if isinstance(pos, int) else "unknown position"
        err = DataError(f"invalid JSON at {where}: {e.msg if hasattr(e, 'msg') else e}", kind="invalid_json",
                        path=str(path))
        if skip is None:
            raise err from None
        records = None
    if records is None:  # recover every complete record before the break, then report the unreadable rest
        yield from _recover_json_list(path, data.decode("utf-8", errors="replace"), skip)  # type: ignore[arg-type]
        return
    del data
    if not isinstance(records, list):
        raise DataError("expected a JSON list of records", kind="wrong_type", path=str(path))
    for i in range(len(records)):
        rec = records[i]
        records[i] = None
        yield f"index {i}", rec


_NEXT_RECORD = re.compile(r",\s*\{")


def _recover_json_list(path: Path, text: str, skip: SkipFn) -> Iterator[Raw]:
    """Read a JSON list that does not parse as a whole record by record. At a record that does not parse, skip
    forward to the next place where a complete record starts (a ``{`` after a comma that decodes to an object
    followed by ``,`` or ``]``), report the unreadable span as one ``invalid_json`` skip, and go on."""
    decoder = json.JSONDecoder()
    start = text.find("[")
    pos = start + 1 if start >= 0 else 0
    n = len(text)
    i = 0
    while True:
        while pos < n and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= n:
            skip(DataError("the JSON list is not closed (truncated file?)", kind="invalid_json", path=str(path),
                           record=f"index {i}"))
            return
        if text[pos] == "]":
            return
        try:
            rec, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as e:
            resume = _resync(decoder, text, pos)
            lost = f"characters {pos}..{resume if resume is not None else n}"
            skip(DataError(f"invalid JSON ({e.msg}) at line {e.lineno}, column {e.colno}; skipped {lost}"
                           + ("" if resume is not None else " (the rest of the file)"), kind="invalid_json",
                           path=str(path), record=f"index {i}"))
            if resume is None:
                return
            pos = resume
            i += 1
            continue
        yield f"index {i}", rec
        pos = end
        i += 1


def _resync(decoder: json.JSONDecoder, text: str, pos: int) -> int | None:
    for m in _NEXT_RECORD.finditer(text, pos):
        at = m.end() - 1
        try:
            obj, end = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            continue
        rest = text[end:end + 64].lstrip()
        if isinstance(obj, dict) and rest[:1] in (",", "]"):
            return at
    return None


def iter_jsonl(path: Path, skip: SkipFn | None = None) -> Iterator[Raw]:
    loads = orjson.loads
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            if lineno == 1 and line.startswith(BOM):
                line = line[len(BOM):]
            if not line.strip():
                continue
            try:
                rec = loads(line)
            except orjson.JSONDecodeError as e:
                err = DataError(f"invalid JSON ({e})", kind="invalid_json", path=str(path), record=f"line {lineno}")
                if skip is None:
                    raise err from None
                skip(err)
                continue
            yield f"line {lineno}", rec


def iter_parquet(path: Path, skip: SkipFn | None = None) -> Iterator[Raw]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises several types for corrupt files
        raise DataError(f"unreadable Parquet file ({e})", kind="invalid_parquet", path=str(path)) from None
    row = 0
    for batch in pf.iter_batches(batch_size=PARQUET_BATCH_ROWS):
        for rec in batch.to_pylist():
            yield f"row {row}", rec
            row += 1


READERS = {"json": iter_json_list, "jsonl": iter_jsonl, "parquet": iter_parquet}


def iter_records(path: str | Path, skip: SkipFn | None = None) -> Iterator[Raw]:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if path.is_dir():
        raise IsADirectoryError(f"{path}: is a directory; pass one data file (JSON, JSONL or Parquet)")
    return READERS[detect_format(path)](path, skip)
