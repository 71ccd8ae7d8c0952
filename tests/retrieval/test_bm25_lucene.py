"""The Lucene BM25 preset against Lucene's own outputs, captured from Anserini 0.22.1 (the jar pyserini 0.22.1 runs:
Lucene 9.5) and kept in tests/support/oracles/lucene: its analyzer on crafted text (possessives, accents, numbers,
apostrophes, hyphens, CJK, emoji, tokens past 255 characters, stop words, Porter's corner cases), its one-byte
length norms, and ``SimpleSearcher.search(q, 10)`` (what pyserini's ``LuceneSearcher.search`` calls) for every
question of the shared data over the pooled paragraphs. The same comparison against pyserini run side by side is
in the pyserini tier."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import SHARED_DATA as SHARED
from rag_retriever import _postings
from rag_retriever._analysis import ENGLISH_STOP_WORDS, LuceneEnglishAnalyzer
from rag_retriever._porter import stem_many

ORACLES = Path(__file__).resolve().parents[1] / "support" / "oracles" / "lucene"
#: The shared data's questions and the files whose paragraphs are pooled (in this order; each distinct (title,
#: text) once, in first-seen order: the corpus the oracle was captured on).
POOLED = [("2wikimultihopqa", "2wikimultihopqa/train.sample500.json"),
          ("hotpotqa", "hotpotqa/hotpot_train_v1.1.sample100.json"),
          ("hotpotqa", "hotpotqa/hub_distractor_validation.sample300.jsonl"),
          ("musique", "musique/musique_ans_v1.0_dev.sample200.jsonl"),
          ("musique", "musique/musique_ans_v1.0_train.sample100.jsonl")]


def test_the_analyzer_is_lucenes_on_crafted_text():
    cases = json.loads((ORACLES / "analyzer_cases.json").read_text())
    assert len(cases) > 80
    a = LuceneEnglishAnalyzer()
    got = a.terms_many([c["text"] for c in cases])
    for c, g in zip(cases, got, strict=True):
        assert g == c["terms"], c["text"][:80]
    assert [a.terms(c["text"]) for c in cases[:10]] == [c["terms"] for c in cases[:10]]  # one at a time too


def test_lucene_stop_words_and_porter_corner_cases():
    assert len(ENGLISH_STOP_WORDS) == 33 and "a" in ENGLISH_STOP_WORDS and "s" not in ENGLISH_STOP_WORDS
    # Lucene's Porter is the reference implementation's: bli -> ble, logi -> log, two letters kept
    assert stem_many(["possibly", "anthology", "us", "is", "s", "generalizations", "ponies", "sky", "skies"]) == \
        ["possibl", "antholog", "us", "is", "s", "gener", "poni", "sky", "ski"]


def test_long_tokens_are_cut_at_255_utf16_units():
    a = LuceneEnglishAnalyzer()
    assert [len(t) for t in a.terms("a" * 600)] == [255, 255, 90]
    # 200 letters and 60 of U+10400 (a letter of two UTF-16 units): 255 units hold 200 + 27 of them
    assert [len(t) for t in a.terms("b" * 200 + "\U00010400" * 60)] == [227, 33]
    assert len(a.terms("\U0001F600" * 3000)) == 3000  # emoji side by side: a token each (no separator needed)


def test_length_norms_are_lucenes_smallfloat():
    ref = json.loads((ORACLES / "norms.json").read_text())
    assert _postings.byte4_to_int(np.arange(256)).tolist() == ref["length_table"]
    assert _postings.int_to_byte4(np.arange(len(ref["int_to_byte4"]))).tolist() == ref["int_to_byte4"]


def _pooled_corpus(path: Path) -> list[str]:
    from rag_curriculum.loaders import load_examples

    seen: dict[tuple[str, str], int] = {}
    questions = []
    for dataset, name in POOLED:
        for ex in load_examples(dataset, str(SHARED / name)):
            questions.append(ex.question)
            for d in ex.documents:
                seen.setdefault((d.title, d.text), len(seen))
    with open(path, "w", encoding="utf-8") as f:
        for (title, text), i in seen.items():
            f.write(json.dumps({"id": str(i), "contents": title.replace("\n", " ") + "\n" + text},
                               ensure_ascii=False) + "\n")
    return questions


@pytest.fixture(scope="module")
def lucene_index(tmp_path_factory, shared_data):
    d = tmp_path_factory.mktemp("lucene")
    questions = _pooled_corpus(d / "corpus.jsonl")
    r = subprocess.run([sys.executable, "-m", "rag_curriculum.cli", "index", "--corpus", str(d / "corpus.jsonl"),
                        "--out", str(d / "ix")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "lucene (pyserini's defaults) k1=0.9 b=0.4" in r.stdout  # a Search-R1 corpus: the Lucene preset by itself
    return d / "ix", questions


@pytest.mark.slow
def test_the_lucene_preset_ranks_as_anserini_on_the_shared_data(lucene_index):
    """Every one of the 1,200 questions: the same 10 passages in the same order, the same float32 scores."""
    from rag_retriever import load_index

    d, questions = lucene_index
    want = [json.loads(x) for x in gzip.open(ORACLES / "shared_top10.jsonl.gz", "rt")]
    assert len(want) == len(questions) == 1200
    ix = load_index(d)
    m = ix.manifest
    assert m["bm25"]["preset"] == "lucene" and m["config"]["bm25"] == "lucene" and m["config"]["k1"] == 0.9
    ids, scores = ix.retrieve_many(questions, 10)
    for q, row_ids, row_scores, w in zip(questions, ids, scores, want, strict=True):
        got_ids = [ix.documents([p])[0][0] for p in row_ids if p >= 0]
        assert got_ids == [x[0] for x in w], q
        assert row_scores[:len(w)].tolist() == np.float32([x[1] for x in w]).tolist(), q
    pruned = ix.searcher
    parsed = [pruned.query_terms(q) for q in questions[:300]]
    # every posting scored; term at a time; a window at a time (the default from 1M passages),
    # in windows of the default size and of 37 passages (hundreds of windows, their bounds taken window by window)
    for window, how in ((None, {"prune": False}), (None, {"windowed": False}),
                        (_postings.SEARCH_WINDOW, {"windowed": True}), (37, {"windowed": True})):
        pruned.postings.window = window or _postings.SEARCH_WINDOW
        got = pruned.postings.search(parsed, 10, **how)
        assert np.array_equal(got[0], ids[:300]) and np.array_equal(got[1], scores[:300]), (window, how)
    plain = _postings.numpy_search(pruned.postings, parsed, 10)  # and the NumPy backend's own arithmetic
    assert np.array_equal(plain[0], ids[:300]) and np.array_equal(plain[1], scores[:300])


def test_the_lucene_preset_returns_only_matching_passages(lucene_index):
    from rag_retriever import load_index

    ix = load_index(lucene_index[0])
    ids, scores = ix.retrieve_many(["the of and", "zzqxjw", "Copenhagen"], 5)
    assert (ids[0] == -1).all() and (ids[1] == -1).all()  # stop words only; an unknown word: nothing
    assert 0 < (ids[2] >= 0).sum() <= 5 and scores[2][0] > 0


def test_a_preset_edited_in_the_manifest_is_named_as_such(lucene_index, tmp_path):
    """The Lucene preset's manifest made anew saying bm25s (or no preset): refused naming the preset the postings
    were built with (it was "built with bm25s None", the bm25s version its manifest never had)."""
    import shutil

    from rag_retriever import RetrievalIndexError, load_index
    from support.index_edits import resealed

    for name, edit, says in (("bm25s", lambda m: m["bm25"].update(preset="bm25s"), "'bm25s'"),
                             ("none", lambda m: m["bm25"].pop("preset"), "absent")):
        d = shutil.copytree(lucene_index[0], tmp_path / name)
        resealed(d, edit)
        with pytest.raises(RetrievalIndexError) as e:
            load_index(d)
        assert str(e.value) == (f"{d}: bm25/params.json, what the postings were built with, disagrees with "
                                f"manifest.json: bm25.preset 'lucene' there, {says} in manifest.json"), str(e.value)


def test_the_presets_label_says_pyserinis_defaults_only_at_its_k1_and_b():
    from rag_retriever._bm25 import summary

    assert summary({"bm25": {"preset": "lucene", "k1": 0.9, "b": 0.4}}) == "lucene (pyserini's defaults) k1=0.9 b=0.4"
    for k1, b in ((0.0, 0.0), (1.2, 0.4), (0.9, 0.75)):  # --k1 0 --b 0 was labelled pyserini's defaults
        assert summary({"bm25": {"preset": "lucene", "k1": k1, "b": b}}) == (
            f"lucene (pyserini's analyzer and scoring, k1 and b given) k1={k1} b={b}")


@pytest.mark.slow
def test_an_unknown_preset_is_one_line_and_writes_nothing(tmp_path, shared_data):
    out = tmp_path / "ix"
    r = subprocess.run([sys.executable, "-m", "rag_curriculum.cli", "index", "--dataset", "musique", "--input",
                        str(SHARED / "musique/musique_ans_v1.0_train.sample100.jsonl"), "--bm25", "lucen",
                        "--out", str(out)], capture_output=True, text=True)
    assert r.returncode == 2 and not out.exists() and not any(tmp_path.iterdir())
    err = [x for x in r.stderr.strip().splitlines() if x.strip()]
    assert "lucen" in r.stderr and "lucene" in r.stderr and len(err) <= 2, r.stderr
    r = subprocess.run([sys.executable, "-m", "rag_curriculum.cli", "index", "--dataset", "musique", "--input",
                        str(SHARED / "musique/musique_ans_v1.0_train.sample100.jsonl"), "--bm25", "lucene",
                        "--method", "bm25l", "--out", str(out)], capture_output=True, text=True)
    assert r.returncode != 0 and "--method is a bm25s option" in r.stderr and not out.exists()
