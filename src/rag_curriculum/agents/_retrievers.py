"""What a search agent's ``<search>`` calls: the toolkit's BM25 index in this process, or a retriever server over
HTTP (``curriculum serve``, or any server speaking Search-R1's ``POST /retrieve``). Both return, per query, a list
of :class:`Hit` best first.

The HTTP client retries with urllib3's own backoff (``Retry``: connection errors and 502/503/504, exponential
backoff), then fails with one :class:`RetrieverError` naming the URL. A response that is not Search-R1's shape is an
error naming what is wrong, never an empty result.

A hit keeps what the retriever returned as it was: its ``id`` (a corpus line's own) and its ``contents`` (the
line's, byte for byte); its ``title`` and ``text`` are :func:`split_contents`'s (a quoted title without its quotes:
what the gold test reads), and what the agent is shown is Search-R1's client's rendering of ``contents``
(:meth:`Hit.shown`), so a Search-R1 checkpoint sees the text it was trained on.

>>> h = Hit("wiki-42", "Tinted Windows (album)", "An album.", contents='"Tinted Windows (album)"\\nAn album.')
>>> h.shown()
('"Tinted Windows (album)"', 'An album.')
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from rag_plumbing import check_k, split_contents

from .._plumbing import mask_secrets
from ..errors import CurriculumError, SettingError

log = logging.getLogger(__name__)


class RetrieverError(CurriculumError):
    """The retriever could not answer: unreachable, a bad response, or a bad index."""


@dataclass(frozen=True)
class Hit:
    """One retrieved passage: its id in the retriever (a string), title, text, score, and the ``contents`` string
    the retriever returned (None: ``title + "\\n" + text``)."""

    id: str
    title: str
    text: str
    score: float | None = None
    contents: str | None = None

    def shown(self) -> tuple[str, str]:
        """(title, text) as Search-R1's client shows a document: the first line of ``contents`` as it is (a
        quoted title keeps its quotes), and the rest."""
        if self.contents is None:
            return self.title, self.text
        title, _, text = self.contents.partition("\n")
        return title, text


#: What a search tool answers when nothing matched (a query of stop words only, or of words the index lacks): the text
#: verl's own search tool gave. The tag protocol keeps Search-R1's empty ``<information></information>`` block; a
#: tool message (verl's agent loop, TRL's tool calling) that is empty would read as a failed call.
NO_RESULTS = "No search results found."


def doc_lines(hits: Sequence[Hit]) -> str:
    """The search results as Search-R1 shows them: ``Doc {i}(Title: {title}) {text}`` per hit, one per line."""
    return "\n".join(f"Doc {i}(Title: {t}) {x}" for i, (t, x) in enumerate((h.shown() for h in hits), 1))


@runtime_checkable
class Retriever(Protocol):
    """``search(queries, k) -> list[list[Hit]]``: the ``k`` best passages of each query, best first (fewer when
    the retriever has fewer matches)."""

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]: ...

    def describe(self) -> dict[str, Any]: ...


class IndexRetriever:
    """The toolkit's index (``curriculum index``, any kind), in this process: exactly the ranking the index stores and
    the server returns (same retriever, settings and tie order), and the same documents."""

    def __init__(self, index: Any) -> None:
        if not hasattr(index, "retrieve_many"):
            from rag_retriever import load_index  # optional (the retrieval extra): not for a server's client

            index = load_index(index)
        self.index = index

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        if not queries:
            return []
        import numpy as np

        ids, scores = self.index.retrieve_many(list(queries), k)
        flat = np.unique(ids[ids >= 0]).astype(np.int64)
        if hasattr(self.index, "check_keys"):  # each passage shown checked against its key, as validate checks it
            self.index.check_keys(flat)
        docs = dict(zip(flat.tolist(), self.index.documents(flat), strict=True))
        out = []
        for row_ids, row_scores in zip(ids, scores, strict=True):
            hits = []
            for pid, s in zip(row_ids.tolist(), row_scores.tolist(), strict=True):
                if pid < 0:
                    break
                doc_id, contents, title, text = docs[pid]
                hits.append(Hit(doc_id, title, text, float(s), contents))
            out.append(hits)
        return out

    def describe(self) -> dict[str, Any]:
        return {"kind": "index", **self.index.describe(), "fingerprint": self.index.fingerprint}

    def probe(self) -> None:
        """Loaded and checked against its manifest already: nothing more to try."""


def _check_url(url: str) -> None:
    """Refuse at once a URL no request can reach (a port out of 1..65535, no host), naming it (its secrets masked):
    not a connection error after the retries."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:  # out of range, or not a number: the error's text would echo it (part of a password?)
        raise RetrieverError(f"--retriever {mask_secrets(url)}: its port is not a number in 1..65535",
                             hint="give a port in 1..65535, e.g. http://127.0.0.1:8000/retrieve; a password "
                             "holding '#', '/' or '?' must be written percent-encoded (%23, %2F, %3F)") from None
    if port == 0:
        raise RetrieverError(f"--retriever {mask_secrets(url)}: port 0 is not a port a server listens on",
                             hint="give a port in 1..65535, e.g. http://127.0.0.1:8000/retrieve")
    if not parts.hostname:
        raise RetrieverError(f"--retriever {mask_secrets(url)}: the URL names no host",
                             hint="give a server's URL, e.g. http://127.0.0.1:8000/retrieve")


#: Seconds a retriever server may take to answer one request (``--retriever-timeout``).
DEFAULT_TIMEOUT = 30.0
#: Times a failed request to a retriever server is sent again (``--retriever-retries``).
DEFAULT_RETRIES = 5


class HttpRetriever:
    """A retriever server speaking Search-R1's protocol: ``POST {url}`` with ``{"queries", "topk",
    "return_scores": true}``, answered ``{"result": [[{"document": {"id", "contents"}, "score"}, ...], ...]}``.

    ``url`` is the full endpoint (``http://127.0.0.1:8000/retrieve``; a bare ``host:port`` gets ``/retrieve``).
    ``retries``/``backoff``: urllib3's ``Retry(total, backoff_factor)`` on connection errors and 502/503/504;
    ``timeout``: seconds a request may wait for its answer, tried ``1 + read_retries`` times (a server that accepts
    and never answers stops the run after about ``timeout * (1 + read_retries)`` seconds, in one line naming it).
    ``batch``: queries per request.

    **Which index answers.** Before its first search the client reads the server's ``GET /manifest`` (beside
    ``/retrieve``): the index's fingerprint, kind and sources, which :meth:`describe` returns, so a run records
    them (and a resume compares them). ``curriculum serve`` sends the fingerprint with every answer: an answer
    from another index (the server restarted on another one at the same URL) stops the run with one line naming
    both. A server without ``/manifest`` (Search-R1's own) cannot be checked: a warning says so, once.
    """

    def __init__(self, url: str, *, timeout: float = DEFAULT_TIMEOUT, retries: int = DEFAULT_RETRIES,
                 backoff: float = 0.5, batch: int = 256, read_retries: int = 1) -> None:
        import requests
        from requests.adapters import HTTPAdapter
        from urllib3.util.retry import Retry

        if "://" not in url:
            url = "http://" + url
        if url.rstrip("/").count("/") == 2:  # no path: the protocol's endpoint
            url = url.rstrip("/") + "/retrieve"
        _check_url(url)
        self.url = url
        path, sep, query = url.partition("?")  # a query string (an API key a gateway asks for) goes to both
        self.manifest_url = path.rsplit("/", 1)[0] + "/manifest" + sep + query
        self._index: dict[str, Any] | None = None  # the server's /manifest, read before the first search
        self._limits: dict[str, int] = {}  # the server's max_batch and max_results (its /manifest), when it says
        self._identified = False
        self.timeout = timeout
        self.batch = batch
        self.session = requests.Session()
        self.attempts = 1 + read_retries
        if int(retries) < 0:
            raise RetrieverError(f"retriever {mask_secrets(url)}: retries={retries} (give 0 or more)")
        # total at least read_retries: a server that never answers is asked 1 + read_retries times whatever
        # `retries` (0 included) says about connection errors
        retry = _quiet_retry(Retry)(total=max(retries, read_retries), connect=retries, read=read_retries,
                                    status=retries,
                                    backoff_factor=backoff, status_forcelist=(502, 503, 504),
                                    allowed_methods=frozenset({"GET", "POST"}), raise_on_status=False)
        self.retries = retries
        self.session.mount("http://", HTTPAdapter(max_retries=retry))
        self.session.mount("https://", HTTPAdapter(max_retries=retry))

    def _where(self) -> str:
        return mask_secrets(self.url)

    def search(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        if check_k(k, error=SettingError) == 0:  # as an index in this process: no passages (the server refuses topk 0)
            return [[] for _ in queries]
        self.identify()
        out: list[list[Hit]] = []
        batch = self.batch
        limits = self._limits
        if limits.get("max_batch"):  # the server's own limits (its /manifest): requests it takes whole
            batch = min(batch, limits["max_batch"])
        if limits.get("max_results"):  # (a k above max_results alone is refused by the server, saying so)
            batch = max(1, min(batch, limits["max_results"] // max(1, min(k, limits.get("passages") or k))))
        for start in range(0, len(queries), batch):
            out += self._post(list(queries[start:start + batch]), k)
        return out

    def identify(self) -> dict[str, Any] | None:
        """The server's index as its ``GET /manifest`` says (fingerprint, kind, passages, sources), read once; None
        for a server without one (then nothing can be checked, and a warning says so)."""
        if self._identified:
            return self._index
        import requests

        try:
            r = self.session.get(self.manifest_url, timeout=self.timeout)
            m = r.json() if r.status_code == 200 else None
        except requests.RequestException as e:
            raise self._failed(e) from None
        except ValueError:
            m = None
        self._identified = True
        if not isinstance(m, dict) or not m.get("fingerprint"):
            log.warning("retriever %s has no /manifest with a fingerprint (not a `curriculum serve` server?): a server "
                        "restarted on another index at this URL would go unnoticed", self._where())
            return None
        keep = ("fingerprint", "kind", "retriever", "index", "dataset", "passages")
        self._index = {k: m.get(k) for k in keep if k in m}
        server = m.get("server") if isinstance(m.get("server"), dict) else {}
        self._limits = {k: v for k, v in {**server, "passages": m.get("passages")}.items()
                        if k in ("max_batch", "max_results", "passages") and isinstance(v, int) and v > 0}
        self._index["sources"] = [{k: s.get(k) for k in ("kind", "input", "sha256")}
                                  for s in m.get("sources") or [] if isinstance(s, dict)]
        return self._index

    def _check_fingerprint(self, body: Any) -> None:
        """An answer from another index than the one this client identified first stops the run."""
        want = (self._index or {}).get("fingerprint")
        if want is None:
            return
        got = body.get("fingerprint") if isinstance(body, dict) else None
        if got != want:
            now = f"fingerprint {got[:12]}" if isinstance(got, str) else "no fingerprint"
            raise RetrieverError(f"retriever {self._where()} now answers from another index ({now}); this run began "
                                 f"with index {self._index.get('index')!r} (fingerprint {want[:12]}): its results "
                                 "would mix two indexes",
                                 hint="restart the server on the index the run began with, or start a new run "
                                      "(another --out) for the new index")

    def _post(self, queries: list[str], k: int) -> list[list[Hit]]:
        import requests

        try:
            r = self.session.post(self.url, json={"queries": queries, "topk": k, "return_scores": True},
                                  timeout=self.timeout)
        except requests.RequestException as e:
            raise self._failed(e) from None
        if r.status_code != 200:
            raise RetrieverError(f"retriever {self._where()} answered HTTP {r.status_code}: {r.text[:300]}",
                                 hint="check the server's log")
        try:
            body = r.json()
            result = body["result"]
        except (ValueError, KeyError, TypeError):
            raise RetrieverError(f"retriever {self._where()}: the response is not Search-R1's "
                                 '{"result": [[...], ...]} (got ' + repr(r.text[:200]) + ")",
                                 hint="point --retriever at a server speaking POST /retrieve") from None
        self._check_fingerprint(body)
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
        return Hit(str(doc.get("id", "")), title, text, None if score is None else float(score), doc["contents"])

    def probe(self) -> None:
        """One query, before a run writes anything: an unreachable server, a 404 or 405 (no ``POST /retrieve``
        there) or an answer that is not Search-R1's shape fails here, in one line."""
        self.search(["probe"], 1)

    def _failed(self, e: BaseException) -> RetrieverError:
        """One line for a request that did not get an answer: a server that never answered, or none there (urllib3's
        warning per retry is not shown: :func:`_quiet_retry`)."""
        import re

        import requests

        slow = isinstance(e, requests.Timeout) or "timed out" in str(e).lower() or "Read timed out" in str(e)
        if slow and not isinstance(e, requests.ConnectTimeout):
            return RetrieverError(f"retriever {self._where()} did not answer within {self.timeout:g} s "
                                  f"({self.attempts} attempt{'s' if self.attempts > 1 else ''})",
                                  hint="check the server (its log), or give it longer with --retriever-timeout")
        cause = re.search(r"\[Errno -?\d+\] ([^'\")]+)", str(e))
        return RetrieverError(f"retriever {self._where()} unreachable ({cause[1].strip() if cause else type(e).__name__}"
                              f") after {self.retries} retr{'ies' if self.retries != 1 else 'y'}",
                              hint="start it (curriculum serve --index DIR) or check --retriever")

    def describe(self) -> dict[str, Any]:
        """Where the server is and which index it serves (its ``/manifest``: fingerprint, sources)."""
        return {"kind": "http", "url": self._where(), "index": self.identify()}

    def close(self) -> None:
        self.session.close()


_QUIET_RETRY: list[type] = []


class _DropRetryWarnings(logging.Filter):
    """Drops urllib3's "Retrying (...)" warning when the retry is a :func:`_quiet_retry` one (the toolkit's client,
    which says in one line what failed), keeping those of every other client; the retry goes to DEBUG instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if _QUIET_RETRY and isinstance(args, tuple) and args and isinstance(args[0], _QUIET_RETRY[0]):
            log.debug("retrying a retriever request: %s", mask_secrets(str(args[-1])))
            return False
        return True


def _quiet_retry(retry: type) -> type:
    """urllib3's ``Retry`` as a subclass whose retries urllib3 does not log as warnings (five of them came before
    the one line saying the retriever is unreachable)."""
    if not _QUIET_RETRY:
        _QUIET_RETRY.append(type("QuietRetry", (retry,), {"__doc__": "urllib3's Retry, its retries not warned."}))
        logging.getLogger("urllib3.connectionpool").addFilter(_DropRetryWarnings())
    return _QUIET_RETRY[0]



def open_retriever(where: str | Any, *, timeout: float | None = None, retries: int | None = None) -> Retriever:
    """A retriever from ``--retriever``: an ``http(s)://`` URL (a server), or an index directory.

    Args:
        where: an ``http(s)://`` URL of a server (``curriculum serve``, or any server of Search-R1's protocol), an
            index directory (``curriculum index``, any kind), or a retriever object, returned as it is.
        timeout: a server's seconds per request (None: :data:`DEFAULT_TIMEOUT`).
        retries: times a server's request is sent again after a connection error or a 502/503/504 (None:
            :data:`DEFAULT_RETRIES`).

    Returns:
        A :class:`Retriever`: an :class:`HttpRetriever` for a URL, an :class:`IndexRetriever` for a directory.

    Raises:
        RetrieverError: a URL of another scheme, or a directory that is not a readable index (the index's own
            error in the message).

    Examples:
        ```python
        retriever = open_retriever("outputs/index-wiki")            # or "http://127.0.0.1:8000/retrieve"
        hits = retriever.search(["who wrote the iliad"], k=3)[0]   # the 3 best passages, best first
        ```

        Any object with ``search`` and ``describe`` is a retriever:

        >>> from rag_curriculum.agents import Hit, open_retriever
        >>> class Fixed:
        ...     def search(self, queries, k):
        ...         return [[Hit("d1", "Paris", "Paris is the capital of France.")] for _ in queries]
        ...     def describe(self):
        ...         return {"kind": "fixed"}
        >>> open_retriever(Fixed()).search(["capital of France"], k=1)[0][0].title
        'Paris'
    """
    if not isinstance(where, str):
        return where
    if where.lower().startswith(("http://", "https://")):  # (a scheme is case-insensitive: RFC 3986 3.1)
        return HttpRetriever(where, timeout=timeout or DEFAULT_TIMEOUT,
                             retries=DEFAULT_RETRIES if retries is None else int(retries))
    scheme = where.split("://", 1)[0] if "://" in where else None
    if scheme and scheme.replace("+", "").replace(".", "").replace("-", "").isalnum():
        raise RetrieverError(f"--retriever {mask_secrets(where)}: the scheme {scheme}:// is not supported",
                             hint="give an http(s):// URL of a server (curriculum serve) or an index directory")
    try:
        return IndexRetriever(where)
    except CurriculumError as e:
        raise RetrieverError(f"--retriever {where}: {e}", hint=getattr(e, "hint", None)) from None
