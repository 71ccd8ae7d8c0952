"""Atomic, durable file writes: the one way the toolkit writes a file a reader may see half-written.

A temporary file with a unique name (``.<name>.tmp-<pid>-<8 hex digits>``, hidden, so no glob for the final
files matches it) is made in the target's folder, written,
flushed and fsync'ed, renamed over the target with :func:`os.replace` (atomic on POSIX and Windows), and the folder
is fsync'ed so the rename itself survives a crash. A reader sees the old file or the new one, never a mixture; a
crash leaves at worst a temporary file, which is removed when the write fails in-process.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> atomic_write_text(d / "a.txt", "one\\n"); (d / "a.txt").read_text()
'one\\n'
>>> atomic_write_with(d / "b.bin", lambda tmp: tmp.write_bytes(b"xy")); (d / "b.bin").read_bytes()
b'xy'
>>> sorted(p.name for p in d.iterdir())  # no temporary file left behind
['a.txt', 'b.bin']
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["atomic_write_bytes", "atomic_write_text", "atomic_write_with", "fsync_dir", "tmp_name"]


def tmp_name(path: str | Path) -> Path:
    """A temporary name beside ``path`` that no other process or thread uses: ``.<name>.tmp-<pid>-<8 hex>``
    (a writer that infers the format from the file's suffix must be told it: ``savefig(tmp, format="png")``)."""
    p = Path(path)
    return p.with_name(f".{p.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")


def fsync_dir(directory: str | Path) -> None:
    """Make renames and new names in ``directory`` durable (a no-op where folders cannot be opened, as on
    Windows)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _fsync_file(path: Path) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


def atomic_write_with(path: str | Path, writer: Callable[[Path], Any]) -> None:
    """Write ``path`` atomically through ``writer(tmp)``, a function that writes a file at the path it is given
    (``pq.write_table(table, tmp)``, ``fig.savefig(tmp)``); then fsync, rename, fsync the folder."""
    path = Path(path)
    tmp = tmp_name(path)
    try:
        writer(tmp)
        _fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically and durably."""
    path = Path(path)
    tmp = tmp_name(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def atomic_write_text(path: str | Path, text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` atomically and durably (encoded with ``encoding``; newlines as given)."""
    atomic_write_bytes(path, text.encode(encoding))
