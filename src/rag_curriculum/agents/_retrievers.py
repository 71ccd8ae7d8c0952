"""What a search agent's ``<search>`` calls: the toolkit's BM25 index in this process, or a retriever server over
HTTP (``curriculum serve``, or any server speaking Search-R1's ``POST /retrieve``). Both return, per query, a list
of :class:`Hit` best first.

The HTTP client retries with urllib3's own backoff (``Retry``: connection errors and 502/503/504, exponential
backoff), then fails with one :class:`RetrieverError` naming the URL. A response that is not Search-R1's shape is an
error naming what is wrong, never an empty result.

>>> split_contents('"Paris"\\nParis is the capital of France.')
('Paris', 'Paris is the capital of France.')
>>> split_contents("no title line")
('', 'no title line')
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from .._plumbing import mask_secrets
from ..errors import CurriculumError
from ..retrieval import load_index
from ..retrieval._corpus import split_contents

log = logging.getLogger(__name__)


class RetrieverError(CurriculumError):
    """The retriever could not answer: unreachable, a bad response, or a bad index."""


@dataclass(frozen=True)
class Hit:
    """One retrieved passage: its id in the retriever (a string), title, text and score."""

    id: str
    title: str
    text: str
    score: float | None = None


@runtime_checkable
class Retriever(Protocol):
    """``search(queries, k) -> list[list[Hit]]``: the ``k`` best passages of each query, best first (fewer when
    the retriever has fewer matches)."""

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]: ...

    def describe(self) -> dict[str, Any]: ...


class IndexRetriever:
    """The toolkit's BM25 index (``curriculum index``), in this process: exactly the ranking the index stores and
    the server returns (same tokenizer, parameters and tie order)."""

    def __init__(self, index: Any) -> None:
        if not hasattr(index, "retrieve_many"):
            index = load_index(index)
        self.index = index

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        if not queries:
            return []
        ids, scores = self.index.retrieve_many(list(queries), k)
        self.index.prefetch(ids.ravel())
        out = []
        for row_ids, row_scores in zip(ids, scores, strict=True):
            hits = []
            for pid, s in zip(row_ids.tolist(), row_scores.tolist(), strict=True):
                if pid < 0:
                    break
                title, text = self.index.passage(pid)
                hits.append(Hit(str(pid), title, text, float(s)))
            out.append(hits)
        return out

    def describe(self) -> dict[str, Any]:
        return {"kind": "index", **self.index.describe()}


class HttpRetriever:
    """A retriever server speaking Search-R1's protocol: ``POST {url}`` with ``{"queries", "topk",
    "return_scores": true}``, answered ``{"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}``.

    ``url`` is the full endpoint (``http://127.0.0.1:8000/retrieve``; a bare ``host:port`` gets ``/retrieve``).
    ``retries``/``backoff``: urllib3's ``Retry(total, backoff_factor)`` on connection errors and 502/503/504.
    ``batch``: queries per request.
    """

    def __init__(self, url: str, *, timeout: float = 60.0, retries: int = 5, backoff: float = 0.5,
                 batch: int = 256) -> None:
        import requests
        from requests.adapters import HTTPAdapter
        from urllib3.util.retry import Retry

        if "://" not in url:
            url = "http://" + url
        if url.rstrip("/").count("/") == 2:  # no path: the protocol's endpoint
            url = url.rstrip("/") + "/retrieve"
        self.url = url
        self.timeout = timeout
        self.batch = batch
        self.session = requests.Session()
        retry = Retry(total=retries, connect=retries, read=retries, status=retries, backoff_factor=backoff,
                      status_forcelist=(502, 503, 504), allowed_methods=frozenset({"POST"}),
                      raise_on_status=False)
        self.session.mount("http://", HTTPAdapter(max_retries=retry))
        self.session.mount("https://", HTTPAdapter(max_retries=retry))

    def _where(self) -> str:
        return mask_secrets(self.url)

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        out: list[list[Hit]] = []
        for start in range(0, len(queries), self.batch):
            out += self._post(list(queries[start:start + self.batch]), k)
        return out

    def _post(self, queries: list[str], k: int) -> list[list[Hit]]:
        import requests

        try:
            r = self.session.post(self.url, json={"queries": queries, "topk": k, "return_scores": True},
                                  timeout=self.timeout)
        except requests.RequestException as e:
            raise RetrieverError(f"retriever {self._where()} unreachable ({type(e).__name__}) after retrying",
                                 hint="start it (curriculum serve --index DIR) or check --retriever") from None
        if r.status_code != 200:
            raise RetrieverError(f"retriever {self._where()} answered HTTP {r.status_code}: {r.text[:300]}",
                                 hint="check the server's log")
        try:
            result = r.json()["result"]
        except (ValueError, KeyError, TypeError):
            raise RetrieverError(f"retriever {self._where()}: the response is not Search-R1's "
                                 '{"result": [[...], ...]} (got ' + repr(r.text[:200]) + ")",
                                 hint="point --retriever at a server speaking POST /retrieve") from None
        if not isinstance(result, list) or len(result) != len(queries):
            raise RetrieverError(f"retriever {self._where()}: {len(result) if isinstance(result, list) else 'no'} "
                                 f"result list(s) for {len(queries)} queries",
                                 hint="the server must answer one list per query")
        return [[self._hit(h, q, i) for i, h in enumerate(hits)] for q, hits in zip(queries, result, strict=True)]

    def _hit(self, h: Any, query: str, i: int) -> Hit:
        doc, score = (h.get("document"), h.get("score")) if isinstance(h, dict) and "document" in h else (h, None)
        if not isinstance(doc, dict) or not isinstance(doc.get("contents"), str):
            raise RetrieverError(f"retriever {self._where()}: hit {i} of query {query[:60]!r} has no "
                                 f"document.contents string (got {str(h)[:120]!r})",
                                 hint="the server must answer Search-R1's document layout")
        title, text = split_contents(doc["contents"])
        return Hit(str(doc.get("id", "")), title, text, None if score is None else float(score))

    def describe(self) -> dict[str, Any]:
        return {"kind": "http", "url": self._where()}

    def close(self) -> None:
        self.session.close()


def open_retriever(where: str | Any) -> Retriever:
    """A retriever from ``--retriever``: an ``http(s)://`` URL (a server), or an index directory."""
    if not isinstance(where, str):
        return where
    if where.startswith(("http://", "https://")):
        return HttpRetriever(where)
    try:
        return IndexRetriever(where)
    except CurriculumError as e:
        raise RetrieverError(f"--retriever {where}: {e}", hint=getattr(e, "hint", None)) from None
