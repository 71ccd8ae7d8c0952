"""What the BM25 engine's two halves (:mod:`._bm25`, the retriever kind and its vocabulary; :mod:`._postings`, the
compressed postings and their kernels) share, so that neither imports the other for it: the engine's error, the
search's thread pools, and the front-coded vocabulary's layout and writer."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from .errors import RetrieverError

__all__ = ["VOCAB_BLOCK", "BM25Error", "write_vocab"]


class BM25Error(RetrieverError):
    """A BM25 index that cannot be built or read as asked."""


_POOLS: dict[int, Any] = {}
_POOLS_LOCK = threading.Lock()


def _forget_pools() -> None:
    """In a process just forked (a server's worker): the parent's pools have no threads here; new ones are made."""
    global _POOLS_LOCK
    _POOLS.clear()
    _POOLS_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools)


def _pool(threads: int) -> Any:
    """A process-wide pool of ``threads`` threads for the compiled search (which releases the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    with _POOLS_LOCK:
        if threads not in _POOLS:
            _POOLS[threads] = ThreadPoolExecutor(threads, thread_name_prefix="bm25")
        return _POOLS[threads]


#: Words per block of the front-coded vocabulary (each block's first word whole, the others as what they share with
#: the word before and the rest).
VOCAB_BLOCK = 16


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def write_vocab(path: Path, words: list[str]) -> None:
    """The vocabulary, front-coded (``vocab.npy``: the bytes; ``vocab_off.npy``: where each block of
    :data:`VOCAB_BLOCK` words starts, then the number of words): the words sorted by their UTF-8 bytes, a word's id
    its rank. Each word is (its shared prefix with the word before, one byte; the rest's length, a varint; the
    rest), the first of each block sharing nothing."""
    import numpy as np

    keys = [w.encode("utf-8") for w in words]
    offs = []
    chunks = []
    size = 0
    for b0 in range(0, len(keys), VOCAB_BLOCK):
        offs.append(size)
        prev = b""
        part = bytearray()
        for key in keys[b0:b0 + VOCAB_BLOCK]:
            shared = 0
            if prev:
                top = min(len(prev), len(key), 255)
                # the shared prefix: compare whole slices first (most words share a few bytes with the one before)
                while shared < top and prev[shared] == key[shared]:
                    shared += 1
            part.append(shared)
            part += _varint(len(key) - shared)
            part += key[shared:]
            prev = key
        chunks.append(bytes(part))
        size += len(part)
    offs.append(size)
    offs.append(len(words))
    path = Path(path)
    np.save(path.with_name(path.stem + ".npy"), np.frombuffer(b"".join(chunks), dtype=np.uint8), allow_pickle=False)
    np.save(path.with_name(path.stem + "_off.npy"), np.asarray(offs, dtype=np.int64), allow_pickle=False)
