"""End to end on the CPU: `curriculum eval` runs a tiny Qwen2-style model (built in the test, random weights) with
the transformers backend on MuSiQue evaluation sets built from ../shared/data in both settings; the summary must
agree with the per-question results, and a rerun must resume instead of generating again."""

from __future__ import annotations

import json
import math

import pyarrow.parquet as pq
import pytest
from conftest import MUSIQUE_DEV
from typer.testing import CliRunner

from rag_curriculum.cli import app
from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
from rag_curriculum.evaluation import load_summary
from rag_curriculum.rewards import joint_f1

pytestmark = pytest.mark.slow


def mean(xs):
    return math.fsum(xs) / len(xs)


def test_tiny_model_both_settings(tmp_path, tiny_model_dir):
    data = []
    for setting in ("distractor", "ideal"):
        d = tmp_path / f"musique-{setting}"
        # at most 4 distractors (the paper's cap is 18) keeps the prompts short enough for a quick CPU run
        build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_DEV), n=4)], setting=setting,
                                     max_distractors=4, out=str(d)), command="test")
        data += ["--data", str(d)]
    out = tmp_path / "eval"
    args = ["eval", "--model", f"tiny={tiny_model_dir}", *data, "--backend", "transformers", "--samples", "2",
            "--max-tokens", "32", "--limit", "3", "--chunk-size", "2", "--seed", "7", "--out", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "Distractor" in res.output and "Ideal Retrieval" in res.output

    summary = load_summary(out)
    assert summary["sampling"] == {"n": 2, "temperature": 1.0, "top_p": 1.0, "max_tokens": 32, "seed": 7}
    assert [(e["model"], e["dataset"], e["setting"]) for e in summary["evals"]] == [
        ("tiny", "musique", "distractor"), ("tiny", "musique", "ideal")]
    for e in summary["evals"]:
        recs = pq.read_table(out / e["results"]).to_pylist()
        assert len(recs) == e["n_questions"] == 3 and e["m"] == 2
        assert all(len(r["completions"]) == 2 and r["setting"] == e["setting"] for r in recs)
        assert all(r["skipped"] is None for r in recs) and e["skipped"] == 0
        # per-question means are the means of the per-sample scores
        for r in recs:
            for k in ("answer_f1", "exact_match", "citation_precision", "citation_recall", "citation_f1"):
                assert r[k] == pytest.approx(mean(r[f"sample_{k}"]))
            assert r["joint_f1_per_sample"] == pytest.approx(mean(r["sample_joint_f1"]))
            assert r["format_valid"] == pytest.approx(mean([float(v) for v in r["sample_valid"]]))
        # the summary is the mean over questions, joint F1 the harmonic mean of the two means
        o = e["overall"]
        for k in ("answer_f1", "exact_match", "citation_precision", "citation_recall", "citation_f1",
                  "joint_f1_per_sample", "format_valid"):
            assert o[k] == pytest.approx(mean([r[k] for r in recs])), k
        assert o["joint_f1"] == pytest.approx(joint_f1(o["answer_f1"], o["citation_f1"]))
        assert o["n_questions"] == 3 and o["n_samples"] == 6
        for hops, b in e["by_hops"].items():
            sub = [r for r in recs if str(r["hops"]) == hops]
            assert b["n_questions"] == len(sub) and b["answer_f1"] == pytest.approx(mean([r["answer_f1"] for r in sub]))
        assert sum(b["n_samples"] for b in e["by_format"].values()) == 6
        n_invalid = sum(not v for r in recs for v in r["sample_valid"])
        assert sum(e["format_reasons"].values()) == n_invalid
    assert (out / "table.md").read_text().count("| tiny |") >= 1
    assert (out / "plots" / "overview-distractor.png").stat().st_size > 1000

    before = json.loads((out / "summary.json").read_text())
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0 and "reused every completion" in res.output, res.output
    after = json.loads((out / "summary.json").read_text())
    assert after["evals"] == before["evals"]
