"""Dynamic sampling (DAPO, Yu et al. 2025, section 3.2) on TRL's GRPOTrainer, in curriculum order (docs/training.md,
"Dynamic sampling").

A GRPO group whose completions all get the same reward has zero advantage: it costs its generation and teaches
nothing. With ``dynamic.enabled`` the toolkit's trainer, per generation batch:

1. takes the next ``prompts_per_generation`` rows of the curriculum (TRL's grouping: each row
   ``num_generations`` times in a row), generates and scores them with TRL's own code;
2. drops every group whose metric (the total reward, one reward of the ``rewards`` list, or exact match) has a
   spread (max - min) of at most ``dynamic.max_spread``; 0 is DAPO's rule (``std == 0``);
3. refills the batch with the next rows of the curriculum and generates again, up to ``dynamic.max_refills``
   times: as many rows as groups are missing over the informative rate seen so far (``dynamic.refill``:
   ``estimate``; ``missing``: exactly the missing groups; ``batch``: a whole generation batch, as DAPO / verl);
   rows generated past the need are given back (shown first in the next batch). If the batch is still short, the
   slots left hold dropped groups with their loss mask zeroed (no token of theirs reaches the loss), logged as
   ``dynamic/masked_groups``;
4. hands TRL a batch of the usual shape (gradient accumulation, ``steps_per_generation`` and ``num_iterations``
   unchanged) made of the informative groups in curriculum order.

Rows are never lost: each dropped row is written to ``curriculum_dynamic.jsonl`` and, by ``dynamic.dropped``,
retired (``retire``) or shown again ``retry_after`` generation batches later, ahead of the next new rows (``retry``,
up to ``max_retries`` times; then retired). The filter's cursor (next row, rows waiting to be retried, counters) is
saved in every checkpoint (``curriculum_dynamic.json``) so a resumed run continues with the same rows as one that
was never interrupted. ``curriculum_dynamic.png`` plots the informative fraction and the refills per step.

The filter itself (:class:`DynamicFilter`) is plain Python; TRL's batch dictionary is merged by the toolkit's trainer
(:mod:`._trainer`, with the other code that reads TRL's private structures), and transformers is imported inside
the functions only.

>>> f = DynamicFilter(num_rows=6, max_refills=2)
>>> f.take(2)
[0, 1]
>>> f.informative([[1.0, 1.0], [0.0, 1.0]])
[False, True]
>>> f.drop(0)
'retired'
>>> f.take(1), f.remaining()
([2], 3)
"""

from __future__ import annotations

import functools
import json
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._plots import plot_dynamic as plot_dynamic  # the plot of a run's dynamic sampling
from .._plumbing import read_jsonl_latest, read_state, write_state
from ..errors import ConfigError
from ..rewards import completion_text, get_parser, row_gold, score_completion
from ._ledger import ROW_KEYS, distinct_rows, row_stats

log = logging.getLogger(__name__)

STATE_FILE = "curriculum_dynamic.json"
ROWS_FILE = "curriculum_dynamic.jsonl"
PLOT_FILE = "curriculum_dynamic.png"
DROPPED = ("retire", "retry")
REFILLS = ("estimate", "missing", "batch")
#: The key the merged batch carries to the loss: the dataset position of each completion's row.
POSITION_KEY = "curriculum_position"


@dataclass
class _Retry:
    position: int
    due: int  # the generation batch from which it may be shown again
    attempts: int  # times it has been dropped


@dataclass
class DynamicFilter:
    """The rows of each generation batch, in curriculum order, and what became of them.

    ``num_rows`` is how many rows the cursor may take (the curriculum's rows; a run ends when they and the rows
    waiting to be retried are used up). ``take`` hands out dataset positions: rows due for a retry first (in the
    order they were dropped), then the next new rows."""

    num_rows: int
    max_spread: float = 0.0
    max_refills: int = 4
    dropped: str = "retire"
    retry_after: int = 4
    max_retries: int = 1
    refill: str = "estimate"
    cursor: int = 0
    batch: int = 0
    retries: list[_Retry] = field(default_factory=list)
    attempts: dict[int, int] = field(default_factory=dict)
    totals: dict[str, int] = field(default_factory=lambda: {
        "generated_groups": 0, "informative_groups": 0, "trained_groups": 0, "masked_groups": 0,
        "dropped_groups": 0, "retired_rows": 0, "retried_rows": 0, "refills": 0, "batches": 0})

    def __post_init__(self) -> None:
        if self.dropped not in DROPPED:
            raise ConfigError(f"dynamic.dropped={self.dropped!r}: one of {', '.join(DROPPED)}")
        if self.refill not in REFILLS:
            raise ConfigError(f"dynamic.refill={self.refill!r}: one of {', '.join(REFILLS)}")

    # --- rows ------------------------------------------------------------------------------------------------
    def remaining(self) -> int:
        """Rows still to be shown: new rows after the cursor and rows waiting to be retried."""
        return self.num_rows - self.cursor + len(self.retries)

    def take(self, n: int) -> list[int]:
        """Up to ``n`` dataset positions for the batch being filled: due retries first, then new rows."""
        out: list[int] = []
        while len(out) < n and self.retries and self.retries[0].due <= self.batch:
            out.append(self.retries.pop(0).position)
        while len(out) < n and self.cursor < self.num_rows:
            out.append(self.cursor)
            self.cursor += 1
        return out

    def refill_size(self, missing: int, want: int, *, informative: int = 0, generated: int = 0) -> int:
        """Rows to generate for ``missing`` informative groups: exactly ``missing`` (``missing``), a full batch of
        ``want`` (``batch``, DAPO's and verl's), or ``missing`` over the informative rate seen so far in the run
        (``estimate``; ``informative`` / ``generated``: this batch's groups so far), at most ``want``.

        >>> f = DynamicFilter(num_rows=100)
        >>> f.refill_size(3, 8, informative=1, generated=4), f.refill_size(3, 8), f.refill_size(1, 8, generated=2)
        (8, 3, 8)
        """
        if self.refill == "missing":
            return missing
        if self.refill == "batch":
            return want
        inf = self.totals["informative_groups"] + informative
        gen = self.totals["generated_groups"] + generated
        if not gen:
            return missing
        return want if not inf else min(max(math.ceil(missing * gen / inf), missing), want)

    def give_back(self, positions: Sequence[int]) -> None:
        """Return rows taken but not used (generated past the batch's need), in reverse order of taking: new rows
        move the cursor back, retried rows go back to the front of the retry queue; they come next."""
        for pos in reversed(positions):
            if self.cursor and pos == self.cursor - 1:
                self.cursor -= 1
            else:
                self.retries.insert(0, _Retry(pos, self.batch, self.attempts.get(pos, 0)))

    def informative(self, groups: Sequence[Sequence[float]]) -> list[bool]:
        """Per group of metric values: is its spread (max - min, NaN ignored) above ``max_spread``? A group with
        fewer than two scored completions is not."""
        out = []
        for values in groups:
            v = [float(x) for x in values if x is not None and not math.isnan(float(x))]
            out.append(len(v) >= 2 and max(v) - min(v) > self.max_spread)
        return out

    def drop(self, position: int) -> str:
        """A dropped row: ``"retry"`` (queued ``retry_after`` batches on) or ``"retired"``."""
        attempts = self.attempts.get(position, 0) + 1
        self.attempts[position] = attempts
        if self.dropped == "retry" and attempts <= self.max_retries:
            self.retries.append(_Retry(position, self.batch + 1 + self.retry_after, attempts))
            return "retry"
        self.totals["retired_rows"] += 1
        return "retired"

    # --- checkpoints -------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"cursor": self.cursor, "batch": self.batch, "num_rows": self.num_rows,
                "retries": [[r.position, r.due, r.attempts] for r in self.retries],
                "attempts": {str(k): v for k, v in sorted(self.attempts.items())}, "totals": dict(self.totals)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if int(state["num_rows"]) != self.num_rows:
            raise ConfigError(f"the dynamic-sampling state was saved for {state['num_rows']} rows, this run has "
                              f"{self.num_rows}: resume with the same curriculum (data.shards, data.max_rows)")
        self.cursor = int(state["cursor"])
        self.batch = int(state["batch"])
        self.retries = [_Retry(int(p), int(d), int(a)) for p, d, a in state["retries"]]
        self.attempts = {int(k): int(v) for k, v in state["attempts"].items()}
        self.totals.update({k: int(v) for k, v in state["totals"].items()})


def filter_from_config(cfg: Any, *, num_rows: int) -> DynamicFilter:
    """The filter of a run (``cfg.dynamic``) over the ``num_rows`` rows one pass trains."""
    d = cfg.dynamic
    return DynamicFilter(num_rows=num_rows, max_spread=float(d.max_spread), max_refills=int(d.max_refills),
                         dropped=d.dropped, retry_after=int(d.retry_after), max_retries=int(d.max_retries), refill=d.refill)


def metric_column(metric: str, reward_names: Sequence[str]) -> int | None:
    """Which column of TRL's ``rewards_per_func`` a metric reads: None for ``reward`` (the weighted total) and
    ``exact_match``; the index of the reward of that name (as the recipe's ``rewards`` list names it)."""
    if metric in ("reward", "exact_match"):
        return None
    if metric in reward_names:
        return list(reward_names).index(metric)
    raise ConfigError(f"dynamic.metric={metric!r} is not reward, exact_match or a reward of this run "
                      f"({', '.join(reward_names)}); add it to rewards with weight 0 to filter on it without "
                      "training on it")


# --- the trainer -------------------------------------------------------------------------------------------------
class DynamicHook:
    """The filter of a run, its metric and its records (one per generation batch)."""

    def __init__(self, flt: DynamicFilter, *, metric: str, reward_names: Sequence[str], num_generations: int,
                 rows_file: Path | None = None) -> None:
        self.filter = flt
        self.metric = metric
        self.column = metric_column(metric, reward_names)
        self.num_generations = num_generations
        self.rows_file = rows_file
        self.records: list[dict[str, Any]] = []
        self._parsers: dict[str, Any] = {}

    def values(self, rewards_per_func: Any, weights: Any, rows: Sequence[Mapping[str, Any]],
               completions: Sequence[Any]) -> list[float]:
        """Per completion, the metric the filter reads."""
        if self.metric == "exact_match":
            out = []
            for row, completion in zip(rows, completions, strict=True):
                template = row.get("template") or "rag-rl"
                parse = self._parsers.get(template) or self._parsers.setdefault(template, get_parser(template))
                out.append(float(score_completion(completion_text(completion), row_gold(row), parse=parse).exact_match))
            return out
        if self.column is not None:
            return rewards_per_func[:, self.column].tolist()
        total = (rewards_per_func * weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
        total[rewards_per_func.isnan().all(dim=1)] = float("nan")
        return total.tolist()

    def write(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        if self.rows_file is not None:
            with open(self.rows_file, "a", encoding="utf-8") as f:
                f.write(json.dumps(record, sort_keys=True) + "\n")

    def save(self, checkpoint: Path) -> None:
        write_state(checkpoint / STATE_FILE, self.filter.state_dict())

    def load(self, checkpoint: Path) -> bool:
        state = read_state(checkpoint / STATE_FILE)
        if state is None:
            raise ConfigError(f"{checkpoint} has no {STATE_FILE}: it was not saved by a run with dynamic sampling, "
                              "so the rows it dropped and its place in the curriculum are unknown; resume it with "
                              "dynamic.enabled=false, or start a new run")
        self.filter.load_state_dict(state)
        return True


def make_hook(cfg: Any, *, num_rows: int, num_generations: int, rows_file: Path | None) -> DynamicHook:
    return DynamicHook(filter_from_config(cfg, num_rows=num_rows), metric=cfg.dynamic.metric,
                       reward_names=[r.name for r in cfg.rewards], num_generations=num_generations,
                       rows_file=rows_file)


def dynamic_batch(trainer: Any, hook: DynamicHook, want: int) -> tuple[dict[str, Any], dict[str, float]]:
    """One training generation batch of ``want`` informative groups, in curriculum order: generates and scores the
    next rows (``trainer.generate_and_score``: TRL's own code), drops the groups the filter finds uninformative,
    refills up to ``max_refills`` times, and merges the kept groups (the slots left short masked) into one batch of
    the usual shape (``trainer.merge_generation_outputs``: TRL's batch dictionary is the trainer's to build). Returns the batch and the metrics to log (``dynamic/*``, and the trained rows' ``curriculum/*``).
    The trainer's last scored batch (``trainer.scored``: rewards per function, rows, completions) is what the filter
    reads."""
    flt, g = hook.filter, trainer.num_generations
    recorder, trainer.recorder = trainer.recorder, None  # the trained rows are recorded below
    pieces: list[tuple[dict, list]] = []  # (TRL's output, the rows it scored: G copies each)
    kept: list[tuple[int, int, int]] = []  # (piece, first completion, dataset position), curriculum order
    spare: list[tuple[int, int, int]] = []  # dropped groups: they fill a batch the refills left short
    generated: list[int] = []
    rewound: list[int] = []
    informative = 0
    fates: dict[int, str] = {}
    spreads: dict[int, float | None] = {}
    retried = refills = 0
    gen_seconds, t0 = 0.0, time.perf_counter()
    positions = flt.take(want)
    if not positions:
        raise ConfigError("dynamic sampling: no rows left to generate from (every row of the curriculum "
                          "has been shown); the run should have ended at the step before")
    try:
        while positions:
            retried += sum(1 for p in positions if flt.attempts.get(p, 0))
            rows = [trainer.train_dataset[p] for p in positions]
            t = time.perf_counter()
            out = trainer.generate_and_score([r for r in rows for _ in range(g)])
            gen_seconds += time.perf_counter() - t
            rewards_per_func, scored_rows, completions = trainer.scored
            values = hook.values(rewards_per_func, trainer.reward_weights, scored_rows, completions)
            groups = [values[i * g:(i + 1) * g] for i in range(len(positions))]
            pieces.append((out, scored_rows))
            for k, (pos, ok) in enumerate(zip(positions, flt.informative(groups), strict=True)):
                generated.append(pos)
                informative += ok
                finite = [v for v in groups[k] if not math.isnan(v)]
                spreads[pos] = (max(finite) - min(finite)) if finite else None
                if len(kept) >= want:  # past the batch's need: given back, shown first next batch
                    rewound.append(pos)
                elif ok:
                    kept.append((len(pieces) - 1, k * g, pos))
                else:
                    spare.append((len(pieces) - 1, k * g, pos))
                    fates[pos] = flt.drop(pos)
            if rewound:
                flt.give_back(rewound)
            if len(kept) >= want or refills >= flt.max_refills:
                break
            positions = flt.take(flt.refill_size(want - len(kept), want, informative=informative,
                                                 generated=len(generated)))
            refills += bool(positions)
    finally:
        trainer.recorder = recorder
    # the batch TRL trains on: the informative groups in order; slots left short hold dropped groups (or, at the
    # very end of the curriculum, copies of the last group) with their loss mask zeroed
    layout = [(p, s, pos, False) for p, s, pos in kept[:want]]
    filler = spare or kept
    n_masked = want - len(layout)
    layout += [(*filler[i % len(filler)], True) for i in range(n_masked)]
    selections: list[tuple[dict, list[int]]] = []
    for p, s, _pos, _m in layout:  # consecutive groups of one generation call: one selection
        if selections and selections[-1][0] is pieces[p][0]:
            selections[-1][1].extend(range(s, s + g))
        else:
            selections.append((pieces[p][0], list(range(s, s + g))))
    masked = [m for _p, _s, _pos, m in layout for _ in range(g)]
    merged = trainer.merge_generation_outputs(
        selections, masked=masked, extra={POSITION_KEY: [pos for _p, _s, pos, _m in layout for _ in range(g)]})
    trained_rows = [pieces[p][1][s] for p, s, _pos, m in layout if not m]
    metrics = _record(trainer, hook, recorder, [pos for _p, _s, pos, m in layout if not m], trained_rows,
                      generated, informative, rewound, fates, spreads, refills, n_masked, retried, want, gen_seconds,
                      time.perf_counter() - t0)
    return merged, metrics


def _record(trainer, hook, recorder, trained, trained_rows, generated, informative, rewound, fates, spreads,
            refills, n_masked, retried, want, gen_seconds, seconds) -> dict[str, float]:
    """The batch's record (``curriculum_dynamic.jsonl``), the trained rows handed to the step recorder, the filter's
    totals counted; returns the metrics to log."""
    flt, g = hook.filter, trainer.num_generations

    def index(position: int) -> Any:
        cols = trainer.train_dataset.column_names
        key = "curriculum_index" if "curriculum_index" in cols else "id" if "id" in cols else None
        return trainer.train_dataset[position][key] if key else position

    metrics: dict[str, float] = {}
    if recorder is not None:  # the rows the loss sees, G copies each, masked groups left out
        rows = [{k: r.get(k) for k in ROW_KEYS if k in r} for r in trained_rows]
        recorder.add([r for r in rows for _ in range(g)])
        for key, value in row_stats(distinct_rows(rows)).items():
            if trainer.adaptive is not None and key.startswith("level"):
                continue  # the adaptive hook logs the levels it rendered
            metrics[f"curriculum/{key}"] = value
    dropped = list(fates)
    t = flt.totals
    t["batches"] += 1
    t["generated_groups"] += len(generated)
    t["informative_groups"] += informative
    t["trained_groups"] += len(trained)
    t["masked_groups"] += n_masked
    t["dropped_groups"] += len(dropped)
    t["refills"] += refills
    t["retried_rows"] += retried
    record = {
        "step": trainer.state.global_step + 1, "batch": flt.batch, "refills": refills,
        "generated": [index(p) for p in generated], "trained": [index(p) for p in trained],
        "dropped": [index(p) for p in dropped],
        "retired": [index(p) for p, f in fates.items() if f == "retired"],
        "requeued": [index(p) for p, f in fates.items() if f == "retry"], "retried": retried,
        "rewound": [index(p) for p in rewound],
        "masked_groups": n_masked, "generated_groups": len(generated), "informative_groups": informative,
        "trained_fraction_informative": len(trained) / want,
        "generation_per_informative_group": len(generated) / max(len(trained), 1),
        "spread": {str(index(p)): s for p, s in spreads.items()},
        "cursor": flt.cursor, "waiting_retry": len(flt.retries), "retired_total": t["retired_rows"],
        "filter_seconds": max(seconds - gen_seconds, 0.0), "generation_seconds": gen_seconds,
    }
    hook.write(record)
    flt.batch += 1
    metrics.update({
        "dynamic/informative_fraction": informative / max(len(generated), 1),
        "dynamic/trained_informative_fraction": len(trained) / want,
        "dynamic/refills": float(refills),
        "dynamic/generated_groups": float(len(generated)),
        "dynamic/generation_per_informative_group": len(generated) / max(len(trained), 1),
        "dynamic/masked_groups": float(n_masked),
        "dynamic/retired_rows": float(t["retired_rows"]),
        "dynamic/rows_left": float(flt.remaining()),
        "dynamic/filter_seconds": record["filter_seconds"],
    })
    return metrics


@functools.cache
def callback_class() -> type:
    """Ends the run at the first optimiser step after the curriculum is used up (no new rows, none to retry)."""
    from transformers import TrainerCallback

    class DynamicStop(TrainerCallback):
        def __init__(self, hook: DynamicHook, plan: Mapping[str, Any]) -> None:
            self.hook = hook
            self.per_generation = int(plan["steps_per_generation"]) * int(plan["num_iterations"])

        def on_step_end(self, args, state, control, **kwargs):
            at_boundary = (state.global_step * args.gradient_accumulation_steps) % self.per_generation == 0
            if self.hook.filter.remaining() == 0 and at_boundary and not control.should_training_stop:
                log.info("dynamic sampling: every row of the curriculum has been shown (%d batches, %d retired); "
                         "the run ends at step %d", self.hook.filter.batch, self.hook.filter.totals["retired_rows"],
                         state.global_step)
                control.should_training_stop = True
            return control

    return DynamicStop


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """The records of ``curriculum_dynamic.jsonl``; for a batch written twice (a resumed run), the last one."""
    return read_jsonl_latest(path, "batch")
