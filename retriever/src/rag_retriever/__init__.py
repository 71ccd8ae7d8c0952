"""rag-retriever: a Lucene-identical BM25 (and bm25s), dense (FAISS) and hybrid retrieval over a corpus JSONL, with
its passage store, integrity checks and an HTTP server speaking Search-R1's ``POST /retrieve`` protocol.

An index is built by a retriever *kind* (:mod:`._kinds`): ``bm25``, ``dense``, ``hybrid``, or one an installed
package registers (entry point group ``rag_retriever.kinds``), one module each behind one interface, registered once
in :data:`KINDS`. The command line is ``rag-retriever index | validate | serve``.

>>> from rag_retriever import IndexConfig
>>> IndexConfig(corpus="wiki-18.jsonl").bm25  # the preset: lucene for Search-R1 corpora, else bm25s
'auto'
"""

from typing import Any

from . import _config
from ._bm25 import METHODS, SPLITTER
from ._config import ServeConfig, placement_flags
from ._corpus import read_corpus, split_contents
from ._datasets import register_dataset_reader
from ._index import CorpusIndex, Ranking, build_index, check_k, load_index, read_index_manifest
from ._kinds import ENTRY_POINTS, KINDS, RetrieverKind, get_kind, kind_names, kinds_table
from ._store import normalize_passage, passage_hash
from ._version import __version__
from .errors import RetrievalIndexError, RetrieverError


def __getattr__(name: str) -> Any:
    """``IndexConfig``: assembled from the registered kinds when first asked for (:mod:`._config`), once this
    package is imported whole."""
    if name == "IndexConfig":
        return _config.IndexConfig
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ENTRY_POINTS", "KINDS", "METHODS", "SPLITTER", "CorpusIndex", "IndexConfig", "Ranking",
           "RetrievalIndexError", "RetrieverError", "RetrieverKind", "ServeConfig", "__version__", "build_index",
           "check_k", "get_kind", "kind_names", "kinds_table", "load_index", "normalize_passage", "passage_hash",
           "placement_flags", "read_corpus", "read_index_manifest", "register_dataset_reader", "split_contents"]
