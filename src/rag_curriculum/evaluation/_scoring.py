"""Scoring: completions -> per-sample scores -> one record per question -> aggregates and breakdowns.

Definitions (RAG-RL section 4.5; every number is a fraction in [0, 1], tables show it x 100):

* Each of the ``m`` completions of a question is parsed with the parser of the row's output format
  (``rag-rl``: :func:`rag_curriculum.rewards.parse_completion`, given the row's passage labels).
* Per sample: **answer F1** is HotpotQA's token F1, maximum over the gold answer and its aliases
  (:func:`~rag_curriculum.rewards.answer_f1`), **exact match** likewise; **citation precision / recall / F1** compare
  the set of cited labels with the gold labels (:func:`~rag_curriculum.rewards.citation_scores`); the sample's
  **joint F1** is the harmonic mean of its answer F1 and citation F1. Scores are computed from what the parser
  extracts even when the format is invalid; with ``strict_format`` an invalid sample scores 0 on everything.
* Per question: the mean of each sample score over the question's ``m`` samples, and ``format_valid``, the
  fraction of its samples that keep the format.
* Per group of questions (a dataset and setting, or one of its breakdowns): the mean over questions of the
  per-question means. ``joint_f1`` is then the harmonic mean of the group's ``answer_f1`` and ``citation_f1``,
  as the paper's tables report it (Table 1: 2 * 68.71 * 78.54 / (68.71 + 78.54) = 73.30);
  ``joint_f1_per_sample`` is the mean of the per-sample joint F1 (never larger than ``joint_f1``).
* Sample-level breakdowns (by format validity) take, for each question, the mean over its samples in the group,
  then the mean over the questions that have at least one such sample.

>>> r = score_row({"answers": ["Paris"], "gold_labels": ["France"], "passages": [{"label": "France"}]},
...               ["<reasoning></reasoning><answer>Final answer: Paris\\nSupporting passages: France</answer>",
...                "Final answer: Lyon"])
>>> r["answer_f1"], r["citation_f1"], r["format_valid"], r["sample_reason"]
(0.5, 0.5, 0.5, [None, 'missing_tag'])
>>> summarize([r])["joint_f1"], summarize([r])["joint_f1_per_sample"]
(0.5, 0.5)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any

from ..errors import ConfigError
from ..rewards import (
    ABSTENTION_ANSWER,
    EVAL_SCORERS,
    get_parser,
    is_abstention,
    joint_f1,
    passage_labels,
    score_completion,
)
from ..rewards import aggregate as _aggregate

__all__ = [
    "BREAKDOWNS",
    "METRICS",
    "SAMPLE_METRICS",
    "breakdown",
    "breakdown_by_format",
    "eval_scorers",
    "format_reasons",
    "paired_difference",
    "question_key",
    "score_row",
    "scorer_of",
    "summarize",
    "summarize_samples",
]

#: Per-sample scores, in the order they are reported; each becomes a ``sample_<name>`` list column.
SAMPLE_METRICS = ("answer_f1", "exact_match", "citation_precision", "citation_recall", "citation_f1", "joint_f1")

#: What a summary holds for a group of questions (besides ``n_questions`` and ``n_samples``).
METRICS = ("answer_f1", "citation_f1", "joint_f1", "joint_f1_per_sample", "exact_match", "citation_precision",
           "citation_recall", "format_valid")

#: Question-level breakdowns: summary key -> per-question column.
BREAKDOWNS = {"by_hops": "hops", "by_level": "level", "by_bucket": "bucket"}

_ZERO = dict.fromkeys(SAMPLE_METRICS, 0.0)


def _sample(text: str, answers: Sequence[str], gold: Sequence[str], labels: Sequence[str] | None,
            parse: Callable[..., Any], strict_format: bool, answerable: bool = True,
            abstention_answer: str = ABSTENTION_ANSWER) -> dict[str, Any]:
    """One completion's record: what the one scorer (:func:`rag_curriculum.rewards.score_completion`) parsed and
    its :data:`SAMPLE_METRICS`, all 0 for an invalid sample under ``strict_format``; ``abstained`` when its final
    answer is the abstention answer."""
    s = score_completion(text, answers, gold, labels, parse=parse, answerable=answerable)
    out: dict[str, Any] = {"answer": s.answer, "citations": list(s.citations), "valid": s.valid, "reason": s.reason,
                           "abstained": is_abstention(s.answer, abstention_answer)}
    if strict_format and not s.valid:
        out.update(_ZERO)
        return out
    out.update(answer_f1=s.answer_f1, exact_match=s.exact_match, citation_precision=s.citation_precision,
               citation_recall=s.citation_recall, citation_f1=s.citation_f1,
               joint_f1=joint_f1(s.answer_f1, s.citation_f1))
    return out


def _mean(values: Sequence[float]) -> float:
    return _aggregate(list(values)) if values else 0.0


def score_row(row: Mapping[str, Any], completions: Sequence[str], *, strict_format: bool = False,
              parse: Callable[..., Any] | None = None, abstention_answer: str = ABSTENTION_ANSWER) -> dict[str, Any]:
    """One question's record: its completions, what was parsed from each, the per-sample scores
    (``sample_<metric>`` lists) and their means over the samples (``answer_f1``, ..., ``joint_f1_per_sample``,
    ``format_valid``), and which samples abstained (``sample_abstained``: the final answer is
    ``abstention_answer``). ``parse`` defaults to the parser of the row's ``template`` (``rag-rl``); a row whose
    ``answerable`` is false is scored as an unanswerable row (citing nothing is right)."""
    if not completions:
        raise ConfigError(f"{row.get('id', '?')}: no completions to score")
    if parse is None:
        parse = get_parser(row.get("template"))
    answers = list(row["answers"])
    gold = list(row["gold_labels"])
    labels = passage_labels(row.get("passages"), row.get("extra_info"))
    answerable = row.get("answerable") is not False  # missing (shards built before the field): answerable
    samples = [_sample(t, answers, gold, labels, parse, strict_format, answerable, abstention_answer)
               for t in completions]
    rec: dict[str, Any] = {
        "m": len(completions),
        "completions": list(completions),
        "sample_answer": [s["answer"] for s in samples],
        "sample_citations": [s["citations"] for s in samples],
        "sample_valid": [s["valid"] for s in samples],
        "sample_reason": [s["reason"] for s in samples],
        "sample_abstained": [s["abstained"] for s in samples],
    }
    for k in SAMPLE_METRICS:
        rec[f"sample_{k}"] = [s[k] for s in samples]
    for k in SAMPLE_METRICS:
        rec["joint_f1_per_sample" if k == "joint_f1" else k] = _mean(rec[f"sample_{k}"])
    rec["format_valid"] = _mean([1.0 if v else 0.0 for v in rec["sample_valid"]])
    return rec


def summarize_samples(records: Iterable[Mapping[str, Any]],
                      keep: Callable[[Mapping[str, Any], int], bool] | None = None) -> dict[str, Any] | None:
    """Aggregate the samples of ``records`` for which ``keep(record, j)`` holds (all when None): the mean over
    each question's kept samples, then over the questions with at least one; ``joint_f1`` from the aggregated
    answer and citation F1. None when no sample is kept."""
    values: list[dict[str, float]] = []
    groups: list[int] = []
    for q, rec in enumerate(records):
        for j in range(len(rec["sample_answer_f1"])):
            if keep is not None and not keep(rec, j):
                continue
            v = {k: float(rec[f"sample_{k}"][j]) for k in SAMPLE_METRICS if k != "joint_f1"}
            v["joint_f1_per_sample"] = float(rec["sample_joint_f1"][j])
            v["format_valid"] = 1.0 if rec["sample_valid"][j] else 0.0
            values.append(v)
            groups.append(q)
    if not values:
        return None
    agg = _aggregate(values, groups)  # sets joint_f1 = harmonic mean of the aggregated answer and citation F1
    out: dict[str, Any] = {k: agg[k] for k in METRICS}
    out["n_questions"] = len(set(groups))
    out["n_samples"] = len(values)
    return out


def summarize(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The aggregate of a group of questions (see the module docstring); zeros for an empty group."""
    out = summarize_samples(records)
    if out is None:
        return {**dict.fromkeys(METRICS, 0.0), "n_questions": 0, "n_samples": 0}
    return out


#: The percentile bootstrap of :func:`bootstrap_intervals`: resamples and seed (fixed: the same records give the
#: same intervals).
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 0
#: The metrics a summary gives intervals for.
INTERVAL_METRICS = ("answer_f1", "citation_f1", "joint_f1", "exact_match")


def bootstrap_intervals(records: Sequence[Mapping[str, Any]], *, resamples: int = BOOTSTRAP_RESAMPLES,
                        seed: int = BOOTSTRAP_SEED, level: float = 0.95) -> dict[str, list[float]]:
    """Percentile bootstrap intervals (``level``, default 95%) of the summary's answer, citation and joint F1 and
    exact match, resampling questions with replacement (a question's samples stay together, as the aggregate
    averages them first); joint F1 is recomputed from each resample's answer and citation F1, as the paper's is.
    Empty for no questions.

    >>> recs = [{"sample_answer_f1": [a], "sample_citation_f1": [1.0], "sample_exact_match": [a]} for a in (0, 1, 1, 0)]
    >>> bootstrap_intervals(recs)["answer_f1"]
    [0.0, 1.0]
    """
    import numpy as np

    if not records:
        return {}
    per_q = _per_question(records)
    n = len(records)
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    means = _resampled_metrics(per_q, idx)
    return {k: _percentiles(means[k], level) for k in INTERVAL_METRICS}


def _per_question(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Each question's mean answer F1, citation F1 and exact match over its samples (numpy arrays, in order)."""
    import numpy as np

    return {k: np.array([float(np.mean(v)) if (v := r.get(f"sample_{k}")) is not None and len(v) else 0.0
                         for r in records])
            for k in ("answer_f1", "citation_f1", "exact_match")}


def _resampled_metrics(per_q: Mapping[str, Any], idx: Any) -> dict[str, Any]:
    """The :data:`INTERVAL_METRICS` of each resample (a row of question positions ``idx``): the means of the
    per-question scores, joint F1 the harmonic mean of the resample's answer and citation F1."""
    import numpy as np

    means = {k: v[idx].mean(axis=-1) for k, v in per_q.items()}
    a, c = means["answer_f1"], means["citation_f1"]
    with np.errstate(invalid="ignore", divide="ignore"):
        means["joint_f1"] = np.where(a + c > 0, 2 * a * c / np.where(a + c > 0, a + c, 1.0), 0.0)
    return means


def _percentiles(values: Any, level: float) -> list[float]:
    import numpy as np

    lo, hi = 100 * (1 - level) / 2, 100 * (1 + level) / 2
    return [round(float(np.percentile(values, lo)), 6), round(float(np.percentile(values, hi)), 6)]


def question_key(record: Mapping[str, Any]) -> tuple[str, str]:
    """What pairs a question across models and settings: its dataset and id (an evaluation set's ids are unique,
    and the distractor and ideal sets built from one dev split give a question the same id)."""
    return (str(record.get("data_source")), str(record.get("id")))


def paired_difference(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]], *,
                      resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED,
                      level: float = 0.95) -> dict[str, Any] | None:
    """The difference ``a - b`` of the :data:`INTERVAL_METRICS` over the questions both arms scored (paired by
    :func:`question_key`, in ``a``'s order), with a paired percentile bootstrap interval: each resample draws
    question positions with replacement and scores both arms on the same draw, so what the two arms share (the
    questions' difficulty) cancels. Joint F1 is recomputed per arm from its resample's answer and citation F1, as
    the summary's is. None when the arms share no question.

    Returns:
        ``{"n_questions": n, "difference": {metric: a - b}, "intervals": {metric: [low, high]}}`` (fractions).

    >>> a = [{"data_source": "d", "id": str(i), "sample_answer_f1": [x], "sample_citation_f1": [x],
    ...       "sample_exact_match": [x]} for i, x in enumerate((0.2, 0.4, 0.9))]
    >>> b = [{**r, "sample_answer_f1": [r["sample_answer_f1"][0] - 0.1]} for r in a]
    >>> d = paired_difference(a, b)
    >>> round(d["difference"]["answer_f1"], 6), d["intervals"]["answer_f1"]
    (0.1, [0.1, 0.1])
    """
    import numpy as np

    by_key = {question_key(r): r for r in b}
    pairs = [(r, by_key[k]) for r in a if (k := question_key(r)) in by_key]
    if not pairs:
        return None
    qa = _per_question([p[0] for p in pairs])
    qb = _per_question([p[1] for p in pairs])
    n = len(pairs)
    whole = np.arange(n)[None, :]
    point = {k: float(_resampled_metrics(qa, whole)[k][0] - _resampled_metrics(qb, whole)[k][0])
             for k in INTERVAL_METRICS}
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    ma, mb = _resampled_metrics(qa, idx), _resampled_metrics(qb, idx)
    return {"n_questions": n, "difference": {k: round(point[k], 6) for k in INTERVAL_METRICS},
            "intervals": {k: _percentiles(ma[k] - mb[k], level) for k in INTERVAL_METRICS}}


def _sort_key(k: Hashable) -> tuple:
    return (k is None, not isinstance(k, int | float), k if isinstance(k, int | float) else str(k))


def breakdown(records: Sequence[Mapping[str, Any]], column: str) -> dict[str, dict[str, Any]]:
    """:func:`summarize` per value of a question-level ``column`` (such as ``hops``); keys are strings, in
    natural order; questions whose value is missing (None) are left out."""
    groups: dict[Hashable, list[Mapping[str, Any]]] = {}
    for rec in records:
        v = rec.get(column)
        if v is not None:
            groups.setdefault(v, []).append(rec)
    return {str(k): summarize(groups[k]) for k in sorted(groups, key=_sort_key)}


def breakdown_by_format(records: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """:func:`summarize_samples` over the samples that keep the format (``valid``) and those that do not
    (``invalid``); a class with no sample is left out."""
    out = {}
    for name, flag in (("valid", True), ("invalid", False)):
        s = summarize_samples(records, lambda rec, j, flag=flag: bool(rec["sample_valid"][j]) is flag)
        if s is not None:
            out[name] = s
    return out


def format_reasons(records: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """How many samples broke the format, per reason (most frequent first, then by name)."""
    c = Counter(r for rec in records for r, v in zip(rec["sample_reason"], rec["sample_valid"], strict=True)
                if not v)
    return {k: c[k] for k in sorted(c, key=lambda k: (-c[k], str(k)))}


def eval_scorers() -> list[Any]:
    """The methods' parts of the evaluation (:data:`rag_curriculum.rewards.EVAL_SCORERS`), by name; one that cannot
    be imported is left out with a warning naming it."""
    return list(EVAL_SCORERS.loaded().values())


def scorer_of(es: Any) -> tuple[Any, str | None]:
    """The method whose format the evaluation set ``es`` is in, and that format; ``(None, None)`` for a set of no
    method's format (RAG-RL's, scored as every set is)."""
    for scorer in eval_scorers():
        if variant := scorer.variant_of(es):
            return scorer, variant
    return None, None
