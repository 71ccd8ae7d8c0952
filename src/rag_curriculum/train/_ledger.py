"""Which rows each optimiser step trained on, checked against the curriculum order and written down.

The trainer tags every completion it generates with a serial number, and hands the serials each micro-batch's loss
computed (all processes gathered) to a :class:`StepRecorder`: what trained, not what the sampler planned. At the end
of each optimiser step the recorder collapses the ``num_generations`` copies of each prompt, compares the rows with
the curriculum's rows for that step (:class:`StepLayout`: where each micro-batch takes its completions from), and
appends one JSON line to ``curriculum_steps.jsonl``: the step, the ``curriculum_index`` of its rows (in curriculum
order), ``in_order``, and their level and hop counts, so the effect of the curriculum can be plotted against the
rewards. Rows handed to :meth:`StepRecorder.add` (dynamic sampling's trained groups) are checked as the next rows.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._plumbing import atomic_write_text, read_jsonl_latest
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


@dataclass(frozen=True)
class StepLayout:
    """Where each of TRL's micro-batches takes its completions from: the batch arithmetic of a run, in the
    curriculum's rows. A generation batch of ``prompts_per_generation`` rows (``num_generations`` completions each)
    is cut into ``steps_per_generation`` slices of ``per_device`` completions per process, one slice a micro-batch,
    and used ``num_iterations`` times; HF's Trainer takes ``gradient_accumulation_steps`` micro-batches per
    optimiser step.

    >>> lay = StepLayout(per_device=4, num_processes=1, num_generations=2, steps_per_generation=2,
    ...                  gradient_accumulation_steps=1, num_iterations=1, prompts_per_generation=4,
    ...                  steps_per_epoch=4, batches_per_epoch=4)
    >>> lay.positions(0), lay.positions(1), lay.positions(2)
    ([0, 1], [2, 3], [4, 5])
    >>> lay.resume_micro(3), lay.resume_micro(4)
    (3, 0)
    """

    per_device: int
    num_processes: int
    num_generations: int
    steps_per_generation: int
    gradient_accumulation_steps: int
    num_iterations: int
    prompts_per_generation: int
    steps_per_epoch: int
    """Optimiser steps in one pass (HF's ``num_update_steps_per_epoch``)."""
    batches_per_epoch: int
    """Micro-batches (dataloader batches) in one pass."""

    @classmethod
    def from_plan(cls, plan: Mapping[str, Any]) -> StepLayout | None:
        """The layout of a batch plan (``plan_batches(...).to_dict()``); None without the curriculum's size."""
        if not plan.get("steps_per_epoch") or plan.get("num_rows") is None:
            return None
        ppg = int(plan["prompts_per_generation"])
        chunks = (int(plan["num_rows"]) - int(plan.get("unseen_rows") or 0)) // ppg
        return cls(per_device=int(plan["per_device_train_batch_size"]), num_processes=int(plan["num_processes"]),
                   num_generations=int(plan["num_generations"]),
                   steps_per_generation=int(plan["steps_per_generation"]),
                   gradient_accumulation_steps=int(plan["gradient_accumulation_steps"]),
                   num_iterations=int(plan["num_iterations"]), prompts_per_generation=ppg,
                   steps_per_epoch=int(plan["steps_per_epoch"]),
                   batches_per_epoch=chunks * int(plan["steps_per_generation"]) * int(plan["num_iterations"]))

    @property
    def shuffled_within_steps(self) -> bool:
        """A generation batch's slices fall into different optimiser steps, so TRL's shuffle of its completions
        (before it cuts the slices) decides which rows each step trains."""
        return self.gradient_accumulation_steps % self.steps_per_generation != 0

    def positions(self, micro: int) -> list[int]:
        """The rows (positions in one pass of the curriculum) whose completions micro-batch ``micro`` of an epoch
        holds, had TRL not shuffled the generation batch: the slice of each process's part of it."""
        chunk, repeat = divmod(micro, self.steps_per_generation * self.num_iterations)
        j = repeat % self.steps_per_generation
        local = self.per_device * self.steps_per_generation
        out: set[int] = set()
        for proc in range(self.num_processes):
            first = proc * local + j * self.per_device
            out.update(k // self.num_generations for k in range(first, first + self.per_device))
        return sorted(chunk * self.prompts_per_generation + k for k in out)

    def resume_micro(self, global_step: int, *, ignore_data_skip: bool = False) -> int:
        """The micro-batch of its epoch where HF's Trainer resumes after ``global_step`` optimiser steps."""
        if ignore_data_skip or not self.steps_per_epoch:
            return 0
        return (global_step % self.steps_per_epoch) * self.gradient_accumulation_steps


class StepRecorder:
    """Collects the rows of each optimiser step, checks them against the curriculum, writes them down.

    ``expected`` is the curriculum's ``curriculum_index`` in the order it should train (None: no check): for a
    dataset reordered by a user's own shuffle and trained under ``policy="warn"``, the curriculum's order
    (:func:`~rag_curriculum.train._order.curriculum_order`), not the dataset's, or the check would pass on any
    order. ``usable`` is the rows one pass reaches (the sampler drops the
    incomplete tail), after which a further epoch starts from the first row. With ``policy="refuse"`` an
    out-of-order step raises :class:`CurriculumOrderError`; with ``"warn"`` it is logged and counted
    (``out_of_order``). ``path`` (on the main process only) receives one JSON line per step.

    Two feeds: the trainer hands it, per micro-batch, the completions the loss computed
    (:meth:`trained`, with ``layout``: the ledger of what trained); rows handed with :meth:`add` (dynamic sampling's
    trained groups, or a script's own) are checked as the next rows of the curriculum. ``sink`` receives each
    step's ``curriculum/*`` metrics.
    """

    def __init__(self, expected: Sequence[Any] | None, *, usable: int, policy: str = "refuse",
                 path: str | Path | None = None, layout: StepLayout | None = None,
                 words: Any = None) -> None:
        self.expected = list(expected) if expected is not None else None
        self.order = self.expected
        self.usable = usable
        self.policy = policy
        self.path = Path(path) if path is not None else None
        self.layout = layout
        self.words = words  # how messages name the policy (train._order.Vocab); None: the recipe's keys
        self.sink: Any = None
        self.check: Any = None  # an InformativeCheck (train._informative): each step's informative fraction
        self.position = 0
        self.micro = 0
        self.shift = 0
        self.pending: list[Mapping[str, Any]] = []
        self.registry: dict[int, Mapping[str, Any]] = {}
        self.serial = 0
        self.generation_first = 0
        self.seen: list[Mapping[str, Any]] = []
        self.want: set[int] = set()
        self.completions = 0
        self.records: list[dict[str, Any]] = []
        self.out_of_order = 0

    def start(self, position: int = 0, *, micro: int | None = None, shift: int = 0) -> None:
        """Begin at row ``position`` of the curriculum (non-zero when resuming); with a layout, at micro-batch
        ``micro`` of the epoch, the curriculum's rows ``shift`` rows further on than where the data resumes (a
        resume that skips or repeats rows, trained under ``policy="warn"``)."""
        self.position = position % self.usable if self.usable else 0
        self.micro = micro or 0
        self.shift = shift
        self.pending = []
        self.seen, self.want, self.completions = [], set(), 0

    def add(self, rows: Iterable[Mapping[str, Any]]) -> None:
        """Rows of one batch, all processes, in order (copies per generation included), checked as the next rows
        of the curriculum at the end of the step."""
        self.pending.extend({k: r.get(k) for k in ROW_KEYS if k in r} for r in rows)

    def generated(self, rows: Sequence[Mapping[str, Any]]) -> int:
        """Register the rows of one generation batch (all processes, in order, a row per completion); returns the
        serial number of its first completion (the trainer tags each completion with its serial, and the loss
        hands the serials back to :meth:`trained`). Older batches are forgotten: TRL never trains them again."""
        self.registry = {k: v for k, v in self.registry.items() if k >= self.generation_first}
        first = self.serial
        for k, row in enumerate(rows):
            self.registry[first + k] = {key: row.get(key) for key in ROW_KEYS if key in row}
        self.serial += len(rows)
        self.generation_first = first
        return first

    def trained(self, serials: Iterable[int]) -> None:
        """The completions (their serials, all processes) that one micro-batch's loss computed."""
        for s in serials:
            row = self.registry.get(int(s))
            if row is not None:
                self.seen.append(row)
                self.completions += 1
        if self.layout is not None:
            self.want.update(self.layout.positions(self.micro))
            self.micro = (self.micro + 1) % max(self.layout.batches_per_epoch, 1)

    def end_step(self, step: int) -> dict[str, Any] | None:
        """Close optimiser step ``step``: check and record its rows; None when it trained nothing new."""
        if self.seen:
            return self._end_trained(step)
        if not self.pending:
            return None
        rows = distinct_rows(self.pending)
        self.pending = []
        seen = [_key(r) for r in rows]
        record = self._record(step, rows)
        checked = self._checked(step, rows, record)
        if checked and self.sink is not None:
            self.sink(checked)
        problem = None
        if self.order is not None and self.usable:
            want = [self.order[(self.position + k) % self.usable] for k in range(len(rows))]
            record["in_order"] = seen == want
            if seen != want:
                self.out_of_order += 1
                record["curriculum_has"] = want
                problem = (f"step {step} trained on curriculum_index {_short(seen)} where the curriculum has "
                           f"{_short(want)}: the rows are not in curriculum order")
        self.position = (self.position + len(rows)) % self.usable if self.usable else 0
        return self._close(record, problem)

    def _end_trained(self, step: int) -> dict[str, Any]:
        """A step's record from the completions its loss computed."""
        rank = {v: k for k, v in enumerate(self.order or [])}
        unique: dict[Any, Mapping[str, Any]] = {}
        for row in self.seen:
            unique.setdefault(_key(row), row)
        rows = sorted(unique.values(), key=lambda r: rank.get(_key(r), len(rank)))
        record = self._record(step, rows)
        record["completions"] = self.completions
        checked = self._checked(step, rows, record)
        problem = None
        if self.order is not None and self.usable and self.layout is not None:
            seen = [_key(r) for r in rows]
            want = [self.order[(p + self.shift) % self.usable] for p in sorted(self.want)]
            record["in_order"] = sorted(map(str, seen)) == sorted(map(str, want))
            if not record["in_order"]:
                self.out_of_order += 1
                record["curriculum_has"] = want
                lay = self.layout
                why = ("the rows are not in curriculum order" if not lay.shuffled_within_steps else
                       f"TRL shuffles the completions of each generation batch ({lay.prompts_per_generation} prompts) "
                       f"across its {lay.steps_per_generation} passes, and with gradient_accumulation_steps="
                       f"{lay.gradient_accumulation_steps} a step trains a part of them")
                problem = (f"step {step} trained on curriculum_index {_short(seen)} where the curriculum has "
                           f"{_short(want)}: {why}")
        self.seen, self.want, self.completions = [], set(), 0
        if self.sink is not None:
            metrics = {f"curriculum/{k}": v for k, v in row_stats(rows).items()}
            if "in_order" in record:
                metrics["curriculum/in_order"] = float(record["in_order"])
            self.sink({**metrics, **checked})
        return self._close(record, problem)

    def _record(self, step: int, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        record: dict[str, Any] = {"step": step, "curriculum_index": [_key(r) for r in rows]}
        record.update(row_stats(rows))
        record["levels"] = dict(sorted(Counter(str(r.get("level")) for r in rows).items()))
        record["hops"] = dict(sorted(Counter(str(r.get("hops")) for r in rows).items()))
        return record

    def _checked(self, step: int, rows: Sequence[Mapping[str, Any]], record: dict[str, Any]) -> dict[str, float]:
        """The step's informative fraction over exactly these rows (measured, and predicted with a profile), added
        to its record as ``informative_measured`` / ``informative_predicted``; the metrics to log."""
        if self.check is None:
            return {}
        metrics = self.check.step(step, rows)
        for name, value in metrics.items():
            record[name.replace("/", "_")] = round(value, 6)
        return metrics

    def _close(self, record: dict[str, Any], problem: str | None) -> dict[str, Any]:
        self.records.append(record)
        if self.path is not None:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record, sort_keys=True) + "\n")
        if problem:
            warn = getattr(self.words, "warn", "data.order_policy=warn")
            if self.policy == "refuse":
                raise CurriculumOrderError(problem, hint=f"{warn} trains on, and records and counts such steps "
                                                         "(in_order false)")
            log.warning("CURRICULUM ORDER LOST (%s): %s", warn, problem)
        return record

    def save(self, folder: str | Path) -> None:
        """Write the records so far into a checkpoint folder (a resumed run's recorder starts from them)."""
        text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in self.records)
        atomic_write_text(Path(folder) / STEPS_FILE, text)

    def load(self, folder: str | Path, upto: int) -> None:
        """The records of a checkpoint folder up to step ``upto`` (the steps the resumed run continues after)."""
        p = Path(folder) / STEPS_FILE
        if not p.exists():
            return
        self.records = [r for r in read_jsonl_latest(p, "step") if int(r["step"]) <= upto]
        self.out_of_order = sum(1 for r in self.records if r.get("in_order") is False)


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
STEP_KEYS = (("loss", "loss"), ("reward", "reward"), ("reward_std", "reward_std"), ("informative", "informative"),
             ("informative/predicted", "predicted"), ("informative/refreshed", "refreshed"), ("kl", "kl"),
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
    does not. The share of informative groups is shown as GRPO felt it, 1 - TRL's ``frac_reward_zero_std``, and
    beside it the level profile's prediction for the step's rows when the run has one (``informative/predicted``).

    >>> step_line({"loss": 0.01234567, "reward": 0.5, "learning_rate": 1e-06, "total_flos": 0.0}, 3, 10)
    'step 3/10  loss 0.01235  reward 0.5  lr 1e-06'
    >>> step_line({"loss": 0.0, "curriculum/level_mean": 1.0, "curriculum/p_mean": 0.2,
    ...            "rollout/searches": 1.5}, 2, 3)
    'step 2/3  loss 0  p 0.2  searches 1.5'
    >>> step_line({"reward": 1.5, "frac_reward_zero_std": 0.25, "informative/predicted": 0.7}, 4, 8)
    'step 4/8  reward 1.5  informative 0.75  predicted 0.7'
    """
    if isinstance(logs.get("frac_reward_zero_std"), (int, float)):
        logs = {**logs, "informative": 1.0 - logs["frac_reward_zero_std"]}
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


NOTHING_TO_LEARN = (  # (docs/troubleshooting.md says why, and what else helps)
    "step {step}: every group's rewards are equal: no gradient; run curriculum warm-start first, raise "
    "grpo.num_generations or set dynamic.enabled=true")


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
