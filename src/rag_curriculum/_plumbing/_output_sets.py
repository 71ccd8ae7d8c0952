"""The files that mark a partition's ``OUT`` as a set of outputs written as a whole, and the check a reader of its
statistics makes, and the check every reader of a bucket makes (``shards.validate_shards`` applies it to each
directory whose manifest has a ``partition`` section). Here, below every reader (``curriculum eval --stats`` reads a partition's ``stats.parquet``;
evaluation and partition sit side by side in the layers), so each imports it at the top of its file."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

SUMMARY_FILE = "partition.json"  # written last: the set is complete
RECORD_FILE = "partition_config.json"  # the resolved config and where the input is (for merges)
WORK = "work"
MANIFEST = "manifest.json"  # a shard directory's manifest (shards.MANIFEST)


def stats_set_problem(path: str | Path) -> str | None:
    """Why a partition's ``stats.parquet`` (or its ``OUT``) must not be read, or None: inside its partition's
    ``OUT`` it is read only once ``partition.json`` marks the set complete."""
    p = Path(path)
    if not p.exists():
        return None  # nothing here: its reader says so (not "the folder above is an unfinished partition")
    parent = p if p.is_dir() else p.parent
    if not ((parent / RECORD_FILE).exists() or (parent / WORK).is_dir()):
        return None
    if not (parent / SUMMARY_FILE).is_file():
        return (f"{parent} is a partition whose outputs were not all written (no partition.json); run the same "
                "`curriculum partition` command again to write them")
    return None


def output_set_problem(directory: str | Path, manifest: Mapping[str, Any] | None = None) -> str | None:
    """Why a bucket directory of a partition (``OUT/answerable`` ...) must not be read, or None.

    A bucket still inside its partition's ``OUT`` (beside ``partition_config.json`` or ``work/``) is part of a set:
    it may be read only when ``OUT/partition.json`` is there and names the same set (an interrupted write leaves
    none). A bucket copied elsewhere is read on its own. Readers (``validate``, loaders) call this."""
    d = Path(directory)
    if manifest is None:
        try:
            manifest = json.loads((d / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
    part = manifest.get("partition")
    if not isinstance(part, Mapping) or "set" not in part:
        return None
    parent = d.parent
    if not ((parent / RECORD_FILE).exists() or (parent / WORK).is_dir()):
        return None
    summary_path = parent / SUMMARY_FILE
    try:
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        summary = None
    if not isinstance(summary, Mapping) or summary.get("set") != part["set"]:
        what = "no partition.json" if summary is None else "partition.json belongs to another set of outputs"
        return (f"{d} is one output of a partition whose outputs were not all written ({what} in {parent}); run "
                "the same `curriculum partition` command again to write them")
    return None
