"""The toolkit's Lucene-identical BM25 preset against pyserini itself: on the shared data's 12,061
real paragraphs (pooled, deduplicated; their punctuation, numbers, accents and possessives as they are), 300 of the
1,200 questions, the top-10 lists are identical (ids and order) for at least 98% of the questions and every score
of a hit ranked alike is within 1e-5 relative of the score pyserini returns.

pyserini's side is built and searched exactly as Search-R1's BM25 retriever does (``bench/pyserini_oracle.py``:
``python -m pyserini.index.lucene --collection JsonCollection --generator DefaultLuceneDocumentGenerator --threads
1`` on the corpus, ``LuceneSearcher(index).search(q, k=10)``); the toolkit's is the retriever's own
``rag-retriever index --corpus`` (rag_retriever, installed from ./retriever) with the preset's flags
(``bench_lucene_parity.PRESET_ARGS``). The whole 1,200 and the 2,000-question bench figures are
``bench/bench_lucene_parity.py``'s.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"

QUERIES = 300  # every 4th question of the 1,200: all five files


@pytest.fixture(scope="module")
def oracle(tmp_path_factory, shared_corpus, java_version):
    corpus, queries = shared_corpus
    out = tmp_path_factory.mktemp("pyserini")
    picked = out / "queries.json"
    picked.write_text(json.dumps(queries[::len(queries) // QUERIES][:QUERIES], ensure_ascii=False))
    r = subprocess.run([sys.executable, str(BENCH / "pyserini_oracle.py"), "--corpus", str(corpus), "--queries",
                        str(picked), "--out", str(out), "--no-analyze"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    return out, json.loads(picked.read_text())


def test_pyserini_is_searched_as_search_r1_builds_it(oracle, shared_corpus):
    """The oracle is what it says: Search-R1's index command line, no raw documents stored (so Search-R1's server
    reads passages from the corpus file), every corpus line indexed, Lucene 9.9.1."""
    out, queries = oracle
    stats = json.loads((out / "stats.json").read_text())
    assert stats["command"][1:] == ["-m", "pyserini.index.lucene", "--collection", "JsonCollection", "--input",
                                    str(out / "input"), "--index", str(out / "index"), "--generator",
                                    "DefaultLuceneDocumentGenerator", "--threads", "1"]
    assert (stats["pyserini"], stats["lucene"]) == ("0.25.0", "9.9.1")
    corpus, _ = shared_corpus
    assert stats["docCount"] == sum(1 for _ in open(corpus, encoding="utf-8")) == 12_061
    run = [json.loads(line) for line in open(out / "run.jsonl", encoding="utf-8")]
    assert [r["id"] for r in run] == [q["id"] for q in queries] and len(run) == QUERIES
    assert all(len(r["hits"]) == 10 for r in run)
    assert stats["raw_stored"] is False


def test_the_lucene_preset_ranks_as_pyserini(oracle, shared_corpus, parity_module, tmp_path):
    corpus, _ = shared_corpus
    out, queries = oracle
    index = tmp_path / "toolkit"
    try:
        parity_module.toolkit_index(corpus, index, parity_module.PRESET_ARGS, python=sys.executable)
    except RuntimeError as e:
        pytest.fail(f"the toolkit's Lucene preset ({shlex.join(parity_module.PRESET_ARGS)}) did not build: {e}")
    res = parity_module.compare(out, parity_module.toolkit_run(index, queries))
    shown = "\n".join(f"{q['id']} {q['query']!r} {q['tokens']} rank {q['rank']}: pyserini {q['pyserini']} toolkit "
                      f"{q['toolkit']}" for q in res["differing"][:10])
    assert res["identical_rate"] >= 0.98, f"{res['identical']} of {res['queries']} identical top-10:\n{shown}"
    assert res["rel_max"] <= 1e-5, (res["rel_max"], res["rel_max_vs_raw"])
