"""Retrieval: an index over a dataset's paragraphs and/or a corpus, with its questions' rankings stored (for BM25
distractors and the ``retrieved`` evaluation setting) and a server for search agents. The retriever is a kind
(:mod:`._kinds`): ``bm25`` (bm25s), ``dense``, ``hybrid``, or a user's, one module each behind one interface, registered
once in :data:`KINDS`.

>>> from rag_curriculum.retrieval import IndexConfig
>>> IndexConfig(dataset="musique", input="f.jsonl").bm25  # the preset: lucene for Search-R1 corpora, else bm25s
'auto'
"""

from typing import Any

from . import _config
from ._bm25 import METHODS, SPLITTER
from ._config import ServeConfig, placement_flags
from ._corpus import split_contents
from ._index import CorpusIndex, IndexError_, Ranking, build_index, check_k, load_index, read_index_manifest
from ._kinds import ENTRY_POINTS, KINDS, RetrieverKind, get_kind, kind_names, kinds_table
from ._store import normalize_passage, passage_hash

RetrievalIndexError = IndexError_


def __getattr__(name: str) -> Any:
    """``IndexConfig``: assembled from the registered kinds when first asked for (:mod:`._config`), once this
    package is imported whole."""
    if name == "IndexConfig":
        return _config.IndexConfig
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["ENTRY_POINTS", "KINDS", "METHODS", "SPLITTER", "CorpusIndex", "IndexConfig", "Ranking",
           "RetrievalIndexError", "RetrieverKind", "ServeConfig", "build_index", "check_k", "get_kind", "kind_names",
           "kinds_table", "load_index", "normalize_passage", "passage_hash", "placement_flags", "read_index_manifest",
           "split_contents"]
