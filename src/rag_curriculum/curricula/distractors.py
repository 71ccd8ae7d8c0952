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
    contains an answer after SQuAD normalisation (``answer``: it would be gold in disguise; yes/no answers,
    answers made only of stop words and aliases of one or two characters are not matched). ``k`` = the ranked
    passages left, up to the index's depth, so it is no longer capped by the dataset.
``dense``, ``hybrid``, any other retriever kind
    the same walk over that kind's ranking (:mod:`rag_curriculum.retrieval`'s registry: ``--distractors NAME``
    takes every registered kind's name); a kind may declare a source of its own (``RetrieverKind.distractors``).
``mixed``
    provided and BM25 distractors alternately, provided first (p1, b1, p2, b2, ...; when one list runs out the
    other continues); the BM25 list also skips passages equal to one of the question's provided paragraphs
    (``provided_copy``).

Every source consumes the question's generator the same way (one shuffle of the provided pool, then the
presentation shuffle), so a ``provided`` build's rows are byte-identical to those written before sources existed.
Exclusions are counted per question as the ranking is walked (the walk stops when the row has its ``d``), and
reported in the build manifest. ``select(ex, d, seed)`` is the one place a row's passages are chosen: another kind
of row (say, one whose gold passages are replaced) plugs in by subclassing a source.

What the build asks of a source is :class:`DistractorSource`: besides choosing passages, two hooks the build
calls at fixed points, declared there (a source with nothing to do in them inherits :class:`ProvidedSource`'s
no-ops): :meth:`~DistractorSource.plan_hint` once before planning, with every row's question and the distractors
it asks for, and :meth:`~DistractorSource.before_render` once per shard, with the planned rows it renders (the
BM25 sources walk their rankings and read their passages in one batch there).
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

from rag_plumbing import normalize_passage, passage_hash

from .._metrics import normalize_answer
from .._plumbing import SideTask, derive_seed
from ..errors import ConfigError
from ..records import Document, Example
from ..registry import import_dotted

log = logging.getLogger(__name__)

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


class DistractorSource(Protocol):
    """What the build asks of a distractor source (:class:`ProvidedSource`, the BM25 sources, or a user's):
    the planning and pre-render hooks, and the passages of each row."""

    name: str

    def prepare(self, examples: list[Example], *, progress: bool = False,
                inputs: dict[str, str | None] | None = None) -> None:
        """Once, before planning, with every sampled question."""

    def plan_hint(self, wants: list[tuple[Example, int]]) -> None:
        """Once, before the rows' distractor counts are fixed: each question with the distractors it asks for."""

    def available(self, ex: Example, want: int) -> int:
        """How many distractors a row that asks for ``want`` gets."""

    def select(self, ex: Example, d: int, seed: int | None = None, *, unanswerable: bool = False
               ) -> list[Document | Shown]:
        """The passages a row with ``d`` distractors shows, in the order it shows them."""

    def before_render(self, rows: Sequence[Any]) -> None:
        """Once per shard, before its planned rows (``.ex``, ``.d``, ``.hops``) are rendered."""

    def recall(self, ex: Example, shown: list[Any] | None = None) -> float | None:
        """The row's ``gold_recall`` (None where the setting has none)."""

    def hops(self, ex: Example, shown_gold: int) -> int:
        """The row's ``hops`` column, given the gold passages it shows."""

    def facts(self) -> dict[str, Any] | None:
        """What the build manifest records about the source."""


class ProvidedSource:
    """The dataset's own distractors (RAG-RL)."""

    name = "provided"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def rng(self, ex: Example) -> random.Random:
        return random.Random(derive_seed(self.seed, ex.source, ex.id))

    def prepare(self, examples: list[Example], *, progress: bool = False,
                inputs: dict[str, str | None] | None = None) -> None:
        """Work done once for all the build's questions before planning (retrieval, for the BM25 sources).
        ``inputs``: the SHA-256 of each dataset's input file, where it is a local file."""

    def plan_hint(self, wants: list[tuple[Example, int]]) -> None:
        """Nothing to do: the provided distractors are in the examples."""

    def before_render(self, rows: Sequence[Any]) -> None:
        """Nothing to do: the provided passages are in the examples."""

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


_UNMATCHED = frozenset(("", "yes", "no", "noanswer"))
#: Lucene's English stop set, the words bm25s's ``stopwords="en"`` (the index's default) drops: an answer made only
#: of these ("in", "to be") is in nearly every passage, so it is not looked for (MuSiQue's
#: ``3hop1__379315_160713_77246`` has the alias "in", which filtered almost its whole ranking out).
STOP_WORDS = frozenset((
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it", "no", "not",
    "of", "on", "or", "such", "that", "the", "their", "then", "there", "these", "they", "this", "to", "was",
    "will", "with"))
#: An alias (an answer after the first) shorter than this once normalised is not looked for either: "us" for
#: "United States" would match the pronoun. The first answer is looked for whatever its length ("5", "UK").
MIN_ALIAS_CHARS = 3


def _looked_for(a: str, alias: bool) -> bool:
    if a in _UNMATCHED or all(w in STOP_WORDS for w in a.split()):
        return False
    return not alias or len(a) >= MIN_ALIAS_CHARS


def _matched_answers(answers: list[str]) -> list[str]:
    """The answers the "contains an answer" test looks for: normalised, without yes/no, empty ones, those made only
    of stop words (:data:`STOP_WORDS`) and aliases shorter than :data:`MIN_ALIAS_CHARS` characters."""
    if len(answers) == 1:  # the common case, without the set
        a = normalize_answer(answers[0])
        return [a] if _looked_for(a, False) else []
    return sorted({a for i, x in enumerate(answers) if _looked_for(a := normalize_answer(x), i > 0)})


class _AnswerFilter:
    """Whether a passage contains one of a question's answers after SQuAD normalisation, as whole words: the
    answer ``a``, normalised, is a substring ``f" {a} "`` of the passage normalised and padded
    (:func:`~rag_plumbing.normalize_passage`, which the index stores per passage)."""

    def __init__(self, answers: list[str]) -> None:
        self.answers = _matched_answers(answers)
        self._padded = [f" {a} " for a in self.answers]

    def in_norm(self, norm: str) -> bool:
        """The test on a passage already normalised (the index's ``norm`` column)."""
        return any(a in norm for a in self._padded)

    def __call__(self, title: str, text: str) -> bool:
        if not self.answers:
            return False
        return self.in_norm(normalize_passage(title, text))


#: Plan the walks of many rows at once with array operations (:meth:`BM25Source.plan_hint`); False: one row at a
#: time (the reference the batched planner is tested against).
BATCHED_PLAN = True
#: Ranked passages the batched planner tests per row beyond its ``want + hops`` (the rows that need more are planned
#: again, in one batch, over their whole ranking).
PLAN_MARGIN = 6
#: Rows from which half of the batched planning runs in a forked worker.
PARALLEL_MIN_ROWS = 4096
#: Take the gold passage ids the index stores for its questions without comparing the paragraphs, when the build's
#: input is the indexed file (same SHA-256, same toolkit version) and the first :data:`SPOT_CHECK` questions agree;
#: False: compare every question's (what the trusted path is tested against).
TRUST_INDEXED_FILE = True
SPOT_CHECK = 64


class _Walk:
    """One question's BM25 distractors, accepted lazily in rank order: ``accepted`` holds (passage id, rank)
    pairs; the ranking's ids and passage hashes are read when the walk has to go on."""

    __slots__ = ("accepted", "pos", "done", "ranking", "_ids", "_keys", "shown")

    def __init__(self, ranking: Any) -> None:
        self.accepted: list[tuple[int, int]] = []
        self.pos = 0
        self.done = False
        self.ranking = ranking  # the passage ids, best first (-1: none)
        self._ids: list[int] | None = None
        self._keys: list[int] | None = None
        self.shown: list[Shown] = []  # the first accepted ones as rows show them

    def ids_keys(self, keys: Any) -> tuple[list[int], list[int]]:
        if self._ids is None:
            ids = self.ranking[self.ranking >= 0]
            self._ids, self._keys = ids.tolist(), keys[ids].tolist()
        return self._ids, self._keys  # type: ignore[return-value]


class _CheckedKeys:
    """The index's passage keys in memory, each recomputed from its passage's title and text the first time it is
    read (:meth:`~rag_retriever.CorpusIndex.check_keys`): a forged key is refused as ``curriculum validate`` refuses
    it, and only the passages a build compares are read (never the whole index)."""

    __slots__ = ("array", "check")

    def __init__(self, index: Any) -> None:
        import numpy as np

        self.array = np.asarray(index.keys)
        self.check = getattr(index, "check_keys", None)

    def __getitem__(self, ids: Any) -> Any:
        if self.check is not None:
            self.check(ids, self.array)
        return self.array[ids]


class BM25Source(ProvidedSource):
    """Hard negatives from an index's ranking: BM25's (``bm25``), a dense retriever's (``dense``: near-misses by
    meaning) or their fusion (``hybrid``); the kind asked must be the index's."""

    name = "bm25"

    def __init__(self, index: Any, seed: int = 0, kind: str | None = None) -> None:
        super().__init__(seed)
        self.index = index
        #: what a shown passage's ``origin`` says: the index's retriever kind (bm25, dense, hybrid)
        self.origin = getattr(index, "retriever", "bm25")
        if kind is not None:
            self.name = kind
        self.rankings: dict[str, Any] = {}
        self.excluded: Counter = Counter()
        self._walks: dict[str, _Walk] = {}
        self._skip: dict[str, tuple[dict, set, _AnswerFilter]] = {}
        self._gold: dict[str, dict[int, Document]] = {}
        self._gold_list: dict[str, list[int]] = {}
        self._gold_ranks: dict[str, list[int | None]] = {}  # the rows of the shard being rendered (before_render)
        self._trusted: set[str] = set()  # datasets whose input file is the indexed one (prepare)

    def prepare(self, examples: list[Example], *, progress: bool = False,
                inputs: dict[str, str | None] | None = None) -> None:

        self._warn_other_dataset(examples)
        self.rankings = self.index.rankings(examples, progress=progress)
        self.keys = _CheckedKeys(self.index)  # into memory: 8 bytes a passage
        self._trusted = set()
        if TRUST_INDEXED_FILE:
            for dataset, sha256 in (inputs or {}).items():
                if self.index.indexed(dataset, sha256) and self._spot_check(dataset, examples):
                    self._trusted.add(dataset)

    def _warn_other_dataset(self, examples: list[Example]) -> None:
        """Warn when the index holds none of the build's datasets and no corpus: its passages are another
        dataset's, so the distractors come from there and no gold paragraph is among them."""
        sources = (getattr(self.index, "manifest", None) or {}).get("sources") or []
        if not sources or any(s.get("kind") != "dataset" for s in sources):
            return  # a corpus (wiki-18) serves any dataset's questions
        indexed = sorted({str(s.get("dataset")) for s in sources})
        asked = sorted({ex.source for ex in examples} - set(indexed))
        if asked and not {ex.source for ex in examples} & set(indexed):
            log.warning("%s: the index was built from %s, not %s: distractors from another dataset, no gold among "
                        "them; index this one (curriculum index -d %s -i FILE, or --corpus)",
                        getattr(self.index, "path", "--index"), ", ".join(indexed), ", ".join(asked), asked[0])

    def _spot_check(self, dataset: str, examples: list[Example]) -> bool:
        """The gold paragraphs of the first :data:`SPOT_CHECK` questions of a trusted file, compared with the
        index's: a loader that changed since the index was built shows here."""
        checked = 0
        for ex in examples:
            ranking = self.rankings.get(ex.id)
            if ex.source != dataset or ranking is None or ranking.gold is None:
                continue
            if self.index.gold_keys(ex, ranking.gold) is None:
                log.warning("%s: the index %s differs from this file in question %s's gold paragraphs: every "
                            "question is checked (index the file again to skip that)", dataset, self.index.path,
                            ex.id)
                return False
            checked += 1
            if checked >= SPOT_CHECK:
                break
        return True

    def _walk(self, ex: Example) -> _Walk:
        walk = self._walks.get(ex.id)
        if walk is None:
            walk = self._walks[ex.id] = _Walk(self.rankings[ex.id].ids)
        return walk

    def _gold_key_list(self, ex: Example) -> list[int]:
        """The :func:`passage_hash` of each of the question's gold passages, in document order (read from the index
        when it holds the question, else computed)."""
        keys = self._gold_list.get(ex.id)
        if keys is None:
            docs = [d for d in ex.documents if d.is_gold]
            ranking = self.rankings.get(ex.id)
            if ranking is not None and ranking.gold is not None:
                if ex.source in self._trusted and len(ranking.gold) == len(docs):
                    keys = self.keys[ranking.gold].tolist()
                else:
                    keys = self.index.gold_keys(ex, ranking.gold)
            if keys is None:
                keys = [passage_hash(d.title, d.text) for d in docs]
            self._gold_list[ex.id] = keys
        return keys

    def _gold_keys(self, ex: Example) -> dict[int, Document]:
        """The question's gold passages by :func:`passage_hash`, in document order."""
        hit = self._gold.get(ex.id)
        if hit is None:
            hit = self._gold[ex.id] = dict(zip(self._gold_key_list(ex), (d for d in ex.documents if d.is_gold),
                                               strict=True))
        return hit

    def _exclusions(self, ex: Example) -> tuple[dict, set, _AnswerFilter]:
        """The question's gold passages by hash (in document order), its provided ones (mixed), its answers."""
        hit = self._skip.get(ex.id)
        if hit is None:
            gold = self._gold_keys(ex)
            provided = ({passage_hash(d.title, d.text) for d in ex.documents if not d.is_gold} - set(gold)
                        if self.skip_provided() else set())
            hit = self._skip[ex.id] = (gold, provided, _AnswerFilter(ex.answers))
        return hit

    def plan_hint(self, wants: list[tuple[Example, int]]) -> None:
        """Before planning: walk every question's ranking to its row's ``want``, for all rows at once. The gold-copy
        test is one array comparison over the rankings' passage hashes; the answer test runs over the first
        ``want + hops +`` :data:`PLAN_MARGIN` ranked passages of each row (searched in place in the index's mapped
        normalised texts, :meth:`~rag_retriever.CorpusIndex.norm_spans`); the rows that have not found
        their ``want`` there are planned again over their whole ranking. What each row accepts, and what is counted
        as skipped (only up to where its walk stops), is exactly what the one-row walk gives."""
        import numpy as np

        rows = [(ex, want) for ex, want in wants if ex.id in self.rankings and ex.id not in self._walks]
        if not rows:
            return
        if not BATCHED_PLAN or self.skip_provided():
            self._read_gold(rows)
            self.index.prefetch(np.concatenate([self.rankings[ex.id].ids[: want + ex.hops + PLAN_MARGIN]
                                                for ex, want in rows]), norm=True)
            return
        if len(rows) < PARALLEL_MIN_ROWS:
            self._plan_batch(rows)
            return
        # half the rows in a forked worker, half here: the walks are independent, and what each row accepts and
        # skips does not depend on where it was planned
        half = len(rows) // 2

        def planned_elsewhere() -> tuple[list, Counter]:
            self.excluded = Counter()
            self._plan_batch(rows[half:])
            return ([(ex.id, self._walks[ex.id].pos, self._walks[ex.id].done, self._walks[ex.id].accepted)
                     for ex, _ in rows[half:]], self.excluded)

        other = SideTask(planned_elsewhere, "planning the BM25 walks")
        try:
            self._plan_batch(rows[:half])
            walked, excluded = other.result()
        except BaseException:
            other.cancel()
            raise
        self.excluded.update(excluded)
        for ex_id, pos, done, accepted in walked:
            walk = self._walks[ex_id] = _Walk(self.rankings[ex_id].ids)
            walk.pos, walk.done, walk.accepted = pos, done, accepted

    def _read_gold(self, rows: list[tuple[Example, int]]) -> None:
        """Read the rows' gold paragraphs from the index in one batch (to check them against the examples')."""
        import numpy as np

        gold_pids = [p for ex, _ in rows if ex.source not in self._trusted for p in (self.rankings[ex.id].gold or ())]
        if gold_pids:
            self.index.prefetch(np.asarray(gold_pids, dtype=np.int64))

    def _gold_matrix(self, rows: list[tuple[Example, int]]) -> Any:
        """The rows' gold passage hashes, one row each, padded with a value no hash takes: from the index's gold
        passage ids for a trusted file (one array lookup), else from :meth:`_gold_keys`."""
        import numpy as np

        n = len(rows)
        pid_lists: list[Any] = []
        key_lists: dict[int, list[int]] = {}
        trusted = self._trusted
        for i, (ex, _) in enumerate(rows):
            gold = self.rankings[ex.id].gold
            if ex.source in trusted and gold is not None and len(gold) == ex.hops:
                pid_lists.append(gold)
            else:
                pid_lists.append(())
                key_lists[i] = self._gold_key_list(ex)
        lens = np.fromiter(map(len, pid_lists), np.int64, n)
        width = max([1, int(lens.max(initial=0)), *map(len, key_lists.values())])
        matrix = np.full((n, width), np.iinfo(np.int64).min, dtype=np.int64)  # no passage hash is this
        flat = np.fromiter((p for g in pid_lists for p in g), np.int64, int(lens.sum()))
        if len(flat):
            row = np.repeat(np.arange(n), lens)
            col = np.arange(len(flat)) - np.repeat(np.cumsum(lens) - lens, lens)
            matrix[row, col] = self.keys[flat]
        for i, keys in key_lists.items():
            matrix[i, : len(keys)] = keys
        return matrix

    def _plan_batch(self, rows: list[tuple[Example, int]]) -> None:
        """:meth:`plan_hint`'s walks for these rows, in this process: first over a window of
        ``want + hops +`` :data:`PLAN_MARGIN` ranked passages, then, for the rows that found too few there, over
        their whole ranking."""
        self._read_gold(rows)
        rest = self._plan_window(rows, PLAN_MARGIN)
        if rest:
            self._plan_window(rest, None)

    def _plan_window(self, rows: list[tuple[Example, int]], margin: int | None) -> list[tuple[Example, int]]:
        """Walk these rows over their first ``want + hops + margin`` ranked passages (``None``: all of them);
        return the rows that need more (they are left unwalked: nothing of theirs is recorded or counted)."""
        import numpy as np

        n = len(rows)
        depth = len(self.rankings[rows[0][0].id].ids)  # every ranking of an index is as deep
        want = np.fromiter((w for _, w in rows), np.int64, n)
        if margin is None:
            window = np.full(n, depth, np.int64)
        else:
            window = np.minimum(want + np.fromiter((ex.hops for ex, _ in rows), np.int64, n) + margin, depth)
        # only the columns the windows reach, plus one to tell a ranking that ends inside its window (ids -1 come
        # only at a ranking's end) from one that goes on: (n, cols), not (n, depth), for a deep index
        cols = min(depth, int(window.max()) + 1)
        ranked = np.stack([self.rankings[ex.id].ids[:cols] for ex, _ in rows]).astype(np.int64)  # -1: none
        gold = self._gold_matrix(rows)
        valid = ranked >= 0
        keys = np.where(valid, self.keys[np.maximum(ranked, 0)], 0)
        is_gold = valid & (keys[:, :, None] == gold[:, None, :]).any(-1)
        pos = np.arange(cols)
        ri, pi = np.nonzero(valid & ~is_gold & (pos[None, :] < window[:, None]))  # by row, then position
        pids = ranked[ri, pi]
        # the answer test, in place in the index's memory-mapped normalised texts
        find, starts, ends = self.index.norm_spans()
        answers = [[f" {a} ".encode() for a in _matched_answers(ex.answers)] for ex, _ in rows]
        one = [a[0] if len(a) == 1 else None for a in answers]  # most questions have one answer to look for
        has = np.fromiter((find(one[r], a, b) >= 0 if one[r] is not None else any(find(x, a, b) >= 0 for x in answers[r])
                           for r, a, b in zip(ri.tolist(), starts[pids].tolist(), ends[pids].tolist(), strict=True)),
                          bool, len(pids))
        # each row's walk stops after its want-th accepted passage (or at the end of its window)
        acc_r, acc_p = ri[~has], pi[~has]
        bounds = np.searchsorted(acc_r, np.arange(n + 1))
        found = bounds[1:] - bounds[:-1]
        nth = np.minimum(bounds[:-1] + want - 1, len(acc_p) - 1)
        complete = found >= want
        at_nth = acc_p[np.maximum(nth, 0)] if len(acc_p) else np.zeros(n, np.int64)  # none accepted anywhere
        stop = np.where(complete, np.where(want > 0, at_nth + 1, 0), window)
        nvalid = valid.sum(1)  # exact when the ranking ends within cols, else cols (> window)
        final = complete | (window >= nvalid)  # walked to its want, or to the end of its ranking
        before = (pos[None, :] < stop[:, None]) & final[:, None]
        self.excluded["gold_copy"] += int((is_gold & before).sum())
        self.excluded["answer"] += int((has & (pi < stop[ri]) & final[ri]).sum())
        acc_ids, acc_rank = ranked[acc_r, acc_p].tolist(), (acc_p + 1).tolist()
        bounds_l, stop_l, nvalid_l = bounds.tolist(), stop.tolist(), nvalid.tolist()
        complete_l, final_l = complete.tolist(), final.tolist()
        rest = []
        for i, (ex, w) in enumerate(rows):
            if not final_l[i]:  # the window held too few
                rest.append((ex, w))
                continue
            walk = self._walks[ex.id] = _Walk(self.rankings[ex.id].ids)
            b = bounds_l[i]
            e = b + min(w, bounds_l[i + 1] - b)
            walk.accepted = list(zip(acc_ids[b:e], acc_rank[b:e], strict=True))
            walk.pos = min(stop_l[i], nvalid_l[i])
            walk.done = not complete_l[i]
        return rest

    def before_render(self, rows: Sequence[Any]) -> None:
        """Before rendering these planned rows: read the passages they show in one batch, and rank their gold
        passages (:meth:`gold`) with one array comparison."""
        import numpy as np

        pids = [pid for r in rows if (w := self._walks.get(r.ex.id)) is not None
                for pid, _ in w.accepted[: r.d + r.hops]]
        pids += [pid for r in rows if (rk := self.rankings.get(r.ex.id)) is not None and r.ex.id not in self._gold_list
                 and r.ex.source not in self._trusted for pid in (rk.gold or ())]  # to check them against the index's
        if pids:
            self.index.prefetch(np.asarray(pids, dtype=np.int64))
        ranked_rows = [(r.ex, 0) for r in rows if r.ex.id in self.rankings]
        self._gold_ranks = {}
        if not ranked_rows:
            return
        ranked = np.stack([self.rankings[ex.id].ids[:RANK_WINDOW] for ex, _ in ranked_rows]).astype(np.int64)
        valid = ranked >= 0
        keys = self.keys[np.maximum(ranked, 0)]
        gold = self._gold_matrix(ranked_rows)  # (rows, most gold), in document order
        hit = valid[:, :, None] & (keys[:, :, None] == gold[:, None, :])  # (rows, RANK_WINDOW, most gold)
        rank = np.where(hit.any(1), hit.argmax(1) + 1, 0).tolist()
        for (ex, _), rk in zip(ranked_rows, rank, strict=True):
            self._gold_ranks[ex.id] = [x or None for x in rk[: ex.hops]]

    def skip_provided(self) -> bool:
        return False

    def _accept(self, ex: Example, want: int) -> list[tuple[int, int]]:
        """Walk the question's ranking until ``want`` distractors are accepted (or it runs out): (id, rank) pairs."""
        walk = self._walk(ex)
        if len(walk.accepted) >= want or walk.done:
            return walk.accepted
        ids, keys = walk.ids_keys(self.keys)
        if walk.pos >= len(ids):
            walk.done = True
            return walk.accepted
        gold, provided, has_answer = self._exclusions(ex)
        norm = self.index.norm
        while len(walk.accepted) < want:
            if walk.pos >= len(ids):
                walk.done = True
                break
            pid = ids[walk.pos]
            key = keys[walk.pos]
            walk.pos += 1
            if key in gold:
                self.excluded["gold_copy"] += 1
            elif key in provided:
                self.excluded["provided_copy"] += 1
            elif has_answer.in_norm(norm(pid)):
                self.excluded["answer"] += 1
            else:
                walk.accepted.append((pid, walk.pos))
        return walk.accepted

    def ranked(self, ex: Example, want: int) -> list[Shown]:
        """The first ``want`` accepted BM25 distractors of the question (fewer when its ranking runs out)."""
        accepted = self._accept(ex, want)
        walk = self._walks[ex.id]
        shown = walk.shown
        for pid, rank in accepted[len(shown):want]:
            shown.append(Shown(*self.index.passage(pid), False, self.origin, rank))
        return shown[:want]

    def rank_of(self, ex: Example) -> dict[int, int]:
        """The rank of each of the question's own paragraphs (by :func:`passage_hash`) among the first
        :data:`RANK_WINDOW` of its ranking (a provided passage ranked lower gets no rank)."""
        ranking = self.rankings.get(ex.id)
        if ranking is None:
            return {}
        ids = ranking.ids[:RANK_WINDOW]
        out: dict[int, int] = {}
        for pos, key in enumerate(self.keys[ids[ids >= 0]].tolist(), 1):
            out.setdefault(key, pos)
        return out

    def available(self, ex: Example, want: int) -> int:
        return min(want, len(self._accept(ex, want)))

    def gold(self, ex: Example) -> list[Shown]:
        """The gold passages, each with its rank among the first :data:`RANK_WINDOW` of the ranking (or None)."""
        ranks = self._gold_ranks.get(ex.id)
        if ranks is None:
            by_key = self.rank_of(ex)
            ranks = [by_key.get(k) for k in self._gold_key_list(ex)]
        return [Shown(d.title, d.text, True, "provided", r)
                for d, r in zip((d for d in ex.documents if d.is_gold), ranks, strict=True)]

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
        return min(want, len(distractor_pool(ex)) + len(self._accept(ex, want)))

    def distractors(self, ex: Example, d: int, rng: random.Random, extra: int = 0
                    ) -> tuple[list[Document | Shown], list[Document | Shown]]:
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
        ids, keys = self._walk(ex).ids_keys(self.keys)
        gold = self._gold_keys(ex)
        has_answer = self._exclusions(ex)[2] if skip_gold else None
        out = []
        for pos, (pid, key) in enumerate(zip(ids, keys, strict=True), 1):
            if len(out) >= n:
                break
            is_gold = key in gold
            title, text = self.index.passage(pid)
            if not (skip_gold and (is_gold or has_answer.in_norm(self.index.norm(pid)))):
                out.append(Shown(title, text, is_gold, self.origin, pos))
        return out

    def select(self, ex: Example, d: int, seed: int | None = None, *, unanswerable: bool = False) -> list[Shown]:
        """The top ``N`` passages in rank order; an unanswerable row skips the gold ones and those containing an
        answer (the next ranked passages take their places)."""
        return self.ranked_all(ex, self.top_k, skip_gold=unanswerable)

    def recall(self, ex: Example, shown: list[Any] | None = None) -> float | None:
        gold = self._gold_keys(ex)
        shown = self.select(ex, 0) if shown is None else shown
        found = {passage_hash(p.title, p.text) for p in shown if p.is_gold}
        return len(found) / len(gold) if gold else None

    def hops(self, ex: Example, shown_gold: int) -> int:
        return ex.hops

    def facts(self) -> dict[str, Any]:
        return {"source": self.name, "top_k": self.top_k}


#: The default source of :func:`~rag_curriculum.curricula.select_documents` and the renderer: the
#: dataset's own distractors (the seed comes with each call).
PROVIDED: DistractorSource = ProvidedSource()


def make_source(kind: str, *, seed: int, index: Any = None, top_k: int | None = None) -> DistractorSource:
    """The build's distractor source: ``provided`` (the dataset's own), ``mixed`` (provided and the index's
    ranking alternately), ``retrieved`` (the retrieved setting), or a retriever kind's name: that kind's source
    (:class:`~rag_curriculum.retrieval.RetrieverKind`'s ``distractors``; by default :class:`BM25Source`, its
    index's ranking), over an index of that kind."""
    if kind == "provided":
        return ProvidedSource(seed)
    if kind == "mixed":
        return MixedSource(index, seed)
    if kind == "retrieved":
        return RetrievedSource(index, int(top_k or 10), seed)
    from rag_retriever import get_kind  # optional (the retrieval extra): a ModuleNotFoundError names it

    retriever = get_kind(kind)  # an unknown name: one line with a "did you mean"
    have = getattr(index, "retriever", None)
    if index is not None and have != kind:
        raise ConfigError(f"--distractors {kind}: the index {getattr(index, 'path', '')} is a {have} index",
                          hint=f"pass --distractors {have}, or build a {kind} index (curriculum index --kind "
                               f"{kind} ...)")
    factory = retriever.distractors
    if factory is None:
        return BM25Source(index, seed, kind)
    if isinstance(factory, str):
        factory = import_dotted(factory)
    return factory(index, seed)
