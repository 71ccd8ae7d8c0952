"""The toolkit's Lucene BM25 preset against pyserini itself, on the same corpus and queries: identical top-10 lists,
score differences, and every query whose list differs, with the tokens involved.

    python bench/bench_lucene_parity.py --pyserini-python .venv-pyserini/bin/python --corpus shared
    python bench/bench_lucene_parity.py --pyserini-python .venv-pyserini/bin/python --corpus bench --queries 2000

1. The corpus, in Search-R1's layout (``{"id": "0", "contents": "\\"Title\\"\\ntext"}``): ``shared``, every paragraph
   of every file in ``../shared/data`` as the toolkit's loaders read them, pooled in path order and deduplicated by
   (title, text) (12,061 paragraphs; all 1,200 questions are the queries); ``bench``, bench_pyserini.py's
   ``--passages`` corpus (the HotpotQA-train-sized input's paragraphs, perturbed group by group; its first
   ``--queries`` questions); or a path (with ``--queries-file``).
2. pyserini's side (``bench/pyserini_oracle.py`` in ``--pyserini-python``): the Lucene index as Search-R1's builder
   makes it, ``LuceneSearcher.search(q, k=10)`` per query with each hit's raw Lucene score, pyserini's analyzer on
   every query (and, with ``--analyze``, every passage), the collection statistics; kept in ``--oracle`` (default:
   ``--work``/oracle-NAME) and reused.
3. The toolkit's side: ``curriculum index --corpus FILE --out DIR`` with ``--index-args`` (the Lucene preset's
   flags; default: :data:`PRESET_ARGS`), then ``retrieve_many(queries, 10)``; its passage ids mapped to the corpus
   lines' own ids.
4. Printed: the share of queries whose top-10 lists are identical (ids and order), whose top-10 sets are equal, the
   relative score differences of the hits both lists rank at the same place (against the score pyserini returns,
   which Anserini rounds to 1e-4 and nudges by 1e-6 per tie, and against Lucene's raw score), and each differing
   query: its tokens, the first rank that differs, the two documents there with both scores and, with
   ``--analyze``, their counts of the query's tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from _common import ROOT, SHARED

#: The toolkit's Lucene-identical preset, as ``curriculum index`` flags (its name is the bm25 package's
#: choice). The tier's parity test and this bench read it from here.
PRESET_ARGS = ["--bm25", "lucene"]
K = 10


def shared_corpus(out: Path) -> tuple[Path, Path]:
    """Every paragraph of every file of ``../shared/data`` (as the toolkit's loaders read them; files in path order,
    documents in example order), deduplicated by exact (title, text), in Search-R1's layout; and every question of
    those files as queries (``{"id": "DATASET:ID", "query"}``). Returns (corpus, queries)."""
    import rag_curriculum as rc

    corpus, queries = out / "shared.corpus.jsonl", out / "shared.queries.json"
    if corpus.exists() and queries.exists():
        return corpus, queries
    out.mkdir(parents=True, exist_ok=True)
    seen: set[tuple[str, str]] = set()
    qs = []
    with open(corpus.with_suffix(".tmp"), "w", encoding="utf-8") as f:
        for path in sorted(p for p in SHARED.rglob("*") if p.suffix in (".json", ".jsonl")):
            for ex in rc.load_examples(path.parent.name, str(path)):
                qs.append({"id": f"{path.parent.name}:{ex.id}", "query": ex.question})
                for d in ex.documents:
                    if (d.title, d.text) not in seen:
                        seen.add((d.title, d.text))
                        f.write(json.dumps({"id": str(len(seen) - 1), "contents": f'"{d.title}"\n{d.text}'},
                                           ensure_ascii=False) + "\n")
    os.replace(corpus.with_suffix(".tmp"), corpus)
    queries.write_text(json.dumps(qs, ensure_ascii=False))
    return corpus, queries


def bench_corpus(out: Path, passages: int, n_queries: int) -> tuple[Path, Path]:
    """bench_pyserini.py's corpus (made once under the temp folder) and the input's first ``n_queries`` questions."""
    from _common import HOTPOT_TRAIN_RECORDS
    from bench_index import synth_file
    from bench_pyserini import search_r1_corpus

    corpus = search_r1_corpus(passages)
    queries = out / f"bench-{passages}.queries-{n_queries}.json"
    if not queries.exists():
        out.mkdir(parents=True, exist_ok=True)
        records = json.loads(synth_file(HOTPOT_TRAIN_RECORDS).read_text())[:n_queries]
        queries.write_text(json.dumps([{"id": r["_id"], "query": r["question"]} for r in records],
                                      ensure_ascii=False))
    return corpus, queries


def pyserini_oracle(py: str, corpus: Path, queries: Path, out: Path, *, analyze: bool = False) -> Path:
    """Run bench/pyserini_oracle.py in ``py`` unless ``out`` already holds its run for these queries."""
    if (out / "run.jsonl").exists() and (out / "stats.json").exists() and (not analyze or (out / "passages.jsonl").exists()):
        stats = json.loads((out / "stats.json").read_text())
        if stats.get("queries") == len(json.loads(queries.read_text())):
            return out
    cmd = [py, str(ROOT / "bench" / "pyserini_oracle.py"), "--corpus", str(corpus), "--queries", str(queries),
           "--out", str(out), "--k", str(K)]
    if not analyze:
        cmd.append("--no-analyze")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"pyserini_oracle.py failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    return out


def toolkit_index(corpus: Path, out: Path, index_args: list[str], python: str = sys.executable) -> float:
    """``rag-retriever index --corpus corpus --out out INDEX_ARGS`` (with ``--overwrite``): the retriever's own command,
    what a Search-R1 user runs (``curriculum index`` runs the same build); its wall seconds."""
    t = time.perf_counter()
    r = subprocess.run([python, "-m", "rag_retriever.cli", "index", "--no-progress", "--corpus", str(corpus), "--out", str(out),
                        "--overwrite", *index_args], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"rag-retriever index {shlex.join(index_args)} failed (exit {r.returncode}):\n"
                           f"{r.stderr[-3000:]}")
    return time.perf_counter() - t


def toolkit_run(index: Path, queries: list[dict], k: int = K) -> list[list[tuple[str, float]]]:
    """The toolkit's top ``k`` per query as (corpus line id, score), score-0 fill-ups and empty slots dropped."""
    from rag_retriever import load_index

    ix = load_index(index)
    ids, scores = ix.retrieve_many([q["query"] for q in queries], k)
    out = []
    for row_ids, row_scores in zip(ids, scores, strict=True):
        keep = [(int(i), float(s)) for i, s in zip(row_ids, row_scores, strict=True) if i >= 0 and s > 0]
        docs = ix.documents([i for i, _ in keep]) if keep else []
        out.append([(d[0], s) for d, (_, s) in zip(docs, keep, strict=True)])
    return out


def compare(oracle: Path, ours: list[list[tuple[str, float]]]) -> dict:
    """Identical top-10 rate, equal sets, score differences and every differing query against ``oracle``'s run."""
    runs = [json.loads(line) for line in open(oracle / "run.jsonl", encoding="utf-8")]
    assert len(runs) == len(ours), (len(runs), len(ours))
    same = same_set = 0
    rel: list[float] = []  # against the score pyserini returns (rounded to 1e-4, ties nudged by 1e-6)
    rel_raw: list[float] = []  # against Lucene's raw float32 score of the same hit
    differing = []
    for run, mine in zip(runs, ours, strict=True):
        theirs = [(d, s) for d, s, _ in run["hits"]]
        if [d for d, _ in theirs] == [d for d, _ in mine]:
            same += 1
        else:
            first = next((r for r, (a, b) in enumerate(zip(theirs, mine, strict=False)) if a[0] != b[0]),
                         min(len(theirs), len(mine)))
            differing.append({"id": run["id"], "query": run["query"], "tokens": run["tokens"], "rank": first + 1,
                              "pyserini": theirs[first:first + 2], "toolkit": mine[first:first + 2]})
        if {d for d, _ in theirs} == {d for d, _ in mine}:
            same_set += 1
        for (d1, s1), (d2, s2), h in zip(theirs, mine, run["hits"], strict=False):
            if d1 == d2:
                rel.append(abs(s2 - s1) / abs(s1))
                rel_raw.append(abs(s2 - h[2]) / abs(h[2]))
    rel.sort()

    def pct(xs: list[float], q: float) -> float:
        return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0

    return {"queries": len(runs), "identical": same, "identical_rate": same / max(len(runs), 1),
            "same_set": same_set, "pairs": len(rel), "rel_max": rel[-1] if rel else 0.0,
            "rel_median": pct(rel, 0.5), "rel_p99": pct(rel, 0.99),
            "rel_max_vs_raw": max(rel_raw, default=0.0), "differing": differing}


def token_counts(oracle: Path, docids: set[str]) -> dict[str, Counter]:
    """pyserini's analysis of the given documents (from the oracle's passages.jsonl), as token counts."""
    out: dict[str, Counter] = {}
    p = oracle / "passages.jsonl"
    if not p.exists() or not docids:
        return out
    with open(p, encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            if rec["id"] in docids:
                out[rec["id"]] = Counter(rec["tokens"])
    return out


def report(res: dict, oracle: Path, limit: int = 50) -> None:
    print(f"identical top-{K} (ids and order): {res['identical']:,} of {res['queries']:,} queries "
          f"({100 * res['identical_rate']:.2f}%); equal top-{K} sets: {res['same_set']:,}")
    print(f"scores of the {res['pairs']:,} hits ranked alike, relative difference from pyserini's score (Lucene's "
          f"rounded to 1e-4, ties nudged by 1e-6): max {res['rel_max']:.2e}, median {res['rel_median']:.2e}, p99 "
          f"{res['rel_p99']:.2e}; from Lucene's raw score: max {res['rel_max_vs_raw']:.2e}")
    diff = res["differing"]
    docs = {d for q in diff[:limit] for d, _ in q["pyserini"] + q["toolkit"]}
    counts = token_counts(oracle, docs)
    for q in diff[:limit]:
        print(f"- {q['id']}: {q['query']!r}\n  tokens {q['tokens']}; first difference at rank {q['rank']}")
        for side in ("pyserini", "toolkit"):
            for d, s in q[side]:
                c = counts.get(d)
                tf = {t: c[t] for t in dict.fromkeys(q["tokens"]) if c and c[t]} if c else "?"
                print(f"    {side:8s} {d:>10s} {s:.7f}  query tokens in it: {tf}")
    if len(diff) > limit:
        print(f"... and {len(diff) - limit} more differing queries")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pyserini-python", required=True, help="a Python with pyserini (scripts/setup.sh pyserini)")
    ap.add_argument("--corpus", default="shared", help="shared | bench | a Search-R1-layout JSONL file")
    ap.add_argument("--queries-file", type=Path, help="with a corpus file: a JSON list of {id, query}")
    ap.add_argument("--passages", type=int, default=453_600, help="--corpus bench: its size")
    ap.add_argument("--queries", type=int, default=2000, help="--corpus bench: how many questions")
    ap.add_argument("--index-args", default=shlex.join(PRESET_ARGS),
                    help=f"the toolkit's `curriculum index` flags (default: {shlex.join(PRESET_ARGS)!r})")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "rag-curriculum-lucene-parity")
    ap.add_argument("--oracle", type=Path, help="pyserini's oracle folder (made when missing)")
    ap.add_argument("--analyze", action="store_true", help="have the oracle analyse every passage too")
    ap.add_argument("--limit", type=int, default=50, help="differing queries printed")
    args = ap.parse_args()
    work = args.work
    if args.corpus == "shared":
        corpus, queries, name = *shared_corpus(work), "shared"
    elif args.corpus == "bench":
        corpus, queries = bench_corpus(work, args.passages, args.queries)
        name = f"bench-{args.passages}-{args.queries}"
    else:
        if args.queries_file is None:
            sys.exit("--corpus FILE needs --queries-file")
        corpus, queries, name = Path(args.corpus), args.queries_file, Path(args.corpus).stem
    oracle = args.oracle or work / f"oracle-{name}"
    t = time.perf_counter()
    pyserini_oracle(args.pyserini_python, corpus, queries, oracle, analyze=args.analyze)
    stats = json.loads((oracle / "stats.json").read_text())
    print(f"pyserini {stats['pyserini']} (Lucene {stats['lucene']}, Java {stats['java']}): "
          f"{stats['docCount']:,} documents, {stats['queries']:,} queries ({time.perf_counter() - t:.0f} s)")
    ours = work / f"toolkit-{name}"
    secs = toolkit_index(corpus, ours, shlex.split(args.index_args))
    print(f"curriculum index {args.index_args}: {secs:.0f} s")
    res = compare(oracle, toolkit_run(ours, json.loads(queries.read_text())))
    report(res, oracle, args.limit)


if __name__ == "__main__":
    main()
