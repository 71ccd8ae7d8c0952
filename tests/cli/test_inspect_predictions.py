"""`curriculum inspect` on the output of `curriculum eval` and of `curriculum partition` (real commands on
../shared/data, a scripted model): a few questions' predictions next to their gold answers and scores, filtered
with --where, as the results files and stats.parquet hold them."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from conftest import HOTPOT_HUB, HOTPOT_TRAIN
from typer.testing import CliRunner

from rag_curriculum.cli import app
from rag_curriculum.shards import read_rows

WIDE = {"COLUMNS": "250"}


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), env=WIDE)


@pytest.fixture(scope="module")
def eval_out(tmp_path_factory):
    root = tmp_path_factory.mktemp("inspect-eval")
    data = root / "hotpotqa-ideal"
    r = invoke("build", "--setting", "ideal", "--dataset", "hotpotqa", "--input", str(HOTPOT_HUB), "--n", "6",
               "--out", str(data))
    assert r.exit_code == 0, r.output
    script = {}
    for i, row in enumerate(read_rows(data)):  # right on even questions, in the format on questions divisible by 3
        answer = row["answers"][0] if i % 2 == 0 else f"wrong{i}"
        script[row["prompt"][-1]["content"]] = (
            f"<reasoning>\nok\n</reasoning>\n<answer>\nFinal answer: {answer}\nSupporting passages: "
            f"{row['gold_labels'][0]}\n</answer>" if i % 3 == 0 else f"Final answer: {answer}")
    (root / "script.json").write_text(json.dumps(script))
    out = root / "eval"
    r = invoke("eval", "--model", f"scripted={root / 'script.json'}", "--data", str(data), "--backend", "scripted",
               "--samples", "2", "--no-plots", "--out", str(out))
    assert r.exit_code == 0, r.output
    return out


def test_an_evaluation_shows_predictions_next_to_gold_answers_and_scores(eval_out):
    recs = pq.read_table(eval_out / "results" / "scripted" / "hotpotqa-ideal.parquet").to_pylist()
    r = invoke("inspect", str(eval_out), "--n", "2")
    assert r.exit_code == 0, r.output
    assert "2 of 6 question(s)" in r.output
    for rec in recs[:2]:
        assert rec["question"][:30] in r.output and rec["answers"][0] in r.output
        assert " | ".join(rec["sample_answer"]) in r.output
        assert f"{100 * rec['answer_f1']:.1f}" in r.output
    assert recs[2]["question"][:30] not in r.output  # --n 2
    # the invalid samples' reasons, where the format was not kept
    assert "2/2 valid" in r.output and "0/2 valid (missing_tag)" in r.output

    r = invoke("inspect", str(eval_out), "--where", "answer_f1<0.5", "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    want = [x for x in recs if x["answer_f1"] < 0.5]
    assert [g["id"] for g in got] == [x["id"] for x in want][:5] and len(want) == 3
    assert all(g["sample_answer"] == x["sample_answer"] and g["answers"] == x["answers"]
               for g, x in zip(got, want, strict=False))
    r = invoke("inspect", str(eval_out), "--where", "valid=2", "--where", "answer_f1>=0.5", "--json")
    assert [g["id"] for g in json.loads(r.output)] == [x["id"] for x in recs
                                                       if all(x["sample_valid"]) and x["answer_f1"] >= 0.5]


def test_bad_filters_are_refused_naming_the_fields(eval_out):
    r = invoke("inspect", str(eval_out), "--where", "modle=scripted")
    assert r.exit_code == 2 and "--where modle: no such field here" in r.output and "model" in r.output
    r = invoke("inspect", str(eval_out), "--where", "answer_f1")
    assert r.exit_code == 2 and "expected KEY=VALUE" in r.output
    r = invoke("inspect", str(eval_out), "--where", "model<3")
    assert r.exit_code == 2 and "not a number" in r.output
    r = invoke("inspect", str(eval_out), "--where", "model=nobody")
    assert r.exit_code == 0 and "no question matches" in r.output


def test_a_partition_shows_each_samples_prediction_and_f1(tmp_path):
    script = tmp_path / "script.json"
    script.write_text("{}")
    out = tmp_path / "part"
    r = invoke("partition", "--dataset", "hotpotqa", "--input", str(HOTPOT_TRAIN), "--n", "4", "--K", "1",
               "--backend", "scripted", "--model", str(script), "--backend-arg", "default=Final answer: Paris",
               "--pass-at", "2", "--no-progress", "--out", str(out))
    assert r.exit_code == 0, r.output
    rows = {x["id"]: x for x in read_rows(out / "input")}
    stats = pq.read_table(out / "stats.parquet").to_pylist()
    r = invoke("inspect", str(out), "--n", "3", "--where", "bucket=unanswerable")
    assert r.exit_code == 0, r.output
    assert "3 of 4 question(s) where bucket=unanswerable" in r.output
    for s in stats[:3]:
        assert rows[s["id"]]["question"][:30] in r.output and rows[s["id"]]["answers"][0] in r.output
    assert "Paris | Paris" in r.output and "0/2" in r.output
    r = invoke("inspect", str(out), "--where", "bucket=answerable")
    assert r.exit_code == 0 and "no question matches" in r.output
