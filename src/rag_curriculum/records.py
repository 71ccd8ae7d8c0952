"""The canonical record every loader maps into.

An :class:`Example` is one multi-hop question with *every* paragraph its source provides, in source order,
each marked gold or not per paragraph (never by title: titles repeat inside one question in real data).

>>> ex = Example(id="q1", source="hotpotqa", split="train", question="Who?", answers=["Ada", "Ada L."],
...              documents=[Document("A", "a.", True), Document("B", "b.", False), Document("C", "c.", True)])
>>> ex.hops, ex.num_distractors, [d.title for d in ex.gold_documents]
(2, 1, ['A', 'C'])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple


class Document(NamedTuple):
    """One paragraph: its title, its text (sentences joined as the source gives them) and whether it is gold.

    A named tuple: immutable, cheap to build by the hundred thousand, and it compares by value.
    """

    title: str
    text: str
    is_gold: bool = False


@dataclass(slots=True)
class Example:
    """One question with its answers (answer first, then aliases) and all its paragraphs in source order.

    ``hops`` is the number of gold documents (j in RAG-RL section 3.2). ``qtype``, ``supporting_facts``
    (``[(title, sentence_index), ...]``) and ``decomposition`` (MuSiQue's sub-questions, each a dict with
    ``id``, ``question``, ``answer``, ``paragraph_support_idx``) are kept where the source has them.

    Attributes:
        id: the question's id in its source (a stable content hash where the source has none).
        source: the dataset (``hotpotqa``, ``musique``, ...).
        split: ``train``, ``dev``, ``test``, or None.
        question: the question text.
        answers: the answer first, then its aliases.
        documents: every paragraph the source gives, in source order, each marked gold or not.
        extra: what else a loader keeps (MuSiQue-Full's ``answerable``, Search-R1's ``data_source``, ...).

    Examples:
        A loader of your own returns these (docs/extending.md):

        >>> from rag_curriculum import Document, Example
        >>> ex = Example(id="q1", source="myqa", split="train", question="Where was Ada born?", answers=["London"],
        ...              documents=[Document("Ada", "Ada was born in London.", True), Document("Bob", "Bob.")])
        >>> ex.hops, ex.answer, [d.title for d in ex.distractors]
        (1, 'London', ['Bob'])
    """

    id: str
    source: str
    split: str | None
    question: str
    answers: list[str]
    documents: list[Document]
    qtype: str | None = None
    supporting_facts: list[tuple[str, int]] | None = None
    decomposition: list[dict[str, Any]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # hops, counted on first use (a build asks for it several times per row; ``documents`` is never changed in place)
    _hops: int = field(default=-1, init=False, repr=False, compare=False)

    @property
    def hops(self) -> int:
        """The number of gold documents (j in RAG-RL section 3.2)."""
        if self._hops < 0:
            self._hops = sum(1 for d in self.documents if d.is_gold)
        return self._hops

    @property
    def gold_documents(self) -> list[Document]:
        """The gold documents, in source order."""
        return [d for d in self.documents if d.is_gold]

    @property
    def distractors(self) -> list[Document]:
        """The documents that are not gold, in source order."""
        return [d for d in self.documents if not d.is_gold]

    @property
    def num_distractors(self) -> int:
        """k in RAG-RL: the distractors the source provides for this question."""
        return len(self.documents) - self.hops

    @property
    def answer(self) -> str:
        """The answer (the first of ``answers``)."""
        return self.answers[0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "source": self.source, "split": self.split, "question": self.question,
            "answers": list(self.answers), "documents": [d._asdict() for d in self.documents],
            "hops": self.hops, "qtype": self.qtype,
            "supporting_facts": [list(f) for f in self.supporting_facts] if self.supporting_facts else None,
            "decomposition": self.decomposition, "extra": dict(self.extra),
        }
