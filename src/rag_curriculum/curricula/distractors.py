"""Where a row's distractors come from: the distractor sources.

A source gives each question an ordered list of candidate distractors; a row with ``d`` distractors shows the
first ``d`` of them (so level ``l``'s distractors are a subset of level ``l + 1``'s, RAG-RL's nesting), plus every
gold passage, in an order shuffled by the question's own generator (``derive_seed(seed, dataset, id)``):

``provided`` (the paper's)
    the distractors the dataset ships, in an order shuffled by the question's generator (then shown in source
    order); ``k`` = their number.
``bm25``
    the question's BM25 ranking over a corpus index (:mod:`rag_curriculum.retrieval`), best first, skipping a
    passage whose normalised title and text equal a gold paragraph's (``gold_copy``) and one whose title or text
    contains an answer after SQuAD normalisation (``answer``: it would be gold in disguise; yes/no answers are
    not matched). ``k`` = the ranked passages left, up to the index's depth, so it is no longer capped by the
    dataset.
``mixed``
    provided and BM25 distractors alternately, provided first (p1, b1, p2, b2, ...; when one list runs out the
    other continues); the BM25 list also skips passages equal to one of the question's provided paragraphs
    (``provided_copy``).

Every source consumes the question's generator the same way (one shuffle of the provided pool, then the
presentation shuffle), so a ``provided`` build's rows are byte-identical to those written before sources existed.
Exclusions are counted per question as the ranking is walked (the walk stops when the row has its ``d``), and
reported in the build manifest. ``select(ex, d, seed)`` is the one place a row's passages are chosen: another kind
of row (say, one whose gold passages are replaced) plugs in by subclassing a source.
"""

from __future__ import annotations

import random
import re
import string
from collections import Counter
from typing import Any, NamedTuple

from .._plumbing import derive_seed
from ..records import Document, Example

DISTRACTOR_SOURCES = ("provided", "bm25", "mixed")
#: A provided passage (gold, or a provided distractor in ``mixed``) records its ``bm25_rank`` when it is among
#: this many best passages of the question's ranking; BM25 distractors always record theirs.
RANK_WINDOW = 32


class Shown(NamedTuple):
    """A passage as a row shows it: a :class:`~rag_curriculum.records.Document` plus where it came from."""

    title: str
    text: str
    is_gold: bool = False
    origin: str = "provided"  # provided | bm25
    bm25_rank: int | None = None  # 1-based rank in the question's BM25 ranking; None when not ranked


def distractor_pool(ex: Example) -> list[Document]:
    """The distractors a row may draw from: every non-gold paragraph except exact copies (same title and text)
    of a gold one, which would make a citation of the copy look wrong. ``k = len(pool)``."""
    docs = ex.documents
    gold_titles = {d.title for d in docs if d.is_gold}
    pool = [d for d in docs if not d.is_gold]
    if any(d.title in gold_titles for d in pool):  # rare: a distractor shares a gold title; compare the texts
        gold = {(d.title, d.text) for d in docs if d.is_gold}
        pool = [d for d in pool if (d.title, d.text) not in gold]
    return pool


def passage_key(title: str, text: str) -> tuple[str, str]:
    """Title and text with whitespace runs collapsed and case folded: what "a copy of a paragraph" compares."""
    return " ".join(title.split()).casefold(), " ".join(text.split()).casefold()


class ProvidedSource:
    """The dataset's own distractors (RAG-RL)."""

    name = "provided"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def rng(self, ex: Example) -> random.Random:
        return random.Random(derive_seed(self.seed, ex.source, ex.id))

    def prepare(self, examples: list[Example], *, progress: bool = False) -> None:
        """Work done once for all the build's questions before planning (retrieval, for the BM25 sources)."""

    def available(self, ex: Example, want: int) -> int:
        """min(want, k): how many distractors a row that asks for ``want`` gets."""
        return min(want, len(distractor_pool(ex)))

    def gold(self, ex: Example) -> list[Document | Shown]:
        return [d for d in ex.documents if d.is_gold]

    def _provided_order(self, ex: Example, rng: random.Random) -> tuple[list[Document], list[int]]:
        pool = distractor_pool(ex)
        perm = list(range(len(pool)))
        rng.shuffle(perm)
        return pool, perm

    def distractors(self, ex: Example, d: int, rng: random.Random, extra: int = 0
                    ) -> tuple[list[Document | Shown], list[Document | Shown]]:
        """The first ``d`` distractors of the question's order, and the ``extra`` after them (the replacements of
        the gold passages of an unanswerable row). Consumes ``rng``: one shuffle of the provided pool. The
        provided source returns the dataset's own :class:`Document` objects (origin ``provided``, no rank)."""
        pool, perm = self._provided_order(ex, rng)
        chosen = [pool[p] for p in sorted(perm[:d])]  # keep source order before the presentation shuffle
        return chosen, [pool[p] for p in perm[d:d + extra]]

    def select(self, ex: Example, d: int, seed: int | None = None, *, unanswerable: bool = False
               ) -> list[Document | Shown]:
        """All gold passages plus ``d`` distractors, in the question's shuffled order; with ``unanswerable`` the
        gold passages are replaced by the next distractors of the order (while any is left)."""
        rng = random.Random(derive_seed(self.seed if seed is None else seed, ex.source, ex.id))
        chosen, extra = self.distractors(ex, d, rng, ex.hops if unanswerable else 0)
        docs = (extra if unanswerable else self.gold(ex)) + chosen
        rng.shuffle(docs)
        return docs

    def recall(self, ex: Example, shown: list[Any] | None = None) -> float | None:
        """The row's ``gold_recall``: None except in the retrieved setting."""
        return None

    def hops(self, ex: Example, shown_gold: int) -> int:
        return shown_gold

    def facts(self) -> dict[str, Any] | None:
        """What the build manifest records about the source (None for the paper's provided distractors)."""
        return None


_ARTICLES_RE = re.compile(r"\b(a|an|the)\b")  # as rewards._metrics.normalize_answer
_PUNCT_BYTES = string.punctuation.encode()  # ASCII: deleting its bytes from UTF-8 deletes exactly those characters
_UNMATCHED = frozenset(("", "yes", "no", "noanswer"))


class _AnswerFilter:
    """Whether a passage contains one of a question's answers after SQuAD normalisation (as whole words). A
    cheap necessary test first (every answer token in the lowered, punctuation-free text), the exact one after."""

    def __init__(self, answers: list[str]) -> None:
        from ..rewards._metrics import normalize_answer

        self._norm = normalize_answer
        self.answers = sorted({a for a in (normalize_answer(x) for x in answers) if a not in _UNMATCHED})
        self.tokens = [[t.encode() for t in a.split()] for a in self.answers]

    def __call__(self, title: str, text: str) -> bool:
        if not self.answers:
            return False
        # lower-cased, ASCII punctuation deleted (on the UTF-8 bytes: the same as deleting the characters): the
        # first two steps of normalize_answer, done once for the cheap test and the exact one
        cheap = f"{title} {text}".lower().encode().translate(None, _PUNCT_BYTES)
        candidates = [a for a, toks in zip(self.answers, self.tokens, strict=True) if all(t in cheap for t in toks)]
        if not candidates:
            return False
        stripped = cheap.decode()
        if "a" in stripped or "the" in stripped:  # as normalize_answer: drop articles, then collapse whitespace
            stripped = _ARTICLES_RE.sub(" ", stripped)
        norm = " " + " ".join(stripped.split()) + " "
        return any(f" {a} " in norm for a in candidates)


#: Rows from which the planning walks run in forked worker processes.
PARALLEL_MIN_WALKS = 4096
_WALKING: Any = None  # (source, wants), shared with forked walkers


def _walk_range(span: tuple[int, int]) -> tuple[list, Counter]:
    source, wants = _WALKING
    source.excluded = Counter()
    out = []
    for ex, want in wants[span[0]:span[1]]:
        accepted = source.ranked(ex, want)
        walk = source._walks[ex.id]
        out.append((ex.id, walk.pos, walk.done, [(walk.ids[p.bm25_rank - 1], p.bm25_rank) for p in accepted]))
    return out, source.excluded


class _Walk:
    """One question's BM25 distractors, accepted lazily in rank order."""

    __slots__ = ("accepted", "pos", "done", "ids", "keys")

    def __init__(self, ids: list[int], keys: list[int]) -> None:
        self.accepted: list[Shown] = []
        self.pos = 0
        self.done = False
        self.ids = ids  # the ranking's passage ids (-1: none), and their passage hashes
        self.keys = keys


class BM25Source(ProvidedSource):
    """BM25 hard negatives from a corpus index."""

    name = "bm25"

    def __init__(self, index: Any, seed: int = 0) -> None:
        super().__init__(seed)
        self.index = index
        self.rankings: dict[str, Any] = {}
        self.excluded: Counter = Counter()
        self._walks: dict[str, _Walk] = {}
        self._skip: dict[str, tuple[set, set, _AnswerFilter]] = {}

    def prepare(self, examples: list[Example], *, progress: bool = False) -> None:
        import numpy as np

        self.rankings = self.index.rankings(examples, progress=progress)
        self.keys = np.asarray(self.index.keys)  # into memory: 8 bytes a passage

    def _walk(self, ex: Example) -> _Walk:
        walk = self._walks.get(ex.id)
        if walk is None:
            ids = self.rankings[ex.id].ids
            ids = ids[ids >= 0]
            walk = self._walks[ex.id] = _Walk(ids.tolist(), self.keys[ids].tolist())
        return walk

    def _exclusions(self, ex: Example) -> tuple[dict, set, _AnswerFilter]:
        """The question's gold passages by hash (in document order), its provided ones (mixed), its answers."""
        hit = self._skip.get(ex.id)
        if hit is None:
            from ..retrieval._index import passage_hash

            gold = {passage_hash(d.title, d.text): d for d in ex.documents if d.is_gold}
            provided = ({passage_hash(d.title, d.text) for d in ex.documents if not d.is_gold} - set(gold)
                        if self.skip_provided() else set())
            hit = self._skip[ex.id] = (gold, provided, _AnswerFilter(ex.answers))
        return hit

    def plan_hint(self, wants: list[tuple[Example, int]]) -> None:
        """Before planning: read, in one batch, the ranked passages the rows' walks will probably need (the first
        ``want`` plus the gold copies and a few skipped ones), then walk every question's ranking to its row's
        ``want`` (in forked worker processes when there are many rows: the walks are independent, and what each
        accepts and skips does not depend on the number of workers)."""
        import multiprocessing as mp
        import os

        import numpy as np

        parts = [np.asarray(self.rankings[ex.id].ids[: want + ex.hops + 4]) for ex, want in wants
                 if ex.id in self.rankings]
        if parts:
            self.index.prefetch(np.concatenate(parts))
        workers = min(os.cpu_count() or 1, 8)
        if len(wants) < PARALLEL_MIN_WALKS or workers < 2 or "fork" not in mp.get_all_start_methods():
            return
        global _WALKING
        _WALKING = (self, wants)
        step = -(-len(wants) // (workers * 4))
        try:
            with mp.get_context("fork").Pool(workers) as pool:
                results = pool.map(_walk_range, [(i, min(i + step, len(wants))) for i in range(0, len(wants), step)])
        finally:
            _WALKING = None
        by_id = {ex.id: ex for ex, _ in wants}
        for walked, excluded in results:
            self.excluded.update(excluded)
            for ex_id, pos, done, accepted in walked:
                walk = self._walk(by_id[ex_id])
                walk.pos, walk.done = pos, done
                walk.accepted = [Shown(*self.index.passage(pid), False, "bm25", rank) for pid, rank in accepted]

    def skip_provided(self) -> bool:
        return False

    def ranked(self, ex: Example, want: int) -> list[Shown]:
        """The first ``want`` accepted BM25 distractors of the question (fewer when its ranking runs out)."""
        walk = self._walk(ex)
        if len(walk.accepted) >= want or walk.done:
            return walk.accepted[:want]
        ids, keys = walk.ids, walk.keys
        gold, provided, has_answer = self._exclusions(ex)
        while len(walk.accepted) < want:
            if walk.pos >= len(ids):
                walk.done = True
                break
            pid = ids[walk.pos]
            key = keys[walk.pos]
            walk.pos += 1
            if key in gold:
                self.excluded["gold_copy"] += 1
                continue
            if key in provided:
                self.excluded["provided_copy"] += 1
                continue
            title, text = self.index.passage(pid)
            if has_answer(title, text):
                self.excluded["answer"] += 1
            else:
                walk.accepted.append(Shown(title, text, False, "bm25", walk.pos))
        return walk.accepted[:want]

    def rank_of(self, ex: Example) -> dict[int, int]:
        """The rank of each of the question's own paragraphs (by :func:`passage_hash`) among the first
        :data:`RANK_WINDOW` of its ranking (a provided passage ranked lower gets no rank)."""
        if ex.id not in self.rankings:
            return {}
        out: dict[int, int] = {}
        for pos, key in enumerate(self._walk(ex).keys[:RANK_WINDOW], 1):
            out.setdefault(key, pos)
        return out

    def available(self, ex: Example, want: int) -> int:
        return len(self.ranked(ex, want))

    def gold(self, ex: Example) -> list[Shown]:
        ranks = self.rank_of(ex)
        by_doc = {id(d): h for h, d in self._exclusions(ex)[0].items()}
        return [Shown(d.title, d.text, True, "provided", ranks.get(by_doc.get(id(d), 0)))
                for d in ex.documents if d.is_gold]

    def distractors(self, ex: Example, d: int, rng: random.Random, extra: int = 0
                    ) -> tuple[list[Document | Shown], list[Document | Shown]]:
        self._provided_order(ex, rng)  # consumed as the provided source does, so the presentation shuffle matches
        ranked = self.ranked(ex, d + extra)
        return ranked[:d], ranked[d:]

    def facts(self) -> dict[str, Any]:
        return {"source": self.name, "excluded": {k: self.excluded[k] for k in
                                                  ("gold_copy", "answer", "provided_copy")}}


class MixedSource(BM25Source):
    """Provided and BM25 distractors, alternately (provided first)."""

    name = "mixed"

    def skip_provided(self) -> bool:
        return True

    def available(self, ex: Example, want: int) -> int:
        return min(want, len(distractor_pool(ex)) + len(self.ranked(ex, want)))

    def distractors(self, ex: Example, d: int, rng: random.Random, extra: int = 0
                    ) -> tuple[list[Document | Shown], list[Document | Shown]]:
        from ..retrieval._index import passage_hash

        pool, perm = self._provided_order(ex, rng)
        ranks = self.rank_of(ex)
        provided = [Shown(*pool[p], "provided", ranks.get(passage_hash(pool[p].title, pool[p].text)))
                    for p in perm[:d + extra]]
        n = d + extra
        bm25 = self.ranked(ex, n)
        out: list[Shown] = []
        i = j = 0
        while len(out) < n and (i < len(provided) or j < len(bm25)):
            if i < len(provided) and (len(out) % 2 == 0 or j >= len(bm25)):
                out.append(provided[i])
                i += 1
            else:
                out.append(bm25[j])
                j += 1
        return out[:d], out[d:]


class RetrievedSource(BM25Source):
    """The ``retrieved`` evaluation setting: the top ``N`` passages of the question's ranking, in rank order,
    gold not forced in; a passage is gold when its normalised title and text equal a gold paragraph's."""

    name = "retrieved"

    def __init__(self, index: Any, top_k: int, seed: int = 0) -> None:
        super().__init__(index, seed)
        self.top_k = top_k

    def ranked_all(self, ex: Example, n: int, *, skip_gold: bool = False) -> list[Shown]:
        """The first ``n`` passages of the ranking; with ``skip_gold`` (an unanswerable row) without the gold ones
        and without those that contain an answer (which would answer the question after all)."""
        walk = self._walk(ex)
        gold = self._exclusions(ex)[0]
        has_answer = self._exclusions(ex)[2] if skip_gold else None
        out = []
        for pos, (pid, key) in enumerate(zip(walk.ids, walk.keys, strict=True), 1):
            if len(out) >= n:
                break
            is_gold = key in gold
            title, text = self.index.passage(pid)
            if not (skip_gold and (is_gold or has_answer(title, text))):
                out.append(Shown(title, text, is_gold, "bm25", pos))
        return out

    def select(self, ex: Example, d: int, seed: int | None = None, *, unanswerable: bool = False) -> list[Shown]:
        """The top ``N`` passages in rank order; an unanswerable row skips the gold ones and those containing an
        answer (the next ranked passages take their places)."""
        return self.ranked_all(ex, self.top_k, skip_gold=unanswerable)

    def recall(self, ex: Example, shown: list[Any] | None = None) -> float | None:
        from ..retrieval._index import passage_hash

        gold = self._exclusions(ex)[0]
        shown = self.select(ex, 0) if shown is None else shown
        found = {passage_hash(p.title, p.text) for p in shown if p.is_gold}
        return len(found) / len(gold) if gold else None

    def hops(self, ex: Example, shown_gold: int) -> int:
        return ex.hops

    def facts(self) -> dict[str, Any]:
        return {"source": self.name, "top_k": self.top_k}


def make_source(kind: str, *, seed: int, index: Any = None, top_k: int | None = None) -> ProvidedSource:
    if kind == "provided":
        return ProvidedSource(seed)
    if kind == "bm25":
        return BM25Source(index, seed)
    if kind == "mixed":
        return MixedSource(index, seed)
    if kind == "retrieved":
        return RetrievedSource(index, int(top_k or 10), seed)
    raise ValueError(f"unknown distractor source {kind!r}")
