"""Build stage 2, plan: leakage against evaluation sets, sampling (with the trainer-tail fit), the mixture's
interleaving, each row's level and distractor count, and the unanswerable rows. Hands :class:`BuildPlan` (the
:class:`PlannedRow` list in training order, and the facts the manifest records) to the render stage
(:mod:`._render`)."""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .._plumbing import derive_seed, distribution
from ..cards import capped_levels_text, short_rows_text
from ..difficulty import collapsed_levels, level_for, levels_as_built, num_distractors, shown_level
from ..difficulty.profile import LevelProfile
from ..errors import BuildError
from ..loaders import questions_only
from ..records import Example
from ..shards import read_table
from ._calibrated import CALIBRATED, calibrated_order, load_profile, profile_facts, row_id
from ._config import BuildConfig, source_K
from ._leakage import LeakageIndex
from ._schedules import resolve_schedule
from ._sources import BuildSources, LoadedSource
from .distractors import PROVIDED, DistractorSource, _AnswerFilter

log = logging.getLogger(__name__)


def is_unanswerable(seed: int, ex: Example, fraction: float) -> bool:
    """Whether ``ex`` becomes an unanswerable row of a build with ``--unanswerable-fraction fraction``: a uniform
    draw from ``(build seed, dataset, example id)`` only, below ``fraction``."""
    return fraction > 0 and derive_seed(seed, "unanswerable", ex.source, ex.id) < fraction * 2.0 ** 64


class PlannedRow(NamedTuple):
    """One row before rendering: the example, its level, its number of distractors d, its hops j, and whether it
    is answerable (False: every gold passage is replaced by a distractor, see :func:`is_unanswerable`)."""

    ex: Example
    level: int
    d: int
    hops: int
    answerable: bool = True


Plan = list[PlannedRow]  # in training order


@dataclass
class BuildPlan:
    """The plan stage's hand-off: the rows in training order, and what the manifest records about them
    (``per_source`` counts, and ``leakage``, ``tail_fit``, ``unanswerable`` where they apply)."""

    rows: Plan
    facts: dict[str, Any] = field(default_factory=dict)


def _where(src: LoadedSource) -> str:
    """A source as a message names it: its file (or the Hub) and its dataset."""
    return f"{src.spec.input} ({src.dataset})" if src.spec.input else f"{src.dataset} (from the Hub)"


def _found(src: LoadedSource) -> str:
    """What a source's reading found: usable questions, and what was excluded or skipped."""
    parts = [f"{len(src.examples)} usable question(s)"]
    if src.excluded:
        parts.append("excluded: " + ", ".join(f"{k} {v}" for k, v in sorted(src.excluded.items())))
    if src.report.total:
        parts.append(src.report.summary())
    return "; ".join(parts)


def no_rows_error(sources: BuildSources) -> BuildError:
    """The error of a build that made no row: each input file named with what its reading found."""
    found = " | ".join(f"{_where(s)}: {_found(s)}" for s in sources.loaded)
    return BuildError(f"the build produced no rows: {found}" if found else "the build produced no rows",
                      hint="check --input: it must hold questions of the dataset (the file may be empty or hold "
                           "an empty list)")


def _sample(src: LoadedSource, n: int | None, seed: int) -> list[Example]:
    pool = src.examples
    if n is not None and n > len(pool):
        raise BuildError(
            f"{_where(src)}: asked for n={n} questions but only {len(pool)} are available"
            f"{' after exclusions' if src.excluded else ''}; lower --n, or pass --n all to use every question")
    rng = random.Random(derive_seed(seed, "sample", src.dataset))
    idx = rng.sample(range(len(pool)), len(pool) if n is None else n)
    if questions_only(src.dataset):  # Search-R1's data files: the file's order (with --n, a seeded subset of it)
        idx.sort()
    return [pool[i] for i in idx]


#: The manifest's ``row_order``: how the rows came to be in their order.
ROW_ORDERS = {
    "input": "the input file's order (questions without passages: Search-R1's data files)",
    "sample": "the seeded sample's order (a seeded draw of the questions, interleaved for a mixture)",
    "level": "sorted by level (a schedule whose levels go down somewhere)",
    "shuffled": "--order shuffled",
    "hops-level": "--order hops-level",
    "calibrated": "the model's easiest first (--schedule calibrated: the pass rate at the placed level, high to low)",
}


def row_order(cfg: BuildConfig, sources: Sequence[LoadedSource], chosen: Sequence[Example],
              ordered: Sequence[Example]) -> str:
    """The key of :data:`ROW_ORDERS` that says how ``ordered`` (the rows) came from ``chosen`` (the sample)."""
    if cfg.schedule == CALIBRATED and cfg.order == "level":
        return "calibrated"
    if [id(ex) for ex in ordered] != [id(ex) for ex in chosen]:
        return cfg.order  # "level" (the schedule's sort), "shuffled" or "hops-level"
    return "input" if len(sources) == 1 and questions_only(sources[0].dataset) else "sample"


def assign_levels(examples: Sequence[Example], cfg: BuildConfig, profile: LevelProfile | None = None
                  ) -> list[tuple[Example, int]]:
    """Pair each example with its level, in training order, according to the schedule and the ordering (the
    calibrated schedule: by ``profile``, read from ``cfg.profile`` when not given)."""
    K_by_source = {s.dataset: cfg.K or source_K(cfg, s.dataset) for s in cfg.sources}

    def K_of(ex: Example) -> int:
        return K_by_source[ex.source]

    if cfg.schedule == CALIBRATED:
        prof = profile or load_profile(cfg, sorted(K_by_source))
        return calibrated_order(examples, cfg, prof, K_of)
    schedule = resolve_schedule(cfg.schedule, cfg.pieces)

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


def plan_rows(cfg: BuildConfig, sources: Sequence[LoadedSource], distractors: DistractorSource | None = None, *,
              progress: bool = False) -> tuple[Plan, dict[str, Any]]:
    """Sample and order the questions and fix each row's level and distractor count; return that plan with the
    facts the manifest records (leakage, tail fit, per-source counts). Rendering is separate (:func:`render_rows`)."""
    facts: dict[str, Any] = {}
    if cfg.eval_sets:  # before sampling, so `drop` can exclude leaked questions from the pool
        facts["leakage"] = _filter_leakage(cfg, sources)
    if cfg.questions_from:  # before sampling, as the leakage filter: --n counts the questions kept
        keep_questions_from(cfg, sources)
    chosen, per_source = _choose(cfg, sources, facts)
    source = distractors or PROVIDED
    source.prepare(chosen, progress=progress, inputs={s.dataset: s.checksum for s in sources})
    prof = load_profile(cfg, [s.dataset for s in sources]) if cfg.profile else None
    plan = _plan_setting(cfg, chosen, source, prof)
    if prof is not None:
        facts["profile"] = profile_facts(cfg, chosen, [(r.ex, r.level) for r in plan], prof,
                                         lambda exs, c: assign_levels(exs, c, prof))
    if cfg.unanswerable_fraction > 0:
        plan = [r._replace(answerable=False) if is_unanswerable(cfg.seed, r.ex, cfg.unanswerable_fraction) else r
                for r in plan]
        facts["unanswerable"] = unanswerable_facts(plan, cfg, source)
    facts["per_source"] = per_source
    facts["row_order"] = row_order(cfg, sources, chosen, [r.ex for r in plan])
    if cfg.setting == "curriculum":
        capped = capped_levels(plan, getattr(source, "name", "provided"))
        if capped:
            facts["capped_levels"] = capped
            # a warning where levels of this build hold one difficulty (steps of the curriculum lost); where only
            # the top level's label overstates it (the paper's K under max or min-max), the card says so
            collapse = any(len(g["levels"]) > 1 for g in capped["groups"])
            log.log(logging.WARNING if collapse else logging.INFO, "%s", capped_levels_text(capped, len(plan)))
        short = short_of_level(plan, capped)
        if short:
            facts["short_rows"] = short
            log.warning("%s", short_rows_text(short))
    return plan, facts


def capped_levels(plan: Plan, source: str) -> dict[str, Any] | None:
    """The levels of a curriculum that hold the same difficulty because their questions have fewer distractors
    than the levels ask for (HotpotQA supplies 8: a linear K = 10 build's levels 9 and 10 show what level 8 shows),
    per dataset (:func:`~rag_curriculum.difficulty.synthetic.collapsed_levels`), with the distractor ``source``
    (what would fill them depends on it); None when every level got what it asks for."""
    by_source: dict[str, list[PlannedRow]] = {}
    for r in plan:
        by_source.setdefault(r.ex.source, []).append(r)
    groups = [{"dataset": name, **g} for name, rows in sorted(by_source.items())
              for g in collapsed_levels(levels_as_built((r.level, r.hops, r.d) for r in rows))]
    return {"distractors": source, "groups": groups} if groups else None


#: The rows short of their level a manifest names (the count is of all of them).
SHORT_ROWS_NAMED = 20


def short_of_level(plan: Plan, capped: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The rows shown fewer distractors than their level asks for (their question has fewer), in levels where
    most rows got what the level asks: one such row hides in its level's mean (a HotpotQA question with only its
    two gold paragraphs, at level 6, shows 0 distractors). In the levels :func:`capped_levels` names (most rows
    short), the rows short of the cap they collapse to. Each row by ``id`` (the row's, as the shards have it),
    ``dataset``, ``curriculum_index``, ``level``, distractors ``asked`` and ``shown``, and the level it ``shows``;
    the first :data:`SHORT_ROWS_NAMED`, with the ``count`` of all. None when there is none."""
    cap = {(g["dataset"], lv): g["max_distractors"] for g in (capped or {}).get("groups", []) for lv in g["capped"]}
    rows = []
    for i, r in enumerate(plan):
        if r.hops <= 0:
            continue
        asked = num_distractors(r.level, r.hops, 1 << 30)
        if r.d < min(asked, cap.get((r.ex.source, r.level), asked)):  # a capped level: short of its cap
            row = f"{r.ex.extra.get('data_source') or r.ex.source}-{r.ex.extra.get('row_id', r.ex.id)}"  # as rendered
            rows.append({"id": row, "dataset": r.ex.source, "curriculum_index": i, "level": r.level,
                         "asked": asked, "shown": r.d, "shows": shown_level(r.level, r.hops, r.d)})
    if not rows:
        return None
    rows.sort(key=lambda x: (x["shown"] - x["asked"], x["curriculum_index"]))  # the farthest short first
    return {"count": len(rows), "rows": rows[:SHORT_ROWS_NAMED]}


def keep_questions_from(cfg: BuildConfig, sources: Sequence[LoadedSource]) -> None:
    """Keep only the questions whose rows ``--questions-from`` holds (a partition's bucket: the base model's
    split); the others are counted as excluded (each source's ``excluded`` in the manifest and the card)."""
    ids = set(read_table(cfg.questions_from or "", columns=["id"]).column("id").to_pylist())
    for src in sources:
        before = len(src.examples)
        src.examples = [ex for ex in src.examples if row_id(ex) in ids]
        if before > len(src.examples):
            src.excluded["not in --questions-from"] += before - len(src.examples)


def _filter_leakage(cfg: BuildConfig, sources: Sequence[LoadedSource]) -> dict[str, Any]:
    """The training questions that also appear in the evaluation sets (by id or by normalised question text),
    counted, and dropped from the sources' pools with ``--leakage drop``; refused with ``refuse``. The manifest's
    ``leakage`` record."""
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
    if sum(leaks.values()) and cfg.leakage == "refuse":
        raise BuildError(
            f"{sum(leaks.values())} training question(s) also appear in the evaluation set(s) "
            f"({leaks['id']} by id, {leaks['question']} by normalised question text; e.g. "
            f"{', '.join(examples_leaked[:3])}); pass --leakage drop to exclude them before sampling, "
            "or --leakage warn to keep them")
    return {"policy": cfg.leakage, "by_id": leaks["id"], "by_question": leaks["question"],
            "examples": examples_leaked, "eval_sets": list(cfg.eval_sets)}


def _choose(cfg: BuildConfig, sources: Sequence[LoadedSource], facts: dict[str, Any]
            ) -> tuple[list[Example], dict[str, int]]:
    """The questions of the build: each source's quota sampled with the seed (the trainer-tail fit applied to the
    total, recorded in ``facts["tail_fit"]``), a mixture's interleaved; and how many each source gave."""
    chosen: list[Example] = []
    per_source = {}
    quotas = [s.spec.n for s in sources]
    if cfg.n_up_to:  # n is a ceiling: a source holding fewer gives all it holds (recorded)
        capped = {s.dataset: {"asked": q, "available": len(s.examples)} for s, q in zip(sources, quotas, strict=True)
                  if q is not None and q > len(s.examples)}
        quotas = [q if q is None else min(q, len(s.examples)) for s, q in zip(sources, quotas, strict=True)]
        if capped:
            facts["n_up_to"] = capped
            for name, c in capped.items():
                log.info("%s: n=%d is a ceiling; the file holds %d usable question(s): all of them are taken", name,
                         c["asked"], c["available"])
    total = sum(len(s.examples) if q is None else q for s, q in zip(sources, quotas, strict=True))
    if cfg.setting == "curriculum" and cfg.batch_prompts and cfg.tail != "keep":
        rem = total % cfg.batch_prompts
        if cfg.tail == "trim" and total < cfg.batch_prompts:
            _refuse_trim_to_nothing(cfg, sources, total)
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
    return chosen, per_source


def _plan_setting(cfg: BuildConfig, chosen: list[Example], source: DistractorSource,
                  profile: LevelProfile | None = None) -> Plan:
    """Each question's row as the setting plans it: a curriculum's level and the distractors it shows; the
    retrieved setting's ranking; the distractor or ideal setting's passages, and the level they make. The source's
    planning hook sees every row's need first (a BM25 source reads the passages the rows need in one batch)."""
    plan: Plan = []
    if cfg.setting == "curriculum":
        paired = assign_levels(chosen, cfg, profile)
        wants = [(ex, num_distractors(level, ex.hops, 1 << 30)) for ex, level in paired]
        source.plan_hint(wants)
        for (ex, level), (_, want) in zip(paired, wants, strict=True):
            plan.append(PlannedRow(ex, level, source.available(ex, want), ex.hops))
    elif cfg.setting == "retrieved":
        source.plan_hint([(ex, cfg.top_k) for ex in chosen])
        for ex in chosen:
            shown = source.select(ex, 0)
            j = ex.hops
            d = sum(not p.is_gold for p in shown)
            plan.append(PlannedRow(ex, level_for(d, j), d, j))
    else:
        if cfg.setting == "distractor":
            source.plan_hint([(ex, cfg.max_distractors) for ex in chosen])
        for ex in chosen:
            d = source.available(ex, cfg.max_distractors) if cfg.setting == "distractor" else 0
            j = ex.hops
            plan.append(PlannedRow(ex, level_for(d, j), d, j))
    return plan


def make_plan(cfg: BuildConfig, sources: BuildSources, *, progress: bool = False) -> BuildPlan:
    """Stage 2: :func:`plan_rows` over the sources stage's hand-off."""
    rows, facts = plan_rows(cfg, sources.loaded, sources.distractors, progress=progress)
    return BuildPlan(rows, facts)


def unanswerable_facts(plan: Plan, cfg: BuildConfig, source: DistractorSource | None = None) -> dict[str, Any]:
    """The manifest's record of the unanswerable rows: the option, the counts, and the rows whose distractors ran
    out before every gold passage was replaced (they show fewer passages)."""
    short = missing = answer_shown = 0
    by_source: dict[str, Counter] = {}
    src = source or PROVIDED
    for r in plan:
        by_source.setdefault(r.ex.source, Counter())["answerable" if r.answerable else "unanswerable"] += 1
        if not r.answerable:
            lack = max(0, r.d + r.hops - src.available(r.ex, r.d + r.hops))
            short += lack > 0
            missing += lack
            has_answer = _AnswerFilter(r.ex.answers)
            answer_shown += any(has_answer(p.title, p.text)
                                for p in src.select(r.ex, r.d, cfg.seed, unanswerable=True))
    if short:
        log.warning("%d unanswerable row(s) ran out of distractors to replace their gold with: %d passage(s) "
                    "fewer in all (the manifest's unanswerable.short_rows)", short, missing)
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


def _refuse_trim_to_nothing(cfg: BuildConfig, sources: Sequence[LoadedSource], total: int) -> None:
    """``--tail trim`` of fewer rows than one batch would leave no row, a curriculum no trainer takes a step on:
    refused with the numbers, and the options that would give a step (never ``--tail trim`` itself)."""
    batch = cfg.batch_prompts
    have = sum(len(s.examples) for s in sources)
    ways = [f"--tail pad ({batch} rows, one step)"] if have >= batch else []
    ways += [f"--n {batch} or more" + ("" if have >= batch else f" (the sources have {have} questions)"),
             f"--batch-prompts {total} or fewer"]
    raise BuildError(f"--tail trim would leave 0 rows: the {total} row(s) asked for are fewer than one batch of "
                     f"--batch-prompts {batch}, so a trainer would train 0 steps on them. Nothing was written",
                     hint="use " + ", or ".join(ways))


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


def plan_summary(plan: Plan, *, as_built: bool = True) -> dict[str, Any]:
    """Counts per level, hops, distractors and source: the manifest's and the data card's statistics; with
    ``as_built`` (a curriculum's), what each level holds as built (``by_level``: distractors asked and shown,
    passages, rows short of distractors: :func:`~rag_curriculum.difficulty.synthetic.levels_as_built`)."""

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
        **({"by_level": {str(k): v for k, v in levels_as_built((r.level, r.hops, r.d) for r in plan).items()}}
           if as_built else {}),
    }
