"""The passages an index holds: every distinct paragraph (title + text) of a dataset file, read through the
toolkit's loader, then the passages of an optional user corpus (JSONL of ``{"title", "text"}`` or, as FlashRAG and
Search-R1 ship Wikipedia, ``{"id", "contents"}``), each exact (title, text) pair once, in first-seen order; and the
questions of the dataset file, whose rankings the index stores."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._progress import track
from ..errors import DataError, SkipReport
from ..loaders import load_examples


@dataclass
class Collected:
    titles: list[str] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    origins: list[str] = field(default_factory=list)  # "dataset" | "corpus"
    q_ids: list[str] = field(default_factory=list)
    q_texts: list[str] = field(default_factory=list)
    q_gold: list[list[int]] = field(default_factory=list)  # per question, its gold paragraphs' passage ids
    paragraphs: int = 0  # dataset paragraphs before deduplication
    corpus_lines: int = 0
    corpus_duplicates: int = 0
    report: SkipReport = field(default_factory=SkipReport)
    dataset: str = ""

    def __len__(self) -> int:
        return len(self.titles)


def collect(dataset: str, input: str, corpus: str | None = None, *, on_error: str = "raise",
            progress: bool = False) -> Collected:
    """Read the dataset file with its loader and the corpus file, deduplicating exact (title, text) pairs."""
    out = Collected()
    seen: dict[tuple[str, str], int] = {}
    titles, texts, origins = out.titles, out.texts, out.origins
    stream = load_examples(dataset, input, on_error=on_error, report=out.report)
    out.dataset = stream.dataset
    q_seen: set[str] = set()
    for ex in track(stream, f"reading {stream.dataset}", enabled=progress, unit="questions"):
        gold = []
        for d in ex.documents:
            out.paragraphs += 1
            key = (d.title, d.text)
            pid = seen.get(key)
            if pid is None:
                pid = seen[key] = len(titles)
                titles.append(d.title)
                texts.append(d.text)
            if d.is_gold:
                gold.append(pid)
        if ex.id not in q_seen:
            q_seen.add(ex.id)
            out.q_ids.append(ex.id)
            out.q_texts.append(ex.question)
            out.q_gold.append(gold)
    origins.extend(["dataset"] * len(titles))
    if corpus:
        for title, text in track(read_corpus(corpus), "reading corpus", enabled=progress, unit="passages"):
            out.corpus_lines += 1
            key = (title, text)
            if key in seen:
                out.corpus_duplicates += 1
                continue
            seen[key] = len(titles)
            titles.append(title)
            texts.append(text)
            origins.append("corpus")
    return out


def _bad(path: Path, line: int | None, message: str, kind: str, hint: str, field: str | None = None) -> DataError:
    e = DataError(message, kind=kind, path=str(path), record=None if line is None else f"line {line}", field=field)
    e.hint = hint
    return e


_SHAPE = ('each line of --corpus is one JSON object, {"title": "...", "text": "..."} or {"id": "...", "contents": '
          '"title\\ntext"}')


def split_contents(contents: str) -> tuple[str, str]:
    """A ``contents`` string of the FlashRAG / Search-R1 layout as (title, text): the title is its first line, the
    text the rest (no newline: no title, all text); a title in double quotes, as in Search-R1's wiki-18 dump
    (``"\\"Title\\"\\ntext"``), loses one pair of them."""
    title, sep, text = contents.partition("\n")
    if not sep:
        return "", contents
    if len(title) >= 2 and title[0] == title[-1] == '"':
        title = title[1:-1]
    return title, text


def read_corpus(path: str | Path) -> Iterator[tuple[str, str]]:
    """(title, text) per line of a JSONL corpus. A line is ``{"title": str, "text": str}``, or ``{"id": ...,
    "contents": str}`` (FlashRAG's and Search-R1's layout: title and text in one string, split at the first
    newline by :func:`_title_and_text`; the id is not kept, passages get the index's own ids); a line with a
    ``contents`` and no ``text`` is read the second way. Each line on its own, so one file may mix them. A line
    that is not such an object, or whose text is empty, is an error naming the file, the line and the field."""
    p = Path(path)
    if p.is_dir():
        raise _bad(p, None, "a directory, not a file", "corpus", "--corpus takes a JSONL file: " + _SHAPE)
    with open(p, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec: Any = json.loads(line)
            except json.JSONDecodeError as e:
                raise _bad(p, n, f"not JSON ({e.msg})", "invalid_json", _SHAPE) from None
            if not isinstance(rec, dict):
                raise _bad(p, n, f"a JSON {type(rec).__name__}, not an object", "wrong_type", _SHAPE)
            if "text" not in rec and ("contents" in rec or ("id" in rec and "title" not in rec)):
                if "contents" not in rec:
                    raise _bad(p, n, "missing", "missing_field", _SHAPE, "contents")
                contents = rec["contents"]
                if not isinstance(contents, str):
                    raise _bad(p, n, f"a {type(contents).__name__}, not a string", "wrong_type", _SHAPE, "contents")
                title, text = split_contents(contents)
                if not text.strip():
                    raise _bad(p, n, "no text after the title line" if "\n" in contents else "empty", "empty_text",
                               "remove passages without text from the corpus", "contents")
                yield title, text
                continue
            for key in ("title", "text"):
                if key not in rec:
                    raise _bad(p, n, "missing", "missing_field", _SHAPE, key)
                if not isinstance(rec[key], str):
                    raise _bad(p, n, f"a {type(rec[key]).__name__}, not a string", "wrong_type", _SHAPE, key)
            if not rec["text"].strip():
                raise _bad(p, n, "empty", "empty_text", "remove passages without text from the corpus", "text")
            yield rec["title"], rec["text"]
