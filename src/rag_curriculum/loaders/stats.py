"""What a source file holds: the statistics behind ``curriculum inspect PATH --dataset NAME``."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from .._plumbing import distribution
from ..errors import SkipReport
from . import load_examples, sniff_dataset


def source_summary(path: str | Path, dataset: str | None = None, *, on_error: str = "raise",
                   split: str | None = None) -> dict[str, Any]:
    """Records, hops, question types, paragraphs and distractors per question, repeated titles, and what was
    skipped (with ``on_error="skip"``), as a JSON-able dict."""
    dataset = dataset or sniff_dataset(path, on_error)  # type: ignore[arg-type]
    report = SkipReport()
    stream = load_examples(dataset, path, split=split, on_error=on_error, report=report)  # type: ignore[arg-type]
    hops: Counter = Counter()
    qtypes: Counter = Counter()
    paras: Counter = Counter()
    distractors: Counter = Counter()
    aliases = 0
    rep_q = rep_gold_q = 0
    notes: Counter = Counter()
    unanswerable = 0
    n = 0
    for ex in stream:
        n += 1
        hops[ex.hops] += 1
        qtypes[ex.qtype] += 1
        paras[len(ex.documents)] += 1
        distractors[ex.num_distractors] += 1
        aliases += len(ex.answers) > 1
        titles = Counter(d.title for d in ex.documents)
        if any(v > 1 for v in titles.values()):
            rep_q += 1
            if any(titles[d.title] > 1 for d in ex.documents if d.is_gold):
                rep_gold_q += 1
        for k in ("sentence_out_of_range", "ambiguous_supporting_fact"):
            notes[k] += ex.extra.get(k, 0)
        unanswerable += ex.extra.get("answerable") is False
    return {
        "path": str(path), "dataset": stream.dataset, "split": stream.split, "records": n,
        "hops": distribution(hops), "question_types": distribution(qtypes), "paragraphs_per_question": distribution(paras),
        "distractors_per_question": distribution(distractors), "questions_with_aliases": aliases,
        "questions_with_repeated_titles": rep_q, "questions_with_repeated_gold_titles": rep_gold_q,
        "supporting_facts_sentence_out_of_range": notes["sentence_out_of_range"],
        "supporting_facts_ambiguous": notes["ambiguous_supporting_fact"], "unanswerable": unanswerable,
        "duplicate_records": stream.duplicates,
        "skipped": dict(report.counts), "skipped_examples": report.examples,
    }
