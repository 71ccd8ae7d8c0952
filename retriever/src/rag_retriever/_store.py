"""An index's passage store, whatever its retriever kind: what the passages are (``passages.bin``), their
normalised texts (``norms.bin``), their content hashes (``passage_keys.npy``), the dataset's questions
(``questions.arrow``) and, once ranked, their stored rankings (``ranked_ids.npy``, ``ranked_scores.npy``). Written a
block at a time (:class:`StoreWriter`), read memory-mapped (:class:`PassageStore`, which
:class:`~rag_retriever.CorpusIndex` extends with its retriever).

**The passages** (``passages.bin``, a :class:`BlockFile`): each passage is five fields, ``title`` and ``text`` (what
ranking and the gold test read), ``origin`` (``dataset`` | ``corpus``), ``doc_id`` (a corpus line's own ``id``;
null: the passage's number) and ``prefix`` (the line's ``contents`` before its text; null: ``title + "\\n"``), so
:meth:`PassageStore.documents` gives back a corpus line's ``id`` and ``contents`` byte for byte. A passage is
stored in blocks of :data:`DOC_ROWS` passages: each field's length (uint32, 0xFFFFFFFF: null), passage after
passage, then the fields' UTF-8 bytes in the same order, compressed with raw DEFLATE (zlib, level :data:`LEVEL`)
against a 32 KB preset dictionary sampled from the corpus's first passages (kept in the file). A served passage
costs the decompression of its block up to its own end (a few KB), and the store is smaller than its text (the
figures: docs/benchmarks.md).

**The normalised texts** (``norms.bin``, another :class:`BlockFile`): per passage ``title + " " + text``
SQuAD-normalised and padded with a space at each end (:func:`normalize_passage`), what a build's "contains an
answer" test searches; blocks of :data:`NORM_ROWS` passages (their uint32 lengths, then their bytes), each
compressed with zstd (level :data:`NORM_LEVEL`, pyarrow's) after its decompressed size (uint64). Only builds read
them, all at once, the first time they ask (:meth:`PassageStore.norm_spans`); a server never does.

**A block file**: the compressed blocks one after another, then the dictionary, then the blocks' offsets (uint64,
one more than the blocks), then a 56-byte footer (magic, codec, rows per block, rows, blocks, the dictionary's
place and size, the offsets' place). Its bytes depend on the passages alone (the blocks' size is fixed, whatever
``--block`` paced the build), so the same corpus makes the same file with the same zlib and zstd; it is written in
bounded memory (the dictionary's sample, the first :data:`SAMPLE_ROWS` passages, is the most it holds).

:attr:`StoreWriter.digest` is the SHA-256 of the passages' fields in order (each passage as its five uint32
lengths and its fields' bytes: a digest of the content, not of the blocks), the passages' part of the index's
content fingerprint.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Sequence
from itertools import accumulate
from pathlib import Path
from typing import Any

from rag_plumbing._protocol import normalize_passage, passage_hash  # noqa: F401 (rag_retriever's names for them)

from ._integrity import REBUILD, HashingWriter, IndexError_, into_memory, load_npy, save_npy

PASSAGES = "passages.bin"
NORMS = "norms.bin"
QUESTIONS = "questions.arrow"
RANKED_IDS = "ranked_ids.npy"
RANKED_SCORES = "ranked_scores.npy"
KEYS = "passage_keys.npy"
ARROW_ROWS = 1 << 16  # rows per record batch of questions.arrow
PASSAGE_FIELDS = ("title", "text", "origin", "doc_id", "prefix")
DOC_ROWS = 8  # passages per block of passages.bin: a served passage decompresses this many
NORM_ROWS = 4096  # passages per block of norms.bin: only ever read whole, so large blocks (zstd sees more context)
LEVEL = 4  # zlib's level: 6 makes files 4 to 5% smaller and writes 2 to 3 times slower
NORM_LEVEL = 6  # zstd's level for norms.bin: 9 makes it 10% smaller and writes 1.6 times slower
SAMPLE_ROWS = 1 << 16  # the passages the dictionary is sampled from (the first ones): held until it is made
DICT_BYTES = 32 * 1024  # zlib's window: a larger preset dictionary would not be seen
NULL = 0xFFFFFFFF  # a null field's length
MAGIC = b"RAGCBLK1"
_FOOTER = struct.Struct("<8sIIQQQQQ")  # magic, codec, rows per block, rows, blocks, dict offset, dict size, index
DEFLATE, ZSTD = 1, 2  # the codecs (the footer's second field): raw DEFLATE with a preset dictionary; zstd


def _row_bytes(fields: tuple[str | None, ...]) -> bytes:
    """One passage as digested: its fields' uint32 lengths (:data:`NULL` for None), then their bytes."""
    data = [b"" if f is None else f.encode("utf-8", "surrogatepass") for f in fields]
    lens = [NULL if f is None else len(b) for f, b in zip(fields, data, strict=True)]
    return struct.pack(f"<{len(lens)}I", *lens) + b"".join(data)


def _doc_block(rows: list[tuple[str | None, ...]]) -> bytes:
    """A block of passages as stored: every field's uint32 length (:data:`NULL` for None), row after row, then
    every field's bytes in the same order (the lengths first, so a reader decompresses only as far as the passage
    it wants)."""
    fields = [f for row in rows for f in row]
    data = [b"" if f is None else f.encode("utf-8", "surrogatepass") for f in fields]
    lens = [NULL if f is None else len(b) for f, b in zip(fields, data, strict=True)]
    return struct.pack(f"<{len(lens)}I", *lens) + b"".join(data)


def _norm_block(norms: list[bytes]) -> bytes:
    return struct.pack(f"<{len(norms)}I", *map(len, norms)) + b"".join(norms)


class BlockFile:
    """Writes one block file (see the module's docstring): rows (already serialised) go in with :meth:`add`; the
    first :data:`SAMPLE_ROWS` are held until the dictionary is sampled from them, then every full block of
    ``rows_per_block`` rows is compressed and written; :meth:`close` writes the last block, the dictionary, the
    offsets and the footer. ``join`` makes a block's bytes from its rows."""

    def __init__(self, path: Path, rows_per_block: int, join: Any = b"".join, codec: int = DEFLATE) -> None:
        self.f = HashingWriter(path)  # its SHA-256 made as it is written (:attr:`sha256`)
        self.per = rows_per_block
        self.join = join
        self.codec = codec
        self.rows = 0
        self._held: list[Any] = []
        self._dict: bytes | None = None if codec == DEFLATE else b""  # zstd: no dictionary (large blocks)
        self._offsets = [0]

    def add(self, rows: list[Any]) -> None:
        self._held.extend(rows)
        self.rows += len(rows)
        if self._dict is None and len(self._held) >= SAMPLE_ROWS:
            self._make_dict()
        if self._dict is not None:
            self._flush(final=False)

    def _make_dict(self) -> None:
        """The preset dictionary: whole rows sampled evenly from the held ones, up to :data:`DICT_BYTES` (the last
        bytes of a zlib dictionary are the cheapest to refer to, so the sample is taken in order)."""
        held = self._held[:SAMPLE_ROWS]
        raw = [self.join([r]) for r in held]
        avg = max(1, sum(map(len, raw)) // max(1, len(raw)))
        step = max(1, len(raw) * avg // DICT_BYTES)
        self._dict = b"".join(raw[::step])[-DICT_BYTES:]
        # primed once with the dictionary, copied for each block (the same bytes as a fresh compressor each time,
        # without hashing the dictionary again for every block)
        self._primed = zlib.compressobj(LEVEL, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY, zdict=self._dict)

    def _flush(self, final: bool) -> None:
        per, held = self.per, self._held
        full = len(held) if final else len(held) - len(held) % per
        for a in range(0, full, per):
            if self.codec == DEFLATE:
                c = self._primed.copy()
                data = c.compress(self.join(held[a:a + per])) + c.flush()
            else:
                import pyarrow as pa

                raw = self.join(held[a:a + per])  # (its size first: pyarrow's zstd wants it to decompress)
                data = struct.pack("<Q", len(raw)) + pa.Codec("zstd", NORM_LEVEL).compress(raw, asbytes=True)
            self.f.write(data)
            self._offsets.append(self._offsets[-1] + len(data))
        del held[:full]

    def close(self) -> None:
        if self._dict is None:
            self._make_dict()
        self._flush(final=True)
        at = self._offsets[-1]
        assert self._dict is not None
        self.f.write(self._dict)
        self.f.write(struct.pack(f"<{len(self._offsets)}Q", *self._offsets))
        self.f.write(_FOOTER.pack(MAGIC, self.codec, self.per, self.rows, len(self._offsets) - 1, at, len(self._dict),
                                  at + len(self._dict)))
        self.f.close()
        self.sha256 = self.f.hexdigest()

    def abort(self) -> None:
        self.f.close()


#: What a :class:`StoreWriter` can write: the passages (``passages.bin``, the digest, ``questions.arrow``), their
#: normalised texts (``norms.bin``) and their hashes (``passage_keys.npy``). A build hashes in its main process,
#: which has the passages in hand (about 9 µs a passage), and writes the rest in a forked worker that reads the
#: sources again.
PARTS = ("passages", "norms", "keys")


class StoreWriter:
    """``passages.bin``, ``norms.bin`` and ``passage_keys.npy``, a block of passages at a time, then
    ``questions.arrow``; :attr:`digest`, the SHA-256 of the passages' fields; :attr:`sha256`, each file's SHA-256,
    made as it was written. ``parts`` (of :data:`PARTS`) says which files this writer makes: the same bytes whether
    one writer makes them all or several share them."""

    def __init__(self, tmp: Path, parts: tuple[str, ...] = PARTS) -> None:
        assert parts and set(parts) <= set(PARTS), parts
        self.tmp, self.parts = tmp, parts
        self._docs = BlockFile(tmp / PASSAGES, DOC_ROWS, join=_doc_block) if "passages" in parts else None
        self._norms = BlockFile(tmp / NORMS, NORM_ROWS, join=_norm_block, codec=ZSTD) if "norms" in parts else None
        self._keys: list[Any] | None = [] if "keys" in parts else None
        self._sha = hashlib.sha256()
        self.rows = 0
        self.sha256: dict[str, str] = {}

    def add(self, block: Any) -> None:
        import numpy as np

        if self._docs is not None:
            rows = list(zip(block.titles, block.texts, block.origins, block.ids, block.prefixes, strict=True))
            self._sha.update(b"".join(map(_row_bytes, rows)))
            self._docs.add(rows)
        if self._norms is not None:
            self._norms.add([normalize_passage(t, x).encode("utf-8", "surrogatepass")
                             for t, x in zip(block.titles, block.texts, strict=True)])
        if self._keys is not None:
            self._keys.append(np.fromiter((passage_hash(t, x) for t, x in zip(block.titles, block.texts, strict=True)),
                                          dtype=np.int64, count=len(block)))
        self.rows += len(block)

    @property
    def digest(self) -> str:
        return self._sha.hexdigest()

    def finish(self, q_ids: Sequence[str] = (), q_texts: Sequence[str] = (),
               q_gold: Sequence[list[int]] = ()) -> None:
        """Close the files; with the passages, ``questions.arrow`` from the dataset's questions (a writer of
        other parts has none to write)."""
        import numpy as np
        import pyarrow as pa

        if self._norms is not None:
            self._norms.close()
            self.sha256[NORMS] = self._norms.sha256
        if self._keys is not None:
            self.sha256[KEYS] = save_npy(self.tmp / KEYS, np.concatenate(self._keys) if self._keys else
                                         np.zeros(0, np.int64))
        if self._docs is None:
            return
        self._docs.close()
        self.sha256[PASSAGES] = self._docs.sha256
        table = pa.table({"id": pa.array(q_ids, pa.string()), "question": pa.array(q_texts, pa.string()),
                          "gold": pa.array(q_gold, pa.list_(pa.int32()))})
        with HashingWriter(self.tmp / QUESTIONS) as f:
            with pa.PythonFile(f, mode="w") as sink, pa.ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table, max_chunksize=ARROW_ROWS)
        self.sha256[QUESTIONS] = f.hexdigest()

    def abort(self) -> None:
        for f in (self._docs, self._norms):
            try:
                if f is not None:
                    f.abort()
            except Exception:  # noqa: BLE001  (already failing)
                pass


class BlockReader:
    """One block file, memory-mapped: :meth:`block` decompresses block ``b`` (bytes)."""

    def __init__(self, path: Path) -> None:
        import mmap

        import numpy as np

        with open(path, "rb") as f:
            size = f.seek(0, 2)
            if into_memory():  # read whole: a file rewritten under this process cannot fault a query
                f.seek(0)
                self._mm: Any = f.read() if size else None
                size = len(self._mm or b"")
            else:
                self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        buf = self._mm if self._mm is not None else b""
        if size < _FOOTER.size:
            raise ValueError(f"{path.name}: {size} bytes, too short for a block file")
        magic, self.codec, self.per, self.rows, self.blocks, d_at, d_len, i_at = _FOOTER.unpack_from(
            buf, size - _FOOTER.size)
        if magic != MAGIC or self.codec not in (DEFLATE, ZSTD) or i_at + 8 * (self.blocks + 1) + _FOOTER.size != size:
            raise ValueError(f"{path.name}: not a block file of this version")
        self.zdict = bytes(buf[d_at:d_at + d_len])
        self.offsets = np.frombuffer(buf, dtype="<u8", count=self.blocks + 1, offset=i_at).astype(np.int64)
        self._view = memoryview(buf)
        self.path = path

    def damaged(self, b: int, what: object) -> IndexError_:
        """Block ``b`` cannot be read: one line naming the file and the block (a file larger than an open hashes
        whole is sampled, so damage between the samples is found here, or by ``curriculum validate``)."""
        return IndexError_(f"{self.path}: block {b} of {self.blocks:,} cannot be read ({what}): the file is damaged",
                           hint=f"curriculum validate {self.path.parent} checks every file; {REBUILD}")

    def block(self, b: int) -> bytes:
        """Block ``b`` decompressed."""
        data = self._view[self.offsets[b]:self.offsets[b + 1]]
        try:
            if self.codec == ZSTD:  # its decompressed size, then a zstd frame
                import pyarrow as pa

                (size,) = struct.unpack_from("<Q", data)
                return pa.Codec("zstd").decompress(data[8:], decompressed_size=size, asbytes=True)
            return zlib.decompressobj(-15, zdict=self.zdict).decompress(data)
        except (zlib.error, struct.error, OSError, ValueError, MemoryError) as e:  # (pyarrow: OSError)
            raise self.damaged(b, e) from None

    def rows_of(self, b: int, wanted: list[int]) -> dict[int, tuple[str | None, ...]]:
        """Passages ``wanted`` (indices within block ``b`` of passages.bin) as tuples of their five fields,
        decompressing the block only as far as the last of them ends."""
        k = len(PASSAGE_FIELDS)
        n = min(self.per, self.rows - b * self.per)
        head = 4 * k * n
        last = k * (max(wanted) + 1)  # the fields up to the last passage wanted
        try:
            d = zlib.decompressobj(-15, zdict=self.zdict)
            raw = d.decompress(self._view[self.offsets[b]:self.offsets[b + 1]], head)
            lens = struct.unpack_from(f"<{last}I", raw)
            starts = list(accumulate([0 if ln == NULL else ln for ln in lens], initial=head))
            end = starts[last]
            while len(raw) < end:  # on from where the lengths stopped, to the end of the last passage wanted
                more = d.decompress(d.unconsumed_tail, end - len(raw))
                if not more:
                    raise self.damaged(b, f"its passages' fields end {end - len(raw):,} bytes short")
                raw += more
            return {r: tuple(None if lens[i] == NULL else raw[starts[i]:starts[i + 1]].decode("utf-8", "surrogatepass")
                             for i in range(k * r, k * r + k)) for r in wanted}
        except (zlib.error, struct.error, UnicodeDecodeError, ValueError, MemoryError) as e:
            raise self.damaged(b, e) from None


def passages_sha256(path: Path) -> str:
    """:attr:`StoreWriter.digest` recomputed from a ``passages.bin``: every block decompressed, each passage's five
    lengths and its fields' bytes hashed in order (what ``curriculum validate`` compares with the manifest's
    ``content.passages``, the passages' part of the fingerprint). A block that does not decompress or parse is a
    ``ValueError`` naming it."""
    f = BlockReader(path)
    k = len(PASSAGE_FIELDS)
    h = hashlib.sha256()
    for b in range(f.blocks):
        n = min(f.per, f.rows - b * f.per)
        try:
            raw = memoryview(f.block(b))
            lens = struct.unpack_from(f"<{k * n}I", raw)
        except (zlib.error, struct.error) as e:
            raise ValueError(f"{path.name}: block {b} cannot be read ({e})") from None
        at = 4 * k * n
        for r in range(n):
            size = sum(0 if ln == NULL else ln for ln in lens[k * r:k * r + k])
            h.update(raw[4 * k * r:4 * k * (r + 1)])
            h.update(raw[at:at + size])
            at += size
        if at != len(raw):
            raise ValueError(f"{path.name}: block {b} holds {len(raw) - at:+,} bytes more than its passages' fields")
    return h.hexdigest()


class PassageStore:
    """The passages, hashes, questions and stored rankings of an index directory, memory-mapped: the part of an
    index every retriever kind shares."""

    def _open_store(self, d: Path, m: dict[str, Any]) -> list[str]:
        """Map the files; the counts that differ from the manifest ``m``, as problems."""
        import pyarrow as pa

        try:
            self._docs = BlockReader(d / PASSAGES)
            self._norm_file = BlockReader(d / NORMS)
        except ValueError as e:
            return [str(e)]
        try:
            source = pa.BufferReader((d / QUESTIONS).read_bytes()) if into_memory() else pa.memory_map(str(d / QUESTIONS))
            questions = pa.ipc.open_file(source).read_all()
            questions.column("id"), questions.column("question"), questions.column("gold")  # noqa: B018
            questions.validate(full=True)  # offsets within their buffers: never read past the mapped file
        except (pa.ArrowException, OSError, KeyError) as e:
            raise IndexError_(f"{d / QUESTIONS}: pyarrow cannot read it ({str(e).strip()[:160]}): the file is damaged",
                              hint=f"curriculum validate {d} checks every file; {REBUILD}") from None
        self.ranked_ids = load_npy(d / RANKED_IDS)
        self.ranked_scores = load_npy(d / RANKED_SCORES)
        self.keys = load_npy(d / KEYS)
        self._q_ids = questions.column("id").to_pylist()
        self._questions = questions
        self._q_lists: tuple[list[str], list[list[int]]] | None = None
        self._q_row = {q: i for i, q in enumerate(self._q_ids)}
        self._cache: dict[int, tuple[str, str]] = {}
        self._spans: tuple[Any, Any, Any] | None = None
        problems = []
        n = m["passages"]
        if self._docs.rows != n or self._norm_file.rows != n or len(self.keys) != n:
            problems.append(f"{self._docs.rows:,} passages, the manifest says {n:,}")
        if questions.num_rows != m["questions"] or self.ranked_ids.shape != (m["questions"], m["depth"]):
            problems.append("question or ranking counts differ from the manifest")
        elif self.ranked_scores.shape != self.ranked_ids.shape:
            problems.append(f"{RANKED_SCORES} holds {self.ranked_scores.shape} scores for rankings of shape "
                            f"{self.ranked_ids.shape}")
        elif self.ranked_ids.dtype.kind != "i" or self.keys.dtype.kind != "i" or self.keys.ndim != 1:
            problems.append(f"{RANKED_IDS} or {KEYS} is not an array of integers")
        elif self.ranked_ids.size:  # every stored passage id a passage of the index (or -1: none)
            import numpy as np

            ids = np.asarray(self.ranked_ids)
            bad = np.flatnonzero(((ids < -1) | (ids >= n)).reshape(-1))
            if len(bad):
                r, c = divmod(int(bad[0]), ids.shape[1])
                problems.append(f"{RANKED_IDS}: {int(ids[r, c]):,} at row {r:,}, rank {c + 1}, is not a passage of "
                                f"the index's {n:,} (ids 0 to {n - 1:,}, or -1)")
            scores = np.asarray(self.ranked_scores)
            bad = np.flatnonzero(~np.isfinite(scores).reshape(-1)) if scores.dtype.kind == "f" else [0]
            if len(bad):
                r, c = divmod(int(bad[0]), ids.shape[1])
                problems.append(f"{RANKED_SCORES}: {scores[r, c]} at row {r:,}, rank {c + 1}, is not a finite score")
        return problems

    # -- passages
    def rows(self, pids: Any) -> list[tuple[str | None, ...]]:
        """The five stored fields (:data:`PASSAGE_FIELDS`) of each passage, in the order asked; each block
        decompressed once per call, only as far as the passages wanted in it."""
        per, n = self._docs.per, self._docs.rows
        pids = [int(p) for p in pids]
        by_block: dict[int, list[int]] = {}
        for pid in pids:
            if not 0 <= pid < n:
                raise IndexError(f"passage {pid} is not in this index of {n:,} passages")
            by_block.setdefault(pid // per, []).append(pid % per)
        got = {b: self._docs.rows_of(b, rs) for b, rs in by_block.items()}
        return [got[pid // per][pid % per] for pid in pids]

    def passage(self, pid: int) -> tuple[str, str]:
        """(title, text) of passage ``pid``."""
        hit = self._cache.get(pid)
        if hit is None:
            t, x, *_ = self.rows([pid])[0]
            hit = self._cache[pid] = (t, x)
        return hit

    def origin(self, pid: int) -> str:
        """``dataset`` or ``corpus``: where passage ``pid`` came from."""
        return self.rows([pid])[0][2]

    def norm(self, pid: int) -> str:
        """Passage ``pid`` as the "contains an answer" test reads it (:func:`normalize_passage`)."""
        data, starts, ends = self._norm_text()
        return data[int(starts[pid]):int(ends[pid])].decode("utf-8", "surrogatepass")

    def documents(self, pids: Any) -> list[tuple[str, str, str, str]]:
        """(id, contents, title, text) of each passage: a corpus line's own ``id`` and ``contents`` byte for byte;
        a dataset paragraph's number and ``title + "\\n" + text`` (a newline inside the title sent as a space:
        Search-R1 splits at the first one). Read straight from the mapped file, each block decompressed once;
        nothing is cached, so a long-running server's memory does not grow with what it returned."""
        import numpy as np

        pids = np.asarray(pids, dtype=np.int64).tolist()
        return [(str(pid) if did is None else did, (t.replace("\n", " ") + "\n" if pre is None else pre) + x, t, x)
                for pid, (t, x, _, did, pre) in zip(pids, self.rows(pids), strict=True)]

    def _norm_text(self) -> tuple[Any, Any, Any]:
        """Every passage's normalised text, decompressed once into an unlinked temporary file and memory-mapped (page
        cache the kernel can reclaim, not the process's own memory): (buffer, starts, ends)."""
        if self._spans is None:
            import mmap
            import tempfile

            import numpy as np

            f = self._norm_file
            lens = []
            with tempfile.TemporaryFile(prefix="rag-curriculum-norms-") as tmp:
                for b in range(f.blocks):
                    raw = f.block(b)
                    k = min(f.per, f.rows - b * f.per)
                    try:
                        lens.append(np.frombuffer(raw, dtype="<u4", count=k).astype(np.int64))
                    except ValueError as e:
                        raise f.damaged(b, e) from None
                    if int(lens[-1].sum()) != len(raw) - 4 * k:
                        raise f.damaged(b, f"its texts' lengths sum to {int(lens[-1].sum()):,} bytes, it holds "
                                           f"{len(raw) - 4 * k:,}")
                    tmp.write(memoryview(raw)[4 * k:])
                tmp.flush()
                size = tmp.tell()
                data: Any = mmap.mmap(tmp.fileno(), size, access=mmap.ACCESS_READ) if size else b""
            length = np.concatenate(lens) if lens else np.zeros(0, np.int64)
            ends = np.cumsum(length)
            self._spans = (data, ends - length, ends)
        return self._spans

    def norm_spans(self) -> tuple[Any, Any, Any]:
        """``(find, starts, ends)``: ``find(pattern, starts[pid], ends[pid]) >= 0`` when the UTF-8 bytes
        ``pattern`` occur in passage ``pid``'s :meth:`norm` (``mmap.find`` between the bounds, int64 arrays of
        offsets into every passage's normalised text, decompressed once: no string is made). A substring of the
        UTF-8 text is a substring of the text, so this is :meth:`norm`'s ``in`` test."""
        data, starts, ends = self._norm_text()
        return data.find, starts, ends

    def prefetch(self, pids: Any, *, norm: bool = False) -> None:
        """Read many passages (title and text; with ``norm``, every normalised text) at once, into the cache."""
        import numpy as np

        if norm:
            self._norm_text()
            return
        want = np.unique(np.asarray(pids, dtype=np.int64))
        want = want[want >= 0].tolist()
        want = [p for p in want if p not in self._cache]
        for pid, (t, x, *_) in zip(want, self.rows(want), strict=True):
            self._cache[pid] = (t, x)

    def _q(self) -> tuple[list[str], list[list[int]]]:
        """The indexed questions' texts and gold passage ids, read once."""
        if self._q_lists is None:
            self._q_lists = (self._questions.column("question").to_pylist(),
                             self._questions.column("gold").to_pylist())
        return self._q_lists
