"""Counts, tails and collector pauses shared by the build, the partition, the loaders' statistics and training."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from rag_plumbing import gc_paused  # the collector pause, shared with the retriever

__all__ = ["distribution", "gc_paused", "trainer_tail"]


def distribution(values: Iterable[Any]) -> dict[str, int]:
    """How often each value occurs, as ``{str(value): count}`` sorted by value (None last): the form of every
    distribution in manifests, data cards and ``inspect``. A :class:`~collections.Counter` (or any mapping of
    value to count) is taken as counts already.

    >>> distribution([3, 1, None, 3])
    {'1': 1, '3': 2, 'None': 1}
    """
    c = Counter(values)
    return {str(k): c[k] for k in sorted(c, key=lambda x: (x is None, x))}


def trainer_tail(rows: int, batch_prompts: int | None) -> dict[str, Any] | None:
    """What a trainer taking ``batch_prompts`` prompts per step makes of ``rows`` rows in one pass: its steps, and
    the rows of the incomplete last batch it drops (TRL's sampler does); None when no batch is set.

    >>> trainer_tail(10, 4)
    {'batch_prompts': 4, 'steps': 2, 'unseen_rows': 2}
    """
    if not batch_prompts:
        return None
    return {"batch_prompts": batch_prompts, "steps": rows // batch_prompts, "unseen_rows": rows % batch_prompts}
