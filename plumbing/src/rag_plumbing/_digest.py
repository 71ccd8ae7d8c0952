"""A file's SHA-256, read in blocks."""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = ["file_sha256"]

_BLOCK = 8 << 20


def file_sha256(path: str | Path) -> str:
    """The SHA-256 (hex) of a file's bytes: the toolkit's one file digest (shards, model files, index files)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            h.update(block)
    return h.hexdigest()
