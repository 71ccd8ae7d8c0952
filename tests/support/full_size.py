"""Full-size MuSiQue-shaped training files, made in a test's tmp folder in about a second: the real release's
record shape (20 paragraphs, 2 to 4 hops, the decomposition's supporting paragraphs) with short synthetic text.
MuSiQue-Ans train holds 19,938 questions (RAG-RL C.1: 19,900); RAG-RL samples up to 40,000 per dataset."""

from __future__ import annotations

import json
from pathlib import Path

MUSIQUE_TRAIN_QUESTIONS = 19_938
PAPER_N = 40_000


def musique_file(path: Path, n: int, *, words: int = 12) -> Path:
    """``n`` MuSiQue-Ans records at ``path`` (JSONL); question i has 2 + i % 3 hops and 20 paragraphs of
    ``words`` words each (the real file's paragraphs hold about 60-100)."""
    filler = " ".join(f"w{j}" for j in range(words))
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            hops = 2 + i % 3
            support = [(3 * h + i) % 20 for h in range(hops)]
            paragraphs = [{"idx": j, "title": f"Title {i} {j}", "paragraph_text": f"Passage {i} {j} {filler}.",
                           "is_supporting": j in support} for j in range(20)]
            decomposition = [{"id": 1000 * i + h, "question": f"step {h} of {i}?", "answer": f"answer{i}-{h}",
                              "paragraph_support_idx": support[h]} for h in range(hops)]
            rec = {"id": f"{hops}hop__{i}", "paragraphs": paragraphs, "question": f"What is question {i}?",
                   "question_decomposition": decomposition, "answer": f"answer{i}", "answer_aliases": [],
                   "answerable": True}
            f.write(json.dumps(rec) + "\n")
    return path
