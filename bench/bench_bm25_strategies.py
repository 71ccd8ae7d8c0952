"""The BM25 search's strategies side by side on a kept index: a window of passages at a time (the default from
``WINDOWED_FROM`` passages) against term at a time with pruning (the default below), one query at a time on one
core, search alone (the analysed queries made once), the two alternated round by round in one process; both must
give the same ids and scores, or the script stops.

    python bench/bench_bm25_strategies.py --index DIR [--questions FILE] [--queries 400] [--k 3] [--rounds 2]

``DIR``: an index ``bench/bench_pyserini.py --keep`` leaves (``rag-curriculum-bench-bm25-5233329-lucene`` under
its ``--work``); ``FILE``: a JSON list of questions (that script's ``rag-curriculum-bench-queries-2000.json``;
default: the HotpotQA sample's). Prints each round's milliseconds a query and the windowed search's speed-up.

``--baseline-src SRC`` compares this checkout's search with another's instead (``SRC``: the ``src`` folder of an
older checkout, for example ``git worktree add /tmp/before COMMIT`` then ``/tmp/before/src``): each round runs both
strategies once in a fresh process per checkout, the two alternating, and prints each strategy's milliseconds a
query then and now; the two checkouts must give the same ids and scores (compared by digest), or the script stops.

    python bench/bench_bm25_strategies.py --index DIR --questions FILE --baseline-src /tmp/before/src --rounds 3
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
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
    ap.add_argument("--baseline-src", type=Path, help="another checkout's src folder: compare its search with this one's")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # one round, as JSON (--baseline-src's)
    args = ap.parse_args()
    if args.baseline_src:
        return against_baseline(args)
    import numpy as np
    from rag_retriever import load_index

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
    if args.json:
        digest = hashlib.sha256(np.ascontiguousarray(a[0]).tobytes() + np.ascontiguousarray(a[1]).tobytes())
        import rag_curriculum

        print(json.dumps({"digest": digest.hexdigest(), "passages": p.num_docs, "preset": p.preset,
                          "package": str(Path(rag_curriculum.__file__).resolve().parent),
                          **{name: timed(p, parsed, args.k, kw) for name, kw in runs.items()}}))
        return
    print(f"{p.num_docs:,} passages ({p.preset} preset), {len(parsed):,} queries, top {args.k}, one core; the same "
          "ids and scores from both")
    for r in range(args.rounds):
        ms = {name: timed(p, parsed, args.k, kw) for name, kw in runs.items()}
        print(f"round {r + 1}: windowed {ms['windowed']:.3f} ms a query, term at a time {ms['term at a time']:.3f}: "
              f"{ms['term at a time'] / ms['windowed']:.2f}x")


def timed(p, parsed: list, k: int, kw: dict) -> float:
    """Milliseconds a query, the queries searched one at a time."""
    t = time.perf_counter()
    for q in parsed:
        p.search([q], k, **kw)
    return (time.perf_counter() - t) / len(parsed) * 1e3


def against_baseline(args: argparse.Namespace) -> None:
    """Each round, one process per checkout (the baseline's first), each running both strategies once after an
    untimed pass; the ratio then / now per strategy, and the same ids and scores from both checkouts."""
    now_src = Path(__file__).resolve().parents[1] / "src"
    base = [sys.executable, str(Path(__file__).resolve()), "--index", str(args.index), "--queries", str(args.queries),
            "--k", str(args.k), "--json", *(["--questions", str(args.questions)] if args.questions else [])]
    if not (args.baseline_src / "rag_curriculum").is_dir():
        sys.exit(f"--baseline-src {args.baseline_src}: no rag_curriculum package there (give a checkout's src folder)")
    digests = set()
    for r in range(args.rounds):
        got = {}
        for name, src in (("then", args.baseline_src), ("now", now_src)):
            env = {**os.environ, "PYTHONPATH": str(src.resolve())}
            out = subprocess.run(base, env=env, capture_output=True, text=True)
            if out.returncode:
                sys.exit(f"the {name} checkout ({src}) failed:\n{out.stderr[-2000:]}")
            got[name] = json.loads(out.stdout.strip().splitlines()[-1])
            if Path(got[name]["package"]) != (src / "rag_curriculum").resolve():  # an installed copy took its place
                sys.exit(f"the {name} checkout's search came from {got[name]['package']}, not {src}")
            digests.add(got[name]["digest"])
        if len(digests) != 1:
            sys.exit("the two checkouts give different ids or scores: a behaviour change, not a speed change")
        if r == 0:
            print(f"{got['now']['passages']:,} passages ({got['now']['preset']} preset), {args.queries:,} queries at "
                  f"most, top {args.k}, one core; the same ids and scores from both checkouts")
        print(f"round {r + 1}: " + "; ".join(
            f"{name} {got['then'][name]:.3f} ms a query then, {got['now'][name]:.3f} now: "
            f"{got['then'][name] / got['now'][name]:.2f}x" for name in ("windowed", "term at a time")))


if __name__ == "__main__":
    main()
