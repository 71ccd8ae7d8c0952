"""An index's passage store, whatever its retriever kind: what the passages are (``passages.arrow``), their content
hashes (``passage_keys.npy``), the dataset's questions (``questions.arrow``) and, once ranked, their stored
rankings (``ranked_ids.npy``, ``ranked_scores.npy``). Written a block at a time (:class:`StoreWriter`), read
memory-mapped (:class:`PassageStore`, which :class:`~rag_curriculum.retrieval.CorpusIndex` extends with its
retriever).

``passages.arrow`` columns: ``title`` and ``text`` (what ranking and the gold test read), ``origin``
(``dataset`` | ``corpus``), ``norm`` (``title + " " + text`` SQuAD-normalised and padded with a space at each end,
what a build's "contains an answer" test searches: :func:`normalize_passage`), ``doc_id`` (a corpus line's own
``id``; null: the passage's number) and ``prefix`` (the line's ``contents`` before its text; null:
``title + "\\n"``), so :meth:`PassageStore.document` gives back a corpus line's ``id`` and ``contents`` byte for
byte.
"""

from __future__ import annotations

import hashlib
import mmap
from pathlib import Path
from typing import Any

from .._metrics import normalize_answer

PASSAGES = "passages.arrow"
QUESTIONS = "questions.arrow"
RANKED_IDS = "ranked_ids.npy"
RANKED_SCORES = "ranked_scores.npy"
KEYS = "passage_keys.npy"
ARROW_ROWS = 1 << 16  # rows per record batch of the Arrow files
PASSAGE_COLUMNS = ("title", "text", "origin", "norm", "doc_id", "prefix")


def passage_hash(title: str, text: str) -> int:
    """A stable 64-bit hash (BLAKE2b) of a passage's title and text with whitespace runs collapsed and case folded:
    two passages with equal hashes are copies of each other."""
    key = " ".join(title.split()).casefold() + "\x00" + " ".join(text.split()).casefold()
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "little", signed=True)


def normalize_passage(title: str, text: str) -> str:
    """``" " + normalize_answer(title + " " + text) + " "``: a passage as the "contains an answer" test reads it (an
    answer ``a``, normalised, is in the passage when ``f" {a} "`` is a substring of this)."""
    return f" {normalize_answer(f'{title} {text}')} "


def _schema():
    import pyarrow as pa

    return pa.schema([(name, pa.string()) for name in PASSAGE_COLUMNS])


class StoreWriter:
    """``passages.arrow`` and ``passage_keys.npy``, a block of passages at a time (record batches of
    :data:`ARROW_ROWS` rows, the last shorter), then ``questions.arrow``."""

    def __init__(self, tmp: Path) -> None:
        import pyarrow as pa

        self.tmp = tmp
        self._sink = pa.OSFile(str(tmp / PASSAGES), "wb")
        self._writer = pa.ipc.new_file(self._sink, _schema())
        self._keys: list[Any] = []
        self._pending: list[list[Any]] = [[] for _ in PASSAGE_COLUMNS]  # rows not yet in a record batch
        self.rows = 0

    def add(self, block: Any) -> None:
        import numpy as np

        norm = [normalize_passage(t, x) for t, x in zip(block.titles, block.texts, strict=True)]
        for col, values in zip(self._pending, (block.titles, block.texts, block.origins, norm, block.ids,
                                               block.prefixes), strict=True):
            col.extend(values)
        while len(self._pending[0]) >= ARROW_ROWS:
            self._flush(ARROW_ROWS)
        self._keys.append(np.fromiter((passage_hash(t, x) for t, x in zip(block.titles, block.texts, strict=True)),
                                      dtype=np.int64, count=len(block)))
        self.rows += len(block)

    def _flush(self, n: int) -> None:
        """The first ``n`` pending rows as one record batch: batches of ARROW_ROWS whatever the blocks, so the
        file's bytes do not depend on how the build was paced (``--block``)."""
        import pyarrow as pa

        cols = [pa.array(c[:n], pa.string()) for c in self._pending]
        self._writer.write_batch(pa.record_batch(cols, schema=_schema()))
        for c in self._pending:
            del c[:n]

    def finish(self, q_ids: list[str], q_texts: list[str], q_gold: list[list[int]]) -> None:
        import numpy as np
        import pyarrow as pa

        if self._pending[0]:
            self._flush(len(self._pending[0]))
        self._writer.close()
        self._sink.close()
        np.save(self.tmp / KEYS, np.concatenate(self._keys) if self._keys else np.zeros(0, np.int64))
        table = pa.table({"id": pa.array(q_ids, pa.string()), "question": pa.array(q_texts, pa.string()),
                          "gold": pa.array(q_gold, pa.list_(pa.int32()))})
        with pa.OSFile(str(self.tmp / QUESTIONS), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=ARROW_ROWS)

    def abort(self) -> None:
        for closing in (self._writer.close, self._sink.close):
            try:
                closing()
            except Exception:  # noqa: BLE001  (already failing)
                pass


class PassageStore:
    """The passages, hashes, questions and stored rankings of an index directory, memory-mapped: the part of an
    index every retriever kind shares."""

    def _open_store(self, d: Path, m: dict[str, Any]) -> list[str]:
        """Map the files; the counts that differ from the manifest ``m``, as problems."""
        import numpy as np
        import pyarrow as pa

        with open(d / PASSAGES, "rb") as f:  # a Python mmap, so the answer test can search it in place
            self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.passages = pa.ipc.open_file(pa.py_buffer(self._mm)).read_all()  # zero-copy over the map
        questions = pa.ipc.open_file(pa.memory_map(str(d / QUESTIONS))).read_all()
        self.ranked_ids = np.load(d / RANKED_IDS, mmap_mode="r")
        self.ranked_scores = np.load(d / RANKED_SCORES, mmap_mode="r")
        self.keys = np.load(d / KEYS, mmap_mode="r")
        self._q_ids = questions.column("id").to_pylist()
        self._questions = questions
        self._q_lists: tuple[list[str], list[list[int]]] | None = None
        self._q_row = {q: i for i, q in enumerate(self._q_ids)}
        self._cols = [self.passages.column(c) for c in ("title", "text", "norm")]
        self._cache: dict[int, tuple[str, str]] = {}
        self._norms: dict[int, str] = {}
        self._spans: tuple[Any, Any, Any] | None = None
        problems = []
        if self.passages.num_rows != m["passages"] or len(self.keys) != m["passages"]:
            problems.append(f"{self.passages.num_rows:,} passages, the manifest says {m['passages']:,}")
        if questions.num_rows != m["questions"] or self.ranked_ids.shape != (m["questions"], m["depth"]):
            problems.append("question or ranking counts differ from the manifest")
        return problems

    # -- passages
    def passage(self, pid: int) -> tuple[str, str]:
        """(title, text) of passage ``pid``."""
        hit = self._cache.get(pid)
        if hit is None:
            hit = self._cache[pid] = (self._cols[0][pid].as_py(), self._cols[1][pid].as_py())
        return hit

    def norm(self, pid: int) -> str:
        """Passage ``pid`` as the "contains an answer" test reads it (:func:`normalize_passage`)."""
        hit = self._norms.get(pid)
        if hit is None:
            hit = self._norms[pid] = self._cols[2][pid].as_py()
        return hit

    def documents(self, pids: Any) -> list[tuple[str, str, str, str]]:
        """(id, contents, title, text) of each passage: a corpus line's own ``id`` and ``contents`` byte for byte;
        a dataset paragraph's number and ``title + "\\n" + text``. One take per chunk of the table the ids fall
        in (:class:`Documents`)."""
        if getattr(self, "_documents", None) is None:
            self._documents = Documents(self.passages)
        return self._documents.get(pids)

    def norm_spans(self) -> tuple[Any, Any, Any]:
        """``(find, starts, ends)``: ``find(pattern, starts[pid], ends[pid]) >= 0`` when the UTF-8 bytes
        ``pattern`` occur in passage ``pid``'s :meth:`norm` (``mmap.find`` over the memory-mapped passages file
        between the bounds, int64 arrays of file offsets: no string is made). A substring of the UTF-8 text is a
        substring of the text, so this is :meth:`norm`'s ``in`` test."""
        if self._spans is None:
            import numpy as np
            import pyarrow as pa

            base = pa.py_buffer(self._mm).address
            starts, ends = [], []
            for chunk in self._cols[2].chunks:
                _, offsets, data = chunk.buffers()
                wide = pa.types.is_large_string(chunk.type)
                off = np.frombuffer(offsets, np.int64 if wide else np.int32)[chunk.offset: chunk.offset + len(chunk) + 1]
                at = data.address - base if data is not None else 0
                starts.append(off[:-1].astype(np.int64) + at)
                ends.append(off[1:].astype(np.int64) + at)
            self._spans = (self._mm.find, np.concatenate(starts) if starts else np.zeros(0, np.int64),
                           np.concatenate(ends) if ends else np.zeros(0, np.int64))
        return self._spans

    def prefetch(self, pids: Any, *, norm: bool = False) -> None:
        """Read many passages (title and text; with ``norm``, the normalised text alone) at once, with one
        vectorised take, into the cache."""
        import numpy as np
        import pyarrow as pa

        want = np.unique(np.asarray(pids, dtype=np.int64))
        want = want[want >= 0]
        if not len(want):
            return
        take = pa.array(want)
        if norm:
            self._norms.update(zip(want.tolist(), self._cols[2].take(take).to_pylist(), strict=True))
        else:
            self._cache.update(zip(want.tolist(), zip(self._cols[0].take(take).to_pylist(),
                                                      self._cols[1].take(take).to_pylist(), strict=True),
                                   strict=True))

    def _q(self) -> tuple[list[str], list[list[int]]]:
        """The indexed questions' texts and gold passage ids, read once."""
        if self._q_lists is None:
            self._q_lists = (self._questions.column("question").to_pylist(),
                             self._questions.column("gold").to_pylist())
        return self._q_lists


class Documents:
    """Many passages at once as a server returns them, read straight from the memory-mapped Arrow buffers: each
    string sliced from its column's data by the offsets (no ``take``, no copy of a column, no per-passage cache
    that would grow with every passage a long-running server ever returned)."""

    def __init__(self, table: Any) -> None:
        import numpy as np

        cols = [table.column(c) for c in ("title", "text", "doc_id", "prefix")]
        self.bounds = np.cumsum([0] + [len(c) for c in cols[0].chunks])
        # per column, per chunk: (offsets, data, validity bitmap or None, the chunk's bit offset)
        self.cols = [[_strings(chunk) for chunk in col.chunks] for col in cols]

    def get(self, pids: Any) -> list[tuple[str, str, str, str]]:
        import numpy as np

        pids = np.asarray(pids, dtype=np.int64)
        which = (np.searchsorted(self.bounds, pids, side="right") - 1).tolist()
        rows = (pids - self.bounds[which]).tolist() if len(pids) else []
        cols: list[list[Any]] = []
        for col in self.cols:
            out: list[Any] = []
            for c, r in zip(which, rows, strict=True):
                offsets, data, valid, bit = col[c]
                if valid is not None and not (valid[(bit + r) >> 3] >> ((bit + r) & 7)) & 1:
                    out.append(None)
                else:
                    out.append(str(data[int(offsets[r]):int(offsets[r + 1])], "utf-8"))
            cols.append(out)
        titles, texts, ids, prefixes = cols
        # no prefix: "title\ntext", a newline inside the title sent as a space (Search-R1 splits at the first one)
        return [(str(pid) if did is None else did, (t.replace("\n", " ") + "\n" if pre is None else pre) + x, t, x)
                for pid, t, x, did, pre in zip(pids.tolist(), titles, texts, ids, prefixes, strict=True)]


def _strings(chunk: Any) -> tuple[Any, Any, Any, int]:
    """A string chunk's raw parts: its offsets (numpy, from the chunk's first row), its data as a memoryview, its
    validity bitmap (None without nulls) and the bit where the chunk starts in it."""
    import numpy as np
    import pyarrow as pa

    validity, offsets, data = chunk.buffers()[:3]
    kind = np.int64 if pa.types.is_large_string(chunk.type) else np.int32
    offs = np.frombuffer(offsets, dtype=kind)[chunk.offset:] if offsets is not None else np.zeros(1, dtype=kind)
    valid = None if chunk.null_count == 0 or validity is None else memoryview(validity)
    return offs, memoryview(data) if data is not None else memoryview(b""), valid, chunk.offset
