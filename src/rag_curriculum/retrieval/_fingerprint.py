"""An index's fingerprint: a digest of what determines its answers, so that two indexes answer every query alike
exactly when their fingerprints match.

It is the SHA-256 of a canonical JSON object holding:

* ``retriever``: the kind (``bm25``, ``dense``, ``hybrid``);
* ``settings``: the kind's manifest facts, its analysis and scoring parameters (a BM25 index's k1, b, method,
  tokenizer and library version; a dense index's encoder, pooling, prefixes, FAISS factory and search parameters;
  a hybrid's fusion), less what does not change an answer (the search ``backend``: numba and numpy rank alike). A
  dense encoder given as a local folder is recorded by the folder's name and the SHA-256 of its files, not by
  its path (which the manifest writes relative to the index, so it changes when the index is built elsewhere);
* ``passages``: the SHA-256 of every passage's stored fields in order (title, text, origin, the corpus line's own
  id and contents prefix: :attr:`~rag_curriculum.retrieval._store.StoreWriter.digest`);
* ``files``: the SHA-256 of each of the kind's own files (the BM25 score matrix and vocabulary, the FAISS index
  and vectors), by path inside the index.

Not in it: where the index is, the command line, when it was built, the toolkit's version, the dataset file's
questions and their stored rankings (what a build reads, not what a query is answered with). A byte-identical
rebuild of the same corpus in another folder has the same fingerprint; any changed passage or parameter gives
another.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from .._plumbing import file_sha256

SCHEME = 1
#: Manifest facts of a kind that do not change an answer.
NOT_ANSWERS = ("backend",)


def folder_sha256(path: Path) -> str:
    """The SHA-256 of a folder's files: their relative paths and contents, in path order."""
    h = hashlib.sha256()
    for p in sorted(q for q in path.rglob("*") if q.is_file()):
        h.update(p.relative_to(path).as_posix().encode() + b"\0" + file_sha256(p).encode() + b"\n")
    return h.hexdigest()


def _settings(facts: dict[str, Any], encoder: str | None) -> dict[str, Any]:
    out = {k: copy.deepcopy(v) for k, v in facts.items() if k not in NOT_ANSWERS}
    dense = out.get("dense")
    if isinstance(dense, dict) and "encoder" in dense and encoder and os.path.isdir(encoder):
        dense["encoder"] = {"folder": Path(encoder).resolve().name, "sha256": folder_sha256(Path(encoder))}
    return out


def index_fingerprint(retriever: str, facts: dict[str, Any], passages: str, kind_files: list[Path], root: Path,
                      *, encoder: str | None = None) -> str:
    """The fingerprint of an index whose kind wrote ``facts`` and ``kind_files`` (under ``root``) and whose
    passages digest to ``passages``; ``encoder``: the dense encoder as given to the build (a Hub name or a local
    folder)."""
    obj = {"scheme": SCHEME, "retriever": retriever, "settings": _settings(facts, encoder), "passages": passages,
           "files": {p.relative_to(root).as_posix(): file_sha256(p) for p in sorted(kind_files)}}
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()
