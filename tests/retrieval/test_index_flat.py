"""The BM25 kind in bounded memory, on compressed postings: the bm25s preset (the default) must rank and score as
bm25s itself does, for every BM25 variant, any parameters and any block size (bm25s runs beside it here); its
search (without a vocabulary dict) must tokenize queries as bm25s's tokenizer does; block-max WAND, the exhaustive
sum and the NumPy backend must agree to the bit; the postings must decode to what was encoded."""

from __future__ import annotations

import json

import bm25s
import numpy as np
import pytest
from conftest import MUSIQUE_TRAIN, TWOWIKI_TRAIN
from rag_retriever import _bm25, _bm25_parts, _postings
from rag_retriever._corpus import Sources, passage_blocks


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


def _bm25s_ref(tokens, lengths, vocab, method, k1, b, delta):
    ref = bm25s.BM25(method=method, k1=k1, b=b, delta=delta, backend="numpy")
    ref.index(([list(x) for x in np.split(tokens, np.cumsum(lengths)[:-1])], vocab), show_progress=False)
    return ref


def _parsed(tok, vocab_sorted, q):
    """A query as the searcher parses it, from bm25s's own tokenizer (its ids mapped to the sorted vocabulary)."""
    inv = {i: w for w, i in tok.get_vocab_dict().items()}
    ids = [i for i in tok.tokenize([q], update_vocab=False, return_as="ids", show_progress=False)[0] if inv[i]]
    rank = {w: i for i, w in enumerate(vocab_sorted)}
    seen: dict[int, int] = {}
    order = [seen.setdefault(rank[inv[i]], len(seen)) for i in ids]
    return ids, (list(seen), order, [1.0] * len(seen))


@pytest.mark.slow
@pytest.mark.parametrize("method", ["lucene", "robertson", "atire", "bm25l", "bm25+"])
@pytest.mark.parametrize(("stopwords", "k1", "b", "delta", "step"),
                         [("en", 1.5, 0.75, 0.5, 1 << 16), (None, 0.9, 0.4, 1.0, 37)],
                         ids=["defaults", "odd-parameters-small-steps"])
def test_the_bm25s_preset_ranks_and_scores_as_bm25s(passages, tmp_path, method, stopwords, k1, b, delta, step):
    """The same 10 passages in the same order and the same float32 scores as bm25s's ``get_scores`` (ties by the
    lower id), by block-max WAND, by the exhaustive sum, window by window and by the NumPy backend."""
    titles, texts = passages
    tok = _bm25.tokenizer(stopwords)
    tokens, lengths = _bm25.tokenize_flat(tok, titles, texts)
    assert tokens.dtype == np.int32 and lengths.dtype == np.int64 and len(lengths) == len(titles)
    mm = tmp_path / "tokens.int32"  # as the build reads them: a memory map of the token file
    mm.write_bytes(tokens.tobytes())
    vocab = tok.get_vocab_dict()
    facts = _postings.write_postings(tmp_path / "bm25", np.memmap(mm, dtype=np.int32, mode="r"), lengths, vocab,
                                     _params(method, k1, b, delta), docs_per_step=step)
    assert facts["postings"] > len(titles) and facts["num_docs"] == len(titles)
    ref = _bm25s_ref(tokens, lengths, vocab, method, k1, b, delta)
    ix = _postings.PostingsIndex(tmp_path / "bm25", json.loads((tmp_path / "bm25" / "params.json").read_text()))
    words = sorted(vocab, key=lambda w: w.encode("utf-8"))
    qs = [t for t in titles[::25]] + [x[:80] for x in texts[::40]] + ["river river river Europe", "the of", "zzqx"]
    pairs = [_parsed(tok, words, q) for q in qs]
    parsed = [p for _, p in pairs]
    wand, full = ix.search(parsed, 10), ix.search(parsed, 10, prune=False)
    for window in (_postings.SEARCH_WINDOW, 7):  # a window at a time (robertson: words of negative idf too)
        ix.window = window
        win = ix.search(parsed, 10, windowed=True)
        assert np.array_equal(win[0], full[0]) and np.array_equal(win[1], full[1]), window
    plain = _postings.numpy_search(_postings.PostingsIndex(ix_dir := tmp_path / "bm25", ix.params, compiled=False),
                                   parsed, 10)
    assert ix_dir.is_dir()
    for got in (full, plain):
        assert np.array_equal(got[0], wand[0]) and np.array_equal(got[1], wand[1])
    for (ids, _), row_ids, row_scores in zip(pairs, wand[0], wand[1], strict=True):
        if not ids:
            assert (row_ids == -1).all()
            continue
        scores = ref.get_scores_from_ids(ids)
        order = np.lexsort((np.arange(len(scores)), -scores))[:10]  # score descending, then id ascending
        assert row_ids.tolist() == order.tolist()
        assert np.array_equal(row_scores, scores[order])


@pytest.mark.slow
def test_the_builds_term_ids_are_bm25s_tokens(passages):
    """The build's tokenizer for the bm25s preset (a compiled scan and a table of surface forms) gives bm25s's
    tokens and lengths exactly: its splitter on ``str.lower()``, its stop words, and the empty token for a
    passage with no word left (empty, one letter, only stop words, a final sigma, a dotted capital I)."""
    from rag_retriever._analysis import Bm25sWords, TermIds

    titles, texts = passages
    titles = [*titles, "", "!!! a", "the of", "ΣΟΦΟΣ", "x_1 ÉCOLE"]
    texts = [*texts, "", "b", "and", "İstanbul e\u0301cole", "naïve 2020 ab"]
    for stopwords in ("en", None):
        tok = _bm25.tokenizer(stopwords)
        want, want_len = _bm25.tokenize_flat(tok, titles, texts)
        inv = {i: w for w, i in tok.get_vocab_dict().items()}
        ti = TermIds(Bm25sWords(_bm25.stopword_list(stopwords)))
        got, got_len = ti.ids([f"{t} {x}" for t, x in zip(titles, texts, strict=True)])
        words = {i: w for w, i in ti.vocab.items()}
        assert [words[i] for i in got.tolist()] == [inv[i] for i in want.tolist()]
        assert got_len.tolist() == want_len.tolist()


@pytest.fixture(scope="module")
def built(passages, tmp_path_factory):
    """The bm25s preset's files of the passages (as a build writes them), and bm25s's index of the same."""
    titles, texts = passages
    d = tmp_path_factory.mktemp("bm25")
    tok = _bm25.tokenizer("en")
    tokens, lengths = _bm25.tokenize_flat(tok, titles, texts)
    params = _params("lucene", 1.5, 0.75, 0.5)
    _postings.write_postings(d / _bm25.BM25_DIR, tokens, lengths, tok.get_vocab_dict(), params)
    manifest = {"bm25": params, "passages": len(titles), "tokenizer": {"stopwords": "en"}}
    ref = _bm25s_ref(tokens, lengths, tok.get_vocab_dict(), "lucene", 1.5, 0.75, 0.5)
    return d, manifest, ref, tok


def test_queries_are_tokenized_as_bm25s_does_without_its_dict(built, shared_data):
    d, manifest, ref, tok = built
    s = _bm25.BM25Searcher(d, manifest, backend_name="numpy")
    words = sorted(ref.vocab_dict, key=lambda w: w.encode("utf-8"))
    inv = {i: w for w, i in ref.vocab_dict.items()}
    questions = [json.loads(x)["question"] for x in MUSIQUE_TRAIN.read_text().splitlines()]
    questions += ["", "the of and", "zzqxj unknownword", "Who?  WHO? who", "É tudo? naïve café"]
    want = tok.tokenize(questions, update_vocab=False, return_as="ids", show_progress=False)
    for q, w in zip(questions, want, strict=True):
        assert [words[i] for i in s.token_ids(q)] == [inv[i] for i in w if inv[i]], q


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_rankings_are_bm25s_scores_with_ties_by_lower_id(built, backend):
    if backend == "numba":
        pytest.importorskip("numba")
    d, manifest, ref, tok = built
    s = _bm25.BM25Searcher(d, manifest, backend_name=backend, threads=2)
    assert s.backend == backend
    words = sorted(ref.vocab_dict, key=lambda w: w.encode("utf-8"))
    questions = ["Who founded the company", "river in Europe", "the album of the band", "zzqxj", ""]
    ids, scores = s.search(questions, 7)
    for q, row_ids, row_scores in zip(questions, ids, scores, strict=True):
        qid = [ref.vocab_dict[words[i]] for i in s.token_ids(q)]
        if not qid:
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


def test_one_query_at_a_time_is_the_batch(built):
    """A request of one question takes a shorter way to the kernels' arrays (``_postings._batch``): the same arrays as
    the batch's way, so the same ids and scores, query by query; a query with a repeated term takes the batch's way."""
    pytest.importorskip("numba")
    d, manifest, ref, tok = built
    s = _bm25.BM25Searcher(d, manifest, backend_name="numba", threads=1)
    qs = [" ".join(w for w in list(ref.vocab_dict)[i:i + 4] if w) or "x" for i in range(0, 800, 7)]
    ids, scores = s.search(qs, 10)
    for j, q in enumerate(qs):
        one = s.search([q], 10)
        assert np.array_equal(one[0][0], ids[j]) and np.array_equal(one[1][0], scores[j]), q
    rng = np.random.default_rng(0)
    for m in (1, 2, 5, 9):
        terms = rng.choice(10_000, size=m, replace=False).tolist()
        q = (terms, rng.integers(0, m, size=m + 2).tolist(), rng.random(m).astype(np.float32).tolist())
        uniq, flat = np.unique(np.array(terms, np.int64), return_inverse=True)  # the batch's way, by hand
        want = (uniq, flat.astype(np.int64), np.array([0, m]), np.array(q[1], np.int64), np.array([0, m + 2]),
                np.array(q[2], np.float32))
        for a, b in zip(_postings._batch([q], [0]), want, strict=True):
            assert a.dtype == b.dtype and np.array_equal(a, b)
    dup = ([5, 3, 5], [0, 1, 2], [1.0, 1.0, 1.0])  # a repeated term: not distinct, so the batch's way (np.unique)
    assert _postings._batch([dup], [0])[0].tolist() == [3, 5]


def test_the_vocabulary_file_reads_every_word(built):
    d, manifest, ref, tok = built
    v = _bm25.Vocabulary(d / _bm25.BM25_DIR / _bm25.VOCAB)
    words = sorted(ref.vocab_dict, key=lambda w: w.encode("utf-8"))
    assert len(v) == len(words)
    for i in range(0, len(words), 7):
        assert v.get(words[i]) == i
    assert v.get("zzqxj-not-a-word") is None


def test_the_front_coded_vocabulary_finds_every_word(tmp_path):
    """Blocks of 16 words, each stored as what it shares with the word before and the rest: words sharing more
    than 255 bytes, words longer than a one-byte length, accents, CJK, emoji, the empty word, block edges."""
    words = {"", "a", "ab", "abc", "b", "é", "éa", "東京", "😀", "x" * 300, "x" * 300 + "y", "x" * 299 + "z", "y" * 200}
    words |= {f"w{i:05d}" for i in range(1000)} | {f"w{i:05d}suffix" for i in range(0, 1000, 3)}
    ordered = sorted(words, key=lambda w: w.encode("utf-8"))
    words |= {"x" * 256, "x" * 255 + "a", "x" * 400 + "b"}  # shared prefixes capped at 255 bytes
    ordered = sorted(words, key=lambda w: w.encode("utf-8"))
    _bm25_parts.write_vocab(tmp_path / "vocab", ordered)
    for compiled in (False, True):  # the Python walk and the compiled one (what a numba search uses)
        v = _bm25.Vocabulary(tmp_path / "vocab", compiled=compiled)
        assert len(v) == len(ordered)
        for i, w in enumerate(ordered):
            assert v.get(w) == i and v[i] == w.encode("utf-8"), w[:20]
        for w in ("zzz", "w00001x", "x" * 301, "x" * 255, "x" * 257, "aa", "w0", "w00001suffi", "\U0010ffff"):
            assert v.get(w) is None, w[:20]
    _bm25_parts.write_vocab(tmp_path / "none", [])
    assert len(_bm25.Vocabulary(tmp_path / "none")) == 0 and _bm25.Vocabulary(tmp_path / "none").get("a") is None


def test_the_postings_decode_to_what_was_encoded(tmp_path):
    """Blocks of every width from 0 to 32 bits (gaps of 1, huge gaps, frequencies of 1 and of 2**32 - 2), partial last
    blocks, terms of one posting: decoded by the compiled loop's reader (through the NumPy one) as written."""
    rng = np.random.default_rng(0)
    n_docs = (1 << 32) - 1
    terms = []
    for size in (1, 2, 127, 128, 129, 1000, 5000):
        for kind in ("dense", "sparse", "huge"):
            if kind == "dense":
                docs = np.arange(size, dtype=np.int64) + int(rng.integers(0, 1000))
            elif kind == "sparse":
                docs = np.unique(rng.integers(0, 1 << 20, size * 2))[:size]
            else:
                docs = np.unique(np.concatenate([[0, n_docs - 1], rng.integers(0, n_docs, size)]))[:size]
            tfs = np.where(rng.random(len(docs)) < 0.1, rng.integers(1, (1 << 32) - 1, len(docs)), 1)
            terms.append((np.sort(docs), tfs))
    starts = np.zeros(len(terms) + 1, np.int64)
    np.cumsum([len(d) for d, _ in terms], out=starts[1:])
    docs = np.concatenate([d for d, _ in terms]).astype(np.uint32)
    tfs = np.concatenate([t for _, t in terms]).astype(np.uint32)
    nblocks = np.array([(len(d) + 127) // 128 for d, _ in terms])
    first = np.zeros(len(terms) + 1, np.int64)
    np.cumsum(nblocks, out=first[1:])
    nb = int(first[-1])
    off, bits, last = np.zeros(nb + 1, np.int64), np.zeros((nb, 2), np.uint8), np.zeros(nb, np.uint32)
    enc = _postings.kernels()["encode"]
    scratch = np.zeros((2, 128), np.int64)
    enc(docs, tfs, starts, first, last, off, bits, np.zeros(0, np.uint32), scratch)
    words = np.zeros((int(off[-1]) + 3) // 4 + 2, np.uint32)  # block offsets are in bytes
    enc(docs, tfs, starts, first, last, off, bits, words, scratch)
    assert bits.max() == 32 and bits.min() == 0

    class Ix:  # what numpy_postings reads
        pass

    ix = Ix()
    ix.words, ix.block_off, ix.block_bits, ix.block_last, ix.term_first = words, off, bits, last, first
    dfs = np.array([len(d) for d, _ in terms], np.int64)
    ix.df = lambda t: dfs[np.asarray(t)]
    for t, (d, f) in enumerate(terms):
        got_d, got_f = _postings.numpy_postings(ix, t)
        assert got_d.tolist() == d.tolist() and got_f.tolist() == f.tolist(), t


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
    with pytest.raises(_bm25_parts.BM25Error, match="vocabulary"):
        _postings.write_postings(tmp_path / "a", tokens, lengths,
                                 {w: i for w, i in vocab.items() if i < len(vocab) - 1},
                                 _params("lucene", 1.5, 0.75, 0.5))
    with pytest.raises(_bm25_parts.BM25Error, match="lengths summing"):
        _postings.write_postings(tmp_path / "b", tokens[:-1], lengths, vocab, _params("lucene", 1.5, 0.75, 0.5))


def test_blocks_hold_at_most_block_passages_and_count_the_sources(shared_data):
    found = Sources()
    blocks = list(passage_blocks("musique", str(MUSIQUE_TRAIN), None, block=100, found=found))
    assert all(len(b) <= 100 for b in blocks) and sum(map(len, blocks)) == found.distinct == found.passages
    assert found.paragraphs == 2000 and len(found.q_ids) == 100


@pytest.mark.slow
def test_the_compiled_search_is_cached_across_processes(built):
    """numba compiles the search once per machine: a second process loads it from the cache (no compilation), so
    a server started again is healthy in about a second; and warming loads only the search this index's queries
    take (term at a time, below a million passages), not the strategies they never run."""
    pytest.importorskip("numba")
    import subprocess
    import sys

    d, manifest, _, _ = built
    code = ("import json, sys\n"
            "from rag_retriever import _bm25, _postings as P\n"
            f"s = _bm25.BM25Searcher({str(d)!r}, {manifest!r}, backend_name='numba', threads=1)\n"
            "s.warm()\n"
            "k = P.kernels()\n"
            "fs = ('pruned_many', 'window_many', 'exhaustive_many')\n"
            "print(json.dumps([[sum(k[f].stats.cache_hits.values()), sum(k[f].stats.cache_misses.values())]"
            " for f in fs]))\n")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True) for _ in range(2)]
    got = json.loads(runs[1].stdout.strip().splitlines()[-1])
    # the index's search loaded from the cache, nothing compiled; the strategies its queries never take not loaded
    assert got == [[1, 0], [0, 0], [0, 0]], runs[1].stdout


def test_pruned_search_is_the_exhaustive_search(built):
    """The pruned term-at-a-time search (the default) and the windowed search (windows of 16,384 and of 23
    passages) give exactly what scoring every posting gives: the same ids and float32 scores, for queries of 1 to
    12 words (repeats included), k from 1 to 50, one at a time and across threads."""
    pytest.importorskip("numba")
    import random

    d, manifest, ref, tok = built
    words = [w for w in ref.vocab_dict if w]
    rng = random.Random(0)
    df = {w: len(ref.get_scores_from_ids([ref.vocab_dict[w]]).nonzero()[0]) for w in words[:3000]}
    common = sorted(df, key=lambda w: -df[w])[:40]
    qs = [" ".join(rng.choice(common if rng.random() < 0.5 else words) for _ in range(rng.randint(1, 12)))
          for _ in range(300)]
    qs += [f"{common[0]} {common[0]} {common[1]}", common[2]]
    pruned = _bm25.BM25Searcher(d, manifest, backend_name="numba", threads=1)
    full = _bm25.BM25Searcher(d, manifest, backend_name="numba", threads=1)
    full.prune = False
    for k in (1, 3, 10, 50):
        a, b = pruned.search(qs, k), full.search(qs, k)
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]), k
        parsed = [pruned.query_terms(q) for q in qs]
        for window in (_postings.SEARCH_WINDOW, 23):  # a window at a time (the default from 1M passages)
            pruned.postings.window = window
            c = pruned.postings.search(parsed, k, windowed=True)
            assert np.array_equal(c[0], b[0]) and np.array_equal(c[1], b[1]), (k, window)
        pruned.postings.window = _postings.SEARCH_WINDOW
    threaded = _bm25.BM25Searcher(d, manifest, backend_name="numba", threads=2)
    threaded_full = _bm25.BM25Searcher(d, manifest, backend_name="numba", threads=3)
    threaded_full.prune = False
    b = full.search(qs, 10)
    parsed = [threaded.query_terms(q) for q in qs]
    threaded.postings.window = 23
    for c in (threaded.search(qs, 10), threaded_full.search(qs, 10),  # slices of the batch on a pool of threads
              threaded.postings.search(parsed, 10, threads=2, windowed=True)):  # (each thread its own window)
        assert np.array_equal(c[0], b[0]) and np.array_equal(c[1], b[1])


def test_the_block_setting_paces_the_build_and_changes_no_byte(shared_data, tmp_path):
    """--block (passages per block: what the build holds besides the vocabulary) gives the same index: every
    file of a build of 256-passage blocks equals the default build's, the manifest's record included."""
    from rag_retriever import IndexConfig, build_index

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


@pytest.mark.parametrize("preset", ["bm25s", "lucene"])
def test_pruned_search_is_exhaustive_on_near_copies(shared_data, tmp_path, preset):
    """A corpus of near copies (each paragraph 12 times, a few of its words dropped or changed in each, as the
    bench's Wikipedia-sized corpus is made): the top scores tie or nearly tie for many passages, so the pruned
    search's margins, its block bounds and its k-th score taken again list by list are all exercised. The pruned
    search gives exactly what scoring every posting gives, ids and float32 scores, at k 1, 3, 10 and 300."""
    pytest.importorskip("numba")
    import random

    from rag_retriever import IndexConfig, build_index, load_index

    titles, texts = [], []
    for block in passage_blocks("musique", str(MUSIQUE_TRAIN), None):
        titles += block.titles
        texts += block.texts
    rng = random.Random(7)
    corpus = tmp_path / "corpus.jsonl"
    with corpus.open("w") as f:
        n = 0
        for title, text in list(zip(titles, texts, strict=True))[:150]:
            for c in range(12):
                words = [w if rng.random() > 0.08 else (f"{w}{c}" if rng.random() < 0.5 else "")
                         for w in text.split()]
                f.write(json.dumps({"id": str(n), "contents": f'"{title}"\n' + " ".join(x for x in words if x)})
                        + "\n")
                n += 1
    out = tmp_path / "ix"
    build_index(IndexConfig(corpus=str(corpus), out=str(out), bm25=preset, depth=1))
    ix = load_index(out)
    s = ix.searcher
    words = [w for x in texts[:150] for w in x.split()]
    qs = [t for t in titles[:150:3]] + [" ".join(x.split()[:12]) for x in texts[:150:2]]
    qs += [" ".join(rng.choice(words) for _ in range(rng.randint(2, 14))) for _ in range(300)]
    parsed = [s.query_terms(q) for q in qs]
    for k in (1, 3, 10, 300):  # (300: the heap of the k best so far searched for a passage only when it can be in it)
        a = s.postings.search(parsed, k)
        b = s.postings.search(parsed, k, prune=False)
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]), k
        for window in (_postings.SEARCH_WINDOW, 29):  # a window at a time (the default from 1M passages)
            s.postings.window = window
            c = s.postings.search(parsed, k, windowed=True)
            assert np.array_equal(c[0], b[0]) and np.array_equal(c[1], b[1]), (k, window)
        assert (a[0][:, 0] >= 0).mean() > 0.95  # (a query of stop words only finds nothing)


def test_the_windowed_search_with_words_of_zero_idf(tmp_path):
    """bm25s's robertson idf is 0 for a word in half the passages or more (clipped there, never negative), so are
    its scores and its blocks' bounds: the windowed search skips such a list in a window, and a query matched with a
    score above 0 by fewer than k passages is finished by the term-at-a-time search (score-0 passages by lower id,
    touched or not). Both give what scoring every posting gives, at windows of 16,384 and of 5 passages."""
    pytest.importorskip("numba")
    titles = [f"t{i}" for i in range(300)]
    texts = [("common " * (1 + i % 3)) + f"rare{i % 7} " + ("mid " if i % 2 else "") + ("x" if i % 5 else "")
             for i in range(300)]
    tok = _bm25.tokenizer(None)
    tokens, lengths = _bm25.tokenize_flat(tok, titles, texts)
    mm = tmp_path / "tokens.int32"
    mm.write_bytes(tokens.tobytes())
    vocab = tok.get_vocab_dict()
    _postings.write_postings(tmp_path / "bm25", np.memmap(mm, dtype=np.int32, mode="r"), lengths, vocab,
                             _params("robertson", 1.5, 0.75, 0.5))
    ix = _postings.PostingsIndex(tmp_path / "bm25", json.loads((tmp_path / "bm25" / "params.json").read_text()))
    words = sorted(vocab, key=lambda w: w.encode("utf-8"))
    qs = ["common", "common rare3", "common mid", "mid", "rare1 rare2 common common", "x common", "rare4 x"]
    parsed = [_parsed(tok, words, q)[1] for q in qs]
    assert ix.stats.one(int(ix.df([parsed[0][0][0]])[0])) == 0  # "common": idf 0
    for k in (1, 3, 10, 200):
        full = ix.search(parsed, k, prune=False)
        for window in (_postings.SEARCH_WINDOW, 5):
            ix.window = window
            win = ix.search(parsed, k, windowed=True)
            assert np.array_equal(win[0], full[0]) and np.array_equal(win[1], full[1]), (k, window)
