"""Idle and half-sent connections do not take `curriculum serve` down (issue 37, item 1): hundreds of sockets that
send part of a request header and wait are closed after --header-timeout, the open connections stay under
--max-connections (a newcomer evicts the longest-waiting incomplete one), and /health answers all along."""

from __future__ import annotations

import os
import socket
import sys
import time
import urllib.request

import pytest
from conftest import MUSIQUE_TRAIN
from servers import free_port, server_process

pytest.importorskip("fastapi", reason="the serve extra is needed")
pytest.importorskip("bm25s")


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _health(url: str) -> float:
    t = time.perf_counter()
    with urllib.request.urlopen(f"{url}/health", timeout=5) as r:
        assert r.status == 200
    return time.perf_counter() - t


def test_half_sent_requests_are_closed_and_health_answers(tmp_path):
    from rag_curriculum.retrieval import IndexConfig, build_index

    index = tmp_path / "ix"
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(index), depth=5))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "rag_curriculum.cli", "serve", "--index", str(index), "--port", str(port),
            "--max-connections", "64", "--header-timeout", "1.5"]
    with server_process(argv, f"{url}/health", tmp_path / "serve.log", timeout_s=180) as proc:
        base = _fds(proc.pid)
        socks = []
        try:
            for _ in range(400):  # a slow-loris load: a partial header each, then nothing
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                s.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
                socks.append(s)
            assert max(_health(url) for _ in range(5)) < 2.0  # answered while the load holds its sockets
            assert _fds(proc.pid) <= base + 64 + 2  # never past the cap
            time.sleep(2.5)  # past --header-timeout: every half-sent request closed
            assert _fds(proc.pid) <= base + 2
            closed = 0
            for s in socks[-64:]:
                s.settimeout(0.5)
                try:
                    closed += s.recv(1) == b""
                except OSError:
                    closed += 1
            assert closed == 64
            # a kept-alive connection whose second request stalls is closed too
            k = socket.create_connection(("127.0.0.1", port), timeout=5)
            k.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            first = b""
            while not first.endswith(b"}"):  # the whole response: headers and JSON body
                first += k.recv(4096)
            assert b"200 OK" in first
            k.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            k.settimeout(4)
            assert k.recv(1) == b""  # the server closed it after the deadline
            k.close()
        finally:
            for s in socks:
                s.close()
        assert _health(url) < 2.0
