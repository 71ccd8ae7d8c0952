"""The names rag_curriculum.retrieval held before the retriever became its own distribution still import from
there for one release, each the very object rag_retriever has, with a DeprecationWarning naming its new place; and
the toolkit's loaders are the retriever's dataset reader."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize("name", ["IndexConfig", "build_index", "load_index", "get_kind", "CorpusIndex",
                                  "RetrievalIndexError", "passage_hash", "KINDS"])
def test_a_moved_name_imports_with_a_warning_naming_rag_retriever(name):
    import rag_retriever

    old = importlib.import_module("rag_curriculum.retrieval")
    with pytest.warns(DeprecationWarning, match=rf"rag_curriculum\.retrieval\.{name} moved to rag_retriever\.{name}"):
        value = getattr(old, name)
    assert value is getattr(rag_retriever, name)


def test_the_serving_module_moved_with_a_warning():
    from rag_retriever import serving

    old = importlib.import_module("rag_curriculum.retrieval.serving")
    with pytest.warns(DeprecationWarning, match="rag_retriever.serving.make_app"):
        assert old.make_app is serving.make_app


def test_an_unknown_name_is_still_an_attribute_error():
    old = importlib.import_module("rag_curriculum.retrieval")
    with pytest.raises(AttributeError):
        old.no_such_name  # noqa: B018


def test_the_toolkits_loaders_read_a_dataset_for_the_retriever(tmp_path):
    from rag_retriever import IndexConfig, build_index, load_index
    from rag_retriever._datasets import dataset_reader

    import rag_curriculum.retrieval as adapter

    assert dataset_reader() is adapter.READER
    assert adapter.READER.name("2wiki") == "2wikimultihopqa"
    sample = "../shared/data/musique/musique_ans_v1.0_dev.sample200.jsonl"
    m = build_index(IndexConfig(dataset="musique", input=sample, out=str(tmp_path / "idx")))
    assert m["dataset"] == "musique" and m["questions"] == 200
    assert len(load_index(tmp_path / "idx")) == m["passages"]


def test_the_retrievers_answer_normalisation_is_the_toolkits():
    """The passage store's normalised texts (what a build's answer test searches) are normalised by the retriever's
    copy of the toolkit's SQuAD normalisation: the two must agree, or a passage holding the answer would slip
    through as a distractor."""
    from rag_plumbing import normalize_answer as retriever_norm

    from rag_curriculum._metrics import normalize_answer

    texts = ["A.P.J. Abdul Kalam", "3 a.m.", "Ålesund", "The  Beatles' \"Help!\"", "an apple a day", "the",
             "Théâtre—d'l'Odéon (1782)", "  tabs\tand\nnewlines  ", "a-the-an", "\ud800 lone", "ＡＢＣ ａｎ"]
    for text in texts:
        assert retriever_norm(text) == normalize_answer(text), text
