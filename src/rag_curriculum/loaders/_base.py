"""What every dataset loader shares: field checks that name the file, record and field; gold resolution from
supporting facts that never decides by title alone; and the loader base class."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, ClassVar

from .._plumbing import stable_id
from ..errors import DataError
from ..records import Document, Example


class RecordContext:
    """Where a record is: its file, its position and (once known) its id; builds the errors, and the notes (a
    record read by a documented rule that a user may not expect: counted, and told once when the file is read)."""

    __slots__ = ("path", "where", "id", "notes")

    def __init__(self, path: str, where: str, notes: dict[str, list[Any]] | None = None) -> None:
        self.path = path
        self.where = where
        self.id: str | None = None
        self.notes = notes

    def _record(self) -> str:
        return f"{self.where} (id {self.id})" if self.id else self.where

    def error(self, message: str, *, kind: str, field: str | None = None) -> DataError:
        return DataError(message, kind=kind, path=self.path, record=self._record(), field=field)

    def note(self, kind: str, message: str) -> None:
        """Count a note of ``kind``; the first one's ``message`` (about this record) is what is told."""
        if self.notes is not None:
            got = self.notes.setdefault(kind, [0, f"{self._record()}: {message}"])
            got[0] += 1


_TYPE_NAMES = {str: "a string", list: "a list", dict: "an object", int: "an integer", bool: "a boolean",
               float: "a number", type(None): "null", tuple: "a list"}


def json_type(value: Any) -> str:
    """What a value is, in JSON's words: ``null``, ``a string``, ``an integer``, ``a number``, ``a list``, ..."""
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def show(value: Any, limit: int = 60) -> str:
    """A short JSON rendering of a value for an error message (``[null, 0]``, as the file has it, not Python's
    ``[None, 0]``)."""
    try:
        s = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        s = repr(value)
    return s if len(s) <= limit else s[:limit - 3] + "..."


def require(rec: Any, key: str, typ: type | tuple[type, ...], ctx: RecordContext, *, field: str | None = None) -> Any:
    """``rec[key]``, checked for presence and type (``field`` is the dotted name used in the error)."""
    name = field or key
    if not isinstance(rec, dict):
        parent = name.rpartition(".")[0] or None
        if parent is None:
            raise ctx.error(f"the record is {json_type(rec)} ({show(rec, 40)}), expected an object",
                            kind="wrong_type")
        raise ctx.error(f"expected an object, got {json_type(rec)}", kind="wrong_type", field=parent)
    try:
        value = rec[key]
    except KeyError:
        raise ctx.error("missing", kind="missing_field", field=name) from None
    if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
        want = typ if isinstance(typ, tuple) else (typ,)
        wants = " or ".join(_TYPE_NAMES.get(t, t.__name__) for t in want)
        raise ctx.error(f"expected {wants}, got {json_type(value)}", kind="wrong_type", field=name)
    return value


def join_sentences(sentences: Sequence[str]) -> str:
    """Join a paragraph's sentences as the source intends: HotpotQA keeps the leading space on each sentence,
    2WikiMultihopQA does not (a space is added only where no whitespace separates two sentences)."""
    if not sentences:
        return ""
    if len(sentences) == 1:
        return sentences[0].strip()
    out = [sentences[0]]
    for s in sentences[1:]:
        if s and not s[0].isspace() and out[-1] and not out[-1][-1].isspace():
            out.append(" ")
        out.append(s)
    return "".join(out).strip()


def require_question(rec: Any, ctx: RecordContext) -> str:
    question = require(rec, "question", str, ctx)
    if not question.strip():
        raise ctx.error("the question is empty", kind="empty_question", field="question")
    return question


def answers_list(answer: str, aliases: Sequence[str] | None, ctx: RecordContext, field: str = "answer") -> list[str]:
    if not answer.strip():
        raise ctx.error("the answer is empty", kind="empty_answer", field=field)
    out = [answer]
    seen = {answer}
    for a in aliases or ():
        if isinstance(a, str) and a.strip() and a not in seen:
            seen.add(a)
            out.append(a)
    return out


def paragraph_texts(sentences: Sequence[Sequence[str]], ctx: RecordContext) -> list[str]:
    """Each paragraph's sentences joined; a sentence that is not a string is a ``wrong_type`` error naming it."""
    try:
        return [join_sentences(s) for s in sentences]
    except (TypeError, AttributeError):
        for j, sents in enumerate(sentences):
            for m, x in enumerate(sents):
                if not isinstance(x, str):
                    raise ctx.error(f"sentence {m} is {json_type(x)}, expected a string", kind="wrong_type",
                                    field=f"context[{j}].sentences") from None
        raise


def resolve_gold(titles: Sequence[str], sentences: Sequence[Sequence[str]], facts: Sequence[tuple[str, int]],
                 ctx: RecordContext) -> tuple[list[bool], dict[str, int]]:
    """Mark gold paragraphs from ``(title, sentence index)`` supporting facts, per paragraph, never by title alone.

    A fact points at the paragraphs that carry its title *and* have that sentence. When a title repeats, the
    sentence index decides; facts with fewer candidate paragraphs are resolved first, and a paragraph already
    chosen is preferred, so two facts on one paragraph make one gold document whatever their order. A fact whose
    title is absent, or whose sentence index is negative, is an error. A fact whose sentence is past the end of
    its paragraph still marks that paragraph when its title names only one (2Wiki's release has such facts: its
    sentence ids count the full Wikipedia paragraph); this is counted as ``sentence_out_of_range``. When the
    title names several paragraphs and none has that sentence, nothing says which is meant: an error.
    """
    gold = [False] * len(titles)
    notes = {"sentence_out_of_range": 0, "ambiguous_supporting_fact": 0}
    if len(set(titles)) == len(titles):  # fast path: every title names one paragraph
        where = {t: i for i, t in enumerate(titles)}
        for title, sent in facts:
            i = where.get(title)
            if i is None or not 0 <= sent < len(sentences[i]):
                break
            gold[i] = True
        else:
            return gold, notes
        gold = [False] * len(titles)
    by_title: dict[str, list[int]] = {}
    for i, t in enumerate(titles):
        by_title.setdefault(t, []).append(i)
    resolved: list[list[int]] = []
    for title, sent in facts:
        cands = by_title.get(title)
        if not cands:
            raise ctx.error(f"supporting fact ({title!r}, {sent}) names a title that is not in the context",
                            kind="dangling_supporting_fact", field="supporting_facts")
        if sent < 0:
            raise ctx.error(f"supporting fact ({title!r}, {sent}) has a negative sentence index",
                            kind="dangling_supporting_fact", field="supporting_facts")
        with_sent = [i for i in cands if sent < len(sentences[i])]
        if not with_sent:
            if len(cands) > 1:
                raise ctx.error(
                    f"supporting fact ({title!r}, {sent}): {len(cands)} paragraphs carry that title and none has "
                    f"sentence {sent}, so the gold one cannot be told", kind="dangling_supporting_fact",
                    field="supporting_facts")
            notes["sentence_out_of_range"] += 1
            with_sent = cands
        resolved.append(with_sent)
    for with_sent in sorted(resolved, key=len):  # stable: the fewest candidates first
        if any(gold[i] for i in with_sent):
            continue
        if len(with_sent) > 1:
            notes["ambiguous_supporting_fact"] += 1
        gold[with_sent[0]] = True
    return gold, notes


class DatasetLoader:
    """One dataset: how to recognise its records, convert them, and where it lives on the Hub."""

    name: ClassVar[str]
    hub_path: ClassVar[str]
    hub_name: ClassVar[str | None] = None
    hub_splits: ClassVar[dict[str, str]] = {}
    license: ClassVar[str] = "unknown"
    release_files: ClassVar[str] = ""

    @classmethod
    def looks_like(cls, rec: Any) -> bool:
        raise NotImplementedError

    @classmethod
    def convert(cls, rec: Any, ctx: RecordContext, split: str | None) -> Example:
        raise NotImplementedError

    @staticmethod
    def make_example(**kw: Any) -> Example:
        return Example(**kw)


__all__ = ["DatasetLoader", "Document", "RecordContext", "answers_list", "join_sentences", "json_type",
           "paragraph_texts", "require", "require_question", "resolve_gold", "show",
           "stable_id"]
