"""`curriculum inspect` on shard directories, on the real samples: each level with the distractors
and passages it holds as built and the levels that collapse (HotpotQA's 8 distractors in a linear K = 10 build),
levels sorted as numbers in `--json` (also for a manifest written with its keys sorted as text), `--row N` (one
row as the model sees it: its messages, or with `--tokenizer` the chat template's text), and Search-R1's rows
described by their sources, answers and prompt lengths instead of zeros."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import HOTPOT_TRAIN
from typer.testing import CliRunner

from rag_curriculum.cli import app
from rag_curriculum.shards import read_rows

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "200"})


@pytest.fixture(scope="module")
def k10(tmp_path_factory, shared_data) -> Path:
    out = tmp_path_factory.mktemp("inspect") / "hotpotqa-linear"
    r = run("build", "-d", "hotpotqa", "-i", HOTPOT_TRAIN, "--schedule", "linear", "--K", 10, "-o", out,
            "--no-progress")
    assert r.exit_code == 0, r.output
    return out


@pytest.fixture(scope="module")
def search_r1(tmp_path_factory, shared_data) -> Path:
    from support.search_r1_files import write_search_r1_parquet

    tmp = tmp_path_factory.mktemp("inspect-sr1")
    src = write_search_r1_parquet(tmp / "train.parquet", [("hotpotqa", 6), ("musique", 5)])
    out = tmp / "search-r1"
    r = run("build", "--dataset", "search-r1", "--input", src, "-o", out, "--no-progress")
    assert r.exit_code == 0, r.output
    return out


def _table_row(output: str, level: int) -> list[str]:
    for line in output.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃]", line) if c.strip()]
        if cells and cells[0] == str(level):
            return cells
    raise AssertionError(f"no row for level {level} in:\n{output}")


def test_inspect_shows_each_level_as_built_and_the_levels_that_collapse(k10):
    r = run("inspect", k10)
    assert r.exit_code == 0, r.output
    header = next(line for line in r.output.splitlines() if "level" in line and "asked" in line)
    assert [c.strip() for c in re.split(r"[│┃]", header) if c.strip()] == [
        "level", "rows", "index range", "asked", "shown", "passages", "short", "hops 2/3/4+"]
    assert _table_row(r.output, 8) == ["8", "10", "70..79", "8.00", "8.00", "10.00", "0", "10/0/0"]
    assert _table_row(r.output, 9) == ["9", "10", "80..89", "9.00", "8.00", "10.00", "10", "10/0/0"]
    assert _table_row(r.output, 10) == ["10", "10", "90..99", "10.00", "8.00", "10.00", "10", "10/0/0"]
    text = " ".join(r.output.split())
    assert "capped levels: Levels 8, 9 and 10 of hotpotqa hold the same difficulty" in text
    assert "--distractors bm25 --index DIR" in text


def test_inspect_json_sorts_levels_as_numbers_even_in_a_manifest_sorted_as_text(k10, tmp_path):
    ten = [str(lv) for lv in range(1, 11)]
    for directory in (k10, _as_text_sorted_copy(k10, tmp_path)):
        r = run("inspect", directory, "--json")
        assert r.exit_code == 0, r.output
        m = json.loads(r.output)
        assert list(m["counts"]["levels"]) == ten, directory
        assert list(m["counts"]["levels_by_source"]["hotpotqa"]) == ten


def _as_text_sorted_copy(directory: Path, tmp_path: Path) -> Path:
    """The build as an earlier version wrote it: the manifest's keys sorted as text ("1", "10", "2", ...)."""
    import shutil

    copy = tmp_path / "old"
    shutil.copytree(directory, copy)
    m = json.loads((copy / "manifest.json").read_text())
    (copy / "manifest.json").write_text(json.dumps(m, indent=2, sort_keys=True) + "\n")
    assert list(json.loads((copy / "manifest.json").read_text())["counts"]["levels"])[:3] == ["1", "10", "2"]
    return copy


def test_inspect_row_prints_the_rows_messages_as_the_model_sees_them(k10):
    row = read_rows(k10)[95]
    r = run("inspect", k10, "--row", 95)
    assert r.exit_code == 0, r.output
    first = r.output.splitlines()[0]
    assert f"row 95 of {k10}: {row['id']}" in first and "level 10, 2 gold + 8 distractor passages" in first
    assert "capped: shows what level 8 shows" in first and repr(row["answers"]) in first
    for m in row["prompt"]:  # every message, role by role, its text as it is
        assert m["content"] in r.output and m["role"] in r.output
    assert r.output.index(row["prompt"][0]["content"]) < r.output.index(row["prompt"][1]["content"])
    j = run("inspect", k10, "--row", 95, "--json")
    assert j.exit_code == 0, j.output
    got = json.loads(j.output)
    assert got["messages"] == row["prompt"] and got["id"] == row["id"] and got["shows_level"] == 8
    assert got["curriculum_index"] == 95 and got["level"] == 10 and got["num_distractors"] == 8


def test_inspect_row_with_a_tokenizer_prints_the_chat_templates_text(k10, tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    row = read_rows(k10)[3]
    r = run("inspect", k10, "--row", 3, "--tokenizer", tiny_model_dir, "--json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.output)
    assert got["rendered"] == tok.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=False)
    assert got["prompt_tokens"] == len(tok.apply_chat_template(row["prompt"], add_generation_prompt=True,
                                                               tokenize=True, return_dict=True)["input_ids"])
    plain = run("inspect", k10, "--row", 3, "--tokenizer", tiny_model_dir)
    assert plain.exit_code == 0 and got["rendered"].strip() in plain.output
    assert f"chat template: {got['prompt_tokens']:,} tokens" in plain.output


@pytest.mark.parametrize(("args", "says"), [
    (["--row", 100], "--row 100: {d} has 100 rows (0..99)"),
    (["--tokenizer", "x"], "--tokenizer renders one row: give --row N too"),
])
def test_inspect_row_refusals(k10, args, says):
    r = run("inspect", k10, *args)
    assert r.exit_code == 2 and says.format(d=k10) in " ".join(r.output.split()), r.output


def test_inspect_row_of_a_source_file_is_refused(shared_data):
    r = run("inspect", HOTPOT_TRAIN, "--row", 0)
    assert r.exit_code == 2 and "--row reads a shard directory" in r.output


def test_inspect_describes_search_r1_rows_by_sources_answers_and_prompt_lengths(search_r1):
    rows = read_rows(search_r1)
    r = run("inspect", search_r1)
    assert r.exit_code == 0, r.output
    assert "0/0/0" not in r.output and "distractors" not in r.output  # no passages: nothing of the kind to count
    text = " ".join(r.output.split())
    assert "(curriculum, 11 rows): questions without passages" in text
    assert _table_row_named(r.output, "hotpotqa")[:4] == ["hotpotqa", "6", "54.5%", "0..5"]
    assert _table_row_named(r.output, "musique")[:4] == ["musique", "5", "45.5%", "6..10"]
    answers = sum(len(x["answers"]) for x in rows)
    assert f"answers: {answers} for 11 questions" in text
    chars = [sum(len(m["content"]) for m in x["prompt"]) for x in rows]
    assert (f"prompt length (characters of its messages): min {min(chars):,}, mean {sum(chars) / 11:,.0f}, max "
            f"{max(chars):,}") in text
    assert "input: train.parquet (search-r1, 11 records)" in text
    row = run("inspect", search_r1, "--row", 7)
    assert row.exit_code == 0 and "no passages" in row.output and rows[7]["prompt"][0]["content"].strip() in row.output


def _table_row_named(output: str, name: str) -> list[str]:
    for line in output.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃]", line) if c.strip()]
        if cells and cells[0] == name:
            return cells
    raise AssertionError(f"no row {name!r} in:\n{output}")
