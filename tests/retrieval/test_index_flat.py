"""The BM25 kind in bounded memory: its matrix is written in two passes over blocks of documents from flat token
arrays, and must be bm25s's own ``BM25.index`` + ``BM25.save`` of the same passages, byte for byte, for every BM25
variant, any parameters and any block size; its search (without bm25s's vocabulary dict) must tokenize queries as
bm25s's tokenizer does and rank as bm25s scores, with ties broken by the lower passage id on both backends."""

from __future__ import annotations

import filecmp
import json

import bm25s
import numpy as np
import pytest
from conftest import MUSIQUE_TRAIN, TWOWIKI_TRAIN

from rag_curriculum.retrieval import _bm25
from rag_curriculum.retrieval._corpus import Sources, passage_blocks


@pytest.fixture(scope="module", params=[("musique", MUSIQUE_TRAIN), ("2wikimultihopqa", TWOWIKI_TRAIN)],
                ids=["musique", "2wiki"])
def passages(request, shared_data):
    titles, texts = [], []
    for block in passage_blocks(request.param[0], str(request.param[1]), None):
        titles += block.titles
        texts += block.texts
    return titles, texts


def _params(method, k1, b, delta):
    return {"k1": k1, "b": b, "method": method, "idf_method": method, "delta": delta, "dtype": "float32"}


@pytest.mark.parametrize("method", ["lucene", "robertson", "atire", "bm25l", "bm25+"])
@pytest.mark.parametrize(("stopwords", "k1", "b", "delta", "steps"),
                         [("en", 1.5, 0.75, 0.5, (1 << 16, 1 << 22)), (None, 0.9, 0.4, 1.0, (37, 1001))],
                         ids=["defaults", "odd-parameters-small-steps"])
def test_the_streamed_build_is_bm25s_own_index_byte_for_byte(passages, tmp_path, method, stopwords, k1, b, delta,
                                                            steps):
    titles, texts = passages
    old_tok, new_tok = _bm25.tokenizer(stopwords), _bm25.tokenizer(stopwords)
    old = bm25s.BM25(method=method, k1=k1, b=b, delta=delta, backend="numpy")
    ids = _bm25.tokenize(old_tok, [f"{t} {x}" for t, x in zip(titles, texts, strict=True)], update_vocab=True)
    old.index((ids, old_tok.get_vocab_dict()), show_progress=False)
    old.save(str(tmp_path / "old"), show_progress=False)

    tokens, lengths = _bm25.tokenize_flat(new_tok, titles, texts)
    assert tokens.dtype == np.int32 and lengths.dtype == np.int64 and len(lengths) == len(titles)
    assert tokens.tolist() == [i for doc in ids for i in doc] and lengths.tolist() == [len(d) for d in ids]
    mm = tmp_path / "tokens.int32"  # as the build reads them: a memory map of the token file
    mm.write_bytes(tokens.tobytes())
    vocab = new_tok.get_vocab_dict()
    _bm25.write_csc(tmp_path / "new", np.memmap(mm, dtype=np.int32, mode="r"), lengths, vocab,
                    _params(method, k1, b, delta), docs_per_step=steps[0], pairs_per_step=steps[1])
    assert vocab == old.vocab_dict and "" in vocab
    names = sorted(p.name for p in (tmp_path / "old").iterdir())
    ours = sorted(p.name for p in (tmp_path / "new").iterdir())
    assert ours == sorted([*names, _bm25.VOCAB, _bm25.BOUNDS]) and "data.csc.index.npy" in names
    assert ("nonoccurrence_array.index.npy" in names) == (method in ("bm25l", "bm25+"))
    for name in names:
        assert filecmp.cmp(tmp_path / "old" / name, tmp_path / "new" / name, shallow=False), name
    back = bm25s.BM25.load(str(tmp_path / "new"))  # bm25s reads it as its own
    query = ids[3][:6]
    assert np.array_equal(back.get_scores_from_ids(query), old.get_scores_from_ids(query))


@pytest.fixture(scope="module")
def built(passages, tmp_path_factory):
    """bm25s's index of the passages, and the BM25 kind's files of the same passages."""
    titles, texts = passages
    d = tmp_path_factory.mktemp("bm25")
    tok = _bm25.tokenizer("en")
    tokens, lengths = _bm25.tokenize_flat(tok, titles, texts)
    _bm25.write_csc(d / _bm25.BM25_DIR, tokens, lengths, tok.get_vocab_dict(), _params("lucene", 1.5, 0.75, 0.5))
    manifest = {"bm25": _params("lucene", 1.5, 0.75, 0.5), "passages": len(titles), "tokenizer": {"stopwords": "en"}}
    ref = bm25s.BM25.load(str(d / _bm25.BM25_DIR), load_vocab=True)
    return d, manifest, ref, tok


def test_queries_are_tokenized_as_bm25s_does_without_its_dict(built, shared_data):
    import json

    d, manifest, ref, tok = built
    s = _bm25.BM25Searcher(d, manifest, backend_name="numpy")
    questions = [json.loads(x)["question"] for x in MUSIQUE_TRAIN.read_text().splitlines()]
    questions += ["", "the of and", "zzqxj unknownword", "Who?  WHO? who", "É tudo? naïve café"]
    want = tok.tokenize(questions, update_vocab=False, return_as="ids", show_progress=False)
    assert [s.token_ids(q) for q in questions] == want


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_rankings_are_bm25s_scores_with_ties_by_lower_id(built, backend):
    if backend == "numba":
        pytest.importorskip("numba")
    d, manifest, ref, tok = built
    s = _bm25.BM25Searcher(d, manifest, backend_name=backend, threads=2)
    assert s.backend == backend
    questions = ["Who founded the company", "river in Europe", "the album of the band", "zzqxj", ""]
    ids, scores = s.search(questions, 7)
    for q, row_ids, row_scores in zip(questions, ids, scores, strict=True):
        qid = s.token_ids(q)
        if qid == [s.empty]:
            assert (row_ids == -1).all()
            continue
        full = ref.get_scores_from_ids(qid)
        order = np.lexsort((np.arange(len(full)), -full))[:7]  # score descending, then id ascending
        assert row_ids.tolist() == order.tolist()
        assert np.array_equal(row_scores, full[order])
    # a tie at the cut: every passage scores 0 for a query of one word none of them holds beyond the first few
    rare = next(w for w, i in sorted(ref.vocab_dict.items()) if w and len(ref.get_scores_from_ids([i]).nonzero()[0]) == 1)
    ids, scores = s.search([rare], 5)
    assert scores[0][0] > 0 and ids[0][1:].tolist() == sorted(ids[0][1:].tolist())
    assert ids[0][1:].tolist() == [i for i in range(6) if i != ids[0][0]][:4]  # the zero scores: the lowest ids


def test_both_backends_rank_alike_in_batches(built):
    pytest.importorskip("numba")
    d, manifest, ref, tok = built
    qs = [" ".join(w for w in list(ref.vocab_dict)[i:i + 3] if w) or "x" for i in range(0, 600, 5)]
    a = _bm25.BM25Searcher(d, manifest, backend_name="numpy").search(qs, 10)
    b = _bm25.BM25Searcher(d, manifest, backend_name="numba", threads=1).search(qs, 10)
    c = _bm25.BM25Searcher(d, manifest, backend_name="numba", threads=2).search(qs, 10)
    for x, y in ((a, b), (b, c)):
        assert np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1])


def test_the_vocabulary_file_reads_every_word(built):
    d, manifest, ref, tok = built
    v = _bm25.Vocabulary(d / _bm25.BM25_DIR / _bm25.VOCAB)
    assert len(v) == len(ref.vocab_dict)
    for w, i in list(ref.vocab_dict.items())[::7]:
        assert v.get(w) == i
    assert v.get("zzqxj-not-a-word") is None


def test_auto_takes_numba_whenever_it_is_installed(monkeypatch):
    import builtins
    import sys
    import types

    monkeypatch.setitem(sys.modules, "numba", types.ModuleType("numba"))  # installed
    assert _bm25.backend("auto") == "numba" and _bm25.backend("numpy") == "numpy"
    real = builtins.__import__
    monkeypatch.delitem(sys.modules, "numba")
    monkeypatch.setattr(builtins, "__import__", lambda name, *a, **k: (_ for _ in ()).throw(ImportError(name))
                        if name == "numba" else real(name, *a, **k))
    assert _bm25.backend("auto") == "numpy"  # not installed: numpy, with the same rankings


def test_mismatched_arrays_are_refused_not_indexed(passages, tmp_path):
    titles, texts = passages
    tok = _bm25.tokenizer("en")
    tokens, lengths = _bm25.tokenize_flat(tok, titles[:50], texts[:50])
    vocab = dict(tok.get_vocab_dict())
    with pytest.raises(_bm25.BM25Error, match="vocabulary"):
        _bm25.write_csc(tmp_path / "a", tokens, lengths, {w: i for w, i in vocab.items() if i < len(vocab) - 1},
                        _params("lucene", 1.5, 0.75, 0.5))
    with pytest.raises(_bm25.BM25Error, match="lengths summing"):
        _bm25.write_csc(tmp_path / "b", tokens[:-1], lengths, vocab, _params("lucene", 1.5, 0.75, 0.5))


def test_blocks_hold_at_most_block_passages_and_count_the_sources(shared_data):
    found = Sources()
    blocks = list(passage_blocks("musique", str(MUSIQUE_TRAIN), None, block=100, found=found))
    assert all(len(b) <= 100 for b in blocks) and sum(map(len, blocks)) == found.distinct == found.passages
    assert found.paragraphs == 2000 and len(found.q_ids) == 100


def test_the_compiled_search_is_cached_across_processes(built):
    """numba compiles the search once per machine: a second process loads it from the cache (no compilation), so
    a server started again is healthy in about a second."""
    pytest.importorskip("numba")
    import subprocess
    import sys

    d, manifest, _, _ = built
    code = ("import json, sys\n"
            "from rag_curriculum.retrieval import _bm25, _bm25_numba as nb\n"
            f"s = _bm25.BM25Searcher({str(d)!r}, {manifest!r}, backend_name='numba', threads=1)\n"
            "s.warm()\n"
            "print(json.dumps([sum(f.stats.cache_hits.values()) for f in (nb.wand, nb.exhaustive)]"
            " + [sum(f.stats.cache_misses.values()) for f in (nb.wand, nb.exhaustive)]))\n")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True) for _ in range(2)]
    got = [int(x) for x in runs[1].stdout.strip().splitlines()[-1].strip("[]").split(",")]
    # WAND loaded from the cache, nothing compiled; the exhaustive sum, which no query of a Lucene BM25 index takes,
    # neither compiled nor loaded (a first start compiles only what the index needs)
    assert got == [1, 0, 0, 0], runs[1].stdout


def test_pruned_search_is_the_exhaustive_search(built):
    """WAND (dynamic pruning) gives exactly what summing every passage gives: the same ids and float32 scores,
    for queries of 1 to 12 words (repeats included), k from 1 to 50, one at a time and across threads."""
    pytest.importorskip("numba")
    import random

    d, manifest, ref, tok = built
    words = [w for w in ref.vocab_dict if w]
    rng = random.Random(0)
    common = sorted(words, key=lambda w: -int(np.diff(ref.scores["indptr"])[ref.vocab_dict[w]]))[:40]
    qs = [" ".join(rng.choice(common if rng.random() < 0.5 else words) for _ in range(rng.randint(1, 12)))
          for _ in range(300)]
    qs += [f"{common[0]} {common[0]} {common[1]}", common[2]]
    pruned = _bm25.BM25Searcher(d, manifest, backend_name="numba", threads=1)
    full = _bm25.BM25Searcher(d, manifest, backend_name="numba", threads=1)
    full.prune = False
    for k in (1, 3, 10, 50):
        a, b = pruned.search(qs, k), full.search(qs, k)
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]), k
    threaded = _bm25.BM25Searcher(d, manifest, backend_name="numba", threads=2)
    threaded_full = _bm25.BM25Searcher(d, manifest, backend_name="numba", threads=3)
    threaded_full.prune = False
    b = full.search(qs, 10)
    for c in (threaded.search(qs, 10), threaded_full.search(qs, 10)):  # slices of the batch on a pool of threads
        assert np.array_equal(c[0], b[0]) and np.array_equal(c[1], b[1])


def test_the_block_setting_paces_the_build_and_changes_no_byte(shared_data, tmp_path):
    """--block (passages per block: what the build holds besides the vocabulary) gives the same index: every
    file of a build of 256-passage blocks equals the default build's, the manifest's record included."""
    from rag_curriculum.retrieval import IndexConfig, build_index

    small, default = tmp_path / "small" / "ix", tmp_path / "default" / "ix"
    for out, block in ((small, 256), (default, 1 << 16)):
        build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(out), block=block, depth=10))
    files = sorted(p.relative_to(default) for p in default.rglob("*") if p.is_file())
    assert len(files) > 8 and files == sorted(p.relative_to(small) for p in small.rglob("*") if p.is_file())
    for f in files:
        if f.name != "manifest.json":
            assert (small / f).read_bytes() == (default / f).read_bytes(), f
    a, b = (json.loads((d / "manifest.json").read_text()) for d in (small, default))
    assert "block" not in a["config"] and a["config"] == b["config"]
