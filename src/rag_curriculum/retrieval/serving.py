"""Moved to :mod:`rag_retriever.serving`: its names import from here for one release, with a DeprecationWarning."""

from .._plumbing import moved_to

__getattr__ = moved_to("rag_curriculum.retrieval.serving", "rag_retriever.serving")
