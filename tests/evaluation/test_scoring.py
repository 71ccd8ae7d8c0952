"""Scripted completions, every aggregate and breakdown checked against values worked out by hand.

Three questions, two samples each (the expected per-sample scores are in the comments of ``COMPLETIONS``):

=====  ====  =====  ============  ========================================  ======  ======  ======
row    hops  level  bucket        sample                                    ans F1  cit F1  valid
=====  ====  =====  ============  ========================================  ======  ======  ======
A      2     1      answerable    A1 "Paris", cites France, Europe          1       1       yes
                                  A2 "Paris, France", cites France          2/3     2/3     yes
B      3     2      unanswerable  B1 "Final answer: blue whale" (no tags)   1       0       no
                                  B2 "whale", cites Whale, Desert           2/3     2/5     yes
C      2     2      (none)        C1 "1953", cites Queen, Crown             0       1       yes
                                  C2 "1952", cites Queen, </answer> missing 1       2/3     no
=====  ====  =====  ============  ========================================  ======  ======  ======
"""

from __future__ import annotations

import pickle
from fractions import Fraction as F

import pytest

from rag_curriculum.evaluation import (
    METRICS,
    breakdown,
    breakdown_by_format,
    format_reasons,
    score_row,
    summarize,
    summarize_entry,
)
from rag_curriculum.rewards import joint_f1, score_completion


def fmt(answer: str, cites: str) -> str:
    return f"<reasoning>\nthinking\n</reasoning>\n<answer>\nFinal answer: {answer}\nSupporting passages: {cites}\n</answer>"


def passages(*labels: str) -> list[dict]:
    return [{"label": lb, "title": lb, "text": "...", "is_gold": False} for lb in labels]


ROWS = [
    {"id": "A", "answers": ["Paris"], "gold_labels": ["France", "Europe"], "passages": passages("France", "Europe", "Asia"),
     "hops": 2, "level": 1, "bucket": "answerable", "template": "rag-rl"},
    {"id": "B", "answers": ["Blue whale"], "gold_labels": ["Whale", "Ocean", "Krill"],
     "passages": passages("Whale", "Ocean", "Krill", "Desert"), "hops": 3, "level": 2, "bucket": "unanswerable",
     "template": "rag-rl"},
    {"id": "C", "answers": ["1952", "nineteen fifty-two"], "gold_labels": ["Queen", "Crown"],
     "passages": passages("Queen", "Crown", "Jam"), "hops": 2, "level": 2, "bucket": None, "template": "rag-rl"},
]

COMPLETIONS = {
    # a=1 em=1; P=1 R=1 c=1; joint 1
    "A": [fmt("Paris", "France, Europe"),
          # a: P=1/2 R=1 -> 2/3, em 0; cites France: P=1 R=1/2 -> 2/3; joint 2/3
          fmt("Paris, France", "France")],
    # invalid (missing_tag): a=1 em=1; no citations -> P=R=c=0; joint 0
    "B": ["Final answer: blue whale",
          # a: P=1 R=1/2 -> 2/3, em 0; cites Whale, Desert: P=1/2 R=1/3 -> 2/5; joint 1/2
          fmt("whale", "Whale, Desert")],
    # a=0 em=0; P=R=c=1; joint 0
    "C": [fmt("1953", "Queen, Crown"),
          # invalid (unclosed_tag): a=1 em=1; cites Queen: P=1 R=1/2 -> 2/3; joint 4/5
          "<reasoning>r</reasoning>\n<answer>\nFinal answer: 1952\nSupporting passages: Queen"],
}

SAMPLES = {  # (answer F1, EM, citation P, citation R, citation F1, joint F1, valid) per sample
    "A": [(1, 1, 1, 1, 1, 1, True), (F(2, 3), 0, 1, F(1, 2), F(2, 3), F(2, 3), True)],
    "B": [(1, 1, 0, 0, 0, 0, False), (F(2, 3), 0, F(1, 2), F(1, 3), F(2, 5), F(1, 2), True)],
    "C": [(0, 0, 1, 1, 1, 0, True), (1, 1, 1, F(1, 2), F(2, 3), F(4, 5), False)],
}
NAMES = ("answer_f1", "exact_match", "citation_precision", "citation_recall", "citation_f1", "joint_f1")

# Per-question means over the two samples, by hand.
QUESTION = {
    "A": {"answer_f1": F(5, 6), "exact_match": F(1, 2), "citation_precision": F(1), "citation_recall": F(3, 4),
          "citation_f1": F(5, 6), "joint_f1_per_sample": F(5, 6), "format_valid": F(1)},
    "B": {"answer_f1": F(5, 6), "exact_match": F(1, 2), "citation_precision": F(1, 4), "citation_recall": F(1, 6),
          "citation_f1": F(1, 5), "joint_f1_per_sample": F(1, 4), "format_valid": F(1, 2)},
    "C": {"answer_f1": F(1, 2), "exact_match": F(1, 2), "citation_precision": F(1), "citation_recall": F(3, 4),
          "citation_f1": F(5, 6), "joint_f1_per_sample": F(2, 5), "format_valid": F(1, 2)},
}


def h(a: F, c: F) -> F:
    return 2 * a * c / (a + c) if a + c else F(0)


def expect(answer_f1, citation_f1, *, jps, em, p, r, valid, nq, ns) -> dict:
    return {"answer_f1": answer_f1, "citation_f1": citation_f1, "joint_f1": h(F(answer_f1), F(citation_f1)),
            "joint_f1_per_sample": jps, "exact_match": em, "citation_precision": p, "citation_recall": r,
            "format_valid": valid, "n_questions": nq, "n_samples": ns}


def assert_same(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for k, v in want.items():
        assert got[k] == pytest.approx(float(v), abs=1e-12), k


@pytest.fixture(scope="module")
def records() -> list[dict]:
    out = []
    for row in ROWS:
        rec = {k: row[k] for k in ("id", "hops", "level", "bucket")}
        rec.update(score_row(row, COMPLETIONS[row["id"]]))
        out.append(rec)
    return out


def test_per_sample_scores(records):
    for rec in records:
        for j, want in enumerate(SAMPLES[rec["id"]]):
            for name, value in zip(NAMES, want[:6], strict=True):
                assert rec[f"sample_{name}"][j] == pytest.approx(float(value), abs=1e-12), (rec["id"], j, name)
            assert rec["sample_valid"][j] is want[6]
    assert [r["sample_reason"] for r in records] == [[None, None], ["missing_tag", None], [None, "unclosed_tag"]]
    assert records[0]["sample_answer"] == ["Paris", "Paris, France"]
    assert records[1]["sample_citations"] == [[], ["Whale", "Desert"]]
    assert records[2]["completions"] == COMPLETIONS["C"] and records[2]["m"] == 2


def test_per_question_means(records):
    for rec in records:
        for k, v in QUESTION[rec["id"]].items():
            assert rec[k] == pytest.approx(float(v), abs=1e-12), (rec["id"], k)
        assert "joint_f1" not in rec  # joint F1 is defined on aggregates only


def test_overall(records):
    want = expect(F(13, 18), F(28, 45), jps=F(89, 180), em=F(1, 2), p=F(3, 4), r=F(5, 9), valid=F(2, 3), nq=3, ns=6)
    got = summarize(records)
    assert_same(got, want)
    assert set(METRICS) <= set(got)
    # the paper's joint F1 (harmonic mean of the averages) is not the mean of per-sample joint F1
    assert got["joint_f1"] == pytest.approx(2 * (13 / 18) * (28 / 45) / (13 / 18 + 28 / 45))
    assert got["joint_f1"] > got["joint_f1_per_sample"]


def test_breakdown_by_hops(records):
    got = breakdown(records, "hops")
    assert list(got) == ["2", "3"]
    assert_same(got["2"], expect(F(2, 3), F(5, 6), jps=F(37, 60), em=F(1, 2), p=F(1), r=F(3, 4), valid=F(3, 4),
                                 nq=2, ns=4))
    assert_same(got["3"], expect(F(5, 6), F(1, 5), jps=F(1, 4), em=F(1, 2), p=F(1, 4), r=F(1, 6), valid=F(1, 2),
                                 nq=1, ns=2))


def test_breakdown_by_level(records):
    got = breakdown(records, "level")
    assert list(got) == ["1", "2"]
    assert_same(got["1"], expect(F(5, 6), F(5, 6), jps=F(5, 6), em=F(1, 2), p=F(1), r=F(3, 4), valid=F(1), nq=1,
                                 ns=2))
    assert_same(got["2"], expect(F(2, 3), F(31, 60), jps=F(13, 40), em=F(1, 2), p=F(5, 8), r=F(11, 24),
                                 valid=F(1, 2), nq=2, ns=4))


def test_breakdown_by_bucket_leaves_out_questions_without_one(records):
    got = breakdown(records, "bucket")
    assert list(got) == ["answerable", "unanswerable"]
    assert got["answerable"]["n_questions"] == 1 and got["unanswerable"]["n_questions"] == 1
    assert got["unanswerable"]["citation_f1"] == pytest.approx(0.2)
    assert got["unanswerable"]["joint_f1"] == pytest.approx(float(h(F(5, 6), F(1, 5))))


def test_breakdown_by_format(records):
    got = breakdown_by_format(records)
    assert list(got) == ["valid", "invalid"]
    # valid samples A1, A2, B2, C1: per question A (5/6, 5/6), B (2/3, 2/5), C (0, 1)
    assert_same(got["valid"], expect(F(1, 2), F(67, 90), jps=F(4, 9), em=F(1, 6), p=F(5, 6), r=F(25, 36),
                                     valid=F(1), nq=3, ns=4))
    # invalid samples B1, C2: B (1, 0), C (1, 2/3)
    assert_same(got["invalid"], expect(F(1), F(1, 3), jps=F(2, 5), em=F(1), p=F(1, 2), r=F(1, 4), valid=F(0),
                                       nq=2, ns=2))
    assert format_reasons(records) == {"missing_tag": 1, "unclosed_tag": 1}


def test_summary_entry_holds_every_breakdown(records):
    entry = summarize_entry(records, model="m", dataset="musique", setting="distractor")
    assert entry["model"] == "m" and entry["n_questions"] == 3 and entry["m"] == 2
    assert entry["overall"] == summarize(records)
    assert entry["by_hops"] == breakdown(records, "hops")
    assert entry["by_level"] == breakdown(records, "level")
    assert entry["by_bucket"] == breakdown(records, "bucket")
    assert entry["by_format"] == breakdown_by_format(records)
    assert entry["format_reasons"] == {"missing_tag": 1, "unclosed_tag": 1}
    no_buckets = summarize_entry([{**r, "bucket": None} for r in records], model="m", dataset="d", setting="ideal")
    assert "by_bucket" not in no_buckets


def test_strict_format_scores_invalid_samples_zero():
    rec = score_row(ROWS[1], COMPLETIONS["B"], strict_format=True)
    assert rec["sample_answer_f1"] == [0.0, pytest.approx(2 / 3)]
    assert rec["sample_answer"][0] == "blue whale"  # still reported
    assert rec["answer_f1"] == pytest.approx(1 / 3)


def test_score_completion_uses_labels_for_commas():
    s = score_completion(fmt("Deh Bagh", "Deh Bagh, Ravansar, Euro"), answers=["Deh Bagh"],
                         gold_labels=["Deh Bagh, Ravansar"], labels=["Deh Bagh, Ravansar", "Euro"])
    assert list(s.citations) == ["Deh Bagh, Ravansar", "Euro"]
    assert (s.citation_precision, s.citation_recall) == (0.5, 1.0)
    rec = score_row({"answers": ["Deh Bagh"], "gold_labels": ["Deh Bagh, Ravansar"],
                     "passages": [{"label": "Deh Bagh, Ravansar"}, {"label": "Euro"}]},
                    [fmt("Deh Bagh", "Deh Bagh, Ravansar, Euro")])
    assert rec["sample_citations"] == [["Deh Bagh, Ravansar", "Euro"]]
    assert rec["citation_precision"] == 0.5 and rec["citation_recall"] == 1.0


def test_paper_table1_joint_is_the_harmonic_mean_of_the_averages():
    assert round(100 * joint_f1(0.6871, 0.7854), 2) == 73.30
    assert round(100 * joint_f1(0.4718, 0.6448), 2) == 54.49


def test_empty_group_and_no_completions():
    assert summarize([])["n_questions"] == 0
    with pytest.raises(ValueError, match="no completions"):
        score_row(ROWS[0], [])


def test_records_survive_pickle(records):
    assert pickle.loads(pickle.dumps(records)) == records


def test_table_bolds_every_value_that_prints_as_the_best():
    """Two models tied at the printed precision are both bolded (the reader cannot tell them apart), and the best
    is found per evaluation setting (the paper bolds per block of Table 1); a column where every model prints the
    same value has no best, so nothing is bolded there (a table of zeros bolded every 0.00)."""
    from rag_curriculum.evaluation import main_table

    def entry(model, setting, a, c):
        return {"model": model, "dataset": "musique", "setting": setting,
                "overall": {"answer_f1": a, "citation_f1": c, "joint_f1": float(h(F(a), F(c)))}}

    summary = {"evals": [entry("x", "distractor", 0.68712, 0.5), entry("y", "distractor", 0.68708, 0.6),
                         entry("z", "distractor", 0.5, 0.5),
                         entry("x", "ideal", 0.2, 0.9), entry("y", "ideal", 0.3, 0.1), entry("z", "ideal", 0.0, 0.0)]}
    header, rows = main_table(summary)
    assert header == ["Eval setting", "Model", "MuSiQue Answer F1", "MuSiQue Citation F1", "MuSiQue Joint F1"]
    assert rows == [["Distractor", "x", "**68.71**", "50.00", "57.88"],
                    ["", "y", "**68.71**", "**60.00**", "**64.06**"],
                    ["", "z", "50.00", "50.00", "50.00"],
                    ["Ideal Retrieval", "x", "20.00", "**90.00**", "**32.73**"],
                    ["", "y", "**30.00**", "10.00", "15.00"],
                    ["", "z", "0.00", "0.00", "0.00"]]
    zeros = {"evals": [entry("x", "ideal", 0.0, 0.0), entry("y", "ideal", 0.0, 0.0)]}
    assert not any("**" in c for row in main_table(zeros)[1] for c in row)


def test_bootstrap_intervals_hold_the_estimate_and_recompute_joint_f1_per_resample():
    import random

    from rag_curriculum.evaluation._scoring import bootstrap_intervals

    rnd = random.Random(0)
    recs = [{"sample_answer_f1": [rnd.random() for _ in range(3)], "sample_citation_f1": [rnd.random() for _ in range(3)],
             "sample_exact_match": [float(rnd.random() > 0.7) for _ in range(3)]} for _ in range(40)]
    ci = bootstrap_intervals(recs)
    means = {k: sum(sum(r[f"sample_{k}"]) / 3 for r in recs) / 40 for k in ("answer_f1", "citation_f1")}
    a, c = means["answer_f1"], means["citation_f1"]
    for k, v in {**means, "joint_f1": 2 * a * c / (a + c)}.items():
        assert ci[k][0] < v < ci[k][1], (k, v, ci[k])
    assert bootstrap_intervals(recs) == ci  # seeded: the same records give the same intervals
    assert bootstrap_intervals([recs[0]] * 5)["answer_f1"][0] == pytest.approx(bootstrap_intervals([recs[0]] * 5)["answer_f1"][1])
