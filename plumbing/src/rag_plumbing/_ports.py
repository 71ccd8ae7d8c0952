"""Whether this machine can listen on a host and port: a server's start refuses a busy port in one line before it
opens its index (uvicorn would end in its own lines and exit status 3).

>>> import socket
>>> with socket.socket() as s:
...     s.bind(("127.0.0.1", 0)); s.listen(); busy = s.getsockname()[1]
...     listen_problem("127.0.0.1", busy).startswith(f"cannot listen on 127.0.0.1:{busy}: ")
True
"""

from __future__ import annotations

import socket

#: What a refusal of :func:`listen_problem` tells the user to do.
LISTEN_HINT = "pass another --port (or stop what listens there), or check --host"


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
