"""Search-R1's data files as input: the Parquet its ``nq_search.py`` / merge scripts write, from
the real HotpotQA and MuSiQue samples, read by the loader, built into rows (the file's own prompt, byte for byte),
evaluated and partitioned by a search agent; bad rows are errors naming the file, the row and the field."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.search_r1_files import flashrag_rows, write_search_r1_parquet
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
    assert "bad.parquet" in msg and "row 3" in msg and "ground_truth.target': holds []: no answer" in msg and e.value.kind == "empty_answer"
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
    (["--template", "rag-rl"], "shows passages"),
    (["--template", "search-r1", "--unanswerable-fraction", "0.2"], "have no passages"),
    (["--template", "search-r1", "--setting", "distractor"], "have no passages"),
])
def test_build_refusals(merged, tmp_path, extra, says):
    r = runner.invoke(app, ["build", "--dataset", "search-r1", "--input", str(merged), "--out", str(tmp_path / "x"),
                            *extra])
    assert r.exit_code != 0 and says in r.output, r.output
    assert not (tmp_path / "x").exists()


def test_a_search_r1_file_builds_as_it_is_with_its_own_prompt(merged, tmp_path):
    """`build --dataset search-r1 --input train.parquet` as the README writes it: the dataset's own template
    (search-r1-original: the file's prompt byte for byte)."""
    import pyarrow.parquet as pq

    out = tmp_path / "built"
    r = runner.invoke(app, ["build", "--dataset", "search-r1", "--input", str(merged), "--out", str(out)])
    assert r.exit_code == 0, r.output
    built = pq.read_table(out / "data").to_pylist()
    raw = pq.read_table(merged).to_pylist()
    assert [b["prompt"] for b in built] == [x["prompt"] for x in raw]
    assert json.loads((out / "manifest.json").read_text())["config"]["template"] == "search-r1-original"


def test_a_file_with_only_search_r1s_own_columns_reads_its_questions_from_the_prompt(merged, tmp_path):
    """No question and no id (Search-R1's own columns only): the question is read back from the prompt (the text
    after its last "Question:"), the id from extra_info.index, never doubled with the set's name."""
    import pyarrow.parquet as pq

    from rag_curriculum.loaders import load_examples

    bare = tmp_path / "bare.parquet"
    pq.write_table(pq.read_table(merged).drop(["question", "id", "golden_answers"]), bare)
    whole = list(load_examples("search-r1", merged))
    got = list(load_examples("search-r1", bare))
    assert [e.question for e in got] == [e.question for e in whole]
    assert [e.answers for e in got] == [e.answers for e in whole]
    ids = [e.id for e in got]
    assert len(set(ids)) == len(ids) and all(i.count(e.extra["data_source"]) == 1 for i, e in zip(ids, got, strict=True))
    assert ids[0] == f"{got[0].extra['data_source']}-0"


def test_a_row_with_neither_a_question_nor_a_user_message_is_refused_naming_it(merged, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pq.read_table(merged).drop(["question"])
    rows = t.to_pylist()
    rows[2]["prompt"] = [{"role": "system", "content": "no user here"}]
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist(rows, schema=t.schema), bad)
    r = runner.invoke(app, ["build", "--dataset", "search-r1", "--input", str(bad), "--out", str(tmp_path / "x")])
    assert r.exit_code == 1
    (line,) = [x for x in r.output.splitlines() if x.startswith("error:")]
    assert "bad.parquet" in line and "field 'question'" in line and "user message" in line
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_eval_agent_asks_a_search_r1_file(merged, tmp_path, tiny_index):
    """eval --agent --data train.parquet: one set per data_source, scored by the same reader as training; with
    --reward search-r1, Search-R1's own reward of each trajectory (its prompt and text, the file's target) too."""
    from rag_curriculum.methods.search_r1 import search_r1_score

    out = tmp_path / "ev"
    r = runner.invoke(app, ["eval", "--agent", "search-r1", "--retriever", str(tiny_index), "--backend", "scripted",
                            "--model", "p=support.agent_policies:search_then_gold", "--data", str(merged), "--template",
                            "search-r1-original", "--max-turns", "3", "--out", str(out), "--no-progress",
                            "--reward", "search-r1", "--reward-arg", "format_score=0.1"],
                      catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "Search-R1 reward" in r.output
    summary = json.loads((out / "summary.json").read_text())
    targets = {f"{x['data_source']}-{x['id']}": x["reward_model"]["ground_truth"]["target"]
               for x in pq.read_table(merged).to_pylist()}
    seen = set()
    for e in summary["evals"]:
        trajs = [json.loads(x) for x in (out / "trajectories" / "p" / f"{e['set']}.jsonl").read_text().splitlines()]
        want = [search_r1_score(t["prompt"][0]["content"] + "".join(s["text"] for s in t["segments"]),
                                targets[t["row_id"]], format_score=0.1) for t in trajs]
        assert [t["search_r1"] for t in trajs] == want
        assert e["overall"]["search_r1"] == pytest.approx(100 * sum(want) / len(want), abs=0.01)
        seen |= set(want)
    assert seen == {0.1, 1.0}  # wrong answers earn format_score, right ones the score
    assert "Search-R1's own reward" in (out / "table.md").read_text()
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
                            "support.agent_policies:search_then_gold", "--pass-at", "2", "--max-turns", "3", "--out",
                            str(out), "--no-progress"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    stats = pq.read_table(out / "stats.parquet").to_pylist()
    assert len(stats) == 14
    record = json.loads((out / "partition.json").read_text())
    assert record["counts"] if "counts" in record else record
    r = runner.invoke(app, ["partition", "--dataset", "search-r1", "--input", str(merged), "--backend", "scripted",
                            "--model", "support.agent_policies:search_then_gold", "--out", str(tmp_path / "p2")])
    assert r.exit_code == 2 and "--agent search-r1" in r.output


@pytest.fixture(scope="module")
def tiny_index(tmp_path_factory):
    pytest.importorskip("bm25s")
    from conftest import MUSIQUE_TRAIN
    from rag_retriever import IndexConfig, build_index

    out = tmp_path_factory.mktemp("sr1-index") / "ix"
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(out), depth=5))
    return out


def test_built_rows_are_the_files_rows_as_search_r1_reads_them(merged, tmp_path):
    """The rows of `build --dataset search-r1` keep the file's order (the manifest says
    `row_order: input`), its ids as `{data_source}-{id}`, its `data_source`, its `extra_info.split`, and its
    `reward_model.ground_truth.target` as it was (beside the toolkit's `answers`); `extra_info.index` is the row's
    position (Search-R1's trainer groups GRPO samples by it: it must be unique, and is the file's own index for a
    file of one set)."""
    out = tmp_path / "rows"
    r = runner.invoke(app, ["build", "--dataset", "search-r1", "--input", str(merged), "--template",
                            "search-r1-original", "--out", str(out)])
    assert r.exit_code == 0, r.output
    built = pq.read_table(out / "data").to_pylist()
    raw = pq.read_table(merged).to_pylist()
    assert [row["id"] for row in built] == [f"{x['data_source']}-{x['id']}" for x in raw]  # ids, and the order
    for i, (row, src) in enumerate(zip(built, raw, strict=True)):
        assert row["data_source"] == src["data_source"] and row["question"] == src["question"]
        gt = row["reward_model"]["ground_truth"]
        assert row["reward_model"]["style"] == "rule" and gt["target"] == src["reward_model"]["ground_truth"]["target"]
        assert gt["answers"] == row["answers"] == list(dict.fromkeys(src["golden_answers"]))
        assert row["extra_info"]["split"] == src["extra_info"]["split"] == "train"
        assert row["extra_info"]["index"] == row["curriculum_index"] == i
        if src["data_source"] == "hotpotqa":  # the file's first set: its own index too
            assert row["extra_info"]["index"] == src["extra_info"]["index"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["row_order"] == "input"
    # a seeded subset keeps the file's order; --order shuffled is said so
    sub = tmp_path / "sub"
    assert runner.invoke(app, ["build", "--dataset", "search-r1", "--input", str(merged), "--template",
                               "search-r1-original", "--n", "5", "--out", str(sub)]).exit_code == 0
    ids = [row["id"] for row in pq.read_table(sub / "data").to_pylist()]
    assert len(ids) == 5 and ids == sorted(ids, key=[row["id"] for row in built].index)
    shuf = tmp_path / "shuf"
    assert runner.invoke(app, ["build", "--dataset", "search-r1", "--input", str(merged), "--template",
                               "search-r1-original", "--order", "shuffled", "--out", str(shuf)]).exit_code == 0
    assert json.loads((shuf / "manifest.json").read_text())["row_order"] == "shuffled"
    assert [row["id"] for row in pq.read_table(shuf / "data").to_pylist()] != [row["id"] for row in built]


def test_a_musique_curriculum_says_its_rows_are_in_the_seeded_samples_order(tmp_path):
    from conftest import MUSIQUE_TRAIN

    out = tmp_path / "m"
    assert runner.invoke(app, ["build", "--dataset", "musique", "--input", str(MUSIQUE_TRAIN), "--n", "6", "--K", "3",
                               "--out", str(out)]).exit_code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["row_order"] == "sample"
    rows = pq.read_table(out / "data").to_pylist()
    assert all(row["reward_model"]["ground_truth"]["target"] == row["answers"] for row in rows)
    assert all(row["id"] == f"musique-{row['source_id']}" for row in rows)


def test_golden_answers_that_normalise_to_nothing_are_refused_without_a_target(tmp_path):
    """A row without ``target`` whose golden_answers (what its built rows' target holds) the answer normalisation
    empties is refused naming the file, the line and the field, as blank ones are."""
    recs = [{"id": f"train_{i}", "question": f"Q{i}?", "golden_answers": ["Paris"], "data_source": "nq",
             "prompt": [{"role": "user", "content": f"Q{i}?"}]} for i in range(3)]
    recs[2]["golden_answers"] = ["the", "..."]
    src = tmp_path / "train.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in recs))
    r = runner.invoke(app, ["build", "--dataset", "search-r1", "--input", str(src), "--out", str(tmp_path / "rows")])
    assert r.exit_code == 1, r.output
    line = r.output.splitlines()[0]
    assert "train.jsonl, line 3 (id train_2), field 'golden_answers': holds ['the', '...']: no answer once " in line
    assert not (tmp_path / "rows").exists()


def test_a_target_alias_that_normalises_to_nothing_is_left_out_and_said(tmp_path, caplog):
    """A target with a real answer beside one the answer normalisation empties (``["Paris", "the"]``): the empty
    alias is left out of the built rows' target and answers (an empty answer would equal it and score 1.0), said
    once with the count of rows, and golden_answers no longer reads as disagreeing."""
    import pyarrow.parquet as pq

    recs = [{"id": f"train_{i}", "question": f"Q{i}?", "golden_answers": ["Paris"], "data_source": "nq",
             "prompt": [{"role": "user", "content": f"Q{i}?"}],
             "reward_model": {"style": "rule", "ground_truth": {"target": ["Paris", "the"]}}} for i in range(3)]
    del recs[2]["reward_model"]  # no target: its golden_answers are what its built row's target holds
    recs[2]["golden_answers"] = ["Paris", "the"]
    src = tmp_path / "train.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in recs))
    with caplog.at_level("WARNING", logger="rag_curriculum.loaders"):
        r = runner.invoke(app, ["build", "--dataset", "search-r1", "--input", str(src), "--out",
                                str(tmp_path / "rows")])
    assert r.exit_code == 0, r.output
    said = " ".join(caplog.text.split())
    assert ('train.jsonl: 2 record(s) like line 1 (id train_0): reward_model.ground_truth.target ["Paris", "the"]: '
            '["the"] left out (an empty answer would equal them once normalised and score 1.0)') in said
    assert ('train.jsonl: 1 record(s) like line 3 (id train_2): golden_answers ["Paris", "the"]: ["the"] left out'
            in said)
    assert "differ from" not in said
    rows = pq.read_table(tmp_path / "rows" / "data").to_pylist()
    assert [(x["reward_model"]["ground_truth"]["target"], x["answers"]) for x in rows] == [(["Paris"], ["Paris"])] * 3


@pytest.mark.parametrize("target, says", [
    ([], "target': holds []: no answer to compare with"),
    (["", " "], "no answer to compare with"),
    ("", "target': an empty string"),
    (7, "target': holds 7 (int), not a list of answers"),
    (["Paris", 3], "target': entry 1 is 3 (int), not a string"),
    (None, "target': holds None (NoneType), not a list of answers"),
    (["the"], "target': holds ['the']: no answer once normalised"),  # an empty answer would score 1.0 against it
    (["...", " An "], "target': holds ['...', ' An ']: no answer once normalised"),
    ("The.", "target': holds ['The.']: no answer once normalised"),
])
def test_a_bad_target_is_refused_in_one_line_and_nothing_is_written(tmp_path, target, says):
    """Bad input: a Search-R1 row whose `target` is empty or not a list of strings stops the build in one
    line naming the file, the row and the field (then the hint), even when `golden_answers` holds answers (Search-R1's reward reads
    `target` alone), and nothing is written."""
    recs = [{"id": f"train_{i}", "question": f"Q{i}?", "golden_answers": ["Paris"], "data_source": "nq",
             "prompt": [{"role": "user", "content": f"Q{i}?"}], "ability": "fact-reasoning",
             "reward_model": {"style": "rule", "ground_truth": {"target": ["Paris"]}},
             "extra_info": {"split": "train", "index": i}} for i in range(3)]
    recs[1]["reward_model"]["ground_truth"]["target"] = target
    src = tmp_path / "train.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in recs))
    out = tmp_path / "rows"
    r = runner.invoke(app, ["build", "--dataset", "search-r1", "--input", str(src), "--template", "search-r1-original",
                            "--out", str(out)])
    assert r.exit_code == 1, r.output  # a data error (exit 2 is for usage errors)
    line = r.output.splitlines()[0]
    assert line.startswith("error: ") and "train.jsonl, line 2 (id train_1)" in line and says in line, r.output
    assert line.count("reward_model.ground_truth.target") == 1
    assert not out.exists()


def test_the_old_module_name_still_imports_with_a_warning_naming_the_new_one():
    from rag_curriculum.loaders import search_r1

    with pytest.warns(DeprecationWarning, match=r"moved to rag_curriculum\.loaders\.search_r1\.SearchR1Loader"):
        from rag_curriculum.loaders.searchr1 import SearchR1Loader
    assert SearchR1Loader is search_r1.SearchR1Loader
