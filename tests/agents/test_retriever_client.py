"""The HTTP retriever client under faults: a server that accepts and never answers
stops a run after --retriever-timeout (tried twice) in one line naming the URL; one nothing listens on, after
--retriever-retries more tries; a key in the URL never reaches a log line, urllib3's retry warnings included; a
scheme other than http(s) is refused as such."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rag_curriculum.agents import HttpRetriever, RetrieverError, open_retriever

TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture
def silent_server():
    """A TCP server that accepts connections, reads, and never answers."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    held, stop = [], threading.Event()

    def accept():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
                held.append(conn)
            except OSError:
                pass

    th = threading.Thread(target=accept, daemon=True)
    th.start()
    yield srv.getsockname()[1]
    stop.set()
    th.join()
    for c in held:
        c.close()
    srv.close()


@pytest.mark.slow
@pytest.mark.parametrize("retries", [5, 0])
def test_a_hung_server_stops_the_run_after_the_timeout(silent_server, retries):
    """Asked twice, whatever the retries of connection errors (0 included)."""
    client = HttpRetriever(f"http://127.0.0.1:{silent_server}/retrieve?api_key=SECRET", timeout=1.0, retries=retries)
    t = time.perf_counter()
    with pytest.raises(RetrieverError) as e:
        client.search(["who?"], 3)
    took = time.perf_counter() - t
    assert "did not answer within 1 s (2 attempts)" in str(e.value) and "--retriever-timeout" in e.value.hint
    assert "SECRET" not in str(e.value) and f"127.0.0.1:{silent_server}" in str(e.value)
    assert 1.9 < took < 10  # two timeouts of 1 s


def test_a_closed_port_is_tried_retriever_retries_more_times_then_named(caplog):
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    assert open_retriever(f"http://127.0.0.1:{port}/retrieve").retries == 5  # the default: about 15 s of backoff
    for retries, said in ((0, "after 0 retries"), (1, "after 1 retry")):
        retriever = open_retriever(f"http://127.0.0.1:{port}/retrieve", retries=retries)
        caplog.clear()
        start = time.monotonic()
        with caplog.at_level(logging.DEBUG, logger="rag_curriculum.agents._retrievers"), \
                pytest.raises(RetrieverError) as e:
            retriever.search(["who wrote hamlet"], 1)
        assert time.monotonic() - start < 5  # urllib3 waits 0 s before the first retry
        assert str(e.value).endswith(f"unreachable (Connection refused) {said}"), str(e.value)
        tried = [r for r in caplog.records if r.getMessage().startswith("retrying a retriever request")]
        assert len(tried) == retries, [r.getMessage() for r in caplog.records]
    with pytest.raises(RetrieverError, match="retries=-1"):
        open_retriever(f"http://127.0.0.1:{port}/retrieve", retries=-1)


def test_a_training_agents_retriever_retries_reach_its_client():
    """agent.retriever_retries, as `curriculum train` opens the agent's retriever (the rollout and TRL's tool
    environment)."""
    from rag_curriculum.train._config import AgentConfig
    from rag_curriculum.train._rollout import rollout_from_config
    from rag_curriculum.train._tools import environment_from_config

    agent = AgentConfig(retriever="http://127.0.0.1:1/retrieve", retriever_retries=0)
    assert rollout_from_config(agent).retriever.retries == 0
    assert environment_from_config(agent)()._retriever.retries == 0
    assert AgentConfig().retriever_retries == 5


@pytest.mark.slow
def test_the_cli_names_the_url_and_leaks_no_key(silent_server, tmp_path, min_max_shards):
    """Through the command line: one error line, and no log line (the toolkit's or urllib3's) holds the key."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there: urllib3 retries (once here), and logs each retry with the path and query
    env = {"PYTHONPATH": str(TESTS), "HF_HUB_OFFLINE": "1"}
    for url, says in ((f"http://u:pw@127.0.0.1:{port}/retrieve?api_key=SECRET", "unreachable"),
                      (f"http://127.0.0.1:{silent_server}/retrieve?token=SECRET", "did not answer within 1 s")):
        r = subprocess.run([sys.executable, "-m", "rag_curriculum.cli", "eval", "--agent", "search-r1",
                            "--retriever", url, "--retriever-timeout", "1", "--retriever-retries", "1", "--backend",
                            "scripted", "--model",
                            "p=support.agent_policies:search_then_answer", "--data", str(min_max_shards), "--limit", "1",
                            "--out", str(tmp_path / "ev"), "--no-progress"], capture_output=True, text=True,
                           env={**__import__("os").environ, **env}, timeout=300)
        out = r.stdout + r.stderr
        assert r.returncode == 1 and says in out, out
        assert "SECRET" not in out and "pw@" not in out, out
        assert [x for x in out.splitlines() if x.startswith("error: ")][0].count("127.0.0.1") == 1


@pytest.mark.parametrize("where", ["file:///etc/passwd", "ftp://example.org/retrieve", "s3://bucket/index"])
def test_another_scheme_is_refused_as_such(where):
    with pytest.raises(RetrieverError, match=r"the scheme \w+:// is not supported") as e:
        open_retriever(where)
    assert "http(s)://" in e.value.hint


@pytest.fixture
def odd_servers():
    """HTTP servers that answer /retrieve wrongly: 404, 405, and a body that is not Search-R1's shape."""
    from http.server import BaseHTTPRequestHandler, HTTPServer

    def make(status, body):
        class H(BaseHTTPRequestHandler):
            def _answer(self):
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer  # noqa: N815

            def log_message(self, *a):
                pass

        srv = HTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        return srv

    servers = {"404": make(404, b"not found"), "405": make(405, b"method not allowed"),
               "shape": make(200, b'{"results": []}')}
    yield {k: f"http://127.0.0.1:{s.server_port}/retrieve" for k, s in servers.items()}
    for s in servers.values():
        s.shutdown()


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["HTTP", "Http"])
def test_a_schemes_case_does_not_matter(odd_servers, scheme):
    """RFC 3986: a scheme is case-insensitive; HTTP:// was refused as another scheme."""
    url = odd_servers["shape"].replace("http", scheme, 1)
    client = open_retriever(url)
    assert isinstance(client, HttpRetriever) and client.url == url
    with pytest.raises(RetrieverError, match="the response is not Search-R1's"):  # it reached the server
        client.search(["who?"], 1)


@pytest.mark.slow
@pytest.mark.parametrize("which", ["404", "405", "shape"])
def test_a_failed_run_leaves_nothing_behind(odd_servers, which, tmp_path, min_max_shards):
    """The retriever is tried before anything is written: eval leaves no eval_config.json nor
    lock, partition builds no OUT/input."""
    from conftest import MUSIQUE_TRAIN
    from typer.testing import CliRunner

    from rag_curriculum.cli import app

    runner = CliRunner()
    url = odd_servers[which]
    r = runner.invoke(app, ["eval", "--agent", "search-r1", "--retriever", url, "--backend", "scripted", "--model",
                            "p=support.agent_policies:search_then_answer", "--data", str(min_max_shards), "--limit", "1",
                            "--out", str(tmp_path / "ev"), "--no-progress"])
    assert r.exit_code == 1 and "retriever" in r.output, r.output
    assert not (tmp_path / "ev").exists()
    r = runner.invoke(app, ["partition", "--agent", "search-r1", "--retriever", url, "--dataset", "musique", "--input",
                            str(MUSIQUE_TRAIN), "--n", "2", "--backend", "scripted", "--model",
                            "support.agent_policies:search_then_answer", "--out", str(tmp_path / "part"), "--no-progress"])
    assert r.exit_code == 1 and "retriever" in r.output, r.output
    assert not (tmp_path / "part").exists()
