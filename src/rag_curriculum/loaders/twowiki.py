"""2WikiMultihopQA: the official release JSON list and the Hugging Face Hub layout.

Official (``train.json``, ``dev.json``; ``entity_ids``, ``evidences_id``, ``answer_id`` present or not)::

    {"_id", "type", "question", "context": [[title, [sentences]]], "supporting_facts": [[title, sent_id]],
     "evidences": [[subject, relation, object]], "answer", ...}

Hub: ``context{title[], content[[...]]}``, ``supporting_facts{title[], sent_id[]}``,
``evidences{fact[], relation[], entity[]}``.

The release has supporting facts whose sentence index is past the end of their paragraph; the paragraph is
still the gold one when its title names only one (counted as ``sentence_out_of_range``; see ``resolve_gold``).
"""

from __future__ import annotations

from typing import Any

from ..records import Document, Example
from ._base import (
    DatasetLoader,
    RecordContext,
    answers_list,
)
from .hotpotqa import read_paragraphs

TWOWIKI_TYPES = {"compositional", "comparison", "bridge_comparison", "inference"}


def read_evidences(rec: dict) -> list[list[str]] | None:
    ev = rec.get("evidences")
    if isinstance(ev, dict):
        keys = [k for k in ("fact", "relation", "entity") if isinstance(ev.get(k), list)]
        if len(keys) == 3:
            return [list(t) for t in zip(ev["fact"], ev["relation"], ev["entity"], strict=False)]
        return None
    if isinstance(ev, list):
        return [list(t) for t in ev if isinstance(t, list | tuple)]
    return None


class TwoWikiLoader(DatasetLoader):
    name = "2wikimultihopqa"
    hub_path = "ohjoonhee/2WikiMultihopQA"
    hub_name = None
    hub_splits = {"train": "train", "dev": "validation", "validation": "validation", "test": "test"}
    license = "apache-2.0"
    release_files = "train.json / dev.json"

    @classmethod
    def looks_like(cls, rec: Any) -> bool:
        if not isinstance(rec, dict) or "context" not in rec or "supporting_facts" not in rec:
            return False
        ctxv = rec["context"]
        if isinstance(ctxv, dict) and "content" in ctxv:
            return True
        return "evidences" in rec or "entity_ids" in rec or rec.get("type") in TWOWIKI_TYPES - {"comparison"}

    @classmethod
    def convert(cls, rec: Any, ctx: RecordContext, split: str | None) -> Example:
        text_key = "content" if isinstance(rec, dict) and isinstance(rec.get("context"), dict) else "sentences"
        rid, question, answer, titles, texts, gold, facts, extra = read_paragraphs(cls.name, rec, ctx, text_key)
        aliases = rec.get("answer_aliases") or rec.get("aliases")
        ev = read_evidences(rec)
        if ev is not None:
            extra["evidences"] = ev
        for k in ("answer_id", "entity_ids"):
            if rec.get(k) not in (None, ""):
                extra[k] = rec[k]
        return Example(
            id=rid, source=cls.name, split=split, question=question,
            answers=answers_list(answer, aliases if isinstance(aliases, list) else None, ctx),
            documents=[Document(t, x, g) for t, x, g in zip(titles, texts, gold, strict=True)],
            qtype=rec.get("type") if isinstance(rec.get("type"), str) else None,
            supporting_facts=facts, decomposition=None, extra=extra,
        )
