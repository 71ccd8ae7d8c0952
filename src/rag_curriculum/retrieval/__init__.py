"""The curriculum's side of retrieval: the retriever itself is its own distribution, ``rag-retriever``
(``rag_retriever``: BM25, dense, hybrid, the passage store, integrity, the server). This package connects it to the
toolkit: the datasets' loaders read ``curriculum index --dataset NAME --input FILE`` (:mod:`._datasets`, registered
with the retriever when this package is imported, and declared as an entry point of ``rag_retriever.dataset_readers``
for the retriever's own processes).

The names this package held before the move (``IndexConfig``, ``build_index``, ``load_index``, ``get_kind``, ...)
still import from here for one release, each with a :class:`DeprecationWarning` naming its new place in
:mod:`rag_retriever`.
"""

from rag_retriever import register_dataset_reader

from .._plumbing import moved_to
from ._datasets import READER

register_dataset_reader(READER)

#: Names that moved to rag_retriever: imported from here, each warns once per use and returns the new one.
__getattr__ = moved_to("rag_curriculum.retrieval", "rag_retriever")

__all__ = ["READER"]
