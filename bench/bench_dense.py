"""Dense retrieval at a million passages: memory, start-up, queries/s and recall of each FAISS index, against exact
(flat) search in the same run.

The vectors are synthetic (say so when quoting): ``--vectors`` (1,000,000) unit vectors of dimension ``--dim`` (768,
e5-base's) and ``--queries`` more drawn the same way, around ``--clusters`` seeded topic centres (a corpus has
topics; uniform random vectors have no neighbours worth finding). By default the points lie near a space of
``--intrinsic`` (32) dimensions mapped into the full one (text embeddings' neighbourhoods are low-dimensional:
nearer neighbours are clearly nearer); ``--intrinsic 0`` draws isotropic clusters in the full dimension instead,
where a cluster's members are all about equally near a query: an adversarial set for every approximate index.
For each factory (``--factories``: Flat, HNSW32, IVF4096,PQ64, SQ8):

1. the index is built (trained on a seeded sample of 100,000, filled a block at a time) and written; its size on
   disk and per vector, and the RAM an index of wiki-18's size (21,015,324 passages) would hold;
2. for each search setting (IVF: nprobe and re-ranking ``refine * k`` candidates exactly from the float16 vectors,
   as the toolkit's ``--refine`` does; HNSW: efSearch), a fresh process reads the index as ``curriculum serve``
   does (memory-mapped: ``IO_FLAG_MMAP_IFC``), runs the queries on one thread, and reports its resident memory
   (private and file-backed), the read time, queries/s (search alone) and recall@10 against the flat ranking;
3. the whole server: the toolkit's dense index adopted from the flat file (``--import-faiss``, with a corpus of as
   many lines and an encoder of that dimension made on the spot: random weights), ``curriculum serve`` timed to
   healthy (first start; then ``--rounds`` start-ups serving the encoder's ONNX export, made by the index, with
   onnxruntime, alternated with as many loading the encoder through sentence-transformers, the load path it
   replaced: the ratio of the medians), and queries/s with query encoding (one core), the share of a batch spent
   encoding.

    python bench/bench_dense.py [--vectors 1000000] [--dim 768] [--intrinsic 32] [--factories Flat,HNSW32,...]
    python bench/bench_dense.py --only-serve --keep --rounds 5      # step 3 alone (the start-up figures)
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

from _common import ROOT, runtime_startups, seconds_to_healthy

WIKI18 = 21_015_324

MAKE = r"""
import numpy as np, sys
n, d, c, q, intrinsic, out = (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
                              sys.argv[6])
rng = np.random.default_rng(0)
if intrinsic:  # points of a 'intrinsic'-dimensional space (topics as centres there) mapped into d dimensions
    basis = rng.standard_normal((intrinsic, d)).astype(np.float32) / np.sqrt(intrinsic)
    centres = 2.0 * rng.standard_normal((c, intrinsic)).astype(np.float32)
else:  # isotropic clusters in d dimensions: a cluster's members all about as near as each other (adversarial)
    centres = rng.standard_normal((c, d)).astype(np.float32)
def draw(m, r):
    if intrinsic:
        z = centres[r.integers(0, c, m)] + r.standard_normal((m, intrinsic)).astype(np.float32)
        x = z @ basis + 0.05 * r.standard_normal((m, d)).astype(np.float32)
    else:
        x = centres[r.integers(0, c, m)] + 0.6 * r.standard_normal((m, d)).astype(np.float32)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
mm = np.lib.format.open_memmap(out + "/corpus.npy", mode="w+", dtype=np.float32, shape=(n, d))
for a in range(0, n, 100_000):
    mm[a:a + 100_000] = draw(min(100_000, n - a), np.random.default_rng(1 + a))
mm.flush()
np.save(out + "/queries.npy", draw(q, np.random.default_rng(10**9)))
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
out, factory, refine, nprobe, ef = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
def status():
    f = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
    return {k: int(f[k].split()[0]) // 1024 for k in ("VmRSS", "RssAnon", "RssFile")}
t = time.perf_counter()
index = faiss.read_index(out + "/" + factory.replace(",", "_") + ".index",
                         faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY)
read_s = time.perf_counter() - t
try:
    faiss.extract_index_ivf(index).nprobe = nprobe
except RuntimeError:
    pass
hnsw = getattr(faiss.downcast_index(index), "hnsw", None)
if hnsw is not None:
    hnsw.efSearch = ef
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
from rag_retriever import load_index
ix = load_index(sys.argv[1], threads=1)
qs = json.load(open(sys.argv[2]))
ix.warm()
s = ix.searcher
t = time.perf_counter(); v = s.encode(qs); time.perf_counter() - t
# the first search touches the mapped index's pages for the first time (from the page cache, or the disk): timed
# apart, then each way three times in turn, the median kept (the machine is shared: its noise hits both alike)
t = time.perf_counter(); s.search_vectors(v, 10); first = time.perf_counter() - t
enc, srch, both = [], [], []
for _ in range(3):
    t = time.perf_counter(); v = s.encode(qs); enc.append(time.perf_counter() - t)
    t = time.perf_counter(); s.search_vectors(v, 10); srch.append(time.perf_counter() - t)
    t = time.perf_counter(); ix.retrieve_many(qs, 10); both.append(time.perf_counter() - t)
med = lambda xs: sorted(xs)[len(xs) // 2]
print(json.dumps({"qps_with_encoding": len(qs) / med(both), "qps_search": len(qs) / med(srch),
                  "qps_first_search": len(qs) / first, "encoding_share": med(enc) / (med(enc) + med(srch))}))
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
    ap.add_argument("--intrinsic", type=int, default=32, help="the vectors' intrinsic dimension (0: isotropic "
                    "clusters in the full dimension, where a cluster's members are all about as near: adversarial)")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--factories", default="Flat,HNSW32,IVF4096_PQ64,SQ8")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--rounds", type=int, default=3, help="start-ups of the server per load path (alternated)")
    ap.add_argument("--only-serve", action="store_true", help="only the flat index and the whole server (step 3)")
    args = ap.parse_args()
    out = Path(tempfile.gettempdir()) / f"rag-curriculum-bench-dense-{args.vectors}-{args.dim}-{args.intrinsic}"
    out.mkdir(exist_ok=True)
    if not (out / "queries.npy").exists():
        child(MAKE, str(args.vectors), str(args.dim), str(args.clusters), str(args.queries), str(args.intrinsic),
              str(out))
    shape = (f"of intrinsic dimension {args.intrinsic}" if args.intrinsic else "in isotropic clusters (adversarial)")
    print(f"{args.vectors:,} synthetic unit vectors of dimension {args.dim} {shape}, around {args.clusters:,} "
          f"centres; {args.queries:,} queries; one core; recall@10 against exact (flat) search; wiki-18 RAM: the "
          "index's bytes per vector (held in memory to be fast) times 21,015,324, the float16 vectors of a refine "
          "read from disk", flush=True)
    specs = ["Flat"] + [f for f in args.factories.split(",") if f != "Flat"]
    for spec in specs[:1] if args.only_serve else specs:
        factory = spec.replace("_", ",")
        path = out / (factory.replace(",", "_") + ".index")
        built = {"build_s": None}
        if not path.exists():
            built = child(BUILD, str(out), factory)
        if factory == "Flat" and not (out / "exact.npy").exists():
            child(EXACT, str(out))
        per = path.stat().st_size / args.vectors
        print(f"{spec:14} build {built['build_s'] or 0:6.1f} s, on disk {path.stat().st_size / 1e9:5.2f} GB "
              f"({per:6.1f} B/vector), wiki-18 RAM {per * WIKI18 / 1e9:5.1f} GB", flush=True)
        if args.only_serve:
            continue
        if factory.startswith("IVF"):
            settings = [(0, 32, 0), (4, 32, 0), (16, 32, 0), (16, 128, 0), (64, 128, 0)]
        elif factory.startswith("HNSW"):
            settings = [(0, 0, 64), (0, 0, 256), (4, 0, 64)]
        else:
            settings = [(0, 0, 0), (4, 0, 0)] if factory != "Flat" else [(0, 0, 0)]
        for refine, nprobe, ef in settings:
            got = child(SEARCH, str(out), factory, str(refine), str(nprobe), str(ef))
            knob = ", ".join(x for x in (f"nprobe {nprobe}" if nprobe else "", f"efSearch {ef}" if ef else "",
                                         f"refine {refine}" if refine else "") if x) or "-"
            print(f"    {knob:28} read {got['read_s']:5.2f} s  RSS {got['VmRSS']:6,} MB (private {got['RssAnon']:4,},"
                  f" file {got['RssFile']:6,})  {got['qps']:8.1f} q/s  recall@10 {got['recall']:.3f}", flush=True)
    # the whole server: the flat index adopted, with a corpus of as many lines and an encoder of that dimension
    from support.tiny_model import build_tiny_encoder

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
    serve = [sys.executable, "-m", "rag_curriculum.cli", "serve", "--index", str(index), "--port", "8793"]
    if "onnx" not in json.loads((index / "manifest.json").read_text())["dense"]:
        sys.exit(f"{index} has no ONNX export of its encoder (made before it): remove it and run again")
    first = seconds_to_healthy(serve, 8793, {"HF_HUB_OFFLINE": "1"})
    # the encoder's ONNX export (onnxruntime + tokenizers, no torch) against the sentence-transformers load path it
    # replaced; wall seconds and the server's CPU seconds when it answered (the latter hardly grows with the load)
    print(f"curriculum serve of the adopted flat index healthy after {first:.2f} s (first start), then "
          f"{runtime_startups(serve, 8793, args.rounds)}", flush=True)
    qs = out / "questions.json"
    qs.write_text(json.dumps([f"which passage is about topic {i} and place {i % 101}?" for i in range(200)]))
    got = child(SERVED, str(index), str(qs))
    print(f"served, one core, exact flat search of 200 queries (medians of 3, after a first search that maps the "
          f"index: {got['qps_first_search']:.1f} q/s): {got['qps_search']:.1f} q/s searching alone, "
          f"{got['qps_with_encoding']:.1f} q/s with query encoding (the {args.dim}-dimensional 2-layer random "
          f"encoder; e5-base has 12 layers); encoding {100 * got['encoding_share']:.0f}% of a batch", flush=True)
    if not args.keep:
        import shutil

        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "tests"))
    main()
