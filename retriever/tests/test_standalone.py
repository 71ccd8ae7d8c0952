"""rag-retriever on its own: its sources import nothing of rag_curriculum, and its command line indexes, validates
and serves a Search-R1-layout corpus ({"id", "contents"} lines) made from a real MuSiQue sample."""

from __future__ import annotations

import ast
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "rag_retriever"
SAMPLE = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "musique" / "musique_ans_v1.0_dev.sample200.jsonl"
CLI = [sys.executable, "-m", "rag_retriever.cli"]


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def test_the_retriever_imports_nothing_of_rag_curriculum():
    offenders = {str(p.relative_to(SRC)): [n for n in _imports(p) if n.split(".")[0] == "rag_curriculum"]
                 for p in SRC.rglob("*.py")}
    assert not {k: v for k, v in offenders.items() if v}
    assert len(list(SRC.rglob("*.py"))) > 20  # the scan saw the package


def test_importing_the_retriever_loads_no_curriculum_module():
    code = "import sys, rag_retriever, rag_retriever.cli; print([m for m in sys.modules if m.startswith('rag_curr')])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    if not SAMPLE.exists():
        pytest.skip(f"{SAMPLE}: the shared MuSiQue sample is not here")
    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        for line in SAMPLE.read_text(encoding="utf-8").splitlines()[:20]:
            for p in json.loads(line)["paragraphs"]:
                f.write(json.dumps({"id": str(n), "contents": f'"{p["title"]}"\n{p["paragraph_text"]}'}) + "\n")
                n += 1
    return path


@pytest.fixture(scope="module")
def index(corpus: Path) -> Path:
    out = corpus.parent / "idx"
    r = subprocess.run([*CLI, "index", "--corpus", str(corpus), "--out", str(out), "--no-progress"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "indexed 400 passages" in r.stdout and "lucene" in r.stdout  # a Search-R1 corpus: the Lucene preset
    return out


def test_validate_checks_every_file_and_names_a_changed_one(index: Path, tmp_path: Path):
    r = subprocess.run([*CLI, "validate", str(index)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "400 passages" in r.stdout and "valid" in r.stdout
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(index, broken)
    keys = broken / "passage_keys.npy"
    data = bytearray(keys.read_bytes())
    data[-1] ^= 0xFF
    keys.write_bytes(bytes(data))
    r = subprocess.run([*CLI, "validate", str(broken)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1
    assert r.stderr.startswith("error: ") and "passage_keys.npy" in r.stderr and "hint: " in r.stderr


def test_a_bad_corpus_line_is_one_error_naming_the_line_and_field(tmp_path: Path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "0", "contents": "\\"T\\"\\ntext"}\n{"id": "1"}\n', encoding="utf-8")
    r = subprocess.run([*CLI, "index", "--corpus", str(bad), "--out", str(tmp_path / "o"), "--no-progress"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 1
    assert "line 2, field 'contents': missing" in r.stderr and "hint: " in r.stderr
    assert not (tmp_path / "o").exists()


def test_a_value_out_of_range_is_a_usage_error(corpus: Path, tmp_path: Path):
    r = subprocess.run([*CLI, "index", "--corpus", str(corpus), "--out", str(tmp_path / "o"), "--k1", "-3"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "error: k1 (--k1) = -3.0" in r.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_answers_search_r1s_retrieve_protocol(index: Path, corpus: Path):
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    port = _free_port()
    proc = subprocess.Popen([*CLI, "serve", "--index", str(index), "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ})
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(600):
            try:
                with urllib.request.urlopen(url + "/health", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                assert proc.poll() is None, proc.stdout.read()
                time.sleep(0.2)
        first = json.loads(corpus.read_text(encoding="utf-8").splitlines()[0])
        query = first["contents"].split("\n", 1)[1][:200]
        body = json.dumps({"queries": [query], "topk": 3, "return_scores": True}).encode()
        req = urllib.request.Request(url + "/retrieve", data=body, headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            result = json.loads(r.read())["result"]
        assert len(result) == 1 and len(result[0]) == 3
        top = result[0][0]
        assert top["document"] == {"id": first["id"], "contents": first["contents"]}  # the line as it was given
        assert top["score"] >= result[0][1]["score"] >= result[0][2]["score"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
