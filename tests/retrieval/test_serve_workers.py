"""``curriculum serve --workers N``: the index loaded once, then N worker processes forked from the loaded one.
They answer exactly as one worker does (every ranking, every refusal and limit), share the one copy of the index
(no worker reads it again), each holds its own read leases, and the parent starts a worker again when one dies.
Real servers (``curriculum serve`` in a child process)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import MUSIQUE_TRAIN
from rag_retriever import IndexConfig, ServeConfig, build_index
from rag_retriever._prefork import cpus, threads_for, workers_for
from support.servers import free_port, server_process

pytest.importorskip("fastapi")
QUESTIONS = ["Who founded the company?", "the river of the city", "Hamlet", "zzqxj", "Which marsupial is from where?"]

#: Requests that a server answers (200) or refuses (4xx), each as (body bytes, content type).
REQUESTS = [
    *[json.dumps({"queries": QUESTIONS[i:i + 3], "topk": k, "return_scores": s}).encode()
      for i in range(3) for k in (1, 3, 7) for s in (True, False)],
    json.dumps({"query": "Hamlet", "topk": 2}).encode(),
    json.dumps({"queries": ["x"] * 9, "topk": 1}).encode(),  # more than --max-batch 8
    json.dumps({"queries": ["x"], "topk": 21}).encode(),  # above --max-topk 20
    json.dumps({"queries": ["x"] * 8, "topk": 20}).encode(),  # 160 passages, above --max-results 100
    json.dumps({"queries": ["river " * 100]}).encode(),  # above --max-query-chars 300
    json.dumps({"queries": []}).encode(),
    b"{not json",
    json.dumps({"queries": ["x" * 10] * 8, "pad": "y" * 5000}).encode(),  # above --max-body-bytes 4096
]
LIMITS = ["--max-batch", "8", "--max-topk", "20", "--max-results", "100", "--max-query-chars", "300",
          "--max-body-bytes", "4096"]


def test_workers_default_to_one_per_cpu_each_with_its_share_of_the_threads():
    assert ServeConfig(index="x").workers == 0 and workers_for(0) == cpus() and workers_for(3) == 3
    assert threads_for(0, cpus()) == 1 and threads_for(5, 2) == 5 and threads_for(0, 1) == cpus()


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("workers")
    src = root / "in.jsonl"
    src.write_text("".join(MUSIQUE_TRAIN.read_text().splitlines(keepends=True)[:40]))
    build_index(IndexConfig(dataset="musique", input=str(src), out=str(root / "ix"), depth=5))
    return root / "ix"


def _ask(url: str, body: bytes) -> tuple[int, bytes]:
    req = urllib.request.Request(f"{url}/retrieve", data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _answers(url: str) -> list[tuple[int, bytes]]:
    """Every request, each on a connection of its own, 8 at a time, three times over (so every worker answers)."""
    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(lambda b: _ask(url, b), REQUESTS * 3))


def _workers(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _serve(index: Path, log: Path, *extra: str):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "rag_curriculum.cli", "serve", "--index", str(index), "--port", str(port), *LIMITS,
            *extra]
    return url, server_process(argv, f"{url}/health", log, timeout_s=300)


@pytest.mark.slow
def test_forked_workers_answer_as_one_worker_does_and_share_one_load_of_the_index(index, tmp_path):
    url, cm = _serve(index, tmp_path / "one.log", "--workers", "1")
    with cm:
        want = _answers(url)
    assert {s for s, _ in want} == {200, 400, 413, 422}, sorted({s for s, _ in want})
    for memory in ("--no-in-memory", "--in-memory"):
        log = tmp_path / f"two{memory}.log"
        url, cm = _serve(index, log, "--workers", "2", memory)
        with cm as proc:
            got = _answers(url)
            workers = _workers(proc.pid)
            assert len(workers) == 2, workers
            # (forked from the loaded index: the log's one "checked at open" and one "read into memory" below say
            # no worker loaded or hashed it again; a worker's rchar cannot: on a fresh checkout its imports after
            # the fork read more bytes of Python than this small index holds)
        assert got == want  # the same bytes: every ranking, every refusal's status and one-line detail
        text = log.read_text()
        assert text.count("checked at open") == 1 and "2 workers started" in text, text[-3000:]
        if memory == "--no-in-memory":  # each worker holds its own read leases
            assert text.count("files are leased") == 2, text[-3000:]
        else:
            assert text.count("index read into memory") == 1, text[-3000:]


@pytest.mark.slow
def test_a_copy_over_the_index_is_refused_by_every_worker_and_none_crashes(index, tmp_path):
    """``cp`` over the served files: each worker's lease breaks, each refuses with a 503 naming the file, and
    every worker is still there after."""
    served = tmp_path / "served"
    shutil.copytree(index, served)
    url, cm = _serve(served, tmp_path / "served.log", "--workers", "2")
    with cm as proc:
        assert _ask(url, REQUESTS[0])[0] == 200
        workers = _workers(proc.pid)
        subprocess.run(f"cp {served}/passages.bin {tmp_path}/p.bin && cp {tmp_path}/p.bin {served}/passages.bin",
                       shell=True, check=True, timeout=120)
        got = _answers(url)
        assert {s for s, b in got if b"passages.bin" in b} == {503}
        assert all(s == 503 for s, b in got if s not in (400, 413, 422)), sorted({s for s, _ in got})
        assert _workers(proc.pid) == workers  # none died, none restarted
    assert "Bus error" not in (tmp_path / "served.log").read_text()


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_the_workers_sockets_share_one_port_and_their_connections_send_at_once(loop):
    """``listeners``: a socket a worker on one port (SO_REUSEPORT), each TCP's, so that the event loop sets
    TCP_NODELAY on what it accepts (on a socket of protocol 0 asyncio does not, and a response written in two
    parts waits 40 ms for the client's delayed ACK)."""
    import asyncio
    import socket

    from rag_retriever._prefork import listeners

    uvloop = pytest.importorskip("uvloop") if loop == "uvloop" else None
    socks, own = listeners("127.0.0.1", free_port(), 2)
    try:
        assert own and len(socks) == 2 and len({s.getsockname() for s in socks}) == 1
        nodelay = []

        class Accept(asyncio.Protocol):
            def connection_made(self, transport):
                nodelay.append(transport.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        async def main():
            servers = [await asyncio.get_running_loop().create_server(Accept, sock=s) for s in socks]
            _, writer = await asyncio.open_connection(*socks[0].getsockname())
            for _ in range(200):
                if nodelay:
                    break
                await asyncio.sleep(0.01)
            writer.close()
            for server in servers:
                server.close()

        (uvloop.run if loop == "uvloop" else asyncio.run)(main())
        assert nodelay and nodelay[0] != 0
    finally:
        for s in socks:
            s.close()


def _sockets(pid: int) -> int:
    n = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            n += os.readlink(fd).startswith("socket:")
        except OSError:  # (closed meanwhile)
            pass
    return n


@pytest.mark.slow
def test_a_burst_of_connections_is_spread_over_the_workers(index, tmp_path):
    """Each worker listens on a socket of its own (SO_REUSEPORT): 32 connections opened at once are accepted by
    both workers, not all by the one whose event loop wakes first, and each is answered."""
    import socket

    url, cm = _serve(index, tmp_path / "burst.log", "--workers", "2")
    port = int(url.rsplit(":", 1)[1])
    with cm as proc:
        workers = _workers(proc.pid)
        before = {w: _sockets(w) for w in workers}
        conns = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(32)]
        try:
            body = REQUESTS[0]
            for c in conns:
                c.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            for c in conns:
                assert c.recv(12) == b"HTTP/1.1 200"
            accepted = {w: _sockets(w) - before[w] for w in workers}
        finally:
            for c in conns:
                c.close()
    # (the counts are open sockets before and after: the readiness probe's own connection may close in between)
    assert 31 <= sum(accepted.values()) <= 32 and min(accepted.values()) >= 4, accepted
    assert "a socket a worker (SO_REUSEPORT)" in (tmp_path / "burst.log").read_text()


PREFORK = r"""
import time
from rag_retriever._prefork import run
raise SystemExit(run(lambda slot: time.sleep(120), 2))
"""


@pytest.mark.slow
def test_the_parent_starts_a_worker_again_when_one_dies_and_stops_them_all_on_sigterm():
    proc = subprocess.Popen([sys.executable, "-c", PREFORK], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while len(_workers(proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        first = _workers(proc.pid)
        os.kill(first[0], signal.SIGKILL)
        while (len(_workers(proc.pid)) < 2 or first[0] in _workers(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        now = _workers(proc.pid)
        assert len(now) == 2 and first[0] not in now and first[1] in now, (first, now)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        out = proc.stdout.read().decode()
        assert f"worker {first[0]} ended (signal SIGKILL): starting another" in out, out
        for pid in now:
            assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.slow
def test_two_servers_started_together_on_one_port_one_serves_and_the_other_is_refused_in_one_line(index, tmp_path):
    """``curriculum serve --workers 2`` and ``rag-retriever serve --workers 2`` started at the same instant on one
    port: one serves, the other exits at once with one line naming the server
    that holds the port (its SO_REUSEPORT sockets never join the first's: the kernel would split the clients
    between the two). ``retriever/tests/test_one_server_per_port.py`` runs the race itself many times over."""
    from support.servers import stop_process_group

    commands = {"curriculum": [sys.executable, "-m", "rag_curriculum.cli", "serve"],
                "rag-retriever": [sys.executable, "-m", "rag_retriever.cli", "serve"]}
    for order in (["curriculum", "rag-retriever"],):
        port = free_port()
        procs = {}
        for name in order:
            log = open(tmp_path / f"{name}.log", "wb")
            procs[name] = subprocess.Popen([*commands[name], "--index", str(index), "--port", str(port),
                                            "--workers", "2"], stdout=log, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            deadline = time.monotonic() + 300
            while all(p.poll() is None for p in procs.values()) and time.monotonic() < deadline:
                time.sleep(0.2)
            ended = [n for n, p in procs.items() if p.poll() is not None]
            assert len(ended) == 1, {n: (tmp_path / f"{n}.log").read_text()[-2000:] for n in procs}
            (loser,), (winner,) = ended, [n for n in procs if n not in ended]
            assert procs[loser].returncode in (1, 2)
            text = (tmp_path / f"{loser}.log").read_text()
            errors = [line for line in text.splitlines() if line.startswith("error:")]
            assert errors == [f"error: cannot listen on 127.0.0.1:{port}: another retriever server (process "
                              f"{procs[winner].pid}) serves that port (curriculum serve or rag-retriever serve; one "
                              "server a port, whatever its --host)"], text
            while time.monotonic() < deadline:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    assert procs[winner].poll() is None, (tmp_path / f"{winner}.log").read_text()[-3000:]
                    time.sleep(0.3)
            assert len(_workers(procs[winner].pid)) == 2
        finally:
            for p in procs.values():
                stop_process_group(p)
