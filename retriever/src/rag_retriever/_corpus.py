"""The passages an index holds, streamed in blocks: every distinct paragraph (title + text) of a dataset file, read
through the dataset reader (:mod:`._datasets`) (each exact (title, text) pair once, in first-seen order), then every line of a user
corpus as it is given (JSONL of ``{"title", "text"}`` or, as FlashRAG and Search-R1 ship Wikipedia,
``{"id", "contents"}``): one passage per line, in line order, keeping the line's own ``id`` and the exact
``contents`` string, so a server returns what Search-R1's own server returns over the same corpus, and a FAISS
index made over the same file lines up with it vector for vector. And the questions of the dataset file, whose
rankings the index stores.

Nothing here holds the whole corpus: :func:`passage_blocks` yields :class:`Passages` of at most ``block``
passages; the dataset's paragraphs are deduplicated with a dictionary the size of the dataset file, never of the
corpus.

>>> split_contents('"Paris"\\nParis is the capital of France.')
('Paris', 'Paris is the capital of France.')
>>> split_contents("no title line")
('', 'no title line')
"""

from __future__ import annotations

import json
import logging
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rag_plumbing._protocol import split_contents

from ._datasets import dataset_reader
from .errors import DataError, SkipReport

log = logging.getLogger(__name__)

#: Passages per block (what a builder holds at once).
BLOCK = 1 << 16


@dataclass
class Passages:
    """A block of passages: title and text (what BM25 and the gold test read; a quoted title loses its quotes),
    origin (``dataset`` | ``corpus``), the corpus line's own id (None: the index numbers it) and the part of the
    line's ``contents`` before the text (None: ``title + "\\n"``), so ``contents = prefix + text`` byte for byte."""

    titles: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    origins: list[str] = field(default_factory=list)
    ids: list[str | None] = field(default_factory=list)
    prefixes: list[str | None] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.titles)

    def add(self, title: str, text: str, origin: str, pid: str | None = None, prefix: str | None = None) -> None:
        self.titles.append(title)
        self.texts.append(text)
        self.origins.append(origin)
        self.ids.append(pid)
        self.prefixes.append(prefix)

    def contents(self) -> list[str]:
        """Each passage as its corpus line has it (``prefix + text``; ``title + "\\n" + text`` when it has no
        line of its own)."""
        return [(t.replace("\n", " ") + "\n" if p is None else p) + x
                for t, x, p in zip(self.titles, self.texts, self.prefixes, strict=True)]


@dataclass
class Sources:
    """What reading the sources found besides the passages: the dataset's questions (ids, texts, the passage ids
    of their gold paragraphs), counts, and what ``on_error="skip"`` left out."""

    dataset: str | None = None
    q_ids: list[str] = field(default_factory=list)
    q_texts: list[str] = field(default_factory=list)
    q_gold: list[list[int]] = field(default_factory=list)
    paragraphs: int = 0  # dataset paragraphs before deduplication
    distinct: int = 0  # the dataset's distinct paragraphs (the first passages of the index)
    corpus_lines: int = 0
    report: SkipReport = field(default_factory=SkipReport)
    corpus_report: SkipReport = field(default_factory=SkipReport)  # the corpus's lines that on_error="skip" left out

    @property
    def passages(self) -> int:
        return self.distinct + self.corpus_lines


def passage_blocks(dataset: str | None, input: str | None, corpus: str | None, *, on_error: str = "raise",
                   block: int = BLOCK, found: Sources | None = None, bar: Any = None,
                   task: Any = None) -> Iterator[Passages]:
    """The index's passages in order, in blocks of at most ``block``: the dataset's distinct paragraphs, then the
    corpus's lines; ``found`` (a :class:`Sources`) gets the questions and the counts as they are read."""
    found = found if found is not None else Sources()
    out = Passages()
    if dataset and input:
        seen: dict[tuple[str, str], int] = {}
        stream = dataset_reader().read(dataset, input, on_error=on_error, report=found.report)
        found.dataset = getattr(stream, "dataset", dataset)
        q_seen: set[str] = set()
        for ex in stream:
            gold = []
            for d in ex.documents:
                found.paragraphs += 1
                key = (d.title, d.text)
                pid = seen.get(key)
                if pid is None:
                    pid = seen[key] = len(seen)
                    out.add(d.title, d.text, "dataset")
                    if len(out) >= block:
                        yield _advance(out, bar, task)
                        out = Passages()
                if d.is_gold:
                    gold.append(pid)
            if ex.id not in q_seen:
                q_seen.add(ex.id)
                found.q_ids.append(ex.id)
                found.q_texts.append(ex.question)
                found.q_gold.append(gold)
        found.distinct = len(seen)
        del seen
    if corpus:
        for title, text, pid, prefix in read_corpus(corpus, on_error=on_error, report=found.corpus_report):
            found.corpus_lines += 1
            out.add(title, text, "corpus", pid, prefix)
            if len(out) >= block:
                yield _advance(out, bar, task)
                out = Passages()
    if len(out):
        yield _advance(out, bar, task)


def _advance(block: Passages, bar: Any, task: Any) -> Passages:
    if bar is not None:
        bar.advance(task, len(block))
    return block


def _bad(path: Path, line: int | None, message: str, kind: str, hint: str, field: str | None = None) -> DataError:
    e = DataError(message, kind=kind, path=str(path), record=None if line is None else f"line {line}", field=field)
    e.hint = hint
    return e


_SHAPE = ('each line of --corpus is one JSON object, {"title": "...", "text": "..."} or {"id": "...", "contents": '
          '"title\\ntext"}')


def _line_id(rec: dict[str, Any], p: Path, n: int) -> str | None:
    rid = rec.get("id")
    if rid is None:
        return None
    if isinstance(rid, bool) or not isinstance(rid, (str, int)):
        raise _bad(p, n, f"a {type(rid).__name__}, not a string or an integer", "wrong_type", _SHAPE, "id")
    return str(rid)


def _decode(raw: bytes, p: Path, n: int) -> Any:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _bad(p, n, f"not UTF-8 (byte {raw[e.start:e.start + 1]!r} at column {e.start + 1})", "invalid_utf8",
                   "save the corpus as UTF-8 JSONL (one object per line)") from None
    try:
        rec = json.loads(text)
    except RecursionError:
        raise _bad(p, n, "nested too deeply to read", "invalid_json", _SHAPE) from None
    except json.JSONDecodeError as e:
        raise _bad(p, n, f"not JSON ({e.msg}, column {e.colno})", "invalid_json", _SHAPE) from None
    return rec


def _clean(value: str, p: Path, n: int, key: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate escape (\ud800): no UTF-8 text can hold it
        raise _bad(p, n, "holds a lone surrogate escape (such as \\ud800), which is no character", "invalid_utf8",
                   "fix or remove that line's escape", key) from None
    return value


class _SeenIds:
    """Which line first used each corpus id, and a 32-bit hash of its passage, in little memory: numeric ids (as
    Search-R1's wiki-18 has, "0" to "21015323") in arrays indexed by the number (8 bytes a line: 170 MB for
    wiki-18's 21M lines), any other id in a dictionary. A later line with the same id and another passage is a
    reused id; the same passage again is not (it is indexed twice, as Search-R1's server would return it)."""

    def __init__(self) -> None:
        self.line = array("I")  # 0: not seen
        self.digest = array("I")
        self.other: dict[str, tuple[int, int]] = {}

    def check(self, pid: str, passage: tuple[str, str, str | None], n: int) -> int | None:
        """The line that used ``pid`` before with another passage (None: its first use, or the same passage)."""
        digest = hash(passage) & 0xFFFFFFFF  # str hashes: this process's, cached on the strings
        if pid.isdecimal() and len(pid) < 10 and (pid[0] != "0" or pid == "0"):
            k = int(pid)
            if k < (n << 2) + (1 << 20):  # dense enough for an array
                line = self.line
                if k >= len(line):
                    more = max(k + 1, len(line) * 5 // 4, 1 << 16) - len(line)
                    line.extend(array("I", bytes(4 * more)))
                    self.digest.extend(array("I", bytes(4 * more)))
                first = line[k]
                if not first:
                    line[k] = n
                    self.digest[k] = digest
                    return None
                return None if self.digest[k] == digest else first
        first, was = self.other.setdefault(pid, (n, digest))
        return None if first == n or was == digest else first


def read_corpus(path: str | Path, *, on_error: str = "raise",
                report: SkipReport | None = None) -> Iterator[tuple[str, str, str | None, str | None]]:
    """(title, text, id, prefix) per line of a JSONL corpus (see :class:`Passages`). A line is ``{"title": str,
    "text": str}`` (an ``id`` kept when it has one), or ``{"id": ..., "contents": str}`` (FlashRAG's and Search-R1's
    layout: the title is the first line of ``contents``, :func:`split_contents`); a line with a ``contents`` and no
    ``text`` is read the second way. Each line on its own, so one file may mix them. Blank lines are skipped. A
    line that is not such an object, is not UTF-8, whose text is empty, or whose id an earlier line used with other
    contents is a bad record: an error naming the file, the line and the field, or with ``on_error="skip"`` left
    out and counted in ``report``. A compressed file, and a file with no passage at all, are errors whatever
    ``on_error`` says."""
    report = report if report is not None else SkipReport()
    seen = _SeenIds()
    skipped = SkipReport()
    for n, line in _corpus_lines(Path(path)):
        try:
            title, text, pid, prefix = line()
            if pid is not None:
                first = seen.check(pid, (title, text, prefix), n)
                if first is not None:
                    raise _bad(Path(path), n, f"the id {pid!r} is already used by line {first}, another passage; "
                               "ids must be unique", "conflicting_id",
                               "give one of the two lines another id, or remove it (or pass --on-error skip)", "id")
        except DataError as e:
            if on_error != "skip":
                raise
            report.add(e)
            skipped.add(e)
            continue
        yield title, text, pid, prefix
    if skipped.total:
        log.warning("%s: %s", path, skipped.summary().replace("record(s)", "line(s)"))


def _corpus_lines(p: Path) -> Iterator[tuple[int, Any]]:
    """(line number, a function that reads the line or raises its DataError) per non-blank line of ``p``; errors of
    the whole file (a folder, a compressed file, no passage) are raised here."""
    if p.is_dir():
        raise _bad(p, None, "a directory, not a file", "corpus", "--corpus takes a JSONL file: " + _SHAPE)
    if not p.exists():
        raise _bad(p, None, "no such file", "corpus", "give the path of a corpus JSONL file: " + _SHAPE)
    with open(p, "rb") as f:
        head = f.read(4)
        if head[:2] == b"\x1f\x8b" or head[:4] in (b"PK\x03\x04", b"BZh9", b"\xfd7zX", b"\x28\xb5\x2f\xfd"):
            raise _bad(p, None, "a compressed file, not JSONL", "corpus",
                       "decompress it first (gzip -d wiki-18.jsonl.gz), then pass the .jsonl")
        f.seek(0)
        any_line = False
        for n, raw in enumerate(f, 1):
            if n == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            if not raw.strip():
                continue
            any_line = True
            yield n, lambda raw=raw, n=n: _read_line(raw, p, n)
    if not any_line:
        raise _bad(p, None, "no passage (the file is empty or holds only blank lines)", "empty_corpus",
                   "pass a corpus with at least one line, or leave --corpus out")


def check_corpus(path: str | Path) -> None:
    """Read ``path`` up to its first passage, as the index build reads it: a file that is missing, a folder,
    compressed, empty, not UTF-8 or whose first line is not a passage is its :class:`DataError` at once (before
    an engine is imported or anything is written; a later line's error comes when the build reaches it)."""
    for _, read in _corpus_lines(Path(path)):
        read()
        return


def _read_line(raw: bytes, p: Path, n: int) -> tuple[str, str, str | None, str | None]:
    """One corpus line as (title, text, id, prefix), or its DataError."""
    rec = _decode(raw, p, n)
    if not isinstance(rec, dict):
        raise _bad(p, n, f"a JSON {type(rec).__name__}, not an object", "wrong_type", _SHAPE)
    if "text" not in rec and ("contents" in rec or ("id" in rec and "title" not in rec)):
        if "contents" not in rec:
            raise _bad(p, n, "missing", "missing_field", _SHAPE, "contents")
        contents = rec["contents"]
        if not isinstance(contents, str):
            raise _bad(p, n, f"a {type(contents).__name__}, not a string", "wrong_type", _SHAPE, "contents")
        contents = _clean(contents, p, n, "contents")
        title, text = split_contents(contents)
        if not text.strip():
            raise _bad(p, n, "no text after the title line" if "\n" in contents else "empty", "empty_text",
                       "remove passages without text from the corpus", "contents")
        prefix = contents[:len(contents) - len(text)]
        return title, text, _line_id(rec, p, n), None if prefix == f"{title}\n" else prefix
    for key in ("title", "text"):
        if key not in rec:
            raise _bad(p, n, "missing", "missing_field", _SHAPE, key)
        if not isinstance(rec[key], str):
            raise _bad(p, n, f"a {type(rec[key]).__name__}, not a string", "wrong_type", _SHAPE, key)
    if not rec["text"].strip():
        raise _bad(p, n, "empty", "empty_text", "remove passages without text from the corpus", "text")
    return _clean(rec["title"], p, n, "title"), _clean(rec["text"], p, n, "text"), _line_id(rec, p, n), None
