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

import threading
from typing import Any

from ._porter import stem_many
from ._uax29 import compile_all

#: Lucene's ``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET`` (pyserini's default stop words).
ENGLISH_STOP_WORDS = frozenset((
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no", "not", "of",
    "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to", "was", "will",
    "with"))

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

            from ._uax29_table import LOWER, RUNS

            runs = np.asarray(RUNS, dtype=np.int64).reshape(-1, 2)
            lengths = np.diff(np.append(runs[:, 0], 0x110000))
            cls = np.repeat(runs[:, 1].astype(np.uint16), lengths)
            lower = np.arange(0x110000, dtype=np.uint32)
            pairs = np.asarray(LOWER, dtype=np.int64).reshape(-1, 2)
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
        import numpy as np

        cls, lower, scan = _tables()
        joined = "".join(texts)
        cps = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32).copy()
        ends = np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)))
        starts = np.empty(len(cps) + 1, dtype=np.int64)  # at most one token a code point
        stops = np.empty(len(cps) + 1, dtype=np.int64)
        t = scan(cls, lower, cps, ends, starts, stops, counts, True)
        low = cps.tobytes().decode("utf-32-le", "surrogatepass")
        return [low[a:b] for a, b in zip(starts[:t].tolist(), stops[:t].tolist(), strict=True)]

    def terms_of(self, surfaces: list[str]) -> list[str | None]:
        """Each surface form's term (None: a stop word), through the cache."""
        cache = self._terms
        missing = set(surfaces).difference(cache)
        if missing:
            new = list(missing)
            keep = [s for s in new if s not in ENGLISH_STOP_WORDS]
            stems = dict(zip(keep, stem_many(keep), strict=True))
            with self._lock:
                for s in new:
                    cache[s] = stems.get(s)
        return list(map(cache.__getitem__, surfaces))

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


class TermIds:
    """A growing vocabulary over an analyzer: :meth:`ids` turns a block of texts into one flat int32 array of term
    ids (stop words dropped) and each text's length in terms (int64), the ids given in order of first sight."""

    def __init__(self, analyzer: LuceneEnglishAnalyzer) -> None:
        self.analyzer = analyzer
        self.vocab: dict[str, int] = {}
        self._ids: dict[str, int] = {}  # surface -> term id, -1: a stop word

    def ids(self, texts: list[str]):
        import numpy as np

        surfaces, counts = self.analyzer.surfaces(texts)
        cache = self._ids
        new = [s for s in dict.fromkeys(surfaces) if s not in cache]  # in order of first sight: deterministic ids
        if new:
            vocab = self.vocab
            for s, term in zip(new, self.analyzer.terms_of(new), strict=True):
                if term is None:
                    cache[s] = -1
                else:
                    tid = vocab.get(term)
                    if tid is None:
                        tid = vocab[term] = len(vocab)
                    cache[s] = tid
        flat = np.fromiter(map(cache.__getitem__, surfaces), dtype=np.int64, count=len(surfaces))
        keep = flat >= 0
        doc = np.repeat(np.arange(len(texts), dtype=np.int64), counts)
        lengths = np.bincount(doc[keep], minlength=len(texts)).astype(np.int64)
        return flat[keep].astype(np.int32), lengths
