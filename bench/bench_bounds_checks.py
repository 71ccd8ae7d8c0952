"""What the BM25 postings' bounds checks cost: at open (every array the compiled search reads checked against the
bounds it reads it within, the vocabulary walked whole: ``check_arrays``, ``check_vocab``) against the same open
unchecked, and per query (each block's decoded passages checked against its recorded last one) against a checkout
without the check, on a synthetic Lucene-preset index of ``--passages`` passages (Zipf-distributed words, 60 a
passage; built once into ``--work`` and kept).

    python bench/bench_bounds_checks.py --baseline-src /tmp/before/src [--passages 1000000] [--queries 400]

``--baseline-src``: the ``src`` folder of a checkout from before the checks (``git worktree add /tmp/before
10fc7da^``: the retriever was then ``rag_curriculum.retrieval``; a later checkout's ``rag_retriever`` is found in its
``retriever/src``); its search is compiled in its own numba cache, and each child checks that the code it imported is
the checkout's, not the one installed. Each round runs the two searches in fresh processes,
alternating, one query at a time on one core (the analysed queries made once); both must give the same ids and
scores (compared by digest), or the script stops. Prints the open's milliseconds checked and unchecked and each
round's milliseconds a query, and the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def locate(src: Path) -> tuple[Path, str]:
    """The folder to put on a child's path and the retriever's package in the checkout whose ``src`` is ``src``."""
    for where in (src, src.parent / "retriever" / "src"):
        if (where / "rag_retriever" / "_postings.py").is_file():
            return where, "rag_retriever"
    if (src / "rag_curriculum" / "retrieval" / "_postings.py").is_file():
        return src, "rag_curriculum.retrieval"
    sys.exit(f"{src}: no rag_retriever/_postings.py (or rag_curriculum/retrieval/_postings.py) in this checkout")

CHILD = r"""
import hashlib, importlib, json, sys, time
from pathlib import Path
import numpy as np

d, what, queries, k, pkg, where = (Path(sys.argv[1]), sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4]),
                                   sys.argv[5], Path(sys.argv[6]).resolve())
postings = importlib.import_module(pkg + "._postings")
if not Path(postings.__file__).resolve().is_relative_to(where):  # (an installed copy found first: not the checkout)
    sys.exit(f"imported {postings.__file__}, not the checkout's {where}")
PostingsIndex = postings.PostingsIndex
params = json.loads((d / "params.json").read_text())
out = {}
if what == "open":
    Vocabulary = importlib.import_module(pkg + "._bm25").Vocabulary
    check_arrays, kernels = postings.check_arrays, postings.kernels
    kernels()
    ix = PostingsIndex(d, params, checked=False)
    for name in ("words", "block_bits", "block_last", "block_max", "term_first", "term_last_n", "doc_len", "tie"):
        np.asarray(getattr(ix, name)).sum()  # (the pages in the cache, as at a server's second start)
    times = {"unchecked": [], "checked": [], "arrays": [], "vocab": []}
    for _ in range(5):
        t0 = time.perf_counter(); PostingsIndex(d, params, checked=False); Vocabulary(d / "vocab", compiled=True)
        t1 = time.perf_counter(); ix = PostingsIndex(d, params, checked=True)
        Vocabulary(d / "vocab", compiled=True, terms=len(ix.term_first) - 1)
        t2 = time.perf_counter(); check_arrays(ix)
        t3 = time.perf_counter(); Vocabulary(d / "vocab", compiled=True, terms=len(ix.term_first) - 1)
        t4 = time.perf_counter(); Vocabulary(d / "vocab", compiled=True)
        t5 = time.perf_counter()
        times["unchecked"].append(t1 - t0); times["checked"].append(t2 - t1); times["arrays"].append(t3 - t2)
        times["vocab"].append((t4 - t3) - (t5 - t4))
    out = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    out["blocks"], out["terms"] = int(len(ix.block_last)), int(len(ix.term_first) - 1)
else:
    ix = PostingsIndex(d, params)
    parsed = [(q, list(range(len(q))), [1.0] * len(q)) for q in queries]
    ix.search(parsed[:8], k)  # compiled (or loaded from the cache), pages touched
    h = hashlib.sha256()
    t0 = time.perf_counter()
    for p in parsed:
        ids, scores = ix.search([p], k, threads=1)
        h.update(ids.tobytes()); h.update(scores.tobytes())
    out = {"ms": 1000 * (time.perf_counter() - t0) / len(parsed), "digest": h.hexdigest()}
print(json.dumps(out))
"""


def build(work: Path, n: int, seed: int = 0) -> Path:
    """A synthetic Lucene-preset postings directory of ``n`` passages (kept: built once)."""
    d = work / f"bounds-bench-{n}"
    if (d / "params.json").is_file():
        return d
    import numpy as np

    where, pkg = locate(SRC)
    sys.path.insert(0, str(where))
    write_postings = __import__(pkg + "._postings", fromlist=["write_postings"]).write_postings

    rng = np.random.default_rng(seed)
    vocab_size = max(1000, n // 2)
    lengths = rng.integers(30, 90, n).astype(np.int64)
    tokens = np.minimum(rng.zipf(1.15, int(lengths.sum())) - 1, vocab_size - 1).astype(np.int32)
    vocab = {f"w{i}": i for i in range(vocab_size)}
    t0 = time.perf_counter()
    write_postings(d, tokens, lengths, vocab, {"preset": "lucene", "k1": 0.9, "b": 0.4},
                   doc_ids=[f"doc{i}" for i in range(n)])
    print(f"built {n:,} passages ({int(lengths.sum()):,} tokens) in {time.perf_counter() - t0:.1f} s", flush=True)
    return d


def queries(d: Path, count: int, seed: int = 1) -> list[list[int]]:
    """``count`` queries of 3 to 8 distinct terms, Zipf-drawn like the passages' words, each held by a passage."""
    import numpy as np

    first = np.load(d / "term_first.npy").astype(np.int64)
    live = np.flatnonzero(np.diff(first) > 0)
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < count:
        t = np.unique(live[np.minimum(rng.zipf(1.15, rng.integers(3, 9)) - 1 + 20, len(live) - 1)])
        out.append([int(x) for x in t])
    return out


def child(src: Path, d: Path, what: str, qs: list[list[int]], k: int, cache: Path | None = None) -> dict:
    where, pkg = locate(src)
    env = {**os.environ, "PYTHONPATH": str(where), "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    if cache is not None:
        env["NUMBA_CACHE_DIR"] = str(cache)
    r = subprocess.run([sys.executable, "-c", CHILD, str(d), what, json.dumps(qs), str(k), pkg, str(where)], env=env,
                       capture_output=True, text=True, timeout=3600)
    if r.returncode:
        sys.exit(f"the {what} child of {src} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baseline-src", type=Path, required=True, help="the src folder of a checkout without checks")
    ap.add_argument("--passages", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=400)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--work", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")))
    a = ap.parse_args()
    d = build(a.work, a.passages)
    o = child(SRC, d, "open", [], a.k)
    ms = {key: 1000 * o[key] for key in ("unchecked", "checked", "arrays", "vocab")}
    print(f"open at {a.passages:,} passages ({o['blocks']:,} blocks, {o['terms']:,} terms), cached: unchecked "
          f"{ms['unchecked']:.1f} ms, checked {ms['checked']:.1f} ms ({ms['checked'] / ms['unchecked']:.2f}x, "
          f"+{ms['checked'] - ms['unchecked']:.1f} ms: the arrays {ms['arrays']:.1f} ms, the vocabulary's walk "
          f"{ms['vocab']:.1f} ms)", flush=True)
    qs = queries(d, a.queries)
    base_cache = a.work / "bounds-bench-baseline-numba"
    for r in range(a.rounds):
        now = child(SRC, d, "search", qs, a.k)
        then = child(a.baseline_src, d, "search", qs, a.k, cache=base_cache)
        if now["digest"] != then["digest"]:
            sys.exit("the two checkouts ranked differently")
        print(f"round {r + 1}: {now['ms']:.3f} ms a query checked, {then['ms']:.3f} ms unchecked: "
              f"{now['ms'] / then['ms']:.3f}x", flush=True)


if __name__ == "__main__":
    main()
