"""An index from a stranger is input: out-of-range values planted in its files *with every record made to match*
(each file's size and SHA-256, a dense index's recorded export digests, the content fingerprint recomputed from
them, the manifest sealed again: ``index_edits.resealed``), so that only reading the values can find them.

* The four values that crashed the compiled BM25 search (``block_bits.npy`` 255, ``block_last.npy`` 4,000,000,000,
  ``words.npy`` 4,294,967,295, ``term_last_n.npy`` 255) are one line naming the file, the value and its position,
  from ``load_index`` and ``curriculum validate`` and ``curriculum serve``, each run in a child process: never a
  signal.
* A fuzz over every file of a small BM25 (both presets), dense (flat, IVF, HNSW and the compressed SQ8, IVF-PQ,
  OPQ+IVF-PQ, IVF-RaBitQ) and hybrid index: each planted value (every integer array's largest value and one just
  past the bound the search reads within; NaN and infinities in float arrays; 0xFF bytes in the binary files; in a
  FAISS file, values where FAISS wrote its graph, inverted lists, quantizers' codebooks, ranges, sizes and
  rotation, ``support.faiss_edits``; a FAISS file or float16 copy cut short) is refused, in one line naming the
  file, by ``load_index`` or its first search, or answers exactly as the pristine index; where it changes an answer within the values a file may
  hold, ``load_index(verify=True)`` refuses it. The reader runs in a child process whose exit status is checked.
* A BM25 posting whose frequency scores above its block's recorded maximum (the block encoded again to hold it):
  the pruned search skips it where the exhaustive sum ranks it, and ``verify`` refuses the block.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import MUSIQUE_TRAIN
from rag_retriever import IndexConfig, build_index
from support.cli_runs import one_error, run
from support.index_edits import resealed
from support.servers import busy_port

pytest.importorskip("bm25s")
N_QUESTIONS = 30
QUERIES = ["Who founded the company?", "the river of the city", "which album was released in 1999?", "Hamlet"]
TESTS = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def small_input(tmp_path_factory):
    path = tmp_path_factory.mktemp("crafted-in") / "musique_train.jsonl"
    path.write_text("".join(MUSIQUE_TRAIN.read_text().splitlines(keepends=True)[:N_QUESTIONS]))
    return path


@pytest.fixture(scope="module")
def bm25(tmp_path_factory, small_input):
    out = tmp_path_factory.mktemp("crafted") / "bm25"
    build_index(IndexConfig(dataset="musique", input=str(small_input), out=str(out), depth=10))
    return out


def child(script: str, *args: str, timeout: int = 1500) -> subprocess.CompletedProcess:
    """``script`` run by a new Python (the tests' helpers importable): a crash there is its exit status here."""
    env_path = f"{TESTS}"
    code = f"import sys; sys.path.insert(0, {env_path!r})\n" + textwrap.dedent(script)
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout)


def plant(d: Path, name: str, at: int, value) -> None:
    """``value`` at flat position ``at`` of the array ``d/name``, its records made to match."""
    a = np.load(d / name)
    flat = a.reshape(-1).copy()
    flat[at] = value
    np.save(d / name, flat.reshape(a.shape))
    resealed(d)


# -- the four values that crashed the search -------------------------------------------------------------------------
def _gap_word(d: Path) -> int:
    """The index in ``words.npy`` of a word inside the gaps of the longest list's first block (every one of its
    bits a gap's: 4,294,967,295 there makes the block's passages run past its recorded last one)."""
    from rag_retriever._postings import BLOCK, block_offsets

    first = np.load(d / "bm25/term_first.npy").astype(np.int64)
    last_n = np.load(d / "bm25/term_last_n.npy")
    bits = np.load(d / "bm25/block_bits.npy")
    blocks = np.diff(first)
    t = int(np.argmax(blocks * BLOCK + 0))
    b = int(first[t])
    off = block_offsets(first, last_n, bits)
    start, gap_bytes = int(off[b]), (BLOCK * int(bits[b, 0])) // 8
    w = start // 4 + 1
    assert (w + 1) * 4 <= start + gap_bytes, (start, gap_bytes)
    return w


def _longest_word(d: Path) -> str:
    from rag_retriever._bm25 import Vocabulary

    first = np.load(d / "bm25/term_first.npy").astype(np.int64)
    return Vocabulary(d / "bm25/vocab")[int(np.argmax(np.diff(first)))].decode()


READ = """
    import json, sys
    from rag_retriever.errors import RetrieverError as CurriculumError
    from rag_retriever import load_index
    try:
        ix = load_index(sys.argv[1])
        ids, _ = ix.retrieve_many(json.loads(sys.argv[2]), 5)
        print(json.dumps(ids.tolist()))
    except CurriculumError as e:
        print("refused:", e)
        print("hint:", e.hint)
        sys.exit(1)
"""

CRASHED = [("bm25/block_bits.npy", "255 at position", 255), ("bm25/block_last.npy", "4,000,000,000 at position",
                                                               4_000_000_000),
           ("bm25/words.npy", "decodes to passages ending at", 4_294_967_295),
           ("bm25/term_last_n.npy", "255 at position", 255)]


@pytest.mark.slow
@pytest.mark.parametrize("name,said,value", CRASHED, ids=[c[0].split("/")[1] for c in CRASHED])
def test_values_that_crashed_the_search_are_one_line_naming_file_value_and_position(bm25, tmp_path, name, said,
                                                                                      value):
    d = tmp_path / "d"
    shutil.copytree(bm25, d)
    a = np.load(d / name)
    at = {"bm25/words.npy": _gap_word(d), "bm25/block_bits.npy": 1}.get(name, a.size // 2)
    plant(d, name, at, value)
    queries = [*QUERIES, _longest_word(d)]
    r = child(READ, str(d), json.dumps(queries))
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr[-2000:])  # not -11 (SIGSEGV) nor 139
    line = r.stdout.splitlines()[0]
    assert line.startswith(f"refused: {d}: {name}: ") and said in line, line
    assert "crafted or damaged" in line and "build the index again" in r.stdout, r.stdout
    # curriculum validate (in a child too: it crashed on block_bits.npy)
    v = child("""
        import sys
        from rag_curriculum.cli import app
        sys.argv = ["curriculum", "validate", sys.argv[1]]
        app()
    """, str(d))
    assert v.returncode == 1 and f"{name}: " in v.stdout + v.stderr, (v.returncode, v.stdout, v.stderr[-2000:])


def test_a_crafted_postings_file_is_one_line_from_serve(bm25, tmp_path):
    d = tmp_path / "d"
    shutil.copytree(bm25, d)
    plant(d, "bm25/block_last.npy", 3, 4_000_000_000)
    line = one_error(run("serve", "--index", d, "--port", busy_port()))
    assert line.startswith(f"error: {d}: bm25/block_last.npy: 4,000,000,000 at position 3; the index holds "), line


# -- the fuzz ------------------------------------------------------------------------------------------------------
FUZZ = """
    import json, shutil, sys
    from pathlib import Path
    import numpy as np
    from support.index_edits import resealed
    from support.faiss_edits import planted_values, pq_files
    from rag_retriever.errors import RetrieverError as CurriculumError
    from rag_retriever import load_index
    from rag_curriculum._plumbing import file_sha256

    src, work, queries = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
    gap_word = int(sys.argv[4])

    def answers(ix):
        ids, scores = ix.retrieve_many(queries, 10)
        live = ids[ids >= 0]
        stored = [ix.stored(q, t) for q, t in zip(ix._q_ids, ix._q()[0])]
        return {"ids": ids.tolist(), "scores": scores.tolist(), "docs": ix.documents(live),
                "stored": [[s.ids.tolist(), s.scores.tolist()] for s in stored],
                "keys": np.asarray(ix.keys).tolist()}  # (the fingerprint covers the files: a planted one is another)

    def reseal(name):
        def edit(m):  # a dense index's export digests, recorded beside its files' records
            onnx = (m.get("dense") or {}).get("onnx")
            if isinstance(onnx, dict):
                folder = f"dense/{onnx.get('folder', 'onnx')}/"
                for key, sha in (("model", "sha256"), ("tokenizer", "tokenizer_sha256")):
                    if name == folder + str(onnx.get(key)):
                        onnx[sha] = file_sha256(work / name)
        resealed(work, edit)

    def cases(name, data):
        a = np.load(work / name) if name.endswith(".npy") else None
        if a is not None and a.size:
            n = a.size
            spots = sorted({0, n // 2, n - 1})
            if a.dtype.kind in "iu":
                info = np.iinfo(a.dtype)
                values = [int(info.max)] + ([int(info.min)] if a.dtype.kind == "i" else [])
                over = {"bm25/block_bits.npy": 33, "bm25/term_last_n.npy": 129, "bm25/term_first.npy": None}
                if name in over and over[name] is not None:
                    values.append(over[name])
                for v in values:
                    for at in spots:
                        yield f"{v} at {at}", ("npy", at, v)
                if name == "bm25/words.npy":
                    yield f"4294967295 in a block's gaps (word {gap_word})", ("npy", gap_word, 4294967295)
                if name in ("bm25/block_last.npy", "bm25/doc_tie.npy"):
                    nd = int(json.loads((work / "manifest.json").read_text())["passages"])
                    yield f"{nd} (the passages' count) at {n // 2}", ("npy", n // 2, nd)
                if name == "bm25/term_first.npy":
                    yield f"term_first raised at {n // 2}", ("npy", n // 2, int(a.reshape(-1)[n // 2]) + 1)
            else:
                for v in (float("nan"), float("inf"), float("-inf")):
                    for at in spots:
                        yield f"{v} at {at}", ("npy", at, v)
        else:
            for at in sorted({0, len(data) // 2, max(0, len(data) - 4)}):
                yield f"0xFF bytes at {at}", ("bytes", at, None)
            if name == "dense/faiss.index":  # the values FAISS's search reads: a graph's, an inverted file's
                for label, at, b in planted_values(work / name):
                    yield label, ("at", at, b)
                for label, whole in pq_files(work / name):  # a PQ's codebook, sizes, rotation (some cut short)
                    yield label, ("file", None, whole)
            if name in ("dense/faiss.index", "dense/vectors.f16"):  # the file cut short, the records made to match
                yield f"cut to {len(data) // 2} bytes", ("file", None, data[:len(data) // 2])
            if name == "dense/vectors.f16":  # the rows re-ranked: each query's best passages
                d = int(json.loads((work / "manifest.json").read_text())["dense"]["dim"])
                for row in sorted({int(r[0]) for r in want["ids"] if r[0] >= 0})[:3]:
                    for v in (float("nan"), float("inf"), -65504.0):
                        yield f"row {row} = {v}", ("at", 2 * d * row, np.full(d, v, "<f2").tobytes())

    def apply(p, data, how):
        kind, at, v = how
        if kind == "npy":
            a = np.load(p)
            flat = a.reshape(-1).copy()
            flat[at] = v
            np.save(p, flat.reshape(a.shape))
        elif kind == "file":
            p.write_bytes(v)
        elif kind == "at":
            bad = bytearray(data)
            bad[at:at + len(v)] = v
            p.write_bytes(bytes(bad))
        else:
            bad = bytearray(data)
            bad[at:at + 4] = b"\\xff" * len(bad[at:at + 4])
            p.write_bytes(bytes(bad))

    shutil.copytree(src, work)
    manifest = (work / "manifest.json").read_bytes()
    want = answers(load_index(work, device="cpu"))
    for p in sorted(q for q in work.rglob("*") if q.is_file()):
        name = p.relative_to(work).as_posix()
        if name == "manifest.json":
            continue
        data = p.read_bytes()
        for label, how in list(cases(name, data)):
            apply(p, data, how)
            reseal(name)
            print(json.dumps({"start": name, "case": label}), flush=True)  # a crash names the case
            out = {"file": name, "case": label}
            try:
                ix = load_index(work, device="cpu")
                got = answers(ix)
                out["same"] = got == want
                del ix
            except CurriculumError as e:
                out.update(refused=str(e), hint=e.hint)
            except Exception as e:
                out["error"] = f"{type(e).__name__}: {e}"
            if out.get("same") is False:  # a value within what the file may hold: verify must refuse it
                try:
                    load_index(work, device="cpu", verify=True)
                    out["verify"] = None
                except CurriculumError as e:
                    out["verify"] = str(e)
                except Exception as e:
                    out["error"] = f"verify: {type(e).__name__}: {e}"
            print(json.dumps(out), flush=True)
            p.write_bytes(data)
            (work / "manifest.json").write_bytes(manifest)
    print(json.dumps({"done": True}), flush=True)
"""


def fuzz(index: Path, queries: list[str], gap_word: int) -> list[dict]:
    r = child(FUZZ, str(index), str(index.parent / "work"), json.dumps(queries), str(gap_word))
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
    started = [x for x in lines if "start" in x]
    assert r.returncode == 0 and lines and lines[-1] == {"done": True}, (
        f"the reader died (exit {r.returncode}) on {started[-1] if started else None}: {r.stderr[-3000:]}")
    return [x for x in lines if "file" in x]


def check_fuzz(cases: list[dict], index: Path) -> None:
    files = {p.relative_to(index).as_posix() for p in index.rglob("*") if p.is_file()} - {"manifest.json"}
    assert {c["file"] for c in cases} == files
    for c in cases:
        assert "error" not in c, c  # neither refused in one line nor the same answers
        if "refused" in c:
            assert "\n" not in c["refused"] and c["hint"], c
            assert f"{c['file']}" in c["refused"] or Path(c["file"]).name in c["refused"], c
        elif not c["same"]:
            assert c["verify"], c  # a changed answer that verify=True let through
    assert sum("refused" in c for c in cases) >= len(cases) // 3, cases


@pytest.mark.slow
def test_planted_values_in_every_file_of_a_bm25_index(bm25, tmp_path):
    index = tmp_path / "index"
    shutil.copytree(bm25, index)
    check_fuzz(fuzz(index, [*QUERIES, _longest_word(index)], _gap_word(index)), index)


@pytest.mark.slow
def test_planted_values_in_every_file_of_a_lucene_index(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    rows = [json.loads(x) for x in MUSIQUE_TRAIN.read_text().splitlines()[:N_QUESTIONS]]
    paras = [p for r in rows for p in r["paragraphs"]]
    corpus.write_text("".join(json.dumps({"id": f"doc{i}", "contents": f"{p['title']}\n{p['paragraph_text']}"}) + "\n"
                              for i, p in enumerate(paras)))
    index = tmp_path / "index"
    build_index(IndexConfig(corpus=str(corpus), out=str(index), bm25="lucene"))
    check_fuzz(fuzz(index, [*QUERIES, _longest_word(index)], _gap_word(index)), index)


@pytest.fixture(scope="module")
def encoder_root(tmp_path_factory, shared_data):
    """A folder holding ``enc``, a tiny encoder the dense indexes below are built with."""
    pytest.importorskip("faiss", reason="the dense extra is needed")
    pytest.importorskip("sentence_transformers", reason="the dense extra is needed")
    from support.tiny_model import build_tiny_encoder

    root = tmp_path_factory.mktemp("crafted-dense")
    build_tiny_encoder(root / "enc", shared_data)
    return root


@pytest.fixture(scope="module")
def dense_root(encoder_root, small_input):
    root, enc = encoder_root, encoder_root / "enc"
    for kind in ("dense", "hybrid"):
        build_index(IndexConfig(dataset="musique", input=str(small_input), out=str(root / kind), kind=kind,
                                encoder=str(enc), device="cpu", depth=10))
    return root


@pytest.mark.slow
def test_planted_values_in_every_file_of_a_dense_index(dense_root, tmp_path):
    root = tmp_path / "root"
    shutil.copytree(dense_root / "enc", root / "enc")
    shutil.copytree(dense_root / "dense", root / "index")
    check_fuzz(fuzz(root / "index", QUERIES, 0), root / "index")


@pytest.mark.slow
def test_planted_values_in_every_file_of_a_hybrid_index(dense_root, tmp_path):
    root = tmp_path / "root"
    shutil.copytree(dense_root / "enc", root / "enc")
    shutil.copytree(dense_root / "hybrid", root / "index")
    check_fuzz(fuzz(root / "index", [*QUERIES, _longest_word(root / "index")], _gap_word(root / "index")),
               root / "index")


# an IVF index (its centroids, lists and ids), an HNSW graph, and the compressed kinds: SQ8, a flat PQ, IVF-PQ,
# IVF-PQ under an OPQ rotation, IVF-RaBitQ (each with its float16 copy, read to re-rank): FAISS's search reads them
# as the file says
ANN = {"ivf": "IVF8,Flat", "hnsw": "HNSW16", "sq8": "SQ8", "pq": "PQ8", "ivfpq": "IVF8,PQ8", "opq": "OPQ8,IVF8,PQ8",
       "rabitq": "IVF8,RaBitQ"}
#: the values planted in each kind's ``faiss.index`` beyond its bytes (0xFF) and its halving, at least
PLANTED = {"ivf": 35, "hnsw": 35, "sq8": 17, "pq": 18, "ivfpq": 90, "opq": 100, "rabitq": 90}


@pytest.mark.parametrize("factory", ["PQ8x4", "OPQ8,PQ8x4", "PQ8x4,RFlat", "HNSW16_PQ8x4"])
def test_a_flat_pq_codebook_that_is_not_finite_is_refused_at_open(tmp_path, factory):
    """A PQ without an inverted file (alone, rotated, under a refine, an HNSW graph's storage): FAISS's reader
    checks its header against its codes, and its codebook, which every code is decoded by, is checked here, as an
    IVF-PQ's is: NaN or infinity in it is refused, naming where."""
    faiss = pytest.importorskip("faiss")
    from rag_retriever._dense import DenseError, _layers, check_structure

    x = np.random.default_rng(0).standard_normal((300, 32)).astype(np.float32)
    index = faiss.index_factory(32, factory, faiss.METRIC_INNER_PRODUCT)
    index.train(x)
    index.add(x)
    check_structure(index, "fine")  # as built: passes
    path = tmp_path / "faiss.index"
    faiss.write_index(index, str(path))
    pq = next(layer.pq for layer in _layers(faiss, index) if hasattr(layer, "pq"))
    codebook = faiss.vector_to_array(pq.centroids)
    data = path.read_bytes()
    at = data.index(codebook.tobytes()) + 4 * (3 * pq.dsub * pq.ksub + 5 * pq.dsub)  # sub-quantizer 3, centroid 5
    for value in (np.nan, np.inf):
        path.write_bytes(data[:at] + np.float32(value).tobytes() + data[at + 4:])
        with pytest.raises(DenseError, match=r"crafted: its product quantizer's codebook \(centroid 5 of "
                                             r"sub-quantizer 3\) is not finite"):
            check_structure(faiss.read_index(str(path)), "crafted")


@pytest.mark.parametrize("factory", ["SQ8", "SQ8,RFlat", "OPQ8,SQ8,RFlat"])
def test_a_scalar_quantizers_range_that_is_not_finite_is_refused_under_a_refine_too(tmp_path, factory):
    """An SQ index's trained ranges decode every code, also when a refine (``RFlat``) or a rotation wraps it: NaN
    planted in the written file is refused at open."""
    faiss = pytest.importorskip("faiss")
    from rag_retriever._dense import DenseError, _layers, check_structure

    x = np.random.default_rng(0).standard_normal((300, 32)).astype(np.float32)  # (OPQ8's training needs 256)
    index = faiss.index_factory(32, factory, faiss.METRIC_INNER_PRODUCT)
    index.train(x)
    index.add(x)
    check_structure(index, "fine")
    path = tmp_path / "faiss.index"
    faiss.write_index(index, str(path))
    trained = faiss.vector_to_array(next(layer.sq for layer in _layers(faiss, index) if hasattr(layer, "sq")).trained)
    data = path.read_bytes()
    at = data.index(trained.tobytes()) + 4 * 7  # vmin of dimension 7
    path.write_bytes(data[:at] + np.float32(np.nan).tobytes() + data[at + 4:])
    with pytest.raises(DenseError, match=r"crafted: its scalar quantizer's trained range \(vmin 7\) is not finite"):
        check_structure(faiss.read_index(str(path)), "crafted")


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ANN))
def test_planted_values_in_every_file_of_an_ann_or_compressed_index(encoder_root, small_input, tmp_path, name):
    """The fuzz above over every file of an index of each FAISS kind. In ``faiss.index``: a graph's or an inverted
    file's own values (``planted_values``); a scalar quantizer's type, sizes and trained ranges; a RaBitQ
    quantizer's sizes, metric, query bits and codes' factors; a flat PQ's or an IVF-PQ's codebook and sizes (and an
    IVF-PQ's trained flags), and an OPQ rotation's values, shape and length (``pq_files``: each refused at open,
    by FAISS's reader or by ``check_structure``); the file cut to half. In a compressed kind's ``vectors.f16``: the rows the queries rank
    first made NaN, infinite (refused by the re-rank that reads them) or -65504 (a value a float16 may hold: found
    by ``verify``), and the file cut to half (refused at open)."""
    root = tmp_path / "root"
    shutil.copytree(encoder_root / "enc", root / "enc")
    index = root / "index"
    build_index(IndexConfig(dataset="musique", input=str(small_input), out=str(index), kind="dense",
                            encoder=str(root / "enc"), device="cpu", depth=10, faiss=ANN[name],
                            **({"nprobe": 4} if "IVF" in ANN[name] else {})))
    assert json.loads((index / "manifest.json").read_text())["dense"]["faiss"] == ANN[name]
    cases = fuzz(index, QUERIES, 0)
    check_fuzz(cases, index)
    faiss_cases = {c["case"]: c for c in cases if c["file"] == "dense/faiss.index"}
    planted = [k for k in faiss_cases if not k.startswith(("0xFF", "cut to"))]
    assert len(planted) >= PLANTED[name], planted
    assert "refused" in next(c for k, c in faiss_cases.items() if k.startswith("cut to")), faiss_cases
    ours = {k: c["refused"] for k, c in faiss_cases.items() if "crafted or damaged" in c.get("hint", "")}
    if name in ("pq", "ivfpq", "opq"):  # every edit of the PQ changes what a search reads: each refused
        from support.faiss_edits import pq_files

        labels = [label for label, _ in pq_files(index / "dense/faiss.index")]
        assert len(labels) >= {"pq": 17, "ivfpq": 22, "opq": 34}[name], labels
        work = f"{index.parent / 'work'}: dense/faiss.index: "  # (the fuzz's copy)
        assert all(faiss_cases[k].get("refused", "").startswith(work) for k in labels), [faiss_cases[k] for k in labels]
        assert "is not finite" in ours["pq centroids[0] = nan"] and "codebook" in ours["pq centroids[0] = nan"]
    if name in ("ivfpq", "opq"):
        assert "code" in ours["pq M 16"] and "M 16" in ours["pq M 16"], ours
        assert "not trained" in ours["ivf is_trained 0"], ours
    if name == "opq":
        assert "transform 0 of its chain" in ours["opq A[0] = nan"] and "not finite" in ours["opq A[0] = nan"], ours
        assert "not trained" in ours["opq is_trained 0"], ours
        assert "1,024" in ours["opq A cut to 512 values"] or "512" in ours["opq A cut to 512 values"], ours
    if name == "sq8":  # ranges NaN or infinite decode every code to NaN: refused at open, not ranked
        for k in ("sq trained[0] = nan", "sq trained[63] = inf"):
            assert "scalar quantizer's trained range" in ours[k] and "not finite" in ours[k], ours
    if name == "rabitq":  # an L2 quantizer under an inner-product index: other distances, refused at open
        assert "RaBitQ quantizer's metric is l2" in ours["rabitq metric 1"], ours
    if name not in ("ivf", "hnsw"):  # the float16 copy the compressed kinds re-rank from
        rows = {c["case"]: c for c in cases if c["file"] == "dense/vectors.f16"}
        nan = [c for k, c in rows.items() if k.startswith("row ") and k.endswith(("nan", "inf"))]
        assert nan and all("is not finite" in c["refused"] and "float16 vector of passage" in c["refused"]
                           for c in nan), rows
        cut = next(c for k, c in rows.items() if k.startswith("cut to"))
        assert "float16 values" in cut["refused"] and "bytes" in cut["refused"], cut
    if name == "ivf":  # a vector made NaN in a list changes no answer above, but it is found by verify
        from support.faiss_edits import planted_values

        label, at, value = next(x for x in planted_values(index / "dense/faiss.index") if "vectors" in x[0])
        data = bytearray((index / "dense/faiss.index").read_bytes())
        data[at:at + len(value)] = value
        (index / "dense/faiss.index").write_bytes(bytes(data))
        resealed(index)
        r = child("""
            import sys
            from rag_retriever import load_index
            from rag_retriever.errors import RetrieverError
            load_index(sys.argv[1], device="cpu")
            try:
                load_index(sys.argv[1], device="cpu", verify=True)
            except RetrieverError as e:
                print("refused:", e)
        """, str(index))
        assert r.returncode == 0 and r.stdout.startswith(f"refused: {index}: dense/faiss.index: the vector of "
                                                         "passage "), (label, r.stdout, r.stderr[-2000:])
        assert "(inverted list 0, position 0) is not finite" in r.stdout, r.stdout


# -- a frequency above its block's recorded maximum -----------------------------------------------------------------
def recoded_with_higher_frequencies(d: Path, terms: list[int], tf: int) -> list[tuple[int, int]]:
    """Each of ``terms``' middle posting given frequency ``tf``, every block encoded again as a build encodes it
    (its widths, hence the words' offsets and ``words.npy``' length, follow), ``block_max.npy`` left as it was,
    the records made to match: a file every check at open passes. The (term, passage) pairs raised."""
    from rag_retriever._postings import BLOCK, PostingsIndex, encode, numpy_postings

    params = json.loads((d / "bm25/params.json").read_text())
    ix = PostingsIndex(d / "bm25", params, compiled=False)
    docs, tfs = zip(*(numpy_postings(ix, t) for t in range(len(ix.term_first) - 1)), strict=True)
    tfs, raised = [x.copy() for x in tfs], []
    for t in terms:
        tfs[t][len(tfs[t]) // 2] = tf
        raised.append((t, int(docs[t][len(docs[t]) // 2])))
    starts = np.concatenate([[0], np.cumsum([len(x) for x in docs])]).astype(np.int64)
    flat_docs, flat_tfs = np.concatenate(docs).astype(np.int64), np.concatenate(tfs).astype(np.int64)
    first, nb = np.asarray(ix.term_first, dtype=np.int64), len(ix.block_last)
    last, off, bits = np.zeros(nb, np.uint32), np.zeros(nb + 1, np.int64), np.zeros((nb, 2), np.uint8)
    scratch = np.zeros((2, BLOCK), np.int64)
    encode(flat_docs, flat_tfs, starts, first, last, off, bits, np.zeros(0, np.uint32), scratch)  # the sizes
    words = np.zeros((int(off[-1]) + 3) // 4 + 2, np.uint32)
    encode(flat_docs, flat_tfs, starts, first, last, off, bits, words, scratch)
    assert np.array_equal(last, ix.block_last)
    np.save(d / "bm25/words.npy", words)
    np.save(d / "bm25/block_bits.npy", bits)
    resealed(d)
    return raised


def test_a_frequency_above_its_blocks_maximum_misranks_until_verify_refuses_it(bm25, tmp_path):
    """Block-max pruning trusts ``block_max.npy``: a posting that scores above its block's recorded maximum
    (its frequency raised, the block's frequency width made to hold it) is skipped where the bound says it cannot
    reach the ``k`` best. Nothing at open can see it short of decoding every posting, which is what
    ``load_index(verify=True)``, ``serve --verify`` and ``curriculum validate`` do (``verify_postings``): they
    refuse it in one line naming ``block_max.npy`` and the block."""
    import random

    from rag_retriever import load_index
    from rag_retriever._bm25 import Vocabulary

    d = tmp_path / "d"
    shutil.copytree(bm25, d)
    first = np.load(d / "bm25/term_first.npy").astype(np.int64)
    df = np.array([int(x) for x in load_index(d).searcher.postings.df(np.arange(len(first) - 1))])
    terms = [int(t) for t in np.flatnonzero((df >= 5) & (df <= 200))[:60]]
    raised = recoded_with_higher_frequencies(d, terms, 200)
    ix = load_index(d)  # every array within its bounds: the check at open passes
    s = ix.searcher
    vocab = Vocabulary(d / "bm25/vocab")
    words = [vocab[t].decode() for t in terms]
    rng = random.Random(0)
    queries = [f"{rng.choice(words)} {' '.join(rng.choice(words) for _ in range(rng.randint(1, 3)))}"
               for _ in range(300)]
    parsed = [s.query_terms(q) for q in queries]
    pruned, every = s.postings.search(parsed, 3), s.postings.search(parsed, 3, prune=False)
    missed = [i for i in range(len(queries)) if not np.array_equal(pruned[0][i], every[0][i])]
    assert missed, "the pruned search found every raised posting: nothing here needed the check"
    lifted = {p for _, p in raised}
    assert all(set(every[0][i].tolist()) - set(pruned[0][i].tolist()) <= lifted for i in missed)
    assert any(set(every[0][i].tolist()) & lifted for i in missed)
    # verify decodes every posting and refuses the block
    r = child("""
        import sys
        from rag_retriever import load_index
        from rag_retriever.errors import RetrieverError
        try:
            load_index(sys.argv[1], verify=True)
        except RetrieverError as e:
            print("refused:", e)
            print("hint:", e.hint)
    """, str(d))
    line = r.stdout.splitlines()[0] if r.stdout else ""
    assert r.returncode == 0 and line.startswith(f"refused: {d}: bm25/block_max.npy: "), (r.stdout, r.stderr[-2000:])
    assert "below the" in line and "its block's postings score" in line, line
    block = int(re.search(r" at position ([\d,]+), below", line)[1].replace(",", ""))
    assert any(first[t] <= block < first[t + 1] for t in terms), (block, line)  # a block of a raised term
    v = one_error(run("validate", d))
    assert f"{d}: bm25/block_max.npy: " in v and "below the" in v, v


def test_a_faiss_older_than_the_checked_one_is_warned_of_once(caplog):
    """The fuzz above holds from FAISS 1.15 on (1.13.2's reader died on six kinds' files, 1.11.0's HNSW search hung):
    an older FAISS (faiss-gpu, which the extras' pin does not reach) is named in one warning, a newer one in none."""
    from rag_retriever._dense import FAISS_CHECKED, _warn_if_older

    assert FAISS_CHECKED == (1, 15)
    with caplog.at_level("WARNING", logger="rag_retriever._dense"):
        _warn_if_older("1.13.2")
        _warn_if_older("1.13.2")
        _warn_if_older("1.15.1")
        _warn_if_older("2.0.0")
        _warn_if_older("unknown")
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and said[0].startswith("FAISS 1.13.2: ") and "'faiss-cpu>=1.15'" in said[0]
