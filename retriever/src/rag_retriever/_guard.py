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
  and their connection closed; framing a parser must refuse (a ``Content-Length`` beside ``Transfer-Encoding``, a
  bad chunk size or length, a header without a colon) a 400.

A request whose connection is closed here is logged by the app in one line (:data:`CLOSED_KEY` in its scope says
why). uvicorn's worker processes import the protocol by name and read the limits from the environment
(:data:`ENV_LIMITS`), which ``curriculum serve`` sets.
"""

from __future__ import annotations

import copy
import json
import logging
import os
import resource
import time
from collections import OrderedDict
from typing import Any

import h11
from rag_plumbing import MaskingFilter, mask_secrets
from uvicorn.protocols.http.h11_impl import H11Protocol

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # (no httptools: h11 serves)
    HttpToolsProtocol = None

from ._server import CLOSED_KEY, CONNECTIONS_KEY

#: The limits, as JSON, for uvicorn's worker processes.
ENV_LIMITS = "RAG_CURRICULUM_SERVE_GUARD"
DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_BODY_TIMEOUT = 20.0
DEFAULT_MIN_BODY_RATE = 500
#: The largest request line and headers (h11's default ``max_incomplete_event_size``).
MAX_HEAD_BYTES = 16 * 1024
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

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        limits = os.environ.get(ENV_LIMITS)
        if limits:
            got = json.loads(limits)
            self.max_connections = int(got["max_connections"])
            self.header_timeout = float(got["header_timeout"])
            self.body_timeout = float(got.get("body_timeout", DEFAULT_BODY_TIMEOUT))
            self.min_body_rate = int(got.get("min_body_rate", DEFAULT_MIN_BODY_RATE))
        state = self.server_state
        if not hasattr(state, "rag_idle"):
            state.rag_idle = OrderedDict()  # connections that may be shed, the one heard from least recently first
        self._idle: OrderedDict = state.rag_idle
        self._timer: Any = None  # the deadline of the request's headers or body
        self._in_body = False
        self._body_start = 0.0
        self._body_bytes = 0

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
        super().data_received(data)

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
        if not self._closing():
            self._heard()  # idle between requests (uvicorn's keep-alive timeout closes it)

    def connection_lost(self, exc: Exception | None) -> None:
        self._clear_timer()
        self._idle.pop(self, None)
        super().connection_lost(exc)


class GuardedH11Protocol(_Guarded, H11Protocol):
    """uvicorn's h11 protocol with deadlines on a request's headers and body and a cap on connections (module
    docstring)."""

    library = "h11"

    def handle_events(self) -> None:
        super().handle_events()
        cycle = self.cycle
        if cycle is not None and cycle.keep_alive and _length_and_chunked(cycle.scope["headers"]):
            # RFC 9112 6.3: a request framed by both Content-Length and Transfer-Encoding (a smuggling attempt, or
            # a broken client) is answered, then its connection closed; h11 reads it as chunked and would keep it
            cycle.keep_alive = False
        self._parsed()

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
            self._head_bytes = 0  # bytes received since the current request's headers began, while they are incomplete
            self._in_head = False

        def on_message_begin(self) -> None:
            self._in_head = True
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            self._in_head, self._head_bytes = False, 0
            super().on_headers_complete()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.parser is None or self._closing():
                return
            if self._in_head:
                self._head_bytes += len(data)
                if self._head_bytes > MAX_HEAD_BYTES:
                    self._refuse_head()
                    return
            self._parsed()

        def _refuse_head(self) -> None:
            why = f"its request line and headers are larger than {MAX_HEAD_BYTES:,} bytes"
            body = json.dumps({"detail": why}).encode()
            self.transport.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
                                 b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n"
                                 + body)
            self._close(why)

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


def _length_and_chunked(headers: list[tuple[bytes, bytes]]) -> bool:
    names = {name.lower() for name, _ in headers}
    return b"content-length" in names and b"transfer-encoding" in names


__all__ = ["CLOSED_KEY", "DEFAULT_BODY_TIMEOUT", "DEFAULT_HEADER_TIMEOUT", "DEFAULT_MIN_BODY_RATE", "ENV_HTTP",
           "ENV_LIMITS", "GuardedH11Protocol", "GuardedHttpToolsProtocol", "MaskAccessLog", "descriptor_cap",
           "log_config", "protocol"]
