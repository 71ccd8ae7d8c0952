"""A build for a trainer's batch (`--batch-prompts`, `--tail`) on the real MuSiQue sample, through the `curriculum
build` command: a build no trainer could take a step on is refused (`--tail trim` of fewer rows than one batch)
or warned with its rows, batch and steps (`--tail keep`), and the advice never names the option already given."""

from __future__ import annotations

import logging

from conftest import MUSIQUE_TRAIN
from typer.testing import CliRunner

from rag_curriculum.cli import app
from rag_curriculum.shards import read_manifest, read_rows

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def build(out, *args):
    return run("build", "--dataset", "musique", "--input", MUSIQUE_TRAIN, "--schedule", "linear", "--out", out,
               "--no-progress", *args)


def test_trimming_fewer_rows_than_a_batch_is_refused_with_the_numbers(shared_data, tmp_path):
    r = build(tmp_path / "c", "--n", 3, "--batch-prompts", 4, "--tail", "trim")
    assert r.exit_code == 1, r.output
    said = " ".join(r.output.split())
    assert "--tail trim would leave 0 rows: the 3 row(s) asked for are fewer than one batch of --batch-prompts 4" in said
    assert "a trainer would train 0 steps on them" in said and "Nothing was written" in said
    assert "use --tail pad (4 rows, one step), or --n 4 or more, or --batch-prompts 3 or fewer" in said
    assert "wrote" not in said and not (tmp_path / "c").exists()
    # what it advises works: --tail pad gives the batch's 4 rows, one step
    r = build(tmp_path / "p", "--n", 3, "--batch-prompts", 4, "--tail", "pad")
    assert r.exit_code == 0, r.output
    assert len(read_rows(tmp_path / "p")) == 4 and "wrote 4 rows" in r.output and ": 1 step of 4 prompts" in r.output


def test_a_build_that_gives_no_step_says_so_and_never_advises_what_was_given(shared_data, tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="rag_curriculum"):
        r = build(tmp_path / "k", "--n", 3, "--batch-prompts", 4)
    assert r.exit_code == 0, r.output
    (said,) = [m for m in caplog.messages if "cannot train" in m]
    assert "its 3 row(s) are fewer than one batch of --batch-prompts 4, so a trainer that drops the last partial " \
           "batch trains 0 steps and never sees any of them" in said
    assert "--tail pad" in said and "--tail trim" not in said  # trim would leave nothing
    assert read_manifest(tmp_path / "k")["trainer_tail"] == {"batch_prompts": 4, "steps": 0, "unseen_rows": 3}
    assert ": 0 steps of 4 prompts" in r.output
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rag_curriculum"):  # a whole step and a partial batch
        r = build(tmp_path / "k6", "--n", 6, "--batch-prompts", 4)
    (said,) = [m for m in caplog.messages if "partial batch" in m]
    assert "1 step(s), and 2 row(s) of 6 will never be trained on (use --tail trim or --tail pad)" in said
