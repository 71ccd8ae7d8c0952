"""Resuming a curriculum run from a checkpoint: where the data continues, checked against the rows the checkpoint
trained, before anything is generated.

HF's Trainer resumes by skipping ``(global_step mod steps_per_epoch) x gradient_accumulation_steps`` dataloader
batches of the *new* run's batch, whatever the checkpoint's batch was; TRL restarts its own pass counter, so a
resume inside a generation batch generates that batch again. A resume continues exactly only when the new batch
lands on the checkpoint's ``rows_done`` at the start of a generation batch; anything else skips or repeats rows,
and is refused (or, under the warn policy, said and recorded out of order).

>>> saved = {"global_step": 2, "rows_done": 4, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 1,
...          "steps_per_generation": 1, "num_iterations": 1, "prompts_per_step": 2, "num_processes": 1}
>>> plan = {"num_rows": 16, "unseen_rows": 0, "prompts_per_generation": 4, "steps_per_epoch": 4,
...         "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1, "steps_per_generation": 1,
...         "num_iterations": 1, "num_generations": 2, "num_processes": 1, "prompts_per_step": 4}
>>> point = resume_point(saved, plan)
>>> point.checkpoint_rows, point.data_rows, point.phase
(4, 8, 0)
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import CurriculumOrderError
from ._ledger import CHECKPOINT_PLAN, StepLayout
from ._order import RECIPE, Vocab, index_span

log = logging.getLogger(__name__)

#: The batch settings a checkpoint's plan records, compared with the resumed run's.
BATCH_KEYS = ("num_processes", "per_device_train_batch_size", "gradient_accumulation_steps", "steps_per_generation",
              "num_iterations", "num_generations")


@dataclass(frozen=True)
class ResumePoint:
    """Where a resumed run's data continues, and where the checkpoint's curriculum had got to (rows of the
    curriculum from its first, over epochs)."""

    global_step: int
    checkpoint_rows: int
    """Rows the checkpoint trained (its ``rows_done``)."""
    data_rows: int
    """Rows before the one the new run's data continues at (HF's skip, with the new batch)."""
    phase: int
    """Micro-batches into a generation batch where the data continues (0: at its start)."""
    passes: int
    """Micro-batches per generation batch (``steps_per_generation x num_iterations``) of the new run."""
    usable: int
    """Rows in one pass of the new run."""

    @property
    def exact(self) -> bool:
        return self.phase == 0 and self.data_rows == self.checkpoint_rows


def read_checkpoint_plan(checkpoint: str | Path) -> dict[str, Any] | None:
    """A checkpoint's ``curriculum_plan.json`` (None when it has none: a checkpoint of another trainer)."""
    p = Path(checkpoint) / CHECKPOINT_PLAN
    if not p.exists():
        return None
    try:
        saved = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise CurriculumOrderError(f"{p}: cannot be read ({e}): the rows the checkpoint trained are unknown",
                                   hint="resume from another checkpoint, or start a fresh run") from None
    return saved if isinstance(saved, dict) else None


def resume_point(saved: Mapping[str, Any], plan: Mapping[str, Any], *, ignore_data_skip: bool = False
                 ) -> ResumePoint | None:
    """Where the new run (``plan``: its batch plan) continues after the checkpoint (``saved``: its
    ``curriculum_plan.json``); None when either lacks the numbers."""
    layout = StepLayout.from_plan(plan)
    if layout is None or "global_step" not in saved:
        return None
    step = int(saved["global_step"])
    usable = int(plan["num_rows"]) - int(plan.get("unseen_rows") or 0)
    micro = layout.resume_micro(step, ignore_data_skip=ignore_data_skip)
    passes = layout.steps_per_generation * layout.num_iterations
    chunk, phase = divmod(micro, passes)
    epoch = step // layout.steps_per_epoch if layout.steps_per_epoch else 0
    data_rows = epoch * usable + chunk * layout.prompts_per_generation
    done = saved.get("rows_done")
    return ResumePoint(global_step=step, checkpoint_rows=int(done) if done is not None else data_rows,
                       data_rows=data_rows, phase=phase, passes=passes, usable=usable)


def _rows(first: int, last: int, usable: int, order: Sequence[Any] | None) -> str:
    """Rows ``first..last`` (positions in the curriculum, over epochs) and their ``curriculum_index``."""
    text = f"row {first}" if first == last else f"rows {first}..{last}"
    if order and usable:
        text += f" (curriculum_index {index_span([order[p % usable] for p in range(first, last + 1)])})"
    return text


def _num(value: Any) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) else "?"


def _batch(values: Mapping[str, Any], keys: Sequence[str], vocab: Vocab) -> str:
    """The batch settings ``keys`` of a plan, as the caller sets them."""
    if vocab.recipe:
        names = {"per_device_train_batch_size": "batch.per_device_completions",
                 "num_processes": "batch.num_processes"}
        parts = []
        for k in keys:
            if k == "gradient_accumulation_steps" and values.get("prompts_per_step") is not None:
                parts.append(f"batch.prompts_per_step={values['prompts_per_step']:g}")
            else:
                parts.append(f"{names.get(k, 'grpo.' + k)}={values.get(k)}")
        return ", ".join(parts)
    return "GRPOConfig(" + ", ".join(f"{k}={values.get(k)!r}" for k in keys if k != "num_processes") + ")" + (
        f" on {values.get('num_processes')} process(es)" if "num_processes" in keys else "")


def check_resume(checkpoint: str | Path, args: Any, plan: Mapping[str, Any], *, policy: str,
                 order: Sequence[Any] | None = None, vocab: Vocab = RECIPE, hint: str | None = None
                 ) -> ResumePoint | None:
    """Check, before anything is generated, that resuming ``checkpoint`` with ``args`` (the new ``GRPOConfig``)
    and ``plan`` (its batch plan) continues at the checkpoint's next row: say so in one line when it does; refuse
    (``policy="refuse"``, :class:`CurriculumOrderError`) or warn when it would skip or repeat rows, with the
    numbers (the checkpoint's ``rows_done`` and batch, the new batch, the rows skipped or repeated) and the setting
    to change. ``order`` is the curriculum's ``curriculum_index`` in order (names the rows)."""
    saved = read_checkpoint_plan(checkpoint)
    name = Path(checkpoint).name
    if saved is None:
        log.warning("%s has no %s: cannot check that the run being resumed trained on the same curriculum rows",
                    checkpoint, CHECKPOINT_PLAN)
        return None
    skip_data = bool(getattr(args, "ignore_data_skip", False))
    point = resume_point(saved, plan, ignore_data_skip=skip_data)
    if point is None:
        return None
    changed = [k for k in BATCH_KEYS if saved.get(k) is not None and plan.get(k) is not None and saved[k] != plan[k]]
    steps = f"{point.global_step} steps of {_num(saved.get('prompts_per_step'))} prompts"
    was = (f"{name} trained {point.checkpoint_rows} rows (rows_done {point.checkpoint_rows}: {steps}, "
           f"{_batch(saved, changed or BATCH_KEYS[1:3], vocab)})")
    now = (f"with {_batch(plan, changed, vocab)} ({_num(plan.get('prompts_per_step'))} prompts per step)"
           if changed else "with the same batch")
    usable, done = point.usable, point.checkpoint_rows
    if point.exact:
        if done:
            log.info("resuming %s: %s; %sthe run continues exactly at %s", name, was, f"{now}: " if changed else "",
                     _rows(done, done, usable, order))
        return point
    if skip_data:
        problem = (f"{vocab.setting('ignore_data_skip', True)} restarts the data at the first row of the epoch: "
                   f"{was}, and the run would train {_rows(point.data_rows, done - 1, usable, order)} again; set "
                   f"{vocab.setting('ignore_data_skip', False)}")
    elif point.phase:
        aligned = _aligned_step(point.global_step, args, plan)
        problem = (f"{was}; {now} the data resumes {point.phase} of the {point.passes} passes into a generation "
                   f"batch, and TRL generates that batch again on resume: "
                   f"{_rows(point.data_rows, point.data_rows + int(plan['prompts_per_generation']) - 1, usable, order)}"
                   f" would be trained again, out of step with the curriculum; resume from a checkpoint at a whole "
                   f"generation batch" + (f" ({Path(checkpoint).parent / f'checkpoint-{aligned}'}, or set "
                                          f"{vocab.setting('save_steps')} to a multiple of its step)"
                                          if aligned else ""))
    else:
        keep = _batch(saved, changed, vocab) if changed else "the checkpoint's batch"
        if point.data_rows > done:
            what = f"skip {_rows(done, point.data_rows - 1, usable, order)}: they would never be trained"
        else:
            what = f"train {_rows(point.data_rows, done - 1, usable, order)} again"
        problem = (f"{was}; {now} the data would continue at row {point.data_rows}, so the run would {what}. "
                   f"Resume with {keep}, or start a fresh run with the new batch")
    msg = f"resuming {checkpoint} would not continue at the checkpoint's next row: {problem}"
    if policy == "refuse":
        raise CurriculumOrderError(msg, hint=hint or f"{vocab.warn} resumes anyway (the steps are recorded out of "
                                                     "order)")
    log.warning("CURRICULUM ORDER: %s", msg)
    return point


def _aligned_step(step: int, args: Any, plan: Mapping[str, Any]) -> int | None:
    """The latest step at or before ``step`` whose data resumes at the start of a generation batch."""
    layout = StepLayout.from_plan(plan)
    if layout is None:
        return None
    passes = layout.steps_per_generation * layout.num_iterations
    for s in range(step, 0, -1):
        if layout.resume_micro(s) % passes == 0:
            return s
    return None
