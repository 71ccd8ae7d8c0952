"""The commit protocol of an index folder (written once: rag-curriculum's outputs are built on it too, so a
fix lands in both distributions), for outputs written whole: the output is written into a hidden partial
folder beside the target (``.OUT.partial-OWNER``, named after its writer so the next run removes what a dead
one left), then moved into place at the very end; an ``--out`` that is a file, or a folder that holds files
without ``--overwrite``, is refused, and so, with ``--overwrite``, is a folder whose record is not an index's:
``--overwrite`` never deletes anything else. An old output that holds files a user added keeps them: only the
files its record lists (with the digests it recorded) are replaced. One writer at a time (:func:`exclusive`)."""

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
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from ._atomic import atomic_write_text, fsync_dir
from ._digest import file_sha256
from ._errors import HintedError
from ._lock import held_or_refused

MANIFEST = "manifest.json"

log = logging.getLogger(__name__)


# While ``--overwrite`` replaces an output in place, its manifest is moved aside under this name (listing the old
# and the new files as the toolkit's): a crash mid-way leaves a folder that no reader takes as complete, and that
# the next ``--overwrite`` still recognises as the toolkit's (:attr:`OutputKind.replacing`).
REPLACING = f".{MANIFEST}.replacing"
#: The hidden folders a writer makes beside its output: the one it writes into, and an old output being replaced.
PARTIAL, OLD = "partial", "old"


@dataclass(frozen=True)
class OutputKind:
    """One kind of committed output, as the protocol sees it.

    ``what``: the output in a sentence (``an index of this toolkit``); ``record``: the file written last that says
    the toolkit wrote the folder; ``mismatch(record)``: why a record that parses is not one of this kind (a phrase
    after ``holds a manifest.json``), None when it is; ``owned(directory, record)``: the files (relative POSIX
    paths) the record says the toolkit wrote; ``error``: the exception a refusal raises; ``orphans``: the prefixes
    of hidden folders a dead writer may have left (an index written before this protocol used ``tmp``);
    ``link_error``: the exception refusing to change files through a symbolic link inside the output (``error``
    when None); ``layout(name)``: whether a relative POSIX path is one this kind ever writes (its names by the
    kind's layout): a listed file outside it is never the toolkit's, whatever the record says (a crafted record
    that lists a user's file, even with its true SHA-256, deletes nothing); None: every listed file."""

    what: str
    mismatch: Callable[[Any], str | None]
    owned: Callable[[Path, dict[str, Any]], set[str]]
    record: str = MANIFEST
    error: Callable[..., Exception] = HintedError
    orphans: tuple[str, ...] = (PARTIAL, OLD)
    link_error: Callable[..., Exception] | None = None
    layout: Callable[[str], bool] | None = None

    @property
    def replacing(self) -> str:
        """The record's name while an ``--overwrite`` in place replaces the folder's files."""
        return f".{self.record}.replacing"

    def owns(self, directory: Path, record: dict[str, Any]) -> set[str]:
        """Every file of ``directory`` the toolkit wrote: those its record lists that its layout allows, the record
        and its marker."""
        owned = self.owned(directory, record)
        if self.layout is not None:
            owned = {n for n in owned if self.layout(n)}
        return {self.record, self.replacing, *owned}


# -- what the toolkit owns -------------------------------------------------------------------------------------
def read_record(d: Path, kind: OutputKind) -> dict[str, Any]:
    """The record of an output that ``--overwrite`` may replace (its marker, when an ``--overwrite`` in place did
    not finish), or ``kind.error`` in one line: missing, unreadable, or not the toolkit's (of this kind)."""
    then = "--overwrite only replaces those: choose another --out, or move its files away yourself"
    path = d / kind.record
    if not path.exists() and (d / kind.replacing).is_file():  # an --overwrite in place that did not finish
        path = d / kind.replacing
    if not path.is_file():
        raise kind.error(f"{d} exists and is not {kind.what} (no {kind.record}); {then}")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise kind.error(f"{d} holds a {kind.record} that cannot be read ({type(e).__name__}), so it is not known "
                         f"to be {kind.what}; {then}") from None
    why = kind.mismatch(record)
    if why is not None:
        raise kind.error(f"{d} holds a {kind.record} {why}, so it is not {kind.what}; {then}")
    return record


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


#: The key under which an output's record lists the SHA-256 of each file it wrote besides its shards (a build's
#: card and plots, a warm start's model files, and an ``--overwrite`` in place's marker for every file).
FILE_DIGESTS = "file_sha256"


def recorded_digests(record: dict[str, Any]) -> dict[str, set[str]]:
    """The SHA-256 a record says each of its files had when the toolkit wrote it: its shards' ``sha256``, an
    index's ``files`` (name -> ``{"sha256": ...}``) and ``file_sha256`` (name -> a digest, or the list of digests
    an ``--overwrite`` in place's marker records: the old file's and the new one's)."""
    out: dict[str, set[str]] = {}

    def add(name: Any, digest: Any) -> None:
        for d in digest if isinstance(digest, list) else [digest]:
            if isinstance(d, str):
                out.setdefault(str(name), set()).add(d)

    for entry in record.get("shards") or []:
        if isinstance(entry, dict):
            add(entry.get("file"), entry.get("sha256"))
    files = record.get("files")
    if isinstance(files, dict):
        for name, entry in files.items():
            add(name, entry.get("sha256") if isinstance(entry, dict) else entry)
    more = record.get(FILE_DIGESTS)
    if isinstance(more, dict):
        for name, digest in more.items():
            add(name, digest)
    return out


def unchanged_files(d: Path, names: Iterable[str], digests: dict[str, set[str]]) -> tuple[set[str], dict[str, str]]:
    """Of the files ``names`` a record lists in output ``d``, those the toolkit may replace or remove: a regular
    file, reached through no symbolic link, whose content has the SHA-256 the record recorded for it. The others
    that exist are returned with why they are kept (``--overwrite`` deletes only what the toolkit wrote: a stale or
    crafted record deletes nothing else, and a symbolic link is never followed or removed)."""
    ok: set[str] = set()
    kept: dict[str, str] = {}
    for name in sorted(set(names)):
        p = d / name
        if not (p.exists() or p.is_symlink()):
            continue
        sub, via = d, None
        for part in Path(name).parts[:-1]:
            sub = sub / part
            if sub.is_symlink():
                via = sub
                break
        if via is not None:
            kept[name] = f"reached through the symbolic link {via.relative_to(d).as_posix()}"
        elif p.is_symlink():
            kept[name] = "a symbolic link"
        elif not p.is_file():
            kept[name] = "not a file"
        elif name not in digests:
            kept[name] = "no digest recorded for it"
        elif file_sha256(p) not in digests[name]:
            kept[name] = "its content is not what the toolkit wrote"
        else:
            ok.add(name)
    return ok, kept


def _said(kept: dict[str, str]) -> str:
    return ", ".join(f"{name} ({why})" for name, why in sorted(kept.items()))


def _no_links_on_the_way(d: Path, names: Iterable[str], error: Callable[..., Exception] = HintedError) -> None:
    """Refuse to replace or remove files reached through a symbolic link inside an output (``data -> /datasets``):
    the link's target is not the toolkit's to change."""
    for name in sorted(names):
        sub = d
        for part in Path(name).parts[:-1]:
            sub = sub / part
            if sub.is_symlink():
                raise error(f"{sub} is a symbolic link: --overwrite does not change files through it (its "
                            "target is not the toolkit's); replace the link with a folder, or choose another output")


def _remove_empty_dirs(d: Path, owned: set[str], *, top: bool = True) -> None:
    """Remove the folders of ``owned`` files that are left empty (and ``d`` itself, with ``top``)."""
    dirs = sorted({p for o in owned for p in Path(o).parents if p != Path(".")}, key=lambda p: -len(p.parts))
    for sub in [d / s for s in dirs] + ([d] if top else []):
        with contextlib.suppress(OSError):
            sub.rmdir()


# -- the write protocol ----------------------------------------------------------------------------------------
def check_output(out_dir: str | Path, *, overwrite: bool, kind: OutputKind) -> Path:
    """Refuse an output that is a file (or under one), or that exists and holds files, unless ``overwrite`` and it
    is one of the toolkit's outputs of this kind (its record is, :func:`read_record`): ``--overwrite`` never
    deletes a folder of anything else."""
    out = Path(out_dir)
    if out.is_symlink():  # the output is moved in whole: it would replace the link, and never reach its target
        raise kind.error(f"--out {out} is a symbolic link (to {os.readlink(out)}); give the folder it points to "
                         f"(--out {out.resolve()}) or another --out")
    if out.exists() and not out.is_dir():
        raise kind.error(f"--out {out} is a file, where a folder is needed; choose another --out")
    blocker = next((p for p in out.parents if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise kind.error(f"cannot create --out {out}: {blocker} is a file; choose another --out")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise kind.error(f"{out} already exists and is not empty; pass --overwrite (overwrite=True) to replace "
                             "it, or choose another --out")
        read_record(out, kind)
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


def remove_orphans(out_dir: str | Path, kinds: Sequence[str] = (PARTIAL, OLD)) -> list[Path]:
    """Remove the hidden temporary folders of earlier writes of this output (``.OUT.partial-*``, ``.OUT.old-*``;
    ``kinds`` names the prefixes, :attr:`OutputKind.orphans`) whose writing process is dead (killed, or its
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


def prepare_output(out_dir: str | Path, *, overwrite: bool, kind: OutputKind) -> Path:
    """Check the output (:func:`check_output`), remove what dead writers of it left behind
    (:func:`remove_orphans`), and return the hidden folder beside it to write into, ``.OUT.partial-OWNER``."""
    out = check_output(out_dir, overwrite=overwrite, kind=kind)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise kind.error(f"cannot create {out}: a parent path is a file; choose another --out") from None
    remove_orphans(out, kind.orphans)
    tmp = out.parent / f".{out.name}.{PARTIAL}-{owner_tag()}"
    tmp.mkdir()
    return tmp


def files_under(d: Path) -> list[str]:
    return sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file() or p.is_symlink())


def commit_output(tmp: Path, out_dir: str | Path, *, overwrite: bool = True, kind: OutputKind) -> Path:
    """Move a finished partial folder into place (replacing an old output only now, at the very end).

    The target is checked again here, so of two runs racing to one output without ``overwrite`` the second fails
    instead of replacing the first. An old output holding only the toolkit's files is swapped out whole; one
    holding files a user added keeps them: only the files its record lists are replaced (the new record last), and
    the kept files are named in a warning."""
    out = Path(out_dir)
    if out.exists():
        check_output(out, overwrite=overwrite, kind=kind)
        if not any(out.iterdir()):
            out.rmdir()
    if out.exists():
        old_record = read_record(out, kind)
        marks = {kind.record, kind.replacing}
        unchanged, listed = unchanged_files(out, kind.owns(out, old_record) - marks, recorded_digests(old_record))
        old = unchanged | marks
        kept = foreign_entries(out, old)
        if kept:
            replace_in_place(tmp, out, old, old_record, kind=kind)
            others = [k for k in kept if k.rstrip("/") not in listed]
            if others:
                log.warning("%s: replaced the toolkit's files and kept %d the toolkit did not write: %s", out,
                            len(others), ", ".join(others))
            if listed:
                log.warning("%s: kept %d file(s) its %s lists that are not as the toolkit wrote them (only those "
                            "are replaced or removed): %s", out, len(listed), kind.record, _said(listed))
            return out
        trash = out.parent / f".{out.name}.{OLD}-{owner_tag()}"
        os.replace(out, trash)
        os.replace(tmp, out)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        try:
            os.rename(tmp, out)
        except OSError:
            raise kind.error(f"{out} appeared while this output was being written (another run?); nothing was "
                             "replaced. Pass --overwrite to replace it") from None
    return out


def replace_in_place(tmp: Path, out: Path, old: set[str], old_record: dict[str, Any], *,
                     kind: OutputKind) -> None:
    """Replace the toolkit's files ``old`` of output ``out`` by those of ``tmp``, keeping every other file: the old
    record moved aside first (:attr:`OutputKind.replacing`, listing the old and the new files as the toolkit's), the
    new record last."""
    record, marker = kind.record, kind.replacing
    new = files_under(tmp)
    _no_links_on_the_way(out, set(old) | set(new), kind.link_error or kind.error)
    # Move the old record aside first: from here until the new record lands, the folder has none, so a crash never
    # leaves the old record describing a mix of old and new files. It records the digests of both, so the next
    # --overwrite removes only those.
    if not (out / marker).is_file():
        try:
            new_record = json.loads((tmp / record).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            new_record = {}
        digests = recorded_digests(old_record)
        for name, sums in recorded_digests(new_record if isinstance(new_record, dict) else {}).items():
            digests.setdefault(name, set()).update(sums)
        names = sorted((old | set(new)) - {record, marker})
        aside = {**old_record, "files": names, FILE_DIGESTS: {n: sorted(digests[n]) for n in names if n in digests}}
        atomic_write_text(out / marker, json.dumps(aside, indent=2) + "\n")
    (out / record).unlink(missing_ok=True)
    fsync_dir(out)
    for name in sorted(old - set(new) - {record, marker}):  # the old files the new output does not have
        p = out / name
        if p.is_file() and not p.is_symlink():
            p.unlink()
    for name in new:  # a file of the user's (or a link) where the new output writes one: kept beside it
        target = out / name
        if name not in old and (target.exists() or target.is_symlink()):
            n, aside_name = 1, out / f"{name}.kept"
            while aside_name.exists() or aside_name.is_symlink():
                n += 1
                aside_name = out / f"{name}.kept{n}"
            os.replace(target, aside_name)
            log.warning("%s: %s is not the file the toolkit wrote there; kept as %s", out, name, aside_name.name)
    for name in [n for n in new if n != record] + [record]:  # the record last: complete only at the end
        target = out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp / name, target)
    (out / marker).unlink(missing_ok=True)
    _remove_empty_dirs(out, old - set(new), top=False)
    shutil.rmtree(tmp, ignore_errors=True)


# -- one writer at a time ----------------------------------------------------------------------------------------
def lock_beside(out: Path, command: str) -> Path:
    """The lock file of a committed output's writer: beside it (``.OUT.COMMAND.lock``), since the output folder
    itself appears only at the end."""
    return out.parent / f".{out.name}.{command}.lock"


@contextlib.contextmanager
def exclusive(lock: Path, out: Path, command: str, error: Callable[..., Exception], *, note: str = "",
              remove: bool = False, said: str | None = None) -> Iterator[None]:
    """Hold ``lock`` while ``COMMAND`` writes ``out``; a second run is refused at once (``error``: another
    COMMAND run NOTE is writing OUT; ``said``: how the message names the run instead of ``COMMAND run``).
    ``remove``: delete the lock file afterwards (one beside the output, :func:`lock_beside`)."""
    busy = partial(error, f"another {said or f'{command} run'}{note} is writing {out}",
                   hint="wait for it to finish, or choose another --out")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with held_or_refused(lock, busy):
        try:
            yield
        finally:
            if remove:
                with contextlib.suppress(OSError):
                    lock.unlink()
