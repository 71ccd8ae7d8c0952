"""The BM25 retriever kind, on bm25s: its tokenizer, its scoring functions and its files, built in bounded memory and
searched without loading its vocabulary.

**Build** (:class:`BM25Builder`). Passages arrive in blocks; each is tokenized with bm25s's ``Tokenizer`` (the
vocabulary grows as bm25s grows it) and its token ids appended to a temporary file (int32: 4 bytes a token, on
disk, not in memory). :func:`write_csc` then makes bm25s's score matrix (CSC) in two passes over blocks of
documents: the first counts each term's documents (the document frequencies, hence the IDF and each column's
place), the second computes the scores with bm25s's own IDF and term-frequency functions (the same float32 /
float64 steps) and writes each block's entries into their columns of memory-mapped ``.npy`` files. Memory is the
vocabulary plus one block, whatever the corpus; the files are bm25s's ``BM25.save``, byte for byte
(tests/retrieval/test_index_flat.py), so ``bm25s.BM25.load(DIR/bm25)`` reads them too.

**Search** (:class:`BM25Searcher`). The matrix is memory-mapped; the vocabulary is read from ``bm25/vocab.arrow``
(the words sorted by their UTF-8 bytes, memory-mapped: no 10-million-word JSON to parse at start-up); a query is
tokenized as bm25s's tokenizer does (lower case, the same pattern, stop words, no stemmer; unknown words dropped)
and scored by numba (compiled once per machine and cached: :mod:`._bm25_numba`) or numpy. The ``k`` best are
exact, ties broken by the lower passage id, with either backend.
"""

from __future__ import annotations

import bisect
import itertools
import json
import logging
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._settings import rule
from ..errors import CurriculumError
from ._kinds import RetrieverKind

if TYPE_CHECKING:
    from ._config import IndexConfig

log = logging.getLogger(__name__)

BM25_DIR = "bm25"
VOCAB = "vocab.arrow"  # inside BM25_DIR: the sorted words and their ids
BOUNDS = "column_bounds.npy"  # inside BM25_DIR: each term's largest and smallest score (WAND's bounds)
TOKENS = ".tokens.int32"  # the build's temporary token file
DOCS_PER_STEP = 1 << 16  # documents per block of the two passes
PAIRS_PER_STEP = 1 << 22  # (document, term) pairs per scoring step


#: bm25s's scoring variants the index accepts (``BM25(method=...)``; the IDF uses the same variant).
METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")
#: The token pattern (bm25s's default splitter): runs of two or more word characters.
SPLITTER = r"(?u)\b\w\w+\b"


@dataclass
class BM25Options:
    """The BM25 kind's options (``curriculum index --k1 ...``; fields of IndexConfig)."""

    k1: float = rule(1.5, ge=0, le=100, help="BM25 k1 (term-frequency saturation); bm25s's default.")
    b: float = rule(0.75, ge=0, le=1, help="BM25 b (length normalisation); bm25s's default.")
    method: str = rule("lucene", choices=METHODS, help=(
        "BM25 variant (bm25s method): lucene (default) | robertson | atire | bm25l | bm25+."))
    delta: float = rule(0.5, ge=0, le=100, help="delta of the bm25l and bm25+ variants (ignored by the others).")
    stopwords: str = rule("en", choices=("en", "none"), help=(
        "Stop words dropped by the tokenizer: en (bm25s's English list) | none."))


def tokenizer_info(cfg: IndexConfig) -> dict[str, Any]:
    """The tokenizer, as the manifest records it (queries are tokenized the same way)."""
    return {"library": "bm25s", "class": "bm25s.tokenization.Tokenizer", "lower": True,
            "splitter": SPLITTER, "stopwords": None if cfg.stopwords == "none" else cfg.stopwords,
            "stemmer": None, "fields": "title + ' ' + text"}


def bm25_params(cfg: IndexConfig) -> dict[str, Any]:
    """The scoring parameters, as the manifest records them.

    >>> from rag_curriculum.retrieval import IndexConfig
    >>> bm25_params(IndexConfig(dataset="musique", input="f.jsonl"))["k1"]
    1.5
    """
    return {"k1": cfg.k1, "b": cfg.b, "method": cfg.method, "idf_method": cfg.method, "delta": cfg.delta,
            "dtype": "float32"}


class BM25Error(CurriculumError):
    """A BM25 index that cannot be built or read as asked."""


def tokenizer(stopwords: str | None):
    """bm25s's tokenizer as the index uses it: lower case, :data:`SPLITTER`, the stop words, no stemmer."""
    from bm25s.tokenization import Tokenizer

    return Tokenizer(lower=True, splitter=re.compile(SPLITTER).findall, stopwords=stopwords or [], stemmer=None)


def stopword_list(stopwords: str | None) -> list[str]:
    """The stop words bm25s's tokenizer drops (its English list for ``"en"``)."""
    if not stopwords:
        return []
    return list(tokenizer(stopwords).stopwords or [])


def tokenize(tok: Any, texts: list[str], *, update_vocab: bool, bar: Any = None, task: Any = None,
             chunk: int = 4096) -> list[list[int]]:
    """Token ids of ``texts`` with bm25s's tokenizer (in chunks, advancing ``bar``)."""
    out: list[list[int]] = []
    for start in range(0, len(texts), chunk):
        out += tok.tokenize(texts[start:start + chunk], update_vocab=update_vocab, return_as="ids",
                            show_progress=False)
        if bar is not None:
            bar.advance(task, min(chunk, len(texts) - start))
    return out


def tokenize_flat(tok: Any, titles: list[str], texts: list[str], *, chunk: int = 4096):
    """Token ids of each passage's ``title + " " + text``, as one flat int32 array and the passages' lengths
    (int64): 4 bytes a token, where lists of Python ints take about 36. The vocabulary grows as bm25s grows it."""
    import numpy as np

    parts, lens = [], []
    for start in range(0, len(titles), chunk):
        stop = start + chunk
        ids = tok.tokenize([f"{t} {x}" for t, x in zip(titles[start:stop], texts[start:stop], strict=True)],
                           update_vocab=True, return_as="ids", show_progress=False)
        n = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        parts.append(np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=int(n.sum())))
        lens.append(n)
    if not parts:
        return np.zeros(0, np.int32), np.zeros(0, np.int64)
    return np.concatenate(parts), np.concatenate(lens)


# -- the build ------------------------------------------------------------------------------------------------
def _pairs(tokens: Any, offsets: Any, lengths: Any, s: int, e: int, n_vocab: int, int_dtype: Any, dtype: Any):
    """The (document, term, term frequency) triples of documents ``s .. e-1``, by document then term."""
    import numpy as np

    d = np.repeat(np.arange(s, e, dtype=np.int64), lengths[s:e])
    key, tf = np.unique(d * n_vocab + np.asarray(tokens[offsets[s]:offsets[e]], dtype=np.int64),
                        return_counts=True)
    return (key // n_vocab).astype(int_dtype), (key % n_vocab).astype(int_dtype), tf.astype(dtype)


def _npy(path: Path, array: Any) -> None:
    import numpy as np

    np.save(path, array, allow_pickle=False)


def write_csc(directory: Path, tokens: Any, lengths: Any, vocab: dict[str, int], params: dict[str, Any], *,
              backend: str = "numpy", docs_per_step: int = DOCS_PER_STEP, pairs_per_step: int = PAIRS_PER_STEP,
              bar: Any = None, task: Any = None) -> dict[str, Any]:
    """bm25s's ``BM25.index((ids, vocab))`` then ``BM25.save(directory)``, byte for byte, from the flat token
    arrays (``tokens`` may be a memory map), in two passes over blocks of ``docs_per_step`` documents (see the
    module docstring); ``vocab`` gets the empty token, as bm25s adds it. Returns the matrix's facts."""
    import bm25s
    import numpy as np
    from bm25s.scoring import _select_idf_scorer, _select_tfc_scorer
    from bm25s.utils import json_functions

    probe = bm25s.BM25(k1=params["k1"], b=params["b"], delta=params["delta"], method=params["method"],
                       backend="numpy")
    dtype, int_dtype = np.dtype(probe.dtype), np.dtype(probe.int_dtype)
    n_docs, n_vocab = len(lengths), len(vocab)
    lengths = np.asarray(lengths, dtype=np.int64)
    if int(lengths.sum()) != len(tokens) or (len(tokens) and not 0 <= int(np.min(tokens)) <= int(np.max(tokens))
                                             < n_vocab):
        # the (document, token) keys assume ids 0 .. n_vocab - 1 and one length per document: refuse, never mix
        # up two tokens' counts silently
        raise BM25Error(f"write_csc: {len(tokens):,} token ids for lengths summing to {int(lengths.sum()):,}, ids "
                        f"in [{int(np.min(tokens)) if len(tokens) else 0}, {int(np.max(tokens)) if len(tokens) else 0}]"
                        f" for a vocabulary of {n_vocab:,}", hint="pass the tokenizer's arrays and its own vocabulary")
    avg = lengths.mean() if n_docs else 0.0
    offsets = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    # pass 1: each term's documents
    df = np.zeros(n_vocab, dtype=np.int64)
    for s in range(0, n_docs, docs_per_step):
        e = min(n_docs, s + docs_per_step)
        _, term, _ = _pairs(tokens, offsets, lengths, s, e, n_vocab, int_dtype, dtype)
        df += np.bincount(term, minlength=n_vocab)
        if bar is not None:
            bar.advance(task, e - s)
    idf_fn, tfc_fn = _select_idf_scorer(probe.idf_method), _select_tfc_scorer(probe.method)
    k1, b, delta = probe.k1, probe.b, probe.delta
    values, inverse = np.unique(df, return_inverse=True)
    idf = np.array([idf_fn(int(v), N=n_docs) if v else 0.0 for v in values])[inverse].astype(dtype)
    nonocc = None
    if probe.method in probe.methods_requiring_nonoccurrence:
        tfc0 = tfc_fn(tf_array=0, l_d=avg, l_avg=avg, k1=k1, b=b, delta=delta)
        nonocc = np.array([idf_fn(int(v), N=n_docs) * tfc0 if v else 0.0 for v in values])[inverse].astype(dtype)
    indptr = np.zeros(n_vocab + 1, dtype=np.int64)
    np.cumsum(df, out=indptr[1:])
    nnz = int(indptr[-1])
    directory.mkdir(parents=True, exist_ok=True)
    data = np.lib.format.open_memmap(directory / "data.csc.index.npy", mode="w+", dtype=dtype, shape=(nnz,))
    indices = np.lib.format.open_memmap(directory / "indices.csc.index.npy", mode="w+", dtype=int_dtype,
                                        shape=(nnz,))
    # pass 2: scores into their columns; blocks come in document order and a stable sort by term keeps each
    # block's documents in order, so every column's documents ascend (bm25s's layout)
    cursor = indptr[:-1].copy()
    for s in range(0, n_docs, docs_per_step):
        e = min(n_docs, s + docs_per_step)
        doc, term, tf = _pairs(tokens, offsets, lengths, s, e, n_vocab, int_dtype, dtype)
        scores = np.empty(len(doc), dtype=dtype)
        for p in range(0, len(doc), pairs_per_step):
            sl = slice(p, p + pairs_per_step)
            tfc = tfc_fn(tf_array=tf[sl], l_d=lengths[doc[sl]], l_avg=avg, k1=k1, b=b, delta=delta)
            sc = idf[term[sl]] * tfc
            if nonocc is not None:
                sc -= nonocc[term[sl]]
            scores[sl] = sc
        order = np.argsort(term, kind="stable")
        t_sorted = term[order]
        uniq, first, counts = np.unique(t_sorted, return_index=True, return_counts=True)
        pos = cursor[t_sorted] + (np.arange(len(t_sorted)) - np.repeat(first, counts))
        data[pos] = scores[order]
        indices[pos] = doc[order]
        cursor[uniq] += counts
        if bar is not None:
            bar.advance(task, e - s)
    data.flush()
    indices.flush()
    _npy(directory / BOUNDS, column_bounds(data, indptr))
    del data, indices
    _npy(directory / "indptr.csc.index.npy", indptr)
    if nonocc is not None:
        _npy(directory / "nonoccurrence_array.index.npy", nonocc)
    if "" not in vocab:
        vocab[""] = max(vocab.values()) + 1
    with open(directory / "vocab.index.json", "w", encoding="utf-8") as f:
        f.write(json_functions.dumps(vocab, ensure_ascii=False))
    with open(directory / "params.index.json", "w") as f:
        json.dump(dict(k1=probe.k1, b=probe.b, delta=probe.delta, method=probe.method, idf_method=probe.idf_method,
                       dtype=probe.dtype, int_dtype=probe.int_dtype, num_docs=n_docs, version=bm25s.__version__,
                       backend=backend), f, indent=4)
    write_vocab(directory / VOCAB, vocab)
    return {"nnz": nnz}


def column_bounds(data: Any, indptr: Any) -> Any:
    """(largest, smallest) score of each column (term) of the matrix, float32 (0, 0 for a term in no passage):
    what the search's dynamic pruning needs to know a term can add at most."""
    import numpy as np

    n = len(indptr) - 1
    out = np.zeros((n, 2), dtype=np.float32)
    live = np.flatnonzero(indptr[1:] > indptr[:-1])
    if len(live):
        starts = np.asarray(indptr[:-1][live], dtype=np.int64)
        out[live, 0] = np.maximum.reduceat(data, starts)
        out[live, 1] = np.minimum.reduceat(data, starts)
    return out


def write_vocab(path: Path, vocab: dict[str, int]) -> None:
    """The vocabulary as an Arrow file: ``word`` sorted by its UTF-8 bytes, ``id`` (what :class:`Vocabulary`
    reads memory-mapped)."""
    import pyarrow as pa

    words = sorted(vocab, key=lambda w: w.encode("utf-8"))
    table = pa.table({"word": pa.array(words, pa.large_string()),
                      "id": pa.array([vocab[w] for w in words], pa.int32())})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


class Vocabulary:
    """Word -> id over ``vocab.arrow``, memory-mapped: a binary search over the sorted UTF-8 words (no dict is
    built, so a vocabulary of millions of words is ready at once); found words are kept in a small cache."""

    def __init__(self, path: Path) -> None:
        import numpy as np
        import pyarrow as pa

        table = pa.ipc.open_file(pa.memory_map(str(path))).read_all().combine_chunks()
        words = table.column("word").chunk(0) if table.num_rows else pa.array([], pa.large_string())
        _, offs, data = words.buffers()
        self._offsets = np.frombuffer(offs, np.int64)[words.offset:words.offset + len(words) + 1] if len(words) \
            else np.zeros(1, np.int64)
        self._data = memoryview(data) if data is not None else memoryview(b"")
        self._ids = table.column("id").to_numpy() if table.num_rows else np.zeros(0, np.int32)
        self._cache: dict[str, int | None] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._ids)

    def __getitem__(self, i: int) -> bytes:  # the i-th word's bytes (bisect reads it as a sequence)
        return bytes(self._data[self._offsets[i]:self._offsets[i + 1]])

    def get(self, word: str) -> int | None:
        hit = self._cache.get(word, -1)
        if hit != -1:
            return hit  # type: ignore[return-value]
        key = word.encode("utf-8")
        i = bisect.bisect_left(self, key)  # type: ignore[arg-type]
        got = int(self._ids[i]) if i < len(self) and self[i] == key else None
        with self._lock:
            if len(self._cache) > 200_000:
                self._cache.clear()
            self._cache[word] = got
        return got


class BM25Builder:
    """The BM25 kind's side of a build: :meth:`add` each block of passages, then :meth:`finish`."""

    def __init__(self, cfg: IndexConfig, tmp: Path, *, backend: str) -> None:
        self.cfg, self.tmp, self.backend = cfg, tmp, backend
        self.tok = tokenizer(None if cfg.stopwords == "none" else cfg.stopwords)
        self._file = open(tmp / TOKENS, "wb")
        self._lengths: list[Any] = []
        self.tokens = 0
        self.progress = None  # set by the build: called with the passages done

    def add(self, block: Any) -> None:
        tokens, lengths = tokenize_flat(self.tok, block.titles, block.texts)
        self._file.write(tokens.tobytes())
        self._lengths.append(lengths)
        self.tokens += len(tokens)
        if self.progress:
            self.progress(len(block))

    def finish(self, *, bar: Any = None, task: Any = None) -> dict[str, Any]:
        """bm25s's files into ``tmp/bm25`` (the temporary token file is removed); the manifest's BM25 facts."""
        import bm25s
        import numpy as np

        self._file.close()
        lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, np.int64)
        path = self.tmp / TOKENS
        tokens = np.memmap(path, dtype=np.int32, mode="r") if self.tokens else np.zeros(0, np.int32)
        vocab = self.tok.get_vocab_dict()
        try:
            write_csc(self.tmp / BM25_DIR, tokens, lengths, vocab, bm25_params(self.cfg), backend=self.backend,
                      bar=bar, task=task, docs_per_step=self.cfg.block)
        finally:
            del tokens
            path.unlink(missing_ok=True)
        return {"bm25": bm25_params(self.cfg), "tokenizer": tokenizer_info(self.cfg),
                "bm25s_version": bm25s.__version__, "backend": self.backend, "vocab_size": len(vocab)}


# -- search -------------------------------------------------------------------------------------------------
def backend(name: str) -> str:
    """``auto`` is numba when it is installed (its compiled search is cached on disk: a process after the first
    loads it in about a second), else numpy; the rankings are the same."""
    if name != "auto":
        return name
    try:
        import numba  # noqa: F401
    except ImportError:
        return "numpy"
    return "numba"


_POOLS: dict[int, Any] = {}
_POOLS_LOCK = threading.Lock()


def _pool(threads: int) -> Any:
    """A process-wide pool of ``threads`` threads for the compiled search (which releases the GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    with _POOLS_LOCK:
        if threads not in _POOLS:
            _POOLS[threads] = ThreadPoolExecutor(threads, thread_name_prefix="bm25")
        return _POOLS[threads]


class BM25Searcher:
    """The BM25 matrix of an index directory, memory-mapped, and its vocabulary (:class:`Vocabulary`): ``search``
    ranks new queries (ids -1 where a query has no indexed word)."""

    def __init__(self, directory: Path, manifest: dict[str, Any], *, backend_name: str = "auto",
                 threads: int = 0) -> None:
        import numpy as np

        d = Path(directory) / BM25_DIR
        params = _check_params(directory, manifest)
        self.backend = backend(backend_name)
        self.threads = threads or (os.cpu_count() or 1)
        self.data = np.load(d / "data.csc.index.npy", mmap_mode="r")
        self.indices = np.load(d / "indices.csc.index.npy", mmap_mode="r")
        self.indptr = np.load(d / "indptr.csc.index.npy", mmap_mode="r")
        nn = d / "nonoccurrence_array.index.npy"
        self.nonocc = np.load(nn) if nn.exists() else None
        bounds = d / BOUNDS
        b = np.load(bounds, mmap_mode="r") if bounds.exists() else column_bounds(self.data, self.indptr)
        self.colmax = np.ascontiguousarray(b[:, 0])
        self.colmin = np.ascontiguousarray(b[:, 1])
        # a column WAND can walk: all its scores positive, or no passage holds its word
        self.prunable = (self.colmin > 0) | (np.asarray(self.indptr[1:]) == np.asarray(self.indptr[:-1]))
        self.num_docs = int(params["num_docs"])
        self.vocab = Vocabulary(d / VOCAB)
        self.prune = True  # WAND where it applies (False: the exhaustive sum for every query; the same answers)
        self.empty = self.vocab.get("")
        self._split = re.compile(SPLITTER).findall  # stop words are never in the vocabulary: dropped as unknown

    def token_ids(self, query: str) -> list[int]:
        """bm25s's tokenizer on a query, without a dict of the vocabulary: its words, lower case, those the index
        knows (unknown words and stop words dropped), in order; none: the empty token's id."""
        out = []
        get = self.vocab.get
        for word in self._split(query.lower()):
            wid = get(word)
            if wid is not None:
                out.append(wid)
        return out if out else ([] if self.empty is None else [self.empty])

    def describe(self) -> dict[str, Any]:
        return {"kind": "bm25", "backend": self.backend}

    def warm(self) -> None:
        """Compile (or load from the cache) every search the queries of this index may take (WAND; the exhaustive
        sum only where some column cannot be pruned), one query at a time and a batch across threads: the first
        request is not slow."""
        import numpy as np

        if self.backend != "numba" or not self.num_docs:
            self.search(["warm up"], 1)
            return
        from . import _bm25_numba as nb

        t = int(np.argmax(np.asarray(self.indptr[1:]) > np.asarray(self.indptr[:-1])))  # a term some passage holds
        flat, ptr = np.array([t, t], dtype=np.int64), np.array([0, 1, 2], dtype=np.int64)
        base = (flat, ptr, 1, self.data, self.indptr, self.indices, self.num_docs)
        out = (np.zeros((2, 1), dtype=self.data.dtype), np.zeros((2, 1), dtype=np.int64))
        offsets = np.zeros(2, dtype=self.data.dtype)
        pruned = self.prune and self.nonocc is None
        if pruned:
            nb.wand(*base, self.colmax, *out)
        if not pruned or not bool(self.prunable.all()):  # an index some query cannot prune (bm25l, bm25+, ...)
            nb.exhaustive(*base, offsets, *out)

    def search(self, queries: list[str], k: int, *, threads: int | None = None):
        """The ``k`` best passages of each query: (ids int32, scores float32), one row per query, best first,
        ties by lower id; ids -1 where the query has no indexed word (or past the index's passages)."""
        import numpy as np

        n = len(queries)
        k = max(0, min(k, self.num_docs))
        ids = np.full((n, k), -1, dtype=np.int32)
        scores = np.zeros((n, k), dtype=np.float32)
        qs = [self.token_ids(q) for q in queries]
        live = [i for i, q in enumerate(qs) if q and q != [self.empty]]
        if not live or not k:
            return ids, scores
        flat = np.fromiter(itertools.chain.from_iterable(qs[i] for i in live), dtype=np.int64)
        ptr = np.zeros(len(live) + 1, dtype=np.int64)
        np.cumsum([len(qs[i]) for i in live], out=ptr[1:])
        offsets = np.zeros(len(live), dtype=self.data.dtype)
        if self.nonocc is not None:
            for j, i in enumerate(live):
                offsets[j] = self.nonocc[np.asarray(qs[i])].sum()
        vals = np.zeros((len(live), k), dtype=self.data.dtype)
        got = np.zeros((len(live), k), dtype=np.int64)
        t = threads or self.threads
        if self.backend == "numba":
            self._numba(flat, ptr, k, offsets, vals, got, t)
        else:
            for j in range(len(live)):
                got[j], vals[j] = self._numpy_one(flat[ptr[j]:ptr[j + 1]], k, offsets[j])
        ids[live] = got.astype(np.int32)
        scores[live] = vals
        return ids, scores

    def _numba(self, flat, ptr, k, offsets, vals, got, threads: int) -> None:
        """WAND for the queries whose columns hold only positive scores (and no score for absent words), the
        exhaustive sum for the others: the same answers (see :mod:`._bm25_numba`)."""
        import numpy as np

        from . import _bm25_numba as nb

        nq = len(ptr) - 1
        prune = np.array([self.prune and self.nonocc is None and bool(self.prunable[flat[ptr[i]:ptr[i + 1]]].all())
                          for i in range(nq)], dtype=bool)
        for fast, rows in ((True, np.flatnonzero(prune)), (False, np.flatnonzero(~prune))):
            if not len(rows):
                continue
            sub_flat = np.concatenate([flat[ptr[i]:ptr[i + 1]] for i in rows])
            sub_ptr = np.zeros(len(rows) + 1, dtype=np.int64)
            np.cumsum(ptr[rows + 1] - ptr[rows], out=sub_ptr[1:])
            v = np.zeros((len(rows), k), dtype=vals.dtype)
            g = np.zeros((len(rows), k), dtype=got.dtype)
            kernel = nb.wand if fast else nb.exhaustive
            extra = self.colmax if fast else offsets[rows]
            n = len(rows)
            if threads <= 1 or n == 1:
                cuts = [0, n]
            else:  # the compiled search releases the GIL: slices of the batch on a pool of threads, a few per thread
                parts = min(n, threads * (4 if fast else 1))  # (the exhaustive sum needs a score array each)
                cuts = [n * i // parts for i in range(parts + 1)]
            calls = [(kernel, sub_flat, sub_ptr[lo:hi + 1], k, self.data, self.indptr, self.indices, self.num_docs,
                      extra if fast else extra[lo:hi], v[lo:hi], g[lo:hi]) for lo, hi in zip(cuts[:-1], cuts[1:], strict=True)]
            if len(calls) == 1:
                kernel(*calls[0][1:])
            else:
                list(_pool(threads).map(lambda c: c[0](*c[1:]), calls))
            vals[rows] = v
            got[rows] = g

    def _numpy_one(self, q, k: int, offset: Any):
        """One query with numpy: the same float32 sums as the numba loop, the same exact top ``k``."""
        import numpy as np

        scores = np.zeros(self.num_docs, dtype=self.data.dtype)
        for t in q.tolist():  # in query order, as the loop adds
            s, e = int(self.indptr[t]), int(self.indptr[t + 1])
            scores[self.indices[s:e]] += self.data[s:e]  # a column's documents are distinct
        if offset != 0:
            scores += offset
        return exact_top_k(scores, k)


def exact_top_k(scores: Any, k: int):
    """The ``k`` best entries of ``scores``: (indices, values), best first, ties by the lower index."""
    import numpy as np

    n = len(scores)
    k = min(k, n)
    if k == n:
        cand = np.arange(n)
    else:
        kth = np.partition(scores, n - k)[n - k]
        above = np.flatnonzero(scores > kth)
        cand = np.concatenate([above, np.flatnonzero(scores == kth)[:k - len(above)]])
    order = np.lexsort((cand, -scores[cand]))
    return cand[order], scores[cand][order]


def _check_params(directory: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """bm25s's saved parameters, which must be the manifest's."""
    try:
        params = json.loads((Path(directory) / BM25_DIR / "params.index.json").read_text())
    except (OSError, ValueError) as e:
        raise BM25Error(f"{directory}: bm25s's params.index.json cannot be read ({e})",
                        hint="build the index again with curriculum index ... --overwrite") from None
    saved = {k: params.get(k) for k in ("k1", "b", "method", "delta")}
    want = {k: manifest["bm25"][k] for k in saved}
    if saved != want or params.get("num_docs") != manifest["passages"]:
        raise BM25Error(f"bm25s's saved parameters {saved} ({params.get('num_docs')} documents) do not match the "
                        f"manifest's {want} ({manifest['passages']} passages)",
                        hint="build the index again with curriculum index ... --overwrite")
    return params


def check_version(manifest: dict[str, Any], where: Path) -> None:
    """An index built with another bm25s minor version is refused (its files may read otherwise), and so is one whose
    saved parameters are not its manifest's."""
    from importlib.metadata import version

    have = version("bm25s")  # without importing it
    if str(manifest.get("bm25s_version", "")).split(".")[:2] != have.split(".")[:2]:
        raise BM25Error(f"built with bm25s {manifest.get('bm25s_version')}, this environment has {have}",
                        hint="build the index again, or install the bm25s it was built with")
    _check_params(where, manifest)


#: The manifest's keys this kind writes (what ``describe`` and ``/manifest`` show of it).
MANIFEST_KEYS = ("bm25", "tokenizer", "bm25s_version", "backend", "vocab_size")


def _open(directory: Path, manifest: dict[str, Any], *, backend: str = "auto", threads: int = 0,
          device: str | None = None, encoder: str | None = None) -> BM25Searcher:
    return BM25Searcher(directory, manifest, backend_name=backend, threads=threads)


def _builder(cfg: IndexConfig, tmp: Path, **kw: Any) -> BM25Builder:
    return BM25Builder(cfg, tmp, backend=backend(cfg.backend))


def summary(manifest: dict[str, Any]) -> str:
    """One line on a BM25 index's settings."""
    bm = manifest["bm25"]
    return f"bm25s {manifest['bm25s_version']}, {bm['method']} k1={bm['k1']} b={bm['b']}"


KIND = RetrieverKind("bm25", builder=_builder, open=_open, check=check_version, manifest_keys=MANIFEST_KEYS,
                     description="BM25 (bm25s): sparse lexical ranking", options=BM25Options, label="BM25",
                     negatives="BM25 hard negatives", summary=summary, warm_on_build=True)
