"""The BM25 index on the real MuSiQue train sample: its ranks and scores against the BM25 formula written out here
(independently of bm25s), the manifest, memory-mapped loading, refusals, and the corpus file."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import shutil
import time
from collections import Counter

import numpy as np
import pytest
from conftest import MUSIQUE_TRAIN
from rag_retriever import IndexConfig, RetrievalIndexError, build_index, load_index
from rag_retriever._integrity import seal
from rag_retriever.errors import DataError
from support.index_edits import resealed

from rag_curriculum.loaders import load_examples
from rag_curriculum.shards import sha256_file


@pytest.fixture(scope="module")
def built(tmp_path_factory, shared_data):
    out = tmp_path_factory.mktemp("index") / "musique"
    manifest = build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(out), depth=50))
    return out, manifest


@pytest.fixture(scope="module")
def examples(shared_data):
    return list(load_examples("musique", MUSIQUE_TRAIN))


STOPWORDS = None


def _tokens(text: str) -> list[str]:
    """The tokenizer as the manifest describes it: lower case, runs of 2+ word characters, bm25s's English stop
    words dropped."""
    global STOPWORDS
    if STOPWORDS is None:
        from bm25s.stopwords import STOPWORDS_EN

        STOPWORDS = set(STOPWORDS_EN)
    return [t for t in re.findall(r"(?u)\b\w\w+\b", text.lower()) if t not in STOPWORDS]


def _bm25_lucene(docs: list[list[str]], query: list[str], k1: float, b: float) -> np.ndarray:
    """Lucene's BM25 (what bm25s calls method="lucene"): sum over the query's tokens (with repetition) of
    idf(t) * tf / (tf + k1 * (1 - b + b * |D| / avgdl)), idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5))."""
    n = len(docs)
    avgdl = sum(len(d) for d in docs) / n
    df = Counter(t for d in docs for t in set(d))
    tfs = [Counter(d) for d in docs]
    scores = np.zeros(n)
    for t in query:
        if t not in df:
            continue
        idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
        for i, (tf, d) in enumerate(zip(tfs, docs, strict=True)):
            if tf[t]:
                scores[i] += idf * tf[t] / (tf[t] + k1 * (1 - b + b * len(d) / avgdl))
    return scores


def _passages(examples):
    seen, out = set(), []
    for ex in examples:
        for d in ex.documents:
            if (d.title, d.text) not in seen:
                seen.add((d.title, d.text))
                out.append((d.title, d.text))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("k1,b", [(1.5, 0.75), (0.9, 0.4)])
def test_ranks_and_scores_agree_with_the_bm25_formula(built, examples, tmp_path, k1, b):
    out, _ = built
    if (k1, b) != (1.5, 0.75):  # the configured parameters are the ones used
        out = tmp_path / "idx"
        build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(out), k1=k1, b=b, depth=20))
    ix = load_index(out)
    passages = _passages(examples)
    assert [ix.passage(i) for i in range(len(ix))] == passages  # every distinct paragraph once, in file order
    docs = [_tokens(f"{t} {x}") for t, x in passages]
    for ex in examples[:12]:
        expected = _bm25_lucene(docs, _tokens(ex.question), k1, b)
        order = sorted(range(len(docs)), key=lambda i: (-expected[i], i))[:10]
        got = ix.retrieve(ex.question, 10)
        assert [i for i, _ in got] == order, ex.id
        np.testing.assert_allclose([s for _, s in got], expected[order], rtol=1e-5)
        stored = ix.stored(ex.id, ex.question)  # the ranking stored at index time is the same
        assert list(stored.ids[:10]) == order


def test_manifest_records_sources_tokenizer_and_parameters(built):
    out, m = built
    assert {k: v for k, v in m.items() if k != "seconds"} == json.loads((out / "manifest.json").read_text())
    assert set(m["seconds"]) == {"read_index", "finish", "rank", "wait"}
    assert m["kind"] == "index" and m["retriever"] == "bm25" and m["format"] == 6 and m["dataset"] == "musique"
    src = m["sources"][0]
    assert src["sha256"] == sha256_file(MUSIQUE_TRAIN) and src["questions"] == 100
    assert src["paragraphs"] == 100 * 20 and src["distinct"] == m["passages"] < src["paragraphs"]
    assert m["bm25"] == {"k1": 1.5, "b": 0.75, "method": "lucene", "idf_method": "lucene", "delta": 0.5,
                         "dtype": "float32"}
    assert m["tokenizer"]["stopwords"] == "en" and m["tokenizer"]["lower"] is True
    import bm25s

    assert m["bm25s_version"] == bm25s.__version__
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_the_same_inputs_make_the_same_index_bytes(built, tmp_path):
    again = tmp_path / built[0].name
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(again), depth=50))
    files = sorted(p.relative_to(built[0]) for p in built[0].rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(again) for p in again.rglob("*") if p.is_file())
    for f in files:
        assert (built[0] / f).read_bytes() == (again / f).read_bytes(), f


def test_loading_memory_maps(built):
    ix = load_index(built[0])
    assert isinstance(ix.ranked_ids, np.memmap) and isinstance(ix.ranked_scores, np.memmap)
    p = ix.searcher.postings  # plain views of the mapped files (numba types those fast)
    assert isinstance(p.words.base, np.memmap) and isinstance(p.block_last.base, np.memmap)
    assert ix._docs._mm is not None and ix._norm_file._mm is not None  # the passage store's files, mapped


def test_refuses_an_index_that_does_not_match_its_manifest(built, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(built[0], out)
    m = json.loads((out / "manifest.json").read_text())
    m["bm25"]["k1"] = 2.0
    (out / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(RetrievalIndexError, match=r"manifest.json: its own digest \(manifest_sha256\) is not that of"):
        load_index(out)  # an edited manifest is refused as such
    # the manifest made anew with that k1 (its fingerprint, which covers the settings, and its own digest): the
    # records agree, so the postings' saved parameters are compared with it
    resealed(out, lambda r: r["bm25"].update(k1=2.0))
    with pytest.raises(RetrievalIndexError) as e:
        load_index(out)
    # the one setting that differs, not the two settings dicts whole
    assert str(e.value) == (f"{out}: bm25/params.json, what the postings were built with, disagrees with "
                            "manifest.json: bm25.k1 1.5 there, 2.0 in manifest.json"), str(e.value)
    m["bm25"]["k1"] = 1.5
    (out / "manifest.json").write_text(json.dumps(seal(m)))
    with open(out / "ranked_ids.npy", "ab") as f:
        f.write(b"\0" * 8)
    with pytest.raises(RetrievalIndexError, match="ranked_ids.npy: .* bytes, manifest.json records"):
        load_index(out)
    (out / "manifest.json").unlink()
    with pytest.raises(RetrievalIndexError, match="no manifest.json") as e:
        load_index(out)
    assert "curriculum index" in e.value.hint
    with pytest.raises(RetrievalIndexError, match="no such index directory"):
        load_index(tmp_path / "nowhere")


def test_refuses_to_replace_what_is_not_an_index(built, tmp_path):
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    cfg = IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(other), overwrite=True)
    with pytest.raises(RetrievalIndexError, match="not an index of this toolkit"):
        build_index(cfg)
    assert (other / "notes.txt").read_text() == "keep me"
    with pytest.raises(RetrievalIndexError, match="exists"):
        build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(built[0])))


def test_a_corpus_adds_every_line_after_the_dataset(built, tmp_path, examples):
    """Every corpus line is one passage, in line order, after the dataset's (a line that repeats a dataset
    paragraph too: a server over the corpus answers what Search-R1's own would, line for line)."""
    corpus = tmp_path / "corpus.jsonl"
    first = examples[0].documents[0]
    lines = [{"title": "Zanzibar Quokka", "text": "The Zanzibar quokka is a made-up marsupial."},
             {"title": first.title, "text": first.text}]  # the same as a dataset paragraph: kept, after it
    corpus.write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "with-corpus"
    m = build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), corpus=str(corpus), out=str(out),
                                depth=5))
    n = built[1]["passages"]
    assert m["passages"] == n + 2
    assert m["sources"][1] == {"kind": "corpus", "input": "corpus.jsonl", "path": "../corpus.jsonl",
                               "sha256": sha256_file(corpus), "lines": 2}
    ix = load_index(out)
    (best, _), *_ = ix.retrieve("Which marsupial is from Zanzibar?", 3)
    assert best == n and ix.passage(best) == ("Zanzibar Quokka", lines[0]["text"])
    assert ix.origin(best) == "corpus" and ix.origin(0) == "dataset"
    copy = ix.keys[n + 1]
    assert copy in set(ix.keys[:n].tolist())  # a copy of a dataset paragraph, by content
    # the copy ranks right after the original (the same score, the higher id)
    got = ix.retrieve(first.title + " " + first.text, 5)
    original = next(p for p in range(n) if ix.passage(p) == (first.title, first.text))
    assert [p for p, _ in got[:2]] == [original, n + 1] and got[0][1] == got[1][1]


@pytest.mark.slow
def test_what_on_error_skip_left_out_is_said_once(tmp_path):
    """The build reads its sources twice (the index here, the passage store in a forked worker): the skipped
    records' warnings were printed by both."""
    import subprocess
    import sys

    data = tmp_path / "musique.jsonl"
    data.write_text("".join(MUSIQUE_TRAIN.read_text().splitlines(keepends=True)[:5]) + '{"id": "bad"}\n')
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"title": "A", "text": "a river"}\n{not json\n{"title": "B", "text": "a city"}\n')
    r = subprocess.run([sys.executable, "-m", "rag_curriculum.cli", "index", "--dataset", "musique", "--input",
                        str(data), "--corpus", str(corpus), "--on-error", "skip", "--out", str(tmp_path / "ix"),
                        "--no-progress"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    warned = [x for x in r.stderr.splitlines() if x.startswith("WARNING")]
    assert len(warned) == 2, r.stderr
    assert "musique.jsonl: skipped 1 record(s) (missing_field: 1)" in warned[0], warned
    assert "corpus.jsonl: skipped 1 line(s) (invalid_json: 1)" in warned[1], warned


@pytest.mark.parametrize("line,match", [
    ('{"title": "A"}', r"line 1, field 'text': missing"),
    ('{"title": "A", "text": 3}', r"line 1, field 'text': a int, not a string"),
    ('["A", "b"]', r"line 1: a JSON list, not an object"),
    ('{"title": "A", "text": "b"', r"line 1: not JSON"),
])
def test_a_bad_corpus_line_is_named(tmp_path, line, match):
    corpus = tmp_path / "bad.jsonl"
    corpus.write_text(line + "\n")
    with pytest.raises(DataError, match=match) as e:
        build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), corpus=str(corpus),
                                out=str(tmp_path / "o")))
    assert "bad.jsonl" in str(e.value) and e.value.hint
    assert not (tmp_path / "o").exists()


def test_the_manifest_holds_no_absolute_local_paths(tmp_path, shared_data):
    """An index is shared like a build: its manifest records the input, the output and the command line with the
    paths made portable (the same rule as a build's manifest), never this machine's absolute paths."""
    out = tmp_path / "idx"
    command = f"curriculum index --dataset musique --input {MUSIQUE_TRAIN.resolve()} --out {out} --no-progress"
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN.resolve()), out=str(out), depth=10),
                command=command)
    text = (out / "manifest.json").read_text()
    assert str(tmp_path) not in text and str(MUSIQUE_TRAIN.resolve().parent) not in text
    m = json.loads(text)
    assert m["command"] == ("curriculum index --dataset musique --input musique_ans_v1.0_train.sample100.jsonl "
                            "--out idx --no-progress")


def test_the_index_stores_each_passage_normalised_and_each_questions_gold_ids(built, examples):
    """What the build reads instead of computing: the ``norm`` column (the passage SQuAD-normalised, padded) and the
    hashes of a question's gold paragraphs, through their passage ids."""
    from rag_retriever import normalize_passage, passage_hash

    from rag_curriculum._metrics import normalize_answer

    ix = load_index(built[0])
    for pid in range(len(ix)):
        title, text = ix.passage(pid)
        assert ix.norm(pid) == normalize_passage(title, text) == f" {normalize_answer(title + ' ' + text)} "
    for ex in examples:
        assert ix.gold_keys(ex) == [passage_hash(d.title, d.text) for d in ex.documents if d.is_gold]
    ex = examples[0]
    other = dataclasses.replace(ex, question=ex.question + " (asked differently)")
    assert ix.gold_keys(other) is None  # another file's question: the build hashes its paragraphs itself


def test_the_answer_test_in_place_is_substring_search_in_the_normalised_text(built):
    """``norm_spans``: ``mmap.find`` between a passage's bounds in the mapped file decides as ``in`` on its
    ``norm`` string, for words of the passage, words of other passages, its first and last words with their
    padding, and text that is nowhere."""
    import random

    ix = load_index(built[0])
    find, starts, ends = ix.norm_spans()
    assert len(starts) == len(ends) == len(ix)
    words = sorted({w for pid in range(0, len(ix), 7) for w in ix.norm(pid).split()})
    rng = random.Random(0)
    hits = 0
    for pid in range(len(ix)):
        norm = ix.norm(pid)
        own = norm.split()
        for pattern in [f" {own[0]} ", f" {own[-1]} ", f" {rng.choice(own)} ", f" {rng.choice(words)} ",
                        f" {rng.choice(words)} {rng.choice(words)} ", " zzqxj ", norm, norm + "x"]:
            found = find(pattern.encode(), int(starts[pid]), int(ends[pid])) >= 0
            assert found == (pattern in norm), (pid, pattern)
            hits += found
    assert hits > 3 * len(ix)  # the passage's own words are found


def test_the_index_knows_the_file_it_was_built_from(built, tmp_path):
    from rag_curriculum import __version__

    ix = load_index(built[0])
    sha = sha256_file(MUSIQUE_TRAIN)
    assert ix.indexed("musique", sha)
    assert not ix.indexed("hotpotqa", sha) and not ix.indexed("musique", "0" * 64) and not ix.indexed("musique", None)
    ix.manifest = {**ix.manifest, "toolkit": {"name": "rag-curriculum", "version": __version__ + ".other"}}
    assert not ix.indexed("musique", sha)  # another version's loader may read the file differently


def test_an_index_of_another_format_is_refused(built, tmp_path):
    out = tmp_path / "old"
    shutil.copytree(built[0], out)
    m = json.loads((out / "manifest.json").read_text())
    m["format"] = 2
    (out / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(RetrievalIndexError, match="index format 2; this toolkit reads 6") as e:
        load_index(out)
    assert "build the index again" in e.value.hint


@pytest.mark.parametrize("how", ["raises", "dies"])
def test_a_failing_passage_side_worker_fails_the_index_and_leaves_nothing(tmp_path, monkeypatch, how):
    """The passages, normalised texts and checksums are written by a forked worker beside tokenizing: its error
    reaches the caller, a worker killed outright is named, and no index or temporary folder is left either way."""
    import os
    import signal

    from rag_retriever import _index

    def broken(tmp, cfg, dataset):
        if how == "raises":
            raise OSError(28, "No space left on device")
        os.kill(os.getpid(), signal.SIGKILL)

    monkeypatch.setattr(_index, "_write_store", broken)
    out = tmp_path / "idx"
    match = "No space left" if how == "raises" else "ended without a result"
    with pytest.raises((OSError, RuntimeError), match=match):
        build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(out), depth=5))
    assert not out.exists() and not list(tmp_path.iterdir())


def test_side_task_returns_raises_and_runs_inline_without_fork():
    from rag_curriculum._plumbing import SideTask

    assert SideTask(lambda: {"x": [1, 2]}, "ok").result() == {"x": [1, 2]}
    task = SideTask(lambda: 1 / 0, "bad")
    with pytest.raises(ZeroDivisionError):
        task.result()
    inline = SideTask(lambda: 7, "inline", enabled=False)
    assert not inline.forked and inline.result() == 7


def test_a_second_index_to_the_same_out_is_refused_at_once(tmp_path):
    """While one `curriculum index` writes --out, another to the same --out is refused at once,
    not after building for its whole run."""
    from filelock import FileLock

    out = tmp_path / "idx"
    with FileLock(str(tmp_path / ".idx.index.lock")):  # what a running build holds
        t = time.perf_counter()
        with pytest.raises(RetrievalIndexError, match="another index run is writing") as e:
            build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(out), depth=5))
        assert time.perf_counter() - t < 1.0 and "another --out" in e.value.hint
    assert not out.exists()
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(out), depth=5))
    assert not (tmp_path / ".idx.index.lock").exists()


@pytest.mark.parametrize("data, says", [
    (b'{"title": "A", "text": "caf\xe9"}\n', r"line 1: not UTF-8 \(byte b'\\xe9' at column 28\)"),
    (b'\x1f\x8b\x08\x00garbage', r"a compressed file, not JSONL"),
    (b'{"title": "A", "text": "x \\ud800 y"}\n', r"line 1, field 'text': holds a lone surrogate escape"),
    (b'{"title": "A", "text": "ok"}\n' + b'[' * 100_000 + b']' * 100_000 + b'\n', r"line 2: nested too deeply"),
    (b"", r"no passage \(the file is empty or holds only blank lines\)"),
    (b"\n  \n\n", r"no passage"),
])
def test_bad_corpus_bytes_are_named_by_file_and_line(tmp_path, data, says):
    """Non-UTF-8 bytes, a gzip file, a lone surrogate, a line nested too deeply, an empty or
    blank-only corpus: one error naming the file (and the line), nothing left."""
    corpus = tmp_path / "bad.jsonl"
    corpus.write_bytes(data)
    with pytest.raises(DataError, match=says) as e:
        build_index(IndexConfig(corpus=str(corpus), out=str(tmp_path / "o")))
    assert "bad.jsonl" in str(e.value) and e.value.hint
    assert not (tmp_path / "o").exists()
