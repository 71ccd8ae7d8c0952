"""A served index's files held with a read lease (Linux): the kernel tells the server *before* another process
opens one of them for writing (``cp`` over the index), and holds that open back until the server lets go. The
server then stops reading the files it mapped (every answer a 503 naming the file), waits for the searches in flight
to end, and releases the lease; the copy goes on, and no search reads a page cut off under it (a bus error or a
segmentation fault that would kill the server). Without the lease, the ``fstat`` before each batch
(:meth:`CorpusIndex.changed`) refuses a file once it changed, but a copy that begins during a search could still
cut the search's pages short.

A lease is taken where it can be: on Linux, on the files of an index this process maps (one read whole into memory
needs none), owned by the server's user, on a filesystem that grants leases (not NFS), in a server whose event loop
runs in the main thread (where signals are delivered to Python). Where it cannot, the server says why at start.
A file another process already holds open for writing cannot be leased: :func:`can_lease` says no, so a server
reads a small index whole instead (``choose_into_memory``); one that opened it between that check and its lease
reads the index whole then (a small one), else refuses every read of that file (a 503 naming it) until its lease
can be taken, tried again before each read.
"""

from __future__ import annotations

import errno
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # (not a POSIX system: no leases, and can_lease says so)
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

#: What to do when a served index's file changed (docs/retrieval.md, "Replacing a served index").
CHANGED_HINT = ("restart the server; to replace a served index, build the new one elsewhere and mv it into place, or "
                "run curriculum index --overwrite (both swap the folder whole), never copy files over it")

#: The longest the server waits for the searches in flight before it lets a writer go on (the kernel itself breaks
#: a lease after /proc/sys/fs/lease-break-time, 45 s by default).
DRAIN_S = 30.0


class Changed(Exception):
    """A file of the served index was written (or is being opened for writing) since the server opened it: the
    server answers 503 naming it rather than read memory-mapped bytes that changed under it (or pages cut off: a
    signal that would kill it)."""


class ReadGuard:
    """Who may read the served index's files now: every search and every read of passages runs inside
    :meth:`reading`, which refuses (:class:`Changed`) once a file was written, or is about to be.

    Without a lease (:meth:`lease`), only the ``fstat`` check; with one, a writer's open is also held back until
    the reads in flight are done."""

    def __init__(self, ix: Any) -> None:  # (a CorpusIndex: its _fds, changed(), path)
        self.ix = ix
        self.writing: str | None = None  # the file another process is opening for writing (the lease broken)
        self._readers = 0
        self._idle = threading.Condition()
        self._held: list[int] = []
        self._own: dict[str, int] = {}  # this process's own descriptor of each file (the leased ones)
        #: the files that could not be leased because another process holds them open for writing
        self.pending: list[str] = []

    def changed(self) -> str | None:
        """The first file written or being opened for writing since the server opened it, with what changed (or
        held open for writing by another process since before its lease could be taken)."""
        if self.writing is not None:
            return f"{self.writing} (opened for writing by another process)"
        if self.pending:
            with self._idle:
                name = self._retry()
            if name is not None:
                return f"{name} (open for writing by another process, so it cannot be leased)"
        # every file leased: no write can begin before this process lets go (_broken); the fstat check (a
        # microsecond a file) still runs, so that a break this process missed (its SIGIO not handled before the
        # writer went on, as once seen under load with several workers) refuses the rewritten file, never reads it
        return self.ix.changed()

    def check(self) -> None:
        """:class:`Changed` naming the first file of the index written since it was opened."""
        what = self.changed()
        if what is not None:
            raise Changed(f"the index {self.ix.path.name}: {what} since this server opened it; it answers no query "
                          f"from it: {CHANGED_HINT}")

    @contextmanager
    def reading(self) -> Iterator[None]:
        """A read of the index's files: refused once a file changed; while it runs, a writer waits."""
        with self._idle:
            self.check()
            self._readers += 1
        try:
            yield
        finally:
            with self._idle:
                self._readers -= 1
                self._idle.notify_all()

    def lease(self, loop: Any) -> str | None:
        """Take a read lease on each of the index's files, the event loop ``loop`` told when one breaks; None
        when every file is leased, else why one is not. A file another process holds open for writing cannot be
        leased: it is *pending* (:attr:`pending`), every read refused naming it, its lease tried again before each
        read, so the server answers again once the writer closed it without a change. Any other refusal (a
        filesystem without leases, another user's files) holds none.

        Each lease is taken on a descriptor of this process's own (the index's file opened again through
        ``/proc/self/fd``): a worker forked after the index was loaded holds its own leases, and is the one told."""
        if fcntl is None or not sys.platform.startswith("linux"):
            return "leases are Linux's"
        try:  # (before the first lease: SIGIO's default action ends the process)
            loop.add_signal_handler(signal.SIGIO, self._broken)
        except (RuntimeError, ValueError, NotImplementedError) as e:
            return f"the server's event loop cannot take signals ({e})"
        for name, fd in self.ix._fds.items():
            try:  # (the same file, whatever its name now: a descriptor of this process, not one shared by a fork)
                own = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK)
            except OSError as e:
                self.release()
                return f"{name}: {e.strerror}"
            self._own[name] = own
            try:
                fcntl.fcntl(own, fcntl.F_SETLEASE, fcntl.F_RDLCK)
            except OSError as e:
                if e.errno in (errno.EAGAIN, errno.EBUSY):  # open for writing elsewhere: refused until it is not
                    self.pending.append(name)
                    continue
                self.release()
                return f"{name}: {e.strerror}"
            self._held.append(own)
        if self.pending:
            return f"{self.pending[0]}: open for writing by another process"
        return None

    def _retry(self) -> str | None:
        """Lease the pending files now (under the lock); the first still open for writing elsewhere, else None."""
        while self.pending:
            name = self.pending[0]
            try:
                fcntl.fcntl(self._own[name], fcntl.F_SETLEASE, fcntl.F_RDLCK)
            except OSError:
                return name
            self._held.append(self._own[name])
            self.pending.pop(0)
        return None

    def _broken(self) -> None:
        """SIGIO, in the event loop: a leased file is being opened for writing. Refuse from now on; let the writer
        go once the reads in flight end."""
        names = [n for n, fd in self._own.items() if fd in self._held and _lease_of(fd) == fcntl.F_UNLCK]
        if not names or self.writing is not None:
            return
        with self._idle:
            self.writing = names[0]
            busy = self._readers
        log.error("the index %s: %s is being opened for writing by another process: every answer is a 503 from now; "
                  "the writer goes on once the %d read(s) in flight end: %s", self.ix.path.name, names[0], busy,
                  CHANGED_HINT)
        threading.Thread(target=self._release_when_idle, name="lease-release", daemon=True).start()

    def _release_when_idle(self) -> None:
        with self._idle:
            self._idle.wait_for(lambda: self._readers == 0, timeout=DRAIN_S)
        self.release()

    def release(self) -> None:
        """Let go of every lease held (a writer waiting goes on)."""
        held, self._held = self._held, []
        own, self._own = self._own, {}
        self.pending = []
        for fd in held:
            try:
                fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
            except OSError:
                pass  # (closed, or already broken by the kernel)
        for fd in own.values():
            try:
                os.close(fd)
            except OSError:
                pass


def can_lease(directory: Any) -> bool:
    """Whether this process can hold a read lease on every file of the index in ``directory`` now (each tried,
    then let go): Linux, the files the server's user's own, a filesystem that grants leases, and no file held open
    for writing by another process (then the lease is refused, and a server reads a small index whole instead).

    >>> can_lease("/nowhere")
    False
    """
    if fcntl is None or not sys.platform.startswith("linux"):
        return False
    d = Path(directory)
    if not (d / "manifest.json").is_file():
        return False
    for path in sorted(p for p in d.rglob("*") if p.is_file()):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return False
        try:
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK)
            fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
        except OSError:
            return False
        finally:
            os.close(fd)
    return True


def _lease_of(fd: int) -> int:
    try:
        return fcntl.fcntl(fd, fcntl.F_GETLEASE)
    except OSError:
        return -1
