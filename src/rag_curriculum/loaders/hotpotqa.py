"""HotpotQA (distractor setting): the official release JSON list and the Hugging Face Hub layout.

Official (``hotpot_train_v1.1.json``, ``hotpot_dev_distractor_v1.json``)::

    {"_id", "question", "answer", "supporting_facts": [[title, sent_id]], "context": [[title, [sentences]]],
     "type", "level"}

Hub (``hotpotqa/hotpot_qa``, config ``distractor``), JSONL or Parquet, ``id`` sometimes absent::

    {"id", "question", "answer", "type", "level", "supporting_facts": {"title": [], "sent_id": []},
     "context": {"title": [], "sentences": [[...]]}}
"""

from __future__ import annotations

from typing import Any

from ..records import Document, Example
from ._base import (
    DatasetLoader,
    RecordContext,
    answers_list,
    json_type,
    paragraph_texts,
    require,
    require_question,
    resolve_gold,
    show,
    stable_id,
)

HOTPOT_TYPES = {"bridge", "comparison"}


def read_context(rec: dict, ctx: RecordContext, text_key: str) -> tuple[list[str], list[list[str]]]:
    """``context`` as (titles, sentences) from either the list-of-pairs or the columnar Hub layout."""
    context = require(rec, "context", (list, dict), ctx)
    if type(context) is list:  # fast path for well-formed official records; anything odd takes the checked path
        try:
            titles = [t for t, _ in context]
            sents = [s for _, s in context]
        except (TypeError, ValueError):
            pass
        else:
            if titles and all(type(t) is str for t in titles) and all(type(s) is list for s in sents):
                return titles, sents
    if isinstance(context, dict):
        titles = require(context, "title", list, ctx, field="context.title")
        sents = require(context, text_key, list, ctx, field=f"context.{text_key}")
        if len(titles) != len(sents):
            raise ctx.error(f"{len(titles)} titles but {len(sents)} paragraphs", kind="wrong_type",
                            field="context")
        pairs = zip(titles, sents, strict=True)
    else:
        pairs = context
    out_t: list[str] = []
    out_s: list[list[str]] = []
    for j, pair in enumerate(pairs):
        if isinstance(context, list) and not (isinstance(pair, list | tuple) and len(pair) == 2):
            raise ctx.error(f"expected a pair (title, list of sentences), got {show(pair)}", kind="wrong_type",
                            field=f"context[{j}]")
        title, sentences = pair
        if not isinstance(title, str):
            raise ctx.error(f"expected a string title, got {json_type(title)}", kind="wrong_type",
                            field=f"context[{j}].title")
        if not isinstance(sentences, list | tuple):  # a string too: its characters would be read as sentences
            raise ctx.error(f"expected a list of sentence strings, got {json_type(sentences)} ({show(sentences, 40)})",
                            kind="wrong_type", field=f"context[{j}].sentences")
        for m, x in enumerate(sentences):
            if not isinstance(x, str):
                raise ctx.error(f"sentence {m} is {json_type(x)}, expected a string", kind="wrong_type",
                                field=f"context[{j}].sentences")
        out_t.append(title)
        out_s.append(list(sentences))
    if not out_t:
        raise ctx.error("no paragraphs", kind="no_gold", field="context")
    return out_t, out_s


def read_facts(rec: dict, ctx: RecordContext) -> list[tuple[str, int]]:
    sf = require(rec, "supporting_facts", (list, dict), ctx)
    if isinstance(sf, dict):
        titles = require(sf, "title", list, ctx, field="supporting_facts.title")
        ids = require(sf, "sent_id", list, ctx, field="supporting_facts.sent_id")
        if len(titles) != len(ids):
            raise ctx.error(f"{len(titles)} titles but {len(ids)} sentence ids", kind="wrong_type",
                            field="supporting_facts")
        pairs: Any = zip(titles, ids, strict=True)
    else:
        pairs = sf
    facts = []
    for j, pair in enumerate(pairs):
        if not (isinstance(pair, list | tuple) and len(pair) == 2 and isinstance(pair[0], str)
                and isinstance(pair[1], int) and not isinstance(pair[1], bool)):
            raise ctx.error(f"expected a pair (title, sentence index), got {show(pair)}", kind="wrong_type",
                            field=f"supporting_facts[{j}]")
        facts.append((pair[0], pair[1]))
    if not facts:
        raise ctx.error("no supporting facts: no paragraph can be marked gold", kind="no_gold",
                        field="supporting_facts")
    return facts


def record_id(rec: dict, ctx: RecordContext, *keys: str) -> str:
    for k in keys:
        v = rec.get(k)
        if isinstance(v, str) and v.strip():
            return v
        if isinstance(v, int) and not isinstance(v, bool):
            return str(v)
    return ""


def read_paragraphs(name: str, rec: Any, ctx: RecordContext, text_key: str
                    ) -> tuple[str, str, str, list[str], list[str], list[bool], list, dict[str, Any]]:
    """What a record of HotpotQA's layout (HotpotQA's, 2WikiMultihopQA's) holds: its id (``_id`` or ``id``, else
    one derived from its question, answer and titles), question, answer, the paragraphs' titles, texts (their
    sentences under ``text_key`` joined) and gold flags, the supporting facts, and the notes on them
    (:func:`resolve_gold`'s non-zero counts: the row's ``extra`` to begin with)."""
    rid = record_id(rec, ctx, "_id", "id") if isinstance(rec, dict) else ""
    ctx.id = rid or None
    question = require_question(rec, ctx)
    answer = require(rec, "answer", str, ctx)
    titles, sentences = read_context(rec, ctx, text_key)
    facts = read_facts(rec, ctx)
    gold, notes = resolve_gold(titles, sentences, facts, ctx)
    texts = paragraph_texts(sentences, ctx)
    if not rid:
        rid = stable_id(name, question, answer, *titles)
    return rid, question, answer, titles, texts, gold, facts, {k: v for k, v in notes.items() if v}


class HotpotQALoader(DatasetLoader):
    name = "hotpotqa"
    hub_path = "hotpotqa/hotpot_qa"
    hub_name = "distractor"
    hub_splits = {"train": "train", "dev": "validation", "validation": "validation"}
    license = "cc-by-sa-4.0"
    release_files = "hotpot_train_v1.1.json / hotpot_dev_distractor_v1.json"

    @classmethod
    def looks_like(cls, rec: Any) -> bool:
        if not isinstance(rec, dict) or "context" not in rec or "supporting_facts" not in rec:
            return False
        if "evidences" in rec or "entity_ids" in rec:
            return False
        ctxv = rec["context"]
        if isinstance(ctxv, dict) and "content" in ctxv:
            return False
        return "level" in rec or rec.get("type") in HOTPOT_TYPES

    @classmethod
    def convert(cls, rec: Any, ctx: RecordContext, split: str | None) -> Example:
        rid, question, answer, titles, texts, gold, facts, extra = read_paragraphs(cls.name, rec, ctx, "sentences")
        qtype = rec.get("type") if isinstance(rec.get("type"), str) else None
        if isinstance(rec.get("level"), str):
            extra["level"] = rec["level"]
        return Example(
            id=rid, source=cls.name, split=split, question=question,
            answers=answers_list(answer, None, ctx),
            documents=[Document(t, x, g) for t, x, g in zip(titles, texts, gold, strict=True)],
            qtype=qtype, supporting_facts=facts, decomposition=None, extra=extra,
        )
