"""Synthetic difficulty (RAG-RL section 3.2).

A row of level ``l`` holds all ``j`` gold documents and ``d = min(max(l + 2 - j, 0), k)`` distractors, ``k``
being the distractors the source provides for that question.

>>> [num_distractors(l, hops=2, available=8) for l in (1, 2, 5, 10, 20)]
[1, 2, 5, 8, 8]
>>> [num_distractors(l, hops=4, available=16) for l in (1, 2, 3, 20)]
[0, 0, 1, 16]
"""

from __future__ import annotations

from ..errors import ConfigError


def num_distractors(level: int, hops: int, available: int) -> int:
    """d = min(max(l + 2 - j, 0), k)."""
    if level < 0:
        raise ConfigError(f"level must be >= 0, got {level}")
    return min(max(level + 2 - hops, 0), available)


def level_for(num_distractors: int, hops: int) -> int:
    """The level whose formula gives ``num_distractors`` for a ``hops``-hop question (0 when none are shown):
    used to label evaluation rows, which have no schedule."""
    return max(num_distractors + hops - 2, 0) if num_distractors else 0
