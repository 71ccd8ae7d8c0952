"""BM25 against pyserini itself (Search-R1's BM25 backend), side by side on the same corpus and the same queries, in
one run: build time, peak memory and size on disk of both indexes, queries/s per core, start-up to healthy.

1. The corpus: ``--passages`` passages of bench/bench_index.py's ``corpus_file`` (the HotpotQA-train-sized input's
   paragraphs, perturbed group by group), written in Search-R1's wiki-18 layout (``{"id", "contents":
   "\\"Title\\"\\ntext"}``), made once under ``--work`` (default: the temp folder).
2. The indexes: pyserini's Lucene index, built as Search-R1's ``index_builder.py`` runs it (``python -m
   pyserini.index.lucene --collection JsonCollection --generator DefaultLuceneDocumentGenerator --threads N``;
   ``--store-raw`` adds ``--storeRaw``), and ``curriculum index --corpus`` with ``--bm25 PRESET`` (``lucene``, the
   default here and what ``auto`` picks for this layout; or ``bm25s``); each build's wall time, CPU time (user
   and system, every process: a one-thread pyserini build keeps more than one core busy, and the toolkit's build
   runs two processes) and peak resident memory (the toolkit's: its main process plus its passage-side worker,
   which run at once), and each index's bytes on disk (the toolkit's split into its BM25 files, its passage store
   and the rest).
3. The queries: ``--queries`` questions of the input, each engine in its own process pinned to one CPU:
   pyserini's ``LuceneSearcher.search(q, k)`` one query at a time, each hit's document read as Search-R1's
   ``retrieval_server.py`` reads it (``doc(docid).raw()`` from an index with raw documents, else the corpus line by
   docid: from a dict in memory, the fastest read there is, then again as Search-R1's server does it, a row of the
   corpus loaded with ``datasets``' json loader, ``corpus[int(docid)]``, both printed); the toolkit's index one
   query at a time (``retrieve_many([q], k, threads=1)`` and the hits' documents), and all queries in one call on
   one thread. Each engine runs the queries untimed first (the index's pages in the page cache; pyserini three
   times, so the JVM's compiler is done: its second pass is still 1.5x slower than its third; the toolkit twice),
   then timed; ``--repeats`` rounds, the engines alternating; the ratio per round. The first untimed pass also compares the two engines' lists: with ``--bm25 lucene`` they are
   the same ids in the same order (and scores) for nearly every query (bench/bench_lucene_parity.py measures parity
   at top 10 on every question).
4. Start-up to healthy: ``curriculum serve`` polled on ``/health``, first with the compiled search's cache cleared,
   then again (cached).

``--builds N`` times the two builds alone instead, alternated, ``N`` rounds, into temporary folders removed after
each round (the corpus is one file, as Search-R1's wiki-18 is: pyserini indexes a file on one thread whatever its
``--threads``), and prints the ratio of each round's wall and CPU times.

pyserini needs a JDK 11+ and its own environment (its dependencies clash with the toolkit's): give its Python with
``--pyserini-python`` (scripts/setup.sh pyserini makes one). Without it the script says what is missing and stops.

    python bench/bench_pyserini.py --pyserini-python PY [--passages 453600] [--queries 2000] [--bm25 lucene]
    python bench/bench_pyserini.py --pyserini-python PY --passages 5233329 --work DIR --builds 2
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

from _common import HOTPOT_TRAIN_RECORDS, ROOT, seconds_to_healthy
from bench_index import corpus_file, synth_file

PYSERINI_QUERY = r"""
import json, os, sys, time
os.sched_setaffinity(0, {{0}})
from pyserini.search.lucene import LuceneSearcher
s = LuceneSearcher({index!r})
qs = json.load(open({queries!r}))
raw = s.doc(0) is not None and s.doc(0).raw() is not None
corpus = rows = None
if not raw:  # Search-R1's server reads the passages from the corpus when the index has no raw documents
    corpus = {{}}
    with open({corpus!r}, encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            corpus[rec["id"]] = rec
    # and as its retrieval_server.py reads them: load_corpus (datasets' json loader), then load_docs,
    # corpus[int(docid)] a hit
    import datasets
    datasets.disable_progress_bars()
    rows = datasets.load_dataset("json", data_files={corpus!r}, split="train", cache_dir={cache!r})
def docs(hits):
    return [json.loads(s.doc(h.docid).raw()) if raw else corpus[h.docid] for h in hits]
def docs_datasets(hits):
    return [rows[int(h.docid)] for h in hits]
lists = []
for q in qs:  # untimed passes, as for the toolkit: the index's pages in the page cache, and the JVM's code compiled
    hits = s.search(q, k={k})  # (its JIT goes on compiling for two passes of 2,000 queries: 328, 704, then 1,000 to
    docs(hits)  # 1,130 queries/s at 453,600 passages; two more passes keep that out of the times)
    lists.append([[h.docid, h.score] for h in hits])
for _ in range(2):
    for q in qs:
        docs(s.search(q, k={k}))
        if rows is not None:
            docs_datasets(s.search(q, k={k}))
def timed(read):
    t = time.perf_counter()
    n = 0
    for q in qs:
        n += len(read(s.search(q, k={k})))
    return len(qs) / (time.perf_counter() - t), n
qps, n = timed(docs)
out = {{"qps": qps, "docs": n, "lists": lists}}
if rows is not None:
    out["qps_datasets"] = timed(docs_datasets)[0]
print(json.dumps(out))
"""

OURS_QUERY = r"""
import json, os, time
os.sched_setaffinity(0, {{0}})
from rag_retriever import load_index
ix = load_index({index!r}, threads=1)
ix.warm()
qs = json.load(open({queries!r}))
lists = []
for q in qs:  # untimed passes, as for pyserini: the index's pages in the page cache
    ids, scores = ix.retrieve_many([q], {k}, threads=1)
    got = ids[0] >= 0
    docs = ix.documents(ids[0][got])
    lists.append([[d[0], float(s)] for d, s in zip(docs, scores[0][got])])
for q in qs:
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
print(json.dumps({{"qps": one, "batch_qps": batch, "docs": n, "backend": ix.backend, "lists": lists}}))
"""

OURS_BUILD = r"""
import json, resource, time
from rag_retriever import IndexConfig, build_index
t = time.perf_counter()
m = build_index(IndexConfig(corpus={corpus!r}, out={out!r}, overwrite=True, bm25={bm25!r}, depth=10))
wall = time.perf_counter() - t
# VmHWM, this process's own peak: ru_maxrss would keep the peak of the bench process that started it (Linux keeps
# it across exec), about 3 GB once it has read the synthetic input's questions
hwm = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:"))
kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # the passage-side worker (forked: its own peak)
me = resource.getrusage(resource.RUSAGE_SELF)
cpu = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime  # CPU seconds of every process of the build
print(json.dumps({{"wall": wall, "cpu": cpu, "peak_mb": hwm / 1024, "worker_peak_mb": kids.ru_maxrss / 1024,
                  "seconds": m["seconds"], "vocab": m.get("vocab_size"), "postings": m.get("postings")}}))
"""


STORE_FILES = ("passages.bin", "norms.bin", "passage_keys.npy")  # the passage store (retrieval/_store.py)


def search_r1_corpus(passages: int, work: Path) -> Path:
    """bench_index.py's corpus in Search-R1's layout, made once (under ``work``)."""
    path = work / f"rag-curriculum-bench-wiki-{passages}.search_r1.jsonl"
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


def _bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else path.stat().st_size


def _gb(n: int) -> str:
    return f"{n / 1e9:.3f} GB"


def build_pyserini(py: Path, corpus: Path, index: Path, threads: int, store_raw: bool) -> dict:
    docs = index.with_name(index.name + "-input")
    docs.mkdir(exist_ok=True)
    link = docs / "corpus.jsonl"
    if not link.exists():
        link.symlink_to(corpus)
    argv = [str(py), "-m", "pyserini.index.lucene", "--collection", "JsonCollection", "--input", str(docs),
            "--index", str(index), "--generator", "DefaultLuceneDocumentGenerator", "--threads", str(threads)]
    if store_raw:
        argv.append("--storeRaw")
    t = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-f", "PEAK_KB %M CPU %U %S", *argv], capture_output=True, text=True)
    wall = time.perf_counter() - t
    if r.returncode:
        sys.exit(r.stderr[-3000:])
    line = next((x.split() for x in r.stderr.splitlines() if x.startswith("PEAK_KB")), ["", "0", "", "0", "0"])
    return {"wall": wall, "peak_mb": int(line[1]) / 1024, "cpu": float(line[3]) + float(line[4])}


def _build_ours(corpus: Path, out: Path, bm25: str) -> dict:
    r = subprocess.run([sys.executable, "-c", OURS_BUILD.format(corpus=str(corpus), out=str(out), bm25=bm25)],
                       capture_output=True, text=True, check=True)
    return _last_json(r.stdout)


def time_builds(args: argparse.Namespace, py: Path, corpus: Path) -> None:
    """``--builds``: both builds alone, alternated, each round's ratios."""
    ours = args.work / f"rag-curriculum-bench-build-{args.passages}-{args.bm25}"
    theirs = args.work / f"rag-curriculum-bench-build-lucene-{args.passages}{'-raw' if args.store_raw else ''}"
    try:
        for rnd in range(args.builds):
            a = _build_ours(corpus, ours, args.bm25)
            shutil.rmtree(ours, ignore_errors=True)
            b = build_pyserini(py, corpus, theirs, args.threads, args.store_raw)
            shutil.rmtree(theirs, ignore_errors=True)
            print(f"round {rnd + 1}: curriculum index --bm25 {args.bm25} {a['wall']:,.1f} s (CPU {a['cpu']:,.0f} s; "
                  f"{a['seconds']}) | pyserini ({args.threads} thread{'s' if args.threads > 1 else ''}"
                  f"{', raw documents' if args.store_raw else ''}) {b['wall']:,.1f} s (CPU {b['cpu']:,.0f} s): wall "
                  f"{a['wall'] / b['wall']:.2f}x, CPU {a['cpu'] / b['cpu']:.2f}x; peak {a['peak_mb']:,.0f} + "
                  f"{a['worker_peak_mb']:,.0f} MB against {b['peak_mb']:,.0f} MB", flush=True)
    finally:
        for d in (ours, theirs, theirs.with_name(theirs.name + "-input")):  # (pyserini's input: a link to the corpus)
            shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pyserini-python", type=Path, help="a Python with pyserini (and a JDK 11+ on PATH)")
    ap.add_argument("--passages", type=int, default=453_600)
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bm25", default="lucene", choices=("lucene", "bm25s"), help="the toolkit's BM25 preset")
    ap.add_argument("--threads", type=int, default=1, help="pyserini's indexing threads")
    ap.add_argument("--store-raw", action="store_true", help="pyserini's index keeps the raw documents")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()), help="where corpus and indexes go")
    ap.add_argument("--keep", action="store_true", help="keep both indexes (a later run reuses them)")
    ap.add_argument("--builds", type=int, default=0, help="time the two builds alone, alternated, this many rounds")
    args = ap.parse_args()
    py = args.pyserini_python
    if py is None or subprocess.run([str(py), "-c", "from pyserini.search.lucene import LuceneSearcher"],
                                    capture_output=True).returncode != 0:
        sys.exit("pyserini is not importable: give --pyserini-python (scripts/setup.sh pyserini makes one), with a "
                 "JDK 11+ on PATH")
    args.work.mkdir(parents=True, exist_ok=True)
    corpus = search_r1_corpus(args.passages, args.work)
    tag = f"{args.passages}-{args.bm25}"
    ours = args.work / f"rag-curriculum-bench-bm25-{tag}"
    theirs = args.work / f"rag-curriculum-bench-lucene-{args.passages}{'-raw' if args.store_raw else ''}"
    queries = args.work / f"rag-curriculum-bench-queries-{args.queries}.json"
    questions = [r["question"] for r in json.loads(synth_file(HOTPOT_TRAIN_RECORDS).read_text())[:args.queries]]
    queries.write_text(json.dumps(questions))
    if args.builds:
        return time_builds(args, py, corpus)
    try:
        if not (ours / "manifest.json").exists():
            got = _build_ours(corpus, ours, args.bm25)
            print(f"curriculum index --bm25 {args.bm25}: {got['wall']:,.0f} s ({got['seconds']}; CPU "
                  f"{got['cpu']:,.0f} s, {got['cpu'] / got['wall']:.2f} cores busy), peak RSS "
                  f"{got['peak_mb']:,.0f} MB + passage worker {got['worker_peak_mb']:,.0f} MB; vocabulary "
                  f"{got['vocab']:,}, {got['postings']:,} postings", flush=True)
        if not theirs.exists():
            got = build_pyserini(py, corpus, theirs, args.threads, args.store_raw)
            print(f"pyserini index ({args.threads} thread{'s' if args.threads > 1 else ''}"
                  f"{', raw documents' if args.store_raw else ''}): {got['wall']:,.0f} s (CPU {got['cpu']:,.0f} s, "
                  f"{got['cpu'] / got['wall']:.2f} cores busy), peak RSS "
                  f"{got['peak_mb']:,.0f} MB", flush=True)
        m = json.loads((ours / "manifest.json").read_text())
        bm25_b, total_b, lucene_b = _bytes(ours / "bm25"), _bytes(ours), _bytes(theirs)
        store_b = sum(_bytes(ours / f) for f in STORE_FILES if (ours / f).exists())
        print(f"on disk: curriculum {_gb(total_b)} (BM25 {_gb(bm25_b)}, passages {_gb(store_b)}, the rest "
              f"{_gb(total_b - bm25_b - store_b)}); pyserini {_gb(lucene_b)}: {total_b / lucene_b:.2f}x in all, BM25 "
              f"alone {bm25_b / lucene_b:.2f}x", flush=True)
        print(f"{m['passages']:,} passages (vocabulary {m['vocab_size']:,}); {len(questions):,} queries, top {args.k}, "
              "one core each", flush=True)
        for rnd in range(args.repeats):
            a = _last_json(subprocess.run([str(py), "-c", PYSERINI_QUERY.format(
                index=str(theirs), queries=str(queries), corpus=str(corpus), k=args.k,
                cache=str(args.work / "rag-curriculum-bench-hf-cache"))], capture_output=True, text=True,
                check=True).stdout)
            b = _last_json(subprocess.run([sys.executable, "-c", OURS_QUERY.format(index=str(ours), queries=str(queries),
                                                                                  k=args.k)],
                                          capture_output=True, text=True, check=True).stdout)
            if rnd == 0:
                same = sum([d for d, _ in x] == [d for d, _ in y] for x, y in zip(a["lists"], b["lists"], strict=True))
                print(f"the same top-{args.k} lists (ids, order): {same:,} of {len(questions):,} queries", flush=True)
            print(f"round {rnd + 1}: pyserini {a['qps']:8.1f} q/s | curriculum ({b['backend']}) one at a time "
                  f"{b['qps']:8.1f} q/s = {b['qps'] / a['qps']:5.1f}x, batched {b['batch_qps']:8.1f} q/s = "
                  f"{b['batch_qps'] / a['qps']:5.1f}x", flush=True)
            if "qps_datasets" in a:
                print(f"         pyserini, each hit's row read as Search-R1's server reads it (datasets): "
                      f"{a['qps_datasets']:8.1f} q/s | curriculum one at a time {b['qps'] / a['qps_datasets']:5.1f}x, "
                      f"batched {b['batch_qps'] / a['qps_datasets']:5.1f}x", flush=True)
        cache = ROOT / "src" / "rag_curriculum" / "retrieval" / "__pycache__"
        for f in cache.glob("*.nb*"):
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
