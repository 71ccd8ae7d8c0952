"""The real paragraphs and questions of ``../shared/data`` pooled into one corpus, for the dense benchmarks.

Every file of the shared samples (HotpotQA's two, MuSiQue's two, 2WikiMultihopQA's one) is read with the toolkit's
loader; each distinct paragraph (title, text) is one corpus line, in first-seen order (datasets and files in the
order of :data:`FILES`); each question keeps the corpus line numbers of its gold paragraphs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from _common import SHARED

FILES = [("hotpotqa", SHARED / "hotpotqa" / "hotpot_train_v1.1.sample100.json"),
         ("hotpotqa", SHARED / "hotpotqa" / "hub_distractor_validation.sample300.jsonl"),
         ("musique", SHARED / "musique" / "musique_ans_v1.0_train.sample100.jsonl"),
         ("musique", SHARED / "musique" / "musique_ans_v1.0_dev.sample200.jsonl"),
         ("2wikimultihopqa", SHARED / "2wikimultihopqa" / "train.sample500.json")]


@dataclass
class Question:
    dataset: str
    text: str
    gold: list[int]  # corpus line numbers of its gold paragraphs


def pooled(corpus: Path) -> tuple[int, list[Question]]:
    """Write the pooled corpus (``{"title", "text"}`` lines) to ``corpus``; its size and the questions."""
    from rag_curriculum import load_examples

    ids: dict[tuple[str, str], int] = {}
    questions: list[Question] = []
    lines = []
    for dataset, path in FILES:
        for ex in load_examples(dataset, str(path)):
            gold = []
            for d in ex.documents:
                key = (d.title, d.text)
                if key not in ids:
                    ids[key] = len(ids)
                    lines.append(json.dumps({"title": d.title, "text": d.text}, ensure_ascii=False))
                if d.is_gold:
                    gold.append(ids[key])
            if gold:
                questions.append(Question(dataset, ex.question, sorted(set(gold))))
    tmp = corpus.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    tmp.replace(corpus)
    return len(lines), questions
