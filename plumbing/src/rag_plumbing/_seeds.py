"""A stable 64-bit hash of a text (BLAKE2b, 8 bytes): the passage store's content hash of a passage
(little-endian, signed, an int64)."""

from __future__ import annotations

import hashlib
from typing import Literal

__all__ = ["hash64"]

SEP = "\x1f"  # between the parts hashed (ASCII's unit separator)


def hash64(text: str, *, byteorder: Literal["big", "little"] = "big", signed: bool = False) -> int:
    """BLAKE2b-64 of ``text`` (UTF-8): its 8 bytes read as an integer in ``byteorder``, unsigned unless
    ``signed``. The toolkit's one short hash."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), byteorder, signed=signed)
