"""What an evaluation reports beyond the paper's tables, for the unanswerable sets: abstention on unanswerable rows
and the retrieved setting's split by retrieval outcome. Both read the per-question records (summary entries) or
the summary only (report sections), and add nothing to a set that has neither unanswerable nor retrieved rows, so
the paper's reports stay as they were.

* **Abstention** (a set with ``answerable`` false rows, ``curriculum build --unanswerable-fraction``): a sample
  abstains when its final answer is the set's abstention answer (:func:`rag_curriculum.rewards.is_abstention`,
  normalised as the official EM; the set's manifest records the answer). Over the samples of the set:
  **precision** = abstentions on unanswerable rows / all abstentions (0 when the model never abstains),
  **recall** = abstentions on unanswerable rows / samples of unanswerable rows, F1 their harmonic mean, and
  ``false_abstention_rate`` = abstentions on answerable rows / samples of answerable rows. Every question has the
  same ``m`` samples, so recall is also the mean over unanswerable questions of their abstention rate.
  ``by_answerable`` gives the usual scores on each kind of row.
* **Retrieval outcome** (rows with ``gold_recall``, ``curriculum build --setting retrieved``): ``by_retrieval``
  groups the questions by whether the top-N passages held ``all`` of the gold passages (recall@N = 1), ``some``
  or ``none`` (recall@N = 0), and gives each group's scores; unanswerable rows (no gold passage by construction) are
  left out of it.

>>> recs = [{"answerable": False, "sample_abstained": [True, False]}, {"answerable": True, "sample_abstained": [True, False]}]
>>> a = abstention_scores(recs)
>>> a["precision"], a["recall"], a["false_abstention_rate"], a["n_unanswerable"]
(0.5, 0.5, 0.5, 1)
>>> retrieval_outcome(1.0), retrieval_outcome(0.5), retrieval_outcome(0.0), retrieval_outcome(None)
('all', 'some', 'none', None)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .._titles import _cells, dataset_title, pct, setting_title
from ..cards import md_table
from ._scoring import summarize

__all__ = ["RETRIEVAL_OUTCOMES", "abstention_scores", "add_outcomes", "outcome_sections", "retrieval_outcome"]

RETRIEVAL_OUTCOMES = ("all", "some", "none")
_ANSWERABILITY = ("answerable", "unanswerable")


def retrieval_outcome(gold_recall: float | None) -> str | None:
    """``all`` / ``some`` / ``none`` of the gold passages among the retrieved ones; None outside the retrieved
    setting."""
    if gold_recall is None:
        return None
    if gold_recall >= 1.0 - 1e-9:
        return "all"
    return "none" if gold_recall <= 1e-9 else "some"


def _answerable(rec: Mapping[str, Any]) -> bool:
    return rec.get("answerable") is not False  # missing (old results, old shards): answerable


def abstention_scores(records: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Abstention precision, recall, F1 and the false-abstention rate over the samples of ``records`` (see the
    module docstring); None when no record is unanswerable."""
    if all(_answerable(r) for r in records):
        return None
    tp = abstained = unanswerable = answerable = false_abstained = 0
    for r in records:
        flags = [bool(a) for a in (r.get("sample_abstained") or [])]
        if _answerable(r):
            answerable += len(flags)
            false_abstained += sum(flags)
        else:
            unanswerable += len(flags)
            tp += sum(flags)
        abstained += sum(flags)
    precision = tp / abstained if abstained else 0.0
    recall = tp / unanswerable if unanswerable else 0.0
    return {
        "precision": precision, "recall": recall,
        "f1": 2 * precision * recall / (precision + recall) if precision + recall else 0.0,
        "false_abstention_rate": false_abstained / answerable if answerable else 0.0,
        "n_unanswerable": sum(1 for r in records if not _answerable(r)),
        "n_answerable": sum(1 for r in records if _answerable(r)),
        "n_abstained_samples": abstained, "n_samples": answerable + unanswerable,
    }


def add_outcomes(entry: dict[str, Any], records: Sequence[Mapping[str, Any]]) -> None:
    """Add ``abstention`` and ``by_answerable`` (a set with unanswerable rows) and ``by_retrieval`` (rows with
    ``gold_recall``) to a summary entry, in place; nothing for the paper's sets."""
    abstention = abstention_scores(records)
    if abstention is not None:
        entry["abstention"] = abstention
        groups = {"answerable": [r for r in records if _answerable(r)],
                  "unanswerable": [r for r in records if not _answerable(r)]}
        entry["by_answerable"] = {k: summarize(v) for k, v in groups.items() if v}
    outcomes: dict[str, list[Mapping[str, Any]]] = {}
    for r in records:
        if not _answerable(r):  # an unanswerable row shows no gold passage by construction: not a retrieval outcome
            continue
        o = retrieval_outcome(r.get("gold_recall"))
        if o is not None:
            outcomes.setdefault(o, []).append(r)
    if outcomes:
        entry["by_retrieval"] = {k: summarize(outcomes[k]) for k in RETRIEVAL_OUTCOMES if k in outcomes}


def outcome_sections(summary: Mapping[str, Any]) -> list[str]:
    """The report's sections for abstention and retrieval outcome (Markdown lines; empty for the paper's sets)."""
    lines: list[str] = []
    abst_rows, answ_rows, retr_rows = [], [], []
    for setting, d, model, e in _cells(summary["evals"]):
        where = [setting_title(setting), dataset_title(d), model]
        a = e.get("abstention")
        if a:
            abst_rows.append([*where, a["n_answerable"], a["n_unanswerable"], pct(a["precision"]),
                              pct(a["recall"]), pct(a["f1"]), pct(a["false_abstention_rate"])])
            for k in _ANSWERABILITY:
                b = (e.get("by_answerable") or {}).get(k)
                if b:
                    answ_rows.append([*where, k, b["n_questions"], pct(b["answer_f1"]),
                                      pct(b["citation_f1"]), pct(b["joint_f1"])])
        for k in RETRIEVAL_OUTCOMES:
            b = (e.get("by_retrieval") or {}).get(k)
            if b:
                retr_rows.append([*where, k, b["n_questions"], pct(b["answer_f1"]), pct(b["citation_f1"]),
                                  pct(b["joint_f1"])])
    if abst_rows:
        lines += ["## Abstention", "",
                  "On sets with unanswerable rows (every gold passage replaced by a distractor; the expected answer is "
                  "the abstention answer). Precision: share of the abstaining samples that were on unanswerable "
                  "rows; recall: share of the samples of unanswerable rows that abstained; false abstentions: share "
                  "of the samples of answerable rows that abstained.", "",
                  md_table(["Eval setting", "Dataset", "Model", "Answerable", "Unanswerable", "Abstention P",
                            "Abstention R", "Abstention F1", "False abstentions"], abst_rows), "",
                  md_table(["Eval setting", "Dataset", "Model", "Rows", "Questions", "Answer F1", "Citation F1",
                            "Joint F1"], answ_rows), ""]
    if retr_rows:
        lines += ["## By retrieval outcome", "",
                  "Retrieved setting: questions whose top-N passages held all, some or none of the gold passages "
                  "(gold recall@N = 1, between, 0).", "",
                  md_table(["Eval setting", "Dataset", "Model", "Gold retrieved", "Questions", "Answer F1",
                            "Citation F1", "Joint F1"], retr_rows), ""]
    return lines
