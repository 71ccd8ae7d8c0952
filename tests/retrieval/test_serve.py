"""`curriculum serve`: the index behind Search-R1's retriever protocol. A real uvicorn server (started as
``python -m rag_curriculum.cli serve`` on a free port) on an index of the real MuSiQue train sample answers a client
written the way Search-R1's trainer writes it with exactly the in-process ranking; bad requests get a readable 4xx
and the server goes on; concurrent clients all get their own rankings. In-process (FastAPI's TestClient) for the
rest: readiness, limits, the micro-batcher, the CLI's refusals, and the ``{"id", "contents"}`` corpus layout."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import numpy as np
import pytest
from conftest import MUSIQUE_TRAIN
from rag_retriever import IndexConfig, build_index, load_index
from rag_retriever.errors import DataError
from support.agent_policies import search_then_answer
from support.servers import free_port, server_process
from typer.testing import CliRunner

from rag_curriculum.cli import app as cli_app
from rag_curriculum.loaders import load_examples

pytest.importorskip("fastapi", reason="the serve extra is needed: pip install 'rag-curriculum[serve]'")
requests = pytest.importorskip("requests")

runner = CliRunner()
MADE_UP = ["zzqxj qqxzv", "the of and", "", "Hamlet", "Which marsupial is from Zanzibar?", "Zürich café naïve ???",
           "river " * 300]


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, shared_data):
    out = tmp_path_factory.mktemp("serve-index") / "musique"
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(out), depth=50))
    return out


@pytest.fixture(scope="module")
def ix(index_dir):
    return load_index(index_dir)


@pytest.fixture(scope="module")
def questions(shared_data):
    return [ex.question for ex in load_examples("musique", MUSIQUE_TRAIN)][:20]


@pytest.fixture(scope="module")
def server(index_dir, tmp_path_factory):
    """``curriculum serve`` in a process group of its own, on a free port; its URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("serve-log") / "server.log"
    argv = [sys.executable, "-m", "rag_curriculum.cli", "serve", "--index", str(index_dir), "--port", str(port),
            "--max-batch", "64", "--max-topk", "50"]
    with server_process(argv, f"{url}/health", log, timeout_s=180):
        yield url


def expected(ix, queries, k, *, scores=True):
    """What the server must answer: ``retrieve_many``'s ranking as Search-R1's documents."""
    ids, sc = ix.retrieve_many(queries, k)
    out = []
    for row_ids, row_sc in zip(ids.tolist(), sc.tolist(), strict=True):
        docs = []
        for pid, s in zip(row_ids, row_sc, strict=True):
            if pid < 0:
                continue
            title, text = ix.passage(pid)
            doc = {"id": str(pid), "contents": f"{title}\n{text}"}
            docs.append({"document": doc, "score": s} if scores else doc)
        out.append(docs)
    return out


def assert_same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert [d["document"] for d in g] == [d["document"] for d in w]
        np.testing.assert_allclose([d["score"] for d in g], [d["score"] for d in w], rtol=0, atol=1e-5)


# -- the real server -------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_search_r1_client_gets_the_in_process_ranking(server, ix, questions):
    """As Search-R1's ``_batch_search``: ``requests.post(url, json={"queries", "topk", "return_scores": True})`` and
    ``.json()["result"]``, one list per query, best first; a query with no indexed word gets an empty list."""
    qs = questions + MADE_UP
    payload = {"queries": qs, "topk": 5, "return_scores": True}
    result = requests.post(server + "/retrieve", json=payload, timeout=60).json()["result"]
    want = expected(ix, qs, 5)
    assert_same(result, want)
    assert all(len(r) == 5 for r in result[:20])
    assert result[len(questions)] == [] and result[len(questions) + 1] == [] and result[len(questions) + 2] == []
    # the way Search-R1's trainer reads a document: title = first line, text = the rest
    doc = result[0][0]["document"]
    title, text = ix.passage(int(doc["id"]))
    assert doc["contents"].split("\n")[0] == title and "\n".join(doc["contents"].split("\n")[1:]) == text


def test_without_scores_and_the_single_form(server, ix, questions):
    result = requests.post(server + "/retrieve", json={"queries": questions[:4], "topk": 3}, timeout=60).json()
    assert result["result"] == expected(ix, questions[:4], 3, scores=False)  # the bare documents
    false = requests.post(server + "/retrieve", json={"queries": questions[:4], "topk": 3, "return_scores": False},
                          timeout=60).json()
    assert false == result
    one = requests.post(server + "/retrieve", json={"query": questions[5]}, timeout=60).json()  # topk: 3 by default
    assert one["result"] == expected(ix, [questions[5]], 3, scores=False)
    one = requests.post(server + "/retrieve", json={"query": questions[5], "topk": 7, "return_scores": True},
                        timeout=60).json()
    assert_same(one["result"], expected(ix, [questions[5]], 7))


@pytest.mark.parametrize("body,status,says", [
    ({"topk": 3}, 422, 'no query: give "queries"'),
    ({"queries": ["a"], "topk": 0}, 422, '"topk" is 0; it must be between 1 and 50'),
    ({"queries": ["a"], "topk": 51}, 422, '"topk" is 51; it must be between 1 and 50'),
    ({"queries": ["a"], "topk": "five"}, 422, "topk: Input should be a valid integer"),
    ({"queries": ["a"], "topk": True}, 422, "topk: a boolean, not an integer"),
    ({"queries": "who wrote Hamlet?"}, 422, "queries: Input should be a valid array"),
    ({"queries": ["a", 3]}, 422, "queries.1: Input should be a valid string (got 3)"),
    ({"queries": []}, 422, '"queries" is an empty list'),
    ({"queries": ["q"] * 65}, 422, "65 queries in one request; this server takes at most 64"),
    ({"queries": ["a"], "query": "b"}, 422, 'both "queries" and "query" given'),
    ([["a"]], 422, "the body must be a JSON object, got list"),
    (b'{"queries": ["a"', 400, "the body is not valid JSON"),
    (b"", 400, "the body is not valid JSON"),
])
def test_a_bad_request_gets_a_readable_4xx_and_the_server_goes_on(server, ix, questions, body, status, says):
    if isinstance(body, bytes):
        r = requests.post(server + "/retrieve", data=body, headers={"Content-Type": "application/json"}, timeout=60)
    else:
        r = requests.post(server + "/retrieve", json=body, timeout=60)
    assert r.status_code == status, r.text
    detail = r.json()["detail"]
    assert isinstance(detail, str) and "\n" not in detail and says in detail, detail
    assert 'send a JSON object such as {"queries": [' in detail  # what to send
    good = requests.post(server + "/retrieve", json={"queries": questions[:2], "topk": 2, "return_scores": True},
                         timeout=60)
    assert good.status_code == 200
    assert_same(good.json()["result"], expected(ix, questions[:2], 2))


def test_health_and_the_manifest(server, ix, index_dir):
    h = requests.get(server + "/health", timeout=60)
    assert h.status_code == 200
    assert h.json() == {"status": "ok", "index": "musique", "dataset": "musique", "passages": len(ix),
                        "fingerprint": ix.fingerprint}
    text = requests.get(server + "/manifest", timeout=60).text
    m = json.loads(text)
    assert m["dataset"] == "musique" and m["passages"] == len(ix) and m["kind"] == "index"
    assert m["retriever"] == "bm25" and m["fingerprint"] == ix.fingerprint
    assert m["bm25"] == ix.manifest["bm25"] and m["tokenizer"] == ix.manifest["tokenizer"]
    assert m["sources"][0]["input"] == MUSIQUE_TRAIN.name and m["sources"][0]["sha256"]
    assert m["server"]["max_batch"] == 64 and m["server"]["max_topk"] == 50 and m["server"]["default_topk"] == 3
    assert str(index_dir.parent) not in text and str(MUSIQUE_TRAIN.parent) not in text  # no local paths
    assert requests.get(server + "/", timeout=60).json() == m


def test_concurrent_clients_each_get_their_own_rankings(server, ix, questions):
    """4 threads x 6 requests at once, with different queries and topk: requests the server merges into one
    retrieval batch still get exactly their own rankings."""
    qs = questions + MADE_UP
    jobs = [([qs[(t * 7 + r * 3 + j) % len(qs)] for j in range(1 + (t + r) % 9)], 3 + (t + r) % 4)
            for t in range(4) for r in range(6)]
    results: dict[int, object] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def client(t):
        try:
            with requests.Session() as s:
                start.wait(timeout=60)
                for r in range(6):
                    i = t * 6 + r
                    q, k = jobs[i]
                    resp = s.post(server + "/retrieve", json={"queries": q, "topk": k, "return_scores": True},
                                  timeout=120)
                    results[i] = resp.json()["result"]
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=client, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=300)
    assert not errors, errors
    assert len(results) == len(jobs)
    for i, (q, k) in enumerate(jobs):
        assert_same(results[i], expected(ix, q, k))


@pytest.mark.slow
def test_several_worker_processes_serve_the_same_ranking(index_dir, ix, questions, tmp_path):
    """``--workers 2``: worker processes forked from the loaded index; every worker answers the in-process ranking,
    and stopping the group leaves none behind."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "rag_curriculum.cli", "serve", "--index", str(index_dir), "--port", str(port),
            "--workers", "2", "--max-topk", "20"]
    with server_process(argv, f"{url}/health", tmp_path / "server.log", timeout_s=180):
        with requests.Session() as s:
            for i in range(6):
                r = s.post(url + "/retrieve", json={"queries": questions[i:i + 3], "topk": 4, "return_scores": True},
                           timeout=60)
                assert_same(r.json()["result"], expected(ix, questions[i:i + 3], 4))
            assert s.get(url + "/manifest", timeout=60).json()["server"]["max_topk"] == 20
            assert s.post(url + "/retrieve", json={"query": "x", "topk": 21}, timeout=60).status_code == 422


# -- in process ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(ix):
    from fastapi.testclient import TestClient
    from rag_retriever._server import make_app

    with TestClient(make_app(ix, max_batch=8, max_topk=5000)) as c:
        yield c


def test_before_the_index_is_loaded_health_and_retrieve_answer_503(index_dir):
    from fastapi.testclient import TestClient
    from rag_retriever._server import make_app

    c = TestClient(make_app(index_dir))  # no `with`: the lifespan (which loads the index) has not run
    for r in (c.get("/health"), c.post("/retrieve", json={"query": "x"}), c.get("/manifest")):
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
    with TestClient(make_app(index_dir)) as c:
        assert c.get("/health").json()["status"] == "ok"


def test_topk_past_the_passage_count_returns_every_passage_ranked(client, ix, questions):
    r = client.post("/retrieve", json={"query": questions[0], "topk": 5000, "return_scores": True})
    assert r.status_code == 200
    got = r.json()["result"][0]
    assert len(got) == len(ix)  # the index cannot return more than it holds
    assert_same([got], expected(ix, [questions[0]], len(ix)))


def test_unknown_fields_are_ignored_and_topk_parses_as_searcher_clients_send_it(client, ix, questions):
    r = client.post("/retrieve", json={"queries": questions[:1], "topk": "4", "extra": 1, "return_scores": True})
    assert_same(r.json()["result"], expected(ix, questions[:1], 4))
    r = client.post("/retrieve", json={"queries": questions[:1], "topk": None})  # Search-R1's default: topk 3
    assert len(r.json()["result"][0]) == 3


def test_an_oversized_body_gets_413_unread_and_a_long_query_422_and_the_server_goes_on(ix, questions):
    from fastapi.testclient import TestClient
    from rag_retriever._server import make_app

    with TestClient(make_app(ix, max_body_bytes=4096, max_query_chars=100)) as c:
        big = json.dumps({"queries": ["river"] * 2000}).encode()
        r = c.post("/retrieve", content=big, headers={"content-type": "application/json"})
        assert r.status_code == 413 and "larger than 4,096 bytes" in r.json()["detail"]
        # no Content-Length (a chunked upload): cut off while it streams in
        r = c.post("/retrieve", content=iter([big[:3000], big[3000:]]), headers={"content-type": "application/json"})
        assert r.status_code == 413
        r = c.post("/retrieve", json={"queries": [questions[0], "x" * 101]})
        assert r.status_code == 422 and "query 1 is 101 characters" in r.json()["detail"]
        assert c.get("/manifest").json()["server"]["max_query_chars"] == 100
        short = [q[:100] for q in questions[:2]]
        r = c.post("/retrieve", json={"queries": short, "topk": 3, "return_scores": True})
        assert r.status_code == 200
        assert_same(r.json()["result"], expected(ix, short, 3))


@pytest.mark.slow
def test_a_request_asking_for_more_than_max_results_passages_gets_422_and_the_client_splits_its_batches(
        ix, questions, server):
    """Three requests of 512 queries x topk 100 (77 MB answers) held a one-word query back 24.6 s: a request may
    ask for at most --max-results passages (queries times topk, topk counted up to the index's passages), a larger
    one gets a 422 saying so; the toolkit's client reads the limits from /manifest and sends requests the server
    takes."""
    from fastapi.testclient import TestClient
    from rag_retriever import ServeConfig
    from rag_retriever._server import make_app

    from rag_curriculum.agents import HttpRetriever

    assert ServeConfig.max_results == 8192 and "max_results" in ServeConfig(index="x").limits()
    with TestClient(make_app(ix, max_results=10)) as c:
        r = c.post("/retrieve", json={"queries": questions[:4], "topk": 3})
        assert r.status_code == 422 and r.json()["detail"] == (
            "4 queries with topk 3 ask for 12 passages; this server returns at most 10 a request (curriculum serve "
            "--max-results): split the queries into several requests")
        r = c.post("/retrieve", json={"queries": questions[:3], "topk": 3, "return_scores": True})
        assert r.status_code == 200 and c.get("/manifest").json()["server"]["max_results"] == 10
        assert_same(r.json()["result"], expected(ix, questions[:3], 3))
    with TestClient(make_app(ix, max_results=len(ix), max_topk=10 * len(ix))) as c:  # topk past the passages
        assert c.post("/retrieve", json={"query": "Hamlet", "topk": 10 * len(ix)}).status_code == 200
    client = HttpRetriever(server + "/retrieve", batch=256)  # the server takes 64 queries (--max-batch 64)
    sent = []
    post = client._post
    client._post = lambda qs, k: sent.append(len(qs)) or post(qs, k)
    qs = (questions * 5)[:70]
    assert [len(h) for h in client.search(qs, 5)] == [5] * 70 and sent == [64, 6]
    client._limits["max_results"] = 100  # as a server with --max-results 100 says
    sent.clear()
    hits = client.search(qs[:25], 5)
    assert sent == [20, 5] and [[h.id for h in row] for row in hits] == [
        [str(int(i)) for i in row if i >= 0] for row in ix.retrieve_many(qs[:25], 5)[0]]


def test_the_batcher_merges_concurrent_requests_and_splits_them_back(ix, questions):
    """Concurrent requests become one ``retrieve_many`` per topk (at most ``max_batch`` queries after the first
    request), and each gets exactly the rows of its own queries."""
    import asyncio

    from rag_retriever._lease import ReadGuard
    from rag_retriever._server import _Batcher

    calls = []

    class Counting:
        def retrieve_many(self, qs, k):
            calls.append((len(qs), k))
            return ix.retrieve_many(qs, k)

        def changed(self):  # the server asks before each batch whether a file of the index was rewritten
            return ix.changed()

    batcher = _Batcher(ReadGuard(Counting()), max_batch=12)
    reqs = [(questions[i:i + 1 + i % 3], 3 if i % 2 else 5) for i in range(10)]

    async def main():
        return await asyncio.gather(*(batcher.rank(q, k) for q, k in reqs))

    out = asyncio.run(main())
    for (q, k), (ids, scores) in zip(reqs, out, strict=True):
        want_ids, want_scores = ix.retrieve_many(q, k)
        assert np.array_equal(ids, want_ids) and np.allclose(scores, want_scores, atol=0)
    assert len(calls) < len(reqs)  # merged
    assert all(n <= 12 + 3 for n, _ in calls)  # one request may push a batch past max_batch, no more


def test_a_request_alone_on_its_worker_is_answered_on_the_event_loop_with_the_same_bytes(ix, questions, monkeypatch):
    """A worker's only connection (one client asking one request after another): its small request, once a
    search of the index was timed brief, is answered on the event loop, no thread; the same bytes as through the
    batcher's thread. A large one, or one while a batch runs, goes through the batcher."""
    import asyncio

    from rag_retriever import _server
    from rag_retriever._lease import ReadGuard
    from rag_retriever._server import INLINE_QUERIES, _Batcher

    monkeypatch.setattr(_server, "INLINE_SECONDS", 10.0)  # (brief however loaded the machine: the slow test below)
    batcher = _Batcher(ReadGuard(ix), max_batch=64)
    threads = []
    run = batcher._run
    batcher._run = lambda *a: (threads.append(threading.current_thread()), run(*a))[1]

    async def main():
        await batcher.rank(questions[:1], 3, True, True)  # no search timed yet: in the thread, timed there
        assert threads.pop() is not threading.main_thread() and batcher.per_query is not None
        out = []
        for qs in (questions[:1], questions[1:1 + INLINE_QUERIES], questions[:INLINE_QUERIES + 1]):
            for alone in (True, False):
                for scores in (True, False):
                    out.append((alone and len(qs) <= INLINE_QUERIES, await batcher.rank(qs, 3, scores, alone)))
        return out

    got = asyncio.run(main())
    assert [t is threading.main_thread() for t in threads] == [inline for inline, _ in got]
    for i in range(0, len(got), 4):  # alone or not: the same bytes
        assert got[i][1] == got[i + 2][1] and got[i + 1][1] == got[i + 3][1]
        assert isinstance(got[i][1], bytes) and json.loads(got[i][1])["result"]


async def _asgi_call(asgi, method, path, body=b"", connections=None):
    """(status, headers, body) of one request to an ASGI app, its body sent in two chunks; ``connections``: what
    the connection guard says its worker holds."""
    from rag_retriever._server import CONNECTIONS_KEY

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "path": path,
             "raw_path": path.encode(), "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1),
             "server": ("127.0.0.1", 2), "scheme": "http", "state": {},
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]}
    if connections is not None:
        scope[CONNECTIONS_KEY] = connections
    chunks = [body[:10], body[10:]]
    sent = []

    async def receive():
        return {"type": "http.request", "body": chunks.pop(0), "more_body": bool(chunks)}

    async def send(message):
        sent.append(message)

    await asgi(scope, receive, send)
    return sent[0]["status"], sent[0]["headers"], b"".join(m.get("body", b"") for m in sent[1:])


def test_a_slow_search_alone_on_its_worker_runs_off_the_event_loop_and_health_answers_meanwhile(ix, questions,
                                                                                                monkeypatch):
    """A worker's only connection on an index whose search is slow (planted: 0.1 s a query; a dense index's
    encoder takes ~11 ms): its small requests are searched in a thread, never on the event loop, so a ``/health``
    that arrives during a search is answered before the search ends."""
    import asyncio
    import time

    from rag_retriever._server import INLINE_SECONDS, fast_path, make_app

    real = ix.retrieve_many

    def slow(queries, k, **kw):
        time.sleep(0.1)
        return real(queries, k, **kw)

    monkeypatch.setattr(ix, "retrieve_many", slow)
    inner = make_app(ix)
    app = fast_path(inner)
    body = json.dumps({"queries": questions[:1], "topk": 3, "return_scores": True}).encode()
    done = []

    async def retrieve():
        got = await _asgi_call(app, "POST", "/retrieve", body, connections=1)
        done.append("retrieve")
        return got

    async def health():
        await asyncio.sleep(0.03)  # (the search under way)
        got = await _asgi_call(app, "GET", "/health")
        done.append("health")
        return got

    async def main():
        async with inner.router.lifespan_context(inner):
            first = [await retrieve() for _ in range(2)]  # the index's searches timed
            return first, await asyncio.gather(retrieve(), health())

    first, (searched, healthy) = asyncio.run(main())
    assert done[-2:] == ["health", "retrieve"], done  # /health answered while the search ran
    assert [r[0] for r in first] == [200, 200] and searched[0] == 200 and healthy[0] == 200
    assert searched[2] == first[0][2] and json.loads(searched[2])["result"]
    assert inner.state.index.batcher.per_query > INLINE_SECONDS


def test_the_fast_path_answers_retrieve_with_the_endpoints_bytes(ix, questions):
    """``fast_path`` (what ``curriculum serve`` runs): ``POST /retrieve`` past FastAPI's routing gets the same
    status, headers and body as through FastAPI, for answers and for every refusal; anything else goes to the app."""
    import asyncio

    from rag_retriever._server import fast_path, make_app

    app = make_app(ix, max_batch=8, max_topk=20, max_results=100, max_query_chars=300, max_body_bytes=4096)
    fast = fast_path(app)
    bodies = [json.dumps({"queries": questions[:3], "topk": 3, "return_scores": True}).encode(),
              json.dumps({"query": questions[0], "topk": 2}).encode(), json.dumps({"queries": ["x"] * 9}).encode(),
              json.dumps({"queries": ["x"], "topk": 21}).encode(), json.dumps({"queries": ["x"] * 8, "topk": 20}).encode(),
              json.dumps({"queries": ["river " * 100]}).encode(), json.dumps({"queries": []}).encode(), b"{not json",
              json.dumps({"queries": ["x"] * 8, "pad": "y" * 5000}).encode()]

    call = _asgi_call

    async def main():
        async with app.router.lifespan_context(app):
            out = []
            for body in bodies:
                out.append((await call(app, "POST", "/retrieve", body), await call(fast, "POST", "/retrieve", body)))
            out.append((await call(app, "GET", "/health"), await call(fast, "GET", "/health")))
            return out

    got = asyncio.run(main())
    assert [a[0] for a, _ in got] == [200, 200, 422, 422, 422, 422, 422, 400, 413, 200]
    for want, fast_got in got:
        assert fast_got == want


def test_make_app_refuses_bad_limits(index_dir):
    from rag_retriever._server import make_app

    with pytest.raises(ValueError, match="max_batch must be a positive integer"):
        make_app(index_dir, max_batch=0)
    with pytest.raises(ValueError, match="default_topk 5 is above max_topk 4"):
        make_app(index_dir, max_topk=4, default_topk=5)


@pytest.mark.slow
def test_importing_the_toolkit_and_its_cli_imports_no_server_library():
    code = ("import sys, json, rag_curriculum, rag_curriculum.cli, rag_retriever._server\n"
            "print(json.dumps([m for m in ('fastapi', 'uvicorn', 'starlette', 'pydantic') if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == []


# -- the command's refusals ------------------------------------------------------------------------------------


def test_serve_refuses_a_missing_index_a_busy_port_and_a_missing_server_library(tmp_path, index_dir, monkeypatch):
    r = runner.invoke(cli_app, ["serve", "--index", str(tmp_path / "nowhere")])
    assert r.exit_code == 1
    assert "no such index directory" in r.output and "curriculum index" in r.output
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        r = runner.invoke(cli_app, ["serve", "--index", str(index_dir), "--port", str(port)])
    assert r.exit_code == 1 and f"cannot listen on 127.0.0.1:{port}" in r.output and "--port" in r.output
    r = runner.invoke(cli_app, ["serve", "--index", str(index_dir), "--default-topk", "9", "--max-topk", "5"])
    assert r.exit_code == 1 and "--default-topk 9 is above --max-topk 5" in r.output
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # as if the serve extra were not installed
    r = runner.invoke(cli_app, ["serve", "--index", str(index_dir)])
    assert r.exit_code == 1 and "pip install 'rag-curriculum[serve]'" in r.output, r.output


def test_serve_help_shows_the_protocol_and_an_example():
    r = runner.invoke(cli_app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0
    assert "curriculum serve --index" in r.output and '"return_scores": true' in r.output
    assert "--max-batch" in r.output and "--max-topk" in r.output and "--workers" in r.output


# -- the {"id", "contents"} corpus layout ----------------------------------------------------------------------


def test_a_corpus_of_id_contents_lines_is_indexed_and_served_as_search_r1_ships_it(tmp_path, shared_data):
    """FlashRAG / Search-R1 lines (``contents`` = title, newline, text; wiki-18's quoted titles; no newline: no
    title) and ``{"title", "text"}`` lines in one file, through ``curriculum index --corpus``: ranked by their title
    and text (a quoted title without its quotes), and served as their lines, byte for byte, with their own ids."""
    from fastapi.testclient import TestClient
    from rag_retriever._server import make_app

    lines = [
        {"id": "wiki-0", "contents": '"Zanzibar Quokka"\nThe Zanzibar quokka is a made-up marsupial.'},
        {"id": "wiki-1", "contents": "Glimmerfen Abbey\nGlimmerfen Abbey is an invented ruin.\nIt has two towers."},
        {"id": 2, "contents": "A titleless passage about the borogove of Quillmere."},
        {"title": "Snarkhaven", "text": "Snarkhaven is a fictional harbour town."},
        {"id": "4", "contents": '"Quoted "inside" title"\nText with a "quote".', "title": "ignored"},
    ]
    corpus = tmp_path / "wiki.jsonl"
    corpus.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "idx"
    r = runner.invoke(cli_app, ["index", "-d", "musique", "-i", str(MUSIQUE_TRAIN), "--corpus", str(corpus),
                                "-o", str(out), "--depth", "5", "--no-progress"])
    assert r.exit_code == 0, r.output
    ix = load_index(out)
    added = [i for i in range(len(ix)) if ix.origin(i) == "corpus"]
    assert [ix.passage(i) for i in added] == [
        ("Zanzibar Quokka", "The Zanzibar quokka is a made-up marsupial."),
        ("Glimmerfen Abbey", "Glimmerfen Abbey is an invented ruin.\nIt has two towers."),
        ("", "A titleless passage about the borogove of Quillmere."),
        ("Snarkhaven", "Snarkhaven is a fictional harbour town."),
        ('Quoted "inside" title', 'Text with a "quote".')]
    docs = ix.documents(added)
    assert [d[0] for d in docs] == ["wiki-0", "wiki-1", "2", str(added[3]), "4"]
    assert [d[1] for d in docs] == [x["contents"] for x in lines[:3]] + [
        "Snarkhaven\nSnarkhaven is a fictional harbour town.", lines[4]["contents"]]
    with TestClient(make_app(ix)) as c:
        res = c.post("/retrieve", json={"query": "Which marsupial is from Zanzibar?", "topk": 1}).json()["result"]
        assert res[0][0] == {"id": "wiki-0", "contents": lines[0]["contents"]}
        res = c.post("/retrieve", json={"query": "borogove Quillmere", "topk": 1}).json()["result"]
        assert res[0][0] == {"id": "2", "contents": lines[2]["contents"]}


def test_a_corpus_alone_is_served_as_search_r1_serves_it(tmp_path):
    """A corpus-only index (``curriculum index --corpus FILE --out DIR``) of wiki-18-style lines: each hit's
    document is the corpus line as Search-R1's own retrieval_server.py returns it (the row it read from the same
    file), and Search-R1's client code prints the same ``Doc i(Title: ...)`` text from our answer as from its own
    server's: quoted titles keep their quotes."""
    from fastapi.testclient import TestClient
    from rag_retriever._server import make_app
    from support.search_r1_files import search_r1_documents, search_r1_passages_string, write_search_r1_corpus

    from rag_curriculum.agents import IndexRetriever
    from rag_curriculum.agents._retrievers import doc_lines

    passages = [(f"Album {i} (band {i % 7})", f"Album {i} is the {i}th record of band {i % 7}, made in Ruritania "
                 f"in {1950 + i}.") for i in range(60)]
    corpus = write_search_r1_corpus(tmp_path / "wiki-18.jsonl", passages, id_format="wiki-{}")
    out = tmp_path / "wiki18"
    r = runner.invoke(cli_app, ["index", "--corpus", str(corpus), "--out", str(out), "--no-progress"])
    assert r.exit_code == 0, r.output
    assert "60 passages (60 corpus lines)" in r.output
    theirs = search_r1_documents(corpus)  # Search-R1's server: corpus[i] for the i-th vector / line
    ix = load_index(out)
    assert ix.dataset is None and ix.manifest["questions"] == 0 and len(ix) == 60
    with TestClient(make_app(ix)) as c:
        body = c.post("/retrieve", json={"queries": ["record of band 3 made in 1953", "Album 42"], "topk": 3,
                                         "return_scores": True}).json()
    for q, row in enumerate(body["result"]):
        ids, _ = ix.retrieve_many([["record of band 3 made in 1953", "Album 42"][q]], 3)
        want = [theirs[i] for i in ids[0].tolist()]  # their document for the same passages
        assert [h["document"] for h in row] == [{"id": w["id"], "contents": w["contents"]} for w in want]
        # Search-R1's client prints exactly what it prints over its own server's answer
        assert search_r1_passages_string([h for h in row]).count("(Title: \"Album") == 3
        assert search_r1_passages_string(row) == search_r1_passages_string([{"document": w} for w in want])
    hits = IndexRetriever(ix).search(["Album 42"], 3)[0]
    assert doc_lines(hits) + "\n" == search_r1_passages_string([{"document": theirs[int(h.id.split("-")[1])]}
                                                                for h in hits])
    assert hits[0].title == "Album 42 (band 0)" and hits[0].id == "wiki-42"  # the gold test reads it unquoted


@pytest.mark.parametrize("line,match", [
    ('{"id": "7"}', r"line 2, field 'contents': missing"),
    ('{"id": "7", "contents": 3}', r"line 2, field 'contents': a int, not a string"),
    ('{"id": "7", "contents": "\\"Title\\"\\n  "}', r"line 2, field 'contents': no text after the title line"),
    ('{"id": "7", "contents": "   "}', r"line 2, field 'contents': empty"),
    ('{"contents": null}', r"line 2, field 'contents': a NoneType, not a string"),
])
def test_a_bad_id_contents_line_is_named(tmp_path, shared_data, line, match):
    corpus = tmp_path / "bad.jsonl"
    corpus.write_text('{"id": "0", "contents": "Fine\\nA good line."}\n' + line + "\n")
    with pytest.raises(DataError, match=match) as e:
        build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), corpus=str(corpus),
                                out=str(tmp_path / "o")))
    assert "bad.jsonl" in str(e.value) and e.value.hint
    r = runner.invoke(cli_app, ["index", "-d", "musique", "-i", str(MUSIQUE_TRAIN), "--corpus", str(corpus),
                                "-o", str(tmp_path / "o"), "--no-progress"])
    assert r.exit_code == 1 and "bad.jsonl, line 2" in r.output and "hint:" in r.output
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_a_search_agent_against_the_server_sees_what_it_sees_in_process(server, ix, min_max_shards, min_max_rows,
                                                                         tmp_path):
    """The search environment with the server's URL (credentials in it, as a shared deployment may need) gives
    the same trajectories as with the index in process, and no file of `eval --agent` holds the password."""
    from rag_curriculum.agents import HttpRetriever, IndexRetriever, run_rollouts
    from rag_curriculum.generation import SamplingConfig
    from rag_curriculum.generation._scripted import ScriptedBackend

    rows = min_max_rows[:8]
    sampling = SamplingConfig(max_tokens=32)
    url = server.replace("http://", "http://agent:s3cret@") + "/retrieve"
    over_http = run_rollouts(ScriptedBackend(script=search_then_answer), rows, HttpRetriever(url), sampling, n=2)
    in_process = run_rollouts(ScriptedBackend(script=search_then_answer), rows, IndexRetriever(ix), sampling, n=2)
    assert [t.to_dict() for t in over_http] == [t.to_dict() for t in in_process]
    assert sum(len(t.searches) for t in over_http) >= 8
    out = tmp_path / "eval"
    r = runner.invoke(cli_app, ["eval", "--agent", "search-r1", "--retriever", url, "--backend", "scripted",
                                "--model", "p=support.agent_policies:search_then_answer", "--data",
                                str(min_max_shards), "--limit", "4", "--out", str(out), "--no-progress"])
    assert r.exit_code == 0, r.output
    assert "s3cret" not in r.output
    written = [p for p in out.rglob("*") if p.is_file()]
    assert len(written) >= 5
    assert not [p for p in written if "s3cret" in p.read_text(errors="replace")]
    assert "***@127.0.0.1" in (out / "summary.json").read_text()

