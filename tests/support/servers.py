"""Real servers for the tests: started on 127.0.0.1 on a free port in a process group of their own, readiness polled
in a bounded loop, and stopped by their process group (checked: no process of the group outlives the test)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

START_TIMEOUT_S = 420  # importing torch (and spawning an engine core) on a busy 2-core machine


_busy: socket.socket | None = None


def busy_port() -> int:
    """A port on 127.0.0.1 that a socket of this process listens on for the rest of the session: a server told to
    serve there fails to bind at once, whoever runs the tests. (Port 1 is no such port: root may bind it, and a
    ``serve`` expected to stop would then serve until killed.)"""
    global _busy
    if _busy is None:
        _busy = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        _busy.bind(("127.0.0.1", 0))
        _busy.listen(1)
    return _busy.getsockname()[1]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover
        return True


def stop_process_group(proc: subprocess.Popen) -> None:
    """SIGTERM the server's process group, wait; then SIGKILL whatever is left, polling (bounded) until no process
    of the group remains."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    deadline = time.monotonic() + 30
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.poll()  # reap the leader (a zombie still counts as a member of the group)
        time.sleep(0.2)
    if proc.poll() is None:
        proc.wait(timeout=30)
    assert not _group_alive(proc.pid), "a process of the server's group outlived it"


@contextlib.contextmanager
def server_process(argv: list[str], health_url: str, log_path: Path, *, env: dict[str, str] | None = None,
                   timeout_s: float = START_TIMEOUT_S) -> Iterator[subprocess.Popen]:
    """Start ``argv`` in its own process group, poll ``health_url`` until it answers 200 (bounded by
    ``timeout_s``), yield, then stop the whole group."""
    log = open(log_path, "wb")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, env={**os.environ, **(env or {})})
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                pytest.fail(f"{argv[0]} exited with {proc.returncode} before it was ready:\n"
                            + log_path.read_text(errors="replace")[-3000:])
            try:
                with urllib.request.urlopen(health_url, timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"{argv[0]} not ready after {timeout_s}s:\n" + log_path.read_text(errors="replace")[-3000:])
            time.sleep(0.5)
        yield proc
    finally:
        stop_process_group(proc)
        log.close()
