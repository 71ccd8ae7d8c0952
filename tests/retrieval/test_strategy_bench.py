"""bench/bench_bm25_strategies.py on a real BM25 index of the MuSiQue sample: both strategies, and ``--baseline-src``
(this checkout's search against another checkout's ``src``, here the same one: the digests must agree)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import MUSIQUE_TRAIN, ROOT
from rag_retriever import IndexConfig, build_index

BENCH = ROOT / "bench" / "bench_bm25_strategies.py"


@pytest.mark.slow
def test_the_strategy_bench_compares_strategies_and_checkouts(tmp_path):
    index = tmp_path / "index"
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(index)))
    alone = subprocess.run([sys.executable, str(BENCH), "--index", str(index), "--queries", "20", "--rounds", "1"],
                           capture_output=True, text=True, timeout=300)
    assert alone.returncode == 0, alone.stderr[-2000:]
    assert "the same ids and scores from both" in alone.stdout
    assert re.search(r"round 1: windowed [\d.]+ ms a query, term at a time [\d.]+: [\d.]+x", alone.stdout), alone.stdout
    against = subprocess.run([sys.executable, str(BENCH), "--index", str(index), "--queries", "20", "--rounds", "2",
                              "--baseline-src", str(ROOT / "src")], capture_output=True, text=True, timeout=300)
    assert against.returncode == 0, against.stderr[-2000:]
    assert "the same ids and scores from both checkouts" in against.stdout, against.stdout
    rounds = re.findall(r"round \d: windowed [\d.]+ ms a query then, [\d.]+ now: [\d.]+x; term at a time [\d.]+ ms a "
                        r"query then, [\d.]+ now: [\d.]+x", against.stdout)
    assert len(rounds) == 2, against.stdout
    # a folder without the package is refused (the installed copy would stand in for it, compared with itself)
    broken = subprocess.run([sys.executable, str(BENCH), "--index", str(index), "--queries", "5", "--rounds", "1",
                             "--baseline-src", str(tmp_path / "no-such-src")], capture_output=True, text=True,
                            timeout=300)
    assert broken.returncode != 0 and "no rag_curriculum package there" in broken.stderr, broken.stderr[-2000:]
