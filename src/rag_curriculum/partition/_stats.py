"""Scoring the completions and the per-question statistics (``stats.parquet``), the bucket selection
(``--balance``) and the counts recorded in ``partition.json`` and the manifests."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from .._plumbing import distribution, trainer_tail
from ..cards import write_partition_card
from ..difficulty.accuracy import ANSWERABLE, LEARNABLE, UNANSWERABLE, balance, question_stats
from ..rewards import get_parser, score_completion
from ._config import PartitionConfig

log = logging.getLogger("rag_curriculum.partition")  # one logger for the package, as before the split


#: Statistics columns appended to the input rows in ``answerable/``, ``unanswerable/`` and ``learnable/``.
STAT_FIELDS: list[pa.Field] = [
    pa.field("input_index", pa.int64()),
    pa.field("n", pa.int32()),
    pa.field("c", pa.int32()),
    pa.field("sample_f1", pa.list_(pa.float64())),
    pa.field("max_f1", pa.float64()),
    pa.field("mean_f1", pa.float64()),
    pa.field("pass_rate", pa.float64()),
    pa.field("pass_at_k", pa.list_(pa.float64())),
    pa.field("num_valid_format", pa.int32()),
]

#: The raw completions, with ``keep_completions`` (not ``completions``: TRL passes that name to reward functions).
COMPLETIONS_FIELD = pa.field("base_completions", pa.list_(pa.string()))

#: Who a question of ``stats.parquet`` is: its input position, the row's identity (:data:`ROW_META`), its seed, and
#: why it was skipped (None when it was scored). Its statistics follow, then :data:`OUTCOME_FIELDS`.
QUESTION_FIELDS: list[pa.Field] = [
    pa.field("position", pa.int64()),
    pa.field("id", pa.string()),
    pa.field("source_id", pa.string()),
    pa.field("data_source", pa.string()),
    pa.field("setting", pa.string()),
    pa.field("level", pa.int32()),
    pa.field("hops", pa.int32()),
    pa.field("seed", pa.int64()),
    pa.field("skipped", pa.string()),
]
#: The row columns a question's line repeats.
ROW_META = ("id", "source_id", "data_source", "setting", "level", "hops")
#: What closes a question's line: each sample's format validity and parsed answer, the bucket, whether it is
#: learnable, and whether it was written to its bucket.
OUTCOME_FIELDS: list[pa.Field] = [
    pa.field("sample_valid", pa.list_(pa.bool_())),
    pa.field("base_predictions", pa.list_(pa.string())),
    pa.field("bucket", pa.string()),
    pa.field("learnable", pa.bool_()),
    pa.field("kept", pa.bool_()),  # written to answerable/ or unanswerable/ (False when --balance dropped it)
]


def stats_schema(stat_fields: Sequence[pa.Field]) -> pa.Schema:
    """The schema of ``stats.parquet`` for a partition whose buckets get ``stat_fields`` (``input_index`` first,
    which ``position`` stands for here): one row per question (``bucket`` is None for a skipped question); with
    ``keep_completions`` a last column ``base_completions`` follows."""
    return pa.schema([*QUESTION_FIELDS, *stat_fields[1:], *OUTCOME_FIELDS])


STATS_SCHEMA = stats_schema(STAT_FIELDS)


def score_completions(completions: Sequence[str], answers: Sequence[str], *, template: str | None = None
                      ) -> tuple[list[float], list[bool], list[str]]:
    """Each completion's answer F1 (max over the gold aliases), format validity and parsed answer, by the toolkit's
    one completion scorer (:func:`rag_curriculum.rewards.score_completion`) with the parser of the row's output
    format (``template``; RAG-RL when None; a name no format is registered under is an error).

    Args:
        completions: one question's completions.
        answers: its gold answer and aliases.
        template: the row's template (its output format's parser reads the completions).

    Returns:
        (answer F1 of each completion, whether each holds the format, each parsed answer).

    Raises:
        UnknownNameError: a template without a registered output format.

    >>> score_completions(["<reasoning>r</reasoning><answer>Final answer: Paris\\nSupporting passages: A</answer>",
    ...                    "Final answer: Paris, France"], ["Paris"])
    ([1.0, 0.6666666666666666], [True, False], ['Paris', 'Paris, France'])
    """
    parse = get_parser(template)
    scores = [score_completion(text, answers, parse=parse) for text in completions]
    return [s.answer_f1 for s in scores], [s.valid for s in scores], [s.answer for s in scores]


def check_templates(templates: Sequence[str | None]) -> None:
    """Refuse, before anything is generated, rows whose output format has no parser (their completions could not be
    scored): :class:`~rag_curriculum.errors.UnknownNameError` naming the template, with a "did you mean"."""
    for name in sorted({t for t in templates if t}):
        get_parser(name)


def _column(rows: pa.Table, name: str) -> list[Any]:
    return rows.column(name).to_pylist() if name in rows.schema.names else [None] * rows.num_rows


def question_table(rows: pa.Table, results: pa.Table, schema: pa.Schema,
                   score: Callable[[int, list[str], list[str]], Mapping[str, Any]]) -> pa.Table:
    """``stats.parquet`` (``schema``, :func:`stats_schema`): one line per question, its statistics from
    ``score(position, gold answers, completions)`` (every column between ``skipped`` and ``kept``), or None when
    the question was skipped. The completions are read a batch at a time: those of 40,000 questions never sit in
    Python at once."""
    answers = _column(rows, "answers")
    meta = {k: _column(rows, k) for k in ROW_META}
    recs: dict[str, list[Any]] = {f.name: [] for f in schema}
    own = {f.name for f in QUESTION_FIELDS} | {"kept"}
    scored = [f.name for f in schema if f.name not in own]
    for batch in results.select(["seed", "skipped", "completions"]).to_batches(max_chunksize=2048):
        for seed, skipped, comps in zip(*(batch.column(i).to_pylist() for i in range(3)), strict=True):
            p = len(recs["position"])
            recs["position"].append(p)
            for k, v in meta.items():
                recs[k].append(v[p])
            recs["seed"].append(seed)
            recs["skipped"].append(skipped)
            stats = None if skipped is not None or comps is None else score(p, answers[p] or [], comps)
            for k in scored:
                recs[k].append(None if stats is None else stats[k])
            recs["kept"].append(False)
    return pa.table(recs, schema=schema)


def sample_stats(s: Any, valid: Sequence[bool]) -> dict[str, Any]:
    """The pass@k columns of a question (:data:`STAT_FIELDS` after ``input_index``) from its
    :func:`~rag_curriculum.difficulty.accuracy.question_stats` and its samples' format validity."""
    return {"n": s.n, "c": s.c, "sample_f1": list(s.f1), "max_f1": s.max_f1, "mean_f1": s.mean_f1,
            "pass_rate": s.pass_rate, "pass_at_k": list(s.pass_at_k), "num_valid_format": sum(valid)}


def _question_stats(rows: pa.Table, results: pa.Table, cfg: PartitionConfig) -> pa.Table:
    templates = _column(rows, "template")

    def score(p: int, answers: list[str], completions: list[str]) -> dict[str, Any]:
        f1, valid, preds = score_completions(completions, answers, template=templates[p])
        s = question_stats(f1, correct_f1=cfg.correct_f1, valid=valid if cfg.strict_format else None)
        return {**sample_stats(s, valid), "sample_valid": valid, "base_predictions": preds, "bucket": s.bucket,
                "learnable": s.learnable}

    return question_table(rows, results, STATS_SCHEMA, score)


def _select(stats: pa.Table, cfg: PartitionConfig) -> tuple[dict[str, set[int]], dict[str, Any]]:
    pos = stats.column("position").to_pylist()
    bucket = stats.column("bucket").to_pylist()
    learn = stats.column("learnable").to_pylist()
    ans = [p for p, b in zip(pos, bucket, strict=True) if b == ANSWERABLE]
    una = [p for p, b in zip(pos, bucket, strict=True) if b == UNANSWERABLE]
    info: dict[str, Any] = {"enabled": cfg.balance, "answerable_before": len(ans), "unanswerable_before": len(una)}
    if cfg.balance:
        ans_k, una_k = balance(ans, una, seed=cfg.seed)
        info["size"] = len(ans_k)
        if not ans_k and (ans or una):
            none, some = ("answerable", "unanswerable") if not ans else ("unanswerable", "answerable")
            log.warning("--balance: no question is %s (%d are %s): both sets clipped to 0 rows; run again without "
                        "--balance to keep the %s ones",
                        none, len(ans) + len(una), some, some)
    else:
        ans_k, una_k = ans, una
    kept = {ANSWERABLE: set(ans_k), UNANSWERABLE: set(una_k),
            LEARNABLE: {p for p, lv in zip(pos, learn, strict=True) if lv}}
    return kept, info


#: The percentile bootstrap of :func:`pass_at_k_intervals`: resamples and seed (fixed: the same statistics give the
#: same intervals), as the evaluation's.
PASS_AT_K_RESAMPLES = 1000
PASS_AT_K_SEED = 0


def pass_at_k_intervals(pass_at_k: Sequence[Sequence[float]], n: int, *, resamples: int = PASS_AT_K_RESAMPLES,
                        seed: int = PASS_AT_K_SEED, level: float = 0.95) -> dict[str, list[float]]:
    """The 95% percentile bootstrap interval of mean pass@k for k = 1..n: the scored questions (each one's
    pass@1..pass@n, ``pass_at_k``) resampled with replacement, the mean of each resample; ``{"k": [low, high]}``,
    empty for no question.

    >>> pass_at_k_intervals([[0.0, 0.0], [1.0, 1.0], [0.5, 1.0], [0.5, 1.0]], 2)["2"]
    [0.25, 1.0]
    """
    import numpy as np

    if not pass_at_k:
        return {}
    values = np.array([list(v[:n]) for v in pass_at_k], dtype=float)
    idx = np.random.default_rng(seed).integers(0, len(values), size=(resamples, len(values)))
    means = values[idx].mean(axis=1)  # (resamples, n)
    lo, hi = 100 * (1 - level) / 2, 100 * (1 + level) / 2
    return {str(k + 1): [round(float(np.percentile(means[:, k], lo)), 6), round(float(np.percentile(means[:, k], hi)), 6)]
            for k in range(values.shape[1])}


def pass_counts(stats: pa.Table, run: Mapping[str, Any], buckets: Sequence[str]) -> dict[str, Any]:
    """What ``partition.json`` counts of every partition: the questions scored and skipped, the size of each of
    ``buckets`` and of ``learnable``, the histogram of correct samples, mean pass@k with its 95% interval, mean max F1
    and the rate of format-valid samples."""
    n = run["sampling"]["n"]
    bucket = stats.column("bucket").to_pylist()
    scored = [b is not None for b in bucket]
    cs = [c for c in stats.column("c").to_pylist() if c is not None]
    hist = Counter(cs)
    pak = [v for v in stats.column("pass_at_k").to_pylist() if v is not None]
    mean_pak = {str(k + 1): (round(sum(v[k] for v in pak) / len(pak), 6) if pak else None) for k in range(n)}
    pak_ci = pass_at_k_intervals(pak, n)
    valid = sum(v or 0 for v in stats.column("num_valid_format").to_pylist())
    maxf = [v for v in stats.column("max_f1").to_pylist() if v is not None]
    return {
        "questions": stats.num_rows,
        "scored": sum(scored),
        "skipped": stats.num_rows - sum(scored),
        "samples_per_question": n,
        **{b: bucket.count(b) for b in buckets},
        LEARNABLE: sum(1 for v in stats.column("learnable").to_pylist() if v),
        "correct_samples_histogram": {str(c): hist.get(c, 0) for c in range(n + 1)},
        "mean_pass_at_k": mean_pak,
        "pass_at_k_interval": pak_ci,
        "mean_max_f1": round(sum(maxf) / len(maxf), 6) if maxf else None,
        "format_valid_rate": round(valid / (len(cs) * n), 6) if cs else None,
    }


def _counts(stats: pa.Table, run: Mapping[str, Any]) -> dict[str, Any]:
    return pass_counts(stats, run, (ANSWERABLE, UNANSWERABLE))


def _rule(bucket: str, cfg: PartitionConfig) -> str:
    f = "" if cfg.correct_f1 == 1 else f" >= {cfg.correct_f1:g}"
    fmt = " (format-valid samples only)" if cfg.strict_format else ""
    return {ANSWERABLE: f"some sample has answer F1{f or ' = 1'}{fmt} (c > 0)",
            UNANSWERABLE: f"no sample has answer F1{f or ' = 1'}{fmt} (c = 0)",
            LEARNABLE: "0 < c < k: the k samples disagree, so GRPO gets a non-zero advantage"}[bucket]


def _row_counts(table: pa.Table) -> dict[str, Any]:
    def counts(name: str) -> dict[str, int]:
        return distribution(table.column(name).to_pylist()) if name in table.schema.names else {}

    return {"levels": counts("level"), "hops": counts("hops"), "sources": counts("data_source"),
            "num_distractors": counts("num_distractors")}


def _tail(manifest: Mapping[str, Any], rows: int) -> dict[str, Any] | None:
    return trainer_tail(rows, (manifest.get("config") or {}).get("batch_prompts"))


@dataclass(frozen=True)
class Scoring:
    """How a partition's completions become its outputs (:func:`rag_curriculum.partition.finalize_partition`): the
    buckets written, which of them mark a question ``kept``, the statistics columns appended to the bucket rows,
    and the functions that score, select, count, state each bucket's rule and write its card. Two exist: the
    closed-context pass@k partition (:data:`PASS_AT_K`) and a search agent's (``_agent.AGENT_SCORING``)."""

    outputs: tuple[str, ...]
    kept: tuple[str, ...]
    stat_fields: list[pa.Field]
    question_stats: Callable[..., pa.Table]
    select: Callable[..., tuple[dict[str, set[int]], dict[str, Any]]]
    counts: Callable[..., dict[str, Any]]
    rule: Callable[[str, PartitionConfig], str]
    card: Callable[..., None]


def _pass_at_k_card(directory: Any, manifest: Mapping[str, Any], bucket: str, *, plot: str | None = None) -> None:
    write_partition_card(directory, manifest, bucket, plot=plot)


PASS_AT_K = Scoring(outputs=(ANSWERABLE, UNANSWERABLE, LEARNABLE), kept=(ANSWERABLE, UNANSWERABLE),
                    stat_fields=STAT_FIELDS, question_stats=_question_stats, select=_select, counts=_counts,
                    rule=_rule, card=_pass_at_k_card)
