"""The statistics of the curriculum-effect bench (bench/bench_curriculum_effect.py), apart so that tests check them
by hand: a paired bootstrap over seeds with every resample enumerated (exact for up to 7 seeds), the verdict of a
pre-registered comparison, and how many seeds an inconclusive one would need.

>>> paired_bootstrap([0.0, 1.0])["ci"]   # means of the 4 resamples: 0, 0.5, 0.5, 1
[0.0375, 0.9625]
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

#: Up to this many resamples (n ** n for n seeds: 7 seeds give 823,543) every resample is enumerated, so the
#: interval is exact and the same on every machine; above it, this many are drawn with a fixed seed.
EXACT_LIMIT = 1_000_000
DRAWN = 200_000


def resample_means(values: Sequence[float]) -> list[float]:
    """The means of the bootstrap resamples of ``values``: every ordered resample with replacement when there are at
    most :data:`EXACT_LIMIT` of them (each equally likely: the exact bootstrap distribution), else :data:`DRAWN`
    seeded draws."""
    import numpy as np

    n = len(values)
    if n == 0:
        raise ValueError("no values to resample")
    if n ** n <= EXACT_LIMIT:  # up to 7 seeds
        idx = np.array(list(itertools.product(range(n), repeat=n)), dtype=np.int64)
    else:
        idx = np.random.default_rng(0).integers(0, n, size=(DRAWN, n))
    return np.asarray(values, dtype=float)[idx].mean(axis=1).tolist()


def paired_bootstrap(values: Sequence[float]) -> dict:
    """The mean of per-seed values (an arm's figure, or its paired differences against the reference arm, seed by
    seed) with the percentile bootstrap 95% interval over the seeds (numpy's linear percentile of the resample means).

    >>> paired_bootstrap([0.1, 0.1, 0.1])
    {'mean': 0.1, 'ci': [0.1, 0.1], 'seeds': 3}
    """
    import numpy as np

    means = np.asarray(resample_means(values))
    return {"mean": round(float(np.mean(values)), 6),
            "ci": [round(float(np.percentile(means, 2.5)), 6), round(float(np.percentile(means, 97.5)), 6)],
            "seeds": len(values)}


def seeds_needed(diff: dict, *, smallest_effect: float, expect: int) -> int | None:
    """How many seeds would decide an inconclusive comparison, the interval's half-width shrinking as 1/sqrt(seeds)
    around the same estimate: the fewer of those that would exclude 0 and those that would exclude an effect of
    ``smallest_effect`` (in the expected direction, ``expect`` +1 or -1; on either side when no effect was expected,
    ``expect`` 0). None when neither could: the estimate is 0 and at or beyond the effect.

    >>> seeds_needed({"mean": 0.02, "ci": [-0.02, 0.06], "seeds": 5}, smallest_effect=0.05, expect=0)
    9
    """
    n, (lo, hi), m = diff["seeds"], diff["ci"], diff["mean"]
    half = (hi - lo) / 2
    exclude_effect = smallest_effect - (expect * m if expect else abs(m))
    room = max(abs(m), exclude_effect)
    if room <= 0:
        return None
    return max(n, math.ceil(n * (half / room) ** 2))


def verdict(diff: dict, *, expect: int, smallest_effect: float) -> dict:
    """A pre-registered comparison read against its interval. ``expect``: +1 (the arm above the reference), -1
    (below) or 0 (no difference). Outcomes:

    - ``as predicted``: an effect was expected and the interval lies wholly on its side of 0; or none was expected
      and the interval lies inside (-smallest_effect, +smallest_effect) (the equivalence margin);
    - ``opposite``: the interval lies wholly on the other side of 0;
    - ``difference, none predicted``: none was expected and the interval excludes 0 and leaves the margin;
    - ``null``: an effect was expected and the interval excludes an effect of ``smallest_effect`` in its direction
      (it covers 0 or lies on the wrong side without excluding 0);
    - ``inconclusive``: none of these; ``seeds_needed`` says how many seeds would decide it.

    >>> verdict({"mean": 0.1, "ci": [0.04, 0.16], "seeds": 5}, expect=1, smallest_effect=0.05)["outcome"]
    'as predicted'
    >>> verdict({"mean": 0.0, "ci": [-0.03, 0.03], "seeds": 5}, expect=1, smallest_effect=0.05)["outcome"]
    'null'
    """
    lo, hi = diff["ci"]
    out: dict = {"expect": expect, "smallest_effect": smallest_effect}
    if expect:
        if (lo > 0 and expect > 0) or (hi < 0 and expect < 0):
            outcome = "as predicted"
        elif (hi < 0 and expect > 0) or (lo > 0 and expect < 0):
            outcome = "opposite"
        elif (expect > 0 and hi < smallest_effect) or (expect < 0 and lo > -smallest_effect):
            outcome = "null"
        else:
            outcome = "inconclusive"
    else:
        if -smallest_effect < lo and hi < smallest_effect:
            outcome = "as predicted"  # (an interval that also excludes 0: a difference below the margin)
        elif lo > 0 or hi < 0:
            outcome = "difference, none predicted"
        else:
            outcome = "inconclusive"
    out["outcome"] = outcome
    if outcome == "inconclusive":
        out["seeds_needed"] = seeds_needed(diff, smallest_effect=smallest_effect, expect=expect)
    return out
