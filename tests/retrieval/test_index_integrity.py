"""An index proves its own contents, on small real indexes of the MuSiQue train sample:

* (1) every file an index writes is in its manifest with its size and SHA-256, made as the file was written (the
  passage store, the hashes, the questions, the stored rankings and a dense index's files are never read again by
  the build); every open checks them (small files and the BM25 postings hashed whole, large files sampled, the
  fingerprint recomputed from the records; ``serve --verify`` and ``validate`` hash every file, ``validate`` also
  recomputes the passages' digest and ranks a sample of the stored rankings again; ``validate --quick`` checks
  sizes and says so). A forged fingerprint, an emptied ``files`` list, an edited manifest and stored rankings that
  the index does not make are refused, each in one line naming the file.
* (2) the encoder a dense server runs is the one the index was built with: the ONNX export's files hashed at
  serve start; ``--encoder OTHER`` refused unless its files are the index's encoder's, or ``--allow-other-encoder``
  (then the server announces another fingerprint); the recorded encoder folder changed in place is refused.
* (3) bytes flipped in every file of a small BM25 index and a small dense index, one at a time, in a child process
  (a crash there would be seen, not fatal): each damaged index is refused at open in one line naming the file, or
  answers exactly as the pristine one (retrievals, documents, stored rankings, normalised texts, hashes); never a
  crash or a silent change. A damaged ``bm25/block_bits.npy`` (a segfault on the first query before) is one line
  from ``curriculum serve``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import MUSIQUE_TRAIN
from rag_retriever import IndexConfig, RetrievalIndexError, _integrity, build_index, load_index
from rag_retriever._integrity import record, sample_sha256, seal
from support.cli_runs import one_error, run
from support.servers import busy_port

pytest.importorskip("bm25s")
N_QUESTIONS = 30  # of the MuSiQue sample: ~570 distinct paragraphs
QUERIES = ["Who founded the company?", "the river of the city", "which album was released in 1999?", "Hamlet"]


@pytest.fixture(scope="module")
def small_input(tmp_path_factory):
    path = tmp_path_factory.mktemp("integrity-in") / "musique_train.jsonl"
    path.write_text("".join(MUSIQUE_TRAIN.read_text().splitlines(keepends=True)[:N_QUESTIONS]))
    return path


@pytest.fixture(scope="module")
def bm25(tmp_path_factory, small_input):
    out = tmp_path_factory.mktemp("integrity") / "bm25"
    build_index(IndexConfig(dataset="musique", input=str(small_input), out=str(out), depth=20))
    return out


@pytest.fixture(scope="module")
def sampled(tmp_path_factory, small_input):
    """An index built (and opened, in the tests that use it) as if its files were large: every file over 4 KiB is
    recorded with a sampled digest of 4 chunks of 256 bytes."""
    mp = pytest.MonkeyPatch()
    mp.setattr(_integrity, "WHOLE", 4096)
    mp.setattr(_integrity, "CHUNK", 256)
    mp.setattr(_integrity, "SAMPLES", 4)
    out = tmp_path_factory.mktemp("integrity-sampled") / "bm25"
    try:
        build_index(IndexConfig(dataset="musique", input=str(small_input), out=str(out), depth=20))
    finally:
        mp.undo()
    return out


def _small_files(monkeypatch):
    monkeypatch.setattr(_integrity, "WHOLE", 4096)
    monkeypatch.setattr(_integrity, "CHUNK", 256)
    monkeypatch.setattr(_integrity, "SAMPLES", 4)


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def flip(path: Path, at: int, xor: int = 0x5A) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= xor
    path.write_bytes(bytes(data))


def manifest(d: Path) -> dict:
    return json.loads((d / "manifest.json").read_text())


def rewrite(d: Path, edit) -> None:
    """Edit the manifest and seal it again (its own digest made anew), as someone who knows the format would."""
    m = manifest(d)
    edit(m)
    (d / "manifest.json").write_text(json.dumps(seal(m), indent=1))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- (1) the records -------------------------------------------------------------------------------------------------
def test_every_file_is_recorded_with_its_sha256_made_as_it_was_written(small_input, tmp_path, monkeypatch):
    from rag_retriever import _index

    _small_files(monkeypatch)
    read_again = []
    for module in (_index, _integrity):
        real = module.file_sha256
        monkeypatch.setattr(module, "file_sha256", lambda p, real=real: read_again.append(Path(p)) or real(p))
    out = tmp_path / "ix"
    m = build_index(IndexConfig(dataset="musique", input=str(small_input), out=str(out), depth=20))
    built_in = [Path(*p.parts[len(tmp_path.parts) + 1:]).as_posix() for p in read_again
                if p.is_relative_to(tmp_path)]  # (the build's folder is beside the output: .ix.partial-...)
    on_disk = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    assert sorted(m["files"]) == [n for n in on_disk if n != "manifest.json"]
    for name, rec in m["files"].items():
        p = out / name
        assert rec["bytes"] == p.stat().st_size and rec["sha256"] == sha256(p), name
        assert ("sample" in rec) == (rec["bytes"] > 4096), name
        if "sample" in rec:
            assert rec["sample"] == sample_sha256(p), name
    # the store's files and the stored rankings were hashed as they were written; only the postings (written by
    # numpy to a path, as the fingerprint always read them) were read again
    assert built_in and all(n.startswith("bm25/") for n in built_in), built_in
    assert m["manifest_sha256"] == manifest(out)["manifest_sha256"] and list(manifest(out))[-1] == "manifest_sha256"
    assert m["content"]["files"] == sorted(n for n in m["files"] if n.startswith("bm25/"))
    assert load_index(out).fingerprint == m["fingerprint"]


def test_large_files_are_sampled_at_open_and_hashed_whole_by_verify_and_validate(sampled, tmp_path, monkeypatch):
    _small_files(monkeypatch)
    files = manifest(sampled)["files"]
    assert "sample" in files["passages.bin"] and "sample" in files["bm25/words.npy"]
    # a byte between the sampled chunks of passages.bin: not seen by an open, seen by a full check
    outside = copy(sampled, tmp_path / "outside")
    size = files["passages.bin"]["bytes"]
    spans = _integrity._spans(size)
    at = next(a + 300 for a, n in spans if all(not (b <= a + 300 < b + m) for b, m in spans))
    flip(outside / "passages.bin", at)
    load_index(outside)  # the documented limit of a sampled check
    with pytest.raises(RetrievalIndexError, match=r"passages.bin: its SHA-256 is not the one manifest.json records"):
        load_index(outside, check="full")
    line = one_error(run("serve", "--index", outside, "--verify", "--port", busy_port()))
    assert f"{outside}: passages.bin: its SHA-256 is not the one manifest.json records" in line, line
    line = one_error(run("validate", outside))
    assert "passages.bin: its SHA-256" in line, line
    # a byte in a sampled chunk: refused at open
    inside = copy(sampled, tmp_path / "inside")
    flip(inside / "passages.bin", spans[1][0] + 5)
    with pytest.raises(RetrievalIndexError, match=r"passages.bin: the SHA-256 of its sampled chunks is not the one"):
        load_index(inside)
    # the BM25 postings are read by compiled code without bounds checks: hashed whole at every open, whatever
    # their size
    words = copy(sampled, tmp_path / "words")
    w = files["bm25/words.npy"]["bytes"]
    wspans = _integrity._spans(w)
    flip(words / "bm25" / "words.npy", next(a + 300 for a, n in wspans if all(not (b <= a + 300 < b + m)
                                                                              for b, m in wspans)))
    with pytest.raises(RetrievalIndexError, match=r"bm25/words.npy: its SHA-256 is not the one manifest.json records"):
        load_index(words)


def test_validate_recomputes_every_digest_and_quick_says_it_checked_sizes_only(bm25, tmp_path):
    r = run("validate", bm25)
    assert r.exit_code == 0, r.output
    assert "every file's SHA-256 matches its manifest" in r.output and "and the fingerprint" in r.output
    assert "recomputed, all 30 stored rankings ranked again" in r.output, r.output
    damaged = copy(bm25, tmp_path / "damaged")
    flip(damaged / "bm25" / "doc_len.npy", manifest(bm25)["files"]["bm25/doc_len.npy"]["bytes"] - 3)
    line = one_error(run("validate", damaged))
    assert line == (f"error: {damaged}: bm25/doc_len.npy: its SHA-256 is not the one manifest.json records: the file "
                    "changed or is damaged"), line
    r = run("validate", damaged, "--quick")
    assert r.exit_code == 0, r.output
    assert "valid (sizes only, --quick)" in r.output and "contents not read" in r.output, r.output
    (damaged / "norms.bin").write_bytes((damaged / "norms.bin").read_bytes()[:-1])
    line = one_error(run("validate", damaged, "--quick"))
    assert "norms.bin: " in line and "bytes, manifest.json records" in line, line


def test_an_edited_manifest_a_forged_fingerprint_and_an_emptied_files_list_are_refused(bm25, tmp_path):
    d = copy(bm25, tmp_path / "d")
    m = manifest(d)
    m["fingerprint"] = "0" * 64
    (d / "manifest.json").write_text(json.dumps(m))  # not sealed again
    with pytest.raises(RetrievalIndexError, match="manifest.json: its own digest .* edited or damaged"):
        load_index(d)
    rewrite(d, lambda m: m.update(fingerprint="0" * 64))  # sealed again: the fingerprint is recomputed
    with pytest.raises(RetrievalIndexError, match="manifest.json: its fingerprint is not the one its records make"):
        load_index(d)
    line = one_error(run("serve", "--index", d, "--port", busy_port()))
    assert "manifest.json: its fingerprint is not the one its records make" in line, line
    shutil.rmtree(d)
    copy(bm25, d)
    rewrite(d, lambda m: m.update(files={}))
    with pytest.raises(RetrievalIndexError, match="manifest.json: its 'files' list is empty or missing"):
        load_index(d)
    line = one_error(run("validate", d, "--quick"))
    assert "its 'files' list is empty or missing" in line, line
    rewrite(d, lambda m: m.update(files={k: v for k, v in manifest(bm25)["files"].items() if k != "bm25/words.npy"}))
    with pytest.raises(RetrievalIndexError, match="'files' leaves out bm25/words.npy, a file its fingerprint covers"):
        load_index(d)
    rewrite(d, lambda m: m.update(files={k: v for k, v in manifest(bm25)["files"].items() if k != "ranked_ids.npy"}))
    with pytest.raises(RetrievalIndexError, match="'files' leaves out ranked_ids.npy, a file every such index holds"):
        load_index(d)


def test_a_damaged_block_of_the_passage_store_is_one_line_naming_the_file(bm25, small_input, tmp_path):
    """Damage an open's sampled check does not see (the records made anew, as for a byte between a large file's
    samples): a block of passages.bin or norms.bin that does not decompress is refused naming the file and the block
    (it was zlib's or zstd's bare message, and a build's hint was "check --input and --out")."""
    from support.index_edits import resealed

    d = copy(bm25, tmp_path / "passages")
    flip(d / "passages.bin", 40)
    resealed(d)
    ix = load_index(d)
    with pytest.raises(RetrievalIndexError, match=r"passages.bin: block 0 of [\d,]+ cannot be read \(.+\): the file "
                       "is damaged"):
        ix.documents([0])
    d = copy(bm25, tmp_path / "norms")
    flip(d / "norms.bin", 30)
    resealed(d)
    r = run("build", "-d", "musique", "-i", small_input, "--distractors", "bm25", "--index", d, "--n", 5, "-o",
            tmp_path / "out")
    line = one_error(r)
    assert line.startswith(f"error: {d / 'norms.bin'}: block 0 of 1 cannot be read (") and line.endswith(
        "the file is damaged"), line
    assert "check --input" not in r.output and f"curriculum validate {d} checks every file" in r.output, r.output


def test_arrays_and_questions_numpy_or_pyarrow_cannot_read_are_one_line_naming_the_file(bm25, tmp_path):
    """With their records forged to match (so only reading them finds it): a .npy header numpy cannot parse was
    tokenize's bare TokenError or numpy's ValueError, postings arrays of shapes that do not fit together a bare
    IndexError, a questions.arrow pyarrow refuses its ArrowInvalid; each is now one line naming the file."""
    import re

    from support.index_edits import resealed

    def damaged(name, edit):
        d = copy(bm25, tmp_path / name.replace("/", "-"))
        (d / name).write_bytes(edit((d / name).read_bytes()))
        resealed(d)
        with pytest.raises(RetrievalIndexError) as e:
            ix = load_index(d)
            ix.retrieve("Who founded the company?", 5)
        return d, str(e.value)

    d, msg = damaged("ranked_scores.npy", lambda b: b.replace(b"'descr': '", b"'descr': (", 1))
    assert msg.startswith(f"{d / 'ranked_scores.npy'}: numpy cannot read it as an array (") and msg.endswith(
        "the file is damaged"), msg
    d, msg = damaged("bm25/term_first.npy", lambda b: re.sub(rb"'shape': \((\d)", lambda m: b"'shape': (" + (
        b"9" if m[1] == b"1" else str(int(m[1]) - 1).encode()), b, count=1))
    assert msg.startswith(f"{d}: bm25/term_last_n.npy: ") and "where term_first.npy (one a term, then the end) makes" in msg or msg.startswith(
        f"{d / 'bm25' / 'term_first.npy'}: numpy cannot read it"), msg
    d, msg = damaged("questions.arrow", lambda b: b[:-6] + b"XXXXXX")
    assert msg.startswith(f"{d / 'questions.arrow'}: pyarrow cannot read it ("), msg


def test_stored_rankings_that_the_index_does_not_make_are_refused(bm25, tmp_path):
    d = copy(bm25, tmp_path / "d")
    ids, scores = np.load(d / "ranked_ids.npy"), np.load(d / "ranked_scores.npy")
    perm = np.roll(np.arange(len(ids)), 1)  # every question given another's ranking: same shapes, same sizes
    np.save(d / "ranked_ids.npy", ids[perm])
    np.save(d / "ranked_scores.npy", scores[perm])
    with pytest.raises(RetrievalIndexError, match="ranked_ids.npy: its SHA-256 is not the one manifest.json records"):
        load_index(d)
    rewrite(d, lambda m: m["files"].update({n: record(d / n) for n in ("ranked_ids.npy", "ranked_scores.npy")}))
    load_index(d)  # the records agree with the files now; what they hold is checked by validate
    line = one_error(run("validate", d))
    qid = load_index(d)._q_ids[0]
    assert f"{d}: ranked_ids.npy: the stored ranking of question {qid!r} (row 0) is not what the index ranks" in line
    assert "the stored rankings do not match the index" in line, line


def test_passages_changed_with_their_records_are_refused_by_validate(bm25, tmp_path):
    from rag_retriever._corpus import Passages
    from rag_retriever._store import StoreWriter

    d = copy(bm25, tmp_path / "d")
    ix = load_index(d)
    rows = ix.rows(range(len(ix)))
    del ix
    block = Passages()
    for i, (t, x, o, pid, pre) in enumerate(rows):
        block.add(t, x + (" (edited)" if i == 7 else ""), o, pid, pre)
    (d / "passages.bin").unlink()
    w = StoreWriter(tmp_path, ("passages",))  # written beside, as a build writes it
    w.add(block)
    w.finish()
    shutil.move(tmp_path / "passages.bin", d / "passages.bin")
    rewrite(d, lambda m: m["files"].update({"passages.bin": record(d / "passages.bin")}))
    assert load_index(d).passage(7)[1].endswith("(edited)")  # the records agree with the files
    line = one_error(run("validate", d))
    assert line == (f"error: {d}: passages.bin: its passages are not the ones the fingerprint was made of (their "
                    "digest differs from the manifest's content.passages)"), line


# -- (2) the encoder a dense server runs -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dense(tmp_path_factory, small_input, shared_data):
    pytest.importorskip("faiss", reason="the dense extra is needed")
    pytest.importorskip("sentence_transformers", reason="the dense extra is needed")
    from support.tiny_model import build_tiny_encoder

    root = tmp_path_factory.mktemp("integrity-dense")
    enc = build_tiny_encoder(root / "enc", shared_data)
    other = build_tiny_encoder(root / "other", shared_data, seed=1)  # the same dimension, other weights
    m = build_index(IndexConfig(dataset="musique", input=str(small_input), out=str(root / "index"), kind="dense",
                                encoder=str(enc), device="cpu", depth=10))
    assert m["dense"]["runtime"] == "onnxruntime" and m["dense"]["encoder"] == "../enc"
    return {"root": root, "index": root / "index", "enc": enc, "other": other, "manifest": m}


@pytest.mark.slow
def test_the_dense_manifest_records_its_encoders_files(dense):
    from rag_retriever._fingerprint import folder_files, folder_sha256

    rec = dense["manifest"]["dense"]["encoder_files"]
    assert rec["source"] == "folder" and rec["folder"] == "enc"
    assert rec["files"] == folder_files(dense["enc"]) and rec["sha256"] == folder_sha256(dense["enc"])
    files = dense["manifest"]["files"]
    assert {"dense/faiss.index", "dense/vectors.f16", "dense/encoder/encoder.onnx",
            "dense/encoder/tokenizer.json"} <= set(files)
    assert files["dense/encoder/encoder.onnx"]["sha256"] == dense["manifest"]["dense"]["onnx"]["sha256"]


def test_a_changed_onnx_export_is_refused_before_serving(dense, tmp_path):
    root = copy(dense["root"], tmp_path / "root")
    onnx = root / "index" / "dense" / "encoder" / "encoder.onnx"
    data = bytearray(onnx.read_bytes())
    data[len(data) // 2:len(data) // 2 + 64] = bytes(reversed(data[len(data) // 2:len(data) // 2 + 64]))
    onnx.write_bytes(bytes(data))  # the same size
    r = run("serve", "--index", root / "index", "--port", busy_port())
    line = one_error(r)
    assert "serving" not in r.output and "dense/encoder/encoder.onnx" in line, line
    # the searcher's own check (what serve relies on when the file is too large to be hashed by every open)
    ix = load_index(root / "index", check="sizes")
    with pytest.raises(RetrievalIndexError, match="dense/encoder/encoder.onnx: the exported encoder's SHA-256 is not"):
        ix.retrieve("who?")


def test_an_onnx_export_that_does_not_load_is_one_line_before_serving(dense, tmp_path):
    """An export whose records were made anew (so its hash check passes) but which onnxruntime cannot parse: serve
    printed "serving ... at http://..." and then a traceback, its hint saying the encoder folder moved; now one line
    before anything is announced, with validate's and the rebuild's hint."""
    from support.index_edits import resealed

    root = copy(dense["root"], tmp_path / "root")
    onnx = root / "index" / "dense" / "encoder" / "encoder.onnx"
    onnx.write_bytes(b"X" * 16 + onnx.read_bytes()[16:])
    resealed(root / "index", lambda m: m["dense"]["onnx"].update(sha256=sha256(onnx)))
    r = run("serve", "--index", root / "index", "--port", busy_port())
    line = one_error(r)
    assert "serving" not in r.output and "Traceback" not in r.output, r.output
    assert line.startswith(f"error: {onnx}: the index's exported encoder cannot be loaded (encoder.onnx: "), line
    assert "curriculum validate" in r.output and "--encoder FOLDER" not in r.output, r.output


def test_another_encoder_is_refused_unless_allowed_and_then_announces_another_fingerprint(dense, tmp_path):
    from fastapi.testclient import TestClient
    from rag_retriever._server import make_app

    index, other = dense["index"], dense["other"]
    r = run("serve", "--index", index, "--encoder", other, "--port", busy_port())
    line = one_error(r)
    assert "serving" not in r.output, r.output
    assert line.startswith(f"error: --encoder {other}: ") and "from the encoder the index was built with (enc" in line
    assert "--allow-other-encoder" in r.output, r.output
    with pytest.raises(RetrievalIndexError, match="from the encoder the index was built with"):
        load_index(index, encoder=str(other), device="cpu").retrieve("who?")
    fp = dense["manifest"]["fingerprint"]
    allowed = load_index(index, encoder=str(other), device="cpu", allow_other_encoder=True)
    assert allowed.fingerprint != fp and len(allowed.fingerprint) == 64
    with TestClient(make_app(allowed)) as c:
        assert c.get("/health").json()["fingerprint"] == allowed.fingerprint
        assert c.get("/manifest").json()["fingerprint"] == allowed.fingerprint
        assert c.post("/retrieve", json={"query": "who?", "topk": 2}).json()["fingerprint"] == allowed.fingerprint
    # a copy of the index's own encoder, elsewhere: accepted, the same fingerprint, with or without the flag
    same = copy(dense["enc"], tmp_path / "copy-of-enc")
    assert load_index(index, encoder=str(same), device="cpu", allow_other_encoder=True).fingerprint == fp
    load_index(index, encoder=str(same), device="cpu").retrieve("who?")


def test_the_recorded_encoder_changed_in_place_is_refused(dense, tmp_path, monkeypatch):
    monkeypatch.setenv("RAG_CURRICULUM_ENCODER_RUNTIME", "sentence-transformers")  # the folder is what loads
    root = copy(dense["root"], tmp_path / "root")
    load_index(root / "index", device="cpu").retrieve("who?")
    weights = next(p for p in sorted((root / "enc").rglob("*.safetensors")))
    flip(weights, weights.stat().st_size - 1)
    rel = weights.relative_to(root / "enc").as_posix()
    line = one_error(run("serve", "--index", root / "index", "--port", busy_port()))
    assert f"the index's encoder ../enc: {rel} differs from the encoder the index was built with" in line, line
    line = one_error(run("validate", root / "index"))
    assert f"{rel} differs" in line, line


# -- (3) flipped bytes in every file ---------------------------------------------------------------------------------
FUZZ = textwrap.dedent("""
    import json, shutil, sys
    from pathlib import Path
    import numpy as np
    from rag_retriever.errors import RetrieverError as CurriculumError
    from rag_retriever import load_index

    src, work, queries = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])

    def answers(ix):
        ids, scores = ix.retrieve_many(queries, 10)
        live = ids[ids >= 0]
        stored = [ix.stored(q, t) for q, t in zip(ix._q_ids, ix._q()[0])]
        return {"ids": ids.tolist(), "scores": scores.tolist(), "docs": ix.documents(live),
                "stored": [[s.ids.tolist(), s.scores.tolist()] for s in stored],
                "norms": [ix.norm(p) for p in range(len(ix))], "keys": np.asarray(ix.keys).tolist(),
                "fingerprint": ix.fingerprint}

    shutil.copytree(src, work)  # beside the index: a dense index finds its encoder folder (../enc) from there too
    want = answers(load_index(work, device="cpu"))
    rng = np.random.default_rng(0)
    for p in sorted(q for q in work.rglob("*") if q.is_file()):
        name = p.relative_to(work).as_posix()
        data = p.read_bytes()
        at = sorted({0, len(data) // 2, len(data) - 1, *rng.integers(0, len(data), 3).tolist()})
        for a in at:
            bad = bytearray(data)
            bad[a] ^= int(rng.integers(1, 256))
            p.write_bytes(bytes(bad))
            print(json.dumps({"start": name, "at": a}), flush=True)  # a crash names the case
            try:
                ix = load_index(work, device="cpu")
            except CurriculumError as e:
                print(json.dumps({"file": name, "at": a, "refused": str(e), "hint": e.hint}), flush=True)
            else:
                try:
                    got = answers(ix)
                    print(json.dumps({"file": name, "at": a, "same": got == want}), flush=True)
                except Exception as e:
                    print(json.dumps({"file": name, "at": a, "error": f"{type(e).__name__}: {e}"}), flush=True)
                del ix
            p.write_bytes(data)
    print(json.dumps({"done": True}), flush=True)
""")


def fuzz(index: Path) -> list[dict]:
    """The child's cases (its copy of ``index`` is made beside it)."""
    script = index.parent / "fuzz.py"
    script.write_text(FUZZ)
    done = subprocess.run([sys.executable, str(script), str(index), str(index.parent / "work"), json.dumps(QUERIES)],
                          capture_output=True, text=True, timeout=900)
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    started = [x for x in lines if "start" in x]
    assert done.returncode == 0 and lines and lines[-1] == {"done": True}, (
        f"the child died (exit {done.returncode}) on {started[-1] if started else None}: {done.stderr[-2000:]}")
    return [x for x in lines if "file" in x]


def _check_fuzz(cases: list[dict], index: Path) -> None:
    files = {p.relative_to(index).as_posix() for p in index.rglob("*") if p.is_file()}
    assert {c["file"] for c in cases} == files
    for c in cases:
        assert "error" not in c, c  # opened, then failed: neither refused at open nor the same answers
        if "refused" in c:
            assert "\n" not in c["refused"] and c["hint"], c
            if c["file"] != "manifest.json":  # (a flipped format number is "index format 7", and so on)
                assert f": {c['file']}: " in c["refused"], c
        else:
            assert c["same"], c  # a silent change
    refused = sum("refused" in c for c in cases)
    assert refused >= len(cases) - 3, [c for c in cases if "refused" not in c]  # only no-op edits of the manifest


@pytest.mark.slow
def test_flipped_bytes_in_every_file_of_a_bm25_index_are_refused_or_change_nothing(bm25, tmp_path):
    index = copy(bm25, tmp_path / "index")
    _check_fuzz(fuzz(index), index)


@pytest.mark.slow
def test_flipped_bytes_in_every_file_of_a_dense_index_are_refused_or_change_nothing(dense, tmp_path):
    root = copy(dense["root"], tmp_path / "root")  # the index with its encoder beside it (../enc)
    _check_fuzz(fuzz(root / "index"), root / "index")


def test_a_damaged_postings_file_is_one_line_not_a_segfault(bm25, tmp_path):
    d = copy(bm25, tmp_path / "d")
    flip(d / "bm25" / "block_bits.npy", manifest(d)["files"]["bm25/block_bits.npy"]["bytes"] // 2, 0xFF)
    r = run("serve", "--index", d, "--port", busy_port())
    line = one_error(r)
    assert "serving" not in r.output, r.output
    assert line == (f"error: {d}: bm25/block_bits.npy: its SHA-256 is not the one manifest.json records: the file "
                    "changed or is damaged"), line
    assert "curriculum validate DIR checks every file" in r.output, r.output
