"""A search agent on TRL's native tool calling: ``GRPOTrainer(environment_factory=...)`` with the toolkit's
retriever as the environment's ``search`` tool (the other training route is the Search-R1 tag protocol through the
toolkit's ``rollout_func``, :class:`~rag_curriculum.train.SearchRollout`).

TRL 1.16's contract (experimental there): ``environment_factory()`` makes one environment per rollout; TRL calls
``reset(**row)`` with the example's columns before generating, exposes the environment's public methods as tools
(their names, type hints and Google-style docstrings become the tool schema the chat template renders), parses the
model's tool calls with the tokenizer's response template (``<tool_call>{...}</tool_call>`` for Qwen), runs them,
appends each result as a ``tool`` message, generates again, and masks the tool results out of the loss (its
``tool_mask``). The reward functions get the environments (``environments=``), so the search rewards read what
each rollout searched and whether a gold passage came back.

:class:`SearchEnvironment` is that environment: ``search(query)`` returns the top passages in Search-R1's
``Doc i(Title: t) text`` layout, with the row's search difficulty applied (hard negatives at its level, or gold
withheld with probability p) and every call recorded (query, passage ids, gold flags) in :attr:`record`, the same
record the tag protocol's rollout keeps. The model gives its final answer inside ``<answer>...</answer>`` (the
``search-tools`` template says so), read by the same rewards.

The tokenizer's chat template must render tools and be one TRL knows how to parse (Qwen2.5, Qwen3, Llama 3.1,
...); TRL refuses others at start-up.

>>> from rag_curriculum.agents import Hit
>>> class Fixed:
...     def search(self, queries, k):
...         return [[Hit("7", "Paris", "Paris is the capital of France."), Hit("9", "Lyon", "Lyon is a city.")][:k]
...                 for _ in queries]
>>> env = SearchEnvironment(Fixed(), top_k=2)
>>> env.reset(id="q1", question="Capital of France?", passages=[
...     {"title": "Paris", "text": "Paris is the capital of France.", "is_gold": True}])
>>> print(env.search("capital of France"))
Doc 1(Title: Paris) Paris is the capital of France.
Doc 2(Title: Lyon) Lyon is a city.
>>> env.record["searches"][0]["ids"], env.record["searches"][0]["gold"]
(['7', '9'], [True, False])
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from typing import Any

from .._plumbing import derive_seed, renamed_keywords
from ..agents import (
    NO_RESULTS,
    Retriever,
    RowView,
    SearchDifficulty,
    doc_lines,
    first_search_query,
    open_retriever,
)

__all__ = ["SearchEnvironment", "environment_from_config"]


class SearchEnvironment:
    """One rollout's search tool for TRL's ``environment_factory`` (see the module docstring). ``retriever``: any
    :class:`~rag_curriculum.agents.Retriever` (or an index directory / server URL); ``top_k``: passages per
    search; ``difficulty``: what the row's level (or p) does to the results; ``max_searches``: calls beyond it get
    a message and no search (None: no limit; TRL's ``max_tool_calling_iterations`` bounds the turns)."""

    @renamed_keywords(topk="top_k")
    def __init__(self, retriever: Retriever | str, *, top_k: int = 3, difficulty: SearchDifficulty | None = None,
                 max_searches: int | None = None, first_search: str | None = None) -> None:
        self._retriever = open_retriever(retriever) if isinstance(retriever, str) else retriever
        self._top_k = int(top_k)
        self._difficulty = difficulty or SearchDifficulty()
        self._max_searches = max_searches
        self._first_search = first_search
        self._view: RowView | None = None
        self.record: dict[str, Any] = {"row_id": None, "searches": []}

    def reset(self, **row: Any) -> str | None:
        """A new rollout of ``row`` (TRL passes the example's columns; a pandas row's arrays are read as lists): the
        row's gold passages and level for the difficulty and the gold flags, an empty record.

        With ``first_search`` (``agent.first_turn`` under ``protocol=tools``: a turn holding ``<search> {question}
        </search>``), the environment runs that search now, records it (``scripted: true``) and returns its
        passages, which TRL appends to the question (its public ``reset`` contract): a model that never calls the
        tool (a tiny random one) still starts from search results, and the search rewards count the search."""
        self._view = RowView(row) if row.get("question") is not None and row.get("id") is not None else None
        self.record = {"row_id": None if self._view is None else self._view.id, "searches": []}
        if self._first_search is None or self._view is None:
            return None
        query = first_search_query(self._first_search, self._view.question)
        text = self.search(query)
        self.record["searches"][-1]["scripted"] = True
        return f"\n\nResults of a first search for \"{query}\":\n{text}"

    def search(self, query: str) -> str:
        """Search the passage collection and return the passages most relevant to the query.

        Args:
            query: What to search for: an entity, a fact or a question.

        Returns:
            The top passages, best first, one per line as "Doc i(Title: title) text".
        """
        searches = self.record["searches"]
        if not isinstance(query, str) or not query.strip():
            return "Error: give the search a non-empty query."
        if self._max_searches is not None and len(searches) >= self._max_searches:
            return f"Error: no more searches ({self._max_searches} per question); give the final answer."
        view, k, shape = self._view, self._top_k, self._difficulty
        extra = shape.extra(k, view) if view is not None else 0
        hits = list(self._retriever.search([query.strip()], k + extra)[0])
        shaped: dict[str, Any] = {}
        if view is not None:
            rng = random.Random(derive_seed(shape.seed, view.id, len(searches), query.strip(), "search"))
            hits, shaped = shape.apply(hits, k, view, rng)
        else:
            hits = hits[:k]
        searches.append({"turn": len(searches) + 1, "query": query.strip(), "ids": [h.id for h in hits],
                         "gold": [view.is_gold(h) if view is not None else False for h in hits],
                         "short": len(hits) < k, "shaped": shaped or None})
        return doc_lines(hits) or NO_RESULTS


def environment_from_config(agent: Any, *, seed: int = 0, retriever: Any = None) -> Callable[[], SearchEnvironment]:
    """TRL's ``environment_factory`` for a training config's ``agent`` section: one retriever opened and shared,
    a fresh :class:`SearchEnvironment` per rollout."""
    s = seed if agent.seed is None else int(agent.seed)
    retriever = retriever if retriever is not None else open_retriever(
        agent.retriever, timeout=getattr(agent, "retriever_timeout", None),
        retries=getattr(agent, "retriever_retries", None))
    return functools.partial(SearchEnvironment, retriever, top_k=agent.top_k,
                             difficulty=SearchDifficulty(mode=agent.difficulty, p=agent.p, seed=s),
                             first_search=getattr(agent, "first_turn", None))
