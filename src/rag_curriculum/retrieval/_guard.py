"""What keeps ``curriculum serve`` answering when clients hold connections open without finishing a request (a
slow-loris load: thousands of sockets that send part of a header and wait, which would exhaust the server's file
descriptors): uvicorn's HTTP protocol (h11) with two limits of its own.

* A connection that has not sent a complete request (its request line and headers) within ``header_timeout``
  seconds of its first byte, or of its opening, is closed; the same for the next request on a kept-alive
  connection (uvicorn's own ``timeout_keep_alive`` closes an idle one).
* At most ``max_connections`` connections are open (below the process's descriptor limit); one more evicts the
  connection that has waited longest without a complete request, so a client that asks (``/health``,
  ``/retrieve``) always gets in; when every connection is serving a request, the newcomer is closed instead.

uvicorn's worker processes import :class:`GuardedH11Protocol` by name and read the limits from the environment
(:data:`ENV_LIMITS`), which ``curriculum serve`` sets.
"""

from __future__ import annotations

import json
import os
import resource
from collections import OrderedDict
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

#: The limits, as JSON, for uvicorn's worker processes.
ENV_LIMITS = "RAG_CURRICULUM_SERVE_GUARD"
DEFAULT_HEADER_TIMEOUT = 10.0


def descriptor_cap(wanted: int | None = None) -> int:
    """The connection cap: ``wanted`` (default 1,024), at most the soft descriptor limit less 64 for the index's
    files, logs and sockets of its own."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    room = (soft - 64) if soft != resource.RLIM_INFINITY else 1 << 20
    return max(16, min(wanted or 1024, room))


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline on incomplete requests and a cap on connections (module docstring)."""

    max_connections = 1024
    header_timeout = DEFAULT_HEADER_TIMEOUT

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        limits = os.environ.get(ENV_LIMITS)
        if limits:
            got = json.loads(limits)
            self.max_connections = int(got["max_connections"])
            self.header_timeout = float(got["header_timeout"])
        state = self.server_state
        if not hasattr(state, "rag_pending"):
            state.rag_pending = OrderedDict()  # connections waiting for a complete request, the oldest first
        self._pending: OrderedDict = state.rag_pending

    def _arm(self) -> None:
        if self not in self._pending and self.transport is not None and not self.transport.is_closing():
            self._pending[self] = self.loop.call_later(self.header_timeout, self._expire)

    def _disarm(self) -> None:
        handle = self._pending.pop(self, None)
        if handle is not None:
            handle.cancel()

    def _expire(self) -> None:
        if self._pending.pop(self, None) is not None and self.transport is not None:
            self.transport.close()

    def connection_made(self, transport: Any) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            victim = next(iter(self._pending), None)
            if victim is None:  # every connection is being served: the newcomer waits outside
                transport.close()
                return
            victim._disarm()
            victim.transport.close()
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self.cycle is None or self.cycle.response_complete:  # a request is on its way, not yet complete
            self._arm()
        super().data_received(data)

    def handle_events(self) -> None:
        super().handle_events()
        if self.cycle is not None and not self.cycle.response_complete:  # its request line and headers are in
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


__all__ = ["DEFAULT_HEADER_TIMEOUT", "ENV_LIMITS", "GuardedH11Protocol", "descriptor_cap"]
