"""A retriever kind written in one file (tests/retrieval/toy_kind.py) and registered by its entry point, as an
installed package registers one, is a kind like the toolkit's own for the real ``curriculum`` command: ``index
--kind toy`` builds it (its option --toy-min-chars an option of the command, refused with another kind; its check
run), ``serve`` serves it with Search-R1's protocol, ``build --distractors toy`` draws a curriculum's distractors
from its ranking, and ``validate`` checks it; nothing else in the toolkit names it."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import MUSIQUE_TRAIN, ROOT
from rag_retriever import ENTRY_POINTS, KINDS, IndexConfig
from support.servers import free_port, server_process

HERE = Path(__file__).resolve().parent


def _toy():
    """The toy kind's module, read from its file (not registered in this process)."""
    if "toy_kind" not in sys.modules:
        spec = importlib.util.spec_from_file_location("toy_kind", HERE / "toy_kind.py")
        sys.modules["toy_kind"] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules["toy_kind"]


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory) -> dict[str, str]:
    """The environment of a Python whose installed packages include one declaring the toy kind: its module on the
    path and its entry point (the ``*.dist-info`` folder pip writes for ``[project.entry-points]``)."""
    site = tmp_path_factory.mktemp("site")
    info = site / "toy_kind-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-kind\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINTS}]\ntoy = toy_kind:KIND\n")
    path = os.pathsep.join([str(site), str(HERE), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1"}


def curriculum(env: dict[str, str], *args: object) -> subprocess.CompletedProcess:
    """The ``curriculum`` command, run in a Python that has the toy kind's package installed."""
    return subprocess.run([sys.executable, "-m", "rag_curriculum.cli", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=300)


#: Several ``curriculum`` commands in one such Python (its start-up paid once): each one's exit status and output.
DRIVER = """import json, sys
from typer.testing import CliRunner
from rag_curriculum.cli import app
print(json.dumps([(r.exit_code, r.output) for r in (CliRunner().invoke(app, a) for a in json.loads(sys.argv[1]))]))
"""


def curriculum_each(env: dict[str, str], *commands: list) -> list[tuple[int, str]]:
    r = subprocess.run([sys.executable, "-c", DRIVER, json.dumps([[str(a) for a in c] for c in commands])], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return [tuple(x) for x in json.loads(r.stdout)]


@pytest.fixture(scope="module")
def toy_index(plugin_env, tmp_path_factory, shared_data) -> Path:
    out = tmp_path_factory.mktemp("toy") / "idx"
    r = curriculum(plugin_env, "index", "--kind", "toy", "--toy-min-chars", 4, "-d", "musique", "-i", MUSIQUE_TRAIN,
                   "-o", out, "--depth", 20, "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "toy: words of 4+ characters" in r.stdout  # what the kind says of itself
    return out


@pytest.mark.slow
def test_index_builds_the_toy_kind_with_its_option_and_stores_its_ranking(toy_index):
    m = json.loads((toy_index / "manifest.json").read_text())
    assert m["retriever"] == "toy" and m["toy"]["min_chars"] == 4
    assert m["config"]["toy_min_chars"] == 4 and "k1" not in m["config"] and "encoder" not in m["config"]
    assert (toy_index / "toy" / "words.json").is_file() and not (toy_index / "bm25").exists()
    # the stored rankings are the toy searcher's, through the one interface every kind has
    import numpy as np
    import pyarrow as pa

    questions = pa.ipc.open_file(pa.memory_map(str(toy_index / "questions.arrow"))).read_all().column("question")
    searcher = _toy().ToySearcher(toy_index, m)
    ids, _ = searcher.search(questions.to_pylist()[:10], 20)
    assert (np.load(toy_index / "ranked_ids.npy")[:10] == ids).all() and (ids[:, 0] >= 0).all()


@pytest.mark.slow
def test_the_kinds_option_and_check_are_the_commands(plugin_env, toy_index, tmp_path, shared_data):
    base = ["index", "-d", "musique", "-i", MUSIQUE_TRAIN, "--no-progress"]
    bm25_opt, out_of_range, corpus, helped, wrong_kind, valid = curriculum_each(
        plugin_env,
        [*base, "-o", tmp_path / "a", "--toy-min-chars", 4],  # with the default kind, bm25
        [*base, "-o", tmp_path / "b", "--kind", "toy", "--toy-min-chars", 0],
        [*base, "-o", tmp_path / "c", "--kind", "toy", "--corpus", MUSIQUE_TRAIN],
        ["index", "--help"],
        ["build", "-d", "musique", "-i", MUSIQUE_TRAIN, "--n", 8, "--distractors", "bm25", "--index", toy_index,
         "-o", tmp_path / "d", "--no-progress"],
        ["validate", toy_index])
    assert bm25_opt[0] == 2 and "--toy-min-chars is for --kind toy, not bm25" in bm25_opt[1], bm25_opt
    assert out_of_range[0] == 2 and "toy_min_chars (--toy-min-chars) = 0" in out_of_range[1], out_of_range
    assert corpus[0] == 1 and "--kind toy indexes a dataset file only" in corpus[1], corpus
    assert "--toy-min-chars" in helped[1] and "the shortest word that counts" in helped[1]
    assert wrong_kind[0] == 1 and "is a toy index" in wrong_kind[1], wrong_kind
    assert valid[0] == 0 and "a toy index" in valid[1], valid
    assert not any((tmp_path / n).exists() for n in "abcd")
    # without the package installed, the toolkit knows nothing of it
    assert "toy" not in KINDS and "toy_min_chars" not in IndexConfig.__dataclass_fields__


@pytest.mark.slow
def test_serve_answers_with_the_toy_ranking(plugin_env, toy_index, tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "rag_curriculum.cli", "serve", "--index", str(toy_index), "--port", str(port)]
    query = "Who founded the company that made the game?"
    with server_process(argv, f"{url}/health", tmp_path / "serve.log", env=plugin_env, timeout_s=180):
        req = urllib.request.Request(f"{url}/retrieve", data=json.dumps(
            {"queries": [query], "topk": 5, "return_scores": True}).encode(), headers={"Content-Type":
                                                                                   "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            got = json.loads(r.read())["result"][0]
        with urllib.request.urlopen(f"{url}/manifest", timeout=60) as r:
            served = json.loads(r.read())
    m = json.loads((toy_index / "manifest.json").read_text())
    ids, scores = _toy().ToySearcher(toy_index, m).search([query], 5)
    assert [h["score"] for h in got] == scores[0].tolist()
    assert len(got) == 5 and served["retriever"] == "toy" and served["toy"] == m["toy"]
    assert "words of 4+ characters" in (tmp_path / "serve.log").read_text()


@pytest.mark.slow
def test_build_draws_distractors_from_the_toy_ranking(plugin_env, toy_index, tmp_path):
    out = tmp_path / "built"
    r = curriculum(plugin_env, "build", "-d", "musique", "-i", MUSIQUE_TRAIN, "--n", 8, "--K", 4, "--distractors",
                   "toy", "--index", toy_index, "-o", out, "--no-progress")
    assert r.returncode == 0, r.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["distractors"] == "toy" and manifest["distractors"]["source"] == "toy"
    rows = pq.read_table(out / "data").to_pylist()
    shown = [p for row in rows for p in row["passages"] if not p["is_gold"]]
    assert shown and {p["origin"] for p in shown} == {"toy"}
    card = (out / "README.md").read_text()
    assert "toy hard negatives (passages sharing the question's words)" in card and "words of 4+ characters" in card
