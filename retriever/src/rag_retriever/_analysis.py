"""Text analysis for BM25: pyserini's default English analyzer, Lucene's chain as Anserini's
``DefaultEnglishAnalyzer`` builds it (what Search-R1's BM25 index and its queries go through):

1. ``StandardTokenizer``: UAX#29 word breaking as Lucene's grammar reads it, tokens of at most 255 UTF-16 code
   units (:mod:`._uax29`);
2. ``EnglishPossessiveFilter``: a trailing ``'s`` / ``’s`` / ``＇s`` (or ``S``) cut;
3. ``LowerCaseFilter``: Java's ``Character.toLowerCase``, one code point at a time (``İ`` is ``i``, a final ``Σ``
   is ``σ``: not Python's ``str.lower``);
4. ``StopFilter`` with Lucene's English stop set (the 33 words of :data:`ENGLISH_STOP_WORDS`);
5. ``PorterStemFilter``: Martin Porter's stemmer as Lucene runs it (:mod:`._porter`; checked against Lucene's on
   every word of the test corpora).

The tokenizer scans a whole block of texts at once (numba); the rest of the chain runs once per distinct surface
form, cached, so analysing a corpus costs a scan of its characters and a dictionary look-up per token.

>>> LuceneEnglishAnalyzer().terms("John's cars aren't O'Neil's; the 1,234.56 ponies")
['john', 'car', "aren't", "o'neil", '1,234.56', 'poni']
"""

from __future__ import annotations

import json
import threading
from importlib import resources
from typing import Any

from ._porter import stem_many
from ._uax29 import compile_all, hash_kernels

#: Lucene's ``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET`` (pyserini's default stop words).
ENGLISH_STOP_WORDS = frozenset((
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no", "not", "of",
    "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to", "was", "will",
    "with"))

#: Surface forms whose terms a query analyzer keeps (then it starts again).
CACHE_TERMS = 1 << 20
#: Characters the tokenizer scans at once (its token spans: 16 bytes a character at most).
SCAN_CHARS = 1 << 20

_TABLES: tuple[Any, Any, Any] | None = None
_TABLES_LOCK = threading.Lock()


def _tables():
    """(class table, lower-case table, the compiled scan), made once per process."""
    global _TABLES
    with _TABLES_LOCK:
        if _TABLES is None:
            import numpy as np

            table = json.loads(resources.files(__package__).joinpath("uax29_table.json").read_text("utf-8"))
            runs = np.asarray(table["runs"], dtype=np.int64).reshape(-1, 2)
            lengths = np.diff(np.append(runs[:, 0], 0x110000))
            cls = np.repeat(runs[:, 1].astype(np.uint16), lengths)
            lower = np.arange(0x110000, dtype=np.uint32)
            pairs = np.asarray(table["lower"], dtype=np.int64).reshape(-1, 2)
            lower[pairs[:, 0]] = pairs[:, 1]
            _TABLES = (cls, lower, compile_all())
        return _TABLES


class LuceneEnglishAnalyzer:
    """pyserini's default analyzer (see the module docstring). ``terms(text)`` analyses one text; ``surfaces``
    tokenizes many at once; :meth:`term_ids` analyses a block into a vocabulary's ids (what an index build uses).
    Safe to share between threads (the caches only grow)."""

    name = "lucene-english"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._terms: dict[str, str | None] = {}  # surface (lower case, possessive cut) -> its term, None: a stop word

    def describe(self) -> dict[str, Any]:
        return {"analyzer": "lucene-english", "tokenizer": "StandardTokenizer (UAX#29, Unicode 9, max 255)",
                "filters": ["EnglishPossessiveFilter", "LowerCaseFilter", "StopFilter(english, 33 words)",
                            "PorterStemFilter"], "as": "pyserini / Anserini DefaultEnglishAnalyzer (Lucene 9.5)"}

    def surfaces(self, texts: list[str]):
        """The tokens of every text after the tokenizer, the possessive filter and lower-casing (before stop words
        and stemming): one flat list of strings and each text's count (int64 array). Scanned in slices of about
        :data:`SCAN_CHARS` characters (a slice's token spans take 16 bytes a character at most)."""
        import numpy as np

        n = len(texts)
        counts = np.zeros(n, dtype=np.int64)
        out: list[str] = []
        lo = 0
        while lo < n:
            hi, size = lo, 0
            while hi < n and (hi == lo or size + len(texts[hi]) <= SCAN_CHARS):
                size += len(texts[hi])
                hi += 1
            out += self._scan(texts[lo:hi], counts[lo:hi])
            lo = hi
        return out, counts

    def _scan(self, texts: list[str], counts: Any) -> list[str]:
        cps, starts, stops, t = self.spans(texts, counts)
        low = cps.tobytes().decode("utf-32-le", "surrogatepass")
        return [low[a:b] for a, b in zip(starts[:t].tolist(), stops[:t].tolist(), strict=True)]

    def spans(self, texts: list[str], counts: Any):
        """The tokenizer on ``texts`` (their code points lower-cased in place as Lucene lower-cases tokens, the
        possessive cut): (code points, token starts, token ends, number of tokens); ``counts`` gets each text's."""
        import numpy as np

        cls, lower, scan = _tables()
        joined = "".join(texts)
        cps = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32).copy()
        ends = np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)))
        starts = np.empty(len(cps) + 1, dtype=np.int64)  # at most one token a code point
        stops = np.empty(len(cps) + 1, dtype=np.int64)
        t = scan(cls, lower, cps, ends, starts, stops, counts, True)
        return cps, starts, stops, t

    def new_terms(self, surfaces: list[str]) -> list[str | None]:
        """Each (distinct) surface form's term, None for a stop word, without keeping them (:class:`TermIds`
        keeps its own table)."""
        keep = [s for s in surfaces if s not in ENGLISH_STOP_WORDS]
        stems = dict(zip(keep, stem_many(keep), strict=True))
        return [stems.get(s) for s in surfaces]

    def terms_of(self, surfaces: list[str]) -> list[str | None]:
        """Each surface form's term (None: a stop word), through the cache."""
        cache = self._terms
        missing = set(surfaces).difference(cache)
        if not missing:
            return list(map(cache.__getitem__, surfaces))
        new = list(missing)
        keep = [s for s in new if s not in ENGLISH_STOP_WORDS]
        stems = dict(zip(keep, stem_many(keep), strict=True))
        with self._lock:
            if len(cache) > CACHE_TERMS:  # a long-running server's queries: the cache stays bounded
                cache.clear()
            for s in new:
                cache[s] = stems.get(s)
        return [cache[s] if s in cache else stems.get(s) for s in surfaces]

    def terms(self, text: str) -> list[str]:
        """The analyzed terms of one text, in order (stop words dropped)."""
        surfaces, _ = self.surfaces([text])
        return [t for t in self.terms_of(surfaces) if t is not None]

    def terms_many(self, texts: list[str]) -> list[list[str]]:
        surfaces, counts = self.surfaces(texts)
        flat = self.terms_of(surfaces)
        out, k = [], 0
        for c in counts.tolist():
            out.append([t for t in flat[k:k + c] if t is not None])
            k += c
        return out


_WORD: Any = None


def _isword():
    """Python's ``\\w`` (what bm25s's splitter matches), per code point."""
    global _WORD
    with _TABLES_LOCK:
        if _WORD is None:
            import re

            import numpy as np

            chars = "".join(chr(c) if not 0xD800 <= c < 0xE000 else " " for c in range(0x110000))
            flags = np.zeros(0x110000, dtype=np.bool_)
            flags[[m.start() for m in re.finditer(r"\w", chars)]] = True
            _WORD = flags
        return _WORD


class Bm25sWords:
    """bm25s's tokenizer as the bm25s preset uses it (``lower=True``, the splitter ``(?u)\\b\\w\\w+\\b``, the stop
    words, no stemmer), in the form :class:`TermIds` reads: a text's tokens are the runs of two or more of Python's
    word characters in ``text.lower()``; a text with none is one empty token (as bm25s makes it)."""

    name = "bm25s"
    empty_token = True

    def __init__(self, stopwords: list[str]) -> None:
        self.stop = frozenset(stopwords)

    def spans(self, texts: list[str], counts: Any):
        import numpy as np

        word_spans = hash_kernels()[0]
        lowered = [t.lower() for t in texts]  # text by text: str.lower's final sigma looks at its neighbours
        cps = np.frombuffer("".join(lowered).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        ends = np.cumsum(np.fromiter(map(len, lowered), dtype=np.int64, count=len(lowered)))
        starts = np.empty(len(cps) // 2 + 1, dtype=np.int64)  # a token is two code points at least, then a break
        stops = np.empty(len(cps) // 2 + 1, dtype=np.int64)
        t = word_spans(_isword(), cps, ends, starts, stops, counts)
        return cps, starts, stops, t

    def new_terms(self, surfaces: list[str]) -> list[str | None]:
        return [None if s in self.stop else s for s in surfaces]


class TermIds:
    """A growing vocabulary over an analyzer (:class:`LuceneEnglishAnalyzer` or :class:`Bm25sWords`): :meth:`ids`
    turns a block of texts into one flat int32 array of term ids (stop words dropped) and each text's length in
    terms (int64), the ids given in order of first sight. Tokens are looked up by two 64-bit hashes of their code
    points in a table (compiled), so a string is made only for a surface form seen for the first time."""

    def __init__(self, analyzer: Any) -> None:
        import numpy as np

        self.analyzer = analyzer
        self.vocab: dict[str, int] = {}
        self._keys1 = np.zeros(1 << 16, dtype=np.uint64)
        self._keys2 = np.zeros(1 << 16, dtype=np.uint64)
        self._vals = np.zeros(1 << 16, dtype=np.int64)
        self._used = 0
        if getattr(analyzer, "empty_token", False):
            self.vocab[""] = 0

    def release(self) -> None:
        """Drop the hash table (24 bytes a slot, two slots a surface form), keeping :attr:`vocab`: what a build
        does once the last block is read."""
        import numpy as np

        self._keys1 = self._keys2 = np.zeros(0, np.uint64)
        self._vals = np.zeros(0, np.int64)
        self._used = -1

    def _reserve(self, more: int) -> None:
        import numpy as np

        need = 2 * (self._used + more)
        cap = len(self._keys1)
        if need <= cap:
            return
        while cap < need:
            cap *= 2
        k1, k2, v = np.zeros(cap, np.uint64), np.zeros(cap, np.uint64), np.zeros(cap, np.int64)
        hash_kernels()[4](self._keys1, self._keys2, self._vals, k1, k2, v)
        self._keys1, self._keys2, self._vals = k1, k2, v

    def ids(self, texts: list[str]):
        import numpy as np

        if self._used < 0:
            raise RuntimeError("TermIds.ids after release(): the hash table is gone")

        _, hash_spans, lookup, resolve, _ = hash_kernels()
        n = len(texts)
        flats, lens = [], []
        lo = 0
        while lo < n:  # slices of about SCAN_CHARS characters
            hi, size = lo, 0
            while hi < n and (hi == lo or size + len(texts[hi]) <= SCAN_CHARS):
                size += len(texts[hi])
                hi += 1
            counts = np.zeros(hi - lo, dtype=np.int64)
            cps, starts, stops, t = self.analyzer.spans(texts[lo:hi], counts)
            h1, h2 = np.empty(t, np.uint64), np.empty(t, np.uint64)
            with np.errstate(over="ignore"):
                hash_spans(cps, starts, stops, t, h1, h2)
            self._reserve(t)
            out = np.empty(t, dtype=np.int64)
            first = np.empty(t, dtype=np.int64)
            slots = np.empty(t, dtype=np.int64)
            nnew = lookup(self._keys1, self._keys2, self._vals, h1, h2, t, out, first, slots)
            if nnew:
                self._used += nnew
                text = cps.tobytes().decode("utf-32-le", "surrogatepass")
                firsts = first[:nnew].tolist()
                surfaces = [text[a:b] for a, b in zip(starts[firsts].tolist(), stops[firsts].tolist(), strict=True)]
                vocab = self.vocab
                new_ids = np.empty(nnew, dtype=np.int64)
                for j, term in enumerate(self.analyzer.new_terms(surfaces)):
                    if term is None:
                        new_ids[j] = -1
                    else:
                        tid = vocab.get(term)
                        if tid is None:
                            tid = vocab[term] = len(vocab)
                        new_ids[j] = tid
                resolve(self._vals, slots, nnew, out, t, new_ids)
            keep = out >= 0
            doc = np.repeat(np.arange(hi - lo, dtype=np.int64), counts)
            length = np.bincount(doc[keep], minlength=hi - lo).astype(np.int64)
            flat = out[keep]
            if getattr(self.analyzer, "empty_token", False) and (length == 0).any():  # bm25s: [""], no word left
                empty = np.flatnonzero(length == 0)
                offsets = np.concatenate([[0], np.cumsum(length)])[empty]
                flat = np.insert(flat, offsets, self.vocab[""])
                length[empty] = 1
            flats.append(flat.astype(np.int32))
            lens.append(length)
            lo = hi
        if not flats:
            return np.zeros(0, np.int32), np.zeros(0, np.int64)
        return np.concatenate(flats), np.concatenate(lens)
