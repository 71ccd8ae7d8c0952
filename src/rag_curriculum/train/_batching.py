"""The paper's batch in prompts, mapped onto TRL 1.x's batch in completions, and what a batch leaves unseen.

TRL's ``GRPOTrainer`` counts **completions**, not prompts:

* one optimiser step uses ``per_device_train_batch_size x num_processes x gradient_accumulation_steps``
  completions, ``num_generations`` of them per prompt;
* completions are generated in *generation batches* of ``generation_batch_size = per_device_train_batch_size x
  num_processes x steps_per_generation`` (``steps_per_generation`` defaults to ``gradient_accumulation_steps``,
  so one generation batch per optimiser step);
* its ``RepeatSampler`` cuts the dataset into chunks of ``generation_batch_size / num_generations`` prompts and
  **drops the incomplete last chunk**: ``N mod prompts_per_generation`` rows are never trained on.

RAG-RL (4.2): 42 prompts x 7 generations = 294 completions per step. On one GPU with 7 completions per pass that
is ``per_device_train_batch_size=7, gradient_accumulation_steps=42``; on 7 training GPUs (the authors' 7 + 1 for
vLLM) ``per_device_train_batch_size=7, gradient_accumulation_steps=6``. 294 is not a multiple of 8, so 8 training
processes cannot make the paper's batch exactly.

>>> derive_accumulation(prompts_per_step=42, num_generations=7, per_device=7, num_processes=1)
42
>>> derive_accumulation(prompts_per_step=42, num_generations=7, per_device=7, num_processes=7)
6
>>> plan = plan_batches({"per_device_train_batch_size": 7, "gradient_accumulation_steps": 6,
...                      "num_generations": 7}, num_processes=7, num_rows=5000)
>>> plan.prompts_per_step, plan.completions_per_step, plan.steps_per_epoch, plan.unseen_rows
(42, 294, 119, 2)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from .._plumbing import trainer_tail
from ..errors import BatchError

# GRPOConfig defaults (TRL 1.16) that the batch arithmetic needs when a recipe leaves them out.
GRPO_DEFAULTS = {"per_device_train_batch_size": 8, "gradient_accumulation_steps": 1, "num_generations": 8,
                 "num_iterations": 1, "num_train_epochs": 3.0, "max_steps": -1}


def _fits(prompts: int, generations: int, per_device: int, processes: int) -> bool:
    """Whether ``prompts x generations`` completions split into whole passes of ``per_device x processes``."""
    return (prompts * generations) % (per_device * processes) == 0


def _nearest(target: int, ok: Any, *, limit: int, count: int = 3) -> list[int]:
    """Up to ``count`` values in 1..``limit`` for which ``ok`` holds, the nearest to ``target`` first (the
    smaller on a tie), returned in ascending order."""
    found = sorted((v for v in range(1, limit + 1) if ok(v)), key=lambda v: (abs(v - target), v))
    return sorted(found[:count])


def layout_offers(*, prompts_per_step: int, num_generations: int, per_device: int, num_processes: int
                  ) -> dict[str, list[int]]:
    """The settings a refused layout could change to, each alone (the others as they are) and each one that
    :func:`derive_accumulation` accepts. Those that keep the step's completions first: ``batch.per_device_completions``
    values for these processes, and numbers of training processes (the most at or below the processes at hand
    first, then more); then ``batch.prompts_per_step`` values nearest the asked one, which change the batch (never
    empty: a multiple of the pass always fits). Empty where no such value exists."""
    completions = prompts_per_step * num_generations
    pass_ = per_device * num_processes
    step = pass_ // math.gcd(pass_, num_generations)  # prompts_per_step must be a multiple of this
    keep = [n for n in range(1, (completions // per_device or 1) + 1)
            if _fits(prompts_per_step, num_generations, per_device, n)]
    return {
        "batch.per_device_completions": [d for d in range(1, completions + 1)
                                         if _fits(prompts_per_step, num_generations, d, num_processes)][:8],
        "num_processes": ([n for n in reversed(keep) if n <= num_processes]
                          + [n for n in keep if n > num_processes])[:4],
        "batch.prompts_per_step": _nearest(prompts_per_step, lambda p: p % step == 0,
                                           limit=max(2 * prompts_per_step, 2 * step)),
    }


def _nodes(processes: int, per_node: int = 8) -> str:
    """``21 (3 nodes x 7)``: a process count, as nodes of at most ``per_node`` GPUs where it takes more than one."""
    if processes <= per_node:
        return str(processes)
    gpus = max(g for g in range(1, per_node + 1) if processes % g == 0)
    return f"{processes} ({processes // gpus} nodes x {gpus})"


def derive_accumulation(*, prompts_per_step: int, num_generations: int, per_device: int, num_processes: int) -> int:
    """``gradient_accumulation_steps`` giving ``prompts_per_step`` prompts per optimiser step, or a
    :class:`BatchError` that lists what would work instead (its ``offered``: :func:`layout_offers`): first what
    keeps the step's completions, then the prompts per step that change them, each with its completions."""
    completions = prompts_per_step * num_generations
    per_pass = per_device * num_processes
    if completions % per_pass == 0:
        return completions // per_pass
    offered = layout_offers(prompts_per_step=prompts_per_step, num_generations=num_generations,
                            per_device=per_device, num_processes=num_processes)
    devices, procs, near = (offered[k] for k in ("batch.per_device_completions", "num_processes",
                                                 "batch.prompts_per_step"))
    keeping = ([f"batch.per_device_completions in {devices}"] if devices else []) + (
        [f"{', '.join(_nodes(n) for n in procs)} training processes"] if procs else [])
    changing = ", ".join(f"{p} ({p * num_generations} completions a step instead of {completions})" for p in near)
    choices = (f"Keeping the {completions} completions a step: {'; or '.join(keeping)}. " if keeping else
               f"No layout of {num_processes} process(es) keeps the {completions} completions a step. ")
    err = BatchError(
        f"{prompts_per_step} prompts x {num_generations} generations = {completions} completions per step cannot be "
        f"split into passes of {per_device} completions on {num_processes} process(es) ({per_pass} per pass). "
        f"{choices}Changing the batch: batch.prompts_per_step={changing}. (Each alone; RAG-RL's 42 x 7 = 294 needs "
        "1, 2, 3, 6, 7, 14, 21 or 42 processes at 7 per device: the authors trained on 7 GPUs + 1 for vLLM.)")
    err.offered = offered
    raise err


@dataclass(frozen=True)
class BatchPlan:
    """TRL's batch for a run, in prompts and completions, and how far one pass over the curriculum goes."""

    num_processes: int
    num_generations: int
    per_device_train_batch_size: int
    gradient_accumulation_steps: int
    steps_per_generation: int
    generation_batch_size: int
    """Completions generated at once, over all processes."""
    prompts_per_generation: int
    """Distinct prompts per generation batch: the unit in which TRL's sampler walks the dataset."""
    completions_per_step: int
    """Completions per optimiser step."""
    prompts_per_step: float
    """Distinct prompts per optimiser step (an integer unless a generation batch straddles steps)."""
    num_iterations: int
    num_rows: int | None = None
    steps_per_epoch: int | None = None
    """Optimiser steps in one pass over the rows (TRL drops the incomplete last generation batch)."""
    unseen_rows: int | None = None
    """Rows at the end of the curriculum that no step reaches: ``num_rows mod prompts_per_generation``."""
    num_epochs: float | None = None
    max_steps: int | None = None
    total_steps: int | None = None
    """Optimiser steps this run takes (``max_steps``, else ``num_train_epochs`` x ``steps_per_epoch``)."""
    rows_reached: int | None = None
    """Rows of the curriculum (from the first) that this run's ``total_steps`` reach: fewer than
    ``num_rows - unseen_rows`` when ``max_steps`` (or ``num_train_epochs < 1``) stops it before one full pass."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """One line for people: the mapping from prompts to TRL's completions."""
        s = (f"{self.prompts_per_step:g} prompts x {self.num_generations} generations = "
             f"{self.completions_per_step} completions per step = {self.per_device_train_batch_size} per device x "
             f"{self.num_processes} process(es) x {self.gradient_accumulation_steps} accumulation steps")
        if self.steps_per_generation != self.gradient_accumulation_steps:
            s += (f"; generation batch {self.generation_batch_size} completions "
                  f"({self.steps_per_generation} passes)")
        if self.num_rows is not None:
            s += (f"; {self.num_rows} rows -> {self.steps_per_epoch} steps per epoch, "
                  f"{self.unseen_rows} tail row(s) unseen")
            if self.unreached_rows:
                s += f"; this run's {self.total_steps} steps reach only the first {self.rows_reached} rows"
        return s

    @property
    def unreached_rows(self) -> int:
        """Rows one pass would train on that this run stops before (``max_steps`` / ``num_train_epochs < 1``)."""
        if self.num_rows is None or self.rows_reached is None:
            return 0
        return max(self.num_rows - (self.unseen_rows or 0) - self.rows_reached, 0)


def _get(grpo: Mapping[str, Any], key: str) -> Any:
    value = grpo.get(key)
    return GRPO_DEFAULTS.get(key) if value is None else value


def plan_batches(grpo: Mapping[str, Any], *, num_processes: int, num_rows: int | None = None) -> BatchPlan:
    """Reproduce ``GRPOConfig.__post_init__``'s batch arithmetic (TRL 1.16) without importing TRL, and add the
    curriculum's view: steps per epoch and the tail rows TRL's ``RepeatSampler`` drops."""
    pd = int(_get(grpo, "per_device_train_batch_size"))
    ga = int(_get(grpo, "gradient_accumulation_steps"))
    g = int(_get(grpo, "num_generations"))
    gbs, spg = grpo.get("generation_batch_size"), grpo.get("steps_per_generation")
    if gbs is not None and spg is not None:
        raise BatchError("generation_batch_size and steps_per_generation cannot both be set (TRL)")
    if gbs is None and spg is None:
        spg = ga
        gbs = pd * num_processes * spg
    elif gbs is not None:
        if gbs % (pd * num_processes):
            raise BatchError(f"generation_batch_size ({gbs}) must be divisible by per_device_train_batch_size x "
                             f"num_processes ({pd * num_processes})")
        spg = gbs // (pd * num_processes)
    else:
        gbs = pd * num_processes * int(spg)
    spg, gbs = int(spg), int(gbs)
    if g < 2:
        raise BatchError(f"GRPO needs num_generations >= 2, got {g}")
    if gbs % g:
        raise BatchError(f"generation_batch_size ({gbs} = {pd} per device x {num_processes} processes x {spg} "
                         f"steps per generation) must be divisible by num_generations ({g})")
    completions_per_step = pd * num_processes * ga
    ppg = gbs // g
    epochs = float(_get(grpo, "num_train_epochs"))
    max_steps = int(_get(grpo, "max_steps"))
    steps = unseen = total = reached = None
    ni = int(_get(grpo, "num_iterations"))
    if num_rows is not None:
        tail = trainer_tail(num_rows, ppg)  # the arithmetic the build's manifest records as its trainer_tail
        chunks, unseen = tail["steps"], tail["unseen_rows"]  # type: ignore[index]
        # The sampler repeats each chunk steps_per_generation x num_iterations times, one dataloader batch per
        # repeat; HF's Trainer takes gradient_accumulation_steps batches per optimiser step (rounding up).
        batches = chunks * spg * ni
        steps = max(batches // ga + int(batches % ga > 0), 1) if chunks else 0
        total = max_steps if max_steps > 0 else math.ceil(epochs * steps)
        # A chunk is generated (its rows trained on) when its first batch is taken; a run shorter than one pass
        # takes total_steps x gradient_accumulation_steps batches.
        taken = min(total * ga, batches)
        reached = min(-(-taken // (spg * ni)), chunks) * ppg
    return BatchPlan(
        num_processes=num_processes, num_generations=g, per_device_train_batch_size=pd,
        gradient_accumulation_steps=ga, steps_per_generation=spg, generation_batch_size=gbs,
        prompts_per_generation=ppg, completions_per_step=completions_per_step,
        prompts_per_step=completions_per_step / g if completions_per_step % g else completions_per_step // g,
        num_iterations=ni, num_rows=num_rows, steps_per_epoch=steps,
        unseen_rows=unseen, num_epochs=epochs, max_steps=max_steps, total_steps=total, rows_reached=reached,
    )


def apply_batch(grpo: dict[str, Any], *, prompts_per_step: int | None, per_device: int | None,
                num_processes: int) -> dict[str, Any]:
    """Fill ``per_device_train_batch_size`` and ``gradient_accumulation_steps`` so that one optimiser step takes
    ``prompts_per_step`` prompts (one generation batch per step). Explicit ``grpo`` values that disagree are
    refused rather than silently overridden."""
    out = dict(grpo)
    if per_device is not None:
        if out.get("per_device_train_batch_size") not in (None, per_device):
            raise BatchError(f"batch.per_device_completions={per_device} and grpo.per_device_train_batch_size="
                             f"{out['per_device_train_batch_size']} disagree; set only one")
        out["per_device_train_batch_size"] = per_device
    if prompts_per_step is None:
        return out
    g = int(_get(out, "num_generations"))
    pd = int(_get(out, "per_device_train_batch_size"))
    ga = derive_accumulation(prompts_per_step=prompts_per_step, num_generations=g, per_device=pd,
                             num_processes=num_processes)
    if out.get("gradient_accumulation_steps") not in (None, ga):
        raise BatchError(
            f"grpo.gradient_accumulation_steps={out['gradient_accumulation_steps']} gives "
            f"{pd * num_processes * out['gradient_accumulation_steps'] / g:g} prompts per step, but "
            f"batch.prompts_per_step={prompts_per_step} needs {ga} on {num_processes} process(es); drop one of "
            f"them (batch.prompts_per_step=null keeps the grpo values)")
    out["gradient_accumulation_steps"] = ga
    return out
