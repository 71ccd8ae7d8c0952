"""The identity of a shard directory's content, from its manifest: SHA-256 over each shard's content hash, in
manifest order, then over what else the caller's identity depends on.

The digests stored by the toolkit are all made here (and must stay byte-identical: work directories and
checkpoints are resumed only when they match):

* partition: ``shards_digest(manifest, str(manifest.get("num_rows")))`` (``partition.json``'s input digest);
* evaluation: ``shards_digest(manifest, json.dumps(ids))`` (the evaluated rows' ids; a work directory's ``data``);
* training: ``shards_digest(manifest, length=16, missing=None)`` (``train_plan.json``'s ``shards_fingerprint``).

>>> m = {"shards": [{"sha256": "ab"}, {"sha256": "cd"}], "num_rows": 3}
>>> shards_digest(m, "3") == __import__("hashlib").sha256(b"abcd3").hexdigest()
True
>>> shards_digest(m, length=16)
'88d4266fd4e6338d'
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from rag_plumbing import file_sha256  # the one file digest, shared with the retriever

__all__ = ["file_sha256", "shards_digest"]

def shards_digest(manifest: Mapping[str, Any], *extra: str | bytes, length: int | None = None,
                  missing: Any = "") -> str:
    """SHA-256 (hex, the first ``length`` digits when given) of the shards' ``sha256`` fields in manifest order,
    then of each ``extra`` (text is UTF-8 encoded). A shard entry without a ``sha256`` (a hand-edited manifest)
    counts as ``str(missing)``."""
    h = hashlib.sha256()
    for s in manifest.get("shards", []):
        h.update(str(s.get("sha256", missing)).encode())
    for e in extra:
        h.update(e if isinstance(e, bytes) else e.encode())
    return h.hexdigest()[:length] if length else h.hexdigest()
