"""Retriever kinds: how an index ranks passages. A kind is one module beside the others (``_bm25.py``,
``_dense.py``, ``_hybrid.py``) exposing a :class:`RetrieverKind`; the index (its passage store, manifest, stored
rankings, atomic writing) and everything that uses one (builds' distractors, the retrieved setting, ``serve``, the
agents) go through this interface and never branch on the kind.

A kind provides:

* ``builder(cfg, tmp, progress=...)``: an object whose ``add(block)`` takes each block of passages
  (:class:`~rag_curriculum.retrieval._corpus.Passages`, in the index's order) and whose ``finish(bar=None,
  task=None)`` writes the kind's files into ``tmp`` and returns the manifest's facts about it (a dict merged into
  the manifest);
* ``open(directory, manifest, backend="auto", threads=0, device=None)``: a searcher whose
  ``search(queries, k, threads=None)`` returns ``(ids, scores)`` arrays, one row per query, best first, ties by
  the lower passage id, ids -1 past what it found; ``warm()`` readies it (compiles, loads a model, maps files);
  ``describe()`` says what it is (the kind's settings);
* ``check(manifest, directory)``: refuses an index this environment cannot read faithfully (another library
  version, a missing file), before anything is loaded;
* ``manifest_keys``: the manifest keys the kind writes (what ``/manifest`` shows of it);
* ``verify(directory, manifest)`` (optional): what ``curriculum validate`` checks of the kind's files beyond what
  loading checks (it may read them whole: a dense index's vectors, for NaN or infinity).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..registry import Registry


@dataclass(frozen=True)
class RetrieverKind:
    name: str
    builder: Callable[..., Any]
    open: Callable[..., Any]
    check: Callable[[dict[str, Any], Any], None]
    manifest_keys: tuple[str, ...]
    description: str = ""
    verify: Callable[[Any, dict[str, Any]], None] | None = None


KINDS: Registry[RetrieverKind] = Registry("retriever kind")
KINDS.register("bm25", "rag_curriculum.retrieval._bm25:KIND")
KINDS.register("dense", "rag_curriculum.retrieval._dense:KIND")
KINDS.register("hybrid", "rag_curriculum.retrieval._hybrid:KIND")


def get_kind(name: str) -> RetrieverKind:
    return KINDS.get(name)


__all__ = ["KINDS", "RetrieverKind", "get_kind"]
