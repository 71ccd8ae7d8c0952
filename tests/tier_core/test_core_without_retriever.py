"""rag-curriculum installed without rag-retriever (the retriever is the ``retrieval`` extra): a build from the
dataset's own distractors runs, the retriever's commands are listed and say which extra to install, and a build that
needs an index says so, in one line each, never a traceback."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("rag_retriever") is not None,
                                reason="rag-retriever is installed here: the core tier runs without it "
                                       "(.venv-core, scripts/setup.sh core)")

ROOT = Path(__file__).resolve().parents[2]
MUSIQUE = ROOT.parent / "shared" / "data" / "musique" / "musique_ans_v1.0_train.sample100.jsonl"


def curriculum(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rag_curriculum.cli", *args], capture_output=True, text=True,
                          timeout=300)


def test_the_shared_plumbing_is_there_and_the_retriever_is_not():
    assert importlib.util.find_spec("rag_plumbing") is not None
    assert importlib.util.find_spec("rag_retriever") is None


def test_a_build_from_the_datasets_own_distractors_needs_no_retriever(core_shards):
    # the min-max curriculum of the root conftest was built in this process, without rag-retriever
    assert (core_shards / "manifest.json").is_file()
    assert "rag_retriever" not in sys.modules


@pytest.mark.parametrize("command", ["index", "serve"])
def test_the_retriever_commands_say_which_extra_to_install(command):
    r = curriculum(command, "--out", "x", "--port", "1")  # whatever it is given
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    assert f"curriculum {command} needs rag-retriever" in r.stderr
    assert "pip install 'rag-curriculum[retrieval]'" in r.stderr and "./retriever" in r.stderr
    listed = curriculum(command, "--help")
    assert listed.returncode == 0 and "pip install 'rag-curriculum[retrieval]'" in listed.stdout


def test_a_build_that_reads_an_index_names_the_extra(tmp_path):
    r = curriculum("build", "--dataset", "musique", "--input", str(MUSIQUE), "--n", "5", "--distractors", "bm25",
                   "--index", str(tmp_path / "ix"), "--out", str(tmp_path / "out"))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    assert "rag_retriever" in r.stderr and "pip install 'rag-curriculum[retrieval]'" in r.stderr
    assert not (tmp_path / "out").exists()
