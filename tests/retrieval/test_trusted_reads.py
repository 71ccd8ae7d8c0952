"""What a build, a partition, a profile or an eval reads from an index is checked as ``curriculum validate`` checks
it, before use: a stored ranking is ranked again before a build uses it, a passage's key is recomputed from its
title and text before anything compares it, so an index forged with its manifest remade (``index_edits.resealed``)
is refused in one line naming the file, not used to write rows that differ."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from rag_retriever import RetrievalIndexError, load_index
from support.cli_runs import one_error, run
from support.index_edits import resealed

pytest.importorskip("bm25s")


def _build(small_input, d, out):
    return run("build", "-d", "musique", "-i", small_input, "--distractors", "bm25", "--index", d, "-o", out,
               "--no-progress")


def _reversed(bm25, tmp_path, row=1):
    d = tmp_path / "d"
    shutil.copytree(bm25, d)
    ids = np.load(d / "ranked_ids.npy")
    ids[row] = ids[row][::-1].copy()
    np.save(d / "ranked_ids.npy", ids)
    resealed(d)
    return d


def test_a_build_refuses_an_index_whose_stored_ranking_was_reversed(bm25, small_input, tmp_path):
    d = _reversed(bm25, tmp_path)
    qid = load_index(d)._q_ids[1]
    line = one_error(_build(small_input, d, tmp_path / "out"))
    assert line.startswith(f"error: {d}: ranked_ids.npy: the stored ranking of question {qid!r} (row 1) is not what "
                           "the index ranks for it"), line
    assert not (tmp_path / "out").exists()


def test_a_build_refuses_an_index_whose_passage_keys_were_forged(bm25, small_input, tmp_path):
    d = tmp_path / "d"
    shutil.copytree(bm25, d)
    keys = np.load(d / "passage_keys.npy")
    np.save(d / "passage_keys.npy", np.full_like(keys, keys[0]))
    resealed(d)
    line = one_error(_build(small_input, d, tmp_path / "out"))
    assert "passage_keys.npy: passage " in line and "is not the hash of its title and text" in line, line
    assert line.startswith(f"error: {d}: "), line
    assert not (tmp_path / "out").exists()


def test_an_unforged_index_builds_as_before(bm25, small_input, tmp_path):
    r = _build(small_input, bm25, tmp_path / "out")
    assert r.exit_code == 0, r.output


def test_the_checks_a_reader_calls_refuse_what_validate_refuses(bm25, tmp_path):
    ix = load_index(_reversed(bm25, tmp_path, row=2))
    with pytest.raises(RetrievalIndexError, match=r"ranked_ids.npy: the stored ranking .* \(row 2\) is not what"):
        ix.check_stored([0, 2])
    ix.check_stored([0, 1, 3])  # the others are what the index ranks
    keys = np.asarray(ix.keys).copy()
    keys[5] += 1
    ix.check_keys([4], keys)
    with pytest.raises(RetrievalIndexError, match="passage_keys.npy: passage 5's key"):
        ix.check_keys([4, 5], keys)


def test_a_passage_rewritten_with_its_records_remade_is_refused_before_it_is_shown(bm25, tmp_path):
    """The passage store written again with one passage's text changed (its record remade): an eval, a profile or
    a partition searching the index in process (:class:`IndexRetriever`) refuses it when a search returns it."""
    from rag_retriever._corpus import Passages
    from rag_retriever._store import StoreWriter

    from rag_curriculum.agents import IndexRetriever

    d = tmp_path / "d"
    shutil.copytree(bm25, d)
    ix = load_index(d)
    rows = ix.rows(range(len(ix)))
    title = rows[3][0]
    del ix
    block = Passages()
    for i, (t, x, o, pid, pre) in enumerate(rows):
        block.add(t, "A forged passage." if i == 3 else x, o, pid, pre)
    w = StoreWriter(tmp_path, ("passages",))
    w.add(block)
    w.finish()
    shutil.move(tmp_path / "passages.bin", d / "passages.bin")
    resealed(d)
    with pytest.raises(RetrievalIndexError, match=r"passage_keys.npy: passage 3's key .* is not the hash of its "):
        IndexRetriever(d).search([title], 5)
