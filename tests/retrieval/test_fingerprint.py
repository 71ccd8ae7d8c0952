"""A URL retriever is fingerprinted (issue 33, item 4): a real `curriculum serve` on one index, then restarted on
another index at the same port. The client that began with the first refuses the second's answers in one line
naming both; a partition or an evaluation resumed against the other index is refused; a server without
/manifest is used with a warning (nothing can be checked)."""

from __future__ import annotations

import json
import logging
import sys

import pytest
from conftest import MUSIQUE_TRAIN, SHARED_DATA
from servers import free_port, server_process
from typer.testing import CliRunner

from rag_curriculum.agents import HttpRetriever, RetrieverError
from rag_curriculum.cli import app

pytest.importorskip("fastapi", reason="the serve extra is needed")
pytest.importorskip("bm25s")
runner = CliRunner()
MUSIQUE_DEV = SHARED_DATA / "musique" / "musique_ans_v1.0_dev.sample200.jsonl"


@pytest.fixture(scope="module")
def two_indexes(tmp_path_factory):
    from rag_curriculum.retrieval import IndexConfig, build_index, load_index

    root = tmp_path_factory.mktemp("fp")
    out = []
    for name, path in (("a", MUSIQUE_TRAIN), ("b", MUSIQUE_DEV)):
        build_index(IndexConfig(dataset="musique", input=str(path), out=str(root / name), depth=5))
        out.append(root / name)
    return out, [load_index(d).fingerprint for d in out]


def _serve(index, port, log):
    argv = [sys.executable, "-m", "rag_curriculum.cli", "serve", "--index", str(index), "--port", str(port)]
    return server_process(argv, f"http://127.0.0.1:{port}/health", log, timeout_s=180)


def _partition(url, out):
    return runner.invoke(app, ["partition", "--agent", "search-r1", "--retriever", url, "--dataset", "musique",
                               "--input", str(MUSIQUE_TRAIN), "--n", "4", "--K", "2", "--backend", "scripted",
                               "--model", "agent_policies:search_then_answer", "--pass-at", "2", "--max-turns", "2",
                               "--out", str(out), "--no-progress"])


def _eval(url, data, out):
    return runner.invoke(app, ["eval", "--agent", "search-r1", "--retriever", url, "--backend", "scripted",
                               "--model", "p=agent_policies:search_then_answer", "--data", str(data), "--limit", "3",
                               "--max-turns", "2", "--out", str(out), "--no-progress"])


def test_a_server_swapped_behind_the_url_is_caught(two_indexes, tmp_path, min_max_shards, caplog):
    (a, b), (fa, fb) = two_indexes
    assert fa != fb
    port = free_port()
    url = f"http://127.0.0.1:{port}/retrieve"
    client = HttpRetriever(url, retries=1)
    with _serve(a, port, tmp_path / "a.log"):
        desc = client.describe()
        assert desc["index"]["fingerprint"] == fa and desc["index"]["index"] == "a"
        assert len(client.search(["Who founded the city?"], 2)[0]) == 2
        assert _partition(url, tmp_path / "part").exit_code == 0
        assert _eval(url, min_max_shards, tmp_path / "ev").exit_code == 0
    with _serve(b, port, tmp_path / "b.log"):
        with pytest.raises(RetrieverError) as e:
            client.search(["Who founded the city?"], 2)
        msg = str(e.value)
        assert f"fingerprint {fb[:12]}" in msg and f"fingerprint {fa[:12]}" in msg and "'a'" in msg
        # the same runs resumed against the other index: refused, nothing mixed
        r = _partition(url, tmp_path / "part")
        assert r.exit_code != 0 and ("fingerprint" in r.output or "another" in r.output), r.output
        r = _eval(url, min_max_shards, tmp_path / "ev")
        assert r.exit_code != 0 and "other settings" in r.output, r.output
        summary = json.loads((tmp_path / "ev" / "summary.json").read_text())
        assert summary["retriever"]["index"]["fingerprint"] == fa


def test_a_server_without_a_manifest_is_used_with_a_warning(tmp_path, caplog):
    """Search-R1's own server has no /manifest: the client warns once and goes on (nothing to check)."""
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(404)
            self.end_headers()

        def do_POST(self):  # noqa: N802
            n = int(self.headers["Content-Length"])
            body = json.loads(self.rfile.read(n))
            docs = [[{"document": {"id": "0", "contents": '"T"\nx'}, "score": 1.0}] for _ in body["queries"]]
            data = json.dumps({"result": docs}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a):
            pass

    srv = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        client = HttpRetriever(f"http://127.0.0.1:{srv.server_port}/retrieve", retries=0)
        with caplog.at_level(logging.WARNING):
            assert client.search(["q"], 1)[0][0].id == "0"
            client.search(["q2"], 1)
        warned = [r for r in caplog.records if "no /manifest" in r.getMessage()]
        assert len(warned) == 1
        assert client.describe() == {"kind": "http", "url": client.url, "index": None}
    finally:
        srv.shutdown()
