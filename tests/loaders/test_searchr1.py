"""Search-R1's data files as input (issue 33, item 2): the Parquet its ``nq_search.py`` / merge scripts write, from
the real HotpotQA and MuSiQue samples, read by the loader, built into rows (the file's own prompt, byte for byte),
evaluated and partitioned by a search agent; bad rows are errors naming the file, the row and the field."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from searchr1_files import flashrag_rows, write_search_r1_parquet
from typer.testing import CliRunner

from rag_curriculum import load_examples
from rag_curriculum.cli import app
from rag_curriculum.errors import DataError
from rag_curriculum.rewards import get_reward

runner = CliRunner()


@pytest.fixture(scope="module")
def merged(tmp_path_factory):
    """qa_search_train_merge.py's train.parquet over hotpotqa (8) and musique (6)."""
    return write_search_r1_parquet(tmp_path_factory.mktemp("sr1") / "train.parquet", [("hotpotqa", 8), ("musique", 6)])


def test_loader_reads_every_row(merged):
    exs = list(load_examples("search-r1", merged))
    assert len(exs) == 14
    raw = pq.read_table(merged).to_pylist()
    for ex, r in zip(exs, raw, strict=True):
        assert ex.id == f"{r['data_source']}-{r['id']}" and ex.source == "search-r1"
        assert ex.extra["data_source"] == r["data_source"] and ex.split == "train"
        assert ex.question == r["question"] and ex.question.endswith("?")
        assert ex.answers == list(dict.fromkeys(r["golden_answers"])) and ex.documents == []
    # FlashRAG's ids restart per set: the set keeps them apart
    assert {r["id"] for r in raw[:8]} & {r["id"] for r in raw[8:]} == set() or len({e.id for e in exs}) == 14
    aliases = flashrag_rows("musique", 6)
    assert any(len(a["golden_answers"]) > 1 for a in aliases)  # MuSiQue's aliases travel in golden_answers


def test_target_alone_reads_the_same(merged, tmp_path):
    """A file of the user's own that keeps only reward_model.ground_truth.target (no golden_answers), with a
    target that is one string in one row."""
    t = pq.read_table(merged).drop(["golden_answers"])
    rows = t.to_pylist()
    rows[0]["reward_model"]["ground_truth"]["target"] = rows[0]["reward_model"]["ground_truth"]["target"][0]
    rows[0]["reward_model"]["ground_truth"] = {"target": [rows[0]["reward_model"]["ground_truth"]["target"]]}
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "t.parquet")
    a = [(e.id, e.answers) for e in load_examples("search-r1", tmp_path / "t.parquet")]
    b = [(e.id, e.answers) for e in load_examples("search-r1", merged)]
    assert a == b


def test_a_row_without_answers_is_named(merged, tmp_path):
    rows = pq.read_table(merged).to_pylist()
    rows[3]["golden_answers"] = []
    rows[3]["reward_model"]["ground_truth"]["target"] = []
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "bad.parquet")
    with pytest.raises(DataError) as e:
        list(load_examples("search-r1", tmp_path / "bad.parquet"))
    msg = str(e.value)
    assert "bad.parquet" in msg and "row 3" in msg and "no gold answer" in msg and e.value.kind == "empty_answer"
    stream = load_examples("search-r1", tmp_path / "bad.parquet", on_error="skip")
    assert len(list(stream)) == 13 and stream.report.counts == {"empty_answer": 1}


def test_build_writes_the_files_own_prompt(merged, tmp_path):
    out = tmp_path / "rows"
    r = runner.invoke(app, ["build", "--dataset", "search-r1", "--input", str(merged), "--template",
                            "search-r1-original", "--schedule", "min-max", "--K", "3", "--out", str(out)])
    assert r.exit_code == 0, r.output
    built = pq.read_table(out / "data").to_pylist()
    raw = {(r["data_source"], r["question"]): r for r in pq.read_table(merged).to_pylist()}
    assert len(built) == 14
    for row in built:
        src = raw[(row["data_source"], row["question"])]
        assert row["prompt"] == src["prompt"]  # Search-R1's make_prefix, byte for byte
        assert row["answers"] == list(dict.fromkeys(src["golden_answers"]))
        assert row["passages"] == [] and row["num_distractors"] == 0
        assert row["source_id"] == f"{src['data_source']}-{src['id']}"
    assert {r["level"] for r in built} == {1, 3}
    assert runner.invoke(app, ["validate", str(out)]).exit_code == 0
    # the reward scores the built rows and the raw file's rows alike
    em = get_reward("search-em")
    c = [f"<answer> {row['answers'][0]} </answer>" for row in built]
    assert em(c, answers=[r["answers"] for r in built]) == [1.0] * 14
    srcs = [raw[(r["data_source"], r["question"])] for r in built]
    assert em(c, reward_model=[s["reward_model"] for s in srcs]) == [1.0] * 14


@pytest.mark.parametrize("extra, says", [
    ([], "shows passages"),
    (["--template", "search-r1", "--unanswerable-fraction", "0.2"], "have no passages"),
    (["--template", "search-r1", "--setting", "distractor"], "have no passages"),
])
def test_build_refusals(merged, tmp_path, extra, says):
    r = runner.invoke(app, ["build", "--dataset", "search-r1", "--input", str(merged), "--out", str(tmp_path / "x"),
                            *extra])
    assert r.exit_code != 0 and says in r.output, r.output
    assert not (tmp_path / "x").exists()


def test_eval_agent_asks_a_search_r1_file(merged, tmp_path, tiny_index):
    """eval --agent --data train.parquet: one set per data_source, scored by the same reader as training."""
    out = tmp_path / "ev"
    r = runner.invoke(app, ["eval", "--agent", "search-r1", "--retriever", str(tiny_index), "--backend", "scripted",
                            "--model", "p=agent_policies:search_then_gold", "--data", str(merged), "--template",
                            "search-r1-original", "--max-turns", "3", "--out", str(out), "--no-progress"],
                      catch_exceptions=False)
    assert r.exit_code == 0, r.output
    summary = json.loads((out / "summary.json").read_text())
    by_set = {e["set"].split("-")[-1] if "-" in e["set"] else e["set"]: e for e in summary["evals"]}
    raw = pq.read_table(merged).to_pylist()
    for source, n in (("hotpotqa", 8), ("musique", 6)):
        entry = next(e for e in summary["evals"] if source in e["set"])
        rows = [x for x in raw if x["data_source"] == source]
        assert entry["questions"] == n
        right = sum(1 for x in rows if len(x["question"].strip()) % 2)  # the policy answers odd lengths right
        assert entry["overall"]["em"] == pytest.approx(100 * right / n, abs=0.01)
    assert by_set


def test_partition_agent_on_a_search_r1_file(merged, tmp_path, tiny_index):
    out = tmp_path / "part"
    r = runner.invoke(app, ["partition", "--agent", "search-r1", "--retriever", str(tiny_index), "--dataset",
                            "search-r1", "--input", str(merged), "--backend", "scripted", "--model",
                            "agent_policies:search_then_gold", "--pass-at", "2", "--max-turns", "3", "--out",
                            str(out), "--no-progress"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    stats = pq.read_table(out / "stats.parquet").to_pylist()
    assert len(stats) == 14
    record = json.loads((out / "partition.json").read_text())
    assert record["counts"] if "counts" in record else record
    r = runner.invoke(app, ["partition", "--dataset", "search-r1", "--input", str(merged), "--backend", "scripted",
                            "--model", "agent_policies:search_then_gold", "--out", str(tmp_path / "p2")])
    assert r.exit_code == 2 and "--agent search-r1" in r.output


@pytest.fixture(scope="module")
def tiny_index(tmp_path_factory):
    pytest.importorskip("bm25s")
    from conftest import MUSIQUE_TRAIN

    from rag_curriculum.retrieval import IndexConfig, build_index

    out = tmp_path_factory.mktemp("sr1-index") / "ix"
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(out), depth=5))
    return out
