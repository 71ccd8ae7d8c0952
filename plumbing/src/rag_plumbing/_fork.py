"""Forked workers: ending with the parent, and one side task run beside the parent's own work.

A forked child sees the parent's memory copy-on-write, so work over large in-memory lists (an index's passages, a
build's plan) needs no pickling on the way in. Where ``fork`` is unavailable the work runs in the parent.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time
from collections.abc import Callable
from typing import Any


def die_with_parent(parent: int) -> None:
    """Make a forked worker end when the process that forked it does, even by SIGKILL: Linux's
    ``prctl(PR_SET_PDEATHSIG, SIGKILL)``; elsewhere (or if prctl fails) a thread that watches ``os.getppid()``."""
    import signal
    import threading

    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(1, signal.SIGKILL, 0, 0, 0) == 0:  # 1: PR_SET_PDEATHSIG
                if os.getppid() != parent:  # the parent died before prctl took effect
                    os._exit(1)
                return
        except (OSError, AttributeError):
            pass

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()


def _side_main(fn: Callable[[], Any], conn: Any, parent: int) -> None:
    die_with_parent(parent)
    try:
        result = (True, fn())
    except BaseException as e:  # noqa: BLE001  (handed to the parent, which raises it)
        result = (False, e)
    try:
        conn.send(result)
    except Exception as e:  # noqa: BLE001  (an unpicklable error: its text still reaches the parent)
        conn.send((False, RuntimeError(f"{type(result[1]).__name__}: {result[1]} ({e})")))
    conn.close()


class SideTask:
    """``fn()`` run in a forked child while the parent goes on (on another CPU); :meth:`result` waits for it and
    returns what it returned, or raises what it raised. Without ``fork`` (or with ``enabled=False``) ``fn`` runs
    inside :meth:`result`. :meth:`cancel` kills a child whose result is no longer wanted."""

    def __init__(self, fn: Callable[[], Any], name: str, *, enabled: bool = True) -> None:
        self.fn, self.name = fn, name
        self._proc: Any = None
        self._conn: Any = None
        if enabled and (os.cpu_count() or 1) > 1 and "fork" in mp.get_all_start_methods():
            ctx = mp.get_context("fork")
            self._conn, child = ctx.Pipe(duplex=False)
            self._proc = ctx.Process(target=_side_main, args=(fn, child, os.getpid()), name=name, daemon=True)
            self._proc.start()
            child.close()

    @property
    def forked(self) -> bool:
        return self._proc is not None

    def result(self) -> Any:
        if self._proc is None:
            return self.fn()
        try:
            ok, value = self._conn.recv()
        except EOFError:
            self._proc.join()
            raise RuntimeError(f"{self.name}: its worker process ended without a result (exit code "
                               f"{self._proc.exitcode}; killed for memory?)") from None
        finally:
            self._conn.close()
        self._proc.join()
        self._proc = None
        if not ok:
            raise value
        return value

    def cancel(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.join()
            self._conn.close()
            self._proc = None
