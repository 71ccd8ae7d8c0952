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
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from conftest import MUSIQUE_TRAIN
from rag_retriever import IndexConfig, build_index, load_index
from rag_retriever._integrity import choose_into_memory, into_memory, read_into_memory
from rag_retriever._lease import can_lease
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


def serve(index: Path, log: Path, *extra: str):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "rag_curriculum.cli", "serve", "--index", str(index), "--port", str(port), *extra]
    if (index / "dense").is_dir():
        argv += ["--device", "cpu"]
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
            assert got["detail"].startswith(f"the index {served.name}: ") and ") since this server opened it" \
                in got["detail"] and "mv it into place" in got["detail"], got  # (written, or being: leased)
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
@pytest.mark.parametrize("memory", ["--in-memory", "--no-in-memory"])
def test_files_copied_over_a_served_index_during_queries_never_crash_it(bm25_pair, tmp_path, memory):
    """``cp`` while queries run (the race a check after each copy cannot close): an index read whole into memory
    has nothing to cut short; a mapped one holds its files with a read lease, so each copy waits for the searches in
    flight. Every answer is the old one or a 503, and the server stays up."""
    served = tmp_path / "served"
    shutil.copytree(bm25_pair / "a", served)
    log = tmp_path / "server.log"
    url, proc_cm = serve(served, log, memory)
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
    if memory == "--in-memory":
        assert "index read into memory" in text
    else:
        assert "files are leased" in text, text[-3000:]
    assert "Segmentation fault" not in text and "Bus error" not in text, text[-3000:]


LEASE_CHILD = r"""
import asyncio, json, subprocess, sys, threading, time
from rag_retriever import load_index
from rag_retriever._lease import Changed, ReadGuard

served, other = sys.argv[1], sys.argv[2]
ix = load_index(served)
before = ix.retrieve_many(["Hamlet"], 3)[0].tolist()
guard = ReadGuard(ix)
loop = asyncio.new_event_loop()
out = {"lease": guard.lease(loop)}
go, inside = threading.Event(), threading.Event()

def search():  # a search in flight, held open until told to end
    with guard.reading():
        inside.set()
        go.wait(30)
        out["in_flight"] = ix.retrieve_many(["Hamlet"], 3)[0].tolist() == before

t = threading.Thread(target=search)
t.start()
inside.wait(10)
size = (ix.path / "passages.bin").stat().st_size
t0 = time.monotonic()
cp = subprocess.Popen(["cp", other + "/passages.bin", served + "/passages.bin"])
loop.run_until_complete(asyncio.sleep(1.0))  # the lease breaks: SIGIO, handled in the loop
out["cp_waiting"] = cp.poll() is None
out["size_while_waiting"] = (ix.path / "passages.bin").stat().st_size == size
try:
    with guard.reading():
        out["refused"] = None
except Changed as e:
    out["refused"] = str(e)
go.set()
t.join()
out["cp_rc"] = cp.wait(20)
out["cp_s"] = time.monotonic() - t0
out["changed"] = guard.changed()
print(json.dumps(out))
"""


def test_a_copy_over_a_mapped_index_waits_for_the_search_in_flight(bm25_pair, tmp_path):
    """The read lease (Linux): ``cp`` over a file of a mapped, served index is held back while a search is in
    flight (the file not yet cut), every new read is refused naming the file, and once the search ends the copy
    goes on (well before the kernel's own 45 s). In a child process: the lease's SIGIO is handled by its loop."""
    served = tmp_path / "served"
    shutil.copytree(bm25_pair / "a", served)
    r = subprocess.run([sys.executable, "-c", LEASE_CHILD, str(served), str(bm25_pair / "b")], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["lease"] is None, got  # every file leased
    assert got["cp_waiting"] and got["size_while_waiting"], got  # the writer held back, the file not cut
    assert got["refused"] and "passages.bin (opened for writing by another process)" in got["refused"], got
    assert got["in_flight"], got  # the search in flight read the old passages whole
    assert got["cp_rc"] == 0 and got["cp_s"] < 15, got  # let go once the search ended
    assert got["changed"] and got["changed"].startswith("passages.bin"), got


def test_an_index_read_into_memory_maps_no_file(bm25_pair):
    """``read_into_memory``: the arrays and the passage store are read whole, not mapped, and answer as mapped."""
    mapped = load_index(bm25_pair / "a")
    want = mapped.retrieve_many(QUERIES, 3)
    assert can_lease(bm25_pair / "a")  # (Linux, a local filesystem, the files this user's)
    assert not choose_into_memory(bm25_pair / "a", None)[0]  # leasable: mapped by default
    assert choose_into_memory(bm25_pair / "a", None, leases=False)[0]  # no lease (Ray Serve), small: into memory
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


def test_a_file_rewritten_with_its_size_and_modification_time_kept_is_refused(bm25_pair, tmp_path):
    """A byte of ``passages.bin`` rewritten in place and its modification time set back (``os.utime``, as ``cp
    --preserve=timestamps`` does): the same inode, size and modification time, so only its status change time says
    so; the server refuses every answer (503 naming the file) and ``/health``. A hard link to the file (a ``cp -al``
    backup) moves the status change time too, and is not a change. In-process, with no lease (the event loop not in
    the main thread), so the check before each read is what refuses."""
    import os

    from fastapi.testclient import TestClient
    from rag_retriever._server import make_app

    served = tmp_path / "served"
    shutil.copytree(bm25_pair / "a", served)
    body = {"queries": QUERIES, "topk": 3}
    with TestClient(make_app(served)) as c:
        assert c.app.state.index.guard._held == []  # (not leased: a writer's open is not held back nor seen)
        before = c.post("/retrieve", json=body)
        assert before.status_code == 200
        os.link(served / "passages.bin", tmp_path / "backup.bin")
        assert c.post("/retrieve", json=body).json() == before.json() and c.get("/health").status_code == 200
        path = served / "passages.bin"
        st = path.stat()
        with open(path, "r+b") as f:
            f.seek(-1, os.SEEK_END)
            last = f.read(1)
            f.seek(-1, os.SEEK_END)
            f.write(bytes([last[0] ^ 0xFF]))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        now = path.stat()
        assert (now.st_ino, now.st_size, now.st_mtime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns)
        for _ in range(2):
            got = c.post("/retrieve", json=body)
            assert got.status_code == 503, got.text
            assert got.json()["detail"].startswith(f"the index {served.name}: passages.bin (its status change time "
                                                   "changed) since this server opened it"), got.json()
        h = c.get("/health")
        assert h.status_code == 503 and h.json()["status"] == "changed", h.json()


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


WRITER = r"""
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY)  # open for writing before the server starts, untouched until told
print("open", flush=True)
sys.stdin.readline()
os.ftruncate(fd, 0)  # then cut short under the server, as its clients send batches
print("cut", flush=True)
sys.stdin.readline()
"""


@pytest.mark.slow
@pytest.mark.parametrize("memory", [(), ("--no-in-memory",)], ids=["default", "mapped"])
def test_a_file_open_for_writing_before_the_server_starts_never_crashes_it(bm25_pair, tmp_path, memory):
    """A process holds ``passages.bin`` open for writing when the server starts (so no lease can be taken on it),
    then truncates it while 4 clients send batches of 81 queries at topk 100; three times over. By default the
    small index is read whole (nothing mapped to cut short); mapped (``--no-in-memory``) every answer that would
    read the unleased file is a 503 naming it. Either way every answer is the one before the cut or a 503 naming
    the file, and the server stays up."""
    batch = {"queries": [f"{q} {i}" for i in range(27) for q in QUERIES], "topk": 100}
    for trial in range(3):
        served = tmp_path / f"served{trial}"
        shutil.copytree(bm25_pair / "a", served)
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(served / "passages.bin")], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert writer.stdout.readline().strip() == "open"
            log = tmp_path / f"server{trial}.log"
            port = free_port()
            url = f"http://127.0.0.1:{port}"
            argv = [sys.executable, "-m", "rag_curriculum.cli", "serve", "--index", str(served), "--port", str(port),
                    *memory]  # (ready once /manifest answers: /health is a 503 while the file cannot be leased)
            with server_process(argv, f"{url}/manifest", log, timeout_s=300) as proc:
                first, before = post(url, batch)
                seen: list[tuple[int, str]] = []
                stop = threading.Event()

                def ask(url=url, stop=stop, seen=seen, before=before) -> None:
                    while not stop.is_set():
                        try:
                            code, got = post(url, batch)
                        except OSError:  # the server gone: counted as no answer
                            code, got = -1, {}
                        seen.append((code, "" if code == 200 else got.get("detail", "")))
                        if code == 200:
                            assert got == before

                threads = [threading.Thread(target=ask) for _ in range(4)]
                for t in threads:
                    t.start()
                time.sleep(0.5)
                writer.stdin.write("\n")
                writer.stdin.flush()
                assert writer.stdout.readline().strip() == "cut"
                time.sleep(1.5)
                stop.set()
                for t in threads:
                    t.join(timeout=120)
                assert proc.poll() is None, log.read_text()[-3000:]
                assert health(url)[0] == 503  # the cut seen, named
                codes = {c for c, _ in seen}
                assert seen and codes <= {200, 503}, sorted(codes)
                assert all("passages.bin" in d for c, d in seen if c == 503), seen
                if memory:  # mapped: the file open for writing is never read
                    assert first == 503 and codes == {503}, (first, codes)
                else:
                    assert first == 200
            text = log.read_text()
            assert "Bus error" not in text and "Segmentation fault" not in text and "Traceback" not in text, text[-3000:]
            assert ("index read into memory" in text) != bool(memory), text[-3000:]
        finally:
            writer.kill()
            writer.wait()
