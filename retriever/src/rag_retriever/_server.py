"""`curriculum serve`: an index of ``curriculum index`` (BM25, dense or hybrid) behind HTTP, speaking the protocol
of Search-R1's ``retrieval_server.py``, so Search-R1, the toolkit's verl search tool (rag-curriculum's ``verl.tool``)
and TRL scripts that call a retriever can use an index of this toolkit.

::

    POST /retrieve  {"queries": ["q1", ...], "topk": 3, "return_scores": true}
      -> {"result": [[{"document": {"id": "17", "contents": "Title\\ntext"}, "score": 12.5}, ...], ...]}
    POST /retrieve  {"queries": [...], "topk": 3}            (no scores: each list holds the documents alone)
      -> {"result": [[{"id": "17", "contents": "Title\\ntext"}, ...], ...]}
    POST /retrieve  {"query": "q", "topk": 3}                (one query: the same response, a list of one list)
    GET  /health    200 {"status": "ok", ..., "fingerprint"} once the index is loaded, 503 before (and once a
                    file of the index was written since the server opened it)
    GET  /manifest  (and GET /) what the index is: dataset, passages, BM25 parameters, tokenizer, sources, and its
                    fingerprint (the SHA-256 of its manifest.json), which every /retrieve answer also carries
                    beside "result"

One list per query, best first: exactly :meth:`CorpusIndex.retrieve_many`'s ranking for that ``topk`` (the same
tokenizer, parameters and tie order, by lower passage id). A query with no indexed word gets an empty list; a list
is shorter than ``topk`` when the index holds fewer passages. A corpus passage comes back as its line: its own
``id`` and its ``contents``, byte for byte (what Search-R1's own server returns over the same corpus); a dataset
paragraph's ``id`` is its passage number, as a string, and its ``contents`` ``title + "\\n" + text``, the layout
Search-R1's trainer splits at the first newline (a newline inside a title is sent as a space).

A bad request (a missing or mistyped field, ``topk`` out of 1..``max_topk``, no query, more than ``max_batch``
queries, more than ``max_results`` passages asked for (queries times topk), a query longer than
``max_query_chars``, a body that is not JSON) gets a 422 (400 for a body that is not
JSON) whose ``detail`` is one line saying what is wrong and what to send; a body larger than ``max_body_bytes`` gets
a 413 before it is read past the limit. The server goes on serving.

Retrieval runs off the event loop, in a worker thread: requests that arrive together are merged into one
``retrieve_many`` call per ``topk`` (a micro-batch, at most ``max_batch`` queries beyond the first request), so
concurrent requests neither wait on the event loop nor hold a thread each while bm25s runs (a small request on a
worker's only connection whose search is expected to be short, :data:`INLINE_SECONDS`, is answered on the event loop:
no hand-over to wait for). The index is
memory-mapped (:class:`CorpusIndex`), loaded and warmed (its BM25 matrix read, one query run) in the app's
lifespan, so ``/health`` answering 200 means ready. Before each batch and before reading the passages it returns,
the server asks whether a file of the index was written since it opened it (:meth:`CorpusIndex.changed`: an
``fstat`` a file); if one was (``cp`` over a served index rewrites its files under the memory maps) every answer is
a 503 naming the file, never a read of the changed bytes. A mapped index's files are also held with a read lease
(``_lease.py``, Linux): a writer's open waits until the searches in flight end, so a copy begun during a search
never cuts its pages short. An index replaced whole (``mv``, ``curriculum index --overwrite``) is not a change: the
files the server opened are still there, unchanged.

No ``from __future__ import annotations`` here: FastAPI reads the endpoints' annotations at run time, and fastapi
and pydantic are imported inside :func:`make_app`, so that ``import rag_retriever`` never imports them.
"""

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

from . import _prefork
from ._config import ServeConfig
from ._index import CorpusIndex
from ._integrity import into_memory, read_into_memory, reading_into_memory
from ._lease import CHANGED_HINT, Changed, ReadGuard

#: The key of a request's ASGI scope where the connection guard (``_guard.py``, which imports uvicorn) says why it
#: closed the connection.
CLOSED_KEY = "rag_retriever.closed"
#: The key where it says how many connections its worker holds (one: the request is answered on the event loop).
CONNECTIONS_KEY = "rag_retriever.connections"

log = logging.getLogger(__name__)

# The limits' defaults are ServeConfig's (written once, there; ``curriculum serve``'s options come from its fields).
#: ``topk`` when a request gives none (Search-R1's ``--topk`` default).
DEFAULT_TOPK = ServeConfig.default_topk
#: The most queries one request may carry (``--max-batch``).
DEFAULT_MAX_BATCH = ServeConfig.max_batch
#: The largest ``topk`` a request may ask (``--max-topk``); an index never returns more than its passages.
DEFAULT_MAX_TOPK = ServeConfig.max_topk
#: The most passages one request may ask for, queries times topk (``--max-results``).
DEFAULT_MAX_RESULTS = ServeConfig.max_results
#: The largest request body, in bytes (512 queries of 2,000 characters fit with room to spare).
DEFAULT_MAX_BODY_BYTES = ServeConfig.max_body_bytes
#: The longest query, in characters (BM25's cost grows with the query's distinct words).
DEFAULT_MAX_QUERY_CHARS = ServeConfig.max_query_chars
#: What ``app_from_env`` reads (for uvicorn's own worker processes, each opening the index).
ENV_INDEX = "RAG_CURRICULUM_SERVE_INDEX"
ENV_OPTIONS = "RAG_CURRICULUM_SERVE_OPTIONS"

EXAMPLE = '{"queries": ["who wrote Hamlet?"], "topk": 3, "return_scores": true}'
SEND = f"send a JSON object such as {EXAMPLE} (or {{\"query\": \"...\", \"topk\": 3}} for one query)"


def _public_manifest(ix: CorpusIndex, limits: dict[str, int]) -> dict[str, Any]:
    """What the index is, without this machine's paths: the manifest's facts, the sources without their paths."""
    m = ix.manifest
    keep = ("kind", "format", "retriever", "toolkit", "dataset", "passages", "depth", "questions",
            *ix.kind.manifest_keys)
    out = {k: m.get(k) for k in keep}
    out["index"] = ix.path.name
    out["fingerprint"] = ix.fingerprint
    out["sources"] = [{k: v for k, v in s.items() if k != "path"} for s in m.get("sources", [])]
    out["server"] = {**limits, "protocol": "Search-R1 retrieval_server (POST /retrieve)"}
    return out


def _validation_detail(errors: list[dict[str, Any]]) -> tuple[int, str]:
    """pydantic's errors as (status, one line): what is wrong, field by field, then what to send."""
    problems = []
    status = 422
    for e in errors[:5]:
        loc = ".".join(str(x) for x in e.get("loc", ()))
        kind = e.get("type", "")
        if kind == "json_invalid":
            status = 400
            problems.append(f"the body is not valid JSON ({e.get('ctx', {}).get('error', e.get('msg'))})")
            continue
        if kind in ("model_type", "model_attributes_type", "dict_type") and not loc:
            problems.append(f"the body must be a JSON object, got {type(e.get('input')).__name__}")
            continue
        msg = e.get("msg", "invalid").removeprefix("Value error, ")
        shown = "" if kind == "missing" or not loc else f" (got {_short(e.get('input'))})"
        problems.append(f"{loc}: {msg}{shown}" if loc else msg)
    if len(errors) > 5:
        problems.append(f"and {len(errors) - 5} more")
    return status, "; ".join(problems) + "; " + SEND


def _short(x: Any) -> str:
    """A value as JSON, cut to 60 characters."""
    try:
        text = json.dumps(x, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


#: The most queries a request alone in its worker may carry to be answered on the event loop itself (no thread).
INLINE_QUERIES = 4
#: The longest search (its queries times the index's running time a query) a request alone in its worker may be
#: expected to take to be answered on the event loop, which it blocks meanwhile: a BM25 query takes ~0.2 ms, a dense
#: one ~11 ms of its encoder's CPU, run in a thread so that ``/health`` and new connections are answered meanwhile.
INLINE_SECONDS = 0.002
#: The newest small search's weight in the running time a query (an exponentially weighted mean: one slow search
#: sends the next few requests to the thread, where they are timed too, until it decays below the bound).
INLINE_WEIGHT = 0.2


class _Batcher:
    """Merges the queries of concurrent requests into one :meth:`CorpusIndex.retrieve_many` call per ``topk``, run in
    one worker thread while the event loop goes on receiving. Each request's rows are its own queries' rankings,
    the same as a call with those queries alone (bm25s ranks each query on its own)."""

    def __init__(self, guard: ReadGuard, max_batch: int) -> None:
        from collections import deque

        self.ix = guard.ix
        self.guard = guard
        self.max_batch = max_batch
        self.pending: deque[tuple[list[str], int, bool | None, Any]] = deque()
        self.running = False
        self._task: Any = None  # the draining task, referenced so that it is not collected while it runs
        #: the running wall time of a query, in seconds, over searches of at most INLINE_QUERIES queries (None: none
        #: timed yet, so a worker's first request runs in a thread)
        self.per_query: float | None = None

    async def rank(self, queries: list[str], topk: int, with_scores: bool | None = None, alone: bool = False):
        """The (ids, scores) rows of ``queries``; or, given ``with_scores`` and alone in its batch, the response
        body itself, written in the same thread (:func:`_respond`): a request that finds the server idle pays one
        thread's hand-over, not two; in a batch of several, each request writes its own (those run in parallel
        with the next batch's search). ``alone``: the request's connection is its worker's only one (a client
        asking one request after another): a small request (:data:`INLINE_QUERIES`) expected to search briefly
        (:data:`INLINE_SECONDS`, by :attr:`per_query`) is answered on the event loop itself, no hand-over at all
        (each waits for the scheduler on a busy machine: one client's requests a second, 926 against 1,087 in the
        median of three at load 7; with more connections, or a slower index, threads as before)."""
        import asyncio

        if alone and with_scores is not None and self._brief(len(queries)) and not self.running:
            return self._run([(queries, topk)], with_scores)[0]  # (a worker with one connection: no hand-over)
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        self.pending.append((queries, topk, with_scores, fut))
        if not self.running:
            self.running = True
            self._task = loop.create_task(self._drain())
        return await fut

    def _brief(self, n: int) -> bool:
        """Whether a search of ``n`` queries is small and expected to be short enough to block the event loop."""
        per = self.per_query
        return n <= INLINE_QUERIES and per is not None and per * n <= INLINE_SECONDS

    def _timed(self, n: int, seconds: float) -> None:
        """Count a search of ``n`` queries that took ``seconds`` into :attr:`per_query` (a small one only: the
        requests that may be answered on the event loop are small, and a large batch's time a query is less)."""
        if n <= INLINE_QUERIES:
            per, was = seconds / n, self.per_query
            self.per_query = per if was is None else was + INLINE_WEIGHT * (per - was)

    async def _drain(self) -> None:
        from starlette.concurrency import run_in_threadpool

        try:
            while self.pending:
                take, size = [], 0
                while self.pending and (not take or size + len(self.pending[0][0]) <= self.max_batch):
                    item = self.pending.popleft()
                    take.append(item)
                    size += len(item[0])
                try:
                    results = await run_in_threadpool(self._run, [(q, k) for q, k, _, _ in take],
                                                      take[0][2] if len(take) == 1 else None)
                except Exception as e:  # noqa: BLE001  (each waiting request gets the error)
                    for *_, fut in take:
                        if not fut.done():
                            fut.set_exception(e)
                    continue
                for (*_, fut), res in zip(take, results, strict=True):
                    if not fut.done():
                        fut.set_result(res)
        finally:
            self.running = False

    def _run(self, batch: list[tuple[list[str], int]], with_scores: bool | None = None) -> list[Any]:
        """One ``retrieve_many`` per distinct topk over the batch's queries, split back per request (none when a
        file of the index was rewritten since it was opened: :class:`Changed`); a batch of one request given
        ``with_scores``: its response body."""
        import numpy as np

        out: list[Any] = [None] * len(batch)
        for k in sorted({k for _, k in batch}):
            members = [i for i, (_, kk) in enumerate(batch) if kk == k]
            queries = [q for i in members for q in batch[i][0]]
            with self.guard.reading():
                t = time.perf_counter()
                ids, scores = self.ix.retrieve_many(queries, k)
                self._timed(len(queries), time.perf_counter() - t)
            ids, scores = np.asarray(ids), np.asarray(scores)
            at = 0
            for i in members:
                n = len(batch[i][0])
                out[i] = (ids[at:at + n], scores[at:at + n])
                at += n
        if with_scores is not None:
            return [_respond(self.guard, *out[0], with_scores, self.ix.fingerprint)]
        return out


class _State:
    """The index behind the app: loaded (and warmed) once, in the lifespan."""

    def __init__(self, source: "str | Path | CorpusIndex", threads: int, encoder: str | None = None,
                 device: str | None = None, allow_other_encoder: bool = False, in_memory: bool | None = None) -> None:
        self.source = source
        self.in_memory = in_memory
        self.threads = threads
        self.options = {"encoder": encoder, "device": device, "allow_other_encoder": allow_other_encoder}
        self.ix: CorpusIndex | None = None
        self.ready = False
        self.batcher: _Batcher | None = None
        self.guard: ReadGuard | None = None
        self.mapped = True  # whether the index's files are mapped (not read whole into memory)
        #: read the index whole when its files cannot be leased (a small index, its reading not chosen by the user)
        self.whole_if_unleased = False
        self._lock = threading.Lock()

    def read_whole(self) -> str:
        """Open the index again, read whole into memory (its files checked against the manifest again), and serve
        that one; what was done, in a line. Where it cannot be opened (a file already changed), every answer is a
        503 naming the file."""
        old = self.ix
        try:
            with reading_into_memory(True):
                ix = CorpusIndex(old.path, check=old.check, **old._options)
            ix.warm()
        except Exception as e:  # noqa: BLE001  (the file changed under the writer: refused, one line)
            self.guard.writing = self.guard.pending[0]
            return f"the index could not be read again ({e}): every answer is a 503"
        self.guard.release()
        self.ix, self.guard, self.mapped = ix, ReadGuard(ix), False
        self.batcher = _Batcher(self.guard, self.batcher.max_batch)
        return f"index read into memory ({old.path.name}): files written over it cannot crash the server"

    def load(self) -> CorpusIndex:
        with self._lock:
            if self.ix is None:
                src = self.source
                if self.in_memory is not None and not isinstance(src, CorpusIndex):  # a worker's or replica's own
                    read_into_memory(self.in_memory)
                self.ix = src if isinstance(src, CorpusIndex) else CorpusIndex(src, threads=self.threads, **self.options)
                self.mapped = not into_memory()
                self.guard = ReadGuard(self.ix)
            ix = self.ix
            ix.warm()  # the retriever opened (files mapped, search compiled or loaded, models loaded), one query run
            return ix


def make_app(index: "str | Path | CorpusIndex", *, max_batch: int = DEFAULT_MAX_BATCH,
             max_topk: int = DEFAULT_MAX_TOPK, default_topk: int = DEFAULT_TOPK, threads: int = 0,
             max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, max_query_chars: int = DEFAULT_MAX_QUERY_CHARS,
             max_results: int = DEFAULT_MAX_RESULTS, encoder: str | None = None, device: str | None = None,
             allow_other_encoder: bool = False, in_memory: bool | None = None, whole_if_unleased: bool = False) -> Any:
    """A FastAPI app serving ``index`` (a directory of ``curriculum index``, or a loaded :class:`CorpusIndex`) with
    Search-R1's retriever protocol (this module's docstring). ``max_batch``: the most queries one request may carry;
    ``max_topk``: the largest ``topk`` a request may ask; ``default_topk``: the ``topk`` of a request that gives
    none; ``threads``: bm25s's threads per retrieval (0: one per CPU; with a directory only); ``max_body_bytes``:
    the largest request body (413 above it); ``max_query_chars``: the longest query (422 above it);
    ``max_results``: the most passages a request may ask for, its queries times its topk (422 above it);
    ``encoder``, ``device``, ``allow_other_encoder``: a dense index's (:class:`CorpusIndex`'s); ``in_memory``: read
    a directory's files whole into memory (True) or map them (False) in this process (None: as the process
    already does, :func:`~rag_retriever._integrity.read_into_memory`); ``whole_if_unleased``: where a mapped
    index's files cannot all be leased (another process holds one open for writing), read it whole into memory
    (a small index whose reading the user did not choose) rather than refuse that file's reads until it can."""
    from contextlib import asynccontextmanager

    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse, Response
    from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator
    from starlette.concurrency import run_in_threadpool

    for name, value in (("max_batch", max_batch), ("max_topk", max_topk), ("default_topk", default_topk),
                        ("max_body_bytes", max_body_bytes), ("max_query_chars", max_query_chars),
                        ("max_results", max_results)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if default_topk > max_topk:
        raise ValueError(f"default_topk {default_topk} is above max_topk {max_topk}")
    state = _State(index, threads, encoder, device, allow_other_encoder, in_memory)
    state.whole_if_unleased = whole_if_unleased
    limits = {"max_batch": max_batch, "max_topk": max_topk, "default_topk": default_topk,
              "max_results": max_results, "max_body_bytes": max_body_bytes, "max_query_chars": max_query_chars}

    class RetrieveRequest(BaseModel):
        """Search-R1's ``QueryRequest`` (``queries``, ``topk``, ``return_scores``), plus ``query``, one query.
        Other fields are ignored, as Search-R1's server ignores them."""

        model_config = ConfigDict(extra="ignore")
        queries: list[str] | None = None
        query: str | None = None
        topk: int | None = None
        return_scores: bool = False

        @field_validator("topk", mode="before")
        @classmethod
        def _no_bool(cls, v: Any) -> Any:
            if isinstance(v, bool):  # pydantic would read true as 1
                raise ValueError("a boolean, not an integer")
            return v

        @model_validator(mode="after")
        def _check(self) -> "RetrieveRequest":
            if self.queries is None and self.query is None:
                raise ValueError('no query: give "queries" (a list of strings) or "query" (one string)')
            if self.queries is not None and self.query is not None:
                raise ValueError('both "queries" and "query" given: give one of them')
            if self.queries is not None and not self.queries:
                raise ValueError('"queries" is an empty list: give at least one query')
            if self.queries is not None and len(self.queries) > max_batch:
                raise ValueError(f'{len(self.queries)} queries in one request; this server takes at most {max_batch} '
                                 "(curriculum serve --max-batch): split them into several requests")
            for i, q in enumerate(self.queries if self.queries is not None else [self.query]):
                if len(q) > max_query_chars:
                    raise ValueError(f"query {i} is {len(q):,} characters; this server takes at most "
                                     f"{max_query_chars:,} (curriculum serve --max-query-chars)")
            if self.topk is not None and not 1 <= self.topk <= max_topk:
                raise ValueError(f'"topk" is {self.topk}; it must be between 1 and {max_topk} '
                                 "(curriculum serve --max-topk)")
            return self

    def start() -> None:
        """Load and warm the index, then answer: the lifespan's work, also called by a Ray Serve replica (which
        runs no lifespan)."""
        if state.ready:
            return
        ix = state.load()
        state.batcher = _Batcher(state.guard, max_batch)
        state.ready = True
        log.info("serving %s passages of %s (%s)", f"{len(ix):,}", ix.path.name, ix.dataset or "a corpus")

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await run_in_threadpool(start)
        if state.mapped:  # (a copy over the files during a search would cut its pages short: held back instead)
            import asyncio

            why = state.guard.lease(asyncio.get_running_loop())
            if why is not None and state.guard.pending and state.whole_if_unleased:
                # a writer opened a file since the command chose to map the index: a small one is read whole now
                log.warning("the index's files cannot all be leased (%s): reading the index whole into memory", why)
                why = await run_in_threadpool(state.read_whole)
            if why is None:
                log.info("the index's %d files are leased: a copy over them waits for the searches in flight, then "
                         "every answer is a 503", len(state.ix._fds))
            elif not state.mapped:
                log.info("%s", why)
            elif state.guard.pending:
                log.error("the index's file %s: every answer is a 503 naming it until the writer closes it (its "
                          "lease is tried again before each read); %s", why, CHANGED_HINT)
            else:
                log.warning("the index's files are mapped and not leased (%s): a copy over them during a search can "
                            "stop the server; replace a served index with mv", why)
        try:
            yield
        finally:
            state.guard.release()
        state.ready = False

    app = FastAPI(title="rag-curriculum retriever", lifespan=lifespan,
                  description="An index of `curriculum index` (BM25, dense or hybrid), with Search-R1's retriever "
                              "protocol.")

    def not_ready() -> JSONResponse:
        return JSONResponse({"status": "loading", "detail": "the index is still loading; try again shortly"},
                            status_code=503, headers={"Retry-After": "1"})

    @app.get("/health")
    async def health() -> Any:
        if not state.ready:
            return not_ready()
        ix = state.ix
        what = state.guard.changed()
        if what is not None:
            return JSONResponse({"status": "changed", "detail": f"the index {ix.path.name}: {what} since this server "
                                                                f"opened it: {CHANGED_HINT}"}, status_code=503)
        return {"status": "ok", "index": ix.path.name, "dataset": ix.dataset, "passages": len(ix),
                "fingerprint": ix.fingerprint}

    @app.get("/manifest")
    async def manifest() -> Any:
        if not state.ready:
            return not_ready()
        return _public_manifest(state.ix, limits)

    @app.get("/")
    async def root() -> Any:
        return await manifest()

    schema = RetrieveRequest.model_json_schema()

    async def answer(scope: dict[str, Any], receive: Any) -> Response:
        """A ``POST /retrieve``'s response, from its ASGI scope and receive channel: the endpoint's, and the one
        :func:`fast_path` sends without FastAPI's routing (the same bytes)."""
        if not state.ready:
            return not_ready()
        try:
            body = await _read_capped(scope, receive, max_body_bytes)
        except _Gone as e:  # one line, not uvicorn's traceback of starlette's ClientDisconnect
            client = scope.get("client")
            where = "{}:{}".format(*client) if client else "a client"
            why = scope.get(CLOSED_KEY)
            log.info("%s: %s", where, why or f"went away before its request body was complete ({e.read:,} bytes "
                     "read)")
            return Response(status_code=400)  # never sent: the connection is closed
        if body is None:
            return JSONResponse({"detail": f"the request body is larger than {max_body_bytes:,} bytes (curriculum "
                                           "serve --max-body-bytes): split the queries into several requests"},
                                status_code=413)
        try:
            req = RetrieveRequest.model_validate_json(body)
        except ValidationError as e:
            status, detail = _validation_detail(e.errors(include_url=False))
            return JSONResponse({"detail": detail}, status_code=status)
        queries = req.queries if req.queries is not None else [req.query]
        topk = req.topk or default_topk
        asked = len(queries) * min(topk, len(state.ix))  # what the response would hold, at most
        if asked > max_results:
            return JSONResponse({"detail": f"{len(queries)} queries with topk {topk} ask for {asked:,} passages; this "
                                           f"server returns at most {max_results:,} a request (curriculum serve "
                                           "--max-results): split the queries into several requests"},
                                status_code=422)
        try:
            payload = await state.batcher.rank(queries, topk, req.return_scores, scope.get(CONNECTIONS_KEY, 2) <= 1)
            if not isinstance(payload, bytes):  # (ranked in a batch of several: the response written here)
                payload = await run_in_threadpool(_respond, state.guard, *payload, req.return_scores,
                                                  state.ix.fingerprint)
        except Changed as e:  # a file rewritten under the server: refused, never read
            log.error("%s", e)
            return JSONResponse({"detail": str(e)}, status_code=503)
        except Exception as e:  # noqa: BLE001  (one line to the client, the traceback to the log)
            log.exception("retrieval failed")
            return JSONResponse({"detail": f"retrieval failed: {type(e).__name__}: {e}"}, status_code=500)
        return Response(payload, media_type="application/json")

    @app.post("/retrieve", openapi_extra={"requestBody": {"required": True,
                                                          "content": {"application/json": {"schema": schema}}}})
    async def retrieve(request: Request) -> Any:
        return await answer(request.scope, request.receive)

    app.state.index = state
    app.state.limits = limits
    app.state.start = start
    app.state.answer = answer
    return app


def fast_path(app: Any) -> Any:
    """``app`` (:func:`make_app`'s) as the ASGI app a server runs: ``POST /retrieve`` answered straight from the
    scope (the endpoint's own code, the same bytes), without FastAPI's middleware, routing and dependency solving
    (a one-query request's server CPU 0.50 ms against 0.55, medians of three at load 8); everything else (the
    lifespan, ``/health``, ``/manifest``, the OpenAPI pages) by ``app``."""
    answer = app.state.answer

    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/retrieve" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        try:
            response = await answer(scope, receive)
        except Exception:  # noqa: BLE001  (as FastAPI's error middleware: the traceback to the log, a bare 500)
            log.exception("Exception in ASGI application")
            response = _plain_500()
        await send({"type": "http.response.start", "status": response.status_code, "headers": response.raw_headers})
        await send({"type": "http.response.body", "body": response.body})

    asgi.state = app.state  # (what a caller reads of the app: its index, limits)
    return asgi


def _plain_500() -> Any:
    from starlette.responses import PlainTextResponse

    return PlainTextResponse("Internal Server Error", status_code=500)


class _Gone(Exception):
    """The connection closed before the request's body was complete (``read``: the bytes that came)."""

    def __init__(self, read: int) -> None:
        super().__init__(read)
        self.read = read


async def _read_capped(scope: dict[str, Any], receive: Any, limit: int) -> bytes | None:
    """The request's body (read from its ASGI ``receive``), or None as soon as it is known to be larger than
    ``limit`` bytes (from its Content-Length, else while it streams in): an oversized body is never held in memory
    whole. :class:`_Gone` when the connection closes first (the client went away, or the server's guard timed the
    body out)."""
    length = next((v for k, v in scope["headers"] if k == b"content-length"), None)
    if length is not None and length.strip().isdigit() and int(length) > limit:
        return None
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Gone(size)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _respond(guard: ReadGuard, ids: Any, scores: Any, with_scores: bool, fingerprint: str | None = None) -> bytes:
    """The response body: per query, its ranked passages (id -1, "no indexed word", left out) as Search-R1's
    documents, with or without scores; and the index's ``fingerprint`` beside ``result`` (Search-R1's clients read
    ``result`` alone; the toolkit's check it against the index the run began with)."""
    import numpy as np
    import orjson

    flat = np.unique(ids[ids >= 0]).astype(np.int64)
    with guard.reading():  # (the passages are read from a memory map too)
        docs = {pid: {"id": doc_id, "contents": contents}
                for pid, (doc_id, contents, _, _) in zip(flat.tolist(), guard.ix.documents(flat), strict=True)}
    result = []
    for row_ids, row_scores in zip(ids.tolist(), scores.tolist(), strict=True):
        if with_scores:
            result.append([{"document": docs[i], "score": s} for i, s in zip(row_ids, row_scores, strict=True)
                           if i >= 0])
        else:
            result.append([docs[i] for i in row_ids if i >= 0])
    return orjson.dumps({"result": result, "fingerprint": fingerprint} if fingerprint else {"result": result})


def run_server(ix: CorpusIndex, uvicorn_options: dict[str, Any], *, workers: int = 1, threads: int = 0,
               **app_options: Any) -> int:
    """Serve the loaded index ``ix`` (what ``curriculum serve`` and ``rag-retriever serve`` run): in this process
    (``workers`` 1), or in ``workers`` processes forked from this one after the index was loaded, sharing it
    (:mod:`._prefork`: open ``ix`` after :func:`~rag_retriever._prefork.single_threaded` then), each with
    ``threads`` search threads (0: the CPUs shared out). ``uvicorn_options``: ``uvicorn.Config``'s;
    ``app_options``: :func:`make_app`'s. The exit status."""
    import errno

    import uvicorn
    from rag_plumbing._ports import claim_port

    app = fast_path(make_app(ix, **app_options))
    if not uvicorn_options.get("uds") and uvicorn_options.get("fd") is None:
        # one server a port (rag_plumbing._ports; the command line claimed it already, before opening the index)
        problem = claim_port(uvicorn_options.get("host", "127.0.0.1"), uvicorn_options.get("port", 8000))
        if problem:
            raise OSError(errno.EADDRINUSE, problem)
    if workers == 1:
        uvicorn.run(app, **uvicorn_options)
        return 0
    config = uvicorn.Config(app, **uvicorn_options)
    if config.uds or config.fd is not None:
        socks, own = [config.bind_socket()], False
    else:
        socks, own = _prefork.listeners(config.host, config.port, workers)
        log.info("listening on http://%s:%d%s", config.host, config.port,
                 ", a socket a worker (SO_REUSEPORT)" if own else "")
    per = _prefork.threads_for(threads, workers)

    def serve(slot: int) -> None:
        _prefork.after_fork(ix, per)
        if own:  # (the other workers' sockets are theirs: closed here)
            for i, sock in enumerate(socks):
                if i != slot:
                    sock.close()
        uvicorn.Server(config).run(sockets=[socks[slot] if own else socks[0]])

    return _prefork.run(serve, workers)


def app_from_env() -> Any:
    """An app for uvicorn's own worker processes, each of which imports this factory and opens the index again
    (``uvicorn.run("rag_retriever._server:app_from_env", factory=True, workers=N)``), reading the index directory
    and the limits from the environment (:data:`ENV_INDEX`, :data:`ENV_OPTIONS`). ``curriculum serve --workers N``
    forks its workers after loading the index instead (:func:`run_server`: one copy of it)."""
    index = os.environ.get(ENV_INDEX)
    if not index:
        raise RuntimeError(f"{ENV_INDEX} is not set: start the server with curriculum serve --index DIR")
    options = json.loads(os.environ.get(ENV_OPTIONS) or "{}")
    return make_app(index, **options)
