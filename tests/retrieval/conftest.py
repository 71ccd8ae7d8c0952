"""Fixtures the retrieval tests share: a 30-question MuSiQue input and its BM25 index (depth 10), made once per
test file. A file that defines its own ``small_input`` or ``bm25`` uses its own."""

from __future__ import annotations

import pytest
from conftest import MUSIQUE_TRAIN


@pytest.fixture(scope="module")
def small_input(tmp_path_factory):
    path = tmp_path_factory.mktemp("small-in") / "musique_train.jsonl"
    path.write_text("".join(MUSIQUE_TRAIN.read_text().splitlines(keepends=True)[:30]))
    return path


@pytest.fixture(scope="module")
def bm25(tmp_path_factory, small_input):
    from rag_retriever import IndexConfig, build_index

    out = tmp_path_factory.mktemp("small-bm25") / "bm25"
    build_index(IndexConfig(dataset="musique", input=str(small_input), out=str(out), depth=10))
    return out
