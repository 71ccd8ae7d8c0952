"""Paired differences and intervals where people look: the paired bootstrap against a reference written out by hand
on planted scores, and `curriculum eval` on evaluation sets built from ../shared/data with two scripted models in two
settings: the console table carries each value's 95% interval, the paired differences are printed and equal the
paired bootstrap of the results files, a 0 that comes from a format never kept is marked and explained in the same
table, and the overview plot draws the intervals as error bars."""

from __future__ import annotations

import json
import random

import numpy as np
import pyarrow.parquet as pq
import pytest
from conftest import HOTPOT_HUB
from typer.testing import CliRunner

from rag_curriculum.cli import app
from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
from rag_curriculum.evaluation import ZERO_MARK, ZERO_WHY, load_summary, paired_difference, zero_notes
from rag_curriculum.shards import read_rows


def _planted(n: int, seed: int, *, ids=None) -> list[dict]:
    rng = random.Random(seed)
    return [{"data_source": "hotpotqa", "id": f"q{i}" if ids is None else ids[i],
             "sample_answer_f1": [rng.random() for _ in range(3)],
             "sample_citation_f1": [rng.choice((0.0, 0.5, 1.0)) for _ in range(3)],
             "sample_exact_match": [float(rng.random() < 0.3) for _ in range(3)]} for i in range(n)]


def _reference(a: list[dict], b: list[dict], resamples: int = 1000, seed: int = 0) -> dict:
    """The paired percentile bootstrap as a reader would compute it: pair the questions by id, draw the question
    positions of each resample once, score both arms on that draw (joint F1: harmonic mean of the resample's
    answer and citation F1), and take the 2.5th and 97.5th percentiles of the differences."""
    b_by_id = {r["id"]: r for r in b}
    pairs = [(r, b_by_id[r["id"]]) for r in a if r["id"] in b_by_id]
    n = len(pairs)

    def mean(xs):
        return sum(xs) / len(xs)

    def scores(recs):
        a_ = mean([mean(r["sample_answer_f1"]) for r in recs])
        c_ = mean([mean(r["sample_citation_f1"]) for r in recs])
        return {"answer_f1": a_, "citation_f1": c_, "exact_match": mean([mean(r["sample_exact_match"]) for r in recs]),
                "joint_f1": 2 * a_ * c_ / (a_ + c_) if a_ + c_ else 0.0}

    draws = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    diffs: dict[str, list[float]] = {k: [] for k in ("answer_f1", "citation_f1", "joint_f1", "exact_match")}
    for row in draws:
        sa, sb = scores([pairs[i][0] for i in row]), scores([pairs[i][1] for i in row])
        for k in diffs:
            diffs[k].append(sa[k] - sb[k])
    whole_a, whole_b = scores([p[0] for p in pairs]), scores([p[1] for p in pairs])
    return {"n_questions": n, "difference": {k: whole_a[k] - whole_b[k] for k in diffs},
            "intervals": {k: [float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))] for k, v in diffs.items()}}


def test_paired_difference_equals_a_reference_bootstrap_on_planted_scores():
    a = _planted(30, 1)
    b = _planted(31, 2)  # one question more, in another order: pairing goes by id, not position
    b = b[:30][::-1] + [{**b[30], "id": "only-in-b"}]
    got = paired_difference(a, b)
    ref = _reference(a, b)
    assert got["n_questions"] == ref["n_questions"] == 30
    for k in ("answer_f1", "citation_f1", "joint_f1", "exact_match"):
        assert got["difference"][k] == pytest.approx(ref["difference"][k], abs=1e-6), k
        assert got["intervals"][k] == pytest.approx(ref["intervals"][k], abs=1e-6), k
        lo, hi = got["intervals"][k]
        assert lo <= got["difference"][k] <= hi


def test_the_same_resample_serves_both_arms():
    """Arm b is arm a with every answer F1 lowered by 0.05: whatever the questions drawn, the difference is 0.05,
    so the paired interval is that point, where two independent bootstraps would give a wide one."""
    a = _planted(40, 3)
    b = [{**r, "sample_answer_f1": [x - 0.05 for x in r["sample_answer_f1"]]} for r in a]
    got = paired_difference(a, b)
    assert got["difference"]["answer_f1"] == pytest.approx(0.05)
    assert got["intervals"]["answer_f1"] == pytest.approx([0.05, 0.05])
    assert got["intervals"]["citation_f1"] == [0.0, 0.0]
    assert paired_difference(a, _planted(3, 4, ids=["x", "y", "z"])) is None  # no question in common


@pytest.fixture(scope="module")
def sets(tmp_path_factory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("paired-sets")
    dirs = {}
    for setting in ("distractor", "ideal"):
        d = root / f"hotpotqa-{setting}"
        build_curriculum(BuildConfig(sources=[SourceSpec("hotpotqa", str(HOTPOT_HUB), n=12)], setting=setting,
                                     max_distractors=4, out=str(d)), command="test")
        dirs[setting] = d
    return dirs


def _scripts(tmp_path, sets) -> tuple:
    """Two scripted models over both sets: ``formatted`` keeps RAG-RL's format (right on even questions, with every
    gold label cited on questions divisible by 3; the ideal set a little better), ``bare`` answers right without
    the format (a base model's habit), so it cites nothing."""
    good, bare = {}, {}
    for setting, d in sets.items():
        for i, r in enumerate(read_rows(d)):
            key = r["prompt"][-1]["content"]
            answer = r["answers"][0] if i % 2 == 0 or (setting == "ideal" and i % 5 == 1) else "zzzq"
            cited = ", ".join(r["gold_labels"] if i % 3 == 0 else r["gold_labels"][:1])
            good[key] = (f"<reasoning>\nok\n</reasoning>\n<answer>\nFinal answer: {answer}\nSupporting passages: "
                         f"{cited}\n</answer>")
            bare[key] = f"Final answer: {r['answers'][0]}"
    paths = []
    for name, script in (("formatted", good), ("bare", bare)):
        p = tmp_path / f"{name}.json"
        p.write_text(json.dumps(script))
        paths.append(p)
    return tuple(paths)


@pytest.mark.slow
def test_eval_prints_intervals_paired_differences_and_explained_zeros(tmp_path, sets):
    formatted, bare = _scripts(tmp_path, sets)
    out = tmp_path / "eval"
    res = CliRunner().invoke(app, ["eval", "--model", f"bare={bare}", "--model", f"formatted={formatted}",
                                   "--data", str(sets["distractor"]), "--data", str(sets["ideal"]),
                                   "--backend", "scripted", "--samples", "2", "--out", str(out)],
                             env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    summary = load_summary(out)

    # the console table: every value with its interval, as table.md's intervals section gives them
    text = res.output
    for e in summary["evals"]:
        lo, hi = e["intervals"]["answer_f1"]
        assert f"[{100 * lo:.2f}, {100 * hi:.2f}]" in text
    assert "95% bootstrap interval" in text

    # the paired differences: formatted - bare in each setting, ideal - distractor for each model
    paired = summary["paired"]
    kinds = sorted((p["kind"], p.get("setting") or p.get("model"), p["a"], p["b"]) for p in paired)
    assert kinds == [("models", "distractor", "formatted", "bare"), ("models", "ideal", "formatted", "bare"),
                     ("settings", "bare", "ideal", "distractor"), ("settings", "formatted", "ideal", "distractor")]
    records = {(e["model"], e["setting"]): pq.read_table(out / e["results"]).to_pylist() for e in summary["evals"]}
    for p in paired:
        a, b = ((p["a"], p["setting"]), (p["b"], p["setting"])) if p["kind"] == "models" else \
            ((p["model"], p["a"]), (p["model"], p["b"]))
        ref = _reference(records[a], records[b])
        assert p["n_questions"] == 12
        for k in ("answer_f1", "citation_f1", "joint_f1"):
            assert p["difference"][k] == pytest.approx(ref["difference"][k], abs=1e-6)
            assert p["intervals"][k] == pytest.approx(ref["intervals"][k], abs=1e-6)
    assert "paired differences over the same questions" in text
    ideal_minus = next(p for p in paired if p["kind"] == "settings" and p["model"] == "formatted")
    d, (lo, hi) = ideal_minus["difference"]["answer_f1"], ideal_minus["intervals"]["answer_f1"]
    assert d > 0  # the script answers more ideal questions
    assert f"{100 * d:+.2f}" in text and f"[{100 * lo:+.2f}, {100 * hi:+.2f}]" in text
    md = (out / "table.md").read_text()
    assert "## Paired differences" in md and "formatted − bare (Distractor)" in md

    # the bare model's zeros: citation and joint F1 are 0 with no sample in the format, said in the same table
    bare_entry = next(e for e in summary["evals"] if e["model"] == "bare")
    assert bare_entry["overall"]["citation_f1"] == 0 and bare_entry["overall"]["format_valid"] == 0
    notes = zero_notes(summary)
    assert {k[0] for k, _ in notes} == {"bare"} and len(notes) == 2
    reasons = ", ".join(f"{k} {v}" for k, v in bare_entry["format_reasons"].items())
    assert reasons and all(reasons in n for _, n in notes)
    flat = " ".join(text.split())
    assert f"0.00{ZERO_MARK}" in text and f"{ZERO_MARK} bare on HotpotQA (distractor): Citation F1 and Joint F1 0" \
        in flat and reasons in flat
    assert "docs/base-models.md#why-citation-and-joint-f1-are-0" in ZERO_WHY and " ".join(ZERO_WHY.split()) in flat
    assert f"0.00{ZERO_MARK}" in md and ZERO_WHY in md
    assert "formatted on HotpotQA" not in flat  # a model whose scores are not 0 gets no note


def test_overview_plot_draws_the_intervals_as_error_bars(monkeypatch, tmp_path):
    from matplotlib.container import ErrorbarContainer

    from rag_curriculum import _plots
    from rag_curriculum.evaluation import plot_overview

    figures = []
    monkeypatch.setattr(_plots, "save_png", lambda fig, path: figures.append(fig) or path)
    entry = {"dataset": "hotpotqa", "setting": "ideal", "overall": {"answer_f1": 0.4, "citation_f1": 0.2,
                                                                     "joint_f1": 0.2667},
             "intervals": {"answer_f1": [0.3, 0.5], "citation_f1": [0.1, 0.35], "joint_f1": [0.15, 0.4]}}
    summary = {"evals": [{**entry, "model": "a"}, {**entry, "model": "b", "intervals": {}}]}
    plot_overview(summary, "ideal", tmp_path / "o.png")
    (fig,) = figures
    bars = [[c for c in ax.containers if isinstance(c, ErrorbarContainer)] for ax in fig.axes]
    assert [len(b) for b in bars] == [1, 1, 1]  # one error bar per panel: model a's; b has no interval
    (_, caps, (lines,)) = bars[0][0]
    (seg,) = lines.get_segments()
    assert [round(y, 6) for y in seg[:, 1]] == [30.0, 50.0]  # answer F1's [0.3, 0.5], x 100


def test_compare_pairs_two_runs_over_the_same_questions(tmp_path, sets):
    """A base model's run and a trained model's, made apart: `eval compare` reads their results files and prints
    the paired difference a single run of both would (the same numbers)."""
    formatted, bare = _scripts(tmp_path, sets)
    common = ["--data", str(sets["ideal"]), "--backend", "scripted", "--samples", "2", "--no-plots"]
    runner = CliRunner()
    for name, script in (("base", bare), ("trained", formatted)):
        r = runner.invoke(app, ["eval", "--model", f"{name}={script}", *common, "--out", str(tmp_path / name)])
        assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["eval", "--model", f"base={bare}", "--model", f"trained={formatted}", *common,
                            "--out", str(tmp_path / "both")])
    assert r.exit_code == 0, r.output
    (together,) = load_summary(tmp_path / "both")["paired"]
    r = runner.invoke(app, ["eval", "compare", str(tmp_path / "base"), str(tmp_path / "trained"), "--out",
                            str(tmp_path / "compare.md")], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "paired differences over the same questions" in r.output
    d, (lo, hi) = together["difference"]["joint_f1"], together["intervals"]["joint_f1"]
    assert f"{100 * d:+.2f}" in r.output and f"[{100 * lo:+.2f}, {100 * hi:+.2f}]" in r.output
    assert "trained − base (Ideal Retrieval)" in (tmp_path / "compare.md").read_text()
