"""Train / evaluation leakage: questions shared by id or by normalised question text.

>>> normalize_question("  What's the  CAPITAL of France? ")
'whats the capital of france'
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..shards import read_table

_PUNCT = re.compile(f"[{re.escape(string.punctuation)}]")
_WS = re.compile(r"\s+")


def normalize_question(q: str) -> str:
    return _WS.sub(" ", _PUNCT.sub("", q.lower())).strip()


@dataclass
class LeakageIndex:
    ids: set[str] = field(default_factory=set)
    questions: set[str] = field(default_factory=set)

    def add(self, source_id: str, question: str) -> None:
        self.ids.add(source_id)
        self.questions.add(normalize_question(question))

    def update(self, pairs: Iterable[tuple[str, str]]) -> None:
        for i, q in pairs:
            self.add(i, q)

    def leaked(self, source_id: str, question: str) -> str | None:
        """``"id"`` or ``"question"`` when the example is in the index, else None."""
        if source_id in self.ids:
            return "id"
        if normalize_question(question) in self.questions:
            return "question"
        return None

    @classmethod
    def from_shards(cls, directory: str) -> LeakageIndex:
        t = read_table(directory, columns=["source_id", "question"])
        idx = cls()
        idx.update(zip(t.column("source_id").to_pylist(), t.column("question").to_pylist(), strict=True))
        return idx
