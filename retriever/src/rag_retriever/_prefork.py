"""``serve --workers N``: N server processes forked *after* the index was loaded, so that they share one copy of it.

The command opens the index once (checked against its manifest, read into memory or mapped, its search compiled
and run once), binds the listening sockets, then forks the workers. Each worker runs its own uvicorn server on a
socket of its own, all on the one port (``SO_REUSEPORT``: the kernel spreads the connections over them, by their
addresses; with one shared socket, the worker whose event loop wakes first accepts every connection of a burst and
the others idle, measured: 16 clients, one worker busy, one idle), and its own lifespan: its own read guard and read leases
(taken on descriptors of its own: ``_lease.py``), its own micro-batcher, the same limits, the same connection
guard. The index's pages are shared: an index read into memory is the parent's memory, which no worker writes
(copy-on-write keeps it one copy), and a mapped one is the page cache. The parent serves nothing: it waits, starts
a worker again when one dies (a worker that dies at once, five times in a row, stops the server), and on SIGTERM or
SIGINT stops them all, also while it is still forking them; a worker dies with the parent, even one killed by
SIGKILL (:func:`run`).

uvicorn's own ``workers=N`` starts its processes by *spawn* (each imports the app and would load the index again),
and gunicorn's pre-loading is not a dependency; a fork after loading is all this needs. Threads are the hazard of a
fork (a pool started before it has no threads after it): the parent's searches run on one thread
(``OMP_NUM_THREADS=1``, BM25 threads 1), and each worker sets its own threads after the fork.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("uvicorn.error")

#: A worker that ends within this many seconds of its start this many times in a row stops the server.
QUICK_S, QUICK_DEATHS = 5.0, 5


def cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def workers_for(workers: int) -> int:
    """``--workers``: 0 is one per CPU this process may run on."""
    return workers or cpus()


def threads_for(threads: int, workers: int) -> int:
    """A worker's BM25 (and FAISS, and encoder) threads: ``--threads``, or 0: this machine's CPUs shared out."""
    return threads or max(1, cpus() // max(1, workers))


def single_threaded() -> None:
    """Before the index is opened in a parent that will fork: the libraries' thread pools (OpenMP in FAISS and
    PyTorch, onnxruntime's) kept at one thread, so that no pool is started that the workers would not have."""
    os.environ["OMP_NUM_THREADS"] = "1"
    _set_threads(1)


def _set_threads(n: int) -> None:
    if "faiss" in sys.modules:
        sys.modules["faiss"].omp_set_num_threads(n)
    if "torch" in sys.modules:
        try:
            sys.modules["torch"].set_num_threads(n)
        except RuntimeError:  # (set once parallel work began: it keeps its own)
            pass


def after_fork(ix: Any, threads: int) -> None:
    """In a worker: its own threads for the index's searches (the searchers' ``threads``, FAISS's, PyTorch's)."""
    searcher = ix.searcher
    for part in (searcher, getattr(searcher, "bm25", None), getattr(searcher, "dense", None)):
        if part is not None and hasattr(part, "threads"):
            part.threads = threads
    _set_threads(threads)


#: The listening sockets' backlog (uvicorn's default).
BACKLOG = 2048


def listeners(host: str, port: int, workers: int) -> tuple[list[socket.socket], bool]:
    """The listening sockets on ``host``:``port``: one a worker, each with ``SO_REUSEPORT`` (the kernel balances new
    connections across them), or one they share where the system has no ``SO_REUSEPORT``; and whether they are a
    worker's each. Made as TCP's (``IPPROTO_TCP``), so that asyncio sets ``TCP_NODELAY`` on the connections they
    accept (on a socket of protocol 0 it does not: a response written in two parts then waits 40 ms for the
    client's delayed ACK). Each listens as soon as it is bound, before any worker is forked (a connection waits in
    its backlog for its worker): a bound socket that does not listen yet lets another program's ``SO_REUSEADDR``
    bind pass (the port's claim, :func:`rag_plumbing._ports.claim_port`, keeps other retriever servers out). An
    address in use: ``OSError``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    reuse = workers > 1 and hasattr(socket, "SO_REUSEPORT")
    out: list[socket.socket] = []
    try:
        for _ in range(workers if reuse else 1):
            sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            out.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
            sock.listen(BACKLOG)
            sock.set_inheritable(True)
    except OSError:
        for sock in out:
            sock.close()
        if reuse and len(out) == 1:  # (the first socket's option refused, not the address: one shared socket)
            return listeners(host, port, 1)
        raise
    return out, reuse


#: The signals that stop the server: blocked around each fork, so that none lands between a fork and the worker's
#: registration (a worker the parent would not know to stop) or in a worker before it has its own handlers.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def run(serve: Callable[[int], None], workers: int) -> int:
    """Fork ``workers`` processes each running ``serve(slot)`` (``slot`` 0 to ``workers - 1``: a uvicorn server on
    that worker's socket, or on the one socket bound before), keep them running (a worker started again takes its
    slot), stop them on SIGTERM / SIGINT; the exit status.

    A worker never outlives its server: a stop signal that comes while the workers are being forked stops every one
    forked before it and forks no more (the signals are held back around each fork, so each worker is known to the
    parent before a signal is handled); and each worker dies with the parent, even one killed by SIGKILL (Linux's
    parent-death signal, elsewhere a thread watching the parent: :func:`rag_plumbing._fork.die_with_parent`)."""
    from rag_plumbing._fork import die_with_parent

    children: dict[int, tuple[float, int]] = {}
    stopping = False
    quick = 0
    parent = os.getpid()
    can_block = hasattr(signal, "pthread_sigmask")

    def start(slot: int) -> None:
        if can_block:
            signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            pid = os.fork()
            if pid == 0:  # the worker
                code = 0
                try:
                    for signum in STOP_SIGNALS:
                        signal.signal(signum, signal.SIG_DFL)
                    die_with_parent(parent)
                    if can_block:  # (a stop signal sent meanwhile is delivered now: the default action ends it)
                        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
                    serve(slot)
                except KeyboardInterrupt:
                    pass
                except BaseException:  # noqa: BLE001  (said in the log; the parent starts another)
                    log.exception("worker %d failed", os.getpid())
                    code = 1
                finally:
                    logging.shutdown()
                    os._exit(code)
            children[pid] = (time.monotonic(), slot)
            if stopping:  # (a stop handled before this fork, in the middle of it: this worker stops too)
                _terminate(pid)
        finally:
            if can_block:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)

    def stop(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True
        for pid in list(children):
            _terminate(pid)

    for signum in STOP_SIGNALS:
        signal.signal(signum, stop)
    gc.freeze()  # (the loaded index's objects out of the collector's reach: its passes would write their pages)
    for slot in range(workers):
        if stopping:  # a stop signal during start-up: no more workers
            break
        start(slot)
    if stopping:
        log.info("stopped during start-up: %d of %d workers were started, each stopped", len(children), workers)
    else:
        log.info("%d workers started (processes %s), sharing the index loaded once", workers,
                 ", ".join(map(str, children)))
    code = 0
    while children:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        got = children.pop(pid, None)
        if got is None or stopping:
            continue
        began, slot = got
        how = (f"signal {signal.Signals(-os.waitstatus_to_exitcode(status)).name}"
               if os.WIFSIGNALED(status) else f"exit status {os.waitstatus_to_exitcode(status)}")
        quick = quick + 1 if time.monotonic() - began < QUICK_S else 0
        if quick >= QUICK_DEATHS:
            log.error("worker %d ended (%s), the %dth within %.0f s of its start: stopping the server", pid, how,
                      quick, QUICK_S)
            code = 1
            stop(signal.SIGTERM, None)
            continue
        log.error("worker %d ended (%s): starting another", pid, how)
        start(slot)
    return code


def _terminate(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
