"""Seeds and ids derived from a few parts by hashing: stable across runs, processes and platforms (unlike
Python's ``hash``), and independent for different parts.

Every derived seed and content id in the toolkit is BLAKE2b with an 8-byte digest of the parts joined by a
separator, read as a big-endian integer:

* :func:`derive_seed` (parts joined by ``\\x1f``): a build's per-example, sampling, ordering and balancing seeds
  (64 bits), and the generation runner's per-question and per-call seeds (``bits=63``: a non-negative int64, what
  vLLM and torch accept);
* :func:`stable_id`: the hex form, the id of a source row that has none.

>>> derive_seed(0, "order")
2555879948493412766
>>> derive_seed(0, "order", bits=63) == derive_seed(0, "order") & ((1 << 63) - 1)
True
>>> stable_id("hotpotqa", "Who?", "Paris")
'e27aec7b5e517d41'
"""

from __future__ import annotations

import hashlib

__all__ = ["derive_seed", "hash64", "stable_id"]


def hash64(text: str) -> int:
    """BLAKE2b-64 of ``text`` (UTF-8), as an unsigned big-endian integer."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")


def derive_seed(*parts: object, bits: int = 64, sep: str = "\x1f") -> int:
    """A ``bits``-bit seed from ``parts`` (each written with ``str``, joined by ``sep``)."""
    h = hash64(sep.join(str(p) for p in parts))
    return h if bits >= 64 else h & ((1 << bits) - 1)


def stable_id(*parts: str) -> str:
    """A content-derived id (16 hex digits) for a row that has none: stable across runs."""
    return hashlib.blake2b("\x1f".join(parts).encode("utf-8"), digest_size=8).hexdigest()
