"""Which rows each optimiser step trained on, checked against the curriculum order and written down.

The trainer hands the rows of every generation batch (all processes gathered, in sampler order) to a
:class:`StepRecorder`; at the end of each optimiser step the recorder collapses the ``num_generations`` copies of
each prompt, compares the rows with the next rows of the curriculum, and appends one JSON line to
``curriculum_steps.jsonl``: the step, the ``curriculum_index`` of its rows, and their level and hop counts, so the
effect of the curriculum can be plotted against the rewards.

>>> rec = StepRecorder([10, 11, 12, 13], usable=4)
>>> rec.add([{"curriculum_index": i, "level": lv, "hops": 2} for i, lv in [(10, 1), (10, 1), (11, 3), (11, 3)]])
>>> r = rec.end_step(1)
>>> r["curriculum_index"], r["level_mean"], r["in_order"]
([10, 11], 2.0, True)
>>> rec.add([{"curriculum_index": 13, "level": 5, "hops": 2}] * 2)
>>> rec.end_step(2)
Traceback (most recent call last):
...
rag_curriculum.errors.CurriculumOrderError: step 2 trained on curriculum_index [13] where the curriculum has [12]: the rows are not in curriculum order
"""

from __future__ import annotations

import json
import logging
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .._plumbing import read_jsonl_latest
from ..errors import CurriculumOrderError, DivergedError

log = logging.getLogger(__name__)

#: The columns recorded per row (everything else in a row stays with the trainer).
ROW_KEYS = ("curriculum_index", "id", "level", "hops")
STEPS_FILE = "curriculum_steps.jsonl"
#: The batch plan saved beside every checkpoint (a resume checks it continues the same curriculum).
CHECKPOINT_PLAN = "curriculum_plan.json"


def rows_done(global_step: int, args: Any, prompts_per_generation: int) -> int:
    """Rows of the curriculum trained after ``global_step`` optimiser steps (where a resumed run continues):
    HF's Trainer skips ``global_step x gradient_accumulation_steps`` dataloader batches, and TRL's sampler yields
    each chunk of ``prompts_per_generation`` rows ``steps_per_generation x num_iterations`` times."""
    per_chunk = args.steps_per_generation * args.num_iterations
    return global_step * args.gradient_accumulation_steps // per_chunk * prompts_per_generation


def _key(row: Mapping[str, Any]) -> Any:
    return row.get("curriculum_index", row.get("id"))


def distinct_rows(rows: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Collapse the consecutive copies of each prompt (TRL repeats every row ``num_generations`` times)."""
    out: list[Mapping[str, Any]] = []
    for row in rows:
        if not out or _key(out[-1]) != _key(row):
            out.append(row)
    return out


def row_stats(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Level and hop statistics of distinct rows, for the trainer's logs (``curriculum/...``)."""
    stats: dict[str, float] = {"rows": float(len(rows))}
    for col in ("level", "hops"):
        values = [r[col] for r in rows if r.get(col) is not None]
        if values:
            stats[f"{col}_mean"] = sum(values) / len(values)
            stats[f"{col}_min"] = float(min(values))
            stats[f"{col}_max"] = float(max(values))
    idx = [r["curriculum_index"] for r in rows if r.get("curriculum_index") is not None]
    if idx:
        stats["index_first"] = float(idx[0])
        stats["index_last"] = float(idx[-1])
    return stats


class StepRecorder:
    """Collects the rows of each optimiser step, checks them against the curriculum, writes them down.

    ``expected`` is the dataset's ``curriculum_index`` column in order (None: no check); ``usable`` the rows one
    pass reaches (the sampler drops the incomplete tail), after which a further epoch starts from the first row.
    With ``policy="refuse"`` an out-of-order step raises :class:`CurriculumOrderError`; with ``"warn"`` it is
    logged. ``path`` (on the main process only) receives one JSON line per step.
    """

    def __init__(self, expected: Sequence[Any] | None, *, usable: int, policy: str = "refuse",
                 path: str | Path | None = None) -> None:
        self.expected = list(expected) if expected is not None else None
        self.usable = usable
        self.policy = policy
        self.path = Path(path) if path is not None else None
        self.position = 0
        self.pending: list[Mapping[str, Any]] = []
        self.records: list[dict[str, Any]] = []
        self.out_of_order = 0

    def start(self, position: int = 0) -> None:
        """Begin at row ``position`` of the curriculum (non-zero when resuming)."""
        self.position = position % self.usable if self.usable else 0
        self.pending = []

    def add(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Rows of one generation batch, all processes, in sampler order (copies per generation included)."""
        self.pending.extend({k: r.get(k) for k in ROW_KEYS if k in r} for r in rows)

    def end_step(self, step: int) -> dict[str, Any] | None:
        """Close optimiser step ``step``: check and record its rows; None when it generated nothing new."""
        if not self.pending:
            return None
        rows = distinct_rows(self.pending)
        self.pending = []
        seen = [_key(r) for r in rows]
        record: dict[str, Any] = {"step": step, "curriculum_index": seen}
        record.update(row_stats(rows))
        record["levels"] = dict(sorted(Counter(str(r.get("level")) for r in rows).items()))
        record["hops"] = dict(sorted(Counter(str(r.get("hops")) for r in rows).items()))
        problem = None
        if self.expected is not None and self.usable:
            want = [self.expected[(self.position + k) % self.usable] for k in range(len(rows))]
            record["in_order"] = seen == want
            if seen != want:
                self.out_of_order += 1
                problem = (f"step {step} trained on curriculum_index {_short(seen)} where the curriculum has "
                           f"{_short(want)}: the rows are not in curriculum order")
        self.position = (self.position + len(rows)) % self.usable if self.usable else 0
        self.records.append(record)
        if self.path is not None:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record, sort_keys=True) + "\n")
        if problem:
            if self.policy == "refuse":
                raise CurriculumOrderError(problem)
            log.warning("CURRICULUM ORDER LOST: %s", problem)
        return record


def _short(values: Sequence[Any], n: int = 8) -> str:
    return str(list(values)) if len(values) <= n else f"[{', '.join(map(str, values[:n]))}, ...]"


def read_steps(path: str | Path) -> list[dict[str, Any]]:
    """The records of ``curriculum_steps.jsonl``; for a step written twice (a resumed run), the last one.

    Args:
        path: a ``curriculum_steps.jsonl`` (written by :class:`StepRecorder` in TRL, by the replay buffer in verl).

    Returns:
        One record per step, in step order: ``step``, the rows trained (``curriculum_index``), ``in_order``, the
        positions in the curriculum, the level counts, ...

    Raises:
        FileNotFoundError: no such file.
        ValueError: a line that is not a JSON object with a ``step`` (naming the file and the line).

    Examples:
        ```python
        from rag_curriculum.train import read_steps

        records = read_steps("outputs/train/run/curriculum_steps.jsonl")
        assert all(r["in_order"] for r in records)
        ```
    """
    return read_jsonl_latest(path, "step")


#: The per-step numbers a training line shows, in this order, under short names (the rest stay in the logs:
#: trainer_state.json, and report_to's trackers).
STEP_KEYS = (("loss", "loss"), ("reward", "reward"), ("reward_std", "reward_std"), ("kl", "kl"),
             ("grad_norm", "grad_norm"), ("learning_rate", "lr"), ("completions/mean_length", "len"),
             ("curriculum/level_mean", "level"), ("curriculum/p_mean", "p"), ("rollout/searches", "searches"),
             ("rollout/gold_found", "gold_found"), ("search/searches", "searches"), ("search/gold_found", "gold_found"),
             ("tools/call_frequency", "tool_calls"), ("train_loss", "train_loss"), ("train_runtime", "runtime_s"),
             ("epoch", "epoch"))


def step_line(logs: dict[str, Any], step: int, max_steps: int) -> str | None:
    """One compact line for a training log: ``step 3/10  loss 0.0123  reward 0.512 ...`` with the numbers as
    numbers (``.4g``), not TRL's quoted dict of ~1,500 characters; None for logs without any of :data:`STEP_KEYS`
    (the final summary prints its own line).

    A search agent's line adds its searches per trajectory and the share that found a gold passage (the
    rollout's, else the search rewards'), and under TRL's tool calling the tool calls per turn; under a
    withholding curriculum (``curriculum/p_mean`` logged) it shows p, which moves, and not the rows' level, which
    does not.

    >>> step_line({"loss": 0.01234567, "reward": 0.5, "learning_rate": 1e-06, "total_flos": 0.0}, 3, 10)
    'step 3/10  loss 0.01235  reward 0.5  lr 1e-06'
    >>> step_line({"loss": 0.0, "curriculum/level_mean": 1.0, "curriculum/p_mean": 0.2,
    ...            "rollout/searches": 1.5}, 2, 3)
    'step 2/3  loss 0  p 0.2  searches 1.5'
    """
    skip = {"curriculum/level_mean"} if "curriculum/p_mean" in logs else set()
    parts, shown = [], set()
    for key, short in STEP_KEYS:  # the rollout's searches, else the search rewards' (TRL's tool route): once
        value = logs.get(key)
        if key in skip or short in shown or not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        parts.append(f"{short} {value:.4g}")
        shown.add(short)
    if len(parts) <= ("epoch" in logs):  # nothing but the epoch: not a line of its own
        return None
    return f"step {step}/{max_steps}  " + "  ".join(parts)


def compact_progress_callback() -> type:
    """transformers' ProgressCallback (the bar) whose per-step log is :func:`step_line` instead of a dict."""
    from transformers.trainer_callback import ProgressCallback

    class CompactProgress(ProgressCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001 - transformers' signature
            if state.is_world_process_zero and logs:
                line = step_line(logs, state.global_step, state.max_steps)
                if line is not None:
                    (self.training_bar.write if self.training_bar is not None else print)(line)

    return CompactProgress


NOTHING_TO_LEARN = (
    "step {step}: every group's rewards are equal (frac_reward_zero_std {frac:.3g}): GRPO's advantages are all zero, "
    "so this step changes nothing. A model whose samples all score alike (a random one, or one that solves or "
    "fails every prompt) has nothing to learn from; warm-start it (curriculum warm-start), sample more completions "
    "per prompt (grpo.num_generations), or drop such groups and refill (dynamic.enabled=true)")


def nothing_to_learn_callback() -> type:
    """A transformers callback that warns once, at the first logged step whose groups all have zero reward
    variance (TRL's ``frac_reward_zero_std`` 1.0: every advantage zero, no gradient), with what to do."""
    from transformers import TrainerCallback

    class NothingToLearn(TrainerCallback):
        warned = False

        def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001 - transformers' signature
            frac = (logs or {}).get("frac_reward_zero_std")
            if not self.warned and state.is_world_process_zero and isinstance(frac, (int, float)) and frac >= 1.0:
                self.warned = True
                log.warning(NOTHING_TO_LEARN.format(step=state.global_step, frac=frac))

    return NothingToLearn


def non_finite_callback() -> type:
    """A transformers callback that stops the run at the first logged step whose ``loss`` or ``grad_norm`` is NaN or
    infinite (:class:`~rag_curriculum.errors.DivergedError`), before the weights that step updated are saved: the
    optimiser applies a NaN gradient as it comes, and the model's next samples fail inside the sampler (CUDA: a
    device-side assert) or come out as garbage (docs/learning.md has a bf16 run that did)."""
    from transformers import TrainerCallback

    class NonFinite(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001 - transformers' signature
            bad = {k: v for k, v in (logs or {}).items()
                   if k in ("loss", "grad_norm") and isinstance(v, float) and not math.isfinite(v)}
            if bad:
                said = ", ".join(f"{k} {v}" for k, v in sorted(bad.items()))
                raise DivergedError(f"step {state.global_step}: {said}: the update put non-finite values into the "
                                    f"weights; the run stops without saving them (bf16={getattr(args, 'bf16', None)}, "
                                    f"learning rate {getattr(args, 'learning_rate', '?')})")

    return NonFinite


def learning_summary(log_history: Sequence[Mapping[str, Any]], *, keys: Sequence[str] = ("reward",),
                     window: int | None = None) -> dict[str, dict[str, float]]:
    """The mean of each of ``keys`` over a run's first and last ``window`` logged steps (default: a quarter of the
    steps, at least 1), for the closing line of a run: ``{"reward": {"first": .., "last": .., "steps": k}}``.
    Keys never logged are left out; a run of one step has no change to show (empty).

    Args:
        log_history: TRL's ``trainer.state.log_history`` (or ``TrainResult.log_history``).
        keys: the logged metrics to summarise.
        window: the logged steps averaged at each end (None: a quarter of them, at least 1).

    Returns:
        ``{key: {"first": mean, "last": mean, "steps": window}}`` for each key logged at least twice.

    >>> learning_summary([{"reward": r, "step": i} for i, r in enumerate((0.0, 1.0, 2.0, 3.0))])
    {'reward': {'first': 0.0, 'last': 3.0, 'steps': 1}}
    """
    out: dict[str, dict[str, float]] = {}
    for key in keys:
        values = [float(h[key]) for h in log_history if isinstance(h.get(key), (int, float)) and "step" in h]
        if len(values) < 2:
            continue
        k = window or max(1, len(values) // 4)
        k = min(k, len(values) // 2)
        out[key] = {"first": sum(values[:k]) / k, "last": sum(values[-k:]) / k, "steps": k}
    return out
