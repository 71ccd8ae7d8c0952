"""A model's level profile: the pass rate it reaches on the same questions at several synthetic levels, and what it
means for GRPO before any training.

A GRPO group of ``G`` samples teaches something (an *informative* group: a non-zero advantage) when its training
rewards differ: their spread (max - min) is above the dynamic sampler's ``max_spread`` (0: not all equal). A profile
(``curriculum profile``: ``profile.parquet``, one line per question and level, and ``profile.json``) scores each
sample with the training reward, so each question's samples at each level are an empirical reward distribution, and
:func:`spread_probability` the exact probability that ``G`` draws from it (with replacement) are informative. For
distinct values with frequencies ``q_v`` and tolerance 0 it is ``1 - sum_v q_v^G``; a pass/fail reward right with
probability ``p`` gives ``1 - p^G - (1 - p)^G`` (:func:`informative_probability`). A profile made before rewards were
recorded reads as a pass/fail one (its pass rate). So

- :func:`level_intervals` gives each level's mean pass rate, mean reward and expected informative fraction (of the
  reward, of each of its components alone, and of the pass rate alone) with paired bootstrap intervals (the same
  resampled questions at every level), and the change from the first level;
- :class:`LevelProfile` answers, for any question and level, its pass rate and expected informative fraction
  (:meth:`LevelProfile.row_informative`): the question's own where it was profiled, else the level's (over the
  profiled questions), interpolated linearly between profiled levels for a level that was not profiled;
- :meth:`LevelProfile.informative` over a curriculum's rows is the schedule's expected informative fraction, and
  :meth:`LevelProfile.calibrated_level` the level whose pass rate is nearest a target, and
  :meth:`LevelProfile.band_level` the one inside a band nearest its middle (the calibrated schedule);
- :class:`RewardPosterior` refreshes the prediction from the rollouts: per question and level a Dirichlet posterior
  over the reward values (prior: the recorded samples; each observed group's rewards added), whose
  posterior-predictive informative probability is :func:`dirichlet_spread_probability`; :class:`DriftFactor`
  follows the whole model's drift, pooled over questions (a Gamma-Poisson factor on every forecast).

>>> informative_probability(0.5, 8), informative_probability(1.0, 8), round(informative_probability(0.1, 8), 4)
(0.9921875, 0.0, 0.5695)
>>> expected_informative([0.0, 0.5, 1.0], 2)
0.16666666666666666
>>> spread_probability([4.0, -1.0], 8) == informative_probability(0.5, 8), spread_probability([1.0, 1.5, 3.0], 2, 0.5)
(True, 0.4444444444444444)
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._plumbing import file_sha256
from ..errors import ConfigError, ProfileError

log = logging.getLogger("rag_curriculum.profile")

#: The files of a profile's ``--out``: one line per question and level, and the summary (written last: a profile is
#: complete when it exists).
PROFILE_TABLE = "profile.parquet"
PROFILE_SUMMARY = "profile.json"
PROFILE_PLOT = "profile.png"
#: The levels profiled unless asked otherwise ("K": each question's own top level).
DEFAULT_LEVELS = "1,2,4,8,K"
#: The group size whose informative fraction a profile reports unless asked (RAG-RL: 7 rollouts per question).
DEFAULT_GROUP_SIZE = 7
#: The pass rate a calibrated curriculum aims at (AdaRFT's target success; the informative fraction's peak).
DEFAULT_TARGET = 0.5
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0

__all__ = [
    "BOOTSTRAP_RESAMPLES", "DEFAULT_GROUP_SIZE", "DEFAULT_LEVELS", "DEFAULT_TARGET", "PROFILE_PLOT",
    "PROFILE_SUMMARY", "PROFILE_TABLE", "DriftFactor", "LevelProfile", "RewardPosterior", "dirichlet_spread_probability",
    "expected_informative", "informative_probability",
    "level_intervals", "parse_levels", "read_profile", "schedules_section", "spread_probability",
]


def informative_probability(p: float, group_size: int) -> float:
    """The probability that a group of ``group_size`` samples, each right with probability ``p``, is mixed (some
    right, some wrong): ``1 - p^G - (1 - p)^G``; 0 for ``G = 1``."""
    if group_size < 1:
        raise ConfigError(f"group size must be >= 1, got {group_size}")
    if not 0.0 <= p <= 1.0:
        raise ConfigError(f"a pass rate must be in 0..1, got {p}")
    return max(0.0, 1.0 - p ** group_size - (1.0 - p) ** group_size)


def spread_probability(values: Iterable[float], group_size: int, max_spread: float = 0.0) -> float:
    """The probability that ``group_size`` draws with replacement from ``values`` (a question's sample rewards: their
    empirical distribution) have a spread ``max - min`` above ``max_spread``: the dynamic sampler's informative
    group (``dynamic.max_spread`` of a train recipe; 0: not all equal, TRL's ``std > 0``). Exact: with distinct
    values ``v_1 < ... < v_m``, a group's spread is at most ``t`` exactly when all its draws lie in ``[v_i, v_i + t]``
    for its minimum ``v_i``, and ``P(min = v_i, all <= v_i + t) = P(all in [v_i, v_i + t]) - P(all in
    (v_i, v_i + t])``; summed over ``i`` and taken from 1. With ``t = 0``: ``1 - sum_i q_i^G``. NaN values are
    left out (the sampler ignores them); no value or ``G < 2``: 0.

    >>> spread_probability([0, 0, 1, 1], 2), round(spread_probability([0, 1, 2], 2, max_spread=1.0), 6)
    (0.5, 0.222222)
    """
    if group_size < 1:
        raise ConfigError(f"group size must be >= 1, got {group_size}")
    if not max_spread >= 0.0:
        raise ConfigError(f"max_spread must be >= 0, got {max_spread}")
    vals = sorted(float(v) for v in values if v is not None and not math.isnan(float(v)))
    n = len(vals)
    if n == 0 or group_size < 2:
        return 0.0
    distinct: list[float] = []
    counts: list[int] = []
    for v in vals:
        if distinct and v == distinct[-1]:
            counts[-1] += 1
        else:
            distinct.append(v)
            counts.append(1)
    return _spread(distinct, counts, max_spread, lambda a: (a / n) ** group_size)


def _spread(distinct: Sequence[float], counts: Sequence[float], max_spread: float, all_in: Any) -> float:
    """1 - P(spread <= max_spread) over sorted ``distinct`` values with weights ``counts``, ``all_in(a)`` the
    probability that every draw falls in a set of total weight ``a`` (the window counting of
    :func:`spread_probability`)."""
    cum = [0.0]
    for c in counts:
        cum.append(cum[-1] + c)
    within, j = 0.0, 0
    for i, v in enumerate(distinct):
        j = max(j, i)
        while j + 1 < len(distinct) and distinct[j + 1] - v <= max_spread:  # the sampler's test: spread <= max_spread
            j += 1
        within += all_in(cum[j + 1] - cum[i]) - all_in(cum[j + 1] - cum[i + 1])
    return min(1.0, max(0.0, 1.0 - within))


def dirichlet_spread_probability(counts: Mapping[float, float], group_size: int, max_spread: float = 0.0) -> float:
    """The posterior-predictive probability that the next ``group_size`` rewards have a spread above ``max_spread``
    when the reward's distribution over its values has a Dirichlet posterior with pseudo-counts ``counts`` (``{value:
    a_v}``, total ``A``): the draws are a Polya urn (Dirichlet-multinomial), so all ``G`` draws fall in a set of
    total count ``a_S`` with probability ``a_S^(G) / A^(G)`` (rising factorials), and the window counting of
    :func:`spread_probability` applies unchanged (tolerance 0: ``1 - sum_v a_v^(G) / A^(G)``). As the counts grow
    with their proportions fixed it tends to :func:`spread_probability` of those proportions. No count or ``G < 2``:
    0.

    >>> dirichlet_spread_probability({0.0: 1, 1.0: 1}, 2)  # a uniform Beta: E[1 - p^2 - (1 - p)^2]
    0.33333333333333337
    """
    if group_size < 1:
        raise ConfigError(f"group size must be >= 1, got {group_size}")
    if not max_spread >= 0.0:
        raise ConfigError(f"max_spread must be >= 0, got {max_spread}")
    items = sorted((float(v), float(a)) for v, a in counts.items() if a > 0 and not math.isnan(float(v)))
    total = sum(a for _, a in items)
    if not items or group_size < 2:
        return 0.0

    def all_in(a: float) -> float:
        out = 1.0
        for k in range(group_size):
            out *= (a + k) / (total + k)
        return out if a > 0 else 0.0

    return _spread([v for v, _ in items], [a for _, a in items], max_spread, all_in)


class RewardPosterior:
    """Each question's reward distribution at each level, refreshed from the rollouts: a Dirichlet posterior over its
    reward values whose prior pseudo-counts are the profile's recorded sample rewards for that question and level
    (each counting ``prior_weight``), and each observed group's rewards added (a value not seen before becomes a
    new category). :meth:`predict` is its posterior-predictive informative probability
    (:func:`dirichlet_spread_probability`): the profile's prediction kept where the model is.

    A question and level without recorded rewards (a pass/fail profile, a level that was not profiled) starts from
    no prior: :meth:`predict` is None until a group of it is observed.

    >>> post = RewardPosterior(None)
    >>> post.predict("q1", 2, 2) is None
    True
    >>> post.observe("q1", 2, [0.0, 1.0]); post.predict("q1", 2, 2)
    0.33333333333333337
    """

    def __init__(self, profile: Any, *, prior_weight: float = 1.0) -> None:
        if not prior_weight >= 0.0:
            raise ConfigError(f"prior_weight must be >= 0, got {prior_weight}")
        self.profile = profile
        self.prior_weight = float(prior_weight)
        self._counts: dict[tuple[str, int], dict[float, float]] = {}
        self._observed: set[tuple[str, int]] = set()  # the questions and levels a group has been added to

    def counts(self, row_id: Any, level: int) -> dict[float, float]:
        """The pseudo-counts ``{reward value: count}`` of question ``row_id`` at ``level`` (prior plus observed)."""
        key = (str(row_id), int(level))
        if key not in self._counts:
            prior: dict[float, float] = {}
            recorded = (getattr(self.profile, "rewards", None) or {}).get(key, ())
            for v in recorded:
                if v is not None and not math.isnan(float(v)) and self.prior_weight > 0:
                    prior[float(v)] = prior.get(float(v), 0.0) + self.prior_weight
            self._counts[key] = prior
        return self._counts[key]

    def observe(self, row_id: Any, level: int, rewards: Iterable[float]) -> None:
        """Add a group's rewards (NaN left out, as the sampler leaves them out) to question ``row_id``'s at
        ``level``."""
        counts = self.counts(row_id, level)
        self._observed.add((str(row_id), int(level)))
        for v in rewards:
            if v is not None and not math.isnan(float(v)):
                counts[float(v)] = counts.get(float(v), 0.0) + 1.0

    def observed(self, row_id: Any, level: int) -> bool:
        """Whether a group of question ``row_id`` at ``level`` has been added (its posterior is not the prior)."""
        return (str(row_id), int(level)) in self._observed

    def state_dict(self) -> dict[str, Any]:
        """The observed questions' pseudo-counts (prior plus groups), as JSON: ``[[id, level, [[value, count],
        ...]], ...]``, sorted; the others are the profile's prior, made again."""
        return {"prior_weight": self.prior_weight,
                "observed": [[qid, lv, [[v, c] for v, c in sorted(self._counts[(qid, lv)].items())]]
                             for qid, lv in sorted(self._observed)]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s counts exactly (the prior weight is the saved one)."""
        self.prior_weight = float(state["prior_weight"])
        self._counts, self._observed = {}, set()
        for qid, lv, counts in state["observed"]:
            key = (str(qid), int(lv))
            self._counts[key] = {float(v): float(c) for v, c in counts}
            self._observed.add(key)

    def predict(self, row_id: Any, level: int, group_size: int, max_spread: float = 0.0) -> float | None:
        """The posterior-predictive probability that the next group of ``group_size`` is informative (spread above
        ``max_spread``); None with neither a prior nor an observation."""
        counts = self.counts(row_id, level)
        if not counts:
            return None
        return dirichlet_spread_probability(counts, group_size, max_spread)


class DriftFactor:
    """How far the model has moved from its profile, from the rollouts: a factor ``r`` on every forecast, the
    posterior mean of a Gamma-Poisson model in which the informative groups a step shows are a Poisson count with
    mean ``r`` times the sum of their forecasts, ``r`` with a Gamma prior of mean 1 worth ``prior_groups`` groups,
    and older steps discounted by ``decay`` per step (the model keeps moving):

        r = (prior_groups + M) / (prior_groups + F),   M = sum over past steps of decay^age x informative groups,
                                                        F = the same sum of the forecasts those groups had.

    A question's own posterior (:class:`RewardPosterior`) only moves when the question comes back; a curriculum
    shows most questions once an epoch, so when the whole model drifts (its samples grow alike as it learns) only a
    factor pooled over every question can follow. Forecasts times ``r`` are clipped to 1.

    >>> d = DriftFactor(decay=1.0, prior_groups=2.0)
    >>> d.factor()
    1.0
    >>> d.observe([False, False], [0.5, 0.5]); d.factor()
    0.6666666666666666
    >>> d.factor(prior_mean=0.5)  # its prior centred on another factor: (2 x 0.5 + 0) / (2 + 1)
    0.3333333333333333
    """

    def __init__(self, *, decay: float = 0.9, prior_groups: float = 2.0) -> None:
        if not 0.0 <= decay <= 1.0:
            raise ConfigError(f"drift decay must be in [0, 1], got {decay}")
        if not prior_groups > 0.0:
            raise ConfigError(f"drift prior_groups must be > 0, got {prior_groups}")
        self.decay = float(decay)
        self.prior_groups = float(prior_groups)
        self.informative = 0.0  # M: discounted informative groups seen
        self.forecast = 0.0  # F: discounted forecasts those groups had

    def factor(self, prior_mean: float = 1.0) -> float:
        """The posterior-mean factor ``r`` on the next step's forecasts. ``prior_mean``: the Gamma prior's mean
        (1: the profile is right), worth ``prior_groups`` groups: ``(prior_groups x prior_mean + M) /
        (prior_groups + F)``; a level's factor shrunk toward the factor pooled over every level takes that as its
        prior mean (:class:`~rag_curriculum.train.controllers.InformativeLevels`)."""
        return (self.prior_groups * prior_mean + self.informative) / (self.prior_groups + self.forecast)

    def observe(self, informative: Iterable[bool], forecasts: Iterable[float]) -> None:
        """One step's groups: whether each was informative, and the forecast each had before the factor."""
        self.informative = self.decay * self.informative + sum(float(bool(m)) for m in informative)
        self.forecast = self.decay * self.forecast + sum(float(q) for q in forecasts)

    def state_dict(self) -> dict[str, float]:
        return {"decay": self.decay, "prior_groups": self.prior_groups, "informative": self.informative,
                "forecast": self.forecast}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.decay, self.prior_groups = float(state["decay"]), float(state["prior_groups"])
        self.informative, self.forecast = float(state["informative"]), float(state["forecast"])


def expected_informative(pass_rates: Iterable[float], group_size: int) -> float:
    """The expected fraction of informative groups over questions with these pass rates (the mean of
    :func:`informative_probability`); 0.0 for none."""
    values = [informative_probability(p, group_size) for p in pass_rates]
    return sum(values) / len(values) if values else 0.0


def parse_levels(spec: str | Sequence[Any], K: int) -> list[int]:
    """``"1,2,4,8,K"`` to sorted distinct levels in ``1..K`` ("K" is ``K``). In the default spec a number above
    ``K`` is dropped (a dataset with ``K = 4`` is profiled at 1, 2, 4); a number the user gives above ``K`` is
    refused.

    >>> parse_levels("1,2,4,8,K", 20), parse_levels("1,2,4,8,K", 4), parse_levels("K,1", 10)
    ([1, 2, 4, 8, 20], [1, 2, 4], [1, 10])
    """
    items = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else [str(s).strip() for s in spec]
    if not items or any(not s for s in items):
        raise ConfigError(f"--levels {spec!r}: an empty level", hint="give levels as numbers or K, comma-separated, "
                          f"e.g. {DEFAULT_LEVELS}")
    default = isinstance(spec, str) and spec.replace(" ", "") == DEFAULT_LEVELS
    out = set()
    for s in items:
        if s.upper() == "K":
            out.add(K)
            continue
        try:
            level = int(s)
        except ValueError:
            raise ConfigError(f"--levels {spec!r}: {s!r} is not a level", hint="give numbers or K, e.g. "
                              f"{DEFAULT_LEVELS}") from None
        if level < 1 or level > K:
            if default and level > K:
                continue
            raise ConfigError(f"--levels {spec!r}: level {level} is outside 1..K (K = {K})",
                              hint=f"give levels from 1 to {K}, or K")
        out.add(level)
    return sorted(out)


def _percentile_interval(values: Any, level: float = 0.95) -> list[float]:
    import numpy as np

    lo, hi = 100 * (1 - level) / 2, 100 * (1 + level) / 2
    return [round(float(np.percentile(values, lo)), 6), round(float(np.percentile(values, hi)), 6)]


def level_intervals(pass_rates: Mapping[int, Sequence[float]], group_size: int, *,
                    rewards: Mapping[int, Sequence[Sequence[float]]] | None = None, max_spread: float = 0.0,
                    components: Mapping[str, Mapping[int, Sequence[Sequence[float]]]] | None = None,
                    resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED) -> dict[str, dict[str, Any]]:
    """Per level: the mean pass rate and expected informative fraction over the questions, each with a paired
    percentile bootstrap 95% interval, and the change in pass rate from the first level with its interval.
    ``pass_rates[level][q]`` is question ``q``'s pass rate at ``level``: every level lists the same questions in the
    same order, and each bootstrap resample draws one set of questions for every level (paired over questions).

    With ``rewards[level][q]`` (question ``q``'s sample rewards at ``level``) the informative fraction is the
    reward's (:func:`spread_probability` at ``max_spread``), with the mean reward (``reward``, ``reward_ci``) and
    the pass rate's own fraction beside it (``informative_pass_rate``: ``1 - p^G - (1 - p)^G``); ``components``
    (``{name: {level: [samples of each question]}}``) adds ``components[name]``: the informative fraction that
    component alone would give, with its interval. Without rewards the informative fraction is the pass rate's.

    >>> out = level_intervals({1: [1.0, 0.5, 0.5, 1.0], 4: [0.5, 0.0, 0.0, 0.5]}, 2, resamples=200)
    >>> out["1"]["pass_rate"], out["4"]["pass_rate"], out["4"]["change"], out["4"]["informative"]
    (0.75, 0.25, -0.5, 0.25)
    >>> r = level_intervals({1: [0.0, 0.0]}, 2, rewards={1: [[1.0, 3.0], [-1.0, -1.0]]}, resamples=50)["1"]
    >>> r["reward"], r["informative"], r["informative_pass_rate"]
    (0.5, 0.25, 0.0)
    """
    import numpy as np

    levels = sorted(pass_rates)
    if not levels:
        return {}
    n = len(pass_rates[levels[0]])
    if any(len(pass_rates[lv]) != n for lv in levels) or (
            rewards is not None and any(len(rewards[lv]) != n for lv in levels)):
        raise ConfigError("paired intervals need the same questions at every level")
    if n == 0:
        return {str(lv): {"questions": 0, "pass_rate": None, "pass_rate_ci": None, "informative": None,
                          "informative_ci": None, "change": None, "change_ci": None} for lv in levels}
    p = {lv: np.asarray(pass_rates[lv], dtype=float) for lv in levels}
    binary = {lv: np.clip(1.0 - p[lv] ** group_size - (1.0 - p[lv]) ** group_size, 0.0, 1.0) for lv in levels}
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    first = p[levels[0]][idx].mean(axis=1)

    def fractions(samples: Sequence[Sequence[float]]) -> Any:
        return np.asarray([spread_probability(s, group_size, max_spread) for s in samples], dtype=float)

    def figure(values: Any) -> tuple[float, list[float]]:
        return round(float(values.mean()), 6), _percentile_interval(values[idx].mean(axis=1))

    out = {}
    for lv in levels:
        boot_p = p[lv][idx].mean(axis=1)
        info = binary[lv] if rewards is None else fractions(rewards[lv])
        row: dict[str, Any] = {"questions": n, "pass_rate": round(float(p[lv].mean()), 6),
                               "pass_rate_ci": _percentile_interval(boot_p)}
        row["informative"], row["informative_ci"] = figure(info)
        row["change"] = round(float(p[lv].mean() - p[levels[0]].mean()), 6)
        row["change_ci"] = _percentile_interval(boot_p - first)
        if rewards is not None:
            means = np.asarray([float(np.nanmean(s)) if len(s) else np.nan for s in rewards[lv]], dtype=float)
            row["reward"], row["reward_ci"] = figure(np.nan_to_num(means))
            row["informative_pass_rate"], row["informative_pass_rate_ci"] = figure(binary[lv])
            row["components"] = {}
            for name, by_level in (components or {}).items():
                value, ci = figure(fractions(by_level[lv]))
                row["components"][name] = {"informative": value, "informative_ci": ci}
        out[str(lv)] = row
    return out


@dataclass
class LevelProfile:
    """A finished profile, read back (:func:`read_profile`): what it measured and what it answers.

    Attributes:
        path: the profile's folder.
        summary: ``profile.json``.
        rates: ``{(row id, level): pass rate}`` of every scored question and level.
        levels: the profiled levels, sorted.
        datasets: the datasets of its questions.
        model: the model that was profiled, as the run recorded it.
        rewards: ``{(row id, level): the samples' training rewards}``; None: a pass/fail profile (made before
            rewards were recorded, or built from pass rates), whose informative fraction is ``1 - p^G - (1 - p)^G``.
    """

    path: Path
    summary: dict[str, Any]
    rates: dict[tuple[str, int], float]
    levels: list[int]
    datasets: list[str]
    model: str | None
    rewards: dict[tuple[str, int], tuple[float, ...]] | None = None
    _level_rate: dict[int, float] = field(default_factory=dict, repr=False)
    _level_info: dict[tuple[int, int, float], float] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        by_level: dict[int, list[str]] = {}
        for (qid, lv) in self.rates:
            by_level.setdefault(lv, []).append(qid)
        self._by_level = by_level
        self._level_rate = {lv: sum(self.rates[(q, lv)] for q in v) / len(v) for lv, v in by_level.items()}
        self._own: dict[str, dict[int, float]] = {}
        for (qid, lv), p in self.rates.items():
            self._own.setdefault(qid, {})[lv] = p
        self._own_info: dict[tuple[str, int, float], dict[int, float]] = {}
        self._level_reward: dict[int, float] | None = None

    @property
    def group_size(self) -> int:
        """The G the profile was made for (its recipe's ``num_generations``, or ``--group-size``)."""
        return int(self.summary.get("group_size") or DEFAULT_GROUP_SIZE)

    @property
    def max_spread(self) -> float:
        """The spread a group must exceed to be informative that the profile was made for (0: not all equal)."""
        return float((self.summary.get("sampling") or {}).get("max_spread") or 0.0)

    @property
    def has_rewards(self) -> bool:
        """Whether each sample's training reward was recorded (else a pass/fail profile)."""
        return self.rewards is not None

    def profiled(self, row_id: str) -> bool:
        """Whether question ``row_id`` (a row's ``id``) was profiled."""
        return row_id in self._own

    def level_pass_rate(self, level: int) -> float:
        """The mean pass rate at ``level`` over the profiled questions (interpolated between profiled levels)."""
        return _interpolate(self._level_rate, level)

    def level_reward(self, level: int) -> float | None:
        """The mean training reward at ``level`` over the profiled questions (interpolated); None without rewards."""
        if self.rewards is None:
            return None
        if self._level_reward is None:
            self._level_reward = {lv: sum(_mean(self.rewards[(q, lv)]) for q in qs) / len(qs)
                                  for lv, qs in self._by_level.items()}
        return _interpolate(self._level_reward, level)

    def level_informative(self, level: int, group_size: int, max_spread: float = 0.0) -> float:
        """The expected informative fraction at ``level`` over the profiled questions (interpolated)."""
        key = (level, group_size, float(max_spread))
        if key not in self._level_info:
            at = {lv: sum(self._informative_at(q, lv, group_size, max_spread) for q in qs) / len(qs)
                  for lv, qs in self._by_level.items()}
            self._level_info[key] = _interpolate(at, level)
        return self._level_info[key]

    def pass_rate(self, row_id: str, level: int) -> tuple[float, bool]:
        """Question ``row_id``'s pass rate at ``level`` and whether it is its own (measured, or interpolated between
        its own measured levels) rather than the level's."""
        own = self._own.get(row_id)
        if own:
            return _interpolate(own, level), True
        return self.level_pass_rate(level), False

    def row_informative(self, row_id: str, level: int, group_size: int, max_spread: float = 0.0) -> float:
        """The probability that a GRPO group of ``group_size`` samples of question ``row_id`` at ``level`` is
        informative (its rewards' spread above ``max_spread``): the question's own (:func:`spread_probability` of
        its recorded rewards; a pass/fail profile: ``1 - p^G - (1 - p)^G``), interpolated linearly between its own
        profiled levels; a question that was not profiled, its level's (:meth:`level_informative`)."""
        own = self._own.get(row_id)
        if not own:
            return self.level_informative(level, group_size, max_spread)
        key = (row_id, group_size, float(max_spread))
        at = self._own_info.get(key)
        if at is None:
            at = self._own_info[key] = {lv: self._informative_at(row_id, lv, group_size, max_spread) for lv in own}
        return _interpolate(at, level)

    def informative(self, rows: Iterable[tuple[str, int]], group_size: int, max_spread: float = 0.0) -> float:
        """The expected informative fraction of a curriculum's rows ``(row id, level)``: the mean of
        :meth:`row_informative` (0.0 for no rows)."""
        values = [self.row_informative(row_id, level, group_size, max_spread) for row_id, level in rows]
        return sum(values) / len(values) if values else 0.0

    def _informative_at(self, row_id: str, level: int, group_size: int, max_spread: float) -> float:
        if self.rewards is not None:
            return spread_probability(self.rewards[(row_id, level)], group_size, max_spread)
        return informative_probability(self.rates[(row_id, level)], group_size)

    @property
    def reward_identity(self) -> list[list[Any]] | None:
        """The reward its samples were scored with, as :func:`rag_curriculum.rewards.reward_identity` gives it (None:
        a pass/fail profile)."""
        return (self.summary.get("reward") or {}).get("identity")

    def differences(self, *, rewards: Sequence[Sequence[Any]] | None = None,
                    sampling: Mapping[str, Any] | None = None) -> list[str]:
        """What differs between the profile and the training it is used for, one phrase each (empty: nothing):
        ``rewards`` as :func:`rag_curriculum.rewards.reward_identity` gives a recipe's, and ``sampling`` (any of
        ``temperature``, ``top_p``, ``max_tokens``, ``group_size``, ``max_spread``, ``template``; None: not
        compared)."""
        out = []
        if rewards is not None:
            mine, theirs = self.reward_identity, [list(r) for r in rewards]
            if mine is None:
                out.append(f"the profile scored the pass rate, not the reward {_reward_text(theirs)}")
            elif mine != theirs:
                out.append(f"the profile scored the reward {_reward_text(mine, theirs)}, not "
                           f"{_reward_text(theirs, mine)}")
        prof_sampling = {**(self.summary.get("sampling") or {}), "group_size": self.group_size}
        for key, value in (sampling or {}).items():
            if value is None or key not in prof_sampling or prof_sampling[key] is None:
                continue
            mine = prof_sampling[key]
            same = (abs(float(mine) - float(value)) <= 1e-9 if isinstance(value, (int, float))
                    and isinstance(mine, (int, float)) else mine == value)
            if not same:
                shown = [", ".join(map(str, v)) if isinstance(v, list | tuple) else v for v in (mine, value)]
                out.append(f"{key} {shown[0]} in the profile, {shown[1]} here")
        return out

    def check_use(self, *, rewards: Sequence[Sequence[Any]] | None = None,
                  sampling: Mapping[str, Any] | None = None, where: str = "this run") -> None:
        """Refuse a profile whose reward or sampling differ from those it is used with (:meth:`differences`), in one
        line naming every difference.

        Raises:
            ProfileError: something differs.
        """
        diffs = self.differences(rewards=rewards, sampling=sampling)
        if diffs:
            raise ProfileError(f"{self.path}: made for other settings than {where}'s: {'; '.join(diffs)}",
                               hint="profile again with the recipe you train (curriculum profile --recipe NAME), "
                                    "or use the profile's settings")

    def calibrated_level(self, row_id: str, K: int, target: float = DEFAULT_TARGET, *,
                         informative: float | None = None, group_size: int | None = None,
                         max_spread: float | None = None,
                         forecast: Callable[[int], float] | None = None) -> tuple[int, float]:
        """The profiled level (at most ``K``) whose pass rate for ``row_id`` (its own where profiled, else the
        level's) is nearest ``target``, with that pass rate. Ties go to the lowest such level, unless every tied
        pass rate is above the target (a question the model always answers is shown at its hardest tied level).

        With ``informative`` (a target on the informative fraction, e.g. 1.0: the most informative level): the level
        whose :meth:`row_informative` (G = ``group_size``, default the profile's; ``max_spread`` likewise) is nearest
        it; ties broken by the pass rate's rule above. ``forecast``: the informative probability of each level
        to use instead of :meth:`row_informative` (a forecast refreshed from the rollouts)."""
        candidates = self._candidates(K)
        if informative is not None:
            g = group_size or self.group_size
            t = self.max_spread if max_spread is None else max_spread
            if forecast is None:
                def forecast(lv: int) -> float:
                    return self.row_informative(row_id, lv, g, t)
            gap = {lv: abs(forecast(lv) - informative) for lv in candidates}
            best = min(gap.values())
            candidates = [lv for lv in candidates if gap[lv] - best <= 1e-12]
        level = self._nearest(row_id, candidates, target, target)
        return level, self.pass_rate(row_id, level)[0]

    def band_level(self, row_id: str, K: int, band: tuple[float, float]) -> tuple[int, float, str]:
        """The profiled level (at most ``K``) whose pass rate for ``row_id`` (its own where profiled, else the
        level's) lies inside ``band`` = ``(lo, hi)``, the one nearest the band's middle; with that pass rate and
        ``"inside"``. Without a level inside, the level nearest the band, and ``"above"`` (the model passes more
        often than ``hi`` there) or ``"below"``. Ties as :meth:`calibrated_level`'s: the lowest level, unless
        every tied pass rate is above the middle (inside) or the band (outside), then the highest. A band
        ``(t, t)`` places as ``target = t``."""
        lo, hi = band
        candidates = self._candidates(K)
        inside = [lv for lv in candidates if lo - 1e-12 <= self.pass_rate(row_id, lv)[0] <= hi + 1e-12]
        if inside:
            level = self._nearest(row_id, inside, (lo + hi) / 2, (lo + hi) / 2)
            return level, self.pass_rate(row_id, level)[0], "inside"
        level = self._nearest(row_id, candidates, lo, hi)
        p = self.pass_rate(row_id, level)[0]
        return level, p, "above" if p > hi else "below"

    def _candidates(self, K: int) -> list[int]:
        return [lv for lv in self.levels if lv <= K] or [min(self.levels)]

    def _nearest(self, row_id: str, levels: Sequence[int], lo: float, hi: float) -> int:
        """The level of ``levels`` whose pass rate is nearest ``[lo, hi]``; ties to the lowest, unless every tied
        rate is above ``hi`` (then the highest)."""
        rate = {lv: self.pass_rate(row_id, lv)[0] for lv in levels}
        scored = [(max(lo - rate[lv], rate[lv] - hi, 0.0), lv) for lv in levels]
        best = min(d for d, _ in scored)
        tied = [lv for d, lv in scored if d - best <= 1e-12]
        return max(tied) if all(rate[lv] > hi for lv in tied) else min(tied)


def _mean(values: Sequence[float]) -> float:
    vals = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    return sum(vals) / len(vals) if vals else 0.0


def _reward_text(identity: Sequence[Sequence[Any]], other: Sequence[Sequence[Any]] | None = None) -> str:
    """``2 x rag-rl-answer + rag-rl-format``; the built rewards themselves where ``other`` reads the same."""
    def text(ident: Sequence[Sequence[Any]]) -> str:
        return " + ".join(f"{w:g} x {n}" if w != 1 else str(n) for n, w, _ in ident)
    if other is not None and text(identity) == text(other):
        return " + ".join(f"{w:g} x {r}" if w != 1 else str(r) for _, w, r in identity)
    return text(identity)


def _interpolate(at: Mapping[int, float], level: int) -> float:
    """``at[level]``, or linear in the level between the nearest levels below and above; clamped outside them."""
    if level in at:
        return at[level]
    levels = sorted(at)
    if not levels:
        raise ConfigError("no level to interpolate from")
    if level <= levels[0]:
        return at[levels[0]]
    if level >= levels[-1]:
        return at[levels[-1]]
    hi = next(lv for lv in levels if lv > level)
    lo = max(lv for lv in levels if lv < level)
    w = (level - lo) / (hi - lo)
    return at[lo] * (1 - w) + at[hi] * w


#: The folders of the pass/fail profiles already announced (said once per process).
_ANNOUNCED: set[str] = set()


def read_profile(path: str | Path) -> LevelProfile:
    """A finished profile folder (``curriculum profile --out``), checked: its summary, and a table whose every
    profiled level has scored questions.

    A profile made before each sample's reward was recorded (no ``sample_reward`` column) reads as a pass/fail
    profile (said once per folder).

    Raises:
        ProfileError: no finished profile there (no ``profile.json``: not a profile, or one still running), an
            unreadable file, a level with no scored question, or a line without its rewards.
    """
    import pyarrow.parquet as pq

    folder = Path(path)
    summary_file, table_file = folder / PROFILE_SUMMARY, folder / PROFILE_TABLE
    if not summary_file.is_file():
        raise ProfileError(f"{folder}: no {PROFILE_SUMMARY}: not a finished level profile",
                           hint="pass the --out of a finished `curriculum profile` (run it again to finish one)")
    try:
        summary = json.loads(summary_file.read_text(encoding="utf-8"))
        recorded = summary.get("table_sha256") if isinstance(summary, dict) else None
        if recorded is not None and file_sha256(table_file) != recorded:
            raise ProfileError(f"{table_file}: its SHA-256 is not the one {PROFILE_SUMMARY} records: the table changed "
                               "after the profile was written", hint="run `curriculum profile` again into a new --out")
        with_rewards = "sample_reward" in pq.read_schema(table_file).names
        table = pq.read_table(table_file, columns=["id", "data_source", "level", "pass_rate", "skipped",
                                                   *(["sample_reward"] if with_rewards else [])])
    except (OSError, ValueError) as e:
        raise ProfileError(f"{folder}: unreadable profile ({e})", hint="run `curriculum profile` again") from None
    if summary.get("kind") != "level-profile":
        raise ProfileError(f"{summary_file}: kind {summary.get('kind')!r}, not a level profile",
                           hint="pass the --out of `curriculum profile`")
    rates: dict[tuple[str, int], float] = {}
    rewards: dict[tuple[str, int], tuple[float, ...]] | None = {} if with_rewards else None
    counts: dict[int, int] = dict.fromkeys((int(lv) for lv in summary.get("levels") or []), 0)
    cols = [table.column(c).to_pylist() for c in ("id", "level", "pass_rate", "skipped")]
    samples = table.column("sample_reward").to_pylist() if with_rewards else [None] * table.num_rows
    for i, (row_id, level, rate, skipped, got) in enumerate(zip(*cols, samples, strict=True)):
        if skipped is None and rate is not None:
            if not (isinstance(rate, float) and 0.0 <= rate <= 1.0 and not math.isnan(rate)):
                raise ProfileError(f"{table_file}: line {i}, field 'pass_rate' = {rate!r}: not in 0..1",
                                   hint="run `curriculum profile` again into a new --out")
            if rewards is not None:
                if not got or any(v is None or not math.isfinite(v) for v in got):
                    raise ProfileError(f"{table_file}: line {i}, field 'sample_reward' = {got!r}: not a list of "
                                       "finite rewards", hint="run `curriculum profile` again into a new --out")
                rewards[(row_id, int(level))] = tuple(got)
            rates[(row_id, int(level))] = rate
            counts[int(level)] = counts.get(int(level), 0) + 1
    present = set(cols[1])
    absent = [lv for lv in sorted(counts) if lv not in present]
    if absent:  # not one row of a level it lists, skipped or not: another profile's table, not a short context
        raise ProfileError(f"{table_file}: no row of level {absent[0]}, which {PROFILE_SUMMARY} lists: the table is "
                           "not this profile's (replaced or edited)", hint="run `curriculum profile` again into a "
                           "new --out")
    empty = [lv for lv, c in sorted(counts.items()) if c == 0]
    if empty:
        raise ProfileError(f"{table_file}: level {empty[0]} has no scored question (every prompt skipped)",
                           hint="profile again with a larger --max-model-len or without that level (--levels)")
    if not rates:
        raise ProfileError(f"{table_file}: no scored question", hint="run `curriculum profile` again")
    datasets = sorted({d for d in table.column("data_source").to_pylist() if d})
    model = ((summary.get("generation") or {}).get("fingerprint") or {}).get("generation", {}).get("model")
    if rewards is None and str(folder.resolve()) not in _ANNOUNCED:
        _ANNOUNCED.add(str(folder.resolve()))
        log.warning("%s: a profile without rewards (older): read as pass/fail, a group informative with "
                    "1 - p^G - (1-p)^G; profile again for the reward's", folder)
    return LevelProfile(folder, summary, rates, sorted(counts), datasets, model, rewards)


def schedules_section(record: Mapping[str, Any] | None) -> str:
    """The data card's section on a build's ``profile`` record (``curriculum build --profile``): each schedule's
    expected informative fraction for the profiled model, this build's, and the calibrated placement; nothing
    without a profile."""
    if not record:
        return ""
    g = record["group_size"]
    reward = record.get("reward")
    spread = record.get("max_spread") or 0.0
    if reward:
        names = " + ".join(f"{w:g} x {n}" if w != 1 else str(n) for n, w, _ in reward.get("identity") or [])
        what = (f"whose training rewards ({names}) are {'not all equal' if not spread else f'spread by more than {spread:g}'}"
                " (a non-zero advantage), from each question's sample rewards")
    else:
        what = "that are mixed (some right, some wrong: a non-zero advantage), 1 - p^G - (1 - p)^G of the pass rate"
    lines = [
        "", "## Informative groups before training", "",
        f"Expected share of GRPO groups of G = {g} samples {what}, from the level profile `{record['path']}` of "
        f"`{record.get('model') or 'the model'}` ({record['profiled_questions']} of this build's "
        f"{record['questions']} questions profiled; the others take their level's figure), each schedule over this "
        "build's questions:", "",
        "| schedule | informative (whole) | first quarter | last quarter | mean pass rate |",
        "|---|---|---|---|---|",
    ]
    rows = {**record["schedules"], "**this build**": record["this_build"]}
    for name, f in rows.items():
        lines.append(f"| {name} | {f['whole']:.3f} | {f['first_quarter']:.3f} | {f['last_quarter']:.3f} | "
                     f"{f['mean_pass_rate']:.3f} |")
    rates = ", ".join(f"{lv}: {p:.3f}" for lv, p in record["level_pass_rate"].items())
    start = record["adaptive_start"]
    lines += ["", f"Pass rate per profiled level: {rates}. An adaptive controller aiming at {start['target']:g} "
              f"starts where the model is: level {start['level']} (`adaptive.kwargs.start={start['level']}`)."]
    if record.get("calibrated"):
        c = record["calibrated"]
        levels = ", ".join(f"{lv}: {n}" for lv, n in c["levels"].items())
        placed = f"({c['own_rate']} by their own measured rate, {c['level_rate']} by their level's)"
        if c.get("band"):
            lo, hi = c["band"]
            outside = c["outside_band"]
            lines += ["", f"Calibrated (`--schedule calibrated --band {lo:g},{hi:g}`): each question at a profiled "
                      f"level whose pass rate lies in [{lo:g}, {hi:g}], the one nearest {(lo + hi) / 2:g} {placed}; "
                      f"{outside['above'] + outside['below']} with no level inside the band at the level nearest "
                      f"it ({outside['above']} above it, {outside['below']} below), easiest first. Rows per level: "
                      f"{levels}."]
        elif c.get("target_informative") is not None:
            lines += ["", f"Calibrated (`--schedule calibrated --target-informative {c['target_informative']:g}`): "
                      "each question at the profiled level whose predicted informative fraction is nearest "
                      f"{c['target_informative']:g} {placed}, easiest first. Rows per level: {levels}."]
        else:
            lines += ["", f"Calibrated (`--schedule calibrated --target {c['target']:g}`): each question at the "
                      f"profiled level whose pass rate is nearest {c['target']:g} {placed}, easiest first. Rows per "
                      f"level: {levels}."]
    return "\n".join(lines) + "\n"
