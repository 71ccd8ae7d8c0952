"""The partition recipe's n is "up to" (RAG-RL appendix A: "up to 40,000"): a training file holding fewer
questions is partitioned whole, as MuSiQue-Ans train (19,938) is, and partition.json says how many it held; a file
holding more gives n."""

from __future__ import annotations

import json

import pytest
from conftest import MUSIQUE_TRAIN
from support.full_size import MUSIQUE_TRAIN_QUESTIONS, PAPER_N, musique_file

from rag_curriculum.config import bind, compose
from rag_curriculum.curricula import BuildConfig, SourceSpec, build_rows
from rag_curriculum.errors import BuildError
from rag_curriculum.partition import PartitionConfig
from rag_curriculum.partition._inputs import _resolve_input
from rag_curriculum.shards import read_manifest, read_rows, read_table

LEVEL = 3


def script_for(rows: list[dict], path):
    """A scripted base model (a JSON file): every third question answered right in all samples, others never."""
    def say(answer: str) -> str:
        return f"<reasoning>\nr\n</reasoning>\n<answer>\nFinal answer: {answer}\nSupporting passages: 1\n</answer>"

    script = {r["prompt"][-1]["content"]: [say(r["answers"][0] if i % 3 == 0 else "zzzq")] * 4
              for i, r in enumerate(rows)}
    path.write_text(json.dumps(script), encoding="utf-8")
    return path


@pytest.mark.slow
def test_the_recipe_partitions_every_question_of_a_smaller_file(tmp_path):
    """The shipped recipe as the README runs it (n=40000) on the 100-question sample: all 100, recorded."""
    from typer.testing import CliRunner

    from rag_curriculum.cli import app

    built = tmp_path / "built"
    build_rows(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), None, K=LEVEL)], schedule="max",
                           out=str(built), seed=0, overwrite=True, allow_split_mismatch=True), command="t",
               progress=False)
    script = script_for(read_rows(built), tmp_path / "script.json")
    out = tmp_path / "p"
    r = CliRunner().invoke(app, ["partition", "recipe=rag-rl-pass8", f"input={MUSIQUE_TRAIN}", f"K={LEVEL}",
                                 "backend=scripted", f"model={script}", "samples=4", f"out={out}", "--no-progress"])
    assert r.exit_code == 0, r.output
    summary = json.loads((out / "partition.json").read_text())
    assert summary["config"]["n"] == PAPER_N
    assert summary["sample"] == {"n": PAPER_N, "questions": 100, "all_of_file": True, "available": 100}
    assert read_manifest(out / "input")["n_up_to"] == {"musique": {"asked": PAPER_N, "available": 100}}
    counts = summary["counts"]
    assert counts["questions"] == 100
    kept = read_table(out / "answerable").num_rows
    assert kept == read_table(out / "unanswerable").num_rows == min(counts["answerable"], counts["unanswerable"])


def test_a_build_still_refuses_n_above_the_file_unless_up_to(tmp_path):
    cfg = dict(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 101, K=2)], schedule="max", out=str(tmp_path / "b"),
               allow_split_mismatch=True)
    with pytest.raises(BuildError, match="asked for n=101 questions but only 100"):
        build_rows(BuildConfig(**cfg), command="t", progress=False)
    assert "n_up_to" not in BuildConfig(**cfg).to_dict()  # a build's recorded config as before


@pytest.mark.slow
@pytest.mark.parametrize("questions", [MUSIQUE_TRAIN_QUESTIONS, PAPER_N])
def test_full_size_files_reach_the_partition_whole(tmp_path, questions):
    """The recipe's input build on full-size files: MuSiQue-Ans train's 19,938 questions all, and a 40,000-question
    file's 40,000 (no refusal, no cut)."""
    path = musique_file(tmp_path / "train.jsonl", questions, words=3)
    cfg = bind(PartitionConfig, compose("partition", "rag-rl-pass8", [f"input={path}", "K=2",
                                                                      f"out={tmp_path / 'p'}"]))
    assert cfg.n == PAPER_N
    built = _resolve_input(cfg, tmp_path / "p", progress=False)
    m = read_manifest(built)
    assert m["num_rows"] == questions
    assert m.get("n_up_to") == ({"musique": {"asked": PAPER_N, "available": questions}}
                                if questions < PAPER_N else None)
