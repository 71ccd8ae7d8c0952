"""Build stage 3, render: each planned row's passages (:func:`select_documents`), the rows as Arrow columns
(:func:`render_rows`, the toolkit's one row renderer) and the shards, made by forked workers on several CPUs
(:func:`write_plan`). Hands the written shards' entries to the write stage (:mod:`._write`).

The adaptive columns (``source_position``, ``pool_size``) are rendered here too, so :mod:`.adaptive` builds on this
module and nothing here imports it."""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from .._plumbing import die_with_parent, maybe_progress
from ..lengths import LengthStats, count_prompt_tokens
from ..prompts import get_template
from ..records import Document, Example
from ..shards import (
    EXTRA_INFO,
    GROUND_TRUTH,
    MESSAGE,
    PASSAGE,
    PROMPT_TOKENS,
    ROW_SCHEMA,
    row_schema,
    write_one_shard,
)
from ._config import BuildConfig
from ._plan import Plan
from .distractors import PROVIDED, DistractorSource, Shown, distractor_pool

#: The per-passage and per-row columns of an adaptive build (see :mod:`.adaptive`).
SOURCE_POSITION = "source_position"
POOL_SIZE = "pool_size"
ADAPTIVE_COLUMNS = (SOURCE_POSITION, POOL_SIZE)

#: From this many rows on a build forks its shard writers without being asked (forking costs a fraction of a second)
PARALLEL_MIN_ROWS = 4096
#: ... on at least this many CPUs. The forked writers' copy-on-write page faults on the rows they read and the
#: memory they reuse made their rendering cost 1.8x the CPU it costs in-process (20,000 HotpotQA rows: 4.9 s
#: against 2.8 s); with two CPUs that is more than the second process gives, so such a build renders in-process
#: while a thread writes the shards.
FORK_MIN_CPUS = 3


def select_documents(ex: Example, d: int, seed: int, source: DistractorSource | None = None, *,
                     unanswerable: bool = False) -> list[Document | Shown]:
    """All gold documents plus ``d`` distractors, in a shuffled order, from the example's own generator; the
    distractors come from ``source`` (default: the dataset's own; see :mod:`.distractors`). With
    ``unanswerable`` each gold document is replaced by the next distractor of that order (while any is left)."""
    return (source or PROVIDED).select(ex, d, seed, unanswerable=unanswerable)


def level_columns(plan: Sequence[Any], start: int, stop: int, seed: int) -> dict[str, pa.Array]:
    """The two adaptive columns of ``plan[start:stop]`` (the rows :func:`render_rows` renders)."""
    offsets, flat, sizes = [0], [], []
    for i in range(start, stop):
        row = plan[i]
        ex, d = row.ex, row.d
        pool = distractor_pool(ex)
        where = {id(doc): n for n, doc in enumerate([doc for doc in ex.documents if doc.is_gold] + pool)}
        flat += [where[id(doc)] for doc in select_documents(ex, d, seed, unanswerable=not row.answerable)]
        offsets.append(len(flat))
        sizes.append(len(pool))
    return {SOURCE_POSITION: pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), pa.array(flat, pa.int32())),
            POOL_SIZE: pa.array(sizes, pa.int32())}


def _list_array(offsets: list[int], values: pa.Array) -> pa.ListArray:
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values)


def render_rows(plan: Plan, cfg: BuildConfig, start: int = 0, stop: int | None = None, *,
                tokenizer: Any = None, source: DistractorSource | None = None) -> pa.Table:
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
    t_off, t_flat, own_target = [0], [], False  # ground_truth.target: the answers, or a Search-R1 file's own
    system = template.system_prompt
    src = source or PROVIDED
    for i in range(start, stop):
        ex, level, d, hops, ok = plan[i]
        docs = select_documents(ex, d, seed, source, unanswerable=not ok)
        titles = [doc.title for doc in docs]
        texts = [doc.text for doc in docs]
        labels = template.labels(titles)  # unique titles; numbers for a numbered template
        gold = [doc.is_gold for doc in docs]
        gold_labels = [lb for lb, g in zip(labels, gold, strict=True) if g]
        data_source = ex.extra.get("data_source") or ex.source  # Search-R1's rows keep their own
        ids.append(f"{data_source}-{ex.extra.get('row_id', ex.id)}")  # {data_source}-{the source's own id}
        sources.append(data_source)
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
            target = ex.extra.get("target")
            own_target = own_target or target is not None
            t_flat += ex.answers if target is None else target
        else:
            a_flat.append(abstention)
            t_flat.append(abstention)
        a_off.append(len(a_flat))
        t_off.append(len(t_flat))
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
    target = _list_array(t_off, pa.array(t_flat, string)) if own_target else answers
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
         pa.StructArray.from_arrays([answers, gold_labels_arr, answerable_arr, target], fields=list(GROUND_TRUTH))],
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
        columns.update(level_columns(plan, start, stop, seed))
        extra = ADAPTIVE_COLUMNS
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



@dataclass(frozen=True)
class ShardJob:
    """What every shard writer needs: the plan, the config, the shard directory, the tokenizer (or None) and the
    distractor source. A forked worker inherits it (copy-on-write, never pickled) through the pool's
    initializer; only shard numbers and the written entries cross the pipe."""

    plan: Plan
    cfg: BuildConfig
    directory: Path
    tokenizer: Any = None
    source: DistractorSource | None = None

    @property
    def shards(self) -> int:
        return max(1, -(-len(self.plan) // self.cfg.rows_per_shard))

    def render(self, k: int) -> tuple[pa.Table, LengthStats | None]:
        """Shard ``k``'s rows, and their prompt-length statistics with a tokenizer."""
        plan, cfg = self.plan, self.cfg
        start = k * cfg.rows_per_shard
        stop = min(start + cfg.rows_per_shard, len(plan))
        (self.source or PROVIDED).before_render(plan[start:stop])
        table = render_rows(plan, cfg, start, stop, tokenizer=self.tokenizer, source=self.source)
        stats = None
        if self.tokenizer is not None:
            stats = LengthStats.of(*(table.column(c).to_pylist()
                                     for c in (PROMPT_TOKENS, "id", "level", "curriculum_index")))
        return table, stats

    def write(self, k: int) -> tuple[dict[str, Any], LengthStats | None]:
        """Render and write shard ``k``: its manifest entry, and its prompt-length statistics with a tokenizer."""
        table, stats = self.render(k)
        return write_one_shard(table, self.directory, k), stats


class _Worker:
    """The job of a forked shard writer: set by the pool's initializer in the worker process only (the parent's
    module state never holds a plan)."""

    job: ShardJob | None = None

    @classmethod
    def start(cls, job: ShardJob, parent: int) -> None:
        die_with_parent(parent)
        cls.job = job

    @classmethod
    def write(cls, k: int) -> tuple[dict[str, Any], LengthStats | None]:
        assert cls.job is not None, "a shard writer runs in a worker started by write_plan"
        return cls.job.write(k)


def write_plan(plan: Plan, cfg: BuildConfig, directory: Path, *, progress: bool = False, tokenizer: Any = None,
               source: DistractorSource | None = None,
               lengths: list[LengthStats] | None = None) -> list[dict[str, Any]]:
    """Render and write the shards. Shards are independent, so with several CPUs they are made by forked worker
    processes (which share the loaded examples); each shard's bytes depend only on the plan, never on the
    number of workers. With a ``tokenizer`` the shards get the ``prompt_tokens`` column, and the prompt-length
    statistics of each shard are appended to ``lengths``, in shard order."""
    job = ShardJob(plan, cfg, directory, tokenizer, source)
    nshards = job.shards
    cpus = os.cpu_count() or 1
    workers = min(cfg.workers or cpus, nshards)
    # Forking costs a fraction of a second, and the workers' copy-on-write page faults on what they touch: worth
    # it for large builds on FORK_MIN_CPUS or more CPUs, or when workers are asked for explicitly.
    big_enough = cfg.workers is not None or (len(plan) >= PARALLEL_MIN_ROWS and cpus >= FORK_MIN_CPUS)
    use_fork = workers > 1 and big_enough and "fork" in mp.get_all_start_methods()
    entries: list[dict[str, Any]] = []
    with maybe_progress(progress, unit="rows") as bar:
        task = bar.add_task("writing shards", total=len(plan)) if bar else None
        with (mp.get_context("fork").Pool(workers, _Worker.start, (job, os.getpid())) if use_fork
              else _InProcess(job)) as pool:
            for e, stats in pool.imap(_Worker.write if use_fork else job.write, range(nshards)):
                entries.append(e)
                if stats is not None and lengths is not None:
                    lengths.append(stats)
                if bar:
                    bar.advance(task, e["rows"])
    return entries


class _InProcess:
    """The pool's interface in this process (one loop for both paths): each shard is rendered here while a thread
    writes the one before (pyarrow's Parquet writer and the SHA-256 release the GIL), so at most two shards' tables
    are alive at once."""

    def __init__(self, job: ShardJob) -> None:
        self.job = job
        self.writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shard-writer")

    def __enter__(self) -> _InProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.writer.shutdown(wait=True, cancel_futures=True)

    def imap(self, fn: Any, shards: Iterable[int]) -> Iterator[tuple[dict[str, Any], LengthStats | None]]:
        """What ``fn`` (``job.write``) gives for each shard, in order."""
        pending: tuple[Future, LengthStats | None] | None = None
        for k in shards:
            table, stats = self.job.render(k)
            written = self.writer.submit(write_one_shard, table, self.job.directory, k)
            del table
            if pending is not None:
                yield pending[0].result(), pending[1]
            pending = (written, stats)
        if pending is not None:
            yield pending[0].result(), pending[1]
