"""The BM25 search's strategies side by side on a kept index: a window of passages at a time (the default from
``WINDOWED_FROM`` passages) against term at a time with pruning (the default below), one query at a time on one
core, search alone (the analysed queries made once), the two alternated round by round in one process; both must
give the same ids and scores, or the script stops.

    python bench/bench_bm25_strategies.py --index DIR [--questions FILE] [--queries 400] [--k 3] [--rounds 2]

``DIR``: an index ``bench/bench_pyserini.py --keep`` leaves (``rag-curriculum-bench-bm25-5233329-lucene`` under
its ``--work``); ``FILE``: a JSON list of questions (that script's ``rag-curriculum-bench-queries-2000.json``;
default: the HotpotQA sample's). Prints each round's milliseconds a query and the windowed search's speed-up.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import HOTPOT_SAMPLE  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--index", type=Path, required=True, help="a BM25 index directory")
    ap.add_argument("--questions", type=Path, help="a JSON list of questions (default: the HotpotQA sample's)")
    ap.add_argument("--queries", type=int, default=400)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    import numpy as np

    from rag_curriculum.retrieval import load_index

    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    if args.questions:
        qs = json.loads(args.questions.read_text())
    else:
        qs = [r["question"] for r in json.loads(HOTPOT_SAMPLE.read_text())]
    qs = qs[:args.queries]
    ix = load_index(args.index, threads=1)
    s = ix.searcher
    if not hasattr(s, "postings"):
        sys.exit(f"{args.index}: not a BM25 index")
    p = s.postings
    parsed = [s.query_terms(q) for q in qs]
    runs = {"windowed": {"windowed": True}, "term at a time": {"windowed": False}}
    got = {name: p.search(parsed, args.k, **kw) for name, kw in runs.items()}  # (compiled, pages cached)
    a, b = got.values()
    if not (np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])):
        sys.exit("the two strategies disagree: a bug, report it")
    print(f"{p.num_docs:,} passages ({p.preset} preset), {len(parsed):,} queries, top {args.k}, one core; the same "
          "ids and scores from both")
    for r in range(args.rounds):
        ms = {}
        for name, kw in runs.items():
            t = time.perf_counter()
            for q in parsed:
                p.search([q], args.k, **kw)
            ms[name] = (time.perf_counter() - t) / len(parsed) * 1e3
        print(f"round {r + 1}: windowed {ms['windowed']:.3f} ms a query, term at a time {ms['term at a time']:.3f}: "
              f"{ms['term at a time'] / ms['windowed']:.2f}x")


if __name__ == "__main__":
    main()
