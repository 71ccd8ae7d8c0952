"""Editing an index after it was built, as someone who knows its format would: the manifest made anew (each file's
record, the fingerprint recomputed from them, the manifest's own digest), so that what a test damaged is found by
reading the files, not by the records (every reader checks the records; ``validate`` reads the rest)."""

from __future__ import annotations

import json
from pathlib import Path

from rag_retriever._fingerprint import index_fingerprint
from rag_retriever._integrity import record, seal


def resealed(d: Path, edit=None) -> dict:
    """Re-make ``d``'s manifest after ``edit(manifest)`` (optional) and after its files changed; the manifest."""
    m = json.loads((d / "manifest.json").read_text())
    if edit is not None:
        edit(m)
    m["files"] = {n: record(d / n) for n in m["files"] if (d / n).is_file()}
    c = m["content"]
    c["files"] = [n for n in c["files"] if n in m["files"]]
    m["fingerprint"] = index_fingerprint(m["retriever"], {k: m.get(k) for k in c["settings"]}, c["passages"],
                                         {n: m["files"][n]["sha256"] for n in c["files"]})
    m = seal(m)
    (d / "manifest.json").write_text(json.dumps(m, indent=1) + "\n")
    return m
