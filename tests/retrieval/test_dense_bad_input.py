"""Dense indexes given bad or unusual input, each on real FAISS files and a real (tiny, random-weight) sentence-transformers encoder:

* (1) an L2 index (``faiss.IndexFlatL2``) adopted by ``--import-faiss`` is served by its own metric: the same
  ranking as the inner-product index of the same (unit) vectors, nearest first, its score the negated squared
  distance; a metric the toolkit cannot rank (L1) is refused in one line;
* (5) a dense index whose encoder folder moved: one line naming the recorded folder and ``--encoder``, before
  ``serve`` announces anything; with ``--encoder OTHER`` the message names OTHER;
* (6) NaN or infinite vectors are refused on import and by ``curriculum validate``;
* (9) a local-looking encoder path that is not there is "no such folder" (no Hub download hint); a broken JSON file
  in an encoder folder is named;
* (10) bad values of the dense options are usage errors (exit 2) found before any model loads; ``--compress Bogus``
  blames ``--compress``; ``--engine ray`` without Ray Serve is refused before "serving ..." is printed.

The same inputs are in the command line's adversarial corpus (tests/cli/test_bad_input_corpus.py).
"""

from __future__ import annotations

import json
import shutil
import sys

import numpy as np
import pytest
from support.cli_runs import one_error, run
from support.index_edits import resealed
from support.servers import busy_port

pytest.importorskip("faiss", reason="the dense extra is needed: pip install 'rag-curriculum[dense]'")
pytest.importorskip("sentence_transformers", reason="the dense extra is needed")

import faiss  # noqa: E402
from rag_retriever import load_index  # noqa: E402

QUERIES = ["Who founded the company?", "the river of the city", "which album was released in 1999?", "Hamlet"]


@pytest.fixture(scope="module")
def files(tmp_path_factory, shared_data):
    """A Search-R1 corpus of 60 MuSiQue paragraphs, the tiny encoder, its unit vectors of the corpus (e5's passage
    prefix), and the same vectors as an inner-product, an L2, an L1 and a NaN-holding flat index."""
    from conftest import MUSIQUE_TRAIN
    from sentence_transformers import SentenceTransformer
    from support.tiny_model import build_tiny_encoder

    root = tmp_path_factory.mktemp("dense-trust")
    enc = build_tiny_encoder(root / "enc", shared_data)
    lines = [json.loads(x) for x in MUSIQUE_TRAIN.read_text().splitlines()[:6]]
    passages = list(dict.fromkeys((p["title"], p["paragraph_text"]) for r in lines for p in r["paragraphs"]))[:60]
    corpus = root / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"d{i}", "contents": f'"{t}"\n{x}'}) + "\n"
                              for i, (t, x) in enumerate(passages)))
    rows = [json.loads(x) for x in corpus.read_text().splitlines()]
    model = SentenceTransformer(str(enc), device="cpu")
    x = model.encode(["passage: " + r["contents"] for r in rows], normalize_embeddings=True,
                     convert_to_numpy=True).astype(np.float32)
    for name, index in (("ip", faiss.IndexFlatIP(x.shape[1])), ("l2", faiss.IndexFlatL2(x.shape[1])),
                        ("l1", faiss.IndexFlat(x.shape[1], faiss.METRIC_L1))):
        index.add(x)
        faiss.write_index(index, str(root / f"{name}.index"))
    bad = x.copy()
    bad[3, 0], bad[7, 5] = np.nan, np.inf
    nan = faiss.IndexFlatIP(x.shape[1])
    nan.add(bad)
    faiss.write_index(nan, str(root / "nan.index"))
    q = model.encode(["query: " + s for s in QUERIES], normalize_embeddings=True, convert_to_numpy=True)
    return {"root": root, "enc": enc, "corpus": corpus, "x": x, "q": q.astype(np.float32)}


def adopt(files, name, out, *more):
    return run("index", "--kind", "dense", "--encoder", files["enc"], "--device", "cpu", "--import-faiss",
               files["root"] / f"{name}.index", "--corpus", files["corpus"], "--out", out, "--no-progress", *more)


# -- (1) an L2 index ranks by its own metric ----------------------------------------------------------------------
@pytest.mark.slow
def test_an_l2_index_ranks_as_the_inner_product_index_of_the_same_vectors(files, tmp_path):
    from fastapi.testclient import TestClient
    from rag_retriever._server import make_app

    for name in ("ip", "l2"):
        r = adopt(files, name, tmp_path / name)
        assert r.exit_code == 0, r.output
    m_ip, m_l2 = (json.loads((tmp_path / n / "manifest.json").read_text())["dense"] for n in ("ip", "l2"))
    assert (m_ip["metric"], m_l2["metric"]) == ("inner_product", "l2")
    assert m_l2["imported"]["type"] == "IndexFlatL2"
    ip, l2 = load_index(tmp_path / "ip"), load_index(tmp_path / "l2")
    a_ids, a_scores = ip.retrieve_many(QUERIES, 10)
    b_ids, b_scores = l2.retrieve_many(QUERIES, 10)
    assert a_ids.tolist() == b_ids.tolist()  # the same ranking from both, best first
    x, q = files["x"], files["q"]
    exact = np.lexsort((np.broadcast_to(np.arange(len(x)), (len(q), len(x))), -(q @ x.T)), axis=1)[:, :10]
    assert a_ids.tolist() == exact.tolist()
    # scores: higher is better for both; an L2 index's is the negated squared distance (2 cos - 2 for unit vectors)
    assert np.all(np.diff(b_scores, axis=1) <= 0) and np.all(b_scores <= 0)
    assert np.allclose(b_scores, 2 * a_scores - 2, atol=1e-4)
    with TestClient(make_app(l2)) as c:  # served: the nearest passage first (not the farthest, as before)
        body = c.post("/retrieve", json={"queries": QUERIES, "topk": 3, "return_scores": True}).json()
    assert [[h["document"]["id"] for h in hits] for hits in body["result"]] == \
        [[f"d{i}" for i in row[:3]] for row in exact.tolist()]


@pytest.mark.slow
def test_an_l2_index_of_vectors_of_any_length_ranks_nearest_first(files, tmp_path):
    """Not unit vectors: an L2 index's ranking is the exact Euclidean one (ascending distance), not the inner
    product's; compressed from the L2 flat file, it stays L2 (its recall measured against exact L2 search)."""
    rng = np.random.default_rng(0)
    x = (files["x"] * rng.uniform(0.2, 3.0, size=(len(files["x"]), 1))).astype(np.float32)
    index = faiss.IndexFlatL2(x.shape[1])
    index.add(x)
    faiss.write_index(index, str(files["root"] / "l2-any.index"))
    r = adopt(files, "l2-any", tmp_path / "l2")
    assert r.exit_code == 0, r.output
    q = files["q"]
    d2 = ((q[:, None, :] - x[None, :, :]) ** 2).sum(axis=2)
    exact = np.lexsort((np.broadcast_to(np.arange(len(x)), d2.shape), d2), axis=1)[:, :5]
    ids, scores = load_index(tmp_path / "l2").searcher.search_vectors(q, 5)
    assert ids.tolist() == exact.tolist()
    assert np.allclose(scores, -np.take_along_axis(d2, exact, 1), atol=1e-3)
    r = adopt(files, "l2-any", tmp_path / "l2c", "--compress", "IVF2,Flat", "--nprobe", "2")
    assert r.exit_code == 0, r.output
    m = json.loads((tmp_path / "l2c" / "manifest.json").read_text())["dense"]
    assert m["metric"] == "l2" and m["recall"]["recall"] == 1.0  # IVF2,Flat with nprobe 2 is exhaustive
    got, _ = load_index(tmp_path / "l2c").searcher.search_vectors(q, 5)
    assert got.tolist() == exact.tolist()


def test_a_metric_the_toolkit_cannot_rank_is_refused(files, tmp_path):
    line = one_error(adopt(files, "l1", tmp_path / "o"))
    assert "its metric is METRIC_L1" in line and "inner-product and L2" in line, line
    assert not (tmp_path / "o").exists()


# -- (6) non-finite vectors ----------------------------------------------------------------------------------------
def test_nan_vectors_are_refused_on_import(files, tmp_path):
    line = one_error(adopt(files, "nan", tmp_path / "o"))
    assert "2 vectors not finite (NaN or infinity): passages 3, 7" in line and "line 4" in line, line
    assert not (tmp_path / "o").exists() and not list(tmp_path.iterdir())


def test_an_all_zero_index_is_refused_on_import(files, tmp_path):
    """A file of zero bytes is not a FAISS index (refused as such); an index of zero vectors (every passage scoring 0
    for every query, so every query got the first passages) is refused too."""
    zeros = files["root"] / "zeros.index"
    zeros.write_bytes(bytes(4096))
    line = one_error(run("index", "--kind", "dense", "--encoder", files["enc"], "--device", "cpu", "--import-faiss",
                         zeros, "--corpus", files["corpus"], "--out", tmp_path / "o", "--no-progress"))
    assert f"--import-faiss {zeros}: not a FAISS index" in line, line
    flat = faiss.IndexFlatIP(files["x"].shape[1])
    flat.add(np.zeros_like(files["x"]))
    faiss.write_index(flat, str(files["root"] / "zero-vectors.index"))
    line = one_error(adopt(files, "zero-vectors", tmp_path / "o"))
    assert f"all {len(files['x'])} vectors are zero, so every passage would score 0 for every query" in line, line
    assert not (tmp_path / "o").exists() and not list(tmp_path.iterdir())


@pytest.mark.slow
@pytest.mark.parametrize("where", ["dense/faiss.index", "dense/vectors.f16"])
def test_validate_refuses_nan_vectors(files, tmp_path, where):
    """An index whose vectors were damaged after it was made (the sizes unchanged): ``validate`` reads them."""
    src = tmp_path / "ok"
    r = adopt(files, "ip", src, *(["--compress", "IVF2,Flat"] if where.endswith("f16") else []))
    assert r.exit_code == 0, r.output
    assert run("validate", src).exit_code == 0
    ix = tmp_path / "damaged"
    shutil.copytree(src, ix)
    path = ix / where
    path.unlink()  # a copy of its own (the flat file is a hard link to the imported one)
    shutil.copyfile(src / where, path)
    data = bytearray(path.read_bytes())
    if where.endswith("f16"):
        at = 5 * 2 * files["x"].shape[1]  # passage 5's first value
        data[at:at + 2] = np.array([np.nan], dtype="<f2").tobytes()
    else:
        from rag_retriever._dense import flat_layout

        d, _, offset, _ = flat_layout(path)
        at = offset + 5 * 4 * d
        data[at:at + 4] = np.array([np.nan], dtype="<f4").tobytes()
    path.write_bytes(bytes(data))
    line = one_error(run("validate", ix))  # (the file's SHA-256 first)
    assert f"{where}: its SHA-256 is not the one manifest.json records" in line, line
    resealed(ix)  # the records made anew: the vectors themselves are read
    line = one_error(run("validate", ix))
    assert f"{where}: 1 vector not finite (NaN or infinity): passage 5" in line, line


# -- (5) the encoder folder moved --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def moved(files, tmp_path_factory):
    """An adopted index whose encoder (a copy beside it) was then moved away."""
    root = tmp_path_factory.mktemp("moved")
    shutil.copytree(files["enc"], root / "enc")
    r = run("index", "--kind", "dense", "--encoder", root / "enc", "--device", "cpu", "--import-faiss",
            files["root"] / "ip.index", "--corpus", files["corpus"], "--out", root / "index", "--no-progress")
    assert r.exit_code == 0, r.output
    (root / "enc").rename(root / "enc-moved")
    return root


@pytest.mark.slow
def test_a_moved_encoder_is_one_line_before_anything_is_announced(moved, files, shared_data):
    r = run("serve", "--index", moved / "index", "--port", busy_port())
    line = one_error(r)
    assert "serving" not in r.output and "Traceback" not in r.output, r.output
    assert "the index's encoder folder ../enc (recorded in its manifest.json" in line, line
    assert str(moved / "enc") in line and "--encoder FOLDER" in r.output, r.output
    other = moved / "other"
    line = one_error(run("serve", "--index", moved / "index", "--encoder", other, "--port", busy_port()))
    assert f"--encoder {other}: no such folder" in line and "../enc" not in line, line
    # the folder given instead is used; one of another dimension is named, not the recorded one
    ids, _ = load_index(moved / "index", encoder=str(moved / "enc-moved"), device="cpu").retrieve_many(QUERIES, 3)
    x, q = files["x"], files["q"]
    assert ids.tolist() == np.lexsort((np.broadcast_to(np.arange(len(x)), (len(q), len(x))), -(q @ x.T)),
                                      axis=1)[:, :3].tolist()
    from support.tiny_model import build_tiny_encoder

    wide = build_tiny_encoder(moved / "enc48", shared_data, dim=48)
    with pytest.raises(Exception, match=f"--encoder {wide}: 1_Pooling/config.json differs from the encoder the index"):
        load_index(moved / "index", encoder=str(wide), device="cpu").retrieve("who?")
    with pytest.raises(Exception, match=f"--encoder {wide} makes vectors of dimension 48; the index holds 32"):
        load_index(moved / "index", encoder=str(wide), device="cpu", allow_other_encoder=True).retrieve("who?")


# -- (9) encoder errors --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", ["absolute", "relative", "file", "empty", "broken-json", "broken-module-json"])
def test_an_encoder_that_cannot_be_a_model_is_named_in_one_line(case, files, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    enc = {"absolute": str(tmp_path / "no" / "such"), "relative": "./no-such-model", "file": "f.txt",
           "empty": "empty", "broken-json": "broken", "broken-module-json": "broken"}[case]
    (tmp_path / "f.txt").write_text("x")
    (tmp_path / "empty").mkdir()
    if case.startswith("broken"):
        shutil.copytree(files["enc"], tmp_path / "broken")
        (tmp_path / "broken" / ("config.json" if case == "broken-json" else "1_Pooling/config.json")).write_text("")
    r = run("index", "--kind", "dense", "--encoder", enc, "--corpus", files["corpus"], "--out", tmp_path / "o",
            "--device", "cpu", "--no-progress")
    line = one_error(r)
    says = {"absolute": "no such folder", "relative": "no such folder", "file": "a file, not a model folder",
            "empty": "no modules.json, no config.json", "broken-json": "config.json is not valid JSON (Expecting",
            "broken-module-json": "1_Pooling/config.json is not valid JSON (Expecting"}[case]
    assert line.startswith(f"error: --encoder {enc}: ") and says in line, line
    assert "huggingface-cli" not in r.output and "offline" not in r.output, r.output
    assert not (tmp_path / "o").exists()


# -- (10) usage errors before any model loads ----------------------------------------------------------------------
@pytest.mark.parametrize("args, flag", [
    (["--max-memory", "abc"], "--max-memory 'abc': not a size"),
    (["--max-memory", "nan"], "--max-memory 'nan': not a size"),
    (["--max-memory", "-1GB"], "--max-memory '-1GB': not a size"),
    (["--max-memory", "1e400GB"], "--max-memory '1e400GB': not a size"),
    (["--max-memory", "0GB"], "--max-memory '0GB': must be between"),
    (["--device", "bogus"], "--device 'bogus': not a device"),
    (["--encoder", None], "--kind dense needs --encoder"),
    (["--import-faiss", "{ip}", "--compress", "Bogus"], "--compress 'Bogus': FAISS refuses it"),
    # FAISS's C++ text ("Error in void faiss::IndexIDMapTemplate<IndexT>::add ... use add_with_ids") before
    (["--import-faiss", "{ip}", "--compress", "IDMap,Flat"], "--compress 'IDMap,Flat': an IDMap index maps vectors"),
    (["--import-faiss", "{ip}", "--compress", "IDMap2,IVF4,Flat"], "--compress 'IDMap2,IVF4,Flat': an IDMap index"),
])
def test_bad_dense_options_are_usage_errors_before_any_model_loads(args, flag, files, tmp_path, monkeypatch):
    from rag_retriever import _encoder

    def no_model(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(_encoder, "_load", no_model)
    base = ["index", "--kind", "dense", "--encoder", files["enc"], "--corpus", files["corpus"], "--out",
            tmp_path / "o", "--no-progress"]
    if args[1] is None:
        base[3:5] = []
        args = []
    args = [str(files["root"] / "ip.index") if a == "{ip}" else a for a in args]
    line = one_error(run(*base, *args), code=2)
    assert flag in line, line
    assert not (tmp_path / "o").exists()


def test_serve_device_bogus_is_a_usage_error(moved):
    assert "--device 'bogus': not a device" in one_error(run("serve", "--index", moved / "index", "--device",
                                                             "bogus"), code=2)


def test_engine_ray_without_ray_serve_announces_nothing(moved, files, monkeypatch, tmp_path):
    pytest.importorskip("fastapi")
    from rag_retriever import IndexConfig, build_index

    ix = tmp_path / "bm25"
    build_index(IndexConfig(corpus=str(files["corpus"]), out=str(ix)))
    monkeypatch.setitem(sys.modules, "ray.serve", None)  # `import ray.serve` raises ImportError
    r = run("serve", "--index", ix, "--engine", "ray", "--port", busy_port())
    line = one_error(r)
    assert "--engine ray needs Ray Serve" in line and "serving" not in r.output, r.output


# -- bad input: a Ray cluster that cannot be reached ---------------------------------------------
def test_an_unreachable_ray_cluster_is_one_line_in_seconds(files, tmp_path):
    """No cluster at the address: refused before anything is encoded or written (ray.init alone would wait without
    end), and the engine options are usage errors where they do not apply."""
    import time

    ray = pytest.importorskip("ray", reason="the `ray` extra is needed for --engine ray")
    if ray.is_initialized():  # pragma: no cover - a cluster of another test in this process
        pytest.skip("a Ray cluster is running in this process")
    base = ["index", "--kind", "dense", "--encoder", files["enc"], "--corpus", files["corpus"], "--out",
            tmp_path / "o", "--device", "cpu", "--no-progress"]
    t = time.perf_counter()
    line = one_error(run(*base, "--engine", "ray", "--ray-address", "127.0.0.1:9"))
    assert "could not connect to the Ray cluster at 127.0.0.1:9: connection refused" in line, line
    assert time.perf_counter() - t < 60 and not list(tmp_path.iterdir()) and not ray.is_initialized()
    for more, says in ((["--num-workers", "2"], "--num-workers only apply to --engine ray"),
                       (["--engine", "ray", "--import-faiss", files["root"] / "ip.index"],
                        "--import-faiss encodes nothing")):
        assert says in one_error(run(*base, *more), code=2)
    assert "--engine is for --kind dense or hybrid, not bm25" in one_error(run("index", "--corpus", files["corpus"], "--out",
                                                              tmp_path / "o", "--engine", "ray"), code=2)
    assert not list(tmp_path.iterdir())


def test_a_ray_workers_own_error_is_its_one_line():
    """Ray Data hands back a worker's error as a UserCodeException whose text holds the worker's traceback (its
    cause is not kept): the toolkit's error in it is what the driver says (seen with an encoder of NaN weights:
    `a Ray worker stopped the encoding: the encoder made a vector that is not finite ... for passage 0`)."""
    from rag_retriever._encoder import EncoderError
    from rag_retriever._ray_encode import EncodingError, _unwrap

    text = ("ray::MapWorker(MapBatches(_ShardEncoder)).submit()\n  File \"_ray_encode.py\", line 90, in __call__\n"
            "rag_retriever._encoder.EncoderError: the encoder made a vector that is not finite (NaN or "
            "infinity) for passage 7\n\nThe above exception was the direct cause of the following exception:\n"
            "ray.exceptions.UserCodeException: UDF failed to process a data block.")
    got = _unwrap(RuntimeError(text))
    assert isinstance(got, EncodingError) and str(got) == ("a Ray worker stopped the encoding: the encoder made a "
                                                           "vector that is not finite (NaN or infinity) for passage 7")
    own = EncoderError("x")
    wrapped = RuntimeError("task failed")
    wrapped.cause = own  # a RayTaskError keeps its cause here
    assert _unwrap(wrapped) is own
    other = _unwrap(RuntimeError("ObjectLostError: object abc lost\nmore"))
    assert str(other) == "the encoding failed on a Ray worker: RuntimeError: ObjectLostError: object abc lost"
