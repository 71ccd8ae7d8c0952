"""What keeps ``curriculum serve`` answering when clients hold connections open without finishing a request (a
slow-loris load: thousands of sockets that send part of a header, or a header and part of a body, and wait, which
would exhaust the server's file descriptors): uvicorn's HTTP protocol with limits of its own, on httptools
(:class:`GuardedHttpToolsProtocol`, the C parser, where the ``httptools`` package is installed) or on h11
(:class:`GuardedH11Protocol`); :func:`protocol` picks (``RAG_CURRICULUM_SERVE_HTTP=h11`` keeps h11).

* A connection that has not sent a complete request line and headers within ``header_timeout`` seconds of its
  opening, or of the first byte of its next request on a kept-alive connection, is closed (uvicorn's own
  ``timeout_keep_alive`` closes one that sends nothing more).
* Once the headers are in, the body must arrive within ``body_timeout`` seconds, plus one second per
  ``min_body_rate`` bytes received (the rule of Apache's ``mod_reqtimeout``, ``body=20,MinRate=500``): a body that
  stalls, drips a byte at a time or never sends its last chunk is answered ``408 Request Timeout`` and its
  connection closed, while a large body sent at a useful rate is given the time it needs.
* At most ``max_connections`` connections are open (below the process's descriptor limit). One more sheds an
  idle connection: one waiting for a request's headers or body, or kept alive between requests, the one heard
  from least recently; so a client that asks (``/health``, ``/retrieve``) always gets in, whatever the stalled
  connections do. Only when every open connection has a complete request being answered is the newcomer closed.

* A request's line and headers larger than 16 KiB (h11's own limit, ``h11_max_incomplete_event_size``) get a 431
  with a one-line JSON ``detail`` and their connection closed, on both parsers and however the bytes arrive (in one
  read or many, a head complete or not: h11's buffer is measured before it parses, httptools' head is counted as
  its parser reads it); framing a parser must refuse (a ``Content-Length`` beside ``Transfer-Encoding``, a bad chunk
  size or length, a header without a colon) a 400. A chunk whose size alone is above ``--max-body-bytes`` is a 413
  at once (h11, which would otherwise wait for its bytes; llhttp refuses a size past 64 bits itself).
* A request asking to upgrade its connection to another protocol (``Upgrade: h2c``) is answered as HTTP/1.1, its
  body read (RFC 9110 lets a server ignore ``Upgrade``): llhttp stops at such a head and took the body for the new
  protocol's bytes, so the app saw none; now the body is read up to its ``Content-Length`` and the connection is
  closed after the answer. A chunked body with ``Upgrade`` gets a 400 at once.

A request whose connection is closed here is logged by the app in one line (:data:`CLOSED_KEY` in its scope says
why). uvicorn's worker processes import the protocol by name and read the limits from the environment
(:data:`ENV_LIMITS`), which ``curriculum serve`` sets.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import re
import resource
import time
from collections import OrderedDict
from typing import Any

import h11
from rag_plumbing import MaskingFilter, mask_secrets
from uvicorn.protocols.http.h11_impl import H11Protocol

try:
    import httptools
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # (no httptools: h11 serves)
    HttpToolsProtocol = None

from ._config import ServeConfig
from ._server import CLOSED_KEY, CONNECTIONS_KEY

#: The limits, as JSON, for uvicorn's worker processes.
ENV_LIMITS = "RAG_CURRICULUM_SERVE_GUARD"
DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_BODY_TIMEOUT = 20.0
DEFAULT_MIN_BODY_RATE = 500
#: The largest request line and headers (h11's default ``max_incomplete_event_size``).
MAX_HEAD_BYTES = 16 * 1024
#: The end of a request's head (h11 and llhttp both accept a bare ``\n`` line end).
_HEAD_END = re.compile(rb"\n\r?\n")
#: What keeps h11 where httptools is installed.
ENV_HTTP = "RAG_CURRICULUM_SERVE_HTTP"


class MaskAccessLog(logging.Filter):
    """Masks secrets in the server's log lines by the toolkit's one rule (:mod:`rag_plumbing._secrets`):
    in uvicorn's access lines the request's path and query (``POST /retrieve?api_key=***``), which its formatter
    reads from the record's arguments; in every other line its text (credentials in URLs, secret query
    parameters)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if record.name == "uvicorn.access" and isinstance(args, tuple) and len(args) == 5:
            client, method, path, version, status = args
            masked = mask_secrets(str(path))
            if masked != path:
                record.args = (client, method, masked, version, status)
            return True
        return MaskingFilter().filter(record)


def log_config() -> dict[str, Any]:
    """uvicorn's logging configuration with :class:`MaskAccessLog` on its handlers, and the toolkit's server lines
    (``rag_retriever``: a request closed here, a client gone mid-body) written beside uvicorn's, in every worker
    process."""
    from uvicorn.config import LOGGING_CONFIG

    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["rag_mask"] = {"()": f"{__name__}.MaskAccessLog"}
    for handler in config["handlers"].values():
        handler["filters"] = [*handler.get("filters", []), "rag_mask"]
    config["loggers"]["rag_retriever"] = {"handlers": ["default"], "level": "INFO", "propagate": False}
    return config


def descriptor_cap(wanted: int | None = None) -> int:
    """The connection cap: ``wanted`` (default 1,024), at most the soft descriptor limit less 64 for the index's
    files, logs and sockets of its own."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    room = (soft - 64) if soft != resource.RLIM_INFINITY else 1 << 20
    return max(16, min(wanted or 1024, room))


class _Guarded:
    """The guard over one of uvicorn's HTTP protocols (module docstring): what is the same on h11 and httptools.
    A subclass says how its parser's state is read after each ``data_received`` (:meth:`_parsed`) and how a 408 is
    written (:meth:`_send_408`)."""

    max_connections = 1024
    header_timeout = DEFAULT_HEADER_TIMEOUT
    body_timeout = DEFAULT_BODY_TIMEOUT
    min_body_rate = DEFAULT_MIN_BODY_RATE
    max_body_bytes = ServeConfig.max_body_bytes

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        limits = os.environ.get(ENV_LIMITS)
        if limits:
            got = json.loads(limits)
            self.max_connections = int(got["max_connections"])
            self.header_timeout = float(got["header_timeout"])
            self.body_timeout = float(got.get("body_timeout", DEFAULT_BODY_TIMEOUT))
            self.min_body_rate = int(got.get("min_body_rate", DEFAULT_MIN_BODY_RATE))
            self.max_body_bytes = int(got.get("max_body_bytes", ServeConfig.max_body_bytes))
        state = self.server_state
        if not hasattr(state, "rag_idle"):
            state.rag_idle = OrderedDict()  # connections that may be shed, the one heard from least recently first
        self._idle: OrderedDict = state.rag_idle
        self._timer: Any = None  # the deadline of the request's headers or body
        self._in_body = False
        self._body_start = 0.0
        self._body_bytes = 0
        self._deferred: tuple[int, bytes, str, str] | None = None  # a refusal waiting for the answers before it

    # -- bookkeeping ------------------------------------------------------------------------------------------------
    def _heard(self) -> None:
        """This connection is idle (may be shed) and was heard from now."""
        self._idle[self] = None
        self._idle.move_to_end(self)

    def _set_timer(self, delay: float, callback: Any) -> None:
        self._clear_timer()
        self._timer = self.loop.call_later(delay, callback)

    def _clear_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    def _close(self, why: str) -> None:
        """Close the connection; a request in progress learns why (its scope) and sees a disconnect."""
        self._clear_timer()
        self._idle.pop(self, None)
        if self.cycle is not None and not self.cycle.response_complete:
            self.scope[CLOSED_KEY] = why
        if not self._closing():
            self.transport.close()

    # -- deadlines --------------------------------------------------------------------------------------------------
    def _header_expired(self) -> None:
        self._timer = None
        if not self._in_body and not self._closing():
            self._close(f"its request line and headers took longer than --header-timeout {self.header_timeout:g} s")

    def _body_deadline(self) -> float:
        return self._body_start + self.body_timeout + self._body_bytes / self.min_body_rate

    def _body_check(self) -> None:
        self._timer = None
        if not self._in_body or self._closing():
            return
        now = time.monotonic()
        deadline = self._body_deadline()
        if now < deadline:  # bytes came in meanwhile: they earned more time
            self._set_timer(deadline - now, self._body_check)
            return
        why = (f"request body timed out: {self._body_bytes:,} bytes in {now - self._body_start:.1f} s (curriculum "
               f"serve --body-timeout {self.body_timeout:g} s, plus 1 s per --min-body-rate {self.min_body_rate:,} "
               "bytes received)")
        self._send_408(why)
        self._close(why)
        if self.cycle is not None:  # the app sees a disconnect (and sends nothing more)
            self.cycle.disconnected = True
            self.cycle.message_event.set()

    def _send_408(self, why: str) -> None:
        raise NotImplementedError

    def _busy(self, own: Any = None) -> bool:
        """Whether a request before the one refused (``own``: its cycle, if it has one) is still being answered on
        this connection (pipelined): its answer goes first."""
        cycle = self.cycle
        return bool(getattr(self, "pipeline", None)) or (
            cycle is not None and cycle is not own and not cycle.response_complete)

    def _refuse(self, status: int, reason: bytes, why: str, advice: str, own: Any = None) -> None:
        """Answer ``status`` with a one-line JSON ``detail`` (``why: advice``) and close the connection: at once, or,
        where requests before it are still being answered, once they are (answers keep their order); ``own``: the
        refused request's cycle, if it has one, which learns it went away (it sends nothing more)."""
        if self._busy(own):
            self._deferred = (status, reason, why, advice)
            return
        body = json.dumps({"detail": f"{why}: {advice}"}).encode()
        if not self._closing():
            self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                                 b"connection: close\r\n\r\n" % (status, reason, len(body)) + body)
        if own is not None and not own.response_complete:
            own.response_started = True
            own.disconnected = True
            own.message_event.set()
        self._close(why)

    def _refuse_head(self, own: Any = None) -> None:
        self._refuse(431, b"Request Header Fields Too Large",
                     f"its request line and headers are larger than {MAX_HEAD_BYTES:,} bytes",
                     "send the queries in the body of POST /retrieve, not in its URL or headers", own)

    @staticmethod
    def _timeout_body(why: str) -> tuple[bytes, list[tuple[bytes, bytes]]]:
        body = json.dumps({"detail": f"{why}; send the body at once, or faster"}).encode()
        return body, [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                      (b"connection", b"close")]

    # -- uvicorn's protocol -----------------------------------------------------------------------------------------
    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            victim = next((c for c in self._idle if not c._closing()), None)  # (one closing frees its place)
            if victim is None:  # every connection has a complete request being answered: the newcomer waits
                transport.close()
                return
            victim._close(f"shed to make room for a new connection (curriculum serve --max-connections "
                          f"{self.max_connections})")
        self._heard()
        self._set_timer(self.header_timeout, self._header_expired)

    def data_received(self, data: bytes) -> None:
        between = self.cycle is None or self.cycle.response_complete
        if between and self._timer is None:  # the first byte of the next request on a kept-alive connection
            self._set_timer(self.header_timeout, self._header_expired)
        if self._in_body:
            self._body_bytes += len(data)
        if self in self._idle:
            self._heard()
        self._receive(data)

    def _receive(self, data: bytes) -> None:
        """Hand ``data`` to the parser (uvicorn's own ``data_received``; httptools' guard has its own)."""
        super().data_received(data)  # type: ignore[misc]

    def _parsed(self) -> None:
        """After the parser read what came: a body under way is timed; a request complete is never shed."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete or self._closing():
            return
        cycle.scope[CONNECTIONS_KEY] = len(self.connections)
        if cycle.more_body:  # the headers are in, the body is coming
            if not self._in_body:
                self._in_body, self._body_start, self._body_bytes = True, time.monotonic(), len(cycle.body)
                self._set_timer(self.body_timeout, self._body_check)
        else:  # the whole request is in: it is being answered, never shed
            self._in_body = False
            self._clear_timer()
            self._idle.pop(self, None)

    def on_response_complete(self) -> None:
        self._in_body = False
        self._clear_timer()
        super().on_response_complete()
        if self._deferred is not None and not self._busy():  # the answers before a refusal are out: now it
            self._refuse(*self._deferred)
        elif not self._closing():
            self._heard()  # idle between requests (uvicorn's keep-alive timeout closes it)

    def connection_lost(self, exc: Exception | None) -> None:
        self._clear_timer()
        self._idle.pop(self, None)
        super().connection_lost(exc)


class GuardedH11Protocol(_Guarded, H11Protocol):
    """uvicorn's h11 protocol with deadlines on a request's headers and body and a cap on connections (module
    docstring)."""

    library = "h11"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._sized: Any = None  # the last request whose head was measured

    def handle_events(self) -> None:
        if self.conn.their_state is h11.IDLE and not self._closing() and self._head_too_large():
            self._refuse_head()  # (h11 would parse a whole head of any size, or answer 400 past 16 KiB unfinished)
            return
        super().handle_events()
        cycle = self.cycle
        if self._closing() or cycle is None or cycle.response_complete:
            return
        if cycle is not self._sized:  # (a head h11 parsed from bytes buffered during another request's answer)
            self._sized = cycle
            if _head_size(cycle.scope) > MAX_HEAD_BYTES:
                self._refuse_head(own=cycle)
                return
        if cycle.keep_alive and _length_and_chunked(cycle.scope["headers"]):
            # RFC 9112 6.3: a request framed by both Content-Length and Transfer-Encoding (a smuggling attempt, or
            # a broken client) is answered, then its connection closed; h11 reads it as chunked and would keep it
            cycle.keep_alive = False
        chunk = getattr(getattr(self.conn, "_reader", None), "_bytes_in_chunk", 0)  # (h11's chunk still to come)
        if isinstance(chunk, int) and chunk > self.max_body_bytes:
            self._refuse(413, b"Content Too Large", f"a chunk of {chunk:,} bytes is larger than the largest body this "
                         f"server takes ({self.max_body_bytes:,} bytes, curriculum serve --max-body-bytes)",
                         "split the queries into several requests", own=cycle)
            return
        self._parsed()

    def _head_too_large(self) -> bool:
        """Whether the head h11 has buffered (its end found, or not yet) is larger than :data:`MAX_HEAD_BYTES`."""
        buffered = self.conn.trailing_data[0]
        end = _HEAD_END.search(buffered, 0, MAX_HEAD_BYTES + 4)
        return (end.start() if end else len(buffered)) > MAX_HEAD_BYTES

    def _send_408(self, why: str) -> None:
        if self.cycle is None or self.cycle.response_started or self.conn.our_state is not h11.SEND_RESPONSE:
            return
        body, headers = self._timeout_body(why)
        try:
            out = self.conn.send(h11.Response(status_code=408, headers=headers, reason=b"Request Timeout"))
            out += self.conn.send(h11.Data(data=body)) + self.conn.send(h11.EndOfMessage())
        except h11.LocalProtocolError:
            return
        self.cycle.response_started = True
        self.transport.write(out)


if HttpToolsProtocol is not None:
    class GuardedHttpToolsProtocol(_Guarded, HttpToolsProtocol):
        """uvicorn's httptools protocol (llhttp, in C: a one-query request's server CPU 0.44 ms against h11's 0.55,
        medians of three at load 5) with the same guard, and h11's cap on a request's line and headers, which
        llhttp does not have. llhttp refuses a ``Content-Length`` beside ``Transfer-Encoding`` itself (a 400)."""

        library = "httptools"

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._in_head = False  # between a request's first byte and the end of its headers
            self._head_size = 0  # its URL and complete headers, as the parser read them
            self._head_raw = 0  # the bytes received since it began (reads of its own only)
            self._head_refused = False
            self._began_here = self._prior_here = False  # in this read: a request began; another's part came first
            self._upgrade_left: int | None = None  # an ignored Upgrade's body still to come (None: none)

        # -- the head's size, counted as the parser reads it (llhttp has no limit of its own) --------------------
        def on_message_begin(self) -> None:
            self._in_head, self._head_size, self._head_raw, self._began_here = True, 0, 0, True
            super().on_message_begin()

        def on_url(self, url: bytes) -> None:
            self._count_head(len(url) + 16)  # (the method and version beside it)
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._count_head(len(name) + len(value) + 4)
            super().on_header(name, value)

        def _count_head(self, n: int) -> None:
            self._head_size += n
            if self._head_size > MAX_HEAD_BYTES:
                self._head_refused = True
                raise _HeadTooLarge  # (the parser stops: :meth:`_receive` answers 431)

        def on_headers_complete(self) -> None:
            self._in_head = False
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            self._prior_here = True
            super().on_body(body)

        def on_message_complete(self) -> None:
            self._prior_here = True
            super().on_message_complete()

        # -- uvicorn's data_received, with the head's size kept and an ignored Upgrade's body read --------------
        def _receive(self, data: bytes) -> None:
            if self._deferred is not None or self._head_refused:  # (refused: what follows is not read)
                return
            if self._upgrade_left is not None:
                self._upgraded_body(data)
                return
            self._began_here = self._prior_here = False
            unset = getattr(self, "_unset_keepalive_if_required", None)
            if unset is not None:
                unset()
            try:
                self.parser.feed_data(data)
            except httptools.HttpParserUpgrade as e:
                if self._should_upgrade():  # (a WebSocket, where a library for it is installed: uvicorn's)
                    self.handle_websocket_upgrade()
                else:
                    self._ignore_upgrade(data[e.args[0]:] if e.args else b"")
                return
            except httptools.HttpParserError:
                if self._head_refused:
                    self._refuse_head()
                    return
                msg = "Invalid HTTP request received."
                self.logger.warning(msg)
                self.send_400_response(msg)
                return
            if self._closing():
                return
            if self._in_head:  # a head not complete yet: its bytes so far (those of its own reads, whole)
                self._head_raw = (0 if self._prior_here else len(data)) if self._began_here \
                    else self._head_raw + len(data)
                if max(self._head_size, self._head_raw) > MAX_HEAD_BYTES:
                    self._refuse_head()
                    return
            self._parsed()

        def _ignore_upgrade(self, rest: bytes) -> None:
            """A request asking for another protocol (``Upgrade: h2c``), answered as HTTP/1.1: llhttp stopped at its
            head and took what follows for the new protocol (its body skipped, the request told complete); the body
            is read here, up to its ``Content-Length``, and the connection closes after the answer."""
            self.logger.info("a request asked to upgrade its connection (%s): answered as HTTP/1.1",
                             (self._get_upgrade() or b"?").decode("latin-1"))
            cycle = self.cycle
            if cycle is None or cycle.response_complete:
                self._close("it asked to upgrade its connection")
                return
            cycle.keep_alive = False  # (the parser stopped at the upgrade: no request after this one)
            headers = dict(self.headers)
            if b"transfer-encoding" in headers:
                if self._busy(own=cycle):  # (pipelined behind another: answered in its turn, its body unread)
                    self._upgrade_left = 0
                    self._parsed()
                    return
                self._refuse(400, b"Bad Request", "a chunked body with an Upgrade header is not read here",
                             "send the body with a Content-Length, or the request without Upgrade", own=cycle)
                return
            length = headers.get(b"content-length", b"0").strip()
            self._upgrade_left = int(length) if length.isdigit() else 0
            if self._upgrade_left:
                cycle.more_body = True
                cycle.message_event.clear()
                self._upgraded_body(rest)
            else:
                self._parsed()

        def _upgraded_body(self, data: bytes) -> None:
            """Bytes of an ignored Upgrade's body (:meth:`_ignore_upgrade`); any after it are dropped."""
            cycle, left = self.cycle, self._upgrade_left or 0
            if left and data and cycle is not None and not cycle.response_complete:
                take = data[:left]
                self._upgrade_left = left - len(take)
                cycle.body += take
                if not self._upgrade_left:
                    cycle.more_body = False
                cycle.message_event.set()
            self._parsed()

        def _send_408(self, why: str) -> None:
            if self.cycle is None or self.cycle.response_started:
                return
            body, headers = self._timeout_body(why)
            self.cycle.response_started = True
            self.transport.write(b"HTTP/1.1 408 Request Timeout\r\n" + b"".join(n + b": " + v + b"\r\n" for n, v in headers)
                                 + b"\r\n" + body)
else:  # pragma: no cover - the serve extra installs httptools
    GuardedHttpToolsProtocol = None


def protocol() -> type:
    """The guarded protocol a server runs: httptools' where it is installed (``RAG_CURRICULUM_SERVE_HTTP=h11``:
    h11's)."""
    if GuardedHttpToolsProtocol is not None and os.environ.get(ENV_HTTP, "").strip().lower() != "h11":
        return GuardedHttpToolsProtocol
    return GuardedH11Protocol


class _HeadTooLarge(Exception):
    """Raised in llhttp's callback to stop the parser at a head past :data:`MAX_HEAD_BYTES`."""


def _head_size(scope: dict[str, Any]) -> int:
    """A parsed request's head, in bytes (its line and headers, as they were sent, give or take a few)."""
    line = len(scope.get("method", "")) + len(scope.get("raw_path", b"")) + len(scope.get("query_string", b"")) + 12
    return line + sum(len(n) + len(v) + 4 for n, v in scope.get("headers", ()))


def _length_and_chunked(headers: list[tuple[bytes, bytes]]) -> bool:
    names = {name.lower() for name, _ in headers}
    return b"content-length" in names and b"transfer-encoding" in names


__all__ = ["CLOSED_KEY", "DEFAULT_BODY_TIMEOUT", "DEFAULT_HEADER_TIMEOUT", "DEFAULT_MIN_BODY_RATE", "ENV_HTTP",
           "ENV_LIMITS", "GuardedH11Protocol", "GuardedHttpToolsProtocol", "MaskAccessLog", "descriptor_cap",
           "log_config", "protocol"]
