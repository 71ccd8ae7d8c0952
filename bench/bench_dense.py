"""Dense retrieval at a million passages: memory, start-up, queries/s and recall of each FAISS index, against exact
(flat) search in the same run.

The vectors are synthetic (say so when quoting): ``--vectors`` (1,000,000) unit vectors of dimension ``--dim`` (768,
e5-base's) drawn around ``--clusters`` seeded centres (a corpus has topics; uniform random vectors have no
neighbours worth finding), and ``--queries`` more drawn the same way. For each factory (``--factories``: Flat,
HNSW32, IVF4096,PQ64 with and without re-ranking from float16 vectors, SQ8):

1. the index is built (trained on a seeded sample of 100,000, filled a block at a time) and written; its size on
   disk and per vector;
2. a fresh process reads it as ``curriculum serve`` does (memory-mapped: ``IO_FLAG_MMAP_IFC``), runs the queries on
   one thread, and reports its resident memory (private and file-backed), the read time, queries/s (search alone)
   and recall@10 against the flat ranking; wiki-18's footprint (21,015,324 passages) extrapolated per vector;
3. the whole server: the toolkit's dense index adopted from the flat file (``--import-faiss``, with a corpus of as
   many lines and an encoder of that dimension made on the spot: random weights), ``curriculum serve`` timed to
   healthy, and queries/s with query encoding (one core), the share of a batch spent encoding.

    python bench/bench_dense.py [--vectors 1000000] [--dim 768] [--queries 1000] [--factories Flat,HNSW32,...]
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

from _common import ROOT, seconds_to_healthy

WIKI18 = 21_015_324

MAKE = r"""
import numpy as np, sys
n, d, c, q, seed, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), 0, sys.argv[5]
rng = np.random.default_rng(seed)
centres = rng.standard_normal((c, d)).astype(np.float32)
def draw(m, r):
    x = centres[r.integers(0, c, m)] + 0.6 * r.standard_normal((m, d)).astype(np.float32)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
mm = np.lib.format.open_memmap(out + "/corpus.npy", mode="w+", dtype=np.float32, shape=(n, d))
for a in range(0, n, 100_000):
    mm[a:a + 100_000] = draw(min(100_000, n - a), np.random.default_rng(seed + 1 + a))
mm.flush()
np.save(out + "/queries.npy", draw(q, np.random.default_rng(seed + 10**9)))
print("{}")
"""

BUILD = r"""
import faiss, numpy as np, sys, time, json
out, factory = sys.argv[1], sys.argv[2]
x = np.load(out + "/corpus.npy", mmap_mode="r")
n, d = x.shape
t = time.perf_counter()
index = faiss.index_factory(d, factory, faiss.METRIC_INNER_PRODUCT)
if not index.is_trained:
    try:
        faiss.extract_index_ivf(index).cp.seed = 0
    except RuntimeError:
        pass
    take = np.sort(np.random.default_rng(0).choice(n, size=min(100_000, n), replace=False))
    index.train(np.asarray(x[take], dtype=np.float32))
for a in range(0, n, 65536):
    index.add(np.asarray(x[a:a + 65536], dtype=np.float32))
path = out + "/" + factory.replace(",", "_") + ".index"
faiss.write_index(index, path)
print(json.dumps({"build_s": time.perf_counter() - t}))
"""

SEARCH = r"""
import faiss, numpy as np, sys, time, json, os
os.sched_setaffinity(0, {0})
faiss.omp_set_num_threads(1)
out, factory, refine = sys.argv[1], sys.argv[2], int(sys.argv[3])
def status():
    f = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
    return {k: int(f[k].split()[0]) // 1024 for k in ("VmRSS", "RssAnon", "RssFile")}
t = time.perf_counter()
index = faiss.read_index(out + "/" + factory.replace(",", "_") + ".index",
                         faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY)
read_s = time.perf_counter() - t
try:
    faiss.extract_index_ivf(index).nprobe = 32
except RuntimeError:
    pass
hnsw = getattr(faiss.downcast_index(index), "hnsw", None)
if hnsw is not None:
    hnsw.efSearch = 64
q = np.load(out + "/queries.npy")
half = np.load(out + "/corpus_f16.npy", mmap_mode="r") if refine else None
k = 10
t = time.perf_counter()
if refine:
    _, cand = index.search(q, k * refine)
    ids = np.stack([c[np.lexsort((c, -(np.asarray(half[c], dtype=np.float32) @ v)))][:k] for c, v in zip(cand, q)])
else:
    _, ids = index.search(q, k)
qps = len(q) / (time.perf_counter() - t)
exact = np.load(out + "/exact.npy")
recall = float(np.mean([len(set(a) & set(b)) / k for a, b in zip(ids.tolist(), exact.tolist())]))
print(json.dumps({"read_s": read_s, "qps": qps, "recall": recall, **status()}))
"""

EXACT = r"""
import faiss, numpy as np, sys, json
out = sys.argv[1]
index = faiss.read_index(out + "/Flat.index", faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY)
_, ids = index.search(np.load(out + "/queries.npy"), 10)
np.save(out + "/exact.npy", ids)
x = np.load(out + "/corpus.npy", mmap_mode="r")
h = np.lib.format.open_memmap(out + "/corpus_f16.npy", mode="w+", dtype=np.float16, shape=x.shape)
for a in range(0, x.shape[0], 100_000):
    h[a:a + 100_000] = x[a:a + 100_000]
h.flush()
print(json.dumps({}))
"""

SERVED = r"""
import json, os, sys, time
os.sched_setaffinity(0, {0})
from rag_curriculum.retrieval import load_index
ix = load_index(sys.argv[1], threads=1)
qs = json.load(open(sys.argv[2]))
ix.warm()
s = ix.searcher
t = time.perf_counter(); v = s.encode(qs); enc = time.perf_counter() - t
t = time.perf_counter(); s.search_vectors(v, 10); srch = time.perf_counter() - t
t = time.perf_counter(); ix.retrieve_many(qs, 10); both = time.perf_counter() - t
print(json.dumps({"qps_with_encoding": len(qs) / both, "qps_search": len(qs) / srch,
                  "encoding_share": enc / (enc + srch)}))
"""


def child(code: str, *args: str) -> dict:
    r = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if r.returncode:
        sys.exit(r.stderr[-3000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vectors", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--clusters", type=int, default=2000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--factories", default="Flat,HNSW32,IVF4096_PQ64,IVF4096_PQ64+refine,SQ8")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    out = Path(tempfile.gettempdir()) / f"rag-curriculum-bench-dense-{args.vectors}-{args.dim}"
    out.mkdir(exist_ok=True)
    if not (out / "queries.npy").exists():
        child(MAKE, str(args.vectors), str(args.dim), str(args.clusters), str(args.queries), str(out))
    print(f"{args.vectors:,} synthetic unit vectors of dimension {args.dim} around {args.clusters:,} centres; "
          f"{args.queries:,} queries; one core; recall@10 against exact (flat) search", flush=True)
    rows = []
    for spec in ["Flat"] + [f for f in args.factories.split(",") if f != "Flat"]:
        refine = 4 if spec.endswith("+refine") else 0
        factory = spec.replace("+refine", "").replace("_", ",")
        path = out / (factory.replace(",", "_") + ".index")
        built = {"build_s": None}
        if not path.exists():
            built = child(BUILD, str(out), factory)
        if factory == "Flat" and not (out / "exact.npy").exists():
            child(EXACT, str(out))
        got = child(SEARCH, str(out), factory, str(refine))
        size = path.stat().st_size + (args.vectors * args.dim * 2 if refine else 0)
        per = size / args.vectors
        rows.append((spec, built["build_s"], size, per, got))
        print(f"{spec:22} build {built['build_s'] or 0:7.1f} s  on disk {size / 1e9:6.2f} GB ({per:7.1f} B/vector)  "
              f"read {got['read_s']:5.2f} s  RSS {got['VmRSS']:6,} MB (private {got['RssAnon']:5,}, file "
              f"{got['RssFile']:6,})  {got['qps']:8.1f} q/s  recall@10 {got['recall']:.3f}  wiki-18: "
              f"{per * WIKI18 / 1e9:6.1f} GB", flush=True)
    # the whole server: the flat index adopted, with a corpus of as many lines and an encoder of that dimension
    from tiny_model import build_tiny_encoder

    corpus = out / "corpus.jsonl"
    if not corpus.exists():
        with open(corpus, "w", encoding="utf-8") as f:
            for i in range(args.vectors):
                f.write(json.dumps({"id": str(i), "contents": f'"Passage {i}"\nPassage {i} is about topic {i % 997} '
                                    f"and place {i % 101}."}) + "\n")
    encoder = out / "encoder"
    if not encoder.exists():
        build_tiny_encoder(encoder, ROOT.parent / "shared" / "data", dim=args.dim)
    index = out / "served"
    if not (index / "manifest.json").exists():
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "rag_curriculum.cli", "index", "--kind", "dense", "--encoder",
                            str(encoder), "--device", "cpu", "--import-faiss", str(out / "Flat.index"), "--corpus",
                            str(corpus), "--out", str(index), "--no-progress"], capture_output=True, text=True,
                           env={**os.environ, "HF_HUB_OFFLINE": "1"})
        if r.returncode:
            sys.exit(r.stdout + r.stderr)
        print(f"curriculum index --import-faiss (the passage store of {args.vectors:,} corpus lines): "
              f"{time.perf_counter() - t:.0f} s", flush=True)
    serve = [sys.executable, "-m", "rag_curriculum.cli", "serve", "--index", str(index), "--port", "8793",
             "--encoder", str(encoder), "--device", "cpu"]
    first, again = (seconds_to_healthy(serve, 8793, {"HF_HUB_OFFLINE": "1"}) for _ in range(2))
    print(f"curriculum serve of the adopted flat index healthy after {first:.2f} s, again {again:.2f} s", flush=True)
    qs = out / "questions.json"
    qs.write_text(json.dumps([f"which passage is about topic {i} and place {i % 101}?" for i in range(200)]))
    got = child(SERVED, str(index), str(qs))
    print(f"served, one core, exact flat search: {got['qps_search']:.1f} q/s searching alone, "
          f"{got['qps_with_encoding']:.1f} q/s with query encoding (the {args.dim}-dimensional 2-layer random "
          f"encoder; e5-base has 12 layers); encoding {100 * got['encoding_share']:.0f}% of a batch", flush=True)
    if not args.keep:
        import shutil

        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "tests"))
    main()
