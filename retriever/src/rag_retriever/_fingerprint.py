"""An index's fingerprint: a digest of what determines its answers, so that two indexes answer every query alike
exactly when their fingerprints match.

It is the SHA-256 of a canonical JSON object holding:

* ``retriever``: the kind (``bm25``, ``dense``, ``hybrid``);
* ``settings``: the kind's manifest facts, its analysis and scoring parameters (a BM25 index's k1, b, method,
  tokenizer and library version; a dense index's encoder, pooling, prefixes, FAISS factory and search parameters;
  a hybrid's fusion), less what does not change an answer (the search ``backend``: numba and numpy rank alike). A
  dense encoder given as a local folder is recorded by the folder's name and the SHA-256 of its files, not by
  its path (which the manifest writes relative to the index, so it changes when the index is built elsewhere); a
  Hub model by its name and the SHA-256 of its files in this machine's Hub cache, where it is there;
* ``passages``: the SHA-256 of every passage's stored fields in order (title, text, origin, the corpus line's own
  id and contents prefix: :attr:`~rag_retriever._store.StoreWriter.digest`);
* ``files``: the SHA-256 of each of the kind's own files (the BM25 score matrix and vocabulary, the FAISS index
  and vectors), by path inside the index.

Not in it: where the index is, the command line, when it was built, the toolkit's version, the dataset file's
questions and their stored rankings (what a build reads, not what a query is answered with). A byte-identical
rebuild of the same corpus in another folder has the same fingerprint; any changed passage or parameter gives
another. It is made from what the manifest records (the passages' digest, each file's SHA-256), so every reader
recomputes it at open and refuses a manifest whose fingerprint is not its own; ``curriculum validate`` recomputes
the records themselves from the files.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

from rag_plumbing import file_sha256

SCHEME = 1
#: Manifest facts of a kind that do not change an answer.
NOT_ANSWERS = ("backend",)


def files_digest(files: dict[str, str]) -> str:
    """The SHA-256 of a folder's files given as ``{relative path: SHA-256}``: their paths and digests, in path
    order (:func:`folder_sha256` of a folder holding exactly those files)."""
    h = hashlib.sha256()
    for name in sorted(files):
        h.update(name.encode() + b"\0" + files[name].encode() + b"\n")
    return h.hexdigest()


def folder_files(path: Path) -> dict[str, str]:
    """Every file of a folder: ``{relative path: SHA-256}``."""
    return {q.relative_to(path).as_posix(): file_sha256(q) for q in sorted(path.rglob("*")) if q.is_file()}


def folder_sha256(path: Path) -> str:
    """The SHA-256 of a folder's files: their relative paths and contents, in path order."""
    return files_digest(folder_files(path))


def _settings(facts: dict[str, Any]) -> dict[str, Any]:
    """The kind's facts as the fingerprint reads them: less what does not change an answer; a dense encoder by its
    files' digest (its ``encoder_files`` record: a local folder by its name, not its path; a Hub model by its name)
    rather than by where it is."""
    out = {k: copy.deepcopy(v) for k, v in facts.items() if k not in NOT_ANSWERS}
    dense = out.get("dense")
    if isinstance(dense, dict) and isinstance(dense.get("encoder_files"), dict):
        rec = dense.pop("encoder_files")
        if rec.get("source") == "folder":
            dense["encoder"] = {"folder": rec.get("folder"), "sha256": rec.get("sha256")}
        else:
            dense["encoder"] = {"name": dense.get("encoder"), "sha256": rec.get("sha256")}
    return out


def index_fingerprint(retriever: str, facts: dict[str, Any], passages: str, kind_files: dict[str, str]) -> str:
    """The fingerprint of an index whose kind wrote ``facts`` and the files ``kind_files`` (``{path inside the
    index: SHA-256}``) and whose passages digest to ``passages``. Made from the manifest's records, so a reader
    recomputes it at every open (:mod:`._integrity`)."""
    obj = {"scheme": SCHEME, "retriever": retriever, "settings": _settings(facts), "passages": passages,
           "files": dict(sorted(kind_files.items()))}
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()
