"""The BM25 sources' answer filter and the retrieved setting's depth: an answer alias that is a
stop word ("in") or one or two characters long no longer filters nearly every passage out, so rows keep their
passage count; a retrieved build asking for more passages than the index ranks is refused."""

from __future__ import annotations

import json

import bm25s.stopwords
import pytest
from conftest import MUSIQUE_TRAIN
from rag_retriever import IndexConfig, build_index

from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
from rag_curriculum.curricula.distractors import MIN_ALIAS_CHARS, STOP_WORDS, _AnswerFilter, _matched_answers
from rag_curriculum.errors import BuildError
from rag_curriculum.loaders import load_examples
from rag_curriculum.shards import read_rows


def test_the_stop_words_are_the_index_tokenizers():
    assert frozenset(bm25s.stopwords.STOPWORDS_EN) == STOP_WORDS and MIN_ALIAS_CHARS == 3


def test_stop_word_and_short_aliases_are_not_looked_for():
    assert _matched_answers(["in"]) == []  # a first answer made of stop words too
    assert _matched_answers(["Paris", "in", "to be", "us", "The U.S."]) == ["paris"]  # "The U.S." -> "us": short
    assert _matched_answers(["UK", "United Kingdom"]) == ["uk", "united kingdom"]  # a short first answer stays
    assert _matched_answers(["Yes"]) == [] and _matched_answers(["The Beatles", "the beatles"]) == ["beatles"]
    f = _AnswerFilter(["Paris", "in"])
    assert not f("Lyon", "A city in France.") and f("Capital", "It lies in Paris.")


@pytest.fixture(scope="module")
def with_in_alias(tmp_path_factory, shared_data):
    """The real MuSiQue sample with the alias "in" given to its first 10 questions (as MuSiQue's
    3hop1__379315_160713_77246 has it), and a BM25 index of it."""
    tmp = tmp_path_factory.mktemp("alias")
    lines = MUSIQUE_TRAIN.read_text(encoding="utf-8").splitlines()
    recs = [json.loads(x) for x in lines if x.strip()]
    for r in recs[:10]:
        r["answer_aliases"] = [*r.get("answer_aliases", []), "in"]
    path = tmp / "musique_ans_v1.0_train.alias.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    index = tmp / "index"
    build_index(IndexConfig(dataset="musique", input=str(path), out=str(index), depth=60))
    return path, index, {r["id"] for r in recs[:10]}


@pytest.mark.slow
def test_a_stop_word_alias_keeps_every_passage(with_in_alias, tmp_path):
    path, index, changed = with_in_alias
    cfg = BuildConfig(sources=[SourceSpec("musique", str(path), None)], schedule="max", K=20, distractors="bm25",
                      index=str(index), unanswerable_fraction=0.5, out=str(tmp_path / "b"))
    res = build_curriculum(cfg, command="test")
    rows = {r["source_id"]: r for r in read_rows(res.out)}
    hops = {ex.id: ex.hops for ex in load_examples("musique", path)}
    assert changed <= set(rows)
    for qid in changed:  # level 20: d = 20 + 2 - j distractors; an unanswerable row shows as many passages
        assert len(rows[qid]["passages"]) == 22, (qid, rows[qid]["answerable"], hops[qid])
    assert res.manifest["unanswerable"]["short_rows"] == 0
    assert sum(not rows[q]["answerable"] for q in changed) >= 2  # both kinds of row are checked


def test_retrieved_top_k_beyond_the_index_depth_is_refused(with_in_alias, tmp_path):
    path, index, _ = with_in_alias
    cfg = BuildConfig(sources=[SourceSpec("musique", str(path), 5, split="dev")], setting="retrieved", top_k=61,
                      index=str(index), out=str(tmp_path / "r"), allow_split_mismatch=True)
    with pytest.raises(BuildError, match=r"--top-k 61: .* ranks 60 passages per question.*--depth 61"):
        build_curriculum(cfg, command="test")
    assert not (tmp_path / "r").exists()
    cfg.top_k, cfg.out = 60, str(tmp_path / "r60")
    assert build_curriculum(cfg, command="test").rows == 5
