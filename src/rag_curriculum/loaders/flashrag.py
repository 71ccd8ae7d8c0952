"""FlashRAG's question files (``RUC-NLPIR/FlashRAG_datasets``: ``nq/test.jsonl``, ``triviaqa/test.jsonl``,
``popqa/test.jsonl``, ``bamboogle/test.jsonl``, ``hotpotqa/dev.jsonl``, ``2wikimultihopqa/dev.jsonl``,
``musique/dev.jsonl``; what Search-R1, VERITAS and GlobalRAG evaluate on), one JSON object per line::

    {"id": "test_0", "question": "...", "golden_answers": ["...", ...], "metadata": {...}}

as FlashRAG's own ``Item`` reads them (``choices`` and ``output`` ignored).

**Evaluation only.** A FlashRAG record has a question and its answers, not the gold passages of a closed-context
set: it is for agents that search (``curriculum eval --agent search-r1|react --data FILE``), scored by EM / F1 over
``golden_answers`` (gold recall is not reported: there is no gold). ``curriculum build`` refuses these files with a
message saying so (the multi-hop sets' own release files, with their paragraphs, build closed-context sets).

Errors name the file, the line and the field, as the other loaders' do: a record that is not an object, a missing
or non-string question, an empty question, ``golden_answers`` missing, not a list, holding a non-string or only
empty strings, ``metadata`` not an object, an id missing or reused by a different question. With
``on_error="skip"`` bad records are counted by kind and left out, and the count is reported.

>>> FlashRAGLoader.looks_like({"id": "test_0", "question": "q?", "golden_answers": ["a"]})
True
>>> flashrag_name("data/FlashRAG_datasets/nq/test.jsonl"), flashrag_name("bamboogle_test.jsonl")
('nq', 'bamboogle')
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import DataError, SkipReport, WrongDatasetError
from ._base import RecordContext, json_type, require, require_question, show
from ._io import guess_split, iter_records

log = logging.getLogger(__name__)

#: The sets FlashRAG ships that the agentic papers evaluate on (folder names of ``FlashRAG_datasets``).
FLASHRAG_SETS = ("nq", "triviaqa", "popqa", "bamboogle", "hotpotqa", "2wikimultihopqa", "musique")

_HOPS = re.compile(r"^(\d)hop")


def flashrag_name(path: str | Path) -> str:
    """The set a FlashRAG file holds: its folder's name (``nq/test.jsonl``) or the first word of its file name
    (``bamboogle_test.jsonl``) when that is one of :data:`FLASHRAG_SETS`, else the folder's name."""
    p = Path(path)
    for cand in (p.parent.name.lower(), re.split(r"[^a-z0-9]+", p.stem.lower())[0]):
        if cand in FLASHRAG_SETS:
            return cand
    return p.parent.name.lower() or "flashrag"


class FlashRAGLoader:
    """One FlashRAG record to a question row (``id``, ``question``, ``answers``, ``passages`` empty, ``hops``
    where the id says it: MuSiQue's ``2hop__``; ``qtype`` from ``metadata.type``)."""

    name = "flashrag"

    @classmethod
    def looks_like(cls, rec: Any) -> bool:
        return (
            isinstance(rec, dict)
            and "golden_answers" in rec
            and "question" in rec
            and not ({"paragraphs", "context", "supporting_facts"} & rec.keys())
        )

    @classmethod
    def convert(cls, rec: Any, ctx: RecordContext, dataset: str) -> dict[str, Any]:
        rid = rec.get("id") if isinstance(rec, dict) else None
        if isinstance(rid, int) and not isinstance(rid, bool):
            rid = str(rid)
        ctx.id = rid if isinstance(rid, str) and rid.strip() else None
        if not isinstance(rec, dict):
            require(rec, "id", str, ctx)  # the record-is-not-an-object error
        if "id" not in rec:
            raise ctx.error("missing", kind="missing_field", field="id")
        if not isinstance(rid, str):
            raise ctx.error(
                f"expected a string or an integer, got {json_type(rec['id'])}", kind="wrong_type", field="id"
            )
        if not rid.strip():
            raise ctx.error("the id is empty", kind="missing_field", field="id")
        question = require_question(rec, ctx)
        golds = require(rec, "golden_answers", list, ctx)
        answers: list[str] = []
        for j, a in enumerate(golds):
            if not isinstance(a, str):
                raise ctx.error(
                    f"expected a string, got {json_type(a)} ({show(a, 40)})",
                    kind="wrong_type",
                    field=f"golden_answers[{j}]",
                )
            if a.strip() and a not in answers:
                answers.append(a)
        if not answers:
            raise ctx.error("no non-empty answer", kind="empty_answer", field="golden_answers")
        meta = rec.get("metadata")
        if meta is not None and not isinstance(meta, dict):
            raise ctx.error(f"expected an object, got {json_type(meta)}", kind="wrong_type", field="metadata")
        meta = meta or {}
        m = _HOPS.match(rid)
        qtype = meta.get("type")
        return {
            "id": rid,
            "data_source": dataset,
            "question": question,
            "answers": answers,
            "passages": [],
            "hops": int(m.group(1)) if m else None,
            "qtype": qtype if isinstance(qtype, str) else None,
        }


@dataclass
class FlashRAGSet:
    """The questions of one FlashRAG file: its set name, split (from the file name), rows in file order, and what
    ``on_error="skip"`` left out."""

    name: str
    split: str | None
    path: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    report: SkipReport = field(default_factory=SkipReport)
    duplicates: int = 0


def load_flashrag(path: str | Path, *, dataset: str | None = None, on_error: str = "raise") -> FlashRAGSet:
    """Read a FlashRAG question file (JSONL as shipped; a JSON list or Parquet of the same records is read too).
    ``dataset``: the set's name (default: :func:`flashrag_name`). Raises :class:`DataError` naming the file, line
    and field of the first bad record, or, with ``on_error="skip"``, counts them in ``report``."""
    path = Path(path)
    name = dataset or flashrag_name(path)
    out = FlashRAGSet(name, guess_split(path), str(path))
    skip = out.report.add if on_error == "skip" else None
    seen: dict[str, tuple[str, str]] = {}
    first = True
    for where, rec in iter_records(path, skip):
        ctx = RecordContext(str(path), where)
        if first:
            first = False
            if (
                not FlashRAGLoader.looks_like(rec)
                and isinstance(rec, dict)
                and ({"paragraphs", "context", "supporting_facts"} & rec.keys())
            ):
                raise WrongDatasetError(
                    f"{path}: this is a dataset's release file (its {where} has paragraphs), not "
                    "FlashRAG's question layout (id, question, golden_answers); build an "
                    "evaluation set from it (curriculum build --setting distractor|ideal) and "
                    "pass that directory as --data"
                )
        try:
            row = FlashRAGLoader.convert(rec, ctx, name)
            prev = seen.get(row["id"])
            if prev is None:
                seen[row["id"]] = (row["question"], where)
            elif prev[0] == row["question"]:
                out.duplicates += 1
            else:
                raise ctx.error(
                    f"this id is already used by {prev[1]}, a different question; ids must be unique "
                    "(give one of the two records another id, or remove it)",
                    kind="conflicting_id",
                    field="id",
                )
        except DataError as err:
            if skip is None:
                raise
            skip(err)
            continue
        out.rows.append(row)
    if not out.rows and not out.report.total:
        raise DataError("no records", kind="invalid_json", path=str(path))
    if out.report.total:
        log.warning("%s: %s; loaded %d", path, out.report.summary(), len(out.rows))
    return out


__all__ = ["FLASHRAG_SETS", "FlashRAGLoader", "FlashRAGSet", "flashrag_name", "load_flashrag"]
