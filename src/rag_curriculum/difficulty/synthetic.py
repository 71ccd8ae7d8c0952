"""Synthetic difficulty (RAG-RL section 3.2).

A row of level ``l`` holds all ``j`` gold documents and ``d = min(max(l + 2 - j, 0), k)`` distractors, ``k``
being the distractors the source provides for that question.

>>> [num_distractors(l, hops=2, available=8) for l in (1, 2, 5, 10, 20)]
[1, 2, 5, 8, 8]
>>> [num_distractors(l, hops=4, available=16) for l in (1, 2, 3, 20)]
[0, 0, 1, 16]
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

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


def shown_level(level: int, hops: int, shown: int) -> int:
    """The level whose rows show what a row of ``level`` shows, given the ``shown`` distractors it got: ``level``
    itself when it got every distractor the formula asks for, else the level that asks for ``shown`` (the row was
    capped by the distractors its question has).

    >>> shown_level(10, 2, 8), shown_level(8, 2, 8), shown_level(1, 4, 0)
    (8, 8, 1)
    """
    if shown >= num_distractors(level, hops, 1 << 30):
        return level
    return max(shown + hops - 2, 0)


def levels_as_built(rows: Iterable[tuple[int, int, int]]) -> dict[int, dict[str, Any]]:
    """Per level (sorted as numbers), what its rows ``(level, hops, distractors shown)`` really hold: ``rows``, the
    mean distractors the formula asks for (``asked``), the mean shown (``distractors``) and the fewest shown by one
    row (``distractors_min``: a row far short of its level hides in the mean), the mean ``passages``
    (gold + distractors), the rows shown fewer distractors than asked (``short_rows``, capped by their question's
    distractors) with the most they got (``short_max``) and the level most of them show (``shows``: see
    :func:`shown_level`). Rows without gold passages (questions only: Search-R1's files) have no level to build
    and are left out.

    >>> built = levels_as_built([(8, 2, 8), (9, 2, 8), (10, 2, 8), (10, 2, 8), (6, 2, 6), (6, 2, 0)])
    >>> built[10]  # doctest: +NORMALIZE_WHITESPACE
    {'rows': 2, 'asked': 10.0, 'distractors': 8.0, 'distractors_min': 8, 'passages': 10.0, 'short_rows': 2,
     'short_max': 8, 'shows': 8}
    >>> built[6]["distractors"], built[6]["distractors_min"]  # one row with no distractor at all
    (3.0, 0)
    >>> built[8]["short_rows"], built[8]["shows"]
    (0, None)
    """
    acc: dict[int, dict[str, Any]] = {}
    for level, hops, d in rows:
        if hops <= 0:
            continue
        a = acc.setdefault(int(level), {"rows": 0, "asked": 0, "distractors": 0, "passages": 0, "short": Counter(),
                                        "short_max": 0, "min": d})
        asked = num_distractors(level, hops, 1 << 30)
        a["rows"] += 1
        a["asked"] += asked
        a["distractors"] += d
        a["min"] = min(a["min"], d)
        a["passages"] += hops + d
        if d < asked:
            a["short"][shown_level(level, hops, d)] += 1
            a["short_max"] = max(a["short_max"], d)
    out = {}
    for level in sorted(acc):
        a = acc[level]
        n = a["rows"]
        short = a["short"]
        out[level] = {"rows": n, "asked": round(a["asked"] / n, 2), "distractors": round(a["distractors"] / n, 2),
                      "distractors_min": a["min"], "passages": round(a["passages"] / n, 2), "short_rows": sum(short.values()),
                      "short_max": a["short_max"] if short else None,
                      "shows": min(short, key=lambda lv: (-short[lv], lv)) if short else None}
    return out


def collapsed_levels(built: Mapping[int, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The groups of levels that hold the same difficulty, from :func:`levels_as_built`: a level most of whose rows
    were shown fewer distractors than it asks for collapses onto the level they show (``as_level``); each group
    names its ``levels`` (``as_level`` with the levels that collapse onto it, sorted), the ``capped`` ones, their
    ``rows`` (the group's, ``as_level``'s included when the build has it) and ``short_rows``, and the most
    distractors a capped row got (``max_distractors``: the source's cap). ``built``'s keys may be strings (a
    manifest's).

    >>> built = levels_as_built([(lv, 2, min(lv, 8)) for lv in range(1, 11)])
    >>> collapsed_levels(built)
    [{'as_level': 8, 'levels': [8, 9, 10], 'capped': [9, 10], 'rows': 3, 'short_rows': 2, 'max_distractors': 8}]
    """
    built = {int(k): v for k, v in built.items()}  # a manifest's keys are strings
    groups: dict[int, list[int]] = {}
    for level, b in built.items():
        if b["short_rows"] * 2 > b["rows"]:
            groups.setdefault(int(b["shows"]), []).append(int(level))
    out = []
    for target in sorted(groups):
        capped = sorted(groups[target])
        levels = sorted({*capped, *([target] if target in built else [])})
        out.append({"as_level": target, "levels": levels, "capped": capped,
                    "rows": sum(built[lv]["rows"] for lv in levels),
                    "short_rows": sum(built[lv]["short_rows"] for lv in capped),
                    "max_distractors": max(built[lv]["short_max"] for lv in capped)})
    return out
