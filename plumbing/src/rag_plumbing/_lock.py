"""Locks between processes, by the ``filelock`` library (``flock`` where the file system has it, a lock file of its
own where it does not: never a lock that silently does nothing).

Two kinds: :func:`held_or_refused` for a whole run on one output (a second run on the same output is refused at
once, in one line: the caller's ``busy`` error), and :func:`waited` for the short critical sections processes that
share a folder by design take in turn (the shards of one partition writing its work folder)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path


def _lock(path: str | Path):  # noqa: ANN202 - filelock's type, imported lazily (this package is light to import)
    from filelock import FileLock

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(path))


@contextlib.contextmanager
def held_or_refused(path: str | Path, busy: Callable[[], BaseException]) -> Iterator[None]:
    """Hold the lock file ``path`` for the ``with`` block, or raise ``busy()`` at once when another holder has it
    (another process, or another run in this one). Released when the block ends or the holder dies."""
    from filelock import Timeout

    lock = _lock(path)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise busy() from None
    try:
        yield
    finally:
        lock.release()


@contextlib.contextmanager
def waited(path: str | Path) -> Iterator[None]:
    """Hold the lock file ``path`` for the ``with`` block, waiting for another holder to let it go."""
    lock = _lock(path)
    with lock:
        yield
