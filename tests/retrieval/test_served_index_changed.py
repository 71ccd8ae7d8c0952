"""A served index changed on disk never takes the server down: ``cp -r other/* served/`` (each file rewritten in
place, under the server's memory maps: a segmentation fault on a BM25 index and a bus error on a dense one
before) makes every answer a 503 naming the file that changed, ``/health`` a 503 too, and the server stays up; an
index replaced whole (``mv``, which ``curriculum index --overwrite`` also does: a rename) goes on being served
from the files the server opened, unchanged. Real servers (``curriculum serve`` in a child process)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from conftest import MUSIQUE_TRAIN
from rag_retriever import IndexConfig, build_index, load_index
from rag_retriever._integrity import choose_into_memory, into_memory, read_into_memory
from support.servers import free_port, server_process

pytest.importorskip("bm25s")
pytest.importorskip("fastapi")
QUERIES = ["Who founded the company?", "the river of the city", "Hamlet"]


def _slice(path: Path, lo: int, hi: int) -> Path:
    path.write_text("".join(MUSIQUE_TRAIN.read_text().splitlines(keepends=True)[lo:hi]))
    return path


def post(url: str, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(f"{url}/retrieve", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def health(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def serve(index: Path, log: Path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "rag_curriculum.cli", "serve", "--index", str(index), "--port", str(port),
            "--device", "cpu"] if (index / "dense").is_dir() else [
        sys.executable, "-m", "rag_curriculum.cli", "serve", "--index", str(index), "--port", str(port)]
    return url, server_process(argv, f"{url}/health", log, timeout_s=300)


def _copied_over(served: Path, other: Path) -> None:
    """``cp -r other/* served/``: every file of ``served`` rewritten in place (the same inodes)."""
    subprocess.run(f"cp -r {other}/* {served}/", shell=True, check=True)


def _check_copied_over(served: Path, other: Path, log: Path) -> None:
    url, proc_cm = serve(served, log)
    with proc_cm as proc:
        status, before = post(url, {"queries": QUERIES, "topk": 3})
        assert status == 200 and len(before["result"]) == 3, before
        _copied_over(served, other)
        for _ in range(3):  # and again: the server is still there, still refusing
            status, got = post(url, {"queries": QUERIES, "topk": 3})
            assert status == 503, (status, got)
            assert got["detail"].startswith(f"the index {served.name}: ") and "changed) since this server opened it" \
                in got["detail"] and "mv it into place" in got["detail"], got
            assert proc.poll() is None, log.read_text()[-3000:]
        status, h = health(url)
        assert status == 503 and h["status"] == "changed", h
        assert proc.poll() is None
    text = log.read_text()
    assert "Segmentation fault" not in text and "Bus error" not in text and "Traceback" not in text, text[-3000:]


@pytest.fixture(scope="module")
def bm25_pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("served-bm25")
    for name, (lo, hi) in (("a", (0, 30)), ("b", (30, 70))):
        build_index(IndexConfig(dataset="musique", input=str(_slice(root / f"{name}.jsonl", lo, hi)),
                                out=str(root / name), depth=5))
    return root


@pytest.mark.slow
def test_a_bm25_index_copied_over_while_served_is_refused_not_a_crash(bm25_pair, tmp_path):
    served = tmp_path / "served"
    shutil.copytree(bm25_pair / "a", served)
    _check_copied_over(served, bm25_pair / "b", tmp_path / "server.log")


@pytest.mark.slow
def test_files_copied_over_a_served_index_during_queries_never_crash_it(bm25_pair, tmp_path):
    """``cp`` while queries run (the race a check after each copy cannot close): a small index is read whole into
    memory, so every answer is the old one or a 503, and the server stays up."""
    served = tmp_path / "served"
    shutil.copytree(bm25_pair / "a", served)
    log = tmp_path / "server.log"
    url, proc_cm = serve(served, log)
    with proc_cm as proc:
        status, before = post(url, {"queries": QUERIES, "topk": 3})
        assert status == 200
        seen: list[int] = []
        stop = threading.Event()

        def ask() -> None:
            while not stop.is_set():
                try:
                    code, got = post(url, {"queries": QUERIES, "topk": 3})
                except OSError:  # the server gone: counted as no answer
                    code, got = -1, {}
                seen.append(code)
                if code == 200:
                    assert got == before, got

        threads = [threading.Thread(target=ask) for _ in range(4)]
        for t in threads:
            t.start()
        for i in range(6):
            _copied_over(served, bm25_pair / ("b" if i % 2 == 0 else "a"))
        stop.set()
        for t in threads:
            t.join(timeout=60)
        assert proc.poll() is None, log.read_text()[-3000:]
        assert seen and set(seen) <= {200, 503}, sorted(set(seen))
    text = log.read_text()
    assert "index read into memory" in text
    assert "Segmentation fault" not in text and "Bus error" not in text, text[-3000:]


def test_an_index_read_into_memory_maps_no_file(bm25_pair):
    """``read_into_memory``: the arrays and the passage store are read whole, not mapped, and answer as mapped."""
    mapped = load_index(bm25_pair / "a")
    want = mapped.retrieve_many(QUERIES, 3)
    assert choose_into_memory(bm25_pair / "a", None)[0]  # small: into memory by default
    assert choose_into_memory(bm25_pair / "a", False) == (False, choose_into_memory(bm25_pair / "a", None)[1])
    was = into_memory()
    read_into_memory(True)
    try:
        ix = load_index(bm25_pair / "a")
        got = ix.retrieve_many(QUERIES, 3)
        assert ix.passage(int(got[0][0][0])) == mapped.passage(int(want[0][0][0]))
    finally:
        read_into_memory(was)
    assert all(np.array_equal(a, b) for a, b in zip(want, got, strict=True))
    assert isinstance(ix._docs._mm, bytes) and not isinstance(mapped._docs._mm, bytes)  # read whole, not mapped


@pytest.mark.slow
def test_a_bm25_index_moved_into_place_while_served_goes_on_being_served(bm25_pair, tmp_path):
    served = tmp_path / "served"
    shutil.copytree(bm25_pair / "a", served)
    url, proc_cm = serve(served, tmp_path / "server.log")
    with proc_cm as proc:
        status, before = post(url, {"queries": QUERIES, "topk": 3})
        assert status == 200
        shutil.copytree(bm25_pair / "b", tmp_path / "new")
        shutil.rmtree(served)
        (tmp_path / "new").rename(served)  # mv new served (what --overwrite does)
        status, after = post(url, {"queries": QUERIES, "topk": 3})
        assert status == 200 and after == before, after  # the files it opened, unchanged
        assert health(url)[0] == 200 and proc.poll() is None


@pytest.fixture(scope="module")
def dense_pair(tmp_path_factory, shared_data):
    pytest.importorskip("faiss", reason="the dense extra is needed")
    pytest.importorskip("sentence_transformers", reason="the dense extra is needed")
    from support.tiny_model import build_tiny_encoder

    root = tmp_path_factory.mktemp("served-dense")
    enc = build_tiny_encoder(root / "enc", shared_data)
    for name, (lo, hi) in (("a", (0, 30)), ("b", (30, 70))):
        build_index(IndexConfig(dataset="musique", input=str(_slice(root / f"{name}.jsonl", lo, hi)),
                                out=str(root / name), kind="dense", encoder=str(enc), device="cpu", depth=5))
    return root


@pytest.mark.slow
def test_a_dense_index_copied_over_while_served_is_refused_not_a_crash(dense_pair, tmp_path):
    shutil.copytree(dense_pair / "enc", tmp_path / "enc")  # (the index finds its encoder at ../enc)
    served = tmp_path / "served"
    shutil.copytree(dense_pair / "a", served)
    _check_copied_over(served, dense_pair / "b", tmp_path / "server.log")
