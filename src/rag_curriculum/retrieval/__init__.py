"""Retrieval: an index over a dataset's paragraphs and/or a corpus, with its questions' rankings stored (for BM25
distractors and the ``retrieved`` evaluation setting) and a server for search agents. The retriever is a kind
(:mod:`._kinds`): ``bm25`` (bm25s), one module each behind one interface.

>>> from rag_curriculum.retrieval import IndexConfig
>>> IndexConfig(dataset="musique", input="f.jsonl").bm25_params()["k1"]
1.5
"""

from ._config import METHODS, SPLITTER, IndexConfig, ServeConfig
from ._index import CorpusIndex, IndexError_, Ranking, build_index, load_index, read_index_manifest
from ._kinds import KINDS, RetrieverKind, get_kind
from ._store import normalize_passage, passage_hash

RetrievalIndexError = IndexError_

__all__ = ["KINDS", "METHODS", "SPLITTER", "CorpusIndex", "IndexConfig", "Ranking", "RetrievalIndexError",
           "RetrieverKind", "ServeConfig", "build_index", "get_kind", "load_index", "normalize_passage",
           "passage_hash", "read_index_manifest"]
