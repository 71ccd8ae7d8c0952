"""Seeds and ids derived from a few parts by hashing: stable across runs, processes and platforms (unlike
Python's ``hash``), and independent for different parts.

Every derived seed, content id and short content hash in the toolkit is :func:`hash64`: BLAKE2b with an 8-byte
digest of a text's UTF-8, read as an integer:

* :func:`derive_seed` (parts joined by ``\\x1f``): a build's per-example, sampling, ordering and balancing seeds
  (64 bits), and the generation runner's per-question and per-call seeds (``bits=63``: a non-negative int64, what
  vLLM and torch accept);
* :func:`stable_id`: the hex form, the id of a source row that has none;
* the passage store's content hash of a passage (``rag_retriever.passage_hash``: little-endian, signed, an int64).

>>> derive_seed(0, "order")
2555879948493412766
>>> derive_seed(0, "order", bits=63) == derive_seed(0, "order") & ((1 << 63) - 1)
True
>>> stable_id("hotpotqa", "Who?", "Paris")
'e27aec7b5e517d41'
"""

from __future__ import annotations

import hashlib
from typing import Literal

__all__ = ["derive_seed", "hash64", "stable_id"]

SEP = "\x1f"  # between the parts hashed (ASCII's unit separator)


def hash64(text: str, *, byteorder: Literal["big", "little"] = "big", signed: bool = False) -> int:
    """BLAKE2b-64 of ``text`` (UTF-8): its 8 bytes read as an integer in ``byteorder``, unsigned unless
    ``signed``. The toolkit's one short hash."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), byteorder, signed=signed)


def derive_seed(*parts: object, bits: int = 64, sep: str = SEP) -> int:
    """A ``bits``-bit seed from ``parts`` (each written with ``str``, joined by ``sep``)."""
    h = hash64(sep.join(str(p) for p in parts))
    return h if bits >= 64 else h & ((1 << bits) - 1)


def stable_id(*parts: str) -> str:
    """A content-derived id (16 hex digits) for a row that has none: stable across runs."""
    return f"{hash64(SEP.join(parts)):016x}"  # (BLAKE2b's hex digest: its bytes big-endian)
