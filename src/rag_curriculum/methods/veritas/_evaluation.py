"""VERITAS faithfulness in the search-agent evaluation (``curriculum eval --agent search-r1 --faithfulness veritas
[--judge BACKEND:MODEL --judge-arg KEY=VALUE ...]``; docs/veritas.md): every trajectory is scored by
:class:`~rag_curriculum.methods.veritas.VeritasReward`, and each set gets the three measures of the paper's
Table 6 beside EM, as fractions in [0, 1] as the paper reports them:

* **Info-Think**: the mean, over the trajectories with at least one (information, think) pair, of their
  Info-Think score (the mean over their pairs; the judge's);
* **Think-Ans**: the mean, over the trajectories that gave an answer, of Think-Answer (the regex);
* **Think-Search**: the mean, over the trajectories with at least one search, of Think-Search (the judge's);

with the counts those means rest on (trajectories, with a pair, answered, judge failures, missing blocks, without a
search). Without ``--judge`` only Think-Ans is computed. ``--judge-arg`` takes the judge's options (``votes``,
``vote``, ``temperature``, ``max_tokens``, ``seed``, ``cache_dir`` (default: the run's ``judge-cache/``),
``info_think_prompt``, ``think_search_prompt``), the reward's (``think_answer_scope``, ``think_answer_match``,
``aggregate``, ``judge_failure_value``, ``missing_value``) and, for any other key, the judge backend's
(``base_url``, ``api_key``, ...).

Outputs beside the run's: each trajectory's scores under ``veritas`` in ``trajectories/MODEL/SET.jsonl``; the
judge pairs (with the judge's labels when judged) in ``pairs/MODEL/SET.jsonl`` for labelling or distilling a
reward model; ``veritas.md``: the table in Table 6's layout.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..._plumbing import atomic_write_bytes, atomic_write_text
from ...agents import AgentEvalPart, AgentSetRun
from ...errors import ConfigError, UsageError
from ._reward import VeritasJudge, VeritasReward, agreement, pair_records, read_labels

__all__ = ["FAITHFULNESS", "MEASURE", "VeritasMeasure", "check_config", "render_veritas_table", "veritas_entry",
           "veritas_table"]

FAITHFULNESS = ("veritas",)
JUDGE_FIELDS = (
    "votes",
    "vote",
    "temperature",
    "max_tokens",
    "seed",
    "cache_dir",
    "info_think_prompt",
    "think_search_prompt",
)
REWARD_FIELDS = (
    "think_answer_scope",
    "think_answer_match",
    "aggregate",
    "judge_failure_value",
    "missing_value",
)
#: Table 6's blocks: (summary key, title).
BLOCKS = (
    ("em", "Exact Match (EM)"),
    ("info_think", "Info-Think Faithfulness"),
    ("think_answer", "Think-Ans Faithfulness"),
    ("think_search", "Think-Search Faithfulness"),
)


def check_config(cfg: Any) -> None:
    """The faithfulness settings of an :class:`~rag_curriculum.evaluation.AgentEvalConfig` (usage errors)."""
    if cfg.faithfulness is None:
        if cfg.judge is not None or cfg.judge_args:
            raise UsageError("--judge scores faithfulness: pass --faithfulness veritas with it")
        return
    if cfg.faithfulness not in FAITHFULNESS:
        raise UsageError(
            f"--faithfulness {cfg.faithfulness!r} is not known; known: {', '.join(FAITHFULNESS)}"
        )
    if cfg.agent != "search-r1":
        raise UsageError(
            "--faithfulness veritas reads Search-R1's <think> / <search> / <information> tags: pass "
            "--agent search-r1"
        )
    try:  # the judge's backend name, its model, every option: refused now (a usage error), not after the rollouts
        reward_for(cfg)
    except UsageError:
        raise
    except ConfigError as e:
        raise UsageError(str(e), hint=e.hint) from None


def reward_for(cfg: Any) -> VeritasReward:
    """The run's VERITAS reward (built once per config; the judge's backend is built on its first call)."""
    cached = cfg.__dict__.get("_veritas_reward")
    if cached is not None:
        return cached
    args = dict(cfg.judge_args or {})
    own = {k: args.pop(k) for k in list(args) if k in JUDGE_FIELDS}
    opts = {k: args.pop(k) for k in list(args) if k in REWARD_FIELDS}
    judge = None
    if cfg.judge:
        backend, _, model = str(cfg.judge).partition(":")
        own.setdefault("cache_dir", str(Path(cfg.out) / "judge-cache"))
        judge = VeritasJudge(backend=backend, model=model or None, backend_args=args, **own)
    elif own or args:
        raise UsageError(
            f"--judge-arg {', '.join(sorted({*own, *args}))} without --judge",
            hint="--judge BACKEND:MODEL, e.g. openai:veritas-rm with --judge-arg base_url=...",
        )
    reward = VeritasReward(
        weights={"info_think": 0.05 if judge is not None else 0.0},
        judge=judge,
        think_search=judge is not None,
        log_components=False,
        **opts,
    )
    cfg.__dict__["_veritas_reward"] = reward
    return reward


def _mean(xs: Sequence[float]) -> float | None:
    return round(sum(xs) / len(xs), 4) if xs else None


def veritas_entry(
    cfg: Any, out: Path, model: str, key: str, rows: Sequence[Mapping[str, Any]], dicts: list[dict[str, Any]]
) -> dict[str, Any]:
    """Score ``dicts`` (the set's trajectories, ``cfg.m`` per row, in row order; each gets its scores under
    ``veritas``), write the judge pairs, return the set's faithfulness summary."""
    reward = reward_for(cfg)
    m = max(1, len(dicts) // max(1, len(rows)))
    answers = [rows[i // m]["answers"] for i in range(len(dicts))]
    parts = reward.components([""] * len(dicts), answers, trajectory=dicts)
    for d, b in zip(dicts, parts, strict=True):
        d["veritas"] = b.to_dict()
    judged = reward._judge is not None
    recs = pair_records(dicts, judge=reward._judge)
    path = out / "pairs" / model / f"{key}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs).encode("utf-8"))
    with_it = [b for b in parts if b.info_think_pairs]
    with_ts = [b for b in parts if b.think_search_pairs]
    answered = [b for b in parts if b.answered]
    return {
        "em": _mean([b.em for b in parts]),
        "info_think": _mean([b.info_think for b in with_it]) if judged else None,
        "think_answer": _mean([b.think_answer for b in answered]),
        "think_search": _mean([b.think_search for b in with_ts]) if judged else None,
        "trajectories": len(parts),
        "with_info_think": len(with_it),
        "answered": len(answered),
        "with_think_search": len(with_ts),
        "no_search": sum(b.no_search for b in parts),
        "judge_failures": sum(b.judge_failures for b in parts),
        "missing_blocks": sum(b.missing_blocks for b in parts),
        "pairs": len(recs),
        "judge": reward._judge.identity() if judged else None,
        "think_answer_scope": reward.think_answer_scope,
    }


def veritas_table(summary: Mapping[str, Any]) -> tuple[list[str], list[list[str]]] | None:
    """The paper's Table 6 layout as a header and rows: a block per measure (EM, Info-Think, Think-Ans, and
    Think-Search when judged; a block's first row holds its title alone), a row per model, a column per dataset and
    their average, fractions with three decimals (``-``: not computed). None when no entry has VERITAS scores."""
    evals = [e for e in summary.get("evals", []) if e.get("veritas")]
    if not evals:
        return None
    names = {e["set"]: e["dataset"] for e in evals}
    label = {s: (ds if list(names.values()).count(ds) == 1 else s) for s, ds in names.items()}
    sets = list(names)
    models = list(dict.fromkeys(e["model"] for e in evals))
    cell = {(e["model"], e["set"]): e["veritas"] for e in evals}
    rows: list[list[str]] = []
    for key, title in BLOCKS:
        if key == "think_search" and all(v.get(key) is None for v in cell.values()):
            continue
        rows.append([title] + [""] * (len(sets) + 1))
        for mname in models:
            vals = [cell.get((mname, s), {}).get(key) for s in sets]
            nums = [v for v in vals if v is not None]
            avg = f"{sum(nums) / len(nums):.3f}" if nums and len(nums) == len(vals) else "-"
            rows.append([mname, *("-" if v is None else f"{v:.3f}" for v in vals), avg])
    return ["Method", *(label[s] for s in sets), "Average"], rows


def render_veritas_table(summary: Mapping[str, Any]) -> str | None:
    """:func:`veritas_table` as Markdown (block titles in bold); None when no entry has VERITAS scores."""
    table = veritas_table(summary)
    if table is None:
        return None
    header, rows = table
    lines = [
        f"# VERITAS faithfulness ({summary.get('agent', 'search-r1')})",
        "",
        "| " + " | ".join(header) + " |",
        "|---|" + "---|" * (len(header) - 1),
    ]
    for r in rows:
        if not any(r[1:]):
            lines.append(f"| **{r[0]}** |" + " |" * (len(header) - 1))
        else:
            lines.append("| " + " | ".join(r) + " |")
    return "\n".join(lines) + "\n"


class VeritasMeasure(AgentEvalPart):
    """``--faithfulness veritas``: every trajectory scored by :class:`~rag_curriculum.methods.veritas.VeritasReward`
    (under ``veritas``), each set's Table 6 measures (:func:`veritas_entry`), the judge pairs in ``pairs/`` and
    ``veritas.md`` (:func:`render_veritas_table`); ``--judge`` and ``--judge-arg`` are its settings. On the console,
    the Table 6 layout (:func:`veritas_table`); ``curriculum eval agreement`` checks its judge's labels
    (:func:`~rag_curriculum.methods.veritas.agreement`)."""

    key = "veritas"
    files = "veritas.md (Table 6 layout), pairs/"
    settings = ("judge", "judge_args")

    def check(self, cfg: Any) -> None:
        if cfg.faithfulness in (None, "veritas"):
            check_config(cfg)

    def score_set(self, cfg: Any, run: AgentSetRun) -> dict[str, Any]:
        return veritas_entry(cfg, run.out, run.model, run.key, run.rows, run.dicts)

    def finish(self, cfg: Any, out: Path, summary: Mapping[str, Any]) -> None:
        atomic_write_text(out / "veritas.md", render_veritas_table(summary) or "")

    def console_table(self, summary: Mapping[str, Any]) -> tuple[str, list[str], list[list[str]]] | None:
        got = veritas_table(summary)
        return None if got is None else ("VERITAS faithfulness (fractions)", *got)

    def label_agreement(self, labels: Path, reference: Path, *, field: str = "label",
                        reference_field: str = "label") -> dict[str, Any]:
        return agreement(read_labels(labels, field=field), read_labels(reference, field=reference_field))


#: The object registered as the ``veritas`` faithfulness measure.
MEASURE = VeritasMeasure()
