"""`curriculum warm-start`'s output follows the toolkit's rules: --overwrite replaces only an earlier warm start's
files and keeps the rest, a folder it did not write is refused, a second run to one --out is refused at once, and
what a killed run left is removed by the next (a real, very small SFT each time: 1 row, 1 epoch, width 16)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import MUSIQUE_TRAIN
from support.cli_runs import one_error, run

pytest.importorskip("trl", reason="the `train` extra is needed for the warm start")

SMALL = ["--rows", 1, "--epochs", 1, "--copies", 2, "--hidden-size", 16, "--layers", 1]


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    d = tmp_path_factory.mktemp("warm") / "rows"
    r = run("build", "--dataset", "musique", "--input", MUSIQUE_TRAIN, "--schedule", "max", "--K", 2, "--n", 3,
            "--out", d)
    assert r.exit_code == 0, r.output
    return d


@pytest.mark.slow
def test_overwrite_replaces_the_warm_starts_files_and_keeps_the_users(rows, tmp_path):
    out = tmp_path / "m"
    r = run("warm-start", rows, "--out", out, *SMALL)
    assert r.exit_code == 0, r.output
    assert "step 1/" in r.output and "loss " in r.output and "{'loss'" not in r.output  # a compact line a step
    card = json.loads((out / "warm_start.json").read_text())
    assert "model.safetensors" in card["files"] and "config.json" in card["files"]
    from rag_curriculum.train._warm import OUTPUT
    assert [f for f in card["files"] if not OUTPUT.layout(f)] == []  # every file it writes: of its layout
    (out / "NOTES.md").write_text("mine")
    one = (out / "model.safetensors").read_bytes()
    assert "not empty" in one_error(run("warm-start", rows, "--out", out, *SMALL))  # no --overwrite: refused
    r = run("warm-start", rows, "--out", out, *SMALL, "--seed", 1, "--overwrite")
    assert r.exit_code == 0, r.output
    assert (out / "NOTES.md").read_text() == "mine"
    assert (out / "model.safetensors").read_bytes() != one  # another seed: other weights
    assert json.loads((out / "warm_start.json").read_text())["settings"]["seed"] == 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder, no lock left


def test_overwrite_refuses_a_folder_it_did_not_write(rows, tmp_path):
    out = tmp_path / "theirs"
    out.mkdir()
    (out / "weights.bin").write_bytes(b"x")
    line = one_error(run("warm-start", rows, "--out", out, *SMALL, "--overwrite"))
    assert "not a warm start's output" in line
    assert sorted(p.name for p in out.iterdir()) == ["weights.bin"]


def test_a_second_run_to_the_same_out_is_refused_at_once(rows, tmp_path):
    from filelock import FileLock

    out = tmp_path / "m"
    with FileLock(str(tmp_path / ".m.warm.lock")):  # another process writing it
        line = one_error(run("warm-start", rows, "--out", out, *SMALL))
    assert "another `curriculum warm-start` is writing" in line
    assert not out.exists()


@pytest.mark.parametrize("batch", [1, 2])
def test_batch_size_sets_the_examples_per_step(rows, tmp_path, batch):
    """--batch-size reaches the SFT: 2 examples (1 row x 2 copies, 1 pass) are 2 steps of one or 1 step of two."""
    out = tmp_path / "m"
    r = run("warm-start", rows, "--out", out, *SMALL, "--batch-size", batch)
    assert r.exit_code == 0, r.output
    card = json.loads((out / "warm_start.json").read_text())
    assert card["settings"]["batch_size"] == batch and card["examples"] == 2
    assert len(card["loss"]) == 2 // batch  # one loss logged a step


def test_a_batch_size_of_0_is_a_usage_error_that_writes_nothing(rows, tmp_path):
    line = one_error(run("warm-start", rows, "--out", tmp_path / "m", "--batch-size", 0), code=2)
    assert "--batch-size 0" in line and "between 1 and" in line
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_a_dead_runs_temporary_folder_is_removed_by_the_next(rows, tmp_path):
    from rag_curriculum._commit import owner_tag

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    tag = owner_tag().split("-", 1)[1]  # this machine's tag, with the dead process's pid
    orphan = tmp_path / f".m.partial-{pid}-{tag}"
    (orphan / "sft").mkdir(parents=True)
    (orphan / "sft" / "model.safetensors").write_bytes(b"half")
    assert not os.path.exists(f"/proc/{pid}")
    assert run("warm-start", rows, "--out", tmp_path / "m", *SMALL).exit_code == 0
    assert not orphan.exists()
    assert (tmp_path / "m" / "warm_start.json").is_file()


@pytest.mark.parametrize("field, agent", [("answers", []), ("gold_labels", ["--agent", "search-r1"])])
def test_a_row_with_nothing_to_teach_is_named(rows, tmp_path, monkeypatch, field, agent):
    """A row without a gold answer (or, for a search agent, without a gold passage to search for) is refused naming
    the shards, the row and the field, before the retriever is asked or anything is written."""
    from rag_curriculum.shards import read_rows
    from rag_curriculum.train import _warm

    got = read_rows(rows)
    got[1] = {**got[1], field: []}
    monkeypatch.setattr(_warm, "read_rows", lambda _: got)
    out = tmp_path / "w"
    line = one_error(run("warm-start", rows, "--out", out, *agent, *(["--retriever", tmp_path / "nowhere"] if agent
                                                                      else [])))
    assert f"row 1 (id {got[1]['id']!r})" in line and f"field {field!r}" in line and str(rows) in line, line
    assert not out.exists() and not list(tmp_path.glob(".w*"))


def test_a_search_agents_answer_turn_is_taught_after_what_the_retriever_returns(rows, tmp_path, tiny_model_dir):
    """The search warm start's examples, on the real BM25 index of the same train file: per row, the plain first turns,
    then the search and its answer turn, whose prompt is the search prompt, the search and exactly the
    ``<information>`` block the index returns for the query (what the training rollout will show); the loss is on
    the completion only (TRL's prompt-completion format)."""
    from rag_retriever import IndexConfig, build_index
    from transformers import AutoTokenizer

    from rag_curriculum.agents import get_agent_template, open_retriever
    from rag_curriculum.grammar import information_block
    from rag_curriculum.shards import read_rows
    from rag_curriculum.train import WarmStartConfig
    from rag_curriculum.train._warm import _information, _search_examples, search_r1_turns

    index = tmp_path / "ix"
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(index), depth=5))
    got = read_rows(rows)
    cfg = WarmStartConfig(shards=str(rows), out=str(tmp_path / "w"), agent="search-r1", retriever=str(index), top_k=2)
    cfg.validate()
    info = _information(cfg, open_retriever(str(index)), got)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    examples = _search_examples(cfg, got, info, tok)
    assert len(examples) == len(got) * (3 + 2)
    for i, row in enumerate(got):
        hits = open_retriever(str(index)).search([row["gold_labels"][0]], 2)[0]
        want = information_block([h.shown() for h in hits])
        head = tok.apply_chat_template(get_agent_template("search-r1").render(row["question"]),
                                       add_generation_prompt=True, tokenize=False)
        search, answer = search_r1_turns(row)
        plain, first, second = examples[5 * i], examples[5 * i + 3], examples[5 * i + 4]
        assert plain["prompt"] == head and "<search>" not in plain["completion"]
        assert first == {"prompt": head, "completion": search} and f"<search> {row['gold_labels'][0]} </search>" in search
        assert second == {"prompt": head + search + want, "completion": answer}
        assert f"<answer> {row['answers'][0]} </answer>" in answer and want.count("Doc ") == 2


def test_an_absurd_number_of_epochs_is_a_usage_error_that_writes_nothing(rows, tmp_path):
    line = one_error(run("warm-start", rows, "--out", tmp_path / "m", "--epochs", "1e12"), code=2)
    assert "--epochs 1e+12: must be at most 10,000" in line, line
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_more_rows_than_the_shards_hold_records_the_rows_used(rows, tmp_path, caplog):
    out = tmp_path / "m"
    r = run("warm-start", rows, "--out", out, *SMALL[2:], "--rows", 1000)
    assert r.exit_code == 0, r.output
    card = json.loads((out / "warm_start.json").read_text())
    assert card["settings"]["rows"] == 3 and card["examples"] == 3 * 2, card["settings"]
    assert "--rows 1000: " in caplog.text and "the warm start uses those 3" in caplog.text, caplog.text
