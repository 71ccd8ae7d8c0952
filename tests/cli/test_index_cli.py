"""`curriculum index`: --overwrite keeps what the toolkit did not write (as build, partition and eval do), and the
temporary folders of killed runs are removed by the next run (as builds' are)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest
from conftest import MUSIQUE_TRAIN
from rag_retriever import load_index
from typer.testing import CliRunner

from rag_curriculum.cli import app

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def index(out, *more):
    return run("index", "-d", "musique", "-i", MUSIQUE_TRAIN, "-o", out, "--no-progress", "--depth", 5, *more)


def _dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


@pytest.mark.slow
def test_overwrite_keeps_the_files_the_toolkit_did_not_write_and_names_them(shared_data, tmp_path, caplog):
    out = tmp_path / "idx"
    assert index(out).exit_code == 0
    (out / "notes.txt").write_text("my notes\n")
    (out / "mine").mkdir()
    (out / "mine" / "a.json").write_text("{}")
    (out / "bm25" / "extra.txt").write_text("mine too")  # inside a folder of the toolkit's
    before = json.loads((out / "manifest.json").read_text())
    with caplog.at_level(logging.WARNING):
        r = index(out, "--overwrite", "--k1", 1.2)
    assert r.exit_code == 0, r.output
    assert (out / "notes.txt").read_text() == "my notes\n"
    assert (out / "mine" / "a.json").read_text() == "{}"
    assert (out / "bm25" / "extra.txt").read_text() == "mine too"
    warned = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert any("kept 3 the toolkit did not write: bm25/extra.txt, mine/, notes.txt" in w for w in warned), warned
    after = json.loads((out / "manifest.json").read_text())
    assert before["bm25"]["k1"] == 1.5 and after["bm25"]["k1"] == 1.2
    assert not (out / ".manifest.json.replacing").exists()
    assert len(load_index(out)) > 0  # a whole index: its files match its manifest
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".idx.")]


@pytest.mark.slow
def test_overwrite_of_an_index_with_only_its_own_files_replaces_it_whole(shared_data, tmp_path, caplog):
    out = tmp_path / "idx"
    assert index(out).exit_code == 0
    with caplog.at_level(logging.WARNING):
        assert index(out, "--overwrite").exit_code == 0
    assert not [rec for rec in caplog.records if rec.levelno >= logging.WARNING]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]


@pytest.mark.slow
def test_an_unfinished_overwrite_in_place_is_finished_by_the_next_overwrite(shared_data, tmp_path):
    out = tmp_path / "idx"
    assert index(out).exit_code == 0
    (out / "notes.txt").write_text("n")
    os.replace(out / "manifest.json", out / ".manifest.json.replacing")  # killed just after moving it aside
    assert index(out, "--overwrite").exit_code == 0
    assert (out / "notes.txt").read_text() == "n" and (out / "manifest.json").is_file()
    assert not (out / ".manifest.json.replacing").exists()


def test_the_temporary_folders_of_killed_runs_are_removed_by_the_next_run(shared_data, tmp_path):
    from rag_curriculum._commit import _HOST, owner_tag

    out = tmp_path / "idx"
    dead = _dead_pid()
    legacy = tmp_path / f".idx.tmp-{dead}-0a1b2c3d"  # what a killed run left before the owner tag
    tagged = tmp_path / f".idx.tmp-{dead}-1-{_HOST}-0"
    old = tmp_path / f".idx.old-{dead}-1-{_HOST}-0"
    elsewhere = tmp_path / f".idx.tmp-{dead}-1-{'0' * 8}-0"  # another machine's (a shared disk): not checkable
    live = tmp_path / f".idx.tmp-{owner_tag()}"  # this process is alive: its folder stays
    other_out = tmp_path / f".other.tmp-{dead}-0a1b2c3d"  # another output's: not this run's to clean
    for d in (legacy, tagged, old, live, other_out, elsewhere):
        d.mkdir()
        (d / "passages.bin").write_bytes(b"half")
    assert index(out).exit_code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([out.name, live.name, other_out.name, elsewhere.name])
