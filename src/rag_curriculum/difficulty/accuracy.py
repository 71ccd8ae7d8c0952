"""Accuracy-based difficulty (RAG-RL section 3.2, appendix A): per-question pass statistics and buckets.

Everything here works from *stored counts*: ``n`` samples per question and, for each, its answer F1. A sample is
correct when its F1 reaches ``correct_f1`` (1.0 in the paper); ``c`` counts the correct samples. From ``(n, c)``:

- pass@k for every k <= n by the unbiased estimator of Chen et al. (2021), ``1 - C(n-c, k) / C(n, k)``, computed
  as human-eval does (a product, no large binomials);
- the bucket: *base-answerable* when some sample is correct (max F1 = 1, i.e. pass@n = 1), *base-unanswerable*
  when none is (pass@n = 0);
- *learnable* when ``0 < c < n``: the group's rewards differ, so GRPO gets a non-zero advantage from it.

Buckets can therefore be recomputed with another threshold without generating again.

>>> pass_at_k(8, 0, 1), pass_at_k(8, 8, 1), pass_at_k(8, 2, 1), round(pass_at_k(8, 2, 4), 6)
(0.0, 1.0, 0.25, 0.785714)
>>> s = question_stats([1.0, 0.4, 0.0, 1.0])
>>> s.n, s.c, s.max_f1, s.bucket, s.learnable, s.pass_at_k[-1]
(4, 2, 1.0, 'answerable', True, 1.0)
"""

from __future__ import annotations

import math
import random
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from .._plumbing import derive_seed
from ..errors import ConfigError

ANSWERABLE = "answerable"
UNANSWERABLE = "unanswerable"
LEARNABLE = "learnable"
BUCKETS = (ANSWERABLE, UNANSWERABLE)

#: F1 a sample must reach to count as correct (RAG-RL: "an F1 score of 1").
CORRECT_F1 = 1.0
_EXACT_UP_TO = 1024
_EPS = 1e-9  # F1 is a ratio of small integers; this only absorbs floating-point noise

__all__ = [
    "ANSWERABLE", "BUCKETS", "CORRECT_F1", "LEARNABLE", "UNANSWERABLE", "QuestionStats", "balance",
    "bucket_of", "count_correct", "is_learnable", "pass_at_k", "pass_at_k_curve", "question_stats",
]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct: ``1 - C(n-c, k) / C(n, k)``.

    1.0 when ``n - c < k`` (every k-subset holds a correct sample). For ``n <= 1024`` the ratio is taken in exact
    integer arithmetic and rounded once (so ``pass_at_k(10, 3, 1)`` is exactly ``0.3``); above that it uses
    human-eval's numerically stable product ``1 - prod(1 - k / i for i in n-c+1..n)``
    (``openai/human-eval: human_eval/evaluation.py::estimate_pass_at_k``), which never forms large binomials.

    Args:
        n: samples drawn.
        c: correct samples among them.
        k: the k of pass@k.

    Returns:
        The probability that at least one of ``k`` samples drawn from the ``n`` without replacement is correct.

    Raises:
        ConfigError: ``n`` below 1, ``c`` outside ``0..n``, or ``k`` outside ``1..n``.
        TypeError: an argument that is not an integer.

    Examples:
        >>> from rag_curriculum.difficulty import pass_at_k
        >>> pass_at_k(10, 3, 1), pass_at_k(5, 0, 5), pass_at_k(5, 1, 5)
        (0.3, 0.0, 1.0)
        >>> import math
        >>> abs(pass_at_k(2000, 10, 20) - (1 - math.comb(1990, 20) / math.comb(2000, 20))) < 1e-12
        True
    """
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (n, c, k)):
        raise TypeError(f"n, c and k must be integers, got {n!r}, {c!r}, {k!r}")
    if n < 1:
        raise ConfigError(f"n must be >= 1 samples, got {n}")
    if not 0 <= c <= n:
        raise ConfigError(f"c must be in 0..n={n}, got {c}")
    if not 1 <= k <= n:
        raise ConfigError(f"k must be in 1..n={n}, got {k} (pass@k needs at least k samples)")
    if n - c < k:
        return 1.0
    if c == 0:
        return 0.0
    if n <= _EXACT_UP_TO:
        total = math.comb(n, k)
        return (total - math.comb(n - c, k)) / total  # one correctly rounded division
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def pass_at_k_curve(n: int, c: int) -> list[float]:
    """``[pass@1, pass@2, ..., pass@n]`` for one question.

    >>> pass_at_k_curve(4, 1)
    [0.25, 0.5, 0.75, 1.0]
    """
    return [pass_at_k(n, c, k) for k in range(1, n + 1)]


def count_correct(f1: Sequence[float], *, correct_f1: float = CORRECT_F1,
                  valid: Sequence[bool] | None = None) -> int:
    """How many samples reach ``correct_f1``; with ``valid`` (strict format), only format-valid samples count.

    >>> count_correct([1.0, 0.99, 1.0]), count_correct([1.0, 1.0], valid=[True, False])
    (2, 1)
    """
    if valid is not None and len(valid) != len(f1):
        raise ConfigError(f"{len(valid)} validity flags for {len(f1)} samples")
    ok = valid if valid is not None else [True] * len(f1)
    return sum(1 for f, v in zip(f1, ok, strict=True) if v and f >= correct_f1 - _EPS)


def bucket_of(c: int) -> str:
    """``answerable`` when some sample is correct (max F1 reaches the threshold), else ``unanswerable``."""
    return ANSWERABLE if c > 0 else UNANSWERABLE


def is_learnable(n: int, c: int) -> bool:
    """``0 < c < n``: the samples disagree, so a GRPO group on this question has a non-zero advantage."""
    return 0 < c < n


@dataclass(frozen=True)
class QuestionStats:
    """The pass statistics of one question (``pass_at_k[k - 1]`` is pass@k)."""

    n: int
    c: int
    f1: tuple[float, ...]
    max_f1: float
    mean_f1: float
    pass_rate: float
    pass_at_k: tuple[float, ...]
    bucket: str
    learnable: bool


def question_stats(f1: Sequence[float], *, correct_f1: float = CORRECT_F1,
                   valid: Sequence[bool] | None = None) -> QuestionStats:
    """Statistics of one question from its samples' answer F1 (and format validity when counting strictly)."""
    n = len(f1)
    if n < 1:
        raise ConfigError("a question needs at least one sample")
    c = count_correct(f1, correct_f1=correct_f1, valid=valid)
    return QuestionStats(
        n=n, c=c, f1=tuple(float(x) for x in f1), max_f1=float(max(f1)), mean_f1=float(sum(f1) / n),
        pass_rate=c / n, pass_at_k=tuple(pass_at_k_curve(n, c)), bucket=bucket_of(c), learnable=is_learnable(n, c))


def balance(answerable: Sequence[Hashable], unanswerable: Sequence[Hashable], *, seed: int
            ) -> tuple[list[Hashable], list[Hashable]]:
    """Clip the two buckets to the same size, as RAG-RL appendix A does: the larger one keeps a random subset
    (drawn with ``seed``) of ``min(len)`` items, in its original order; the smaller one is kept whole.

    >>> balance(["a", "b", "c", "d"], ["x", "y"], seed=0)[1], len(balance(["a", "b", "c", "d"], ["x", "y"], seed=0)[0])
    (['x', 'y'], 2)
    """
    size = min(len(answerable), len(unanswerable))

    def clip(items: Sequence[Hashable], name: str) -> list[Hashable]:
        if len(items) <= size:
            return list(items)
        keep = sorted(random.Random(derive_seed(seed, "balance", name)).sample(range(len(items)), size))
        return [items[i] for i in keep]

    return clip(answerable, ANSWERABLE), clip(unanswerable, UNANSWERABLE)

