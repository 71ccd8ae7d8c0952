"""Unanswerable rows end to end on ../shared/data: an evaluation set built by `curriculum build
--unanswerable-fraction`, read back as TRL and verl read it and scored by the TRL reward functions
(rag_curriculum.train.reward_funcs_from_config) and verl's compute_score; then `curriculum eval` with the scripted backend reports abstention
precision / recall and the scores on each kind of row, the retrieved setting (a BM25 index over the dev file) as a
row of the main table with its scores by retrieval outcome, and nothing new for a set without either."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from conftest import MUSIQUE_DEV
from typer.testing import CliRunner

from rag_curriculum.cli import app
from rag_curriculum.evaluation import load_summary
from rag_curriculum.shards import shard_files
from rag_curriculum.train import reward_funcs_from_config
from rag_curriculum.verl.rewards import compute_score

N = 30


def run(args: list[str]) -> str:
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    return res.output


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    """A distractor set with 40% unanswerable rows and a plain ideal set, both of 30 real MuSiQue dev questions."""
    d = tmp_path_factory.mktemp("abstain")
    common = ["-d", "musique", "-i", str(MUSIQUE_DEV), "--n", str(N), "--seed", "4"]
    run(["build", "--setting", "distractor", "--max-distractors", "6", "--unanswerable-fraction", "0.4", *common,
         "--out", str(d / "distractor")])
    run(["build", "--setting", "ideal", *common, "--out", str(d / "ideal")])
    run(["index", "--dataset", "musique", "--input", str(MUSIQUE_DEV), "--out", str(d / "index"), "--depth", "40",
         "--no-progress"])
    run(["build", "--setting", "retrieved", "--index", str(d / "index"), "--top-k", "6", "--unanswerable-fraction",
         "0.3", *common, "--out", str(d / "retrieved"), "--no-progress"])
    return d


def read_as_trl(directory) -> list[dict]:
    datasets = pytest.importorskip("datasets")
    files = [str(f) for f in shard_files(directory)]
    return list(datasets.load_dataset("parquet", data_files={"train": files}, split="train"))


def say(answer: str, cited: list[str]) -> str:
    return f"<reasoning>\nChecked.\n</reasoning>\n<answer>\nFinal answer: {answer}\nSupporting passages: {', '.join(cited)}\n</answer>"


@pytest.mark.slow
def test_trl_reward_functions_and_verl_on_real_unanswerable_rows(sets):
    rows = read_as_trl(sets / "distractor")
    assert {r["answerable"] for r in rows} == {True, False}
    inputs, completions, want = [], [], []
    for r in rows:
        first = r["passages"][0]["label"]
        if r["answerable"]:
            cases = [(say("unanswerable", []), 0.0 + 0.0 + 1.0, 0.0 + 0.0 + 1.0 - 1.0),
                     (say(r["answers"][0], r["gold_labels"]), 11.0, 11.0)]
        else:
            assert r["answers"] == ["unanswerable"] and r["gold_labels"] == []
            cases = [(say("unanswerable", []), 11.0, 11.0),
                     (say("Unanswerable.", [first]), 5.0 - 2.0 + 1.0, 5.0 - 2.0 + 1.0),
                     (say("Paris", [first]), 0.0 - 2.0 + 1.0, 0.0 - 2.0 + 1.0)]
        for text, total, with_penalty in cases:
            inputs.append(r)
            completions.append([{"role": "assistant", "content": text}])
            want.append((total, with_penalty))
    # GRPOTrainer._calculate_rewards hands every column but the prompt and completion as lists
    kwargs = {k: [x[k] for x in inputs] for k in inputs[0] if k not in ("prompt", "completion")}
    (paper,), _ = reward_funcs_from_config(["rag-rl"])
    (penalised,), _ = reward_funcs_from_config([{"name": "rag-rl", "kwargs": {"abstain_penalty": 1.0}}])
    logged: dict = {}
    got = paper(prompts=[x["prompt"] for x in inputs], completions=completions, completion_ids=None,
                trainer_state=None, log_metric=logged.__setitem__, **kwargs)
    assert got == pytest.approx([w[0] for w in want])
    assert penalised(completions=completions, **kwargs) == pytest.approx([w[1] for w in want])
    assert 0 < logged["rag_rl/abstained"] < 1
    # verl: one response at a time, with the row's ground_truth and extra_info as read from the parquet file
    for r, c, (total, _) in zip(inputs, completions, want, strict=True):
        out = compute_score(r["data_source"], c[0]["content"], r["reward_model"]["ground_truth"], r["extra_info"])
        assert out["score"] == pytest.approx(total)


def contains_answer(passage: dict, answers: list[str]) -> bool:
    from rag_curriculum.rewards import normalize_answer

    norm = f" {normalize_answer(passage['title'] + ' ' + passage['text'])} "
    return any(f" {a} " in norm for a in map(normalize_answer, answers) if a not in ("", "yes", "no"))


def test_retrieved_unanswerable_rows_show_neither_gold_nor_the_answer(sets):
    from rag_curriculum import load_examples
    from rag_curriculum.curricula.distractors import passage_key

    examples = {e.id: e for e in load_examples("musique", MUSIQUE_DEV)}
    rows = read_as_trl(sets / "retrieved")
    un = [r for r in rows if not r["answerable"]]
    assert un
    for r in un:
        ex = examples[r["source_id"]]
        gold = {passage_key(d.title, d.text) for d in ex.documents if d.is_gold}
        assert len(r["passages"]) == 6 and r["gold_recall"] == 0.0
        assert not any(passage_key(p["title"], p["text"]) in gold or contains_answer(p, ex.answers)
                       for p in r["passages"])
        ranks = [p["bm25_rank"] for p in r["passages"]]
        assert ranks == sorted(ranks)  # the next ranked passages, in rank order
    manifest = json.loads((sets / "retrieved" / "manifest.json").read_text())
    assert manifest["unanswerable"]["answer_in_passages"] == 0
    # the distractor set draws the dataset's own distractors, some of which name the answer: counted
    dist = read_as_trl(sets / "distractor")
    shown = sum(any(contains_answer(p, examples[r["source_id"]].answers) for p in r["passages"])
                for r in dist if not r["answerable"])
    assert json.loads((sets / "distractor" / "manifest.json").read_text())["unanswerable"]["answer_in_passages"] == shown


@pytest.mark.slow
def test_scripted_eval_reports_abstention(sets, tmp_path):
    dist = read_as_trl(sets / "distractor")
    ideal = read_as_trl(sets / "ideal")
    retrieved = read_as_trl(sets / "retrieved")
    # The scripted model: on unanswerable rows sample 0 abstains, sample 1 abstains on even rows only; on
    # answerable rows sample 0 answers right, sample 1 abstains on every third row.
    script, tp, abstained, un_samples, false_abst, ans_samples = {}, 0, 0, 0, 0, 0
    for i, r in enumerate(dist):
        if not r["answerable"]:
            outs = [say("unanswerable", []), say("unanswerable" if i % 2 == 0 else "Paris", [])]
            flags = [True, i % 2 == 0]
            tp += sum(flags)
            un_samples += 2
        else:
            outs = [say(r["answers"][0], r["gold_labels"]),
                    say("unanswerable" if i % 3 == 0 else r["answers"][0], [] if i % 3 == 0 else r["gold_labels"])]
            flags = [False, i % 3 == 0]
            false_abst += sum(flags)
            ans_samples += 2
        abstained += sum(flags)
        script[r["prompt"][-1]["content"]] = outs
    for r in ideal:
        script[r["prompt"][-1]["content"]] = [say(r["answers"][0], r["gold_labels"])] * 2
    # retrieved: right (citing what was retrieved of the gold) only when every gold passage was retrieved
    outcome = {}
    for r in retrieved:
        if r["answerable"]:
            outcome[r["id"]] = "all" if r["gold_recall"] == 1.0 else "none" if r["gold_recall"] == 0.0 else "some"
        right = r["answerable"] and r["gold_recall"] == 1.0
        script[r["prompt"][-1]["content"]] = [say(r["answers"][0] if right else "zzzq", r["gold_labels"])] * 2
    assert set(outcome.values()) >= {"all", "some"}
    (tmp_path / "script.json").write_text(json.dumps(script))
    out = tmp_path / "eval"
    res = run(["eval", "--model", f"scripted={tmp_path / 'script.json'}", "--data", str(sets / "distractor"),
               "--data", str(sets / "ideal"), "--data", str(sets / "retrieved"), "--backend", "scripted",
               "--samples", "2", "--out", str(out)])
    assert "Retrieved" in res

    summary = load_summary(out)
    e = next(x for x in summary["evals"] if x["setting"] == "distractor")
    a = e["abstention"]
    assert a["precision"] == pytest.approx(tp / abstained)
    assert a["recall"] == pytest.approx(tp / un_samples)
    assert a["false_abstention_rate"] == pytest.approx(false_abst / ans_samples)
    assert a["n_unanswerable"] == un_samples // 2 and a["n_answerable"] == ans_samples // 2
    assert a["n_unanswerable"] + a["n_answerable"] == N
    # unanswerable rows: answer F1 is the abstention rate, citing nothing is right
    un = e["by_answerable"]["unanswerable"]
    assert un["answer_f1"] == pytest.approx(tp / un_samples) and un["citation_f1"] == 1.0
    assert e["by_answerable"]["answerable"]["citation_f1"] == pytest.approx(1 - false_abst / ans_samples)
    # a set without unanswerable rows: the paper's entry, nothing added
    plain = next(x for x in summary["evals"] if x["setting"] == "ideal")
    assert "abstention" not in plain and "by_answerable" not in plain and "by_retrieval" not in plain
    assert plain["overall"]["answer_f1"] == 1.0
    recs = pq.read_table(out / e["results"]).to_pylist()
    assert sum(f for r in recs for f in r["sample_abstained"]) == abstained
    assert {r["answerable"] for r in recs} == {True, False}
    table = (out / "table.md").read_text()
    assert "## Abstention" in table and "## By retrieval outcome" in table
    assert f"{100 * tp / abstained:.2f}" in table and f"{100 * tp / un_samples:.2f}" in table
    # the retrieved setting: a row of the main table, and its scores by retrieval outcome (answerable rows only)
    main = table.split("## Answer, citation and joint F1")[1].split("##")[0]
    assert [ln.split("|")[1].strip() for ln in main.splitlines() if ln.startswith("| ") and "scripted" in ln] == [
        "Distractor", "Ideal Retrieval", "Retrieved"]
    ret = next(x for x in summary["evals"] if x["setting"] == "retrieved")
    by = ret["by_retrieval"]
    for k in ("all", "some", "none"):
        n = sum(v == k for v in outcome.values())
        assert by.get(k, {"n_questions": 0})["n_questions"] == n
    assert by["all"]["answer_f1"] == 1.0 and by["some"]["answer_f1"] == 0.0
    assert ret["abstention"]["n_unanswerable"] == sum(not r["answerable"] for r in retrieved)
    assert "by_retrieval" not in e  # the distractor set has no gold_recall
