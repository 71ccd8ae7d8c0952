"""Answer and citation metrics: SQuAD / HotpotQA exact match and F1, citation precision / recall / F1, joint F1.

Answer metrics reproduce the official evaluation scripts exactly:

* ``normalize_answer`` is SQuAD v1.1's (also HotpotQA's ``hotpot_evaluate_v1.py``, FlashRAG's and Search-R1's):
  lower-case, drop ASCII punctuation (``string.punctuation``), drop the articles ``a`` / ``an`` / ``the``, collapse
  whitespace. Nothing else: no Unicode folding, no number normalisation.
* ``answer_f1`` is HotpotQA's ``f1_score``: token-overlap F1 of the normalised strings, and 0 when either side is
  ``yes`` / ``no`` / ``noanswer`` and the two differ.
* Both take the maximum over the gold answer and its aliases, as MuSiQue's official evaluation does
  (``metric_max_over_ground_truths``).

One corner of the official formula is kept on purpose: a gold answer that normalises to the empty string (such as
``"The"``) gets F1 0 even from an identical prediction, while exact match gives 1.

>>> normalize_answer("The  Hateful Eight!")
'hateful eight'
>>> exact_match("the United States", ["U.S.", "United States"])
1.0
>>> answer_f1("Boeing B-29 bomber", ["Boeing B-29 Superfortress bomber"])
0.8571428571428571
>>> answer_f1("no", ["Norway", "no"]), answer_f1("yes", ["no"]), answer_f1("yes sir", ["yes"])
(1.0, 0.0, 0.0)
>>> citation_scores(["Euro", "Ohio"], ["Euro", "Deh Bagh, Ravansar"])
CitationScores(precision=0.5, recall=0.5, f1=0.5)
>>> round(joint_f1(61.31, 44.89), 2)  # RAG-RL Table 4, HotpotQA baseline: joint F1 51.83
51.83
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import NamedTuple, overload

from rag_plumbing import normalize_answer

from .errors import ConfigError

__all__ = [
    "CitationScores",
    "aggregate",
    "answer_f1",
    "answer_scores",
    "citation_key",
    "citation_scores",
    "exact_match",
    "joint_f1",
    "normalize_answer",
]

_YES_NO = frozenset(("yes", "no", "noanswer"))
# Characters stripped from both ends of a citation before comparing: whitespace, quotes, markdown emphasis.
_CITATION_STRIP = " \t\r\n\"'`*\u201c\u201d\u2018\u2019\u00ab\u00bb"
_WS_RUN_RE = re.compile(r"[ \t\r\n]+")


def _as_answers(answers: str | Iterable[str]) -> Iterable[str]:
    return (answers,) if isinstance(answers, str) else answers


def _f1_normalized(pred: str, pred_tokens: list[str], gold: str) -> float:
    """HotpotQA ``f1_score`` on already normalised strings (same arithmetic, so the same floats)."""
    if pred == gold:
        return 1.0 if pred else 0.0  # identical non-empty token lists give exactly 1.0 in the official formula
    if pred in _YES_NO or gold in _YES_NO:
        return 0.0
    gold_tokens = gold.split()
    if not pred_tokens or not gold_tokens:
        return 0.0
    counts: dict[str, int] = {}
    for t in gold_tokens:
        counts[t] = counts.get(t, 0) + 1
    num_same = 0
    for t in pred_tokens:
        c = counts.get(t, 0)
        if c:
            counts[t] = c - 1
            num_same += 1
    if num_same == 0:
        return 0.0
    precision = 1.0 * num_same / len(pred_tokens)
    recall = 1.0 * num_same / len(gold_tokens)
    return (2 * precision * recall) / (precision + recall)


def exact_match(prediction: str, answers: str | Iterable[str]) -> float:
    """1.0 when the normalised prediction equals the normalised gold answer or one of its aliases, else 0.0.

    ``answers`` is the gold answer followed by its aliases (a single string is accepted too).

    >>> exact_match("The Hateful Eight", ["Hateful Eight"]), exact_match("1952.", "1952"), exact_match("x", [])
    (1.0, 1.0, 0.0)
    """
    pred = normalize_answer(prediction)
    for gold in _as_answers(answers):
        if normalize_answer(gold) == pred:
            return 1.0
    return 0.0


def answer_f1(prediction: str, answers: str | Iterable[str]) -> float:
    """HotpotQA token F1 (with its yes / no / noanswer rule), maximum over the gold answer and its aliases.

    >>> answer_f1("Richland County, SC", ["Richland County", "Richland County, South Carolina"])
    0.8
    >>> answer_f1("", ["anything"]), answer_f1("anything", [])
    (0.0, 0.0)
    """
    pred = normalize_answer(prediction)
    pred_tokens = pred.split()
    best = 0.0
    for gold in _as_answers(answers):
        f1 = _f1_normalized(pred, pred_tokens, normalize_answer(gold))
        if f1 > best:
            best = f1
            if best == 1.0:
                break
    return best


def answer_scores(prediction: str, answers: str | Iterable[str]) -> tuple[float, float]:
    """``(exact_match, answer_f1)`` in one pass (each answer normalised once).

    >>> answer_scores("Abdul Kalam", ["A.P.J. Abdul Kalam", "Abdul Kalam"])
    (1.0, 1.0)
    """
    return _scores_normalized(prediction, [normalize_answer(g) for g in _as_answers(answers)])


def _scores_normalized(prediction: str, golds: Sequence[str]) -> tuple[float, float]:
    """``(exact_match, answer_f1)`` against gold answers already normalised."""
    pred = normalize_answer(prediction)
    pred_tokens = pred.split()
    em = 0.0
    best = 0.0
    for g in golds:
        if g == pred:
            em = 1.0
            if pred:  # F1 is 1.0 too, and cannot get higher
                return 1.0, 1.0
        f1 = _f1_normalized(pred, pred_tokens, g)
        if f1 > best:
            best = f1
    return em, best


@functools.lru_cache(maxsize=1 << 16)
def _normalized_answers(answers: tuple[str, ...]) -> tuple[str, ...]:
    """Normalised gold answers, cached: a reward sees each row's answers once per generation."""
    return tuple(normalize_answer(a) for a in answers)


@functools.lru_cache(maxsize=1 << 16)
def _label_keys(labels: tuple[str, ...]) -> frozenset[str]:
    """Citation keys of gold labels, cached like :func:`_normalized_answers`."""
    return frozenset(k for k in map(citation_key, labels) if k)


class CitationScores(NamedTuple):
    """Citation precision, recall and F1 (a tuple: ``p, r, f = citation_scores(...)`` works)."""

    precision: float
    recall: float
    f1: float


def citation_key(label: str) -> str:
    """The form citations are compared in: surrounding whitespace, quotes and ``*`` stripped, inner whitespace
    (spaces, tabs, newlines) collapsed. Case is kept: real rows hold labels that differ only by case (a gold
    "Brass Buttons" beside a distractor "Brass buttons"), so comparison is otherwise exact. The parser, given the
    row's labels, maps a citation that differs from a label only by case to that label when no other label
    could be meant.

    >>> citation_key('  "Deh Bagh,  Ravansar" ')
    'Deh Bagh, Ravansar'
    """
    s = label.strip(_CITATION_STRIP)
    if "  " in s or "\t" in s or "\n" in s or "\r" in s:
        s = _WS_RUN_RE.sub(" ", s)
    return s


def _citation_counts(cited: Iterable[str], gold: Iterable[str]) -> tuple[int, int, int]:
    """(true positives, distinct cited, distinct gold) over citation keys; empty keys are ignored."""
    c = {k for k in map(citation_key, cited) if k}
    g = {k for k in map(citation_key, gold) if k}
    return len(c & g), len(c), len(g)


def _prf(tp: int, n_cited: int, n_gold: int) -> CitationScores:
    precision = tp / n_cited if n_cited else 0.0
    recall = tp / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return CitationScores(precision, recall, f1)


def citation_scores(cited: Iterable[str], gold: Iterable[str]) -> CitationScores:
    """Precision, recall and F1 of the cited labels against the gold labels.

    Labels are compared with :func:`citation_key` (exactly, up to surrounding whitespace and quotes), and each
    distinct label counts once; parse completions with the row's labels so that citations are spelled as labels. As in HotpotQA's supporting-fact metric, an empty side gives 0 (so citing
    nothing scores 0, and so does an empty gold list).

    >>> citation_scores(["Euro (2)", "Ohio", "Ohio"], ["Euro (2)", "Kent"])
    CitationScores(precision=0.5, recall=0.5, f1=0.5)
    >>> citation_scores([], ["Kent"])
    CitationScores(precision=0.0, recall=0.0, f1=0.0)
    """
    return _prf(*_citation_counts(cited, gold))


def joint_f1(answer_f1: float, citation_f1: float) -> float:
    """Joint F1: the harmonic mean of answer F1 and citation F1 (0 when both are 0).

    Applied to *aggregated* answer and citation F1 it gives the joint F1 of the RAG-RL tables; :func:`aggregate`
    does that for you.

    >>> joint_f1(1.0, 0.5), joint_f1(0.0, 0.0)
    (0.6666666666666666, 0.0)
    """
    s = answer_f1 + citation_f1
    return 2 * answer_f1 * citation_f1 / s if s > 0 else 0.0


@overload
def aggregate(values: Sequence[float], groups: Iterable[Hashable] | None = None) -> float: ...
@overload
def aggregate(
    values: Sequence[Mapping[str, float]], groups: Iterable[Hashable] | None = None
) -> dict[str, float]: ...
def aggregate(values, groups=None):
    """Mean over the samples of each question, then mean over questions.

    ``values`` holds one score per sample (a float, or a mapping of metric name to float); ``groups`` gives the
    question of each sample (None: every sample is its own question, i.e. the plain mean). With mappings the result
    maps each metric to its aggregate, and when ``answer_f1`` and ``citation_f1`` are both present ``joint_f1`` is
    set to the harmonic mean of *their aggregates*, which is how the RAG-RL paper reports joint F1 (a per-sample
    ``joint_f1`` in the input is replaced).

    >>> aggregate([1.0, 0.0, 0.5], ["q1", "q1", "q2"])
    0.5
    >>> aggregate([{"answer_f1": 1.0, "citation_f1": 0.5}, {"answer_f1": 0.0, "citation_f1": 0.5}])
    {'answer_f1': 0.5, 'citation_f1': 0.5, 'joint_f1': 0.5}
    """
    values = list(values)
    if not values:
        raise ConfigError("aggregate() needs at least one value")
    group_list = list(range(len(values))) if groups is None else list(groups)
    if len(group_list) != len(values):
        raise ConfigError(f"got {len(values)} values but {len(group_list)} groups")
    if isinstance(values[0], Mapping):
        keys = list(values[0])
        out = {k: _grouped_mean([float(v[k]) for v in values], group_list) for k in keys}
        if "answer_f1" in out and "citation_f1" in out:
            out["joint_f1"] = joint_f1(out["answer_f1"], out["citation_f1"])
        return out
    return _grouped_mean([float(v) for v in values], group_list)


def _grouped_mean(values: list[float], groups: list[Hashable]) -> float:
    sums: dict[Hashable, list[float]] = {}
    for v, g in zip(values, groups, strict=True):
        acc = sums.get(g)
        if acc is None:
            sums[g] = [v, 1.0]
        else:
            acc[0] += v
            acc[1] += 1.0
    return math.fsum(s / n for s, n in sums.values()) / len(sums)
