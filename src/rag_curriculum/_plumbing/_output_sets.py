"""The files that mark a partition's ``OUT`` as a set of outputs written as a whole, and the check a reader of its
statistics makes. Here, below every reader (``curriculum eval --stats`` reads a partition's ``stats.parquet``;
evaluation and partition sit side by side in the layers), so each imports it at the top of its file."""

from __future__ import annotations

from pathlib import Path

SUMMARY_FILE = "partition.json"  # written last: the set is complete
RECORD_FILE = "partition_config.json"  # the resolved config and where the input is (for merges)
WORK = "work"


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
