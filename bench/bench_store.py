"""The passage store on disk and served, against the format before it (index format 4: ``passages.arrow``, an
uncompressed Arrow file with the normalised texts beside the texts), on the same corpus, in one run.

    python bench/bench_store.py [--passages 453600] [--queries 2000] [--k 3] [--baseline REV]

1. The corpus: bench_pyserini.py's ``--passages`` corpus in Search-R1's layout (made once under the temp folder).
2. Each format's store alone (no retriever: the store is the same for every kind), written by its own code in a
   fresh process from the same passage blocks: wall time and peak RSS (both include reading the corpus), then the
   size of its files. The baseline's code is ``--baseline`` (a git revision; default: the commit before index
   format 5), exported to a temporary folder. This tree's store is written twice more, with other ``--block``
   values, and must be the same bytes (``--no-rewrite`` skips that).
3. Served: ``--queries`` queries of ``--k`` hits each (passage ids drawn at random, seeded: no locality to help
   either format), each query's documents read as the server reads them (``documents(ids)``: id, contents, title,
   text), after one untimed pass (the file in the page cache); milliseconds per query.
4. A build's answer test: the first ``norm_spans()`` (the old format maps it; this one decompresses every
   normalised text once), then microseconds per ``find`` over random passages.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import ROOT
from bench_pyserini import search_r1_corpus

WRITE = """
import json, time
t0 = time.perf_counter()
import numpy as np
from pathlib import Path
from rag_retriever._corpus import passage_blocks
from rag_retriever._store import StoreWriter
out = Path({out!r}); out.mkdir(parents=True, exist_ok=True)
w = StoreWriter(out)
for b in passage_blocks(None, None, {corpus!r}, block={block}):
    w.add(b)
w.finish([], [], [])
np.save(out / "ranked_ids.npy", np.zeros((0, 0), np.int32))
np.save(out / "ranked_scores.npy", np.zeros((0, 0), np.float32))
hwm = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM"))  # kB; reset by exec
print(json.dumps({{"wall": time.perf_counter() - t0, "peak_mb": hwm / 1024}}))
"""

READ = r"""
import json, time
import numpy as np
from pathlib import Path
from rag_retriever._store import PassageStore
s = PassageStore()
assert not s._open_store(Path({out!r}), {{"passages": {n}, "questions": 0, "depth": 0}})
rng = np.random.default_rng(0)
pids = rng.integers(0, {n}, ({q}, {k}))
for row in pids:
    s.documents(row)
t = time.perf_counter()
for row in pids:
    s.documents(row)
per_query = (time.perf_counter() - t) / {q} * 1e3
t = time.perf_counter()
find, starts, ends = s.norm_spans()
first = time.perf_counter() - t
some = rng.integers(0, {n}, 100_000).tolist()
t = time.perf_counter()
hits = sum(find(b" the ", starts[p], ends[p]) >= 0 for p in some)
per_find = (time.perf_counter() - t) / len(some) * 1e6
print(json.dumps({{"ms_per_query": per_query, "norm_spans_s": first, "us_per_find": per_find, "hits": hits}}))
"""


def _baseline_rev() -> str:
    """The commit before index format 5 (the parent of the first commit that wrote ``FORMAT = 5``)."""
    out = subprocess.run(["git", "log", "--reverse", "--format=%H", "-S", "FORMAT = 5", "--",
                          "src/rag_curriculum/retrieval/_index.py"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout.split()
    return f"{out[0]}^" if out else "HEAD"


def _export(rev: str, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", rev, "src"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest / "src"


def _sizes(d: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in sorted(d.iterdir()) if p.is_file() and p.suffix != ".npy"
            or p.name == "passage_keys.npy"}


def _digest(d: Path) -> str:
    h = hashlib.sha256()
    for name in sorted(_sizes(d)):
        h.update(name.encode() + (d / name).read_bytes())
    return h.hexdigest()


def _write(out: Path, corpus: Path, block: int, src: Path) -> dict:
    """Write a store with ``src``'s code in a fresh process: wall seconds and peak RSS (VmHWM, which exec resets;
    getrusage's would carry this bench's own over the fork)."""
    r = subprocess.run([sys.executable, "-c", WRITE.format(out=str(out), corpus=str(corpus), block=block)],
                       capture_output=True, text=True, env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"})
    if r.returncode:
        sys.exit(r.stderr[-3000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def _read(out: Path, n: int, args: argparse.Namespace, src: Path) -> dict:
    r = subprocess.run([sys.executable, "-c", READ.format(out=str(out), n=n, q=args.queries, k=args.k)],
                       capture_output=True, text=True, env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"})
    if r.returncode:
        sys.exit(r.stderr[-3000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--passages", type=int, default=453_600)
    ap.add_argument("--queries", type=int, default=2000)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--baseline", default=None, help="a git revision with the old store (default: before format 5)")
    ap.add_argument("--no-rewrite", action="store_true", help="skip writing this tree's store twice more")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "rag-curriculum-bench-store")
    args = ap.parse_args()
    corpus = search_r1_corpus(args.passages)
    n = sum(1 for _ in open(corpus, encoding="utf-8"))
    raw = corpus.stat().st_size
    rev = args.baseline or _baseline_rev()
    work = args.work / str(args.passages)
    old_src, new_src = _export(rev, work / "baseline"), ROOT / "src"
    print(f"{n:,} passages ({raw / 1e9:.2f} GB of Search-R1-layout JSONL); baseline {rev}", flush=True)
    rows = {}
    for name, src in (("baseline", old_src), ("this tree", new_src)):
        out = work / name.replace(" ", "-")
        got = _write(out, corpus, 65_536, src)
        sizes = _sizes(out)
        rows[name] = {**got, "sizes": sizes, "bytes": sum(sizes.values()), **_read(out, n, args, src)}
        r = rows[name]
        print(f"{name:9s}: write {r['wall']:6.1f} s, peak RSS {r['peak_mb']:6.0f} MB; on disk {r['bytes'] / 1e6:8.1f} MB "
              f"{sizes}; served {r['ms_per_query']:.3f} ms a query ({args.k} passages); first norm_spans "
              f"{r['norm_spans_s']:.2f} s, find {r['us_per_find']:.2f} us", flush=True)
    a, b = rows["baseline"], rows["this tree"]
    print(f"on disk: {b['bytes'] / a['bytes']:.3f}x the baseline ({a['bytes'] / b['bytes']:.2f} times smaller); "
          f"served: {b['ms_per_query'] / a['ms_per_query']:.2f}x the baseline's time a query; "
          f"written: {b['wall'] / a['wall']:.2f}x its wall time")
    first = _digest(work / "this-tree")
    for block in () if args.no_rewrite else (8192, 1000):
        out = work / f"this-tree-block-{block}"
        _write(out, corpus, block, new_src)
        same = _digest(out) == first
        print(f"written again with --block {block}: {'the same bytes' if same else 'DIFFERENT BYTES'}", flush=True)
        if not same:
            sys.exit(1)
    print(json.dumps({k: {x: v[x] for x in ("wall", "peak_mb", "bytes", "ms_per_query", "norm_spans_s",
                                            "us_per_find")} for k, v in rows.items()}))


if __name__ == "__main__":
    main()
