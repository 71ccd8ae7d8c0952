"""The builder: examples -> rows of controlled difficulty in curriculum order -> shards + manifest + data card.

Reproduces RAG-RL's construction (sections 3.2, 4.4, appendix A): questions are sampled without replacement
with the build seed; the schedule maps each row index ``i`` to a level ``l``; a row of level ``l`` holds every
gold document and ``d = min(max(l + 2 - j, 0), k)`` distractors. Which distractors, and the order in which the
documents are shown, come from a random generator seeded by ``(build seed, dataset, example id)`` only, so a row
never changes when other rows are added, and the distractors of level ``l`` are a subset of those of ``l + 1``.

Unanswerable rows (``--unanswerable-fraction P``): whether a row is one is decided by ``(build seed, dataset,
example id)`` alone (:func:`is_unanswerable`), so a row's status never changes when other rows are added. Such a row
shows no gold passage: each is replaced by the next unused distractor of the row's own seeded order (the
replacement takes the gold passage's place, so the passage count holds and a row of level ``l`` still shows a
subset of level ``l + 1``'s passages); its answer is the abstention answer, its ``gold_labels`` empty, its
``answerable`` false. When the row's distractors run out (the dataset's are all shown already, as at the top
levels of HotpotQA and in the distractor setting) the row shows the distractors it has: fewer passages, counted
in the manifest (``unanswerable.short_rows``, ``missing_passages``) and warned about.
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import random
import shlex
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import pyarrow as pa

from .. import __version__
from .._plumbing import derive_seed, die_with_parent, distribution, gc_paused, trainer_tail
from ..difficulty.synthetic import level_for, num_distractors
from ..errors import BuildError, SkipReport  # noqa: F401  (re-exported)
from ..loaders import get_loader, guess_split, load_examples
from ..prompts import get_template
from ..records import Document, Example
from ..shards import (
    EXTRA_INFO,
    GROUND_TRUTH,
    MESSAGE,
    PASSAGE,
    PROMPT_TOKENS,
    ROW_SCHEMA,
    check_output,
    portable_path,
    relative_path,
    row_schema,
    sha256_file,
    write_one_shard,
    write_shards,
)
from .config import DEFAULT_K, BuildConfig, SourceSpec
from .distractors import ProvidedSource, Shown, distractor_pool, make_source  # noqa: F401  (re-exported)
from .leakage import LeakageIndex
from .lengths import LengthStats, count_prompt_tokens, load_tokenizer, tokenizer_info
from .schedules import resolve_schedule

log = logging.getLogger(__name__)


def select_documents(ex: Example, d: int, seed: int, source: ProvidedSource | None = None, *,
                     unanswerable: bool = False) -> list[Document | Shown]:
    """All gold documents plus ``d`` distractors, in a shuffled order, from the example's own generator; the
    distractors come from ``source`` (default: the dataset's own; see :mod:`.distractors`). With
    ``unanswerable`` each gold document is replaced by the next distractor of that order (while any is left)."""
    return (source or _PROVIDED).select(ex, d, seed, unanswerable=unanswerable)


_PROVIDED = ProvidedSource()


def is_unanswerable(seed: int, ex: Example, fraction: float) -> bool:
    """Whether ``ex`` becomes an unanswerable row of a build with ``--unanswerable-fraction fraction``: a uniform
    draw from ``(build seed, dataset, example id)`` only, below ``fraction``."""
    return fraction > 0 and derive_seed(seed, "unanswerable", ex.source, ex.id) < fraction * 2.0 ** 64


@dataclass
class LoadedSource:
    spec: SourceSpec
    examples: list[Example]
    report: SkipReport
    excluded: Counter = field(default_factory=Counter)
    checksum: str | None = None

    @property
    def dataset(self) -> str:
        return self.spec.dataset


@dataclass
class BuildResult:
    out: Path
    manifest: dict[str, Any]
    rows: int


def _default_split(cfg: BuildConfig, spec: SourceSpec) -> str | None:
    if spec.split:
        return spec.split
    if spec.input:
        return None  # from the file name
    return "train" if cfg.setting == "curriculum" else "dev"


TRAIN_SPLITS = {"train"}
EVAL_SPLITS = {"dev", "validation", "test"}


def check_split(cfg: BuildConfig, spec: SourceSpec) -> None:
    """Refuse a training curriculum made from a dev/test file, or an evaluation set made from a train file (the
    likeliest way evaluation questions leak into training), and a --split that contradicts the file's name."""
    if cfg.allow_split_mismatch:
        return
    named = guess_split(Path(spec.input)) if spec.input and not _is_hub(spec.input) else None
    hint = "pass --allow-split-mismatch (recipes: allow_split_mismatch=true) if this is intended"
    if spec.split and named and spec.split != named and {spec.split, named} != {"dev", "validation"}:
        raise BuildError(f"{spec.dataset}: --split {spec.split} contradicts the file name {Path(spec.input).name} "
                         f"({named}); for a local file --split only labels the rows. {hint}")
    split = spec.split or named
    if split is None:
        return
    if cfg.setting == "curriculum" and split in EVAL_SPLITS:
        raise BuildError(f"{spec.dataset}: a training curriculum from the {split} split ({spec.input}); build "
                         f"curricula from train files and evaluation sets from dev files, or {hint}")
    if cfg.setting != "curriculum" and split in TRAIN_SPLITS:
        raise BuildError(f"{spec.dataset}: a {cfg.setting} evaluation set from the train split ({spec.input}); "
                         f"evaluation sets come from dev files, or {hint}")


def _is_hub(path: str | None) -> bool:
    return bool(path) and str(path).startswith("hf://")


def load_source(cfg: BuildConfig, spec: SourceSpec, *, progress: bool = False) -> LoadedSource:
    from concurrent.futures import ThreadPoolExecutor

    from .._progress import track

    check_split(cfg, spec)
    report = SkipReport()
    # The checksum is computed in a thread while the records are parsed (hashlib and file reads release the GIL).
    hasher = ThreadPoolExecutor(max_workers=1) if spec.input and not _is_hub(spec.input) else None
    checksum_future = hasher.submit(sha256_file, spec.input) if hasher else None
    stream = load_examples(spec.dataset, spec.input, split=_default_split(cfg, spec), on_error=cfg.on_error,
                           report=report)
    spec.dataset = stream.dataset
    examples: list[Example] = []
    excluded: Counter = Counter()
    seen: set[str] = set()
    for ex in track(stream, f"loading {spec.dataset}", enabled=progress):
        if ex.id in seen:  # the same question twice (a duplicated record, or identical Hub rows without an id)
            excluded["duplicate_id"] += 1
            continue
        seen.add(ex.id)
        if ex.extra.get("answerable") is False and not cfg.include_unanswerable:
            excluded["unanswerable"] += 1
            continue
        if ex.hops == 0:
            excluded["no_gold"] += 1
            continue
        examples.append(ex)
    checksum = checksum_future.result() if checksum_future else None
    if hasher:
        hasher.shutdown()
    if excluded:
        log.warning("%s: excluded %s", spec.dataset, dict(excluded))
    return LoadedSource(spec, examples, report, excluded, checksum)


def _sample(src: LoadedSource, n: int | None, seed: int) -> list[Example]:
    pool = src.examples
    if n is not None and n > len(pool):
        raise BuildError(
            f"{src.dataset}: asked for n={n} questions but only {len(pool)} are available"
            f"{' after exclusions' if src.excluded else ''}; lower --n, or pass --n all to use every question")
    rng = random.Random(derive_seed(seed, "sample", src.dataset))
    idx = rng.sample(range(len(pool)), len(pool) if n is None else n)
    return [pool[i] for i in idx]


def assign_levels(examples: Sequence[Example], cfg: BuildConfig) -> list[tuple[Example, int]]:
    """Pair each example with its level, in training order, according to the schedule and the ordering."""
    schedule = resolve_schedule(cfg.schedule, cfg.pieces)
    K_by_source = {s.dataset: cfg.K or _source_K(cfg, s.dataset) for s in cfg.sources}

    def K_of(ex: Example) -> int:
        return K_by_source[ex.source]

    def place(group: Sequence[Example]) -> list[tuple[Example, int]]:
        n = len(group)
        if not n:
            return []
        out = []
        for i, ex in enumerate(group, 1):
            out.append((ex, schedule(i, n, K_of(ex))))
        for ex, lv in out:
            if not 1 <= lv <= K_of(ex):
                raise BuildError(f"schedule {cfg.schedule!r} gave level {lv} outside 1..{K_of(ex)}")
        return out

    if cfg.order == "hops-level":
        by_hops: dict[int, list[Example]] = {}
        for ex in examples:
            by_hops.setdefault(ex.hops, []).append(ex)
        paired = []
        for h in sorted(by_hops):
            paired += sorted(place(by_hops[h]), key=lambda p: p[1])
        return paired
    paired = place(examples)
    if cfg.order == "shuffled":
        random.Random(derive_seed(cfg.seed, "order")).shuffle(paired)
    elif not _monotone(paired):
        # level: rows in schedule order. Only a schedule whose levels go down somewhere needs sorting; it is
        # sorted by the level relative to each source's K, so a mixture of sources with different K stays mixed.
        paired.sort(key=lambda p: (p[1] - 1) / max(K_of(p[0]) - 1, 1))
    return paired


def _monotone(paired: Sequence[tuple[Example, int]]) -> bool:
    last: dict[str, int] = {}
    for ex, level in paired:
        if level < last.get(ex.source, 0):
            return False
        last[ex.source] = level
    return True


def _source_K(cfg: BuildConfig, dataset: str) -> int:
    for s in cfg.sources:
        if s.dataset == dataset and s.K:
            return s.K
    return DEFAULT_K[dataset]


class PlannedRow(NamedTuple):
    """One row before rendering: the example, its level, its number of distractors d, its hops j, and whether it
    is answerable (False: every gold passage is replaced by a distractor, see :func:`is_unanswerable`)."""

    ex: Example
    level: int
    d: int
    hops: int
    answerable: bool = True


Plan = list[PlannedRow]  # in training order


def plan_rows(cfg: BuildConfig, sources: Sequence[LoadedSource], distractors: ProvidedSource | None = None, *,
              progress: bool = False) -> tuple[Plan, dict[str, Any]]:
    """Sample and order the questions and fix each row's level and distractor count; return that plan with the
    facts the manifest records (leakage, tail fit, per-source counts). Rendering is separate (:func:`render_rows`)."""
    facts: dict[str, Any] = {}
    # Leakage against evaluation sets, before sampling, so `drop` can exclude leaked questions from the pool.
    if cfg.eval_sets:
        index = LeakageIndex()
        for d in cfg.eval_sets:
            other = LeakageIndex.from_shards(d)
            index.ids |= other.ids
            index.questions |= other.questions
        leaks: Counter = Counter()
        examples_leaked: list[str] = []
        for src in sources:
            kept = []
            for ex in src.examples:
                how = index.leaked(ex.id, ex.question)
                if how:
                    leaks[how] += 1
                    if len(examples_leaked) < 10:
                        examples_leaked.append(f"{ex.source}:{ex.id}")
                    if cfg.leakage == "drop":
                        src.excluded["leaked"] += 1
                        continue
                kept.append(ex)
            src.examples = kept
        facts["leakage"] = {"policy": cfg.leakage, "by_id": leaks["id"], "by_question": leaks["question"],
                            "examples": examples_leaked, "eval_sets": list(cfg.eval_sets)}
        if sum(leaks.values()) and cfg.leakage == "refuse":
            raise BuildError(
                f"{sum(leaks.values())} training question(s) also appear in the evaluation set(s) "
                f"({leaks['id']} by id, {leaks['question']} by normalised question text; e.g. "
                f"{', '.join(examples_leaked[:3])}); pass --leakage drop to exclude them before sampling, "
                "or --leakage warn to keep them")
    # Sampling, with the trainer-tail fit applied to the total.
    chosen: list[Example] = []
    per_source = {}
    quotas = [s.spec.n for s in sources]
    total = sum(len(s.examples) if q is None else q for s, q in zip(sources, quotas, strict=True))
    if cfg.setting == "curriculum" and cfg.batch_prompts and cfg.tail != "keep":
        rem = total % cfg.batch_prompts
        if rem:
            if cfg.tail == "trim":
                delta = -rem
            else:
                delta = cfg.batch_prompts - rem
            quotas = _adjust_quotas(sources, quotas, delta)
            facts["tail_fit"] = {"policy": cfg.tail, "requested": total, "rows": total + delta}
    for src, q in zip(sources, quotas, strict=True):
        picked = _sample(src, q, cfg.seed)
        per_source[src.dataset] = len(picked)
        chosen += picked
    if len(sources) > 1:  # a mixture: interleave the sources so every level holds all of them
        random.Random(derive_seed(cfg.seed, "mixture")).shuffle(chosen)
    plan: Plan = []
    source = distractors or _PROVIDED
    source.prepare(chosen, progress=progress, inputs={s.dataset: s.checksum for s in sources})
    hint = getattr(source, "plan_hint", None)  # a BM25 source reads the passages the rows need in one batch
    if cfg.setting == "curriculum":
        paired = assign_levels(chosen, cfg)
        wants = [(ex, num_distractors(level, ex.hops, 1 << 30)) for ex, level in paired]
        if hint:
            hint(wants)
        for (ex, level), (_, want) in zip(paired, wants, strict=True):
            plan.append(PlannedRow(ex, level, source.available(ex, want), ex.hops))
    elif cfg.setting == "retrieved":
        if hint:
            hint([(ex, cfg.top_k) for ex in chosen])
        for ex in chosen:
            shown = source.select(ex, 0)
            j = ex.hops
            d = sum(not p.is_gold for p in shown)
            plan.append(PlannedRow(ex, level_for(d, j), d, j))
    else:
        if hint and cfg.setting == "distractor":
            hint([(ex, cfg.max_distractors) for ex in chosen])
        for ex in chosen:
            d = source.available(ex, cfg.max_distractors) if cfg.setting == "distractor" else 0
            j = ex.hops
            plan.append(PlannedRow(ex, level_for(d, j), d, j))
    if cfg.unanswerable_fraction > 0:
        plan = [r._replace(answerable=False) if is_unanswerable(cfg.seed, r.ex, cfg.unanswerable_fraction) else r
                for r in plan]
        facts["unanswerable"] = unanswerable_facts(plan, cfg, source)
    facts["per_source"] = per_source
    return plan, facts


def unanswerable_facts(plan: Plan, cfg: BuildConfig, source: ProvidedSource | None = None) -> dict[str, Any]:
    """The manifest's record of the unanswerable rows: the option, the counts, and the rows whose distractors ran
    out before every gold passage was replaced (they show fewer passages)."""
    from .distractors import _AnswerFilter

    short = missing = answer_shown = 0
    by_source: dict[str, Counter] = {}
    src = source or _PROVIDED
    for r in plan:
        by_source.setdefault(r.ex.source, Counter())["answerable" if r.answerable else "unanswerable"] += 1
        if not r.answerable:
            lack = max(0, r.d + r.hops - src.available(r.ex, r.d + r.hops))
            short += lack > 0
            missing += lack
            has_answer = _AnswerFilter(r.ex.answers)
            answer_shown += any(has_answer(p.title, p.text)
                                for p in select_documents(r.ex, r.d, cfg.seed, source, unanswerable=True))
    if short:
        log.warning("%d unanswerable row(s) ran out of distractors to replace their gold passages with and show %d "
                    "passage(s) fewer in all than their answerable form would (see the manifest's "
                    "unanswerable.short_rows)", short, missing)
    return {
        "fraction": cfg.unanswerable_fraction, "abstention_answer": cfg.abstention_answer,
        "answerable_rows": sum(1 for r in plan if r.answerable),
        "unanswerable_rows": sum(1 for r in plan if not r.answerable),
        "by_source": {k: {"answerable": v["answerable"], "unanswerable": v["unanswerable"]}
                      for k, v in sorted(by_source.items())},
        "short_rows": short, "missing_passages": missing,
        # rows that show a passage containing one of the question's answers (normalised, whole words): the
        # dataset's own distractors can (BM25 distractors and retrieved unanswerable rows never do)
        "answer_in_passages": answer_shown,
    }


def _list_array(offsets: list[int], values: pa.Array) -> pa.ListArray:
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values)


def render_rows(plan: Plan, cfg: BuildConfig, start: int = 0, stop: int | None = None, *,
                 tokenizer: Any = None, source: ProvidedSource | None = None) -> pa.Table:
    """The rows of ``plan[start:stop]`` (``curriculum_index`` = position in the whole plan) as an Arrow table,
    built column by column: the toolkit's one row renderer. No dict per row or passage, and the label, answer and
    gold-label arrays are shared by the columns that repeat them (``tests/row_oracle.py`` renders the same rows one
    dict at a time, as the check of this one). With a ``tokenizer``, the table also has the ``prompt_tokens``
    column (see :mod:`.lengths`)."""
    template = get_template(cfg.template)
    if cfg.index_base is not None:  # numbered templates (craft-v*): passages numbered from 0 or 1
        template = template.with_index_base(cfg.index_base)
    abstention = cfg.abstention_answer
    if cfg.unanswerable_fraction > 0:  # every row of such a build may abstain (the prompt tells none apart)
        template = template.with_abstention(abstention)
    stop = len(plan) if stop is None else stop
    seed, setting, ability = cfg.seed, cfg.setting, cfg.ability
    ids, sources, questions, contents, splits, source_ids, qtypes = [], [], [], [], [], [], []
    levels, ds, hopss, index = [], [], [], []
    p_off, p_labels, p_titles, p_texts, p_gold, p_origin, p_rank = [0], [], [], [], [], [], []
    answerable, gold_recall = [], []
    a_off, a_flat, g_off, g_flat = [0], [], [0], []
    system = template.system_prompt
    src = source or _PROVIDED
    for i in range(start, stop):
        ex, level, d, hops, ok = plan[i]
        docs = select_documents(ex, d, seed, source, unanswerable=not ok)
        titles = [doc.title for doc in docs]
        texts = [doc.text for doc in docs]
        labels = template.labels(titles)  # unique titles; numbers for a numbered template
        gold = [doc.is_gold for doc in docs]
        gold_labels = [lb for lb, g in zip(labels, gold, strict=True) if g]
        ids.append(f"{ex.source}-{ex.id}")
        sources.append(ex.source)
        questions.append(ex.question)
        contents.append(template.render_fields(ex.question, labels, titles, texts)[-1]["content"])
        splits.append(ex.split)
        source_ids.append(ex.id)
        qtypes.append(ex.qtype)
        levels.append(level)
        ds.append(d if ok else len(docs))  # an unanswerable row: every passage shown is a distractor
        hopss.append(src.hops(ex, len(gold_labels)) if ok else hops)
        index.append(i)
        p_labels += labels
        p_titles += titles
        p_texts += texts
        p_gold += gold
        p_origin += [getattr(doc, "origin", "provided") for doc in docs]  # a Document: the dataset's own
        p_rank += [getattr(doc, "bm25_rank", None) for doc in docs]
        p_off.append(len(p_labels))
        answerable.append(ok)
        gold_recall.append(src.recall(ex, docs))
        if ok:
            a_flat += ex.answers
        else:
            a_flat.append(abstention)
        a_off.append(len(a_flat))
        g_flat += gold_labels
        g_off.append(len(g_flat))
    n = len(ids)
    string = pa.string()
    labels_arr = pa.array(p_labels, string)
    passages = _list_array(p_off, pa.StructArray.from_arrays(
        [labels_arr, pa.array(p_titles, string), pa.array(p_texts, string), pa.array(p_gold, pa.bool_()),
         pa.array(p_origin, string), pa.array(p_rank, pa.int32())],
        fields=list(PASSAGE)))
    labels_list = _list_array(p_off, labels_arr)
    answers = _list_array(a_off, pa.array(a_flat, string))
    gold_labels_arr = _list_array(g_off, pa.array(g_flat, string))
    if system:
        roles = pa.array(["system", "user"] * n, string)
        msg_contents = pa.array([c for u in contents for c in (system, u)], string)
        prompt_off = list(range(0, 2 * n + 1, 2))
    else:
        roles = pa.array(["user"] * n, string)
        msg_contents = pa.array(contents, string)
        prompt_off = list(range(n + 1))
    prompt = _list_array(prompt_off, pa.StructArray.from_arrays([roles, msg_contents], fields=list(MESSAGE)))
    level_arr = pa.array(levels, pa.int32())
    hops_arr = pa.array(hopss, pa.int32())
    index_arr = pa.array(index, pa.int64())
    split_arr = pa.array(splits, string)
    source_arr = pa.array(sources, string)
    source_id_arr = pa.array(source_ids, string)
    answerable_arr = pa.array(answerable, pa.bool_())
    reward_model = pa.StructArray.from_arrays(
        [pa.array(["rule"] * n, string),
         pa.StructArray.from_arrays([answers, gold_labels_arr, answerable_arr], fields=list(GROUND_TRUTH))],
        fields=list(ROW_SCHEMA.field("reward_model").type))
    extra_info = pa.StructArray.from_arrays(
        [index_arr, split_arr, source_id_arr, source_arr, level_arr, hops_arr, labels_list],
        fields=list(EXTRA_INFO))
    columns = {
        "id": pa.array(ids, string), "data_source": source_arr, "ability": pa.array([ability] * n, string),
        "prompt": prompt, "question": pa.array(questions, string), "answers": answers, "passages": passages,
        "gold_labels": gold_labels_arr, "level": level_arr, "num_distractors": pa.array(ds, pa.int32()),
        "hops": hops_arr, "curriculum_index": index_arr, "reward_model": reward_model, "extra_info": extra_info,
        "source_id": source_id_arr, "split": split_arr, "qtype": pa.array(qtypes, string),
        "setting": pa.array([setting] * n, string), "template": pa.array([template.name] * n, string),
        "answerable": answerable_arr, "gold_recall": pa.array(gold_recall, pa.float64()),
    }
    extra: tuple[str, ...] = ()
    if cfg.schedule == "adaptive":  # what shows the rows at any level (curricula/adaptive.py)
        from .adaptive import COLUMNS, level_columns

        columns.update(level_columns(plan, start, stop, seed))
        extra = COLUMNS
    if tokenizer is None:
        schema = row_schema(*extra) if extra else ROW_SCHEMA
        return pa.Table.from_arrays([columns[f.name] for f in schema], schema=schema)
    if system:
        prompts = ([{"role": "system", "content": system}, {"role": "user", "content": u}] for u in contents)
    else:
        prompts = ([{"role": "user", "content": u}] for u in contents)
    columns[PROMPT_TOKENS] = pa.array(count_prompt_tokens(tokenizer, prompts), pa.int32())
    schema = row_schema(PROMPT_TOKENS, *extra)
    return pa.Table.from_arrays([columns[f.name] for f in schema], schema=schema)


PARALLEL_MIN_ROWS = 4096
# The plan and the tokenizer (or None), shared with forked workers copy-on-write.
_FORKED: tuple[Plan, BuildConfig, Path, Any, ProvidedSource | None] | None = None


def _write_shard(k: int) -> tuple[dict[str, Any], LengthStats | None]:
    assert _FORKED is not None
    plan, cfg, directory, tokenizer, source = _FORKED
    start = k * cfg.rows_per_shard
    stop = min(start + cfg.rows_per_shard, len(plan))
    hook = getattr(source, "before_render", None)  # a BM25 source reads the shard's passages in one batch
    if hook is not None:
        hook(plan[start:stop])
    table = render_rows(plan, cfg, start, stop, tokenizer=tokenizer, source=source)
    stats = None
    if tokenizer is not None:
        stats = LengthStats.of(*(table.column(c).to_pylist()
                                 for c in (PROMPT_TOKENS, "id", "level", "curriculum_index")))
    return write_one_shard(table, directory, k), stats


def write_plan(plan: Plan, cfg: BuildConfig, directory: Path, *, progress: bool = False, tokenizer: Any = None,
               source: ProvidedSource | None = None,
               lengths: list[LengthStats] | None = None) -> list[dict[str, Any]]:
    """Render and write the shards. Shards are independent, so with several CPUs they are made by forked worker
    processes (which share the loaded examples); each shard's bytes depend only on the plan, never on the
    number of workers. With a ``tokenizer`` the shards get the ``prompt_tokens`` column, and the prompt-length
    statistics of each shard are appended to ``lengths``, in shard order."""
    global _FORKED
    from .._progress import maybe_progress

    nshards = max(1, -(-len(plan) // cfg.rows_per_shard))
    workers = min(cfg.workers or os.cpu_count() or 1, nshards)
    # Forking costs a fraction of a second: worth it for large builds, or when workers are asked for explicitly.
    big_enough = cfg.workers is not None or len(plan) >= PARALLEL_MIN_ROWS
    use_fork = workers > 1 and big_enough and "fork" in mp.get_all_start_methods()
    _FORKED = (plan, cfg, directory, tokenizer, source)
    entries: list[dict[str, Any]] = []
    try:
        with maybe_progress(progress, unit="rows") as bar:
            task = bar.add_task("writing shards", total=len(plan)) if bar else None
            if use_fork:
                with mp.get_context("fork").Pool(workers, die_with_parent, (os.getpid(),)) as pool:
                    results = pool.imap(_write_shard, range(nshards))
                    for e, stats in results:
                        entries.append(e)
                        if stats is not None and lengths is not None:
                            lengths.append(stats)
                        if bar:
                            bar.advance(task, e["rows"])
            else:
                for k in range(nshards):
                    e, stats = _write_shard(k)
                    entries.append(e)
                    if stats is not None and lengths is not None:
                        lengths.append(stats)
                    if bar:
                        bar.advance(task, e["rows"])
    finally:
        _FORKED = None
    return entries


def _adjust_quotas(sources: Sequence[LoadedSource], quotas: list[int | None], delta: int) -> list[int | None]:
    """Trim (delta < 0) from the last sources, or pad (delta > 0) from sources with questions left."""
    out = [len(s.examples) if q is None else q for s, q in zip(sources, quotas, strict=True)]
    order = range(len(out) - 1, -1, -1) if delta < 0 else range(len(out))
    for i in order:
        if delta == 0:
            break
        if delta < 0:
            take = min(out[i] - 1, -delta)
            out[i] -= take
            delta += take
        else:
            room = len(sources[i].examples) - out[i]
            take = min(room, delta)
            out[i] += take
            delta -= take
    if delta > 0:
        raise BuildError(f"cannot pad to a multiple of the batch: {delta} more question(s) needed than the "
                         "sources have; use --tail trim instead")
    return list(out)


def plan_summary(plan: Plan) -> dict[str, Any]:
    """Counts per level, hops, distractors and source: the manifest's and the data card's statistics."""

    by_source_level: dict[str, Counter] = {}
    for r in plan:
        by_source_level.setdefault(r.ex.source, Counter())[r.level] += 1
    return {
        "levels": distribution(r.level for r in plan),
        "hops": distribution(r.hops for r in plan),
        "num_distractors": distribution(r.d for r in plan),
        "sources": distribution(r.ex.source for r in plan),
        "levels_by_source": {k: {str(lv): v[lv] for lv in sorted(v)} for k, v in sorted(by_source_level.items())},
        "passages_mean": round(sum(r.hops + r.d for r in plan) / len(plan), 3) if plan else 0,
    }


def origin_summary(directory: Path, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The origins of the shown passages, the BM25 ranks of the distractors and, in the retrieved setting, the
    distribution of recall@N, read back from the written shards (only those columns): what the manifest and the
    data card report for builds with an index."""
    import numpy as np
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    origins: Counter = Counter()
    ranks: Counter = Counter()
    recall: Counter = Counter()
    edges = np.array([5, 10, 20, 50])  # the upper ends of _RANK_BUCKETS but the last
    for e in entries:
        t = pq.ParquetFile(directory / e["file"]).read(columns=[
            "passages.list.element.is_gold", "passages.list.element.origin", "passages.list.element.bm25_rank",
            "gold_recall", "answerable"])
        p = pc.list_flatten(t.column("passages").combine_chunks())
        flat = pa.table({"is_gold": p.field("is_gold"), "origin": p.field("origin")})
        for row in flat.group_by(["is_gold", "origin"]).aggregate([("is_gold", "count")]).to_pylist():
            origins[f"{'gold' if row['is_gold'] else 'distractor'}:{row['origin']}"] += row["is_gold_count"]
        r = p.field("bm25_rank").filter(pc.and_(pc.invert(p.field("is_gold")), pc.is_valid(p.field("bm25_rank"))))
        counts = np.bincount(np.searchsorted(edges, r.to_numpy(zero_copy_only=False), side="left"), minlength=5)
        for bucket, c in zip(_RANK_BUCKETS, counts.tolist(), strict=True):
            ranks[bucket] += c
        rec = t.column("gold_recall").filter(pc.and_(pc.is_valid(t.column("gold_recall")), t.column("answerable")))
        for row in pc.value_counts(rec).to_pylist():
            recall[f"{row['values']:.2f}"] += row["counts"]
    out: dict[str, Any] = {"origins": dict(sorted(origins.items())),
                           "distractor_bm25_ranks": {k: ranks[k] for k in _RANK_BUCKETS if ranks[k]}}
    if recall:
        n = sum(recall.values())
        out["gold_recall"] = {"distribution": dict(sorted(recall.items())),
                              "mean": round(sum(float(k) * v for k, v in recall.items()) / n, 4),
                              "all": recall.get("1.00", 0), "none": recall.get("0.00", 0),
                              "some": n - recall.get("1.00", 0) - recall.get("0.00", 0)}
    return out


_RANK_BUCKETS = ("1-5", "6-10", "11-20", "21-50", "51+")


def _rank_bucket(rank: int) -> str:
    return "1-5" if rank <= 5 else "6-10" if rank <= 10 else "11-20" if rank <= 20 else "21-50" if rank <= 50 else "51+"


def current_command() -> str:
    argv = list(sys.argv)
    if argv and argv[0].endswith(("curriculum", "cli.py", "__main__.py")):
        argv[0] = "curriculum"
    return shlex.join(argv)


def build_curriculum(cfg: BuildConfig, *, command: str | None = None, progress: bool = False) -> BuildResult:
    """Load, sample, order, render and write a curriculum (or an evaluation set) as described by ``cfg``."""
    from ..cards import pyplot

    pyplot()  # for the card, imported here: its import would keep the build's frame, and its rows, alive
    with gc_paused():
        return _build(cfg, command=command, progress=progress)


def _portable(path: str | None, out: str | Path) -> str | None:
    if path is None or _is_hub(path) or not Path(path).exists():
        return path  # a Hub id (or a name the loaders resolve), kept as given
    return portable_path(path, out)


def recorded_config(cfg: BuildConfig) -> dict[str, Any]:
    """The configuration as the manifest records it: local paths relative to the output where they lie inside
    or beside it, else file names (cards and manifests are published as they are; the sources' checksums
    identify the files)."""
    d = cfg.to_dict()
    out = cfg.out
    for s in d["sources"]:
        s["input"] = _portable(s["input"], out)
    d["eval_sets"] = [_portable(str(e), out) for e in d["eval_sets"]]
    if d.get("tokenizer"):
        d["tokenizer"] = _portable(d["tokenizer"], out)
    d["out"] = Path(out).name
    return json.loads(json.dumps(d))


def same_build(manifest: dict[str, Any], cfg: BuildConfig) -> bool:
    """Whether a shard directory was built by ``cfg``: the recorded configuration, and the checksum of every
    local input file (the configuration names a file by a portable path, which does not identify its content)."""
    if manifest.get("config") != recorded_config(cfg):
        return False
    recorded = {s.get("dataset"): s.get("sha256") for s in manifest.get("sources") or []}
    for spec in cfg.sources:
        if spec.input and not _is_hub(spec.input):
            name = get_loader(spec.dataset).name
            try:
                if recorded.get(name) != sha256_file(spec.input):
                    return False
            except OSError:
                return False
    return True


def _source_record(s: LoadedSource, out: str) -> dict[str, Any]:
    inp = s.spec.input
    local = bool(inp) and not _is_hub(inp)
    return {
        "dataset": s.dataset,
        "input": Path(inp).name if local else inp,  # the file name; the path is in `path` when portable
        "path": relative_path(inp, out) if local else None,  # relative to the output, when inside or beside it
        "split": s.examples[0].split if s.examples else None,
        "sha256": s.checksum,
        "hub": (inp[len("hf://"):] if _is_hub(inp) else None if inp else get_loader(s.dataset).hub_path),
        "records_loaded": len(s.examples) + sum(s.excluded.values()), "excluded": dict(s.excluded),
        "skipped": dict(s.report.counts), "license": get_loader(s.dataset).license,
    }


def _build(cfg: BuildConfig, *, command: str | None, progress: bool) -> BuildResult:
    check_output(cfg.out, overwrite=cfg.overwrite)  # fail before loading anything, not after
    cfg.validate()
    tokenizer = load_tokenizer(cfg.tokenizer) if cfg.tokenizer else None  # fail before loading the data, too
    for s in cfg.sources:
        s.dataset = get_loader(s.dataset).name
        s.input = str(s.input) if s.input is not None else None
    cfg.eval_sets = [str(e) for e in cfg.eval_sets]
    cfg.out = str(cfg.out)
    names = [s.dataset for s in cfg.sources]
    if len(set(names)) != len(names):
        raise BuildError(f"a dataset appears twice in the mixture: {names}")
    index = None
    if cfg.index:
        from ..retrieval import load_index

        index = load_index(cfg.index)
        cfg.index = str(cfg.index)
    kind = "retrieved" if cfg.setting == "retrieved" else cfg.distractors
    distractors = make_source(kind, seed=cfg.seed, index=index, top_k=cfg.top_k)
    t0 = time.perf_counter()
    sources = [load_source(cfg, s, progress=progress) for s in cfg.sources]
    t1 = time.perf_counter()
    plan, facts = plan_rows(cfg, sources, distractors, progress=progress)
    log.debug("loaded %d question(s) in %.2fs, planned %d row(s) in %.2fs", sum(len(s.examples) for s in sources),
              t1 - t0, len(plan), time.perf_counter() - t1)
    if not plan:
        raise BuildError("the build produced no rows")
    stats = plan_summary(plan)
    tail = trainer_tail(len(plan), cfg.batch_prompts) if cfg.setting == "curriculum" else None
    manifest: dict[str, Any] = {
        "kind": cfg.setting,
        "toolkit": {"name": "rag-curriculum", "version": __version__},
        "config": recorded_config(cfg),
        "seed": cfg.seed,
        "K": {s.dataset: (cfg.K or _source_K(cfg, s.dataset)) for s in sources},
        "command": command or current_command(),
        "sources": [{**_source_record(s, cfg.out), "sampled": facts["per_source"].get(s.dataset, 0)}
                    for s in sources],
        "counts": stats,
        "trainer_tail": tail,
    }
    for k in ("leakage", "tail_fit", "unanswerable"):
        if k in facts:
            manifest[k] = facts[k]
    if index is not None:  # completed from the shards once they are written (origin_summary)
        manifest["distractors"] = {**distractors.facts(), "index": index.describe(cfg.out)}
    if "leakage" in manifest:
        manifest["leakage"]["eval_sets"] = recorded_config(cfg)["eval_sets"]
    if tail and tail["unseen_rows"]:
        log.warning("a trainer with %d prompts per step drops the last partial batch: %d row(s) of %d will never "
                    "be trained on (use --tail trim or --tail pad)", tail["batch_prompts"], tail["unseen_rows"],
                    len(plan))
    from .. import cards as card

    levels = [r.level for r in plan]
    t2 = time.perf_counter()
    adaptive = ("source_position", "pool_size") if cfg.schedule == "adaptive" else ()
    schema = row_schema(*adaptive) if adaptive else ROW_SCHEMA

    def writer(d: Path) -> list[dict[str, Any]]:
        entries = write_plan(plan, cfg, d, progress=progress, source=distractors)
        if index is not None:
            manifest["distractors"].update(origin_summary(d, entries))
        return entries

    if tokenizer is not None:
        schema = row_schema(PROMPT_TOKENS, *adaptive)

        def writer(d: Path) -> list[dict[str, Any]]:
            per_shard: list[LengthStats] = []
            entries = write_plan(plan, cfg, d, progress=progress, tokenizer=tokenizer, lengths=per_shard,
                                 source=distractors)
            if index is not None:
                manifest["distractors"].update(origin_summary(d, entries))
            stats = per_shard[0]
            for s in per_shard[1:]:
                stats = stats.merge(s)
            # write_shards copies the manifest after the shards are written: the record goes in with the rest
            manifest["prompt_tokens"] = stats.to_manifest(tokenizer_info(cfg.tokenizer, tokenizer))
            longest = manifest["prompt_tokens"]["longest"]
            log.info("longest prompt: %d tokens (row %s, curriculum_index %d, level %d) with %s's chat template",
                     longest["tokens"], longest["id"], longest["curriculum_index"], longest["level"], cfg.tokenizer)
            return entries

    manifest = write_shards(writer, cfg.out, manifest=manifest, overwrite=cfg.overwrite,
                            rows_per_shard=cfg.rows_per_shard, schema=schema,
                            card=lambda d, m: card.write_build_card(d, m, levels))
    log.debug("rendered and wrote %d shard(s) with the card in %.2fs", len(manifest["shards"]),
              time.perf_counter() - t2)
    return BuildResult(Path(cfg.out), manifest, len(plan))
