"""The hybrid retriever kind: BM25 and dense over the same passages (both kinds' files in one index), fused by
reciprocal rank fusion: a passage's score is the sum over the two rankings of ``1 / (rrf_k + rank)`` (rank from 1,
each ranking cut at ``rrf_depth``); ties by the lower passage id, so the fused ranking is deterministic."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rag_plumbing._settings import rule

from . import _bm25, _dense
from ._kinds import RetrieverKind

if TYPE_CHECKING:
    from ._config import IndexConfig


@dataclass
class HybridOptions:
    """The hybrid kind's own options (it reads the bm25 and dense kinds' too)."""

    rrf_k: int = rule(60, ge=0, le=1_000_000, help="hybrid: reciprocal rank fusion's k (1 / (k + rank)).")
    rrf_depth: int = rule(100, ge=1, le=1_000_000, help="hybrid: how deep each ranking is fused.")


class HybridBuilder:
    def __init__(self, cfg: IndexConfig, tmp: Path, **kw: Any) -> None:
        self.cfg = cfg
        self.parts = [_bm25.BM25Builder(cfg, tmp, backend=_bm25.backend(cfg.backend)),
                      _dense.DenseBuilder(cfg, tmp, **kw)]
        self.progress = None
        self.query_encoder = self.parts[1].encoder
        self.verb = "encoding"

    def add(self, block: Any) -> None:
        self.parts[0].add(block)
        self.parts[1].progress = self.progress  # the encoder's batches show (the slower part)
        self.parts[1].add(block)

    def committed(self) -> None:
        self.parts[1].committed()

    def abort(self) -> None:
        self.parts[1].abort()

    @property
    def encoding(self) -> dict[str, Any] | None:
        return self.parts[1].encoding

    @property
    def questions(self) -> Any:
        """The dataset's questions (:attr:`._dense.DenseBuilder.questions`: the dense part's default tuning queries)."""
        return self.parts[1].questions

    @questions.setter
    def questions(self, texts: Any) -> None:
        self.parts[1].questions = texts

    @property
    def digests(self) -> dict[str, str]:
        """The dense part's files hashed as they were written (:attr:`._dense.DenseBuilder.digests`)."""
        return self.parts[1].digests

    def finish(self, *, bar: Any = None, task: Any = None) -> dict[str, Any]:
        facts: dict[str, Any] = {}
        for part in self.parts:
            facts.update(part.finish(bar=bar, task=task))
        facts["hybrid"] = {"fusion": "reciprocal rank", "rrf_k": self.cfg.rrf_k, "rrf_depth": self.cfg.rrf_depth}
        return facts


def fuse(rankings: list[tuple[Any, Any]], k: int, rrf_k: int) -> tuple[Any, Any]:
    """Reciprocal rank fusion of several rankings (each an (ids, scores) pair of arrays, one row per query; ids -1
    past the end): the ``k`` best by fused score, ties by the lower passage id.

    >>> import numpy as np
    >>> a = (np.array([[3, 1, 2]]), np.zeros((1, 3))); b = (np.array([[1, 3, -1]]), np.zeros((1, 3)))
    >>> ids, scores = fuse([a, b], 3, 60)
    >>> ids.tolist()   # 1 and 3 tie (ranks 1 + 2 each): the lower id first
    [[1, 3, 2]]
    """
    import numpy as np

    n = len(rankings[0][0])
    out_ids = np.full((n, k), -1, dtype=np.int32)
    out_scores = np.zeros((n, k), dtype=np.float32)
    for r in range(n):
        fused: dict[int, float] = {}
        for ids, _ in rankings:
            for rank, pid in enumerate(ids[r].tolist(), 1):
                if pid >= 0:
                    fused[pid] = fused.get(pid, 0.0) + 1.0 / (rrf_k + rank)
        best = sorted(fused.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
        for j, (pid, score) in enumerate(best):
            out_ids[r, j] = pid
            out_scores[r, j] = score
    return out_ids, out_scores


class HybridSearcher:
    def __init__(self, directory: Path, manifest: dict[str, Any], *, backend: str = "auto", threads: int = 0,
                 device: str | None = None, encoder: str | None = None, allow_other_encoder: bool = False) -> None:
        self.bm25 = _bm25.BM25Searcher(directory, manifest, backend_name=backend, threads=threads)
        self.dense = _dense.DenseSearcher(directory, manifest, threads=threads, device=device, encoder=encoder,
                                          allow_other_encoder=allow_other_encoder)
        self.h = manifest["hybrid"]
        self.backend = self.bm25.backend

    @property
    def fingerprint_salt(self) -> str | None:
        """The dense part's (:attr:`._dense.DenseSearcher.fingerprint_salt`)."""
        return self.dense.fingerprint_salt

    def describe(self) -> dict[str, Any]:
        return {"kind": "hybrid", "bm25": self.bm25.describe(), "dense": self.dense.describe(), **self.h}

    def warm(self) -> None:
        self.bm25.warm()
        self.dense.warm()

    def search(self, queries: list[str], k: int, *, threads: int | None = None):
        depth = max(k, int(self.h["rrf_depth"]))
        depth_b = min(depth, self.bm25.num_docs)
        return fuse([self.bm25.search(queries, depth_b, threads=threads), self.dense.search(queries, depth_b)], k,
                    int(self.h["rrf_k"]))


def check(manifest: dict[str, Any], directory: Path) -> None:
    _bm25.check_version(manifest, directory)
    _dense.check(manifest, directory)


def summary(manifest: dict[str, Any]) -> str:
    """One line on a hybrid index's settings: its BM25's and its dense's."""
    return f"{_bm25.summary(manifest)}; {_dense.summary(manifest)}"


def _verify(directory: Path, manifest: dict[str, Any]) -> None:
    """``curriculum validate``'s reading of both halves: the BM25 postings decoded whole, the vectors finite."""
    _bm25.verify(directory, manifest)
    _dense.verify(directory, manifest)


KIND = RetrieverKind("hybrid", builder=lambda cfg, tmp, **kw: HybridBuilder(cfg, tmp, **kw),
                     open=lambda d, m, **kw: HybridSearcher(d, m, **kw), check=check,
                     manifest_keys=(*_bm25.MANIFEST_KEYS, "dense", "hybrid"),
                     description="hybrid: BM25 and dense fused by reciprocal rank", options=HybridOptions,
                     uses=("bm25", "dense"), label="hybrid (BM25 + dense)",
                     negatives="hybrid hard negatives (BM25 and dense fused by reciprocal rank)", summary=summary,
                     verify=_verify, native=_bm25.NATIVE)
