"""A search agent's partition (``curriculum partition --agent search-r1 --retriever DIR|URL``): pass@k of the base
model *with a search tool*, and how many searches each success needed.

Each question gets ``k`` trajectories from the toolkit's one rollout loop (:func:`rag_curriculum.agents.run_rollouts`,
the loop ``curriculum eval --agent`` and training use), against the retriever ``--retriever`` names (an index
directory or a ``POST /retrieve`` server, :func:`rag_curriculum.agents.open_retriever`), with the agent's knobs of
``eval --agent`` (``--template``, ``--top-k``, ``--max-turns``, ``--max-context-tokens``) and the search difficulty of
training (``--search-difficulty``, ``--withhold-p``). The run goes through the partition's own machinery unchanged:
:func:`rag_curriculum.generation.runner.run_chunks` sees a backend (:class:`RolloutBackend`) whose "completion" of a
question is one trajectory, stored as compact JSON in the chunk files of ``OUT/work`` (chunks, resume, shards,
``--max-chunks``, the work-folder lock and atomic writes as for the closed-context partition); the outputs are
written by :func:`rag_curriculum.partition.finalize_partition` with this module's :data:`AGENT_SCORING`.

**A sample is correct** as in the closed-context partition: its final ``<answer>`` reaches answer F1 >=
``--correct-f1`` (max over the gold aliases; RAG-RL: F1 = 1), and with ``--strict-format`` only a sample that ended
with an answer and made no format error counts. A trajectory without an answer scores 0.

**The split** (:func:`split_bucket`), from the question's ``k`` trajectories with search:

- ``answerable-without-search/``: some correct sample made **no** search (the model answered from what it knows);
- ``answerable-with-search/``: otherwise, some correct sample (every success searched at least once);
- ``unanswerable/``: no correct sample (c = 0);
- ``learnable/``: 0 < c < k, as in the closed-context partition (GRPO groups with a non-zero advantage).

The rule is pass@k's ("some sample"), the one the closed-context partition uses for base-answerable, applied twice:
first to the samples that did not search. ``stats.parquet`` holds, per question, the closed-context columns (``n``,
``c``, ``sample_f1``, ``max_f1``, ``pass_rate``, ``pass_at_k``, ...) and the agent's: every sample's EM, searches,
whether a search returned a gold passage, how it ended and its format errors; ``c_without_search``,
``searches_per_success`` (mean searches over the correct samples) and ``min_searches_success``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from .._metrics import answer_scores
from .._plumbing import mask_secrets
from ..agents import open_retriever, run_rollouts
from ..cards import PARTITION_TEMPLATE, front_matter, md_table, render_card
from ..difficulty.accuracy import LEARNABLE, UNANSWERABLE, question_stats
from ..errors import PartitionError, UsageError
from ..generation import PromptTooLongError, replays
from ..shards import read_table
from ._config import (
    AGENT_OUTPUTS,
    NO_SEARCH,
    WITH_SEARCH,
    PartitionConfig,
    agent_settings,
    rollout_config,
    search_difficulty,
    turn_format,
)
from ._stats import STAT_FIELDS, Scoring, pass_counts, question_table, sample_stats, stats_schema

#: The version of the agent partition's work files (part of the run's fingerprint).
AGENT_TASK_VERSION = 1

#: The row columns the search environment reads (what :class:`rag_curriculum.agents.RowView` needs).
ROW_COLUMNS = ("id", "question", "answers", "passages", "hops", "level", "answerable")


def split_bucket(correct: Sequence[bool], searches: Sequence[int]) -> str:
    """The bucket of a question from its samples: is each correct, and how many searches did it make.

    >>> split_bucket([False, True], [0, 0])
    'answerable-without-search'
    >>> split_bucket([True, False], [2, 0])
    'answerable-with-search'
    >>> split_bucket([False, False], [0, 3])
    'unanswerable'
    """
    if len(correct) != len(searches):
        raise ValueError(f"{len(correct)} correctness flags for {len(searches)} search counts")
    if any(c and s == 0 for c, s in zip(correct, searches, strict=True)):
        return NO_SEARCH
    return WITH_SEARCH if any(correct) else UNANSWERABLE


# -- the run: one trajectory per "completion" ----------------------------------------------------------------------


class RowPrompts(Sequence):
    """The input rows as the runner's prompts: item ``i`` is ``[row]`` (read only when asked), which
    :class:`RolloutBackend` turns into the agent's prompt."""

    def __init__(self, table: pa.Table) -> None:
        self.table = table

    def __len__(self) -> int:
        return self.table.num_rows

    def __getitem__(self, i: Any) -> Any:
        return [{name: self.table.column(name)[i].as_py() for name in self.table.schema.names}]


def encode_trajectory(t: Any) -> str:
    """A trajectory as the chunk files keep it: compact JSON of what the model and the environment wrote, the
    searches (query, passage ids, gold flags, difficulty), format errors, answer, status and turns. The row id, the
    sample number and the prompt are left out (they are the row's and the position's), so ``k`` identical
    trajectories read as identical samples to the runner's identical-samples check."""
    d = t.to_dict()
    for key in ("row_id", "sample", "prompt"):
        d.pop(key, None)
    return json.dumps(d, ensure_ascii=False, separators=(",", ":"))


def decode_trajectory(text: str, *, where: str = "") -> dict[str, Any]:
    try:
        d = json.loads(text)
    except (TypeError, ValueError):
        d = None
    if not isinstance(d, dict) or "segments" not in d or "searches" not in d:
        raise PartitionError(
            f"{where or 'a chunk file'}: a completion is not a trajectory of a search agent's "
            "partition (was this work folder made without --agent?)",
            hint="run `curriculum partition` again with the settings that made it, or --overwrite",
        )
    return d


class RolloutBackend:
    """A generation backend for :func:`~rag_curriculum.generation.runner.run_chunks` whose ``n`` completions of a
    prompt (a :class:`RowPrompts` item) are ``n`` trajectories of the search environment: one
    :func:`~rag_curriculum.agents.run_rollouts` call per backend call, with ``inner`` generating every turn and
    ``retriever`` answering every search. Trajectories are seeded from (seed, row id, sample, turn), so the runner's
    per-question seeds are taken and not needed."""

    seeded_calls = True

    def __init__(self, inner: Any, retriever: Any, config: Any, difficulty: Any, fmt: Any = None) -> None:
        self.inner = inner
        self.retriever = retriever
        self.config = config
        self.difficulty = difficulty
        self.fmt = fmt  # the agent protocol's turn format (None: Search-R1's tags)
        self.name = getattr(inner, "name", "backend")
        self.replays = replays(inner)
        self.call_size = getattr(inner, "call_size", None)
        self.progress_label = f"{getattr(inner, 'progress_label', None) or self.name} · search agent"

    def describe(self) -> dict[str, Any]:
        d = getattr(self.inner, "describe", None)
        return d() if callable(d) else {"backend": self.name}

    def generate(
        self,
        prompts: Sequence[Sequence[Mapping[str, Any]]],
        sampling: Any,
        *,
        seeds: Sequence[int] | None = None,
    ) -> list[list[str]]:
        rows = [dict(p[0]) for p in prompts]
        n = sampling.n
        try:
            trajs = run_rollouts(
                self.inner,
                rows,
                self.retriever,
                sampling,
                n=n,
                config=self.config,
                difficulty=self.difficulty,
                fmt=self.fmt,
            )
        except PromptTooLongError as e:
            raise PartitionError(
                f"a trajectory grew longer than the model's context ({e})",
                hint="set --max-context-tokens below the model's context length (a trajectory "
                "that reaches it stops, status context_budget)",
            ) from None
        texts = [encode_trajectory(t) for t in trajs]
        return [texts[i * n : (i + 1) * n] for i in range(len(rows))]

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if callable(close):
            close()


def agent_setup(cfg: PartitionConfig, input_dir: Path) -> tuple[dict[str, Any], RowPrompts, Any]:
    """What :func:`rag_curriculum.partition.partition` needs for ``--agent``: the part of the run's fingerprint the
    trajectories depend on (the agent's settings and the retriever's content, not where it is), the rows as
    prompts, and a wrapper turning the generation backend (or its factory) into a :class:`RolloutBackend`."""
    retriever = open_retriever(cfg.retriever, timeout=cfg.retriever_timeout, retries=cfg.retriever_retries)
    table = read_table(input_dir)
    missing = {"id", "question", "answers"} - set(table.schema.names)
    if missing:
        raise PartitionError(
            f"{input_dir}: the rows have no {', '.join(sorted(missing))} column; a search agent "
            "reads the question and its answers from the rows",
            hint="pass a shard directory made by `curriculum build`",
        )
    rows = table.select([c for c in ROW_COLUMNS if c in table.schema.names])
    described = retriever.describe()
    where = {k: v for k, v in described.items() if k != "path"}  # the index's content, not where it is
    fingerprint = {
        "agent": cfg.agent,
        "version": AGENT_TASK_VERSION,
        "rollout": rollout_config(cfg).to_dict(),
        "difficulty": search_difficulty(cfg).to_dict(),
        "retriever": mask_secrets(where),
    }
    if settings := agent_settings(cfg):  # the protocol's own (ReAct's react_sentences); Search-R1's has none
        fingerprint["settings"] = settings
    config, difficulty, fmt = rollout_config(cfg), search_difficulty(cfg), turn_format(cfg)

    def wrap(backend: Any) -> Any:
        if callable(backend) and not hasattr(backend, "generate"):  # a factory: build when something is left
            return lambda: RolloutBackend(backend(), retriever, config, difficulty, fmt)
        return RolloutBackend(backend, retriever, config, difficulty, fmt)

    return fingerprint, RowPrompts(rows), wrap


# -- the outputs ----------------------------------------------------------------------------------------------------

#: The statistics columns of a search agent's buckets: the pass@k partition's (:data:`._stats.STAT_FIELDS`), each
#: sample's EM beside its F1, and the searches.
AGENT_STAT_FIELDS: list[pa.Field] = [
    *STAT_FIELDS[:3],
    pa.field("sample_em", pa.list_(pa.float64())),
    *STAT_FIELDS[3:],
    pa.field("sample_searches", pa.list_(pa.int32())),
    pa.field("sample_gold_found", pa.list_(pa.bool_())),
    pa.field("sample_status", pa.list_(pa.string())),
    pa.field("sample_format_errors", pa.list_(pa.list_(pa.string()))),
    pa.field("c_without_search", pa.int32()),
    pa.field("pass_rate_without_search", pa.float64()),
    pa.field("searches_per_success", pa.float64()),
    pa.field("min_searches_success", pa.int32()),
    pa.field("mean_searches", pa.float64()),
    pa.field("gold_found_rate", pa.float64()),
]

AGENT_STATS_SCHEMA = stats_schema(AGENT_STAT_FIELDS)


def score_trajectories(
    trajs: Sequence[Mapping[str, Any]], answers: Sequence[str], cfg: PartitionConfig
) -> dict[str, Any]:
    """One question's statistics from its ``k`` trajectories (decoded JSON): the columns of
    :data:`AGENT_STATS_SCHEMA` after ``skipped`` (``kept`` aside)."""
    em, f1, searches, gold, status, errors, valid, preds = [], [], [], [], [], [], [], []
    for t in trajs:
        a = t.get("answer")
        e, f = answer_scores(a, list(answers)) if a is not None else (0.0, 0.0)
        em.append(float(e))
        f1.append(float(f))
        searches.append(len(t["searches"]))
        gold.append(any(any(s.get("gold") or []) for s in t["searches"]))
        status.append(t.get("status") or "")
        errors.append(list(t.get("errors") or []))
        valid.append(t.get("status") == "answer" and not t.get("errors"))
        preds.append(a)
    s = question_stats(f1, correct_f1=cfg.correct_f1, valid=valid if cfg.strict_format else None)
    correct = [x >= cfg.correct_f1 and (v or not cfg.strict_format) for x, v in zip(f1, valid, strict=True)]
    hits = [n for n, c in zip(searches, correct, strict=True) if c]
    c0 = sum(1 for n, c in zip(searches, correct, strict=True) if c and n == 0)
    return {
        **sample_stats(s, valid),
        "sample_em": em,
        "sample_searches": searches,
        "sample_gold_found": gold,
        "sample_status": status,
        "sample_format_errors": errors,
        "c_without_search": c0,
        "pass_rate_without_search": c0 / s.n,
        "searches_per_success": sum(hits) / len(hits) if hits else None,
        "min_searches_success": min(hits) if hits else None,
        "mean_searches": sum(searches) / len(searches),
        "gold_found_rate": sum(gold) / len(gold),
        "sample_valid": valid,
        "base_predictions": preds,
        "bucket": split_bucket(correct, searches),
        "learnable": s.learnable,
    }


def agent_question_stats(rows: pa.Table, results: pa.Table, cfg: PartitionConfig) -> pa.Table:
    """``stats.parquet`` of a search agent's partition: one row per question (:data:`AGENT_STATS_SCHEMA`)."""
    ids = rows.column("id").to_pylist() if "id" in rows.schema.names else [None] * rows.num_rows

    def score(p: int, answers: list[str], completions: list[str]) -> dict[str, Any]:
        trajs = [decode_trajectory(c, where=f"question {ids[p]!r} (position {p})") for c in completions]
        return score_trajectories(trajs, answers, cfg)

    return question_table(rows, results, AGENT_STATS_SCHEMA, score)


def agent_select(stats: pa.Table, cfg: PartitionConfig) -> tuple[dict[str, set[int]], dict[str, Any]]:
    if cfg.balance:  # `partition-merge --balance` of an agent run (the command line refuses it before)
        raise UsageError(
            "--balance clips two buckets to one size; a search agent's partition has three",
            hint="merge without --balance",
        )
    pos = stats.column("position").to_pylist()
    bucket = stats.column("bucket").to_pylist()
    learn = stats.column("learnable").to_pylist()
    kept = {
        b: {p for p, x in zip(pos, bucket, strict=True) if x == b} for b in AGENT_OUTPUTS if b != LEARNABLE
    }
    kept[LEARNABLE] = {p for p, lv in zip(pos, learn, strict=True) if lv}
    return kept, {"enabled": False}


def _mean(xs: Sequence[float]) -> float | None:
    return round(sum(xs) / len(xs), 6) if xs else None


def agent_counts(stats: pa.Table, run: Mapping[str, Any]) -> dict[str, Any]:
    searches = [s for v in stats.column("sample_searches").to_pylist() if v is not None for s in v]
    per_success = [v for v in stats.column("searches_per_success").to_pylist() if v is not None]
    status = Counter(s for v in stats.column("sample_status").to_pylist() if v is not None for s in v)
    errors = Counter(
        e for v in stats.column("sample_format_errors").to_pylist() if v is not None for es in v for e in es
    )
    gold = [g for v in stats.column("sample_gold_found").to_pylist() if v is not None for g in v]
    return {
        **pass_counts(stats, run, [b for b in AGENT_OUTPUTS if b != LEARNABLE]),
        "searches_per_sample": _mean(searches),
        "searches_per_success": _mean(per_success),  # the mean over questions with a success of its mean
        "gold_found_rate": _mean([float(g) for g in gold]),
        "status": dict(sorted(status.items())),
        "format_errors": dict(sorted(errors.items())),
    }


def agent_rule(bucket: str, cfg: PartitionConfig) -> str:
    f = "= 1" if cfg.correct_f1 == 1 else f">= {cfg.correct_f1:g}"
    ok = f"answer F1 {f}" + (" (format-valid samples only)" if cfg.strict_format else "")
    return {
        NO_SEARCH: f"some sample with search available has {ok} and made no search",
        WITH_SEARCH: f"some sample has {ok}, and every such sample searched at least once",
        UNANSWERABLE: f"no sample, searching or not, has {ok} (c = 0)",
        LEARNABLE: "0 < c < k: the k samples disagree, so GRPO gets a non-zero advantage",
    }[bucket]


def write_agent_card(
    directory: Path, manifest: Mapping[str, Any], bucket: str, *, plot: str | None = None
) -> None:
    """A bucket's data card (``README.md``, from ``data_cards/partition.md``) in a search agent's words."""
    part, counts = manifest["partition"], manifest["partition"]["counts"]
    gen = manifest["generation"]
    g, sampling = gen["fingerprint"]["generation"], gen["sampling"]
    agent = gen["fingerprint"].get("agent") or {}
    roll = agent.get("rollout") or {}
    n = sampling["n"]
    sources = sorted(manifest["counts"]["sources"]) or [s["dataset"] for s in manifest.get("sources", [])]
    model = g.get("model") or "?"
    title = (
        f"Search agent {bucket} questions ({', '.join(sources) or '?'}, {Path(str(model)).name}, pass@{n})"
    )
    description = (
        f"{manifest['num_rows']:,} rows: the questions of `{manifest['input']['path']}` for which {part['rule']}. "
        f"Each question was answered {n} times by `{model}` ({g.get('backend')} backend) as a search agent "
        f"({roll.get('template')} prompt, Search-R1's <search> / <information> protocol; top-{roll.get('top_k', roll.get('topk'))} "
        f"passages per search, at most {roll.get('max_turns')} turns of {sampling['max_tokens']} tokens and "
        f"{roll.get('max_context_tokens')} context tokens; temperature {sampling['temperature']}, top-p "
        f"{sampling['top_p']}, seed {sampling['seed']}; search difficulty "
        f"{(agent.get('difficulty') or {}).get('mode', 'none')}). Each final answer was scored by answer F1 "
        "against the gold answer and its aliases. Rows keep the input's columns and order (`curriculum_index` is "
        "renumbered; `input_index` is the input position) and add `n`, `c`, every sample's EM, F1, searches, gold "
        "found, status and format errors, `c_without_search`, `searches_per_success`, `min_searches_success`, "
        "`pass_rate` and `pass_at_k`."
    )
    scored = max(counts["scored"], 1)
    extra = (
        f"\nSearches per sample: {counts['searches_per_sample'] or 0:.3f}; per success (mean over questions "
        f"with one): {counts['searches_per_success'] or 0:.3f}; samples whose searches returned a gold "
        f"passage: {counts['gold_found_rate'] or 0:.1%}. How trajectories ended: "
        + (", ".join(f"{k} {v:,}" for k, v in counts["status"].items()) or "none")
        + ". Format errors: "
        + (", ".join(f"{k} {v:,}" for k, v in counts["format_errors"].items()) or "none")
        + ".\n"
    )
    rc = manifest["counts"]
    card = render_card(
        PARTITION_TEMPLATE,
        front_matter=front_matter(
            sources=sources,
            num_rows=manifest["num_rows"],
            pretty_name=title,
            tags=("pass-at-k", "search-agent"),
            shards=manifest.get("shards"),
        ).rstrip("\n"),
        title=title,
        description=description,
        balance="",
        command=str(manifest.get("command")),
        counts_table=md_table(
            ["", "questions"],
            [
                ["questions", f"{counts['questions']:,}"],
                ["skipped", f"{counts['skipped']:,}"],
                ["answerable without search", f"{counts[NO_SEARCH]:,}"],
                ["answerable with search", f"{counts[WITH_SEARCH]:,}"],
                ["unanswerable (c = 0)", f"{counts[UNANSWERABLE]:,}"],
                ["learnable (0 < c < k)", f"{counts[LEARNABLE]:,}"],
            ],
        ),
        histogram_table=md_table(
            ["c", "pass rate c/k", "questions", "share"],
            [
                [c, f"{int(c) / n:.3f}", f"{q:,}", f"{q / scored:.1%}"]
                for c, q in counts["correct_samples_histogram"].items()
            ],
        ),
        pass_at_k_table=md_table(
            ["k", "pass@k"],
            [[k, "-" if v is None else f"{v:.4f}"] for k, v in counts["mean_pass_at_k"].items()],
        ),
        format_valid=extra,
        plot="" if plot is None else f"\n![distribution of pass rates]({plot})\n",
        hops_table=md_table(["hops", "rows"], rc["hops"].items()),
        levels_table=md_table(["level", "rows"], rc["levels"].items()),
        tail="",
    )
    (directory / "README.md").write_text(card, encoding="utf-8")


def _agent_scoring() -> Any:
    return Scoring(
        outputs=AGENT_OUTPUTS,
        kept=(NO_SEARCH, WITH_SEARCH, UNANSWERABLE),
        stat_fields=AGENT_STAT_FIELDS,
        question_stats=agent_question_stats,
        select=agent_select,
        counts=agent_counts,
        rule=agent_rule,
        card=write_agent_card,
    )


#: How a search agent's trajectories become its partition (see :class:`rag_curriculum.partition._stats.Scoring`).
AGENT_SCORING = _agent_scoring()
