"""MuSiQue: ``musique_ans_v1.0_*.jsonl`` and ``musique_full_v1.0_*.jsonl`` (JSONL, or the same records as a
JSON list or as Hub Parquet)::

    {"id", "paragraphs": [{"idx", "title", "paragraph_text", "is_supporting"}], "question",
     "question_decomposition": [{"id", "question", "answer", "paragraph_support_idx"}],
     "answer", "answer_aliases", "answerable"}

Gold comes from each paragraph's own ``is_supporting`` flag. MuSiQue-Full's unanswerable questions
(``answerable: false``) load with ``extra["answerable"] = False``; they may have no gold paragraph.
"""

from __future__ import annotations

from typing import Any

from ..records import Document, Example
from ._base import DatasetLoader, RecordContext, answers_list, json_type, require, require_question, show


class MuSiQueLoader(DatasetLoader):
    name = "musique"
    hub_path = "dgslibisey/MuSiQue"
    hub_name = None
    hub_splits = {"train": "train", "dev": "validation", "validation": "validation"}
    license = "cc-by-4.0"
    release_files = "musique_ans_v1.0_train.jsonl / musique_ans_v1.0_dev.jsonl"

    @classmethod
    def looks_like(cls, rec: Any) -> bool:
        return isinstance(rec, dict) and "paragraphs" in rec and (
            "question_decomposition" in rec or "answer_aliases" in rec)

    @classmethod
    def convert(cls, rec: Any, ctx: RecordContext, split: str | None) -> Example:
        rid = rec.get("id") if isinstance(rec, dict) else None
        ctx.id = rid if isinstance(rid, str) and rid else None
        rid = require(rec, "id", str, ctx)
        if not rid.strip():
            raise ctx.error("the id is empty", kind="missing_field", field="id")
        question = require_question(rec, ctx)
        answer = require(rec, "answer", str, ctx)
        aliases = rec.get("answer_aliases")
        if aliases is not None and not isinstance(aliases, list):
            raise ctx.error(f"expected a list of strings, got {json_type(aliases)}", kind="wrong_type",
                            field="answer_aliases")
        answerable = rec.get("answerable", True)
        paragraphs = require(rec, "paragraphs", list, ctx)
        docs: list[Document] = []
        idxs: list[Any] = []
        for j, p in enumerate(paragraphs):
            f = f"paragraphs[{j}]"
            if not isinstance(p, dict):
                raise ctx.error(f"expected an object, got {json_type(p)}", kind="wrong_type", field=f)
            title = require(p, "title", str, ctx, field=f"{f}.title")
            text = require(p, "paragraph_text", str, ctx, field=f"{f}.paragraph_text")
            sup = require(p, "is_supporting", bool, ctx, field=f"{f}.is_supporting")
            idxs.append(p.get("idx", j))
            docs.append(Document(title, text, sup))
        if not any(d.is_gold for d in docs) and answerable is not False:
            raise ctx.error("no paragraph has is_supporting = true", kind="no_gold", field="paragraphs")
        decomp = rec.get("question_decomposition")
        steps = None
        if decomp is not None:
            if not isinstance(decomp, list):
                raise ctx.error(f"expected a list, got {json_type(decomp)}", kind="wrong_type",
                                field="question_decomposition")
            steps = []
            for j, q in enumerate(decomp):
                if not isinstance(q, dict):
                    raise ctx.error(f"expected an object, got {json_type(q)}", kind="wrong_type",
                                    field=f"question_decomposition[{j}]")
                sup_idx = q.get("paragraph_support_idx")
                if sup_idx is not None and sup_idx not in idxs:
                    raise ctx.error(f"paragraph_support_idx {show(sup_idx)} is not the idx of any paragraph",
                                    kind="dangling_supporting_fact",
                                    field=f"question_decomposition[{j}].paragraph_support_idx")
                steps.append({"id": q.get("id"), "question": q.get("question"), "answer": q.get("answer"),
                              "paragraph_support_idx": sup_idx})
        extra: dict[str, Any] = {}
        if answerable is False:
            extra["answerable"] = False
        hop_tag = rid.split("__", 1)[0] if "__" in rid else None
        return Example(
            id=rid, source=cls.name, split=split, question=question,
            answers=answers_list(answer, aliases, ctx),
            documents=docs, qtype=hop_tag, supporting_facts=None, decomposition=steps, extra=extra,
        )
