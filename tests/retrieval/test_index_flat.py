"""The index is built from flat token arrays (4 bytes a token, so a Wikipedia-sized corpus fits in memory), with the
score matrix computed by numpy; it must be bm25s's own ``BM25.index`` of the same passages, byte for byte, for
every BM25 variant, any parameters and any chunking."""

from __future__ import annotations

import filecmp

import bm25s
import numpy as np
import pyarrow as pa
import pytest
from conftest import MUSIQUE_TRAIN, TWOWIKI_TRAIN

from rag_curriculum.retrieval import _index
from rag_curriculum.retrieval._corpus import Collected, collect
from rag_curriculum.retrieval._index import _tokenizer, index_flat, tokenize, tokenize_flat


@pytest.fixture(scope="module", params=[("musique", MUSIQUE_TRAIN), ("2wikimultihopqa", TWOWIKI_TRAIN)],
                ids=["musique", "2wiki"])
def passages(request, shared_data):
    col = collect(*request.param)
    return col.titles, col.texts


def _saved(retriever, path):
    retriever.save(str(path), show_progress=False)
    return sorted(p.name for p in path.iterdir())


@pytest.mark.parametrize("method", ["lucene", "robertson", "atire", "bm25l", "bm25+"])
@pytest.mark.parametrize(("stopwords", "k1", "b", "delta", "steps"),
                         [("en", 1.5, 0.75, 0.5, (1 << 16, 1 << 22)), (None, 0.9, 0.4, 1.0, (37, 1001))],
                         ids=["defaults", "odd-parameters-small-steps"])
def test_the_flat_build_is_bm25s_own_index_byte_for_byte(passages, tmp_path, method, stopwords, k1, b, delta, steps):
    titles, texts = passages
    old_tok, new_tok = _tokenizer(stopwords), _tokenizer(stopwords)
    old = bm25s.BM25(method=method, k1=k1, b=b, delta=delta, backend="numpy")
    ids = tokenize(old_tok, [f"{t} {x}" for t, x in zip(titles, texts, strict=True)], update_vocab=True)
    old_vocab = old_tok.get_vocab_dict()
    old.index((ids, old_vocab), show_progress=False)

    new = bm25s.BM25(method=method, k1=k1, b=b, delta=delta, backend="numpy")
    tokens, lengths = tokenize_flat(new_tok, titles, texts)
    assert tokens.dtype == np.int32 and lengths.dtype == np.int64 and len(lengths) == len(titles)
    assert tokens.tolist() == [i for doc in ids for i in doc] and lengths.tolist() == [len(d) for d in ids]
    new_vocab = new_tok.get_vocab_dict()
    index_flat(new, tokens, lengths, new_vocab, docs_per_step=steps[0], pairs_per_step=steps[1])

    assert new_vocab == old_vocab and "" in new_vocab  # the empty token added to the same dict, as bm25s does
    names = _saved(old, tmp_path / "old")
    assert names == _saved(new, tmp_path / "new") and "data.csc.index.npy" in names
    assert ("nonoccurrence_array.index.npy" in names) == (method in ("bm25l", "bm25+"))
    for name in names:
        assert filecmp.cmp(tmp_path / "old" / name, tmp_path / "new" / name, shallow=False), name
    query = ids[3][:6]
    got, want = new.get_scores_from_ids(query), old.get_scores_from_ids(query)
    assert np.array_equal(got, want) and want.max() > 0


def test_an_empty_passage_list_indexes_nothing(tmp_path):
    tokens, lengths = tokenize_flat(_tokenizer("en"), [], [])
    assert tokens.dtype == np.int32 and len(tokens) == 0 and len(lengths) == 0


@pytest.mark.parametrize("rows", [7, 1 << 16])
def test_passages_written_batch_by_batch_are_the_whole_tables_bytes(passages, tmp_path, monkeypatch, rows):
    """passages.arrow is written one record batch at a time (the normalised texts of one batch in memory): the same
    table in the same batches of ARROW_ROWS rows as the whole table written at once (the same bytes when it is one
    batch; with several, Arrow lays a slice's buffers out otherwise, the same table, deterministic)."""
    monkeypatch.setattr(_index, "ARROW_ROWS", rows)
    titles, texts = passages
    col = Collected(titles=list(titles), texts=list(texts), origins=["dataset"] * len(titles))
    _index._write_passages(tmp_path / "streamed.arrow", col)
    _index._write_arrow(tmp_path / "whole.arrow", {
        "title": titles, "text": texts, "origin": col.origins,
        "norm": [_index.normalize_passage(t, x) for t, x in zip(titles, texts, strict=True)]})
    streamed, whole = (pa.ipc.open_file(pa.memory_map(str(tmp_path / f"{n}.arrow"))) for n in ("streamed", "whole"))
    assert streamed.num_record_batches == whole.num_record_batches == -(-len(titles) // rows)
    assert streamed.read_all().equals(whole.read_all())
    if rows > len(titles):  # one batch (every index of the shared samples, the golden outputs): the same bytes
        assert (tmp_path / "streamed.arrow").read_bytes() == (tmp_path / "whole.arrow").read_bytes()
    _index._write_passages(tmp_path / "empty.arrow", Collected())
    assert (tmp_path / "empty.arrow").stat().st_size > 0


def test_auto_picks_numba_for_many_questions_or_a_big_index(monkeypatch):
    import builtins
    import sys
    import types

    monkeypatch.setitem(sys.modules, "numba", types.ModuleType("numba"))  # installed
    assert _index._backend("auto", 100, 5_000) == "numpy"
    assert _index._backend("auto", 20_000, 5_000) == _index._backend("auto", 0, 1_000_000) == "numba"
    assert _index._backend("numpy", 0, 5_000_000) == "numpy" and _index._backend("numba") == "numba"
    real = builtins.__import__
    monkeypatch.delitem(sys.modules, "numba")
    monkeypatch.setattr(builtins, "__import__", lambda name, *a, **k: (_ for _ in ()).throw(ImportError(name))
                        if name == "numba" else real(name, *a, **k))
    assert _index._backend("auto", 0, 5_000_000) == "numpy"  # not installed: numpy, with the same scores


def test_mismatched_arrays_are_refused_not_indexed(passages):
    titles, texts = passages
    tok = _tokenizer("en")
    tokens, lengths = tokenize_flat(tok, titles[:50], texts[:50])
    vocab = dict(tok.get_vocab_dict())
    with pytest.raises(_index.IndexError_, match="vocabulary"):
        index_flat(bm25s.BM25(), tokens, lengths, {w: i for w, i in vocab.items() if i < len(vocab) - 1})
    with pytest.raises(_index.IndexError_, match="lengths summing"):
        index_flat(bm25s.BM25(), tokens[:-1], lengths, vocab)
