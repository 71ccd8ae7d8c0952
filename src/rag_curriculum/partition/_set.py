"""The outputs as a set: a new set of buckets is moved into ``OUT`` so that readers see all of it or none, and
the files a user put in a bucket are carried over; readers ask :func:`output_set_problem` before reading a bucket."""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._commit import foreign_entries, toolkit_files
from .._plumbing import SUMMARY_FILE, fsync_dir, output_set_problem
from ..errors import CurriculumError, PartitionError
from ..shards import MANIFEST
from ._config import ALL_OUTPUTS, OUTPUTS, STATS_FILE

log = logging.getLogger("rag_curriculum.partition")  # one logger for the package, as before the split


#: Hidden folders inside OUT: the next set of outputs being written, and the previous set being replaced.
STAGING_PREFIX = ".staging-"
TRASH_PREFIX = ".replaced-"

#: A bucket's manifest while its set is being moved into place (renamed to ``manifest.json`` just before
#: ``partition.json`` is written): until then the bucket does not read as a finished shard directory.
PENDING_MANIFEST = f".{MANIFEST}.pending"

#: A bucket's manifest while its set is being replaced: refused by readers (no ``manifest.json``), kept so that the
#: files the toolkit did not write (a user's notes in ``answerable/``) can be told apart and carried over.
REPLACED_MANIFEST = f".{MANIFEST}.replaced"


def _invalidate(out: Path) -> None:
    """The current set of outputs stops reading as complete: ``partition.json`` first, then each bucket's manifest."""
    (out / SUMMARY_FILE).unlink(missing_ok=True)
    for name in ALL_OUTPUTS:  # the buckets of either kind of partition (a search agent's has its own)
        if (out / name / MANIFEST).exists():
            os.replace(out / name / MANIFEST, out / name / REPLACED_MANIFEST)


def _bucket_record(d: Path) -> Path | None:
    """A bucket's manifest under whichever name a (possibly interrupted) commit left it."""
    return next((d / n for n in (MANIFEST, REPLACED_MANIFEST, PENDING_MANIFEST) if (d / n).is_file()), None)


def _owned_files(d: Path) -> set[str] | None:
    """The files the toolkit wrote in bucket ``d`` (its shards, card and plots, and its manifest under any of its
    names), from the bucket's record of them; None when there is no readable record."""
    record = _bucket_record(d)
    try:
        manifest = json.loads(record.read_text(encoding="utf-8")) if record is not None else None
        return (toolkit_files(d, manifest) | {MANIFEST, REPLACED_MANIFEST, PENDING_MANIFEST}
                if isinstance(manifest, dict) else None)
    except (OSError, ValueError, CurriculumError):
        return None


def _check_replaceable(out: Path, names: tuple[str, ...] = OUTPUTS) -> None:
    """Refuse to replace a bucket folder that holds files but no record of what the toolkit wrote there (a folder
    the user made, or a bucket an older version left half removed): its files could not be told apart."""
    for name in names:
        d = out / name
        if d.is_dir() and any(d.iterdir()) and _bucket_record(d) is None:
            raise PartitionError(
                f"{d} holds files but no manifest, so the files the toolkit wrote cannot be told apart from yours; "
                f"move what you want to keep out of {d} (or remove it), then run the same command again")


def _carry_user_files(old: Path, new: Path) -> bool:
    """Move what the toolkit did not write from a replaced bucket ``old`` into its successor ``new`` (the
    ``--overwrite`` rule of :mod:`rag_curriculum.shards`: only the toolkit's files are replaced)."""
    owned = _owned_files(old)
    if owned is None:
        return True  # no record of what the toolkit wrote there (refused before the commit): nothing to move
    kept, stuck = [], []
    for entry in foreign_entries(old, owned):
        src, dst = old / entry.rstrip("/"), new / entry.rstrip("/")
        n = 0
        while dst.exists() or dst.is_symlink():  # the new set has a file of that name: keep the user's beside it
            n += 1
            dst = new / f"{entry.rstrip('/')}.kept{n if n > 1 else ''}"
        try:
            dst.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dst)
        except OSError as e:  # e.g. a read-only folder of the user's: left where it is, never deleted
            stuck.append(f"{entry} ({e.strerror or e})")
            continue
        kept.append(entry if dst.name == Path(entry.rstrip("/")).name else f"{entry} (as {dst.name})")
    if kept:
        log.warning("%s: kept %d file(s) the toolkit did not write: %s", new, len(kept), ", ".join(kept))
    if stuck:
        log.warning("%s: could not move %d file(s) the toolkit did not write into the new %s; they stay in %s: %s",
                    old.parent.parent, len(stuck), new.name, old, ", ".join(stuck))
    return not stuck


def _remove_leftovers(out: Path) -> None:
    """Staging and replaced folders an interrupted run left in OUT (the caller holds the work lock, so no live
    process is using them), and partial folders of older versions that wrote the buckets directly."""
    if not out.is_dir():
        return
    held: set[str] = set()
    for p in sorted(out.iterdir()):
        if p.name.startswith(TRASH_PREFIX) and p.is_dir():  # a user's files in a replaced bucket go back first
            for name in ALL_OUTPUTS:
                if (p / name).is_dir():
                    if not (out / name).exists():
                        os.replace(p / name, out / name)  # the old bucket, still refused (no manifest.json)
                    elif not _carry_user_files(p / name, out / name):
                        held.add(p.name)  # a user's file could not be moved out: the folder is kept
    for p in out.iterdir():
        if p.name in held:
            continue
        stale = p.name.startswith((STAGING_PREFIX, TRASH_PREFIX)) or any(
            p.name.startswith(f".{b}.partial-") for b in ALL_OUTPUTS)
        if stale and p.is_dir():
            shutil.rmtree(p, ignore_errors=True)


def _retire_other_kind(out: Path, names: tuple[str, ...], trash: Path) -> None:
    """The buckets of the other kind of partition (a closed-context one's ``answerable/`` after ``--agent``, or a search
    agent's after a closed-context run) that the previous set left in ``out``: moved out with the rest of that set
    when they hold only the toolkit's files. One holding a file of the user's stays where it is (readers refuse it:
    no ``manifest.json``), and a warning says so."""
    for name in ALL_OUTPUTS:
        d = out / name
        if name in names or not d.is_dir():
            continue
        owned = _owned_files(d)
        if owned is None:
            continue  # not a bucket the toolkit wrote: never touched
        if foreign_entries(d, owned):
            log.warning("%s belongs to the previous set of outputs (another kind of partition) and holds files the "
                        "toolkit did not write; it is left where it is, unreadable as a shard directory: move your "
                        "files out and remove it", d)
            continue
        trash.mkdir(exist_ok=True)
        os.replace(d, trash / name)


def _commit_step(name: str) -> None:
    """Called before each step of moving a finished set into place (tests patch it to crash there)."""


def _commit_outputs(stage: Path, out: Path, names: tuple[str, ...] = OUTPUTS) -> None:
    """Move a complete set from ``stage`` into ``out``, replacing the previous set.

    The order keeps one rule at every moment: a bucket reads as a finished shard directory only once every output
    of its set is in place, and ``partition.json`` (written last) marks the set complete. A crash part-way leaves
    buckets without a manifest (readers refuse them) and no ``partition.json``; running the same command again
    writes the whole set again (it is deterministic: the same bytes)."""
    trash = out / f"{TRASH_PREFIX}{os.getpid()}-{time.time_ns()}"
    _check_replaceable(out, names)
    keep_trash = False
    _commit_step("invalidate")
    _invalidate(out)
    for name in names:
        os.replace(stage / name / MANIFEST, stage / name / PENDING_MANIFEST)
    for name in (*names, STATS_FILE):
        _commit_step(name)
        if (out / name).exists():
            trash.mkdir(exist_ok=True)
            os.replace(out / name, trash / name)
        os.replace(stage / name, out / name)
        if name in names and (trash / name).is_dir():
            if not _carry_user_files(trash / name, out / name):
                keep_trash = True
    for name in names:
        _commit_step(f"{name}/{MANIFEST}")
        os.replace(out / name / PENDING_MANIFEST, out / name / MANIFEST)
        fsync_dir(out / name)
    _retire_other_kind(out, names, trash)
    _commit_step(SUMMARY_FILE)
    os.replace(stage / SUMMARY_FILE, out / SUMMARY_FILE)
    fsync_dir(out)
    if not keep_trash:
        shutil.rmtree(trash, ignore_errors=True)
    shutil.rmtree(stage, ignore_errors=True)


def check_output_set(directory: str | Path, manifest: Mapping[str, Any] | None = None) -> None:
    """Raise :class:`PartitionError` with :func:`output_set_problem`'s message when there is one."""
    problem = output_set_problem(directory, manifest)
    if problem:
        raise PartitionError(problem)
