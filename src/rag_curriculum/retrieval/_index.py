"""A BM25 index over a dataset's paragraphs (and an optional corpus), on bm25s: build, save, load (memory-mapped),
retrieve.

An index directory holds::

    manifest.json      what made it: sources and their checksums, tokenizer, BM25 parameters, counts (written last)
    bm25/              bm25s's own save (``BM25.save``): the sparse score matrix (.npy), vocabulary, parameters
    passages.arrow     the passages (title, text, origin, norm), Arrow IPC: memory-mapped when loaded; ``norm`` is
                       ``title + " " + text`` SQuAD-normalised and padded with a space at each end, what the
                       build's "contains an answer" test searches (:func:`normalize_passage`)
    questions.arrow    the dataset file's questions (id, question, gold: the passage ids of its gold paragraphs),
                       in file order
    ranked_ids.npy     per question, the ids of its ``depth`` best passages, best first (int32)
    ranked_scores.npy  their BM25 scores (float32)
    passage_keys.npy   per passage, a 64-bit hash of its normalised title and text (what "a copy of a gold
                       paragraph" compares; :func:`passage_hash`)

It is written into a hidden temporary folder beside the target and renamed into place at the end, so a reader
never sees a half-written index. The passage-side files (passages, questions, keys) and the input checksums are
made by a forked worker while the parent tokenizes and indexes, which uses one CPU; ranking waits for it. A
passage's text for BM25 is ``title + " " + text``; queries are the questions, tokenized the same way. Ties in score are broken by the lower passage id, so rankings are deterministic.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import mmap
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._metrics import normalize_answer
from .._plumbing import SideTask, gc_paused
from .._progress import maybe_progress
from .._version import __version__
from ..errors import CurriculumError
from ..loaders import get_loader
from ..shards import (
    foreign_entries,
    owner_tag,
    portable_command,
    portable_path,
    remove_orphans,
    replace_in_place,
    sha256_file,
)
from ._config import SPLITTER, IndexConfig
from ._corpus import collect

log = logging.getLogger(__name__)

KIND = "bm25-index"
FORMAT = 3  # 2: passage_keys.npy; 3: the norm column, questions' gold ids
MANIFEST = "manifest.json"
BM25_DIR = "bm25"
PASSAGES = "passages.arrow"
QUESTIONS = "questions.arrow"
RANKED_IDS = "ranked_ids.npy"
RANKED_SCORES = "ranked_scores.npy"
KEYS = "passage_keys.npy"
CHUNK = 4096  # passages / queries per progress step
ARROW_ROWS = 1 << 16  # rows per record batch of the Arrow files


class IndexError_(CurriculumError):  # noqa: N801  (IndexError is a builtin)
    """An index that is missing, unfinished, or does not match its manifest."""


def _tokenizer(stopwords: str | None):
    import re

    from bm25s.tokenization import Tokenizer

    return Tokenizer(lower=True, splitter=re.compile(SPLITTER).findall, stopwords=stopwords or [], stemmer=None)


#: ``backend="auto"`` picks numba (when installed) from this many queries on: its JIT compilation costs about
#: half a minute per process, which pays off only on large batches...
NUMBA_MIN_QUERIES = 20_000
#: ... or on an index of this many passages: there numpy's scoring of one query costs more than the compilation
#: of a whole process (measured on 5.2M passages, one thread: 3.6 queries/s with numpy, 134 to 164 with numba).
NUMBA_MIN_PASSAGES = 1_000_000


def _backend(name: str, queries: int = 0, passages: int = 0) -> str:
    if name != "auto":
        return name
    if queries < NUMBA_MIN_QUERIES and passages < NUMBA_MIN_PASSAGES:
        return "numpy"
    try:
        import numba  # noqa: F401
    except ImportError:
        return "numpy"
    return "numba"


def _threads(n: int) -> int:
    return n or (os.cpu_count() or 1)


def tokenize(tokenizer: Any, texts: list[str], *, update_vocab: bool, bar: Any = None, task: Any = None
             ) -> list[list[int]]:
    """Token ids of ``texts`` (in chunks, advancing ``bar``)."""
    out: list[list[int]] = []
    for start in range(0, len(texts), CHUNK):
        out += tokenizer.tokenize(texts[start:start + CHUNK], update_vocab=update_vocab, return_as="ids",
                                  show_progress=False)
        if bar is not None:
            bar.advance(task, min(CHUNK, len(texts) - start))
    return out


def tokenize_flat(tokenizer: Any, titles: list[str], texts: list[str], *, bar: Any = None, task: Any = None):
    """Token ids of each passage's ``title + " " + text``, as one flat int32 array and the passages' lengths
    (int64): 4 bytes a token, where lists of Python ints take about 36. The vocabulary grows as
    :func:`tokenize` makes it (the same chunks)."""
    import numpy as np

    parts, lens = [], []
    for start in range(0, len(titles), CHUNK):
        stop = start + CHUNK
        ids = tokenizer.tokenize([f"{t} {x}" for t, x in zip(titles[start:stop], texts[start:stop], strict=True)],
                                 update_vocab=True, return_as="ids", show_progress=False)
        n = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        parts.append(np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int32, count=int(n.sum())))
        lens.append(n)
        if bar is not None:
            bar.advance(task, len(ids))
    if not parts:
        return np.zeros(0, np.int32), np.zeros(0, np.int64)
    return np.concatenate(parts), np.concatenate(lens)


def index_flat(retriever: Any, tokens: Any, lengths: Any, vocab: dict, *, docs_per_step: int = 1 << 16,
               pairs_per_step: int = 1 << 22) -> None:
    """``retriever.index((ids, vocab))`` of bm25s, byte for byte (tests/retrieval/test_index_flat.py), from the flat
    arrays of :func:`tokenize_flat`: bm25s counts each document's tokens, its document frequencies and scores in a
    Python loop over lists of Python ints (about 36 bytes a token: a 5.2M-passage corpus would need some 15 GB);
    here the (document, token, count) triples come from ``numpy.unique`` over blocks of ``docs_per_step``
    documents, the scores are computed with bm25s's own IDF and term-frequency functions over blocks of
    ``pairs_per_step`` triples, with the same float32 / float64 steps, and the matrix is laid out as bm25s's CSC
    builder lays it out. Like bm25s, it adds the empty token to ``vocab`` (the same dict)."""
    import numpy as np
    from bm25s.scoring import _select_idf_scorer, _select_tfc_scorer

    dtype, int_dtype = np.dtype(retriever.dtype), np.dtype(retriever.int_dtype)
    n_docs, n_vocab = len(lengths), len(vocab)
    if int(np.sum(lengths)) != len(tokens) or (len(tokens) and not 0 <= int(tokens.min()) <= int(tokens.max()) < n_vocab):
        # the (document, token) keys below assume ids 0 .. n_vocab - 1 and one length per document: refuse, never
        # mix up two tokens' counts silently
        raise IndexError_(f"index_flat: {len(tokens):,} token ids for lengths summing to {int(np.sum(lengths)):,}, "
                          f"ids in [{int(tokens.min()) if len(tokens) else 0}, "
                          f"{int(tokens.max()) if len(tokens) else 0}] for a vocabulary of {n_vocab:,}",
                          hint="pass tokenize_flat's arrays with the tokenizer's own vocabulary")
    avg = np.asarray(lengths, dtype=np.int64).mean()
    offsets = np.zeros(n_docs + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    docs, terms, tfs = [], [], []
    for s in range(0, n_docs, docs_per_step):
        e = min(n_docs, s + docs_per_step)
        d = np.repeat(np.arange(s, e, dtype=np.int64), lengths[s:e])
        key, tf = np.unique(d * n_vocab + tokens[offsets[s]:offsets[e]], return_counts=True)
        docs.append((key // n_vocab).astype(int_dtype))
        terms.append((key % n_vocab).astype(int_dtype))
        tfs.append(tf.astype(dtype))
    doc = np.concatenate(docs) if docs else np.zeros(0, int_dtype)
    term = np.concatenate(terms) if terms else np.zeros(0, int_dtype)
    tf = np.concatenate(tfs) if tfs else np.zeros(0, dtype)
    del docs, terms, tfs
    df = np.bincount(term, minlength=n_vocab)
    idf_fn, tfc_fn = _select_idf_scorer(retriever.idf_method), _select_tfc_scorer(retriever.method)
    k1, b, delta = retriever.k1, retriever.b, retriever.delta
    values, inverse = np.unique(df, return_inverse=True)
    idf = np.array([idf_fn(int(v), N=n_docs) if v else 0.0 for v in values])[inverse].astype(dtype)
    nonocc = None
    if retriever.method in retriever.methods_requiring_nonoccurrence:
        tfc0 = tfc_fn(tf_array=0, l_d=avg, l_avg=avg, k1=k1, b=b, delta=delta)
        nonocc = np.array([idf_fn(int(v), N=n_docs) * tfc0 if v else 0.0 for v in values])[inverse].astype(dtype)
    scores = np.empty(len(doc), dtype=dtype)
    for s in range(0, len(doc), pairs_per_step):
        sl = slice(s, s + pairs_per_step)
        tfc = tfc_fn(tf_array=tf[sl], l_d=lengths[doc[sl]], l_avg=avg, k1=k1, b=b, delta=delta)
        sc = idf[term[sl]] * tfc
        if nonocc is not None:
            sc -= nonocc[term[sl]]
        scores[sl] = sc
    del tf
    # bm25s's CSC layout (tokens' columns, each one's documents ascending; indptr int64): a stable sort by token keeps
    # the documents in order, with one int64 sorter where bm25s's builder also packs (token, document) keys
    indptr = np.zeros(n_vocab + 1, dtype=np.int64)
    np.cumsum(np.bincount(term, minlength=n_vocab), out=indptr[1:])
    sorter = np.argsort(term, kind="stable")
    del term
    data, indices = scores[sorter], doc[sorter]
    del sorter, scores, doc
    retriever.nonoccurrence_array = nonocc
    retriever.scores = {"data": data.astype(dtype), "indices": indices, "indptr": indptr, "num_docs": n_docs}
    if "" not in vocab:
        vocab[""] = max(vocab.values()) + 1
    retriever.vocab_dict = vocab
    retriever.unique_token_ids_set = set(vocab.values())


def rank(retriever: Any, queries: list[list[int]], depth: int, *, threads: int, empty_id: int | None,
         bar: Any = None, task: Any = None):
    """The ``depth`` best passage ids and scores of each query (rows of two arrays), best first, ties by lower
    id; a query with no token in the vocabulary gets ids -1 and scores 0."""
    import numpy as np

    n = len(queries)
    ids = np.full((n, depth), -1, dtype=np.int32)
    scores = np.zeros((n, depth), dtype=np.float32)
    live = [i for i, q in enumerate(queries) if q and q != [empty_id]]
    for start in range(0, len(live), CHUNK):
        rows = live[start:start + CHUNK]
        # one more than asked, so that a tie at the cut is seen and broken by id like the others
        k = min(depth + 1, retriever.scores["num_docs"])
        docs, sc = retriever.retrieve([queries[i] for i in rows], k=k, n_threads=threads, show_progress=False,
                                      sorted=True)
        docs = np.asarray(docs, dtype=np.int64)
        sc = np.asarray(sc, dtype=np.float32)
        order = np.lexsort((docs, -sc), axis=1)  # score descending, then passage id ascending
        docs = np.take_along_axis(docs, order, axis=1)[:, :depth]
        sc = np.take_along_axis(sc, order, axis=1)[:, :depth]
        ids[rows, :docs.shape[1]] = docs
        scores[rows, :sc.shape[1]] = sc
        if bar is not None:
            bar.advance(task, len(rows))
    if bar is not None and len(live) < n:
        bar.advance(task, n - len(live))
    return ids, scores


def passage_hash(title: str, text: str) -> int:
    """A stable 64-bit hash (BLAKE2b) of a passage's title and text with whitespace runs collapsed and case folded:
    two passages with equal hashes are copies of each other."""
    key = " ".join(title.split()).casefold() + "\x00" + " ".join(text.split()).casefold()
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "little", signed=True)


def normalize_passage(title: str, text: str) -> str:
    """``" " + normalize_answer(title + " " + text) + " "``: a passage as the "contains an answer" test reads it (an
    answer ``a``, normalised, is in the passage when ``f" {a} "`` is a substring of this)."""
    return f" {normalize_answer(f'{title} {text}')} "


def _write_arrow(path: Path, columns: dict[str, Any]) -> None:
    import pyarrow as pa

    table = pa.table({k: v if isinstance(v, pa.Array) else pa.array(v, pa.string()) for k, v in columns.items()})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=ARROW_ROWS)


def _write_passages(path: Path, col: Any) -> None:
    """``passages.arrow``, one record batch of ``ARROW_ROWS`` passages at a time, without holding every normalised
    text and a copy of every column at once: the table and batches :func:`_write_arrow` writes for the whole table
    (its very bytes when the index is one batch; with several, Arrow lays out a slice's buffers otherwise)."""
    import pyarrow as pa

    n = len(col)
    if not n:
        _write_arrow(path, {"title": [], "text": [], "origin": [], "norm": []})
        return
    schema = pa.schema([(name, pa.string()) for name in ("title", "text", "origin", "norm")])
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        for start in range(0, n, ARROW_ROWS):
            titles, texts = col.titles[start:start + ARROW_ROWS], col.texts[start:start + ARROW_ROWS]
            norm = [normalize_passage(t, x) for t, x in zip(titles, texts, strict=True)]
            writer.write_batch(pa.record_batch([pa.array(titles, pa.string()), pa.array(texts, pa.string()),
                                                pa.array(col.origins[start:start + ARROW_ROWS], pa.string()),
                                                pa.array(norm, pa.string())], schema=schema))


def _write_passage_side(tmp: Path, col: Any, cfg: IndexConfig) -> dict[str, str | None]:
    """The files about the passages and questions (Arrow tables, passage hashes) and the inputs' checksums: what
    does not need BM25, made beside tokenizing and indexing (in a forked worker)."""
    import numpy as np
    import pyarrow as pa

    n = len(col)
    _write_passages(tmp / PASSAGES, col)
    _write_arrow(tmp / QUESTIONS, {"id": col.q_ids, "question": col.q_texts,
                                   "gold": pa.array(col.q_gold, pa.list_(pa.int32()))})
    np.save(tmp / KEYS, np.fromiter((passage_hash(t, x) for t, x in zip(col.titles, col.texts, strict=True)),
                                    dtype=np.int64, count=n))
    return {"input": sha256_file(Path(cfg.input)), "corpus": sha256_file(Path(cfg.corpus)) if cfg.corpus else None}


def build_index(cfg: IndexConfig, *, progress: bool = False, command: str | None = None) -> dict[str, Any]:
    """Read, tokenize, index, rank the dataset's questions and save; return the manifest (with ``seconds``: the
    time spent reading, tokenizing + indexing, ranking, and waiting for the passage-side worker after indexing;
    the file does not record them). The cyclic garbage collector is paused meanwhile: the passages and their
    token lists are millions of acyclic objects, which its full collections would walk again and again."""
    with gc_paused():
        return _build_index(cfg, progress=progress, command=command)


def _build_index(cfg: IndexConfig, *, progress: bool, command: str | None) -> dict[str, Any]:
    import bm25s
    import numpy as np

    cfg.validate()
    cfg.dataset = get_loader(cfg.dataset).name
    out = Path(cfg.out)
    _check_out(out, cfg.overwrite)
    t0 = time.perf_counter()
    col = collect(cfg.dataset, cfg.input, cfg.corpus, on_error=cfg.on_error, progress=progress)
    if not len(col):
        raise IndexError_(f"{cfg.input}: no paragraph to index", hint="check --dataset and --input")
    t1 = time.perf_counter()
    backend = _backend(cfg.backend, len(col.q_ids), len(col))
    depth = min(cfg.depth, len(col))
    remove_orphans(out, ("tmp", "old"))
    tmp = out.with_name(f".{out.name}.tmp-{owner_tag()}")
    tmp.mkdir(parents=True)
    side = None
    try:
        # the passage-side files in a forked worker while this process tokenizes and indexes (one CPU each)
        side = SideTask(lambda: _write_passage_side(tmp, col, cfg), "index: passages, hashes, checksums")
        tokenizer = _tokenizer(None if cfg.stopwords == "none" else cfg.stopwords)
        retriever = bm25s.BM25(k1=cfg.k1, b=cfg.b, delta=cfg.delta, method=cfg.method, backend=backend)
        with maybe_progress(progress, unit="passages") as bar:
            task = bar.add_task("tokenizing passages", total=len(col)) if bar else None
            tokens, lengths = tokenize_flat(tokenizer, col.titles, col.texts, bar=bar, task=task)
        vocab = tokenizer.get_vocab_dict()
        index_flat(retriever, tokens, lengths, vocab)
        del tokens, lengths
        t2 = time.perf_counter()
        query_ids = tokenize(tokenizer, col.q_texts, update_vocab=False)
        tw = time.perf_counter()
        sums = side.result()  # before ranking, which uses every CPU
        wait = time.perf_counter() - tw
        with maybe_progress(progress, unit="queries") as bar:
            task = bar.add_task("ranking questions", total=len(col.q_ids)) if bar else None
            ids, scores = rank(retriever, query_ids, depth, threads=_threads(cfg.threads), empty_id=vocab.get(""),
                               bar=bar, task=task)
        empty = int((ids[:, 0] < 0).sum()) if len(ids) else 0
        t3 = time.perf_counter()
        retriever.save(str(tmp / BM25_DIR), show_progress=False)
        np.save(tmp / RANKED_IDS, ids)
        np.save(tmp / RANKED_SCORES, scores)
        files = {p.relative_to(tmp).as_posix(): p.stat().st_size for p in sorted(tmp.rglob("*")) if p.is_file()}
        sources = [{"kind": "dataset", "dataset": col.dataset, "input": Path(cfg.input).name,
                    "path": portable_path(cfg.input, out), "sha256": sums["input"],
                    "questions": len(col.q_ids), "paragraphs": col.paragraphs,
                    "distinct": col.origins.count("dataset"), "skipped": dict(col.report.counts)}]
        if cfg.corpus:
            sources.append({"kind": "corpus", "input": Path(cfg.corpus).name,
                            "path": portable_path(cfg.corpus, out), "sha256": sums["corpus"],
                            "lines": col.corpus_lines, "duplicates": col.corpus_duplicates,
                            "added": col.origins.count("corpus")})
        recorded = cfg.to_dict()
        recorded.update(input=portable_path(cfg.input, out), out=out.name,
                        corpus=portable_path(cfg.corpus, out) if cfg.corpus else None)
        manifest = {
            "kind": KIND, "format": FORMAT, "toolkit": {"name": "rag-curriculum", "version": __version__},
            "bm25s_version": bm25s.__version__, "dataset": col.dataset, "config": recorded,
            "command": portable_command(command, out) if command else command, "sources": sources,
            "tokenizer": cfg.tokenizer_info(), "bm25": cfg.bm25_params(),
            "backend": backend, "passages": len(col), "vocab_size": len(vocab), "depth": depth,
            "questions": len(col.q_ids), "empty_queries": empty, "files": files,
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, ensure_ascii=False) + "\n")
        _commit(tmp, out, cfg.overwrite)
    except BaseException:
        if side is not None:
            side.cancel()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("indexed %d passages (%d questions ranked) in %.1fs", len(col), len(col.q_ids), t3 - t0)
    # timings are returned, not written: the same inputs make the same index, byte for byte
    return {**manifest, "seconds": {"read": round(t1 - t0, 2), "index": round(t2 - t1, 2),
                                    "rank": round(t3 - t2 - wait, 2), "wait": round(wait, 2)}}


#: Marks an ``--overwrite`` in place (an index folder holding files the toolkit did not write) that has not
#: finished: the old manifest, moved aside before any file is replaced, so a half-replaced folder never reads as
#: an index, and a later ``--overwrite`` still knows it for one of the toolkit's.
REPLACING = ".manifest.json.replacing"


def _old_manifest(d: Path) -> dict[str, Any] | None:
    for name in (MANIFEST, REPLACING):
        try:
            m = json.loads((d / name).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(m, dict) and m.get("kind") == KIND:
            return m
    return None


def _is_index(d: Path) -> bool:
    return _old_manifest(d) is not None


def _owned(manifest: dict[str, Any]) -> set[str]:
    """The files an index's manifest says the toolkit wrote (itself included)."""
    files = manifest.get("files")
    names = {str(n) for n in files} if isinstance(files, (dict, list)) else set()
    return {MANIFEST, REPLACING} | {n for n in names if n and not Path(n).is_absolute() and ".." not in Path(n).parts}


def _check_out(out: Path, overwrite: bool) -> None:
    if out.exists() and not out.is_dir():
        raise IndexError_(f"--out {out} is a file", hint="choose another --out")
    blocker = next((p for p in out.parents if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise IndexError_(f"cannot create --out {out}: {blocker} is a file", hint="choose another --out")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise IndexError_(f"--out {out} exists", hint="pass --overwrite to replace it, or choose another --out")
        if not _is_index(out):
            raise IndexError_(f"--out {out} is not an index of this toolkit; --overwrite only replaces those",
                              hint="choose another --out")


def _commit(tmp: Path, out: Path, overwrite: bool) -> None:
    """Move the finished index into place. An old index holding only the toolkit's files is swapped out whole;
    one holding files a user added (``notes.txt``, a ``mine/`` folder) keeps them, as builds do: only the files
    its manifest lists are replaced (the new manifest last), and the kept ones are named in a warning."""
    _check_out(out, overwrite)
    if out.is_dir() and not any(out.iterdir()):
        out.rmdir()
    if out.exists():
        old_manifest = _old_manifest(out)
        assert old_manifest is not None  # _check_out refused anything else
        owned = _owned(old_manifest)
        kept = foreign_entries(out, owned)
        if kept:
            replace_in_place(tmp, out, owned, old_manifest)
            log.warning("%s: replaced the index's files and kept %d the toolkit did not write: %s", out, len(kept),
                        ", ".join(kept))
            return
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{owner_tag()}")
        os.replace(out, old)
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@dataclass
class Ranking:
    """One question's ranking: passage ids (best first) and their scores; for a question of the indexed file, the
    passage ids of its gold paragraphs as the index read them."""

    ids: Any
    scores: Any
    gold: list[int] | None = None


class CorpusIndex:
    """A loaded index: the BM25 matrix and the stored rankings memory-mapped, the passages an Arrow table over a
    memory map. ``retrieve`` / ``retrieve_many`` rank passages for new questions; ``ranking`` returns the
    stored ranking of one of the indexed dataset's questions."""

    def __init__(self, directory: str | Path, *, backend: str = "auto", threads: int = 0) -> None:
        import numpy as np
        import pyarrow as pa

        d = Path(directory)
        self.path = d
        self.manifest = m = read_index_manifest(d)
        problems = []
        for name, size in (m.get("files") or {}).items():
            p = d / name
            if not p.is_file():
                problems.append(f"{name} missing")
            elif p.stat().st_size != size:
                problems.append(f"{name} is {p.stat().st_size} bytes, the manifest says {size}")
        if problems:
            raise IndexError_(f"{d}: the index does not match its manifest: " + "; ".join(problems),
                              hint="build it again with curriculum index ... --overwrite")
        # auto: numba (when installed) on an index of a million passages or more, else numpy (numba compiles for
        # ~10 to 30 s; pass backend="numba" for big batches on a smaller index)
        self.backend = _backend(backend, passages=int(self.manifest["passages"]))
        self.threads = _threads(threads)
        params = json.loads((d / BM25_DIR / "params.index.json").read_text())
        saved = {k: params.get(k) for k in ("k1", "b", "method", "delta")}
        want = {k: m["bm25"][k] for k in saved}
        if saved != want or params.get("num_docs") != m["passages"]:
            raise IndexError_(f"{d}: bm25s's saved parameters {saved} ({params.get('num_docs')} documents) do not "
                              f"match the manifest's {want} ({m['passages']} passages)",
                              hint="build the index again with curriculum index ... --overwrite")
        self._bm25 = None  # the matrix and vocabulary, loaded (memory-mapped) when a question must be retrieved
        with open(d / PASSAGES, "rb") as f:  # a Python mmap, so the answer test can search it in place (norm_spans)
            self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.passages = pa.ipc.open_file(pa.py_buffer(self._mm)).read_all()  # zero-copy over the map
        questions = pa.ipc.open_file(pa.memory_map(str(d / QUESTIONS))).read_all()
        self.ranked_ids = np.load(d / RANKED_IDS, mmap_mode="r")
        self.ranked_scores = np.load(d / RANKED_SCORES, mmap_mode="r")
        self.keys = np.load(d / KEYS)  # in memory: 8 bytes a passage, indexed per question when building
        if (self.passages.num_rows != m["passages"] or questions.num_rows != m["questions"] or len(self.keys) != m["passages"]
                or self.ranked_ids.shape != (m["questions"], m["depth"])):
            raise IndexError_(f"{d}: passage, question or ranking counts differ from the manifest",
                              hint="build the index again with curriculum index ... --overwrite")
        self._q_ids = questions.column("id").to_pylist()
        self._questions = questions
        self._q_lists: tuple[list[str], list[list[int]]] | None = None
        self._q_row = {q: i for i, q in enumerate(self._q_ids)}
        self._cols = [self.passages.column(c) for c in ("title", "text", "norm")]
        self._cache: dict[int, tuple[str, str]] = {}
        self._norms: dict[int, str] = {}
        self._spans: tuple[Any, Any, Any] | None = None
        self._fingerprint: str | None = None

    @property
    def bm25(self) -> Any:
        """bm25s's index, memory-mapped (``BM25.load(mmap=True)``), loaded on first use."""
        if self._bm25 is None:
            import bm25s

            self._bm25 = bm25s.BM25.load(str(self.path / BM25_DIR), mmap=True, backend=self.backend,
                                         show_progress=False)
            self.tokenizer = _tokenizer(self.manifest["tokenizer"]["stopwords"])
            self.tokenizer.word_to_id = self._bm25.vocab_dict
        return self._bm25

    # -- facts
    @property
    def dataset(self) -> str:
        return self.manifest["dataset"]

    @property
    def depth(self) -> int:
        return int(self.manifest["depth"])

    def __len__(self) -> int:
        return int(self.manifest["passages"])

    @property
    def fingerprint(self) -> str:
        """The index's identity: the SHA-256 of its ``manifest.json`` (which holds its sources' checksums, its
        settings and the sizes of its files; the same inputs make the same index, byte for byte). The server
        sends it with every answer, so a client notices an index swapped behind a URL."""
        if self._fingerprint is None:
            self._fingerprint = hashlib.sha256((self.path / MANIFEST).read_bytes()).hexdigest()
        return self._fingerprint

    def describe(self, out: str | Path | None = None) -> dict[str, Any]:
        """What a build's manifest records about the index it used."""

        m = self.manifest
        return {"path": portable_path(str(self.path), out) if out else str(self.path), "dataset": m["dataset"],
                "passages": m["passages"], "depth": m["depth"], "bm25": m["bm25"], "tokenizer": m["tokenizer"],
                "bm25s_version": m["bm25s_version"],
                "sources": [{k: s.get(k) for k in ("kind", "input", "sha256")} for s in m["sources"]]}

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

    def indexed(self, dataset: str, sha256: str | None) -> bool:
        """Whether this index was built from that very file (same dataset, same SHA-256) by this toolkit version:
        then its questions' gold passage ids are that file's gold paragraphs as the same loader reads them."""
        return bool(sha256) and (self.manifest.get("toolkit") or {}).get("version") == __version__ and any(
            s.get("kind") == "dataset" and s.get("dataset") == dataset and s.get("sha256") == sha256
            for s in self.manifest["sources"])

    def gold_keys(self, ex: Any, pids: list[int] | None = None) -> list[int] | None:
        """The passage hashes of the example's gold paragraphs (in document order) from the index, when the index
        holds its question (same id and text) with the same gold paragraphs; None otherwise (then hash them).
        ``pids``: the gold passage ids of its :class:`Ranking`, when already looked up."""
        if pids is None:
            row = self._q_row.get(ex.id)
            if row is None or self._q()[0][row] != ex.question:
                return None
            pids = self._q()[1][row]
        gold = [d for d in ex.documents if d.is_gold]
        if len(pids) != len(gold):
            return None
        for pid, d in zip(pids, gold, strict=True):
            if self.passage(pid) != (d.title, d.text):
                return None
        return self.keys[pids].tolist() if pids else []

    # -- rankings
    def stored(self, qid: str, question: str) -> Ranking | None:
        """The stored ranking of question ``qid`` of the indexed file (None when the index has no such question,
        or its text differs: then it was another file's question)."""
        row = self._q_row.get(qid)
        if row is None or self._q()[0][row] != question:
            return None
        return Ranking(self.ranked_ids[row], self.ranked_scores[row])

    def retrieve_many(self, questions: list[str], k: int | None = None, *, threads: int | None = None):
        """The ``k`` (default: the index's depth) best passages of each question: (ids, scores) arrays, one row per
        question, best first, ties by lower id; ids -1 where the question has no indexed token."""
        k = min(k or self.depth, len(self))
        bm25 = self.bm25
        queries = tokenize(self.tokenizer, questions, update_vocab=False)
        return rank(bm25, queries, k, threads=threads or self.threads, empty_id=self.bm25.vocab_dict.get(""))

    def retrieve(self, question: str, k: int = 10) -> list[tuple[int, float]]:
        """The ``k`` best (passage id, score) pairs for one question, best first."""
        ids, scores = self.retrieve_many([question], k, threads=1)
        return [(int(i), float(s)) for i, s in zip(ids[0], scores[0], strict=True) if i >= 0]

    def rankings(self, examples: list[Any], *, progress: bool = False) -> dict[str, Ranking]:
        """The ranking of each example (keyed by id): the stored one when the index has the question, else
        retrieved now, all the missing ones in one batch."""
        import numpy as np

        out: dict[str, Ranking] = {}
        missing, found, rows = [], [], []
        texts, golds = self._q() if examples else ([], [])
        for ex in examples:
            row = self._q_row.get(ex.id)
            if row is None or texts[row] != ex.question:
                missing.append(ex)
            else:
                found.append(ex)
                rows.append(row)
        if rows:  # one read of the mapped rankings, into memory
            ids = np.asarray(self.ranked_ids[np.asarray(rows)])
            scores = np.asarray(self.ranked_scores[np.asarray(rows)])
            for i, (ex, row) in enumerate(zip(found, rows, strict=True)):
                out[ex.id] = Ranking(ids[i], scores[i], golds[row])
        if missing:
            log.info("retrieving for %d question(s) not ranked in the index", len(missing))
            ids, scores = self.retrieve_many([ex.question for ex in missing])
            for i, ex in enumerate(missing):
                out[ex.id] = Ranking(ids[i], scores[i])
        return out


def read_index_manifest(directory: str | Path) -> dict[str, Any]:
    d = Path(directory)
    if not d.is_dir():
        raise IndexError_(f"{d}: no such index directory",
                          hint="build one with curriculum index --dataset NAME --input FILE --out DIR")
    p = d / MANIFEST
    if not p.is_file():
        raise IndexError_(f"{d}: no {MANIFEST}, so it is not an index, or its writing did not finish",
                          hint="build it with curriculum index --dataset NAME --input FILE --out DIR")
    try:
        m = json.loads(p.read_text())
    except ValueError as e:
        raise IndexError_(f"{p}: invalid JSON ({e})", hint="build the index again") from None
    if not isinstance(m, dict) or m.get("kind") != KIND:
        raise IndexError_(f"{d}: not a BM25 index of this toolkit (manifest kind {m.get('kind') if isinstance(m, dict) else None!r})",
                          hint="pass the --out of curriculum index")
    if m.get("format") != FORMAT:
        raise IndexError_(f"{d}: index format {m.get('format')!r}; this toolkit reads {FORMAT}",
                          hint="build the index again with this version")
    from importlib.metadata import version

    have = version("bm25s")  # without importing it (a second or so): the matrix is loaded only when needed
    if str(m.get("bm25s_version", "")).split(".")[:2] != have.split(".")[:2]:
        raise IndexError_(f"{d}: built with bm25s {m.get('bm25s_version')}, this environment has {have}",
                          hint="build the index again, or install the bm25s it was built with")
    return m


def load_index(directory: str | Path, **kw: Any) -> CorpusIndex:
    return CorpusIndex(directory, **kw)
