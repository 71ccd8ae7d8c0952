"""The commit protocol of every toolkit output: one implementation of the partial folder, ownership, refusal and
``--overwrite`` rules, used by every command that writes an output folder.

**Committed outputs** (a build's shard directory, each bucket of a partition, an index, a warm start's model) are
written whole, then moved into place. Each is an :class:`OutputKind`: the record the toolkit writes last (its
``manifest.json``; a warm start's ``warm_start.json``), what makes a record the toolkit's, the files it says the
toolkit wrote, and the error a refusal raises.

* **Refusal** (:func:`check_output`). An ``--out`` that is a file (or under one), or a folder that holds files
  without ``--overwrite``, is refused; with ``--overwrite``, so is a folder whose record is missing, unreadable or
  not the toolkit's (of that kind): ``--overwrite`` never deletes anything else.
* **The partial folder** (:func:`prepare_output`). The output is written into a hidden folder beside the target,
  ``.OUT.partial-OWNER``, named after its writer (:func:`owner_tag`), so the next run removes what a dead one left
  (:func:`remove_orphans`: :func:`owner_alive` tells a dead writer from a live one or another machine's).
* **The commit** (:func:`commit_output`). The partial folder is moved into place at the very end, the target
  checked again (of two runs racing to one output without ``--overwrite`` the second fails); an old output that
  holds only the toolkit's files is swapped out whole.
* **Ownership.** An old output that holds files a user added keeps them: only the files its record lists are
  replaced (:func:`replace_in_place`: the old record moved aside to ``.RECORD.replacing`` first, the new one last,
  so a crash never leaves a folder that passes as complete, and the next ``--overwrite`` still knows it for the
  toolkit's); nothing is changed through a symbolic link inside the output. A listed file counts as the
  toolkit's only while its content has the digest the record recorded for it (:func:`unchanged_files`): a stale
  or crafted record deletes nothing else, and a symbolic link is never followed nor removed.
* **One writer** (:func:`exclusive`). A second run to an output being written is refused at once, naming it.

**A set of outputs** (a partition's buckets, its ``stats.parquet`` and ``partition.json``: an :class:`OutputSet`)
is written whole into a staging folder inside its ``OUT`` (:func:`prepare_set`), then moved in member by member
(:func:`commit_set`): each member's manifest held back until every member is in place, the summary last, so readers
see all of a set or none of it; a replaced member's files that the toolkit did not write are carried over into its
successor, and what an interrupted commit left is put back or removed by the next.

**Resumable outputs** (a partition's or an evaluation's ``--out``: work chunks and results that accumulate over
runs, each file written atomically) are written in place; they share the refusal rule (:func:`check_resumable`:
``--out`` is a file, or a folder something else wrote) and the one-writer rule, and a run that failed before its
first result leaves no ``--out`` (:func:`resumable_output`). A training run's ``output_dir`` is neither: TRL writes
its checkpoints there over hours and resumes from them, so it cannot be written beside and moved in whole; the
toolkit's own files in it (``train_config.yaml``, ``train_plan.json``, ``curriculum_steps.jsonl``) are written
atomically one by one, and a fresh run over checkpoints is refused by ``run.resume``.

Private: :mod:`rag_curriculum.shards` (the read API and the shard writer), the index writer, warm-start, the
partition (its set of buckets) and the evaluation build on it; tests/test_commit.py tests it, for every kind of output
(a set of outputs through the partition's: tests/partition/test_resume.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rag_plumbing import _commit as _shared
from rag_plumbing._commit import (
    _HOST,  # noqa: F401 (who writes here: tests tell a dead writer of this machine by it)
    FILE_DIGESTS,
    PARTIAL,
    REPLACING,
    _remove_empty_dirs,
    _said,
    files_under,
    foreign_entries,
    lock_beside,
    owner_alive,
    owner_tag,
    read_record,
    recorded_digests,
    remove_orphans,
    unchanged_files,
)

from ._plumbing import MANIFEST, SUMMARY_FILE, fsync_dir
from .errors import ShardError

log = logging.getLogger(__name__)

__all__ = ["FILE_DIGESTS", "LEGACY_OWNED", "PENDING_MANIFEST", "REPLACED_MANIFEST", "REPLACING", "SHARDS", "STAGING_PREFIX", "TOOLKIT",
           "TRASH_PREFIX", "OutputKind", "OutputSet", "check_output", "check_resumable", "commit_output", "commit_set",
           "exclusive", "files_under", "foreign_entries", "invalidate_set", "is_toolkit_manifest", "listed_shards",
           "lock_beside", "owner_alive", "owner_tag", "prepare_output", "prepare_set", "read_record", "recorded_digests",
           "remove_orphans", "remove_output", "replace_in_place", "resumable_output", "toolkit_files", "unchanged_files"]

# The protocol of an output written whole (refusal, the partial folder, the commit, ownership, one writer) is the
# plumbing's (rag_plumbing._commit, written once for both distributions): this module names it with the
# toolkit's defaults (a shard directory, ShardError, `curriculum COMMAND` in the one-writer message) and adds the
# shard directory's record, resumable outputs and sets of outputs.
TOOLKIT = "rag-curriculum"
#: What a manifest without a ``files`` list (written before it existed) owns besides its shards: the card and plots.
LEGACY_OWNED = ("README.md", "level_by_index.png", "pass_rate.png")


@dataclass(frozen=True)
class OutputKind(_shared.OutputKind):
    """One kind of committed output, as the protocol sees it (:class:`rag_plumbing._commit.OutputKind`):
    a refusal raises :class:`ShardError` unless ``error`` says otherwise, and a change through a symbolic link
    inside the output is always refused with :class:`ShardError`."""

    error: Callable[..., Exception] = ShardError
    link_error: Callable[..., Exception] | None = ShardError


# -- what the toolkit owns -------------------------------------------------------------------------------------
def listed_shards(d: Path, manifest: dict[str, Any]) -> list[tuple[str, Path]]:
    """The manifest's shard entries as (relative name, path), refusing names that leave the directory."""
    out = []
    for entry in manifest.get("shards") or []:
        name = str(entry.get("file", "")) if isinstance(entry, dict) else ""
        parts = Path(name).parts
        if not name or Path(name).is_absolute() or ".." in parts or "\\" in name:
            raise ShardError(f"{d / MANIFEST}: shard path {name!r} is not a file inside the directory")
        out.append((name, d / name))
    return out


def is_toolkit_manifest(manifest: Any) -> bool:
    """A manifest as :func:`rag_curriculum.shards.write_shards` writes it: the toolkit's name, a kind, a schema version, a shard list."""
    return (isinstance(manifest, dict) and isinstance(manifest.get("toolkit"), dict)
            and manifest["toolkit"].get("name") == TOOLKIT and "kind" in manifest
            and isinstance(manifest.get("schema_version"), int) and isinstance(manifest.get("shards"), list))


def _shards_mismatch(manifest: Any) -> str | None:
    if is_toolkit_manifest(manifest):
        return None
    return (f"that {TOOLKIT} did not write (no toolkit.name {TOOLKIT!r}, kind, schema_version and shard list)")


#: The names a shard directory's files take (its layout): its shards (``data/part-00000.parquet``, or at the top in
#: the first layout), its card and plots at the top, and its manifest under each of its names. A record that lists
#: another file does not make it the toolkit's (``--overwrite`` keeps it, and says so); a file under one of these
#: names that a record lists with its digest is the toolkit's (docs/outputs.md says so: nothing tells it apart).
SHARD_LAYOUT = re.compile(r"(?:data/)?part-\d{5,}\.parquet|[^/]+\.(?:md|png)|\.?manifest\.json(?:\.\w+)?")


def shard_layout(name: str) -> bool:
    """Whether ``name`` (a relative POSIX path) is one a shard directory's writer writes (:data:`SHARD_LAYOUT`)."""
    return SHARD_LAYOUT.fullmatch(name) is not None


def toolkit_files(directory: str | Path, manifest: dict[str, Any]) -> set[str]:
    """The files (relative POSIX paths) a toolkit output's manifest says the toolkit wrote: the manifest, the
    shards, and its ``files`` (card, plots); for a manifest from before ``files`` existed, the card and plots
    by their fixed names; only names of a shard directory's layout (:func:`shard_layout`), whatever it lists."""
    d = Path(directory)
    owned = {MANIFEST, REPLACING, *(name for name, _ in listed_shards(d, manifest))}
    files = manifest.get("files")
    for name in (files if isinstance(files, list) else LEGACY_OWNED):
        name = str(name)
        if name and not Path(name).is_absolute() and ".." not in Path(name).parts:
            owned.add(Path(name).as_posix())
    return {n for n in owned if shard_layout(n)}


#: A shard directory (a build, a partition's bucket): ``manifest.json`` as :func:`rag_curriculum.shards.write_shards`
#: writes it, owning its shards, card and plots.
SHARDS = OutputKind("an output of this toolkit", _shards_mismatch, lambda d, m: toolkit_files(d, m),
                    layout=shard_layout)


def check_output(out_dir: str | Path, *, overwrite: bool, kind: OutputKind = SHARDS) -> Path:
    """Refuse an output that is a file (or under one), or that exists and holds files, unless ``overwrite`` and it
    is one of the toolkit's outputs of this kind (:func:`rag_plumbing._commit.check_output`); a shard
    directory unless ``kind`` says otherwise."""
    return _shared.check_output(out_dir, overwrite=overwrite, kind=kind)


def prepare_output(out_dir: str | Path, *, overwrite: bool, kind: OutputKind = SHARDS) -> Path:
    """Check the output, remove what dead writers of it left behind, and return the hidden folder beside it to
    write into, ``.OUT.partial-OWNER`` (:func:`rag_plumbing._commit.prepare_output`)."""
    return _shared.prepare_output(out_dir, overwrite=overwrite, kind=kind)


def commit_output(tmp: Path, out_dir: str | Path, *, overwrite: bool = True, kind: OutputKind = SHARDS) -> Path:
    """Move a finished partial folder into place, replacing an old output only now, at the very end, and only the
    toolkit's files of it (:func:`rag_plumbing._commit.commit_output`)."""
    return _shared.commit_output(tmp, out_dir, overwrite=overwrite, kind=kind)


def replace_in_place(tmp: Path, out: Path, old: set[str], old_record: dict[str, Any], *,
                     kind: OutputKind = SHARDS) -> None:
    """Replace the toolkit's files ``old`` of output ``out`` by those of ``tmp``, keeping every other file
    (:func:`rag_plumbing._commit.replace_in_place`)."""
    _shared.replace_in_place(tmp, out, old, old_record, kind=kind)


def remove_output(directory: str | Path) -> list[str]:
    """Remove a toolkit output by the ``--overwrite`` rule: only the files its manifest lists as the toolkit's
    (the manifest first, so a half-removed directory never validates), then the folders that leaves empty.
    Refuses (:class:`ShardError`) when the manifest is not the toolkit's. Returns what was kept."""
    d = Path(directory)
    record = read_record(d, SHARDS)
    marks = {MANIFEST, REPLACING}
    owned, listed = unchanged_files(d, toolkit_files(d, record) - marks, recorded_digests(record))
    if listed:
        log.warning("%s: kept %d file(s) its manifest lists that are not as the toolkit wrote them: %s", d,
                    len(listed), _said(listed))
    for name in [MANIFEST, *sorted(owned | marks - {MANIFEST})]:
        p = d / name
        if p.is_file() and not p.is_symlink():
            p.unlink()
    _remove_empty_dirs(d, owned)
    kept = foreign_entries(d, set()) if d.exists() else []
    others = [k for k in kept if k.rstrip("/") not in listed]
    if others:
        log.warning("%s: kept %d file(s) the toolkit did not write: %s", d, len(others), ", ".join(others))
    return kept



def exclusive(lock: Path, out: Path, command: str, error: Callable[..., Exception], *, note: str = "",
              remove: bool = False) -> contextlib.AbstractContextManager[None]:
    """Hold ``lock`` while ``curriculum COMMAND`` writes ``out``; a second run is refused at once (``error``: another
    `curriculum COMMAND` NOTE is writing OUT). ``remove``: delete the lock file afterwards (one beside the output,
    :func:`lock_beside`)."""
    return _shared.exclusive(lock, out, command, error, note=note, remove=remove, said=f"`curriculum {command}`")


# -- resumable outputs -------------------------------------------------------------------------------------------
def check_resumable(out: Path, *, written: Callable[[Path, list[str]], bool], what: str,
                    error: Callable[..., Exception], ignore: Iterable[str] = (), more: str = "") -> None:
    """The refusal rule of an output written in place over several runs: ``--out`` is a new or empty folder, or
    one that ``written(out, entries)`` says the command wrote (``what``: the output of an evaluation); results
    land beside the toolkit's own files only, never in a folder of anything else (with or without
    ``--overwrite``)."""
    if out.exists() and not out.is_dir():
        raise error(f"--out {out} is a file, where a folder is needed", hint="choose a folder for --out")
    if not out.is_dir():
        return
    skip = set(ignore)
    entries = [p.name for p in out.iterdir() if p.name not in skip]
    if entries and not written(out, entries):
        raise error(f"--out {out} holds files and is not {what}: nothing is written into it{more}",
                    hint="choose a new folder for --out")


@contextlib.contextmanager
def resumable_output(out: Path, lock: str | Path, command: str, error: Callable[..., Exception], *,
                     started: Callable[[], bool], note: str = "") -> Iterator[Path]:
    """Write a resumable output: ``out`` made, the writer's lock held inside it (``lock``, relative to ``out``), a
    second run refused at once; a run that fails before ``started()`` (its first result) leaves no ``out`` when it
    made it."""
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    failed = False
    try:
        with exclusive(out / lock, out, command, error, note=note):
            try:
                yield out
            except BaseException:
                failed = True
                raise
    finally:
        if failed and created and not started():
            shutil.rmtree(out, ignore_errors=True)


# -- a set of outputs --------------------------------------------------------------------------------------------
#: Hidden folders inside a set's ``OUT``: the next set being written, and the previous set being replaced.
STAGING_PREFIX = ".staging-"
TRASH_PREFIX = ".replaced-"
#: A member's manifest while its set is being moved into place (renamed to ``manifest.json`` just before the set's
#: summary is written): until then the member does not read as a finished shard directory.
PENDING_MANIFEST = f".{MANIFEST}.pending"
#: A member's manifest while its set is being replaced: refused by readers (no ``manifest.json``), kept so that the
#: files the toolkit did not write (a user's notes in ``answerable/``) can be told apart and carried over.
REPLACED_MANIFEST = f".{MANIFEST}.replaced"


@dataclass(frozen=True)
class OutputSet:
    """A set of shard directories inside one folder ``OUT`` (a partition's buckets), committed together: readers see
    all of a set or none of it. ``members``: every shard directory a set of this kind may hold (one set has some of
    them: a partition's buckets depend on its kind); ``files``: the files moved in beside them (``stats.parquet``);
    ``summary``: the file moved in last, which marks the set complete (``partition.json``; readers ask
    ``output_set_problem`` before reading a member); ``error``: the exception a refusal raises."""

    members: tuple[str, ...]
    files: tuple[str, ...] = ()
    summary: str = SUMMARY_FILE
    error: Callable[..., Exception] = ShardError


def invalidate_set(out: Path, kind: OutputSet) -> None:
    """The current set in ``out`` stops reading as complete: its summary first, then each member's manifest (set
    aside as :data:`REPLACED_MANIFEST`)."""
    (out / kind.summary).unlink(missing_ok=True)
    for name in kind.members:
        if (out / name / MANIFEST).exists():
            os.replace(out / name / MANIFEST, out / name / REPLACED_MANIFEST)


def _member_record(d: Path) -> Path | None:
    """A member's manifest under whichever name a (possibly interrupted) commit left it."""
    return next((d / n for n in (MANIFEST, REPLACED_MANIFEST, PENDING_MANIFEST) if (d / n).is_file()), None)


def _member_files(d: Path) -> set[str] | None:
    """The files the toolkit wrote in member ``d`` (its shards, card and plots, and its manifest under any of its
    names), from its record of them; None when there is no readable record."""
    record = _member_record(d)
    marks = {MANIFEST, REPLACED_MANIFEST, PENDING_MANIFEST}
    try:
        manifest = json.loads(record.read_text(encoding="utf-8")) if record is not None else None
        if not isinstance(manifest, dict):
            return None
        unchanged, _ = unchanged_files(d, toolkit_files(d, manifest) - marks - {REPLACING},
                                       recorded_digests(manifest))
        return unchanged | marks
    except (OSError, ValueError, ShardError):
        return None


def _check_replaceable(out: Path, names: Sequence[str], kind: OutputSet) -> None:
    """Refuse to replace a member folder that holds files but no record of what the toolkit wrote there (a folder
    the user made, or a member an older version left half removed): its files could not be told apart."""
    for name in names:
        d = out / name
        if d.is_dir() and any(d.iterdir()) and _member_record(d) is None:
            raise kind.error(
                f"{d} holds files but no manifest, so the files the toolkit wrote cannot be told apart from yours; "
                f"move what you want to keep out of {d} (or remove it), then run the same command again")


def _carry_user_files(old: Path, new: Path) -> bool:
    """Move what the toolkit did not write from a replaced member ``old`` into its successor ``new`` (the
    ``--overwrite`` rule: only the toolkit's files are replaced). False when some could not be moved."""
    owned = _member_files(old)
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


def prepare_set(out: Path, kind: OutputSet) -> Path:
    """Remove what interrupted writes left in ``out`` (staging and replaced folders: the caller holds the writer's
    lock, so no live process is using them; a user's files in a replaced member go back first; and the partial
    folders of older versions that wrote the members directly), and return the staging folder to write the next set
    into (inside ``out``, not made yet)."""
    if out.is_dir():
        held: set[str] = set()
        for p in sorted(out.iterdir()):
            if p.name.startswith(TRASH_PREFIX) and p.is_dir():
                for name in kind.members:
                    if (p / name).is_dir():
                        if not (out / name).exists():
                            os.replace(p / name, out / name)  # the old member, still refused (no manifest.json)
                        elif not _carry_user_files(p / name, out / name):
                            held.add(p.name)  # a user's file could not be moved out: the folder is kept
        for p in out.iterdir():
            if p.name in held:
                continue
            stale = p.name.startswith((STAGING_PREFIX, TRASH_PREFIX)) or any(
                p.name.startswith(f".{b}.{PARTIAL}-") for b in kind.members)
            if stale and p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
    return out / f"{STAGING_PREFIX}{os.getpid()}-{time.time_ns()}"


def _retire_other_members(out: Path, names: Sequence[str], kind: OutputSet, trash: Path) -> None:
    """The members the previous set left in ``out`` that the new one does not have (a closed-context partition's
    ``answerable/`` after ``--agent``, or a search agent's buckets after a closed-context run): moved out with the
    rest of that set when they hold only the toolkit's files. One holding a file of the user's stays where it is
    (readers refuse it: no ``manifest.json``), and a warning says so."""
    for name in kind.members:
        d = out / name
        if name in names or not d.is_dir():
            continue
        owned = _member_files(d)
        if owned is None:
            continue  # not a member the toolkit wrote: never touched
        if foreign_entries(d, owned):
            log.warning("%s, of the previous outputs (another kind of partition), holds files the toolkit did not "
                        "write: left as it is; move your files out and remove it", d)
            continue
        trash.mkdir(exist_ok=True)
        os.replace(d, trash / name)


def _commit_step(name: str) -> None:
    """Called before each step of moving a finished set into place (tests patch it to crash there)."""


def commit_set(stage: Path, out: Path, names: Sequence[str], kind: OutputSet) -> None:
    """Move a complete set from ``stage`` (its members ``names``, its files and its summary) into ``out``, replacing
    the previous set.

    The order keeps one rule at every moment: a member reads as a finished shard directory only once every output
    of its set is in place, and the summary (moved in last) marks the set complete. A crash part-way leaves members
    without a manifest (readers refuse them) and no summary; running the same command again writes the whole set
    again (deterministic: the same bytes). A replaced member's files that the toolkit did not write are carried
    over into its successor."""
    trash = out / f"{TRASH_PREFIX}{os.getpid()}-{time.time_ns()}"
    _check_replaceable(out, names, kind)
    keep_trash = False
    _commit_step("invalidate")
    invalidate_set(out, kind)
    for name in names:
        os.replace(stage / name / MANIFEST, stage / name / PENDING_MANIFEST)
    for name in (*names, *kind.files):
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
    _retire_other_members(out, names, kind, trash)
    _commit_step(kind.summary)
    os.replace(stage / kind.summary, out / kind.summary)
    fsync_dir(out)
    if not keep_trash:
        shutil.rmtree(trash, ignore_errors=True)
    shutil.rmtree(stage, ignore_errors=True)
