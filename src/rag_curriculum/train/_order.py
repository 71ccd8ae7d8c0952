"""Keeping curriculum order: what would reorder the rows, what to do about it, and which rows a run never sees.

The classic failure is a trainer that shuffles the data and silently destroys the curriculum (it happened to
RAG-RL's own setup in two frameworks: axolotl#2376, trl#2998). TRL's ``RepeatSampler`` keeps dataset order with
``shuffle_dataset=False``; these checks make sure nothing else undoes it, and say how many tail rows a batch
leaves unseen.

>>> issues = order_issues({"shuffle_dataset": True, "num_train_epochs": 2})
>>> [(i.setting, i.severity) for i in issues]
[('shuffle_dataset', 'error'), ('num_train_epochs', 'warning')]
>>> check_index_order([0, 1, 2, 5, 9]) is None
True
>>> check_index_order([0, 2, 1]).message
'curriculum_index is not increasing at row 2 (2 then 1): these shards are not in curriculum order'
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._plumbing import distribution
from ..errors import CurriculumOrderError
from ._batching import GRPO_DEFAULTS, BatchPlan

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Vocab:
    """How a message names a setting: by the keys of a ``curriculum train`` recipe (``grpo.max_steps``,
    ``data.order_policy=warn``) or by the arguments of the drop-in trainer in a user's own script
    (``GRPOConfig(max_steps=...)``, ``order_policy="warn"``). The same checks serve both; each caller's messages
    speak its own vocabulary.

    >>> RECIPE.setting("ignore_data_skip", False), TRAINER.setting("ignore_data_skip", False)
    ('grpo.ignore_data_skip=false', 'GRPOConfig(ignore_data_skip=False)')
    >>> RECIPE.warn, TRAINER.warn
    ('data.order_policy=warn', 'order_policy="warn"')
    """

    recipe: bool

    def setting(self, key: str, value: Any = None) -> str:
        """A ``GRPOConfig`` field, with a value when given."""
        if self.recipe:
            text = "" if value is None else "=" + (str(value).lower() if isinstance(value, bool) else str(value))
            return f"grpo.{key}{text}"
        return f"GRPOConfig({key}{'' if value is None else '=' + repr(value)})"

    @property
    def warn(self) -> str:
        """The policy that trains on when the order is lost."""
        return "data.order_policy=warn" if self.recipe else 'order_policy="warn"'

    @property
    def shorter(self) -> str:
        """How to train a shorter curriculum that keeps its shape."""
        return ("data.max_rows for a shorter curriculum that keeps its shape" if self.recipe else
                "a prefix of the rows (rows.select(range(N))) for a shorter curriculum that keeps its shape")


RECIPE = Vocab(recipe=True)
"""Messages of ``curriculum train``: the recipe's keys."""
TRAINER = Vocab(recipe=False)
"""Messages of :class:`~rag_curriculum.train.CurriculumGRPOTrainer` in a user's script: its own arguments."""


def index_span(values: Sequence[Any]) -> str:
    """The ``curriculum_index`` values of some rows, for a message: ``first..last`` when they increase (the
    curriculum's order; a partition leaves gaps), else the values themselves, sorted (a reordered dataset's rows are
    scattered over the curriculum, and a range would read backwards).

    >>> index_span([4, 5, 7]), index_span([9]), index_span([51, 3, 31])
    ('4..7', '9', '3, 31, 51 (scattered: the rows are not in curriculum order)')
    """
    vals = [v for v in values if v is not None]
    if not vals:
        return "?"
    if all(a < b for a, b in zip(vals, vals[1:], strict=False)):
        return str(vals[0]) if len(vals) == 1 else f"{vals[0]}..{vals[-1]}"
    shown = sorted(vals)
    text = ", ".join(map(str, shown[:8])) + (f", ... ({len(shown)} rows)" if len(shown) > 8 else "")
    return f"{text} (scattered: the rows are not in curriculum order)"


@dataclass(frozen=True)
class OrderIssue:
    """Something that would reorder (``error``) or repeat / blur (``warning``) the curriculum."""

    setting: str
    severity: str  # error | warning
    message: str


def order_issues(grpo: Mapping[str, Any], plan: BatchPlan | None = None, *, resuming: bool = False,
                 vocab: Vocab = RECIPE) -> list[OrderIssue]:
    """The ``GRPOConfig`` settings (as a recipe gives them) that would reorder or repeat the curriculum, named in
    ``vocab`` (a recipe's keys, or the drop-in trainer's arguments)."""
    issues: list[OrderIssue] = []
    if grpo.get("shuffle_dataset", True) is not False:
        issues.append(OrderIssue(
            "shuffle_dataset", "error",
            "shuffle_dataset is not false: TRL's RepeatSampler then draws a random permutation of the rows and the "
            f"curriculum order is lost (trl#2998); set {vocab.setting('shuffle_dataset', False)}"))
    if str(grpo.get("train_sampling_strategy", "random")) == "group_by_length" or grpo.get("group_by_length"):
        issues.append(OrderIssue(
            "train_sampling_strategy", "error",
            "group_by_length sorts rows by length, not by curriculum; remove it (GRPO batches by prompt group)"))
    accel = grpo.get("accelerator_config")
    split = accel.get("split_batches") if isinstance(accel, Mapping) else getattr(accel, "split_batches", False)
    if split:
        issues.append(OrderIssue(
            "accelerator_config.split_batches", "error",
            "accelerator_config.split_batches=true splits each process's generation batch over all processes: TRL's "
            "sampler then hands the trainer parts of several generation batches out of order (and breaks the groups "
            "of num_generations); leave it false"))
    if resuming and grpo.get("ignore_data_skip"):
        issues.append(OrderIssue(
            "ignore_data_skip", "error",
            "ignore_data_skip=true restarts the data from the first row on resume: the curriculum would start "
            f"over from its easiest rows; set {vocab.setting('ignore_data_skip', False)}"))
    epochs = float(grpo.get("num_train_epochs") or GRPO_DEFAULTS["num_train_epochs"])
    max_steps = int(grpo.get("max_steps") or -1)
    if max_steps <= 0 and epochs > 1:
        issues.append(OrderIssue(
            "num_train_epochs", "warning",
            f"num_train_epochs={epochs:g}: each epoch replays the curriculum from its first row (after the hardest "
            f"rows come the easiest again); RAG-RL trains one epoch, and a multi-stage curriculum is one ordered "
            f"dataset trained once"))
    if plan is not None and plan.steps_per_epoch and max_steps > plan.steps_per_epoch:
        issues.append(OrderIssue(
            "max_steps", "warning",
            f"max_steps={max_steps} is more than one pass over the curriculum ({plan.steps_per_epoch} steps): "
            f"after step {plan.steps_per_epoch} training starts again from the first row"))
    if plan is not None and plan.unreached_rows:
        setting = "max_steps" if max_steps > 0 else "num_train_epochs"
        usable = plan.rows_reached + plan.unreached_rows
        issues.append(OrderIssue(
            setting, "warning",
            f"{vocab.setting(setting, max_steps if max_steps > 0 else float(f'{epochs:g}'))} stops the run after "
            f"{plan.total_steps} of the {plan.steps_per_epoch} steps of one pass: it trains on only rows "
            f"0..{plan.rows_reached - 1} of the {usable} it could, and the rest of the curriculum (its later, usually "
            f"harder, levels) is never reached; use {vocab.shorter}"))
    if plan is not None and plan.gradient_accumulation_steps % plan.steps_per_generation:
        spg, ga = plan.steps_per_generation, plan.gradient_accumulation_steps
        issues.append(OrderIssue(
            "steps_per_generation", "error",
            f"steps_per_generation={spg} with gradient_accumulation_steps={ga}: one generation batch "
            f"({plan.prompts_per_generation} prompts) is trained over {spg} passes and TRL shuffles its completions "
            f"across them, so an optimiser step trains a random part of the batch's rows, not the curriculum's next "
            f"ones (the order holds per generation batch only); leave steps_per_generation and "
            f"generation_batch_size unset (one generation per step) or make gradient_accumulation_steps a multiple "
            f"of steps_per_generation, or {vocab.warn} to train with the order kept per generation batch"))
    return issues


def enforce(issues: Iterable[OrderIssue], policy: str, vocab: Vocab = RECIPE) -> None:
    """Log every issue loudly; raise :class:`CurriculumOrderError` for errors when ``policy == "refuse"``."""
    errors = []
    for issue in issues:
        if issue.severity == "error":
            errors.append(issue)
            log.warning("CURRICULUM ORDER %s: %s", "REFUSED" if policy == "refuse" else "WILL BE LOST",
                        issue.message)
        else:
            log.warning("curriculum order: %s", issue.message)
    if errors and policy == "refuse":
        raise CurriculumOrderError(
            "; ".join(e.message for e in errors)
            + f" ({vocab.warn} trains anyway, at the cost of the curriculum)",
            hint=None if vocab.recipe else f"fix the setting, or {vocab.warn} to train on and record every step "
                                           "out of order")


def check_index_order(indices: Sequence[Any]) -> OrderIssue | None:
    """An issue when ``curriculum_index`` (in dataset order) is not strictly increasing; None when it is.

    Partitioned curricula keep a subset of rows, so gaps are fine; a step back is not."""
    prev = None
    for pos, value in enumerate(indices):
        if value is None:
            return OrderIssue("curriculum_index", "warning",
                              f"row {pos} has no curriculum_index: the order cannot be checked")
        if prev is not None and value <= prev:
            return OrderIssue(
                "curriculum_index", "error",
                f"curriculum_index is not increasing at row {pos} ({prev} then {value}): these shards are not "
                f"in curriculum order")
        prev = value
    return None


def curriculum_order(indices: Sequence[Any]) -> list[Any]:
    """The order the rows of a dataset should train in: its ``curriculum_index`` as it is when it increases, else
    sorted (a dataset a user's own shuffle reordered, trained under the warn policy, is checked against the
    curriculum, not against itself).

    >>> curriculum_order([0, 2, 5]), curriculum_order([5, 0, 2])
    ([0, 2, 5], [0, 2, 5])
    """
    known = [v for v in indices if v is not None]
    return list(indices) if check_index_order(indices) is None else sorted(known)


def tail_rows(plan: BatchPlan, indices: Sequence[Any] | None = None, levels: Sequence[Any] | None = None
              ) -> dict[str, Any]:
    """Which rows one pass leaves unseen: TRL's sampler drops the incomplete last generation batch."""
    n = plan.num_rows or 0
    unseen = plan.unseen_rows or 0
    out: dict[str, Any] = {"num_rows": n, "prompts_per_generation": plan.prompts_per_generation,
                           "steps_per_epoch": plan.steps_per_epoch, "unseen_rows": unseen}
    if unseen and indices is not None:
        tail = list(indices[n - unseen:])
        out["unseen_curriculum_index"] = _bounds(tail)
        out["unseen_span"] = index_span(tail)
    if unseen and levels is not None:
        out["unseen_levels"] = distribution(levels[n - unseen:])
    if plan.rows_reached is not None:
        reached, unreached = plan.rows_reached, plan.unreached_rows
        out["total_steps"] = plan.total_steps
        out["rows_reached"] = reached
        out["unreached_rows"] = unreached
        if unreached and indices is not None:
            out["unreached_curriculum_index"] = _bounds(indices[reached:reached + unreached])
            out["unreached_span"] = index_span(indices[reached:reached + unreached])
        if unreached and levels is not None:
            out["unreached_levels"] = distribution(levels[reached:reached + unreached])
    return out


def _bounds(values: Sequence[Any]) -> list[Any]:
    """The lowest and highest ``curriculum_index`` of some rows (their first and last when in order)."""
    vals = [v for v in values if v is not None]
    return [min(vals), max(vals)] if vals else [None, None]


def report_tail(tail: Mapping[str, Any], manifest_tail: Mapping[str, Any] | None = None, *,
                vocab: Vocab = RECIPE) -> None:
    """Log the unseen tail, and a mismatch between the batch the shards were fitted to and the one trained."""
    unseen = tail.get("unseen_rows") or 0
    ppg = tail["prompts_per_generation"]
    if unseen:
        span = tail.get("unseen_span")
        where = f" (curriculum_index {span}, levels {tail.get('unseen_levels')})" if span else ""
        log.warning(
            "%d row(s) of %d will never be trained on%s: TRL drops the last batch short of %d prompts; build with "
            "--batch-prompts %d --tail trim (or pad)",
            unseen, tail["num_rows"], where, ppg, ppg)
    elif not tail.get("unreached_rows"):
        log.info("every one of the %d rows is trained on (%s steps of %d prompts)", tail["num_rows"],
                 tail["steps_per_epoch"], ppg)
    if tail.get("unreached_rows"):
        span = tail.get("unreached_span")
        where = f" (curriculum_index {span}, levels {tail.get('unreached_levels')})" if span else ""
        log.warning(
            "this run's %s steps reach only the first %d rows: %d more row(s) of the curriculum%s are never trained "
            "on (%s / %s stop it before the end of one pass; %s)", tail.get("total_steps"), tail["rows_reached"],
            tail["unreached_rows"], where, vocab.setting("max_steps"), vocab.setting("num_train_epochs"),
            vocab.shorter)
    if manifest_tail and manifest_tail.get("batch_prompts") and manifest_tail["batch_prompts"] != ppg:
        log.warning("the shards were fitted to %s prompts per step, but this run takes %d per batch",
                    manifest_tail["batch_prompts"], ppg)
