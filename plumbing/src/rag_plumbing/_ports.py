"""Whether this machine can listen on a host and port, and the claim a server holds on its port: a server's start
refuses a busy port in one line before it opens its index (uvicorn would end in its own lines and exit status 3).

**One server per port.** ``serve --workers N`` binds N sockets with ``SO_REUSEPORT``, which lets every socket of
the same user with that option join the port's group: a second server's sockets would join the first's, and the
kernel would split the connections between two indexes. A bind test alone cannot refuse it (it passes while the
first server's sockets are bound but not yet listening), so a server first *claims* its port
(:func:`claim_port`): on Linux an abstract Unix socket named after the port (``@rag-retriever-port-8000``: of this
network namespace, as the port is), elsewhere a lock file held with ``flock``; either is released by the kernel when
the last process holding it ends (the workers hold it too). A claim held by another process is refused in one line
naming that process, whatever the timing; then the port is bound as uvicorn binds it, for whatever else listens
there.

>>> import socket
>>> with socket.socket() as s:
...     s.bind(("127.0.0.1", 0)); s.listen(); busy = s.getsockname()[1]
...     listen_problem("127.0.0.1", busy).startswith(f"cannot listen on 127.0.0.1:{busy}: ")
True
"""

from __future__ import annotations

import os
import socket
import struct
import sys
import tempfile
from typing import Any

#: What a refusal of :func:`listen_problem` tells the user to do.
LISTEN_HINT = "pass another --port (or stop what listens there), or check --host"

#: The claims this process holds, by port: the socket or the open lock file (kept open: closing one releases it).
_CLAIMS: dict[int, Any] = {}


def listen_problem(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be listened on (one line), or None where it can: bound as uvicorn binds
    (``SO_REUSEADDR``: a port in TIME_WAIT is free), then released."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            return f"cannot listen on {host}:{port}: {e.strerror or e}"
    return None


def claim_port(host: str, port: int) -> str | None:
    """Claim ``port`` for this process's server, then check that ``host:port`` can be listened on: why not (one
    line), or None. The claim is held until this process and the workers it forks end (a second call for the same
    port in this process finds it held already). Port 0 (any free port) claims nothing."""
    claimed = False
    if port and port not in _CLAIMS:
        holder = _claim(port)
        if holder is not None:
            return (f"cannot listen on {host}:{port}: another retriever server{holder} serves that port "
                    "(curriculum serve or rag-retriever serve; one server a port, whatever its --host)")
        claimed = True
    problem = listen_problem(host, port)
    if problem and claimed:  # (refused: the claim is not kept)
        release_port(port)
    return problem


def release_port(port: int) -> None:
    """Let go of this process's claim on ``port`` (a server started in a test, stopped)."""
    held = _CLAIMS.pop(port, None)
    if held is not None:
        held.close()


def _claim(port: int) -> str | None:
    """Take the claim on ``port``: None, or who holds it (`` (process N)``, or ``""`` where that cannot be
    known)."""
    if sys.platform.startswith("linux"):
        name = f"\0rag-retriever-port-{port}"
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.bind(name)
            s.listen(16)
        except OSError:
            s.close()
            return _holder(name)
        _CLAIMS[port] = s
        return None
    try:
        import fcntl
    except ImportError:  # Windows: no SO_REUSEPORT either, so the workers share one socket and a bind refuses
        return None
    path = os.path.join(tempfile.gettempdir(), f"rag-retriever-port-{port}.lock")
    f = open(path, "a+")  # noqa: SIM115  (held open for the life of the server)
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        return ""
    _CLAIMS[port] = f
    return None


def _holder(name: str) -> str:
    """`` (process N)``: the process that claimed the abstract socket ``name`` (its credentials, asked of it by a
    connection), or ``""``."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
            c.settimeout(1.0)
            c.connect(name)
            pid, _, _ = struct.unpack("3i", c.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                         struct.calcsize("3i")))
            return f" (process {pid})" if pid > 0 else ""
    except (OSError, AttributeError, struct.error):
        return ""
