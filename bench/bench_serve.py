"""`curriculum serve` against in-process retrieval: throughput of the server, queried the way Search-R1's trainer
queries it, against ``CorpusIndex.retrieve_many`` of the same queries on the same index in one process; the
server's start-up time to a healthy /health; its memory against the index's size.

(a) in process: ``--clients`` threads, each calling ``CorpusIndex.retrieve_many(batch, topk)`` on its share of the
    batches (``--batch`` queries each), after a warm-up; and one caller alone (bm25s runs its own threads per call,
    so concurrent callers can be slower than one);
(b) the server: ``curriculum serve`` (``python -m rag_curriculum.cli serve``) started fresh on a free port (the time to
    its first 200 from /health is the start-up time), then ``--clients`` threads, each with a ``requests.Session``
    posting ``{"queries": batch, "topk": k, "return_scores": true}`` and reading ``.json()["result"]``, as Search-R1's
    ``_batch_search`` does; the server's answers are checked against (a)'s rankings (ids, scores within 1e-5).
Each is timed ``--repeats`` times, alternated (in process with the clients, alone, the server: one round), so that
each round's three runs see the same load on a shared machine; the ratio is the median over the rounds of the
server's queries/s over the in-process queries/s with the same clients (target >= 0.85), and over the faster of the
round's two in-process runs. The clients run in this process, on the same CPUs as the server: on a 2-CPU machine they take a
share the in-process side does not pay. Memory: the server's RSS (VmRSS; file-backed pages of the memory-mapped
index count there too, RssFile) and its anonymous memory (RssAnon) against the index directory's size on disk.

The index is built from ``--input`` (default: the shared MuSiQue train sample, replicated ``--replicas`` times with
each replica's words perturbed, so the index has the posting lists of a larger corpus; 1 = the file as it is), or
``--index DIR`` is used as it is. The queries are the input's questions (cycled).

    python bench/bench_serve.py [--replicas 40] [--batch 32] [--clients 4] [--topk 5] [--seconds 8] [--repeats 3]
    python bench/bench_serve.py --index DIR [--workers 2] [--queries FILE] [--single-core]

``--queries FILE`` takes the queries from a file's questions (a JSON list or JSONL); ``--single-core`` adds one
caller on one bm25s thread (the single-core figure).
Only the batches the server answered are ranked in process for the check (on a big index ranking every batch
would take hours).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import zlib
from pathlib import Path

from _common import SHARED

MUSIQUE_SAMPLE = SHARED / "musique" / "musique_ans_v1.0_train.sample100.jsonl"
_WORD = re.compile(r"\w+|\W+")


def _perturb(text: str, g: int) -> str:
    """Replica ``g``'s text: a word is suffixed with ``g`` when ``crc32(word) + g`` is divisible by 3 (replica 0 is
    the text as it is), so replicas share some words and not others, as distinct real passages do."""
    if g == 0:
        return text
    out = []
    for piece in _WORD.findall(text):
        out.append(f"{piece}{g}" if piece[0].isalnum() and (zlib.crc32(piece.encode()) + g) % 3 == 0 else piece)
    return "".join(out)


def replicated_musique(src: Path, replicas: int, dest: Path) -> Path:
    """The MuSiQue file with each record repeated ``replicas`` times, its paragraphs, titles and question perturbed
    per replica, with fresh ids."""
    if replicas == 1:
        return src
    rows = [json.loads(line) for line in src.read_text(encoding="utf-8").splitlines() if line.strip()]
    with open(dest, "w", encoding="utf-8") as f:
        for g in range(replicas):
            for rec in rows:
                r = dict(rec)
                r["id"] = f"{rec['id']}-r{g}"
                r["question"] = _perturb(rec["question"], g)
                r["paragraphs"] = [{**p, "title": _perturb(p["title"], g), "paragraph_text": _perturb(p["paragraph_text"], g)}
                                   for p in rec["paragraphs"]]
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return dest


def read_questions(path: Path) -> list[str]:
    """The ``question`` of each record of a JSON list or a JSONL file."""
    text = path.read_text(encoding="utf-8")
    recs = json.loads(text) if text.lstrip().startswith("[") else [json.loads(x) for x in text.splitlines() if x.strip()]
    return [r["question"] for r in recs]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _status(pid: int) -> dict[str, int]:
    """VmRSS, RssAnon, RssFile of a process, in kB (Linux)."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def _rollup(pid: int) -> dict[str, int]:
    """Rss, Pss (each shared page divided among the processes that map it), Shared_* and Private_* of a process,
    in kB (Linux's smaps_rollup)."""
    out = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        key, _, value = line.partition(":")
        if value.strip().endswith("kB"):
            out[key.strip()] = int(value.split()[0])
    return out


def _dir_size(d: Path) -> int:
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file())


def _run_clients(n: int, batches: list[list[str]], seconds: float, call) -> tuple[int, float, list]:
    """``n`` threads calling ``call(session_state, batch)`` on batches in turn (thread t takes t, t + n, ...) until
    ``seconds`` have passed; (queries done, wall seconds, the first answer of each batch index seen)."""
    done = [0] * n
    answers: dict[int, object] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(n + 1)
    stop_at = [0.0]

    def worker(t: int) -> None:
        state: dict = {}
        try:
            start.wait()
            i = t
            while time.perf_counter() < stop_at[0]:
                b = i % len(batches)
                res = call(state, batches[b])
                if b not in answers:
                    answers[b] = res
                done[t] += len(batches[b])
                i += n
        except BaseException as e:  # noqa: BLE001
            errors.append(e)
        finally:
            if "close" in state:
                state["close"]()

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(n)]
    for th in threads:
        th.start()
    t0 = time.perf_counter()
    stop_at[0] = t0 + seconds
    start.wait()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return sum(done), wall, answers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--input", type=Path, default=MUSIQUE_SAMPLE, help="MuSiQue JSONL to index and take queries from")
    ap.add_argument("--replicas", type=int, default=40, help="perturbed copies of --input to index (1: as it is)")
    ap.add_argument("--index", type=Path, help="serve this index (its questions are the queries) instead of building one")
    ap.add_argument("--batch", type=int, default=32, help="queries per request")
    ap.add_argument("--clients", type=int, default=4, help="concurrent clients")
    ap.add_argument("--topk", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3.0, help="length of each timed run")
    ap.add_argument("--repeats", type=int, default=5, help="rounds of alternated timed runs (medians)")
    ap.add_argument("--workers", type=int, default=1, help="curriculum serve --workers")
    ap.add_argument("--in-memory", action="store_true", help="curriculum serve --in-memory (the index read into the "
                    "parent's memory before the workers are forked)")
    ap.add_argument("--queries", type=Path, help="take the queries from this file's questions (a JSON list or JSONL "
                    "of records with a \"question\") instead of the index's")
    ap.add_argument("--single-core", action="store_true", help="also time one caller on one thread (bm25s's "
                    "n_threads=1): the single-core figure")
    args = ap.parse_args()

    import requests
    from rag_retriever import IndexConfig, build_index, load_index

    work = Path(tempfile.mkdtemp(prefix="rag-curriculum-bench-serve-"))
    proc = None
    try:
        if args.index:
            index_dir = args.index
        else:
            data = replicated_musique(args.input, args.replicas, work / "input.jsonl")
            index_dir = work / "index"
            t = time.perf_counter()
            build_index(IndexConfig(dataset="musique", input=str(data), out=str(index_dir), depth=10))
            print(f"built the index of {args.replicas} x {args.input.name} in {time.perf_counter() - t:.1f} s")
        ix = load_index(index_dir)
        questions = ix._q()[0] if args.queries is None else read_questions(args.queries)
        n_batches = max(1, len(questions) // args.batch)
        batches = [questions[i * args.batch:(i + 1) * args.batch] for i in range(n_batches)]
        ix.retrieve_many(batches[0], args.topk)  # warm: the matrix read, the tokenizer made

        # the server: start-up time to healthy
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = open(work / "server.log", "wb")
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "rag_curriculum.cli", "serve", "--index", str(index_dir),
                                 "--port", str(port), "--workers", str(args.workers),
                                 "--max-batch", str(max(512, args.batch)),
                                 *(["--in-memory"] if args.in_memory else [])],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        while True:
            if proc.poll() is not None:
                raise SystemExit("the server exited:\n" + (work / "server.log").read_text()[-2000:])
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.perf_counter() - t0 > 300:
                raise SystemExit("the server was not healthy after 300 s")
            time.sleep(0.05)
        startup = time.perf_counter() - t0

        def in_process(state: dict, batch: list[str]):
            return ix.retrieve_many(batch, args.topk)

        def over_http(state: dict, batch: list[str]):
            s = state.get("session")
            if s is None:
                s = state["session"] = requests.Session()
                state["close"] = s.close
            return s.post(url + "/retrieve", json={"queries": batch, "topk": args.topk, "return_scores": True},
                          timeout=120).json()["result"]

        # warm-up of both, then alternated timed runs
        _run_clients(args.clients, batches, 1.0, in_process)
        _run_clients(args.clients, batches, 1.0, over_http)
        rates: dict[str, list[float]] = {"in process": [], "in process, 1": [], "single core": [], "server": []}

        def one_thread(state: dict, batch: list[str]):
            return ix.retrieve_many(batch, args.topk, threads=1)
        seen: dict[int, object] = {}
        for _ in range(args.repeats):
            n, wall, _ = _run_clients(args.clients, batches, args.seconds, in_process)
            rates["in process"].append(n / wall)
            n, wall, _ = _run_clients(1, batches, args.seconds, in_process)
            rates["in process, 1"].append(n / wall)
            if args.single_core:
                n, wall, _ = _run_clients(1, batches, args.seconds, one_thread)
                rates["single core"].append(n / wall)
            n, wall, answers = _run_clients(args.clients, batches, args.seconds, over_http)
            rates["server"].append(n / wall)
            seen.update(answers)
        # the server's answers are the in-process rankings
        for b, result in seen.items():
            ids, scores = ix.retrieve_many(batches[b], args.topk)
            for row_ids, row_scores, got in zip(ids.tolist(), scores.tolist(), result, strict=True):
                exp = [(str(i), s) for i, s in zip(row_ids, row_scores, strict=True) if i >= 0]
                assert [d["document"]["id"] for d in got] == [i for i, _ in exp], b
                assert all(abs(d["score"] - s) <= 1e-5 for d, (_, s) in zip(got, exp, strict=True)), b
        mem = _status(proc.pid)
        kids = [int(p) for p in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                               text=True).stdout.split()]
        size = _dir_size(index_dir)
        m = ix.manifest
        print(f"index: {m['passages']:,} passages, vocabulary {m['vocab_size']:,}, {size / 1e6:,.1f} MB on disk; "
              f"{len(questions):,} questions as queries; batch {args.batch}, {args.clients} clients, topk {args.topk}, "
              f"{args.workers} server worker(s); {os.cpu_count()} CPUs")
        for name, key, what in ((f"in process, {args.clients} callers", "in process", "batches"),
                                ("in process, 1 caller", "in process, 1", "batches"),
                                *((("in process, 1 thread", "single core", "batches"),) if args.single_core else ()),
                                (f"server, {args.clients} clients", "server", "requests")):
            rate = statistics.median(rates[key])
            print(f"{name:26s} {rate:9,.0f} queries/s  ({rate / args.batch:7,.1f} {what}/s; runs: "
                  + ", ".join(f"{r:,.0f}" for r in rates[key]) + ")")
        print(f"{len(seen)} batches' answers checked against the in-process rankings")
        same = [s / i for s, i in zip(rates["server"], rates["in process"], strict=True)]
        best = [s / max(i, o) for s, i, o in zip(rates["server"], rates["in process"], rates["in process, 1"],
                                                  strict=True)]
        print(f"ratio: {statistics.median(same):.2f}x in process with the same {args.clients} callers, "
              f"{statistics.median(best):.2f}x the faster in-process run (medians over the rounds: "
              + ", ".join(f"{x:.2f}" for x in same) + " / " + ", ".join(f"{x:.2f}" for x in best)
              + "; target >= 0.85)")
        print(f"start-up to a healthy /health: {startup:.2f} s")
        procs = [proc.pid, *kids] if args.workers > 1 else [proc.pid]
        for pid in procs:
            st = _status(pid) if pid != proc.pid else mem
            print(f"server process {pid}: RSS {st['VmRSS'] / 1024:,.1f} MB (anonymous {st['RssAnon'] / 1024:,.1f} MB, "
                  f"file-backed {st['RssFile'] / 1024:,.1f} MB; peak {st['VmHWM'] / 1024:,.1f} MB) against the "
                  f"index's {size / 1e6:,.1f} MB: {st['VmRSS'] * 1024 / size:.2f}x")
        # one copy of the index however many workers: the processes' PSS (shared pages divided among them) adds up
        # to about one process's RSS plus each worker's private pages, where their RSS would count it N + 1 times
        rolls = {pid: _rollup(pid) for pid in procs}
        rss, pss = (sum(r[k] for r in rolls.values()) / 1024 for k in ("Rss", "Pss"))
        private = sum(r.get("Private_Clean", 0) + r.get("Private_Dirty", 0) for r in rolls.values()) / 1024
        shared = max(r.get("Shared_Clean", 0) + r.get("Shared_Dirty", 0) for r in rolls.values()) / 1024
        print(f"{len(procs)} server process(es), now: RSS summed {rss:,.1f} MB, PSS summed {pss:,.1f} MB "
              f"({pss / rss:.2f}x the RSS sum), private {private:,.1f} MB, shared by a worker with the others up to "
              f"{shared:,.1f} MB; the index {size / 1e6:,.1f} MB on disk")
    finally:
        if proc is not None:
            import signal

            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
