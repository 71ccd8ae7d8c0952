"""`curriculum serve --engine ray --replicas 2`: the server on Ray Serve, on a local Ray cluster the command starts,
answers with the same protocol and the same rankings as the index in process, from both replicas; a bad request gets
the same 4xx; the manifest is the same."""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import MUSIQUE_TRAIN
from support.servers import free_port, server_process

pytest.importorskip("ray.serve", reason="the ray extra (ray[serve]) is needed")
pytest.importorskip("bm25s")
requests = pytest.importorskip("requests")


@pytest.mark.slow
def test_ray_serve_replicas_answer_as_the_index_does(tmp_path):
    from rag_retriever import IndexConfig, build_index, load_index

    index = tmp_path / "ix"
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(index), depth=5))
    ix = load_index(index)
    questions = [json.loads(x)["question"] for x in MUSIQUE_TRAIN.read_text().splitlines()[:16]]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "rag_curriculum.cli", "serve", "--index", str(index), "--port", str(port),
            "--engine", "ray", "--replicas", "2", "--replica-cpus", "0.5", "--max-batch", "8"]
    with server_process(argv, f"{url}/health", tmp_path / "serve.log", env={"RAY_USAGE_STATS_ENABLED": "0"},
                        timeout_s=300):
        # /health answers once the proxy routes to one replica; the ready line is printed when serve.run returns
        # (Serve reports both RUNNING), a few seconds later on a loaded machine: waited for, bounded, before asking
        # (asked earlier, only the first replica may answer)
        deadline = time.monotonic() + 120
        while "2 replicas ready on Ray Serve" not in (tmp_path / "serve.log").read_text() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert "2 replicas ready on Ray Serve" in (tmp_path / "serve.log").read_text()

        def ask(q):
            r = requests.post(f"{url}/retrieve", json={"queries": [q], "topk": 3, "return_scores": True}, timeout=60)
            return r.headers.get("x-replica"), r.json()["result"][0]

        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(ask, questions * 3))
        ids, scores = ix.retrieve_many(questions, 3)
        docs = dict(zip(ids.ravel().tolist(), ix.documents(ids.ravel()), strict=True))
        for i, (_, hits) in enumerate(got):
            q = i % len(questions)
            assert [h["document"]["id"] for h in hits] == [docs[p][0] for p in ids[q].tolist()]
            assert [h["document"]["contents"] for h in hits] == [docs[p][1] for p in ids[q].tolist()]
        assert len({replica for replica, _ in got}) == 2  # both replicas answered
        bad = requests.post(f"{url}/retrieve", json={"queries": ["q"] * 9}, timeout=60)
        assert bad.status_code == 422 and "at most 8" in bad.json()["detail"]
        m = requests.get(f"{url}/manifest", timeout=60).json()
        assert m["fingerprint"] == ix.fingerprint and m["server"]["max_batch"] == 8
    assert "2 replicas ready on Ray Serve" in (tmp_path / "serve.log").read_text()
