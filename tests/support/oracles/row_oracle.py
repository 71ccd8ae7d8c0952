"""The row renderer as one dict per row: the oracle :func:`rag_curriculum.curricula._render.render_rows` (the
toolkit's one renderer, column by column) is checked against (tests/curricula/test_build.py). Written from the shard schema
(DESIGN.md), independently of the columnar code."""

from __future__ import annotations

from typing import Any

from rag_curriculum.curricula import select_documents
from rag_curriculum.prompts import PromptTemplate, get_template, unique_labels
from rag_curriculum.records import Example


def make_row(ex: Example, *, level: int, d: int, index: int, seed: int, template: PromptTemplate,
             setting: str, ability: str, answerable: bool = True,
             abstention_answer: str = "unanswerable") -> dict[str, Any]:
    """One row in the shard schema: prompt, passages with unique labels, gold labels, verl columns. An
    unanswerable row (``answerable`` False) shows only distractors and expects ``abstention_answer``."""
    docs = select_documents(ex, d, seed, unanswerable=not answerable)
    titles = [doc.title for doc in docs]
    texts = [doc.text for doc in docs]
    labels = ([str(template.index_base + k) for k in range(len(titles))] if template.citation == "index"
              else unique_labels(titles))
    gold_labels = [lb for lb, doc in zip(labels, docs, strict=True) if doc.is_gold]
    hops = len(gold_labels) if answerable else ex.hops
    answers = list(ex.answers) if answerable else [abstention_answer]
    if not answerable:
        d = len(docs)
    data_source = ex.extra.get("data_source") or ex.source
    target = ex.extra.get("target") if answerable else None
    return {
        "id": f"{data_source}-{ex.extra.get('row_id', ex.id)}",
        "data_source": data_source,
        "ability": ability,
        "prompt": template.render_fields(ex.question, labels, titles, texts),
        "question": ex.question,
        "answers": answers,
        "passages": [{"label": lb, "title": doc.title, "text": doc.text, "is_gold": doc.is_gold,
                      "origin": "provided", "bm25_rank": None}
                     for lb, doc in zip(labels, docs, strict=True)],
        "gold_labels": gold_labels,
        "level": level,
        "num_distractors": d,
        "hops": hops,
        "curriculum_index": index,
        "reward_model": {"style": "rule", "ground_truth": {"answers": answers, "gold_labels": gold_labels,
                                                           "answerable": answerable,
                                                           "target": answers if target is None else list(target)}},
        "extra_info": {"index": index, "split": ex.split, "id": ex.id, "source": ex.source, "level": level,
                       "hops": hops, "labels": labels},
        "source_id": ex.id,
        "split": ex.split,
        "qtype": ex.qtype,
        "setting": setting,
        "template": template.name,
        "answerable": answerable,
        "gold_recall": None,
    }


def render(plan: Any, cfg: Any, start: int = 0, stop: int | None = None) -> list[dict[str, Any]]:
    """The rows of ``plan[start:stop]`` (``curriculum_index`` = position in the whole plan), one dict each."""
    template = get_template(cfg.template)
    if getattr(cfg, "index_base", None) is not None:
        template = template.with_index_base(cfg.index_base)
    if getattr(cfg, "unanswerable_fraction", 0):
        template = template.with_abstention(cfg.abstention_answer)
    stop = len(plan) if stop is None else stop
    return [make_row(r.ex, level=r.level, d=r.d, index=i, seed=cfg.seed, template=template, setting=cfg.setting,
                     ability=cfg.ability, answerable=r.answerable,
                     abstention_answer=getattr(cfg, "abstention_answer", "unanswerable"))
            for i, r in zip(range(start, stop), plan[start:stop], strict=True)]
