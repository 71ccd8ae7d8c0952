"""BM25 against pyserini itself (Search-R1's BM25 backend), side by side on the same corpus and the same queries, in
one run, one core each.

1. The corpus: ``--passages`` passages of bench/bench_serve_wiki.py's corpus (the HotpotQA-train-sized input's
   paragraphs, perturbed group by group), written in Search-R1's wiki-18 layout (``{"id", "contents":
   "\\"Title\\"\\ntext"}``), made once under the temp folder.
2. The indexes: pyserini's Lucene index of it (``python -m pyserini.index.lucene --collection JsonCollection
   --generator DefaultLuceneDocumentGenerator --storeRaw --threads 1``, as Search-R1's index builder runs it, with
   the raw documents stored so a hit's document can be read as Search-R1's server reads it), and ``curriculum index
   --corpus`` (the default backend); wall time and peak memory of each build.
3. The queries: ``--queries`` questions of the input, each engine in its own process pinned to one CPU: pyserini's
   ``LuceneSearcher.search(q, k)`` one query at a time, each hit's raw document parsed (Search-R1's
   ``retrieval_server.py``); the toolkit's index one query at a time (``retrieve_many([q], k, threads=1)`` and the
   hits' documents), and all queries in one call on one thread. Each engine runs the queries once untimed first
   (the JVM warm, each index's pages in the page cache), then timed. ``--repeats`` rounds, the engines
   alternating; the ratio per round.
4. Start-up to healthy: ``curriculum serve`` polled on ``/health``, first with the compiled search's cache cleared,
   then again (cached).

pyserini needs a JDK 11+ and its own environment (its dependencies clash with the toolkit's); give its Python with
``--pyserini-python`` (made e.g. by ``python -m venv /tmp/pyserini && /tmp/pyserini/bin/pip install
pyserini==0.22.1 --no-deps && /tmp/pyserini/bin/pip install pyjnius numpy pandas tqdm requests scipy faiss-cpu
torch transformers scikit-learn onnxruntime``, with ``JAVA_HOME`` set). Without it the script says what is missing
and stops.

    python bench/bench_pyserini.py --pyserini-python /tmp/pyserini/bin/python [--passages 453600] [--queries 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import HOTPOT_TRAIN_RECORDS, ROOT, run_child, seconds_to_healthy
from bench_index import synth_file
from bench_serve_wiki import corpus_file

PYSERINI_QUERY = r"""
import json, os, sys, time
os.sched_setaffinity(0, {{0}})
from pyserini.search.lucene import LuceneSearcher
s = LuceneSearcher({index!r})
qs = json.load(open({queries!r}))
for q in qs:  # one untimed pass, as for the toolkit: the JVM warm, the index's pages in the page cache
    [s.doc(h.docid).raw() for h in s.search(q, k={k})]
t = time.perf_counter()
n = 0
for q in qs:
    hits = s.search(q, k={k})
    docs = [json.loads(s.doc(h.docid).raw()) for h in hits]  # Search-R1's server reads each hit's raw document
    n += len(docs)
dt = time.perf_counter() - t
print(json.dumps({{"qps": len(qs) / dt, "docs": n}}))
"""

OURS_QUERY = r"""
import json, os, time
os.sched_setaffinity(0, {{0}})
from rag_curriculum.retrieval import load_index
ix = load_index({index!r}, threads=1)
ix.warm()
qs = json.load(open({queries!r}))
for q in qs:  # one untimed pass, as for pyserini: the index's pages in the page cache
    ids, _ = ix.retrieve_many([q], {k}, threads=1)
    ix.documents(ids[0][ids[0] >= 0])
t = time.perf_counter()
n = 0
for q in qs:
    ids, _ = ix.retrieve_many([q], {k}, threads=1)
    n += len(ix.documents(ids[0][ids[0] >= 0]))
one = len(qs) / (time.perf_counter() - t)
t = time.perf_counter()
ids, _ = ix.retrieve_many(qs, {k}, threads=1)
batch = len(qs) / (time.perf_counter() - t)
print(json.dumps({{"qps": one, "batch_qps": batch, "docs": n, "backend": ix.backend}}))
"""


def searchr1_corpus(passages: int) -> Path:
    """bench_serve_wiki's corpus in Search-R1's layout, made once."""
    path = Path(tempfile.gettempdir()) / f"rag-curriculum-bench-wiki-{passages}.searchr1.jsonl"
    if path.exists():
        return path
    src = corpus_file(synth_file(HOTPOT_TRAIN_RECORDS), passages)
    tmp = path.with_suffix(".tmp")
    with open(src, encoding="utf-8") as f, open(tmp, "w", encoding="utf-8") as g:
        for i, line in enumerate(f):
            rec = json.loads(line)
            g.write(json.dumps({"id": str(i), "contents": f'"{rec["title"]}"\n{rec["text"]}'}, ensure_ascii=False)
                    + "\n")
    os.replace(tmp, path)
    return path


def _last_json(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pyserini-python", type=Path, help="a Python with pyserini 0.22.1 (and JAVA_HOME set)")
    ap.add_argument("--passages", type=int, default=453_600)
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep both indexes (a later run reuses them)")
    args = ap.parse_args()
    py = args.pyserini_python
    if py is None or subprocess.run([str(py), "-c", "from pyserini.search.lucene import LuceneSearcher"],
                                    capture_output=True).returncode != 0:
        sys.exit("pyserini is not importable: give --pyserini-python (see this script's docstring), with JAVA_HOME "
                 "set to a JDK 11+")
    corpus = searchr1_corpus(args.passages)
    tmp = Path(tempfile.gettempdir())
    ours, theirs = tmp / f"rag-curriculum-bench-bm25-{args.passages}", tmp / f"rag-curriculum-bench-lucene-{args.passages}"
    queries = tmp / f"rag-curriculum-bench-queries-{args.queries}.json"
    questions = [r["question"] for r in json.loads(synth_file(HOTPOT_TRAIN_RECORDS).read_text())[:args.queries]]
    queries.write_text(json.dumps(questions))
    try:
        if not (ours / "manifest.json").exists():
            got = run_child(f"from rag_curriculum.retrieval import IndexConfig, build_index\n"
                            f"build_index(IndexConfig(corpus={str(corpus)!r}, out={str(ours)!r}, overwrite=True))")
            print(f"curriculum index: {got['wall']:,.0f} s, peak RSS {got['peak_mb']:,.0f} MB", flush=True)
        if not theirs.exists():
            docs = tmp / f"rag-curriculum-bench-lucene-input-{args.passages}"
            docs.mkdir(exist_ok=True)
            link = docs / "corpus.jsonl"
            if not link.exists():
                link.symlink_to(corpus)
            t = time.perf_counter()
            r = subprocess.run([str(py), "-m", "pyserini.index.lucene", "--collection", "JsonCollection", "--input",
                                str(docs), "--index", str(theirs), "--generator", "DefaultLuceneDocumentGenerator",
                                "--threads", "1", "--storeRaw"], capture_output=True, text=True)
            if r.returncode:
                sys.exit(r.stderr[-3000:])
            print(f"pyserini index (1 thread): {time.perf_counter() - t:,.0f} s", flush=True)
        m = json.loads((ours / "manifest.json").read_text())
        print(f"{m['passages']:,} passages (vocabulary {m['vocab_size']:,}); {len(questions):,} queries, top {args.k}, "
              "one core each", flush=True)
        for rnd in range(args.repeats):
            a = _last_json(subprocess.run([str(py), "-c", PYSERINI_QUERY.format(index=str(theirs), queries=str(queries),
                                                                                 k=args.k)],
                                          capture_output=True, text=True, check=True).stdout)
            b = _last_json(subprocess.run([sys.executable, "-c", OURS_QUERY.format(index=str(ours), queries=str(queries),
                                                                                  k=args.k)],
                                          capture_output=True, text=True, check=True).stdout)
            print(f"round {rnd + 1}: pyserini {a['qps']:8.1f} q/s | curriculum ({b['backend']}) one at a time "
                  f"{b['qps']:8.1f} q/s = {b['qps'] / a['qps']:5.1f}x, batched {b['batch_qps']:8.1f} q/s = "
                  f"{b['batch_qps'] / a['qps']:5.1f}x", flush=True)
        cache = ROOT / "src" / "rag_curriculum" / "retrieval" / "__pycache__"
        for f in cache.glob("_bm25_numba*.nb*"):
            f.unlink()
        serve = [sys.executable, "-m", "rag_curriculum.cli", "serve", "--index", str(ours), "--port", "8791"]
        first, again = seconds_to_healthy(serve, 8791), seconds_to_healthy(serve, 8791)
        print(f"curriculum serve healthy after {first:.2f} s (compiled search not cached), {again:.2f} s (cached)")
    finally:
        if not args.keep:
            shutil.rmtree(ours, ignore_errors=True)
            shutil.rmtree(theirs, ignore_errors=True)


if __name__ == "__main__":
    main()
