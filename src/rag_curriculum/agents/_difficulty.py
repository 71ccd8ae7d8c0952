"""Difficulty a searching model feels: what the search tool returns for a row depends on the row's level (or on a
noise probability p), seeded and recorded per search.

Two modes (``SearchDifficulty.mode``), beside ``none`` (the retriever's ranking as it is):

- ``hard-negatives``: at level ``l`` a row with ``j`` gold passages gets ``d = min(max(l + 2 - j, 0), k)`` hard
  negatives ranked *above* its first gold passage in every result list (RAG-RL's section 3.2 formula, ``k`` the
  hard negatives the row has). The hard negatives are the row's own distractors (the non-gold passages of its
  curriculum row: BM25 hard negatives in a ``--distractors bm25`` build), those the query's ranking places highest
  first, then the row's order. So at level 1 a gold passage the query finds sits under at most one distractor; at
  level K it is pushed under K distractors, out of a top-3 list.
- ``withhold``: with probability ``p`` a search's gold passages are removed from its results (the next non-gold
  passages of the ranking take their places): ZeroSearch's noise curriculum without a simulation LLM.
  :func:`noise_probability` is ZeroSearch's schedule ``p(t) = p_s + (b^(t/T) - 1) / (b - 1) * (p_e - p_s)`` with
  ``b = 4``.

Gold is decided by content (:func:`~rag_curriculum.retrieval._index.passage_hash` of title and text), so a copy of a
gold paragraph counts as gold whatever its id in the retriever.

>>> hard_negative_count(level=1, hops=2, available=18)
1
>>> hard_negative_count(level=20, hops=2, available=18)
18
>>> round(noise_probability(0, 100), 3), round(noise_probability(50, 100), 3), round(noise_probability(100, 100), 3)
(0.0, 0.167, 0.5)
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rag_plumbing import passage_hash

from .._plumbing import AsDict
from ..errors import ConfigError
from ._retrievers import Hit

MODES = ("none", "hard-negatives", "withhold")
#: A row column that sets the withholding probability of that row's searches (an adaptive controller or a schedule
#: writes it, :mod:`rag_curriculum.train._agent_adaptive`); absent or None: ``SearchDifficulty.p``.
P_COLUMN = "search_p"


def hard_negative_count(level: int, hops: int, available: int) -> int:
    """RAG-RL's d = min(max(l + 2 - j, 0), k)."""
    return min(max(level + 2 - hops, 0), available)


def noise_probability(step: int, total: int, p_start: float = 0.0, p_end: float = 0.5, base: float = 4.0) -> float:
    """ZeroSearch's noise schedule at step ``step`` of ``total``: p_s + (b^(t/T) - 1) / (b - 1) * (p_e - p_s)."""
    if total <= 0:
        return p_end
    t = min(max(step, 0), total) / total
    return p_start + (base ** t - 1) / (base - 1) * (p_end - p_start)


@dataclass
class SearchDifficulty(AsDict):
    """How a row's level (or ``p``) shapes its search results. ``p``: the withholding probability (the trainer's
    schedule or controller sets it as training goes; :func:`noise_probability`)."""

    mode: str = "none"
    p: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"search difficulty mode {self.mode!r}; choose one of {', '.join(MODES)}")
        if not 0.0 <= self.p <= 1.0:
            raise ConfigError(f"search difficulty p={self.p} is not a probability", hint="give 0 <= p <= 1")

    def extra(self, k: int, row: RowView) -> int:
        """How many more passages than ``k`` to ask the retriever for, so that a result still holds ``k`` after
        gold passages are moved down or out."""
        return 0 if self.mode == "none" else len(row.gold) + (len(row.negatives) if self.mode == "hard-negatives" else 0)

    def apply(self, hits: list[Hit], k: int, row: RowView, rng: random.Random) -> tuple[list[Hit], dict[str, Any]]:
        """The ``k`` results the model sees, and what was done (recorded with the search)."""
        if self.mode == "none":
            return hits[:k], {}
        if self.mode == "withhold":
            p = self.p if row.p is None else row.p  # the row's own p (a controller's or a schedule's), else ours
            if rng.random() < p:
                gold_in_top = sum(1 for h in hits[:k] if row.key(h) in row.gold)
                kept = [h for h in hits if row.key(h) not in row.gold]
                return kept[:k], {"withheld": gold_in_top, "p": p}
            return hits[:k], {"withheld": 0, "p": p}
        # hard negatives above the first gold passage
        d = hard_negative_count(row.level, len(row.gold), len(row.negatives))
        first_gold = next((i for i, h in enumerate(hits) if row.key(h) in row.gold), None)
        if d == 0 or first_gold is None:
            return hits[:k], {"hard_negatives": 0}
        found = {row.key(h): i for i, h in enumerate(hits)}
        ranked = sorted(range(len(row.negatives)), key=lambda i: (found.get(row.neg_keys[i], len(hits)), i))
        chosen = [row.negatives[i] for i in ranked[:d]]
        chosen_keys = {row.neg_keys[i] for i in ranked[:d]}
        rest = [h for h in hits if row.key(h) not in chosen_keys]
        first_gold = next(i for i, h in enumerate(rest) if row.key(h) in row.gold)
        out = rest[:first_gold] + chosen + rest[first_gold:]
        return out[:k], {"hard_negatives": d}


def _as_list(value: Any) -> list[Any]:
    """A row's list column as a list: None is empty; a NumPy array (a pandas row, datasets' numpy format) or a
    tuple is read as the list it holds (an array's truth value is an error, never a silent empty list)."""
    if value is None:
        return []
    tolist = getattr(value, "tolist", None)
    if callable(tolist) and not isinstance(value, (str, bytes)):
        value = tolist()
    return list(value)


class RowView:
    """What the search environment needs of a row: its id, question, answers, level, gold passage keys, hard
    negatives (the non-gold passages of its curriculum row, as hits) and its own withholding probability (the
    ``search_p`` column, when a controller or schedule set one)."""

    def __init__(self, row: dict[str, Any]) -> None:
        self.row = row
        self.id = str(row["id"])
        self.question = str(row["question"])
        self.answers = _as_list(row.get("answers"))
        level = row.get("level")
        self.level = int(level) if level is not None and int(level) else 1
        passages: Sequence[dict[str, Any]] = _as_list(row.get("passages"))
        self.gold = {passage_hash(p["title"], p["text"]) for p in passages if p.get("is_gold")}
        self.negatives = [Hit(f"row:{i}", p["title"], p["text"]) for i, p in enumerate(passages)
                          if not p.get("is_gold")]
        self.neg_keys = [passage_hash(h.title, h.text) for h in self.negatives]
        self.answerable = bool(row.get("answerable", True))
        p = row.get(P_COLUMN)
        if isinstance(p, float) and p != p:  # NaN: a missing value of a pandas column
            p = None
        if p is not None and not (isinstance(p, (int, float)) and not isinstance(p, bool) and 0.0 <= p <= 1.0):
            raise ConfigError(f"row {self.id!r}: {P_COLUMN}={p!r} is not a probability", hint="give 0 <= p <= 1")
        self.p: float | None = None if p is None else float(p)

    def key(self, hit: Hit) -> int:
        return passage_hash(hit.title, hit.text)

    def is_gold(self, hit: Hit) -> bool:
        return self.key(hit) in self.gold
