"""Retrieval on a real BM25 library (bm25s): an index over a dataset's paragraphs and an optional corpus, with
stored rankings of the dataset's questions, for BM25 distractors and the ``retrieved`` evaluation setting.

>>> from rag_curriculum.retrieval import IndexConfig
>>> IndexConfig(dataset="musique", input="f.jsonl").bm25_params()["k1"]
1.5
"""

from ._config import METHODS, SPLITTER, IndexConfig, ServeConfig
from ._index import CorpusIndex, IndexError_, Ranking, build_index, load_index, read_index_manifest

RetrievalIndexError = IndexError_

__all__ = ["METHODS", "SPLITTER", "CorpusIndex", "IndexConfig", "Ranking", "RetrievalIndexError", "ServeConfig",
           "build_index", "load_index", "read_index_manifest"]
