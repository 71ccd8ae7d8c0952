"""What an index's manifest records of each file it wrote, and how a reader checks those records.

**The records.** Every file of an index but ``manifest.json`` is in the manifest's ``files``:
``{"bytes": size, "sha256": digest}``, and for a file larger than :data:`WHOLE` also ``"sample"``: the SHA-256 of
:data:`SAMPLES` chunks of :data:`CHUNK` bytes spread evenly over it (the first and the last included). The
digests are made as the files are written where the writer lets the bytes through (:class:`HashingWriter`: the
passage store, the hashes, the questions, the stored rankings, a dense index's vectors and FAISS file); files
another library writes to a path (the BM25 postings, written by numpy) are read once after, as the content
fingerprint always read them. The manifest also holds its own digest (``manifest_sha256``, of its other keys as
canonical JSON: :func:`seal`), and ``content``: what its fingerprint is made of (the passages' digest, the kind's
settings keys and files), so the fingerprint is recomputed from the records at every open and a forged one is
refused.

**The checks** (:func:`check_files`), at three levels:

* ``sizes``: every recorded file there, of its size (``curriculum validate --quick``; all that an open checked
  before these records);
* ``open`` (every reader: ``load_index``, ``serve``, builds, agents): ``sizes``, then every file up to
  :data:`WHOLE` bytes and every file compiled code reads without bounds checks (a kind's ``native`` files: the BM25
  postings and vocabulary) hashed whole, the others' samples read and hashed;
* ``full`` (``curriculum validate``, ``serve --verify``): every file hashed whole.

A file that fails is one line naming it (:class:`Damaged`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rag_plumbing import file_sha256

from ._lease import can_lease
from .errors import IndexError_

#: Files up to this size are hashed whole at every open; larger ones are sampled (unless native).
WHOLE = 64 << 20
#: A large file's sampled check: this many chunks of this many bytes, spread evenly, first and last included.
SAMPLES, CHUNK = 64, 64 << 10
#: The manifest's key holding its own digest.
SEAL = "manifest_sha256"
LEVELS = ("sizes", "open", "full")
_HEX = re.compile(r"[0-9a-f]{64}")




#: What to do about a damaged index.
REBUILD = "build the index again with curriculum index ... --overwrite"


class Damaged(Exception):
    """A recorded file that is missing or differs from its record: ``name`` (relative to the index) and what is
    wrong."""

    def __init__(self, name: str, what: str) -> None:
        super().__init__(f"{name}: {what}")
        self.name, self.what = name, what


class HashingWriter:
    """A binary file opened for writing whose bytes are hashed (SHA-256) as they go through :meth:`write`; numpy's
    ``np.save``, pyarrow's ``PythonFile`` and FAISS's ``PyCallbackIOWriter`` write through it."""

    def __init__(self, path: str | Path) -> None:
        self.f = open(path, "wb")  # noqa: SIM115  (closed by close())
        self._sha = hashlib.sha256()
        self.size = 0

    def write(self, data: Any) -> int:
        self._sha.update(data)
        n = self.f.write(data)
        self.size += n
        return n

    def flush(self) -> None:
        self.f.flush()

    def tell(self) -> int:
        return self.size

    @property
    def closed(self) -> bool:
        return self.f.closed

    def close(self) -> None:
        self.f.close()

    def __enter__(self) -> HashingWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def hexdigest(self) -> str:
        return self._sha.hexdigest()


def save_npy(path: Path, array: Any) -> str:
    """``np.save(path, array)`` hashed as it is written; its SHA-256."""
    import numpy as np

    with HashingWriter(path) as f:
        np.save(f, array, allow_pickle=False)
    return f.hexdigest()


#: Whether this process reads index files whole into memory rather than mapping them (:func:`read_into_memory`).
_INTO_MEMORY = False


def read_into_memory(on: bool = True) -> None:
    """From now on, this process reads the index files it opens whole into memory instead of mapping them (the
    arrays, the passage store, a dense index's vectors and FAISS file): a file rewritten in place under it (``cp``
    over a served index) can then no longer crash it in the middle of a query (a mapped page of a file cut short is
    a bus error), at the cost of the index's size in memory. ``curriculum serve`` and ``rag-retriever serve`` decide
    with :func:`choose_into_memory`."""
    global _INTO_MEMORY
    _INTO_MEMORY = bool(on)


@contextmanager
def reading_into_memory(on: bool) -> Iterator[None]:
    """:func:`read_into_memory` within the block (a server's command), as it was after it."""
    was = _INTO_MEMORY
    read_into_memory(on)
    try:
        yield
    finally:
        read_into_memory(was)


def into_memory() -> bool:
    """Whether this process reads index files into memory (:func:`read_into_memory`)."""
    return _INTO_MEMORY


def physical_memory() -> int | None:
    """This machine's memory in bytes, or None where the system does not say."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def choose_into_memory(directory: str | Path, wanted: bool | None, *, leases: bool = True) -> tuple[bool, int]:
    """Whether a server reads the index in ``directory`` into memory, and the bytes its files take: ``wanted``
    (``--in-memory`` / ``--no-in-memory``), or, not given, mapped where the server holds its files with a read
    lease (``leases``: a server whose event loop takes them, not Ray Serve's replicas; and the files leasable here:
    :func:`~rag_retriever._lease.can_lease`), else into memory when the files take at most a quarter of this
    machine's memory (at most 1 GiB where the system does not say how much there is). Mapped, a server starts
    without reading the index (5.2M passages, 3.2 GB: 3.4 to 4.9 s to healthy, against 7.6 to 10.6 s read whole).

    >>> choose_into_memory("/nowhere", True)
    (True, 0)
    """
    d = Path(directory)
    size = sum(f.stat().st_size for f in d.rglob("*") if f.is_file()) if d.is_dir() else 0
    if wanted is not None:
        return bool(wanted), size
    if leases and can_lease(d):
        return False, size
    return small_enough(size), size


def small_enough(size: int) -> bool:
    """Whether an index of ``size`` bytes is read whole when its files cannot be leased: at most a quarter of this
    machine's memory (1 GiB where the system does not say how much there is)."""
    memory = physical_memory()
    return size <= (memory // 4 if memory else 1 << 30)


def memory_line(in_memory: bool, size: int, *, leased: bool = False) -> str:
    """The line a server prints about how it reads its index (:func:`choose_into_memory`); ``leased``: its mapped
    files held with a read lease.

    >>> memory_line(True, 3 * 2**20)
    'index read into memory (3 MB): files copied over it while it is served cannot crash the server'
    """
    amount = f"{size / 2**20:,.0f} MB" if size < 2**30 else f"{size / 2**30:,.1f} GB"
    if in_memory:
        return f"index read into memory ({amount}): files copied over it while it is served cannot crash the server"
    if leased:
        return (f"index mapped ({amount}), its files leased: a copy over them waits for the searches in flight, then "
                "every answer is a 503; replace it with mv or `index --overwrite` (--in-memory reads it whole)")
    return (f"index mapped, not read into memory ({amount}): replace it with mv or `index --overwrite`, never by "
            "copying files over it while it is served (--in-memory reads it whole)")


def load_npy(path: Path, mmap_mode: str | None = "r") -> Any:
    """``np.load(path, mmap_mode)`` (read whole where this process reads index files into memory:
    :func:`read_into_memory`); a file numpy cannot read as an array (a damaged header: numpy's ValueError,
    tokenize's TokenError, ...) is an :class:`IndexError_` naming it."""
    import numpy as np

    try:
        return np.load(path, mmap_mode=None if _INTO_MEMORY else mmap_mode, allow_pickle=False)
    except Exception as e:  # noqa: BLE001  (whatever numpy's header parser raises: one line naming the file)
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise IndexError_(f"{path}: numpy cannot read it as an array ({text[:160]}): the file is damaged",
                          hint=f"curriculum validate {Path(path).parent} checks every file; {REBUILD}") from None


def _spans(size: int) -> list[tuple[int, int]]:
    if size <= SAMPLES * CHUNK:
        return [(0, size)]
    step = (size - CHUNK) / (SAMPLES - 1)
    return [(int(i * step), CHUNK) for i in range(SAMPLES)]


def sample_sha256(path: str | Path, size: int | None = None) -> str:
    """The SHA-256 of a file's sampled chunks (:data:`SAMPLES` of :data:`CHUNK` bytes, spread evenly; the whole file
    when it is smaller than that)."""
    h = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size if size is None else size
        for at, n in _spans(size):
            h.update(os.pread(fd, n, at))
    finally:
        os.close(fd)
    return h.hexdigest()


def record(path: Path, sha256: str | None = None) -> dict[str, Any]:
    """A file's record: its size, its SHA-256 (``sha256`` when the writer made it, else read now) and, above
    :data:`WHOLE` bytes, its sampled digest."""
    size = path.stat().st_size
    out: dict[str, Any] = {"bytes": size, "sha256": sha256 or file_sha256(path)}
    if size > WHOLE:
        out["sample"] = sample_sha256(path, size)
    return out


def canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def seal(manifest: dict[str, Any]) -> dict[str, Any]:
    """The manifest with its own digest (``manifest_sha256``: of every other key, canonical JSON) as its last key."""
    body = {k: v for k, v in manifest.items() if k != SEAL}
    return {**body, SEAL: hashlib.sha256(canonical(body)).hexdigest()}


def sealed(manifest: dict[str, Any]) -> bool:
    """Whether the manifest's own digest matches its other keys."""
    body = {k: v for k, v in manifest.items() if k != SEAL}
    return manifest.get(SEAL) == hashlib.sha256(canonical(body)).hexdigest()


def records(manifest: dict[str, Any], required: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """The manifest's ``files``, each a record of a size and a SHA-256, holding every name of ``required``; else
    :class:`Damaged` naming what is wrong."""
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise Damaged("manifest.json", "its 'files' list is empty or missing, so nothing it holds can be checked")
    for name, rec in files.items():
        if (not isinstance(rec, dict) or not isinstance(rec.get("bytes"), int) or rec["bytes"] < 0
                or not _HEX.fullmatch(str(rec.get("sha256", "")))
                or ("sample" in rec and not _HEX.fullmatch(str(rec["sample"])))):
            raise Damaged("manifest.json", f"the record of {name} in 'files' is not a size and a SHA-256")
        if not name or Path(name).is_absolute() or ".." in Path(name).parts or name == "manifest.json":
            raise Damaged("manifest.json", f"'files' names {name!r}, which is not a file of the index")
    missing = [n for n in required if n not in files]
    if missing:
        raise Damaged("manifest.json", f"'files' leaves out {missing[0]}, a file every such index holds")
    return files


def coverage(files: dict[str, dict[str, Any]], level: str, native: tuple[str, ...] = ()) -> dict[str, float]:
    """What :func:`check_files` reads of each recorded file at ``level``: 1.0 for a file hashed whole, the fraction
    of its bytes its sampled chunks cover for a sampled one, 0.0 at ``sizes``."""
    out = {}
    for name, rec in files.items():
        size = rec["bytes"]
        if level == "sizes":
            out[name] = 0.0
        elif level == "full" or size <= WHOLE or _whole(name, native) or "sample" not in rec:
            out[name] = 1.0
        else:
            out[name] = min(1.0, sum(n for _, n in _spans(size)) / size) if size else 1.0
    return out


def coverage_line(cover: dict[str, float], files: dict[str, dict[str, Any]]) -> str:
    """One line on :func:`coverage`: the files hashed whole (their count and bytes), each sampled file with the
    fraction of it read."""
    whole = [n for n, f in cover.items() if f >= 1.0]
    part = [n for n, f in cover.items() if f < 1.0]
    size = sum(files[n]["bytes"] for n in whole)
    if not whole:
        head = f"{len(part)} files' sizes only, none of their contents"
        return head
    head = f"{len(whole)} of {len(cover)} files hashed whole ({size / 1e6:,.1f} MB)"
    if not part:
        return head
    return head + "; sampled: " + ", ".join(
        f"{n} {100 * cover[n]:.2g}% of {files[n]['bytes'] / 1e6:,.1f} MB" for n in part)


def _whole(name: str, native: tuple[str, ...]) -> bool:
    return any(name == p or (p.endswith("/") and name.startswith(p)) for p in native)


def check_files(directory: Path, files: dict[str, dict[str, Any]], level: str = "open",
                native: tuple[str, ...] = (), threads: int = 0) -> dict[str, str]:
    """Check the recorded ``files`` of the index in ``directory`` at ``level`` (this module's docstring); return
    the SHA-256 of each file hashed whole (all of them at ``full``). :class:`Damaged` names the first file that
    fails (in the records' order)."""
    assert level in LEVELS, level
    for name, rec in files.items():
        p = directory / name
        if not p.is_file():
            raise Damaged(name, "missing (the manifest lists it)")
        size = p.stat().st_size
        if size != rec["bytes"]:
            raise Damaged(name, f"{size:,} bytes, manifest.json records {rec['bytes']:,} (truncated, grown or replaced)")
    if level == "sizes":
        return {}
    jobs = []
    for name, rec in files.items():
        if level == "full" or rec["bytes"] <= WHOLE or _whole(name, native) or "sample" not in rec:
            jobs.append((name, "sha256"))
        else:
            jobs.append((name, "sample"))

    def digest(job: tuple[str, str]) -> str:
        name, how = job
        p = directory / name
        return file_sha256(p) if how == "sha256" else sample_sha256(p, files[name]["bytes"])

    workers = threads or min(4, os.cpu_count() or 1)
    big = sum(files[n]["bytes"] for n, how in jobs if how == "sha256") > WHOLE
    if workers > 1 and big and len(jobs) > 1:  # hashlib lets go of the GIL: files hashed side by side
        with ThreadPoolExecutor(workers, thread_name_prefix="index-check") as pool:
            got = list(pool.map(digest, jobs))
    else:
        got = [digest(j) for j in jobs]
    whole = {}
    for (name, how), value in zip(jobs, got, strict=True):
        if value != files[name][how]:
            what = "its SHA-256" if how == "sha256" else "the SHA-256 of its sampled chunks"
            raise Damaged(name, f"{what} is not the one manifest.json records: the file changed or is damaged")
        if how == "sha256":
            whole[name] = value
    return whole


__all__ = ["CHUNK", "LEVELS", "REBUILD", "SAMPLES", "SEAL", "WHOLE", "Damaged", "IndexError_", "HashingWriter", "canonical", "check_files", "coverage", "coverage_line",
           "load_npy", "record", "records", "sample_sha256", "save_npy", "seal", "sealed"]
