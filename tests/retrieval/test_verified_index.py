"""One meaning of verified: ``curriculum serve --verify`` and ``load_index(verify=True)`` check what ``curriculum
validate`` checks (every file hashed, the passages' digest, their keys and the fingerprint recomputed from the
files, the postings decoded whole, the stored rankings ranked again), and a verified index announces the
fingerprint it computed; ``validate`` ranks every stored ranking of a small index (``--full``: of any) and checks
the passages' keys; an open says which files it hashed whole and how much of each large one it sampled, with
``--verify`` named. Each edit below is made with every record remade (``index_edits.resealed``), so only reading
the files finds it."""

from __future__ import annotations

import logging
import shutil

import numpy as np
import pytest
from rag_retriever import RetrievalIndexError, _integrity, load_index
from support.cli_runs import one_error, run
from support.index_edits import resealed
from support.servers import busy_port

pytest.importorskip("bm25s")


def _other_passages(d, tmp_path):
    """``passages.bin`` written again with one passage's text changed, its record remade (the fingerprint and the
    manifest's ``content.passages`` untouched: they describe the passages it held)."""
    from rag_retriever._corpus import Passages
    from rag_retriever._store import StoreWriter

    ix = load_index(d)
    rows = ix.rows(range(len(ix)))
    del ix
    block = Passages()
    for i, (t, x, o, pid, pre) in enumerate(rows):
        block.add(t, "A forged passage." if i == 3 else x, o, pid, pre)
    w = StoreWriter(tmp_path, ("passages",))
    w.add(block)
    w.finish()
    shutil.move(tmp_path / "passages.bin", d / "passages.bin")
    resealed(d)


def test_passages_rewritten_with_their_records_are_refused_by_verify_and_serve_verify(bm25, tmp_path):
    d = tmp_path / "d"
    shutil.copytree(bm25, d)
    _other_passages(d, tmp_path)
    assert load_index(d).passage(3)[1] == "A forged passage."  # an open trusts the records (the documented cost)
    want = (f"{d}: passages.bin: its passages are not the ones the fingerprint was made of (their digest differs "
            "from the manifest's content.passages)")
    with pytest.raises(RetrievalIndexError) as e:
        load_index(d, verify=True)
    assert str(e.value) == want
    line = one_error(run("serve", "--index", d, "--verify", "--port", busy_port()))
    assert line == f"error: {want}", line


def test_a_reversed_stored_ranking_is_refused_by_validate(bm25, tmp_path):
    d = tmp_path / "d"
    shutil.copytree(bm25, d)
    ids = np.load(d / "ranked_ids.npy")
    ids[1] = ids[1][::-1].copy()  # row 1: the sample of 32 rows, 0, 3, 6, ..., never ranked it again
    np.save(d / "ranked_ids.npy", ids)
    resealed(d)
    qid = load_index(d)._q_ids[1]
    line = one_error(run("validate", d))
    assert f"ranked_ids.npy: the stored ranking of question {qid!r} (row 1) is not what the index ranks" in line
    with pytest.raises(RetrievalIndexError, match=r"\(row 1\) is not what the index ranks"):
        load_index(d, verify=True)


def test_forged_passage_keys_are_refused_by_validate_and_verify(bm25, tmp_path):
    d = tmp_path / "d"
    shutil.copytree(bm25, d)
    keys = np.load(d / "passage_keys.npy")
    np.save(d / "passage_keys.npy", np.full_like(keys, keys[0]))  # every key one value
    resealed(d)
    line = one_error(run("validate", d))
    assert line.startswith(f"error: {d}: passage_keys.npy: passage 1's key {int(keys[0])} is not the hash of its "
                           "title and text ("), line
    with pytest.raises(RetrievalIndexError, match="passage_keys.npy: passage 1's key"):
        load_index(d, verify=True)


def test_validate_says_how_many_stored_rankings_it_ranked_and_full_ranks_every_one(bm25, monkeypatch):
    from rag_retriever import _index

    r = run("validate", bm25)
    assert r.exit_code == 0 and "all 30 stored rankings ranked again" in r.output, r.output
    assert "the passages' digest, their 593 keys and the fingerprint" in r.output, r.output
    monkeypatch.setattr(_index, "RERANKED", 7)
    monkeypatch.setattr(_index.CorpusIndex.verify, "__defaults__", None)  # (the default is bound at definition)
    monkeypatch.setattr(_index.CorpusIndex.verify, "__kwdefaults__", {"rerank": 7})
    r = run("validate", bm25)
    assert r.exit_code == 0 and "7 of 30 stored rankings ranked again (an even sample: --full ranks every one)" in \
        r.output, r.output
    r = run("validate", bm25, "--full")
    assert r.exit_code == 0 and "all 30 stored rankings ranked again" in r.output, r.output


def test_a_verified_index_announces_the_fingerprint_it_computed(bm25):
    ix = load_index(bm25, verify=True)
    assert ix.verified["fingerprint"] == ix.fingerprint == ix.manifest["fingerprint"]
    assert ix.verified == {"reranked": 30, "questions": 30, "keys": 593, "fingerprint": ix.fingerprint}
    r = run("serve", "--index", bm25, "--verify", "--port", busy_port())  # (a busy port: it stops once the index is checked)
    assert ("checked (--verify): 16 of 16 files hashed whole" in r.output and
            f"the fingerprint {ix.fingerprint[:16]}... recomputed from the files, 30 of 30 stored rankings ranked "
            "again" in r.output), r.output


def test_an_open_says_which_files_it_hashed_whole_and_how_much_of_each_large_one_it_sampled(bm25, caplog,
                                                                                            monkeypatch):
    ix = load_index(bm25)
    assert ix.check_line().startswith("checked at open: 16 of 16 files hashed whole (")
    assert "--verify (load_index(verify=True))" in ix.check_line()
    # the same index read as if its files were large: the recorded samples of files over 4 KiB
    monkeypatch.setattr(_integrity, "WHOLE", 4096)
    monkeypatch.setattr(_integrity, "CHUNK", 256)
    monkeypatch.setattr(_integrity, "SAMPLES", 4)
    files = ix.manifest["files"]
    big = sorted(n for n, r in files.items() if r["bytes"] > 4096 and not n.startswith("bm25/"))
    assert big
    d = bm25.parent / "sampled"
    if not d.exists():
        shutil.copytree(bm25, d)
        resealed(d)  # records made with the sampled digests of the files over 4 KiB
    with caplog.at_level(logging.INFO, logger="rag_retriever._index"):
        ix = load_index(d)
    line = ix.check_line()
    for name in big:
        pct = 100 * 4 * 256 / files[name]["bytes"]
        assert f"{name} {pct:.2g}% of {files[name]['bytes'] / 1e6:,.1f} MB" in line, line
    assert "--verify" in line and line in caplog.text, (line, caplog.text)
    r = run("serve", "--index", d, "--port", busy_port())
    assert "checked at open: " in r.output and "sampled: " in r.output and "--verify" in r.output, r.output
