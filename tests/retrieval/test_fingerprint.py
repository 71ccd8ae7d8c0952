"""An index's fingerprint is a digest of what determines its answers: its passages, its kind, the
kind's analysis and scoring parameters and files (a dense index's vectors and encoder), not the folder it was
written to, the command line or the stored rankings' depth. A rebuild of the same corpus elsewhere matches; any
changed passage, corpus id or parameter does not.

A URL retriever is fingerprinted: a real `curriculum serve` on one index, then restarted on
another index at the same port. The client that began with the first refuses the second's answers in one line
naming both; a partition or an evaluation resumed against the other index is refused, and resumed against the
same corpus rebuilt in another folder goes on; a server without /manifest is used with a warning (nothing can be
checked)."""

from __future__ import annotations

import json
import logging
import shutil
import sys

import pytest
from conftest import MUSIQUE_TRAIN, SHARED_DATA
from support.servers import free_port, server_process
from typer.testing import CliRunner

from rag_curriculum.agents import HttpRetriever, RetrieverError
from rag_curriculum.cli import app

pytest.importorskip("fastapi", reason="the serve extra is needed")
pytest.importorskip("bm25s")
runner = CliRunner()
MUSIQUE_DEV = SHARED_DATA / "musique" / "musique_ans_v1.0_dev.sample200.jsonl"


@pytest.fixture(scope="module")
def two_indexes(tmp_path_factory):
    from rag_retriever import IndexConfig, build_index, load_index

    root = tmp_path_factory.mktemp("fp")
    out = []
    for name, path in (("a", MUSIQUE_TRAIN), ("b", MUSIQUE_DEV)):
        build_index(IndexConfig(dataset="musique", input=str(path), out=str(root / name), depth=5))
        out.append(root / name)
    return out, [load_index(d).fingerprint for d in out]


def _corpus(path, lines, edit=None):
    """A Search-R1-layout corpus of the MuSiQue sample's first paragraphs; ``edit(i, record)`` changes one."""
    recs = []
    for ex in (json.loads(x) for x in MUSIQUE_TRAIN.read_text().splitlines()):
        for p in ex["paragraphs"]:
            recs.append({"id": str(len(recs)), "contents": f'"{p["title"]}"\n{p["paragraph_text"]}'})
    recs = recs[:lines]
    if edit:
        recs = [edit(i, r) for i, r in enumerate(recs)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs))
    return path


def _index(corpus, out, *args):
    r = runner.invoke(app, ["index", "--corpus", str(corpus), "--out", str(out), "--no-progress", *args])
    assert r.exit_code == 0, r.output
    return json.loads((out / "manifest.json").read_text())


@pytest.mark.slow
def test_a_rebuild_elsewhere_matches_and_any_changed_passage_or_parameter_does_not(tmp_path):
    from rag_retriever import load_index

    corpus = _corpus(tmp_path / "in" / "corpus.jsonl", 300)
    base = _index(corpus, tmp_path / "a", "--depth", "5")
    assert base["fingerprint"] == load_index(tmp_path / "a").fingerprint and len(base["fingerprint"]) == 64
    # the same corpus copied elsewhere, indexed into a deeper folder with other options (depth, block)
    moved = _corpus(tmp_path / "elsewhere" / "copy.jsonl", 300)
    again = _index(moved, tmp_path / "x" / "y" / "b", "--depth", "9", "--block", "256")
    assert again["config"]["corpus"] != base["config"]["corpus"] and again["depth"] != base["depth"]
    assert again["fingerprint"] == base["fingerprint"]
    changed = {
        "a passage's text": _index(_corpus(tmp_path / "c1.jsonl", 300, lambda i, r: {
            **r, "contents": r["contents"] + ("." if i == 150 else "")}), tmp_path / "c1"),
        "a corpus line's id": _index(_corpus(tmp_path / "c2.jsonl", 300, lambda i, r: {
            **r, "id": "x" if i == 7 else r["id"]}), tmp_path / "c2"),
        "a passage less": _index(_corpus(tmp_path / "c3.jsonl", 299), tmp_path / "c3"),
        "k1": _index(corpus, tmp_path / "k1", "--k1", "1.2"),
        "b": _index(corpus, tmp_path / "b", "--b", "0.5"),
        "the preset": _index(corpus, tmp_path / "p", "--bm25", "bm25s"),
        "the BM25 variant": _index(corpus, tmp_path / "m", "--bm25", "bm25s", "--method", "robertson"),
        "the stop words": _index(corpus, tmp_path / "s", "--bm25", "bm25s", "--stopwords", "none"),
    }
    prints = {what: m["fingerprint"] for what, m in changed.items()}
    assert base["fingerprint"] not in prints.values(), prints
    assert len(set(prints.values())) == len(prints), prints


@pytest.mark.slow
def test_a_dense_index_is_fingerprinted_by_its_vectors_and_encoder_not_its_path(tmp_path, shared_data):
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("faiss")
    from support.tiny_model import build_tiny_encoder

    enc = build_tiny_encoder(tmp_path / "models" / "tiny-e5", shared_data)
    corpus = _corpus(tmp_path / "corpus.jsonl", 120)
    dense = ["--kind", "dense", "--encoder", str(enc), "--device", "cpu"]
    a = _index(corpus, tmp_path / "a", *dense)
    # the encoder and the index elsewhere: the manifest records the encoder relative to the index, differently
    shutil.copytree(enc, tmp_path / "other" / "place" / "tiny-e5")
    b = _index(corpus, tmp_path / "deep" / "er" / "b",
               *dense[:3], str(tmp_path / "other" / "place" / "tiny-e5"), *dense[4:])
    assert a["dense"]["encoder"] != b["dense"]["encoder"] and a["fingerprint"] == b["fingerprint"]
    prefix = _index(corpus, tmp_path / "p", *dense, "--passage-prefix", "doc: ")  # other vectors
    query = _index(corpus, tmp_path / "q", *dense, "--query-prefix", "q: ")  # the same vectors, other queries
    other = build_tiny_encoder(tmp_path / "models2" / "tiny-e5", shared_data, seed=1)  # other weights, same name
    weights = _index(corpus, tmp_path / "w", *dense[:3], str(other), *dense[4:])
    hybrid = _index(corpus, tmp_path / "h", "--kind", "hybrid", *dense[2:])
    prints = [m["fingerprint"] for m in (a, prefix, query, weights, hybrid)]
    assert len(set(prints)) == len(prints), prints
    assert _index(corpus, tmp_path / "h2", "--kind", "hybrid", *dense[2:])["fingerprint"] == hybrid["fingerprint"]


def _serve(index, port, log):
    argv = [sys.executable, "-m", "rag_curriculum.cli", "serve", "--index", str(index), "--port", str(port)]
    return server_process(argv, f"http://127.0.0.1:{port}/health", log, timeout_s=180)


def _partition(url, out):
    return runner.invoke(app, ["partition", "--agent", "search-r1", "--retriever", url, "--dataset", "musique",
                               "--input", str(MUSIQUE_TRAIN), "--n", "4", "--K", "2", "--backend", "scripted",
                               "--model", "support.agent_policies:search_then_answer", "--pass-at", "2", "--max-turns", "2",
                               "--out", str(out), "--no-progress"])


def _eval(url, data, out):
    return runner.invoke(app, ["eval", "--agent", "search-r1", "--retriever", url, "--backend", "scripted",
                               "--model", "p=support.agent_policies:search_then_answer", "--data", str(data), "--limit", "3",
                               "--max-turns", "2", "--out", str(out), "--no-progress"])


@pytest.mark.slow
def test_a_server_swapped_behind_the_url_is_caught(two_indexes, tmp_path, min_max_shards, caplog):
    (a, b), (fa, fb) = two_indexes
    assert fa != fb
    a2 = tmp_path / "rebuilt" / "a"  # the same index built again in another folder: the same fingerprint
    from rag_retriever import IndexConfig, build_index

    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(a2), depth=5))
    port = free_port()
    url = f"http://127.0.0.1:{port}/retrieve"
    client = HttpRetriever(url, retries=1)
    with _serve(a, port, tmp_path / "a.log"):
        desc = client.describe()
        assert desc["index"]["fingerprint"] == fa and desc["index"]["index"] == "a"
        assert len(client.search(["Who founded the city?"], 2)[0]) == 2
        assert _partition(url, tmp_path / "part").exit_code == 0
        assert _eval(url, min_max_shards, tmp_path / "ev").exit_code == 0
    with _serve(a2, port, tmp_path / "a2.log"):  # a rebuild elsewhere answers alike: the client goes on
        assert len(client.search(["Who founded the city?"], 2)[0]) == 2
        r = _partition(url, tmp_path / "part")
        assert r.exit_code == 0, r.output
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
