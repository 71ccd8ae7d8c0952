"""Streaming readers for the file layouts users have: a JSON list, JSON Lines, or Parquet.

Each reader yields ``(where, record)``: ``where`` says where the record is ("line 12", "index 5", "row 7"),
so errors can name it. Nothing is skipped here silently: unreadable input raises :class:`DataError`, or, when a
``skip`` callback is given, is reported through it and reading goes on where that is possible.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from .._plumbing import gc_paused
from ..errors import DataError, InputIsADirectoryError

Raw = tuple[str, Any]
SkipFn = Callable[[DataError], None]

PARQUET_BATCH_ROWS = 2048
BOM = b"\xef\xbb\xbf"


def guess_split(path: Path) -> str | None:
    """``train`` / ``dev`` / ``test`` from the words of a file name such as ``hotpot_dev_distractor_v1.json``
    (``validation``/``valid``/``val`` count as ``dev``), or None when no word says."""
    words = set(re.split(r"[^a-z0-9]+", path.name.lower()))
    for split, names in (("train", {"train"}), ("dev", {"dev", "validation", "valid", "val"}), ("test", {"test"})):
        if words & names:
            return split
    return None


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
    with gc_paused():
        return orjson.loads(data)


def iter_json_list(path: Path, skip: SkipFn | None = None) -> Iterator[Raw]:
    """Parse a JSON list at C speed, then hand records out one by one, releasing each as it goes so a consumer
    that does not keep them holds no more memory than the parse itself.

    A file that does not parse as a whole (truncated, invalid JSON or UTF-8 in a record, NaN, nesting too deep,
    content after the list) is read again record by record (:func:`_json_list_by_record`), so the error names the
    record; that path runs only on bad files."""
    data = path.read_bytes()
    base = 0
    if data.startswith(BOM):
        data = data[len(BOM):]
        base = len(BOM)
    try:
        records = _parse_whole(data)
    except orjson.JSONDecodeError:
        records = None
    if records is None:
        text = data.decode("utf-8", errors="surrogateescape")  # every byte kept: bad ones become U+DC80..U+DCFF
        del data
        yield from _json_list_by_record(path, text, base, skip)
        return
    del data
    if not isinstance(records, list):
        raise DataError("expected a JSON list of records", kind="wrong_type", path=str(path))
    for i in range(len(records)):
        rec = records[i]
        records[i] = None
        yield f"index {i}", rec


# ------------------------------------------------------------------ the record-by-record path (bad files only)

_NEXT_RECORD = re.compile(r",\s*\{")
_ID_VALUE = re.compile(r'"_?id"\s*:\s*"((?:[^"\\]|\\.){1,200})"')
_BAD_BYTE = re.compile("[\udc80-\udcff]")  # what surrogateescape makes of a byte that is not UTF-8
_SURROGATE = re.compile("[\ud800-\udfff]")


class _Locator:
    """Line, column and byte offset of character positions in a text decoded with ``surrogateescape``;
    positions asked for in increasing order cost O(file) in all."""

    def __init__(self, text: str, base: int) -> None:
        self.text, self.base = text, base
        self.c, self.line, self.line_start, self.byte = 0, 1, 0, base

    def __call__(self, pos: int) -> str:
        if pos < self.c:
            self.c, self.line, self.line_start, self.byte = 0, 1, 0, self.base
        seg = self.text[self.c:pos]
        nl = seg.count("\n")
        if nl:
            self.line += nl
            self.line_start = self.c + seg.rfind("\n") + 1
        self.byte += len(seg.encode("utf-8", "surrogateescape"))
        self.c = pos
        return f"line {self.line}, column {pos - self.line_start + 1} (byte offset {self.byte})"


def _find_path(obj: Any, pred: Callable[[Any], bool], prefix: str = "") -> str | None:
    """The dotted path (``context[3][1][0]``, ``paragraphs[2].title``) of the first value (or key) where
    ``pred`` holds, or None."""
    stack: list[tuple[str, Any]] = [(prefix, obj)]
    while stack:
        at, x = stack.pop()
        if pred(x):
            return at or None
        if isinstance(x, dict):
            items = []
            for k, v in x.items():
                name = f"{at}.{k}" if at else str(k)
                if pred(k):
                    return name
                items.append((name, v))
            stack.extend(reversed(items))
        elif isinstance(x, list):
            stack.extend(reversed([(f"{at}[{j}]", v) for j, v in enumerate(x)]))
    return None


def _has_bad_byte(x: Any) -> bool:
    return isinstance(x, str) and _BAD_BYTE.search(x) is not None


def _has_lone_surrogate(x: Any) -> bool:
    return isinstance(x, str) and _SURROGATE.search(x) is not None


def _is_not_finite(x: Any) -> bool:
    return isinstance(x, float) and (x != x or x in (float("inf"), float("-inf")))


def _record_id(obj: Any, text: str) -> str | None:
    """The record's id: from the decoded record where there is one, else the first ``"_id"``/``"id"`` string in
    its text."""
    if isinstance(obj, dict):
        for k in ("_id", "id"):
            v = obj.get(k)
            if isinstance(v, str) and v.strip():
                return v.encode("utf-8", "replace").decode("utf-8")
    m = _ID_VALUE.search(text)
    return m.group(1) if m else None


def _diagnose(raw: bytes, text: str, exc: orjson.JSONDecodeError, obj: Any = None) -> tuple[str, str, str | None,
                                                                                           str | None, int]:
    """Why orjson refused one record: ``(kind, message, field, id, char offset in text)``. ``raw`` is the
    record's bytes, ``text`` the same decoded with ``surrogateescape``, ``obj`` the record as the lenient
    ``json`` decoder read it (None: decoded here, where possible)."""
    if obj is None:
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError):
            obj = None
    rid = _record_id(obj, text[:4096])
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as u:
        at = len(raw[:u.start].decode("utf-8", "surrogateescape"))
        field = _find_path(obj, _has_bad_byte) if obj is not None else None
        return ("invalid_utf8", f"invalid UTF-8 (byte 0x{raw[u.start]:02x})", field, rid, at)
    if obj is not None:
        field = _find_path(obj, _is_not_finite)
        if field is not None:
            return ("invalid_json", "NaN and Infinity are not valid JSON (use null or a number)", field, rid,
                    exc.pos if isinstance(exc.pos, int) else 0)
    msg = exc.msg
    field = None
    if "depth" in msg or "recursion" in msg:
        msg = "nested too deeply (more than 1024 levels)"
    elif "surrogate" in msg:
        msg = f"a \\u escape that is half a UTF-16 surrogate pair ({msg})"
        field = _find_path(obj, _has_lone_surrogate) if obj is not None else None
    else:
        msg = f"invalid JSON ({msg})"
    return ("invalid_json", msg, field, rid, exc.pos if isinstance(exc.pos, int) else 0)


def _json_list_by_record(path: Path, text: str, base: int, skip: SkipFn | None) -> Iterator[Raw]:
    """Read a JSON list that does not parse as a whole (``text``: the file decoded with ``surrogateescape``)
    record by record, with orjson's rules for each record (so a record is accepted here exactly when it would be
    in a file that parses). The first bad record raises a :class:`DataError` naming its index, id, field and
    position; with ``skip`` it is reported and reading goes on at the next record (found by :func:`_resync`
    where the bad one has no end). Slower than the fast path; only damaged files take it."""
    where = _Locator(text, base)
    decoder = json.JSONDecoder()
    file = str(path)

    def bad(message: str, kind: str, record: str | None, field: str | None = None) -> None:
        err = DataError(message, kind=kind, path=file, record=record, field=field)
        if skip is None:
            raise err
        skip(err)

    n = len(text)
    pos = text.find("[") + 1
    i = 0  # index of the next record
    expect_value = True  # after '[' or ','
    ref_keys: frozenset[str] | None = None
    while True:
        while pos < n and text[pos] in " \t\r\n":
            pos += 1
        if pos >= n:
            bad(f"the file ends before the JSON list is closed (truncated file?) at {where(pos)}", "invalid_json",
                f"index {i}")
            return
        c = text[pos]
        if c == "]":
            if expect_value and i:
                bad(f"a comma before ']' at {where(pos)}", "invalid_json", f"after index {i - 1}")
            pos += 1
            at = n - len(text[pos:].lstrip(" \t\r\n"))
            if at < n:
                # a ']' with records after it: a list nested in a broken record, closed early (skip: go on there)
                resume = _resync(decoder, text, pos, ref_keys) if skip is not None else None
                if resume is not None:
                    bad(f"a ']' before the end of the JSON list at {where(pos - 1)}; skipped up to {where(resume)}",
                        "invalid_json", f"after index {i - 1}" if i else None)
                    pos, expect_value = resume, True
                    continue
                bad(f"unexpected content after the end of the JSON list at {where(at)} ({text[at:at + 20]!r}); "
                    "every record before it was read", "invalid_json", f"after index {i - 1}" if i else None)
            return
        if not expect_value:
            if c == ",":
                pos += 1
                expect_value = True
                continue
            bad(f"expected ',' or ']' after the record, found {text[pos:pos + 20]!r} at {where(pos)}",
                "invalid_json", f"after index {i - 1}")
            expect_value = True
            continue
        if c == ",":
            bad(f"an extra comma at {where(pos)}", "invalid_json", f"index {i}")
            pos += 1
            continue
        try:
            obj, end = decoder.raw_decode(text, pos)
        except (json.JSONDecodeError, RecursionError) as e:
            # no end to this record: report it, then go on at the next place where a whole record starts
            errpos = e.pos if isinstance(e, json.JSONDecodeError) else pos
            if isinstance(e, RecursionError):
                kind, msg = "invalid_json", "nested too deeply (more than about 1000 levels)"
            elif errpos < n and _BAD_BYTE.match(text, errpos):
                kind, msg = "invalid_utf8", f"invalid UTF-8 (byte 0x{ord(text[errpos]) - 0xDC00:02x})"
            else:
                kind, msg = "invalid_json", f"invalid JSON ({_json_msg(e.msg)})"  # type: ignore[union-attr]
            resume = _resync(decoder, text, pos, ref_keys) if skip is not None else None
            rid = _record_id(None, text[pos:errpos]) or _record_id(None, text[pos:min(resume or n, pos + (1 << 20))])
            if e.msg.startswith("Unterminated string") if isinstance(e, json.JSONDecodeError) else False:
                msg = "the file ends inside this record (truncated file?)"
            elif errpos >= len(text.rstrip()):
                msg = f"the file ends inside this record (truncated file?): {msg}"
            lost = "" if skip is None else "; the rest of the file is lost" if resume is None else \
                f"; skipped up to {where(resume)}"
            record = f"index {i} (id {rid})" if rid else f"index {i}"
            bad(f"{msg} at {where(errpos)}{lost}", kind, record)
            if resume is None:
                return
            pos = resume
            i += 1
            expect_value = True
            continue
        raw = text[pos:end].encode("utf-8", "surrogateescape")
        try:
            rec = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            kind, msg, field, rid, at = _diagnose(raw, text[pos:end], e, obj)
            record = f"index {i} (id {rid})" if rid else f"index {i}"
            bad(f"{msg} at {where(pos + at)}", kind, record, field)
        else:
            if ref_keys is None and isinstance(rec, dict):
                ref_keys = frozenset(rec)
            yield f"index {i}", rec
        pos = end
        i += 1
        expect_value = False


def _json_msg(msg: str) -> str:
    """The json module's parse error as a phrase: ``Expecting ',' delimiter`` -> ``expecting ',' delimiter``."""
    return msg[:1].lower() + msg[1:]


def _looks_like_record(obj: dict) -> bool:
    """Before any good record was read: a question record of any of the datasets has a ``question`` and a list or
    object of passages (``context``, ``paragraphs``); the objects nested in a record (a paragraph, a MuSiQue
    decomposition step with its own ``question``) have no list or object values."""
    return "question" in obj and any(isinstance(v, (list, dict)) for v in obj.values())


def _resync(decoder: json.JSONDecoder, text: str, pos: int, ref_keys: frozenset[str] | None) -> int | None:
    """The start of the next complete record after ``pos``: a ``{`` after a comma that decodes to an object
    followed by ``,`` or ``]`` and, once a good record has been read, sharing half its keys (so a paragraph object
    nested inside the broken record is not taken for a record)."""
    for m in _NEXT_RECORD.finditer(text, pos):
        at = m.end() - 1
        try:
            obj, end = decoder.raw_decode(text, at)
        except (json.JSONDecodeError, RecursionError):
            continue
        rest = text[end:end + 64].lstrip()
        if not (isinstance(obj, dict) and rest[:1] in (",", "]")):
            continue
        if ref_keys is not None and len(ref_keys & obj.keys()) * 2 < len(ref_keys):
            continue
        if ref_keys is None and not _looks_like_record(obj):
            continue
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
                text = line.decode("utf-8", "surrogateescape")
                kind, msg, field, rid, at = _diagnose(line, text, e)
                if kind == "invalid_json" and not line.endswith(b"\n") and "unexpected end" in msg:
                    msg = f"the file ends inside this record (truncated file?): {msg}"  # the last line, cut short
                record = f"line {lineno} (id {rid})" if rid else f"line {lineno}"
                err = DataError(f"{msg} at column {at + 1}", kind=kind, path=str(path), record=record, field=field)
                if skip is None:
                    raise err from None
                skip(err)
                continue
            yield f"line {lineno}", rec


def iter_parquet(path: Path, skip: SkipFn | None = None) -> Iterator[Raw]:
    """Rows of a Parquet file, batch by batch. A row group that cannot be read (a corrupt page) raises
    :class:`DataError` naming its rows; with ``skip`` it is reported as one ``invalid_parquet`` skip and reading
    goes on with the next row group."""
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises several types for corrupt files
        raise DataError(f"unreadable Parquet file ({_one_line(e)})", kind="invalid_parquet", path=str(path)) from None
    row = 0
    for g in range(pf.metadata.num_row_groups):
        rows = pf.metadata.row_group(g).num_rows
        first = row
        try:
            for batch in pf.iter_batches(batch_size=PARQUET_BATCH_ROWS, row_groups=[g]):
                for rec in batch.to_pylist():
                    yield f"row {row}", rec
                    row += 1
        except Exception as e:  # corrupt page or column chunk
            err = DataError(f"row group {g} (rows {first}..{first + rows - 1}) cannot be read ({_one_line(e)}); "
                            f"{first + rows - row} row(s) lost", kind="invalid_parquet", path=str(path),
                            record=f"row {row}")
            if skip is None:
                raise err from None
            skip(err)
            row = first + rows


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())[:200]


READERS = {"json": iter_json_list, "jsonl": iter_jsonl, "parquet": iter_parquet}


def iter_records(path: str | Path, skip: SkipFn | None = None) -> Iterator[Raw]:
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    if path.is_dir():
        raise InputIsADirectoryError(f"{path}: is a directory; pass one data file (JSON, JSONL or Parquet), "
                                     "not the folder that holds it")
    return READERS[detect_format(path)](path, skip)
