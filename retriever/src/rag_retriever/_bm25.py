"""The BM25 retriever kind: two scoring presets on one engine of compressed postings (:mod:`._postings`).

* **bm25s** (the default, as the toolkit always scored): bm25s's tokenizer (lower case, runs of two or more word
  characters, its English stop words, no stemmer), bm25s's variants and their float32 / float64 steps, each
  passage's exact length; rankings and scores equal to bm25s's own (``tests/retrieval/test_index_flat.py`` runs
  bm25s beside it).
* **lucene** (``--bm25 lucene``; chosen by itself for Search-R1's corpora): pyserini's defaults as Search-R1 builds
  and queries them: each passage's ``contents`` through pyserini's English analyzer (:mod:`._analysis`), Lucene's
  ``BM25Similarity`` (k1 0.9, b 0.4, its idf, its one-byte length norms, its float arithmetic), the query as
  pyserini's bag of words (each distinct term once, boosted by its count), ties in Lucene's order (the ``id``
  string) and the scores as pyserini returns them (Anserini's ``ScoreTiesAdjusterReranker``: rounded to 1e-4, a
  run of near-ties lowered by 1e-6 each). See docs/retrieval.md, "The Lucene preset".

**Build** (:class:`BM25Builder`). Passages arrive in blocks; each is analysed and its term ids appended to a
temporary file (int32, on disk); :func:`._postings.write_postings` then lays the postings out term by term and
compresses them. Memory is the vocabulary plus one block, whatever the corpus.

**Search** (:class:`BM25Searcher`). The postings are memory-mapped and decoded in the compiled loop (block-max
WAND); the vocabulary is read from ``bm25/vocab.arrow`` (the words sorted by their UTF-8 bytes, a word's id its
row: binary search, nothing loaded at start-up).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import re
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rag_plumbing._settings import rule

from ._bm25_parts import VOCAB_BLOCK, BM25Error
from ._integrity import load_npy
from ._kinds import RetrieverKind
from .errors import UsageError

if TYPE_CHECKING:
    from ._config import IndexConfig

log = logging.getLogger(__name__)

BM25_DIR = "bm25"
VOCAB = "vocab"  # inside BM25_DIR: vocab.npy / vocab_off.npy, the words front-coded in UTF-8 byte order
PARAMS = "params.json"  # inside BM25_DIR: the preset, its parameters and the collection's statistics
TOKENS = ".tokens.int32"  # the build's temporary token file
ENGINE = 1  # the postings format's version (params.json)


#: bm25s's scoring variants the index accepts (``BM25(method=...)``; the IDF uses the same variant).
METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")
#: The token pattern (bm25s's default splitter): runs of two or more word characters.
SPLITTER = r"(?u)\b\w\w+\b"
#: ``--bm25``: the BM25 scoring presets (``auto`` picks one from the input).
BM25_PRESETS = ("auto", "bm25s", "lucene")
#: Each preset's k1 and b (bm25s's defaults; Anserini's, which pyserini and Search-R1 run).
PRESET_K1_B = {"bm25s": (1.5, 0.75), "lucene": (0.9, 0.4)}


@dataclass
class BM25Options:
    """The BM25 kind's options (``curriculum index --k1 ...``; fields of IndexConfig)."""

    k1: float | None = rule(None, ge=0, le=100, help=(
        "BM25 k1 (term-frequency saturation); default: the preset's (bm25s 1.5, lucene 0.9)."))
    b: float | None = rule(None, ge=0, le=1, help=(
        "BM25 b (length normalisation); default: the preset's (bm25s 0.75, lucene 0.4)."))
    method: str = rule("lucene", choices=METHODS, help=(
        "BM25 variant (bm25s method): lucene (default) | robertson | atire | bm25l | bm25+. bm25s preset only."))
    delta: float = rule(0.5, ge=0, le=100, help="delta of the bm25l and bm25+ variants (ignored by the others).")
    stopwords: str = rule("en", choices=("en", "none"), help=(
        "Stop words dropped by the tokenizer: en (bm25s's English list) | none. bm25s preset only."))
    bm25: str = rule("auto", choices=BM25_PRESETS, help=(
        "BM25 scoring: auto (lucene for a Search-R1 corpus of {\"id\", \"contents\"} lines or --dataset search-r1, "
        "else bm25s) | bm25s (bm25s's tokenizer and variants: --method, --stopwords, --k1 1.5, --b 0.75) | lucene "
        "(pyserini's defaults, what Search-R1's BM25 retriever ranks with: Lucene's English analyzer on each "
        "passage's contents, Lucene's BM25 with k1 0.9 and b 0.4, its length norms and tie order)."))


def search_r1_corpus(path: str | None) -> bool:
    """Whether the corpus file's first line is Search-R1's (and FlashRAG's) ``{"id", "contents"}`` layout."""
    if not path:
        return False
    try:
        with open(path, encoding="utf-8-sig") as f:  # (a byte-order mark is the corpus reader's too: not a line)
            for line in f:
                if line.strip():
                    rec = json.loads(line)
                    return isinstance(rec, dict) and "contents" in rec and "text" not in rec
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return False


def check_config(cfg: IndexConfig) -> None:
    """``--bm25 auto`` made a preset (recorded as such), the preset's k1 and b where none were given; a bm25s
    option given to the Lucene preset refused (one line, before anything is written)."""
    if cfg.bm25 == "auto":
        cfg.bm25 = "lucene" if (cfg.dataset == "search-r1" or search_r1_corpus(cfg.corpus)) else "bm25s"
    if cfg.bm25 == "lucene":
        given = [f"--{f}" for f, default in (("method", "lucene"), ("stopwords", "en"), ("delta", 0.5))
                 if getattr(cfg, f) != default]
        if given:
            raise UsageError(f"{given[0]} is a bm25s option; --bm25 lucene analyzes and scores as pyserini does",
                             hint="drop it, or pass --bm25 bm25s")
    k1, b = PRESET_K1_B[cfg.bm25]
    cfg.k1 = k1 if cfg.k1 is None else cfg.k1
    cfg.b = b if cfg.b is None else cfg.b


def preset(cfg: IndexConfig) -> str:
    """The configuration's BM25 preset (``auto`` resolved)."""
    if cfg.bm25 == "auto" or cfg.k1 is None or cfg.b is None:
        check_config(cfg)
    return cfg.bm25


def tokenizer_info(cfg: IndexConfig) -> dict[str, Any]:
    """The tokenizer, as the manifest records it (queries are tokenized the same way)."""
    if preset(cfg) == "lucene":
        return {"library": "rag-curriculum", "analyzer": "lucene-english",
                "as": "pyserini's default (Anserini DefaultEnglishAnalyzer, Lucene 9)",
                "chain": ["StandardTokenizer (UAX#29, max 255)", "EnglishPossessiveFilter", "LowerCaseFilter",
                          "StopFilter (33 English stop words)", "PorterStemFilter"], "fields": "contents"}
    return {"library": "bm25s", "class": "bm25s.tokenization.Tokenizer", "lower": True,
            "splitter": SPLITTER, "stopwords": None if cfg.stopwords == "none" else cfg.stopwords,
            "stemmer": None, "fields": "title + ' ' + text"}


def bm25_params(cfg: IndexConfig) -> dict[str, Any]:
    """The scoring parameters, as the manifest records them (the bm25s preset's as they always were).

    >>> from rag_retriever import IndexConfig
    >>> bm25_params(IndexConfig(dataset="musique", input="f.jsonl"))["k1"]
    1.5
    >>> bm25_params(IndexConfig(dataset="musique", input="f.jsonl", bm25="lucene"))["k1"]
    0.9
    """
    if preset(cfg) == "lucene":
        return {"preset": "lucene", "k1": cfg.k1, "b": cfg.b, "similarity": "BM25Similarity (Lucene 9)",
                "norms": "one byte (SmallFloat.intToByte4)", "query": "bag of words, boosted by counts",
                "ties": "id string", "scores": "pyserini's (rounded to 1e-4, ties lowered by 1e-6)"}
    return {"k1": cfg.k1, "b": cfg.b, "method": cfg.method, "idf_method": cfg.method, "delta": cfg.delta,
            "dtype": "float32"}


#: What to do about postings that are crafted or damaged (their records made to match, so only reading finds it).
CRAFTED_HINT = "build the index again with curriculum index ... --overwrite (or get it again from its source)"


def tokenizer(stopwords: str | None):
    """bm25s's tokenizer as the bm25s preset uses it: lower case, :data:`SPLITTER`, the stop words, no stemmer."""
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


def check_vocab(path: Path, blob: Any, off: Any, terms: int, *, compiled: bool) -> None:
    """The front-coded vocabulary within the bounds the compiled lookup reads it in: ``vocab_off.npy`` (int64)
    from 0, never down, ending at ``vocab.npy``'s length, then its count of words, the postings' ``terms``, one
    block a :data:`VOCAB_BLOCK` words; every word inside its block (compiled: a walk of every word,
    :func:`._postings.vocab_check`). :class:`._postings.Crafted` names the file, the value and where."""
    import numpy as np

    from ._postings import Crafted

    names = (f"{path.stem}.npy", f"{path.stem}_off.npy")
    if blob.dtype != np.uint8 or blob.ndim != 1:
        raise Crafted(names[0], f"an array of {blob.dtype} in {blob.ndim} dimension(s); the lookup reads uint8 in 1")
    if off.dtype != np.int64 or off.ndim != 1 or len(off) < 2:
        raise Crafted(names[1], f"an array of {off.dtype} in {off.ndim} dimension(s) of {len(off)} entries; the "
                                "lookup reads int64 in 1, at least 2")
    starts, count = off[:-1], int(off[-1])
    if count != terms:
        raise Crafted(names[1], f"{count:,} words at position {len(off) - 1:,} (its last); the postings hold "
                                f"{terms:,} terms")
    blocks = len(starts) - 1
    if blocks != (count + VOCAB_BLOCK - 1) // VOCAB_BLOCK:
        raise Crafted(names[1], f"{blocks:,} blocks of words for {count:,} words; {VOCAB_BLOCK} words make a block")
    if starts[0] != 0:
        raise Crafted(names[1], f"{int(starts[0]):,} at position 0; the first block starts at 0")
    down = np.flatnonzero(np.diff(starts) < 0)
    if len(down):
        at = int(down[0]) + 1
        raise Crafted(names[1], f"{int(starts[at]):,} at position {at:,}, below {int(starts[at - 1]):,} before it")
    if int(starts[-1]) != len(blob):
        raise Crafted(names[1], f"{int(starts[-1]):,} at position {blocks:,} (the end); {names[0]} holds "
                                f"{len(blob):,} bytes")
    if compiled:
        from ._postings import kernels

        at = int(kernels()["vocab_check"](blob, starts, VOCAB_BLOCK, count))
        if at >= 0:
            raise Crafted(names[0], f"the word at byte {at:,} runs past its block, or shares more with the word "
                                    f"before than that word holds (block {int(np.searchsorted(starts, at, 'right')) - 1:,}"
                                    f" of {names[1]})")


class Vocabulary:
    """Word -> id over the front-coded vocabulary (:func:`write_vocab`), memory-mapped: a binary search over the
    blocks' first words, then the block decoded (no dict is built, so a vocabulary of millions of words is ready
    at once); found words are kept in a small cache."""

    def __init__(self, path: Path, *, compiled: bool = False, terms: int | None = None) -> None:
        import numpy as np

        path = Path(path)
        self._blob = memoryview(load_npy(path.with_name(path.stem + ".npy")))
        off = load_npy(path.with_name(path.stem + "_off.npy"))
        if terms is not None:  # the bounds vocab_find reads within (terms: the postings' count of terms)
            check_vocab(path, np.asarray(load_npy(path.with_name(path.stem + ".npy"))), np.asarray(off), terms,
                        compiled=compiled)
        self._off = off[:-1]
        self._n = int(off[-1])
        self._blocks = len(self._off) - 1
        self._cache: dict[str, int | None] = {}
        self._lock = threading.Lock()
        self._arr = np.asarray(load_npy(path.with_name(path.stem + ".npy")))
        self._offs = np.asarray(off[:-1], dtype=np.int64)
        self._find = None
        if compiled:
            from ._postings import kernels

            self._find = kernels()["vocab_find"]

    def __len__(self) -> int:
        return self._n

    def _entry(self, p: int, prev: bytes) -> tuple[bytes, int]:
        blob = self._blob
        shared = blob[p]
        p += 1
        n = shift = 0
        while True:
            byte = blob[p]
            p += 1
            n |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        return prev[:shared] + bytes(blob[p:p + n]), p + n

    def _head(self, b: int) -> bytes:
        return self._entry(int(self._off[b]), b"")[0]

    def block(self, b: int) -> list[bytes]:
        """The words of block ``b``."""
        p, end = int(self._off[b]), int(self._off[b + 1])
        out, prev = [], b""
        while p < end:
            prev, p = self._entry(p, prev)
            out.append(prev)
        return out

    def __getitem__(self, i: int) -> bytes:  # the i-th word's bytes
        return self.block(i // VOCAB_BLOCK)[i % VOCAB_BLOCK]

    def get(self, word: str) -> int | None:
        hit = self._cache.get(word, -1)
        if hit != -1:
            return hit  # type: ignore[return-value]
        key = word.encode("utf-8")
        if self._find is not None:
            import numpy as np

            i = self._find(self._arr, self._offs, np.frombuffer(key, np.uint8), VOCAB_BLOCK)
            got = None if i < 0 else int(i)
            with self._lock:
                if len(self._cache) > 200_000:
                    self._cache.clear()
                self._cache[word] = got
            return got
        lo, hi = 0, self._blocks  # the last block whose first word is <= key
        while lo < hi:
            mid = (lo + hi) >> 1
            if self._head(mid) <= key:
                lo = mid + 1
            else:
                hi = mid
        got = None
        if lo:
            b = lo - 1
            for j, w in enumerate(self.block(b)):
                if w == key:
                    got = b * VOCAB_BLOCK + j
                    break
                if w > key:
                    break
        with self._lock:
            if len(self._cache) > 200_000:
                self._cache.clear()
            self._cache[word] = got
        return got


class BM25Builder:
    """The BM25 kind's side of a build: :meth:`add` each block of passages, then :meth:`finish`."""

    def __init__(self, cfg: IndexConfig, tmp: Path, *, backend: str) -> None:
        self.cfg, self.tmp, self.backend = cfg, tmp, backend
        self.preset = preset(cfg)
        from ._analysis import Bm25sWords, LuceneEnglishAnalyzer, TermIds

        if self.preset == "lucene":
            self.terms = TermIds(LuceneEnglishAnalyzer())
            self.doc_ids: list[str] = []  # each passage's served id (Lucene's tie order)
        else:  # bm25s's tokenizer, its tokens and lengths exactly (tests/retrieval/test_index_flat.py)
            self.terms = TermIds(Bm25sWords(stopword_list(None if cfg.stopwords == "none" else cfg.stopwords)))
        self._file = open(tmp / TOKENS, "wb")
        self._lengths: list[Any] = []
        self.tokens = 0
        self.passages = 0
        self.progress = None  # set by the build: called with the passages done

    def add(self, block: Any) -> None:
        if self.preset == "lucene":
            tokens, lengths = self.terms.ids(block.contents())
            self.doc_ids.extend(str(self.passages + i) if pid is None else pid for i, pid in enumerate(block.ids))
        else:
            tokens, lengths = self.terms.ids([f"{t} {x}" for t, x in zip(block.titles, block.texts, strict=True)])
        self._file.write(tokens.tobytes())
        self._lengths.append(lengths)
        self.tokens += len(tokens)
        self.passages += len(block)
        if self.progress:
            self.progress(len(block))

    def finish(self, *, bar: Any = None, task: Any = None) -> dict[str, Any]:
        """The postings into ``tmp/bm25`` (the temporary token file is removed); the manifest's BM25 facts."""
        import numpy as np

        from ._postings import write_postings

        self._file.close()
        lengths = np.concatenate(self._lengths) if self._lengths else np.zeros(0, np.int64)
        path = self.tmp / TOKENS
        tokens = np.memmap(path, dtype=np.int32, mode="r") if self.tokens else np.zeros(0, np.int32)
        vocab = self.terms.vocab
        self.terms.release()  # its hash table is not needed past the last block, and the postings pass needs memory
        params = bm25_params(self.cfg)
        try:
            stats = write_postings(self.tmp / BM25_DIR, tokens, lengths, vocab, params,
                                   doc_ids=self.doc_ids if self.preset == "lucene" else None,
                                   docs_per_step=self.cfg.block, bar=bar, task=task)
        finally:
            del tokens
            path.unlink(missing_ok=True)
        facts: dict[str, Any] = {"bm25": params, "tokenizer": tokenizer_info(self.cfg)}
        if self.preset == "bm25s":
            import bm25s

            facts["bm25s_version"] = bm25s.__version__
        facts.update({"backend": self.backend, "vocab_size": len(vocab), "postings": stats["postings"]})
        return facts


# -- search -------------------------------------------------------------------------------------------------
def backend(name: str) -> str:
    """``auto`` is numba when it is installed (its compiled search is cached on disk: a process after the first
    loads it in about a second), else numpy (the same functions, uncompiled); the rankings are the same."""
    if name != "auto":
        return name
    try:
        import numba  # noqa: F401
    except ImportError:
        return "numpy"
    return "numba"


class BM25Searcher:
    """The BM25 postings of an index directory, memory-mapped, and its vocabulary (:class:`Vocabulary`): ``search``
    ranks new queries (ids -1 where a query has no indexed word)."""

    def __init__(self, directory: Path, manifest: dict[str, Any], *, backend_name: str = "auto",
                 threads: int = 0, checked: bool = True) -> None:
        from ._postings import Crafted, PostingsIndex

        d = Path(directory) / BM25_DIR
        self.directory = Path(directory)
        params = _check_params(directory, manifest)
        self.backend = backend(backend_name)
        self.threads = threads or (os.cpu_count() or 1)
        try:  # arrays of the wrong shapes for each other (their records forged with them): one line
            self.postings = PostingsIndex(d, params, compiled=self.backend == "numba", checked=checked)
            self.vocab = Vocabulary(d / VOCAB, compiled=self.backend == "numba",
                                    terms=len(self.postings.term_first) - 1 if checked else None)
        except Crafted as e:  # a value outside what the compiled search reads within: the file, value, position
            raise BM25Error(f"{directory}: {BM25_DIR}/{e.name}: {e.what}: the file was crafted or damaged, and "
                            "the search would read outside it", hint=CRAFTED_HINT) from None
        except (IndexError, ValueError, TypeError) as e:
            raise BM25Error(f"{d}: the postings' arrays do not fit together ({type(e).__name__}: {str(e)[:160]}): "
                            "the files are damaged", hint="build the index again with curriculum index ... "
                                                          "--overwrite") from None
        self.preset = self.postings.preset
        self.num_docs = self.postings.num_docs
        self.prune = True  # block-max WAND where it applies (False: the exhaustive sum; the same answers)
        self._split = re.compile(SPLITTER).findall  # stop words are never in the vocabulary: dropped as unknown
        self._analyzer = None
        if self.preset == "lucene":
            from ._analysis import LuceneEnglishAnalyzer

            self._analyzer = LuceneEnglishAnalyzer()

    def query_terms(self, query: str) -> tuple[list[int], list[int], list[float]]:
        """A query as the preset reads it: (its distinct indexed terms, its tokens in order as indices into them,
        each distinct term's boost). bm25s: the words bm25s's tokenizer finds, lower case, unknown words and stop
        words dropped, a repeated word counted again; Lucene: pyserini's analyzer, then its bag of words (each
        distinct term once, boosted by its count)."""
        get = self.vocab.get
        if self._analyzer is not None:
            counts = Counter(self._analyzer.terms(query))
            terms, boosts = [], []
            for term, c in counts.items():
                tid = get(term)
                if tid is not None:
                    terms.append(tid)
                    boosts.append(float(c))
            return terms, list(range(len(terms))), boosts
        seen: dict[int, int] = {}
        order = []
        for word in self._split(query.lower()):
            tid = get(word)
            if tid is not None:
                order.append(seen.setdefault(tid, len(seen)))
        return list(seen), order, [1.0] * len(seen)

    def token_ids(self, query: str) -> list[int]:
        """The query's indexed terms, in order (bm25s: with repeats)."""
        terms, order, _ = self.query_terms(query)
        return [terms[i] for i in order]

    def describe(self) -> dict[str, Any]:
        return {"kind": "bm25", "backend": self.backend, "preset": self.preset}

    def warm(self) -> None:
        """Compile (or load from the cache) the search and the query analyzer, and run a query of a word the index
        holds: the first request is not slow."""
        self.query_terms("warm up")
        self.postings.warm(self.threads)

    def search(self, queries: list[str], k: int, *, threads: int | None = None):
        """The ``k`` best passages of each query: (ids int32, scores float32), one row per query, best first, ties
        by the preset's order; ids -1 where the query has no indexed word (or past its matches: the Lucene preset
        returns only passages that hold a query term, as pyserini does; bm25s fills up with score-0 passages)."""
        from ._postings import Crafted

        k = max(0, min(k, self.num_docs))
        parsed = [self.query_terms(q) for q in queries]
        try:
            return self.postings.search(parsed, k, threads=threads or self.threads, prune=self.prune)
        except Crafted as e:  # a block whose gaps run past its recorded end: refused, never read past
            raise BM25Error(f"{self.directory}: {BM25_DIR}/{e.name}: {e.what}: the file was crafted or damaged",
                            hint=CRAFTED_HINT) from None


#: What params.json holds beside the preset's settings: the postings format's version and the collection's
#: statistics.
PARAMS_FACTS = ("engine", "num_docs", "postings", "blocks", "doc_count", "sum_total_term_freq", "avgdl")


def _show(value: Any) -> str:
    text = "absent" if value is None else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_params(directory: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """The postings' saved parameters, which must be the manifest's: a difference is named setting by setting."""
    try:
        params = json.loads((Path(directory) / BM25_DIR / PARAMS).read_text())
    except (OSError, ValueError) as e:
        raise BM25Error(f"{directory}: the BM25 index's {PARAMS} cannot be read ({e})",
                        hint="build the index again with curriculum index ... --overwrite") from None
    want = manifest.get("bm25") if isinstance(manifest.get("bm25"), dict) else {}
    saved = {k: v for k, v in params.items() if k not in PARAMS_FACTS} if isinstance(params, dict) else {}
    differ = [f"bm25.{k} {_show(saved.get(k))} there, {_show(want.get(k))} in manifest.json"
              for k in [*want, *(k for k in saved if k not in want)] if saved.get(k) != want.get(k)]
    got = params if isinstance(params, dict) else {}
    if got.get("engine") != ENGINE:
        differ.append(f"postings format {_show(got.get('engine'))}, this toolkit reads {ENGINE}")
    if got.get("num_docs") != manifest.get("passages"):
        differ.append(f"{_show(got.get('num_docs'))} documents, manifest.json says {manifest.get('passages')} "
                      "passages")
    if differ:
        raise BM25Error(f"{BM25_DIR}/{PARAMS}, what the postings were built with, disagrees with manifest.json: "
                        + "; ".join(differ), hint="build the index again with curriculum index ... --overwrite")
    return params


def check_version(manifest: dict[str, Any], where: Path) -> None:
    """An index whose postings' saved parameters are not its manifest's is refused (naming the settings that
    differ: a preset edited in the manifest is named as such), and so is one of the bm25s preset built with another
    bm25s minor version (its tokenizer may split otherwise)."""
    from importlib.metadata import version

    _check_params(where, manifest)
    if (manifest.get("bm25") or {}).get("preset", "bm25s") == "bm25s":
        have = version("bm25s")  # without importing it
        if str(manifest.get("bm25s_version", "")).split(".")[:2] != have.split(".")[:2]:
            built = manifest.get("bm25s_version")
            raise BM25Error(f"built with bm25s {built}, this environment has {have}" if built else
                            f"manifest.json records no bm25s_version, which an index of the bm25s preset holds "
                            f"(this environment has bm25s {have})",
                            hint="build the index again, or install the bm25s it was built with")


#: The kind's files compiled code reads without bounds checks (the postings and the vocabulary, decoded by the
#: numba search): hashed whole at every open, so a damaged one is refused before it is read (:mod:`._integrity`).
NATIVE = (BM25_DIR + "/",)
#: The manifest's keys this kind writes (what ``describe`` and ``/manifest`` show of it).
MANIFEST_KEYS = ("bm25", "tokenizer", "bm25s_version", "backend", "vocab_size")


def verify(directory: Path, manifest: dict[str, Any]) -> None:
    """``curriculum validate``'s (and ``--verify``'s) reading of the BM25 postings: every array checked at open,
    then every posting decoded, each block's gaps ending at its recorded last passage and no posting above its
    block's stored maximum (:func:`._postings.verify_postings`)."""
    from ._postings import Crafted, verify_postings

    s = BM25Searcher(directory, manifest)
    try:
        verify_postings(s.postings)
    except Crafted as e:
        raise BM25Error(f"{directory}: {BM25_DIR}/{e.name}: {e.what}: the file was crafted or damaged",
                        hint=CRAFTED_HINT) from None


def _open(directory: Path, manifest: dict[str, Any], *, backend: str = "auto", threads: int = 0,
          device: str | None = None, encoder: str | None = None) -> BM25Searcher:
    return BM25Searcher(directory, manifest, backend_name=backend, threads=threads)


def _builder(cfg: IndexConfig, tmp: Path, **kw: Any) -> BM25Builder:
    return BM25Builder(cfg, tmp, backend=backend(cfg.backend))


def summary(manifest: dict[str, Any]) -> str:
    """One line on a BM25 index's settings."""
    bm = manifest["bm25"]
    if bm.get("preset") == "lucene":  # pyserini's defaults only at its k1 and b (--k1 / --b may change them)
        own = (bm.get("k1"), bm.get("b")) == PRESET_K1_B["lucene"]
        label = "pyserini's defaults" if own else "pyserini's analyzer and scoring, k1 and b given"
        return f"lucene ({label}) k1={bm['k1']} b={bm['b']}"
    return f"bm25s {manifest['bm25s_version']}, {bm['method']} k1={bm['k1']} b={bm['b']}"


KIND = RetrieverKind("bm25", builder=_builder, open=_open, check=check_version, manifest_keys=MANIFEST_KEYS,
                     description="BM25 (bm25s's scoring, or Lucene's as pyserini runs it): sparse lexical ranking",
                     options=BM25Options, check_config=check_config, label="BM25", negatives="BM25 hard negatives",
                     summary=summary, warm_on_build=True, native=NATIVE, verify=verify)
