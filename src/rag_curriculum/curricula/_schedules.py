"""Schedules: ``C(i, n, K) -> level`` for the row index ``i`` in ``1..n`` (RAG-RL section 4.4.1).

>>> [linear(i, 10, 5) for i in range(1, 11)]
[1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
>>> [min_max(i, 5, 20) for i in range(1, 6)]
[1, 1, 20, 20, 20]
>>> s = piecewise([(1, 0.25), ("K", 0.75)])
>>> [s(i, 8, 10) for i in range(1, 9)]
[1, 1, 10, 10, 10, 10, 10, 10]
>>> parse_pieces("1:0.5,K:0.5") == [(1, 0.5), ("K", 0.5)]
True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

from ..errors import ConfigError
from ..registry import Registry

Schedule = Callable[[int, int, int], int]

SCHEDULES: Registry[Schedule] = Registry("schedule", check=callable, must_be="a function (i, n, K) -> level")


def register_schedule(name: str, fn: Schedule | None = None, *, overwrite: bool = False) -> Any:
    """Register ``fn(i, n, K) -> level`` under ``name`` (usable as a decorator).

    ``--schedule NAME`` (a build recipe's ``schedule``) then selects it; the builder checks that every level it
    gives is in ``1..K``.

    Args:
        name: the schedule's name.
        fn: the schedule: the level of row ``i`` (``1..n``) of ``n`` rows with top level ``K``; or a
            ``"module:attr"`` path; None to use this as a decorator.
        overwrite: replace a schedule already registered under ``name``.

    Returns:
        ``fn`` (or, as a decorator, the decorator).

    Raises:
        ConfigError: ``name`` is taken (without ``overwrite``), or ``fn`` is not callable.

    Examples:
        ```python
        from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum, register_schedule

        register_schedule("sqrt", lambda i, n, K: max(1, round(K * (i / n) ** 0.5)))
        build_curriculum(BuildConfig(sources=[SourceSpec("musique", "musique_ans_v1.0_train.jsonl", 5000)],
                                     schedule="sqrt", out="outputs/musique-sqrt"))
        ```
    """
    return SCHEDULES.register(name, fn, overwrite=overwrite)


@register_schedule("max")
def max_(i: int, n: int, K: int) -> int:
    """C_max(i) = K."""
    return K


@register_schedule("linear")
def linear(i: int, n: int, K: int) -> int:
    """C_linear(i) = ceil(K * i / n), in exact integer arithmetic."""
    return -(-K * i // n)


@register_schedule("min-max")
def min_max(i: int, n: int, K: int) -> int:
    """C_min-max(i) = 1 if i <= n/2 else K."""
    return 1 if 2 * i <= n else K


@register_schedule("adaptive")
def adaptive(i: int, n: int, K: int) -> int:
    """Every row stored at K, with what renders it at any level (:mod:`.adaptive`): the trainer's controller picks
    the level of each batch."""
    return K


@register_schedule("calibrated")
def calibrated(i: int, n: int, K: int) -> int:
    """Each question at the level of a profile where its pass rate is nearest ``--target``: placed per question by
    the builder (:mod:`._calibrated`), never by row index."""
    raise ConfigError("--schedule calibrated places each question by its profile, not by its row index",
                      hint="build with --schedule calibrated --profile DIR")


Piece = tuple[int | str, float]


def parse_pieces(spec: str | Sequence[Sequence[object]]) -> list[Piece]:
    """``"1:0.5,K:0.5"`` (or ``[[1, 0.5], ["K", 0.5]]`` from YAML) to ``[(1, 0.5), ("K", 0.5)]``."""
    items: list[Sequence[object]]
    if isinstance(spec, str):
        items = [p.split(":") for p in spec.split(",") if p.strip()]
    else:
        items = [list(p) for p in spec]
    pieces: list[Piece] = []
    for it in items:
        if len(it) != 2:
            raise ConfigError(f"schedule piece {it!r}: expected LEVEL:FRACTION (e.g. 1:0.5,K:0.5)")
        lv, fr = str(it[0]).strip(), float(it[1])
        level: int | str = "K" if lv.upper() == "K" else int(lv)
        if fr <= 0:
            raise ConfigError(f"schedule piece {it!r}: the fraction must be > 0")
        pieces.append((level, fr))
    if not pieces:
        raise ConfigError("a piecewise schedule needs at least one LEVEL:FRACTION piece")
    total = sum(f for _, f in pieces)
    if abs(total - 1.0) > 1e-6:
        raise ConfigError(f"schedule fractions must sum to 1, got {total:g}")
    return pieces


def piecewise(pieces: Sequence[Piece]) -> Schedule:
    """Consecutive blocks: the first ``fraction * n`` rows at the first level, and so on. ``"K"`` means the
    maximum level. Row ``i`` is in block ``b`` when ``i <= n * (f_1 + ... + f_b)``, so
    ``[(1, 0.5), ("K", 0.5)]`` is exactly min-max."""
    cum: list[Fraction] = []
    acc = Fraction(0)
    for _, f in pieces:
        acc += Fraction(f).limit_denominator(10**6)
        cum.append(acc)
    levels = [p[0] for p in pieces]

    def level(lv: int | str, K: int) -> int:
        if lv == "K":
            return K
        if not 1 <= int(lv) <= K:
            raise ConfigError(f"schedule piece level {lv} is outside 1..K (K = {K})")
        return int(lv)

    def schedule(i: int, n: int, K: int) -> int:
        for lv, c in zip(levels, cum, strict=True):
            if i <= c * n:
                return level(lv, K)
        return level(levels[-1], K)

    return schedule


def resolve_schedule(name: str, pieces: str | Sequence[Sequence[object]] | None = None) -> Schedule:
    if pieces and name != "piecewise":
        raise ConfigError(f"pieces are for the piecewise schedule, not {name!r}")
    if name == "piecewise":
        if not pieces:
            raise ConfigError("the piecewise schedule needs pieces, e.g. --pieces 1:0.25,5:0.25,K:0.5")
        return piecewise(parse_pieces(pieces))
    return SCHEDULES.get(name)


def levels_for(schedule: Schedule, n: int, K: int) -> list[int]:
    """The level of every row index 1..n, checked to lie in 1..K."""
    out = [schedule(i, n, K) for i in range(1, n + 1)]
    bad = [(i + 1, lv) for i, lv in enumerate(out) if not 1 <= lv <= K]
    if bad:
        raise ConfigError(f"schedule gave levels outside 1..{K}: first at i={bad[0][0]}: {bad[0][1]}")
    return out
