"""Deprecated: Search-R1's loader is :mod:`rag_curriculum.loaders.search_r1` (one spelling, ``search_r1``). Names
imported from here still work for one release, each with a :class:`DeprecationWarning` naming the new module."""

from __future__ import annotations

from .._plumbing import moved_to

__getattr__ = moved_to(__name__, "rag_curriculum.loaders.search_r1")
