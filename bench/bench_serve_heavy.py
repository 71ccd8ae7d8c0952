"""How long a one-word query waits behind the largest requests a server takes: ``curriculum serve`` with its default
``--max-results`` (8,192 passages a request) against the same server with the cap lifted (``--max-results`` 2^30,
what every server did before the cap).

The index is the shared MuSiQue train sample replicated ``--replicas`` times (bench/bench_serve.py's
``replicated_musique``; 40: 75,600 passages). Each round, for each server: ``--heavy`` clients each post the largest
request the server answers (512 queries at topk 100 with scores when uncapped, else as many queries at topk 100 as
the cap allows), and, once they are sent, one client asks a one-word query (``"Hamlet"``, topk 3) and times its
answer.
Printed per server: the heavy responses' size, and the small query's wait (median over ``--rounds``) against its
time alone (no heavy request in flight).

    python bench/bench_serve_heavy.py [--replicas 40] [--heavy 3] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from _common import SHARED
from bench_serve import free_port, replicated_musique

MUSIQUE_SAMPLE = SHARED / "musique" / "musique_ans_v1.0_train.sample100.jsonl"
UNCAPPED = 1 << 30
MAX_QUERIES, MAX_TOPK = 512, 100  # a request's most queries and topk (serve's --max-batch, --max-topk defaults)


def _post(url: str, body: dict) -> tuple[int, float]:
    req = urllib.request.Request(url + "/retrieve", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as r:
        n = len(r.read())
    return n, time.perf_counter() - t


def _serve(index: Path, cap: int, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with open(log, "wb") as sink:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen([sys.executable, "-m", "rag_curriculum.cli", "serve", "--index", str(index), "--port",
                                 str(port), "--max-results", str(cap)], stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True)
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            if proc.poll() is not None:
                sys.exit(log.read_text())
            time.sleep(0.2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--replicas", type=int, default=40)
    ap.add_argument("--heavy", type=int, default=3, help="largest requests in flight")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from rag_retriever import IndexConfig, build_index, load_index

    work = Path(tempfile.mkdtemp(prefix="rag-curriculum-bench-serve-heavy-"))
    data = replicated_musique(MUSIQUE_SAMPLE, args.replicas, work / "input.jsonl")
    index = work / "index"
    build_index(IndexConfig(dataset="musique", input=str(data), out=str(index), depth=10))
    n = len(load_index(index))
    questions = [json.loads(line)["question"] for line in MUSIQUE_SAMPLE.read_text().splitlines() if line.strip()]
    print(f"{n:,} passages; {args.heavy} largest requests in flight, then one query ('Hamlet', topk 3)")
    print("| server | a largest request | its response | the small query alone | behind them (median) |")
    print("|---|---|---:|---:|---:|")
    for cap in (UNCAPPED, 8192):
        proc, url = _serve(index, cap, work / f"serve-{cap}.log")
        try:
            many = min(MAX_QUERIES, max(1, cap // MAX_TOPK))  # the most queries a request may hold, at topk 100
            heavy = {"queries": [questions[i % len(questions)] for i in range(many)], "topk": MAX_TOPK,
                     "return_scores": True}
            asked = many * MAX_TOPK
            size, _ = _post(url, heavy)  # warm, and the size
            alone = statistics.median(_post(url, {"query": "Hamlet", "topk": 3})[1] for _ in range(5))
            waits = []
            for _ in range(args.rounds):
                threads = [threading.Thread(target=_post, args=(url, heavy)) for _ in range(args.heavy)]
                for t in threads:
                    t.start()
                time.sleep(0.05)  # the heavy ones sent first
                waits.append(_post(url, {"query": "Hamlet", "topk": 3})[1])
                for t in threads:
                    t.join()
            name = "uncapped (--max-results 2^30)" if cap == UNCAPPED else f"default (--max-results {cap:,})"
            print(f"| {name} | {asked:,} passages | {size / 1e6:.1f} MB | {alone * 1000:.0f} ms "
                  f"| {statistics.median(waits):.2f} s |", flush=True)
        finally:
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    main()
