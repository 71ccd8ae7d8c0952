"""The BM25 build drops the pages of the temporary files it has read from its resident memory (``_release``): a
memory-mapped file read whole counts in the process's RSS until then (the 5.2M build's 12.7 GB peak)."""

import sys
from pathlib import Path

import numpy as np
import pytest
from rag_retriever import _postings


def _rss_file_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssFile:"):
            return int(line.split()[1])
    raise AssertionError("no RssFile line")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status (Linux)")
def test_release_drops_a_read_maps_pages_and_keeps_its_data(tmp_path):
    path = tmp_path / "tokens.bin"
    np.arange(16 << 20, dtype=np.int32).tofile(path)  # 64 MB
    tokens = np.memmap(path, dtype=np.int32, mode="r")
    before = _rss_file_kb()
    assert int(tokens.sum(dtype=np.int64)) == (16 << 20) * ((16 << 20) - 1) // 2  # every page touched
    touched = _rss_file_kb()
    assert touched - before > 50_000  # the file's pages count as this process's memory
    _postings._release(tokens[10:20])  # a view: its map is found through its base
    assert touched - _rss_file_kb() > 50_000
    assert int(tokens[12]) == 12 and int(tokens[-1]) == (16 << 20) - 1  # read back from the page cache
    _postings._release(np.zeros(3))  # an array in memory: nothing to drop, no error


@pytest.mark.parametrize("preset", ["lucene", "bm25s"])
def test_postings_written_a_range_of_terms_at_a_time_are_the_same_files(preset, shared_data, tmp_path):
    """Pass 2 takes the vocabulary a range of terms at a time (the whole collection's term-order postings, 8 bytes
    each, would not fit in memory at Wikipedia's size): cut into ranges of 500 postings here (hundreds of ranges,
    some a single slice larger than that), with small steps, every file is byte for byte the one-range build's."""
    from conftest import MUSIQUE_TRAIN
    from rag_retriever._analysis import Bm25sWords, LuceneEnglishAnalyzer, TermIds
    from rag_retriever._bm25 import stopword_list
    from rag_retriever._corpus import passage_blocks

    texts = [f"{t} {x}" for b in passage_blocks("musique", str(MUSIQUE_TRAIN), None)
             for t, x in zip(b.titles, b.texts, strict=True)]
    terms = TermIds(LuceneEnglishAnalyzer() if preset == "lucene" else Bm25sWords(stopword_list("en")))
    tokens, lengths = terms.ids(texts)
    terms.release()
    with pytest.raises(RuntimeError, match="release"):
        terms.ids(["more"])
    params = ({"preset": "lucene", "k1": 0.9, "b": 0.4} if preset == "lucene" else
              {"k1": 1.5, "b": 0.75, "method": "lucene", "idf_method": "lucene", "delta": 0.5, "dtype": "float32"})
    ids = [f"d{i}" for i in range(len(lengths))] if preset == "lucene" else None
    whole = _postings.write_postings(tmp_path / "whole", tokens, lengths, terms.vocab, params, doc_ids=ids)
    assert len(_postings._ranges(np.array([0, 10, 20, 5000, 5010]), 500)) == 3  # a slice over budget: alone
    ranged = _postings.write_postings(tmp_path / "ranged", tokens, lengths, terms.vocab, params, doc_ids=ids,
                                      docs_per_step=97, postings_per_range=500)
    assert ranged == whole and whole["postings"] > 100 * 500
    names = sorted(p.name for p in (tmp_path / "whole").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "ranged").iterdir()) and "words.npy" in names
    for name in names:
        assert (tmp_path / "whole" / name).read_bytes() == (tmp_path / "ranged" / name).read_bytes(), name


@pytest.mark.parametrize("preset", ["lucene", "bm25s"])
def test_term_ids_block_after_block_are_the_ids_of_one_call(preset, shared_data):
    """A build reads passages a block at a time: each block's new surface forms get their ids written at the slots
    the lookup recorded, so a later block finds them there (not a placeholder of an earlier block). Blocks of 37
    passages, the table growing many times over, give the ids and vocabulary of one call over all of them."""
    from conftest import MUSIQUE_TRAIN
    from rag_retriever._analysis import Bm25sWords, LuceneEnglishAnalyzer, TermIds
    from rag_retriever._bm25 import stopword_list
    from rag_retriever._corpus import passage_blocks

    texts = [f"{t} {x}" for b in passage_blocks("musique", str(MUSIQUE_TRAIN), None)
             for t, x in zip(b.titles, b.texts, strict=True)]

    def analyzer():
        return LuceneEnglishAnalyzer() if preset == "lucene" else Bm25sWords(stopword_list("en"))

    one = TermIds(analyzer())
    want, want_len = one.ids(texts)
    blocks = TermIds(analyzer())
    parts = [blocks.ids(texts[i:i + 37]) for i in range(0, len(texts), 37)]
    assert len(parts) > 50 and len(one.vocab) > 5000
    assert blocks.vocab == one.vocab
    assert np.array_equal(np.concatenate([p[0] for p in parts]), want)
    assert np.array_equal(np.concatenate([p[1] for p in parts]), want_len)
