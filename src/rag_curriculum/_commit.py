"""The commit protocol of a toolkit output (a shard directory, a partition's buckets, an index): written into a
hidden temporary folder beside the target and moved into place whole at the end, replacing an old output only by the
``--overwrite`` rule, and cleaned up after a writer that died. Private: :mod:`rag_curriculum.shards` (the read API
and the shard writer) and the index writer build on it, and ``rag_curriculum.shards`` still exports its names.

* **What the toolkit owns.** ``--overwrite`` replaces only an output whose manifest is the toolkit's
  (:func:`is_toolkit_manifest`), and removes only the files that manifest lists as written by the toolkit
  (:func:`toolkit_files`); files a user added are kept (:func:`foreign_entries`), nothing is changed through a
  symbolic link inside the output.
* **Writing.** :func:`prepare_output` checks the target (:func:`check_output`), removes the temporary folders of
  earlier writers that are dead (:func:`remove_orphans`: each folder is named after its writer,
  :func:`owner_tag`, and :func:`owner_alive` tells a dead one from a live one or another machine's), and gives the
  folder to write into; :func:`commit_output` moves it into place, checking the target again, and an output that
  holds files a user added is replaced file by file (:func:`replace_in_place`: the old manifest moved aside to
  :data:`REPLACING` first, the new one last, so a crash never leaves a folder that passes as complete).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import socket
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ._plumbing import atomic_write_text, fsync_dir
from ._plumbing._output_sets import MANIFEST
from .errors import ShardError

log = logging.getLogger(__name__)

__all__ = ["LEGACY_OWNED", "REPLACING", "TOOLKIT", "check_output", "commit_output", "files_under", "foreign_entries",
           "is_toolkit_manifest", "listed_shards", "owner_alive", "owner_tag", "prepare_output", "remove_orphans",
           "remove_output", "replace_in_place", "toolkit_files"]

# While ``--overwrite`` replaces an output in place, its manifest is moved aside under this name (listing the old
# and the new files as the toolkit's): a crash mid-way leaves a folder that no reader takes as complete, and that
# the next ``--overwrite`` still recognises as the toolkit's.
REPLACING = ".manifest.json.replacing"
TOOLKIT = "rag-curriculum"
#: What a manifest without a ``files`` list (written before it existed) owns besides its shards: the card and plots.
LEGACY_OWNED = ("README.md", "level_by_index.png", "pass_rate.png")



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


def _toolkit_manifest(d: Path) -> dict[str, Any]:
    """The manifest of an output that ``--overwrite`` may replace, or a one-line :class:`ShardError`."""
    what = "choose another --out, or move its files away yourself"
    path = d / MANIFEST
    if not path.exists() and (d / REPLACING).is_file():  # an --overwrite in place that did not finish
        path = d / REPLACING
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ShardError(f"{d} holds a {MANIFEST} that cannot be read ({type(e).__name__}), so it is not known "
                         f"to be an output of this toolkit; --overwrite only replaces those: {what}") from None
    if not is_toolkit_manifest(manifest):
        raise ShardError(f"{d} holds a {MANIFEST} that {TOOLKIT} did not write (no toolkit.name {TOOLKIT!r}, kind, "
                         f"schema_version and shard list); --overwrite only replaces this toolkit's outputs: {what}")
    return manifest


def toolkit_files(directory: str | Path, manifest: dict[str, Any]) -> set[str]:
    """The files (relative POSIX paths) a toolkit output's manifest says the toolkit wrote: the manifest, the
    shards, and its ``files`` (card, plots); for a manifest from before ``files`` existed, the card and plots
    by their fixed names."""
    d = Path(directory)
    owned = {MANIFEST, REPLACING, *(name for name, _ in listed_shards(d, manifest))}
    files = manifest.get("files")
    for name in (files if isinstance(files, list) else LEGACY_OWNED):
        name = str(name)
        if name and not Path(name).is_absolute() and ".." not in Path(name).parts:
            owned.add(Path(name).as_posix())
    return owned


def foreign_entries(directory: str | Path, owned: set[str]) -> list[str]:
    """What in ``directory`` the toolkit did not write (a folder wholly foreign is named once, ``name/``)."""
    d = Path(directory)
    owned_dirs = {Path(o).parent.as_posix() for o in owned}
    owned_dirs |= {p.as_posix() for o in owned for p in Path(o).parents}
    out: list[str] = []

    def walk(sub: Path, rel: str) -> None:
        for p in sorted(sub.iterdir()):
            r = f"{rel}{p.name}"
            if p.is_dir() and not p.is_symlink():
                if r in owned_dirs:
                    walk(p, r + "/")
                else:
                    out.append(r + "/")
            elif r not in owned:
                out.append(r)

    walk(d, "")
    return out


def remove_output(directory: str | Path) -> list[str]:
    """Remove a toolkit output by the ``--overwrite`` rule: only the files its manifest lists as the toolkit's
    (the manifest first, so a half-removed directory never validates), then the folders that leaves empty.
    Refuses (:class:`ShardError`) when the manifest is not the toolkit's. Returns what was kept."""
    d = Path(directory)
    owned = toolkit_files(d, _toolkit_manifest(d))
    _no_links_on_the_way(d, owned)
    for name in [MANIFEST, *sorted(owned - {MANIFEST})]:
        p = d / name
        if p.is_file() or p.is_symlink():
            p.unlink()
    _remove_empty_dirs(d, owned)
    kept = foreign_entries(d, set()) if d.exists() else []
    if kept:
        log.warning("%s: kept %d file(s) the toolkit did not write: %s", d, len(kept), ", ".join(kept))
    return kept


def _no_links_on_the_way(d: Path, names: Iterable[str]) -> None:
    """Refuse to replace or remove files reached through a symbolic link inside an output (``data -> /datasets``):
    the link's target is not the toolkit's to change."""
    for name in sorted(names):
        sub = d
        for part in Path(name).parts[:-1]:
            sub = sub / part
            if sub.is_symlink():
                raise ShardError(f"{sub} is a symbolic link: --overwrite does not change files through it (its "
                                 "target is not the toolkit's); replace the link with a folder, or choose another "
                                 "output")


def _remove_empty_dirs(d: Path, owned: set[str], *, top: bool = True) -> None:
    """Remove the folders of ``owned`` files that are left empty (and ``d`` itself, with ``top``)."""
    dirs = sorted({p for o in owned for p in Path(o).parents if p != Path(".")}, key=lambda p: -len(p.parts))
    for sub in [d / s for s in dirs] + ([d] if top else []):
        with contextlib.suppress(OSError):
            sub.rmdir()


# -- the write protocol ----------------------------------------------------------------------------------------
def check_output(out_dir: str | Path, *, overwrite: bool) -> Path:
    """Refuse an output that exists, unless it is empty, or ``overwrite`` and it is one of the toolkit's outputs
    (its ``manifest.json`` is the toolkit's, :func:`is_toolkit_manifest`): ``--overwrite`` never deletes a
    directory of anything else."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ShardError(f"--out {out} is a file, not a directory; choose another --out")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise ShardError(f"{out} already exists and is not empty; pass --overwrite (overwrite=True) to replace "
                             "it, or choose another --out")
        if not (out / MANIFEST).is_file() and not (out / REPLACING).is_file():
            raise ShardError(f"{out} exists and is not an output of this toolkit (no {MANIFEST}); --overwrite only "
                             "replaces earlier outputs. Choose another --out, or remove it yourself")
        _toolkit_manifest(out)
    return out


_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]


def _start_time(pid: int) -> int:
    """The process's start time in clock ticks since boot (Linux), 0 where unknown: with the PID it names one
    process, even after the PID is reused."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return int(fields[19])
    except (OSError, IndexError, ValueError):
        return 0


def owner_tag() -> str:
    """``PID-NS-HOST-START``: who writes a temporary folder, so a later run can tell whether it died."""
    pid = os.getpid()
    return f"{pid}-{time.time_ns()}-{_HOST}-{_start_time(pid)}"


def owner_alive(pid: int, host: str | None, start: int | None) -> bool:
    if host is not None and host != _HOST:
        return True  # another machine sharing the file system: it cannot be checked from here, so it is kept
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        if fields[0] == b"Z":  # a zombie: dead, its parent has not collected it
            return False
        if start and int(fields[19]) != start:
            return False  # the PID was reused by another process
    except (OSError, IndexError, ValueError):
        pass
    return True


def _orphan_re(out: Path, kinds: Sequence[str]) -> re.Pattern[str]:
    # .OUT.KIND-PID-NS[-HOST-START] (the owner tag), or .OUT.KIND-PID-HEX8 (an index written before the tag)
    alts = "|".join(re.escape(k) for k in kinds)
    return re.compile(rf"^\.{re.escape(out.name)}\.(?:{alts})-(\d+)-(?:(\d+)(?:-([0-9a-f]{{8}})-(\d+))?|[0-9a-f]{{8}})$")


def remove_orphans(out_dir: str | Path, kinds: Sequence[str] = ("partial", "old")) -> list[Path]:
    """Remove the hidden temporary folders of earlier writes of this output (``.OUT.partial-*``, ``.OUT.old-*``;
    ``kinds`` names other prefixes, such as an index's ``tmp``) whose writing process is dead (killed, or its
    machine crashed). Folders of a live process, or of another machine, are left alone. Returns what was
    removed."""
    out = Path(out_dir)
    pattern = _orphan_re(out, kinds)
    removed = []
    try:
        entries = list(out.parent.iterdir())
    except OSError:
        return removed
    for p in entries:
        m = pattern.match(p.name)
        if not m or not p.is_dir() or p.is_symlink():
            continue
        pid, host, start = int(m.group(1)), m.group(3), int(m.group(4)) if m.group(4) else None
        if owner_alive(pid, host, start):
            continue
        shutil.rmtree(p, ignore_errors=True)
        if not p.exists():
            removed.append(p)
    if removed:
        log.info("removed %d folder(s) left by interrupted writes of %s: %s", len(removed), out,
                 ", ".join(p.name for p in removed))
    return removed


def prepare_output(out_dir: str | Path, *, overwrite: bool) -> Path:
    """Check the output (see :func:`check_output`), remove what dead writers of it left behind
    (:func:`remove_orphans`), and return a hidden temporary directory beside it to write into."""
    out = check_output(out_dir, overwrite=overwrite)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ShardError(f"cannot create {out}: a parent path is a file; choose another --out") from None
    remove_orphans(out)
    tmp = out.parent / f".{out.name}.partial-{owner_tag()}"
    tmp.mkdir()
    return tmp


def files_under(d: Path) -> list[str]:
    return sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file() or p.is_symlink())


def commit_output(tmp: Path, out_dir: str | Path, *, overwrite: bool = True) -> Path:
    """Move a finished temporary directory into place (replacing an old one only now, at the very end).

    The existence check is made again here, so of two builds racing to one output without ``overwrite`` the
    second fails instead of replacing the first. An old output holding only the toolkit's files is swapped out
    whole; one holding files a user added keeps them: only the files its manifest lists are replaced (the new
    manifest last), and the kept files are named in a warning."""
    out = Path(out_dir)
    if out.exists():
        check_output(out, overwrite=overwrite)
        if not any(out.iterdir()):
            out.rmdir()
    if out.exists():
        old_manifest = _toolkit_manifest(out)
        old = toolkit_files(out, old_manifest)
        kept = foreign_entries(out, old)
        if kept:
            replace_in_place(tmp, out, old, old_manifest)
            log.warning("%s: replaced the toolkit's files and kept %d the toolkit did not write: %s", out,
                        len(kept), ", ".join(kept))
            return out
        trash = out.parent / f".{out.name}.old-{owner_tag()}"
        os.replace(out, trash)
        os.replace(tmp, out)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        try:
            os.rename(tmp, out)
        except OSError:
            raise ShardError(f"{out} appeared while this output was being written (another run?); nothing was "
                             "replaced. Pass --overwrite to replace it") from None
    return out


def replace_in_place(tmp: Path, out: Path, old: set[str], old_manifest: dict[str, Any]) -> None:
    """Replace the toolkit's files ``old`` of output ``out`` (a shard directory or an index) by those of ``tmp``,
    keeping every other file: the old manifest moved aside first (:data:`REPLACING`), the new manifest last."""
    new = files_under(tmp)
    _no_links_on_the_way(out, set(old) | set(new))
    # Move the old manifest aside first (see REPLACING): from here until the new manifest lands, the folder has no
    # manifest.json, so a crash never leaves the old manifest describing a mix of old and new files.
    if not (out / REPLACING).is_file():
        marker = {**old_manifest, "files": sorted((old | set(new)) - {MANIFEST, REPLACING})}
        atomic_write_text(out / REPLACING, json.dumps(marker, indent=2) + "\n")
    (out / MANIFEST).unlink(missing_ok=True)
    fsync_dir(out)
    for name in sorted(old - set(new) - {MANIFEST, REPLACING}):  # the old files the new output does not have
        p = out / name
        if p.is_file() or p.is_symlink():
            p.unlink()
    for name in [n for n in new if n != MANIFEST] + [MANIFEST]:  # the manifest last: complete only at the end
        target = out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp / name, target)
    (out / REPLACING).unlink(missing_ok=True)
    _remove_empty_dirs(out, old - set(new), top=False)
    shutil.rmtree(tmp, ignore_errors=True)
