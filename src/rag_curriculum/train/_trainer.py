"""The toolkit's ``GRPOTrainer`` and its callback, below the run (:mod:`._trl`) and the hooks that subclass the
trainer (:mod:`.adaptive`, :mod:`.dynamic`): TRL's ``GRPOTrainer`` with the rows of each generation batch handed
to a :class:`~rag_curriculum.train._progress.StepRecorder`, and the callback that checks and logs them per step and
saves the batch plan beside every checkpoint.

transformers and TRL are imported inside the functions only.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .._plumbing import mask_secrets
from ..shards import write_json
from ._progress import ROW_KEYS, StepRecorder, distinct_rows, row_stats

#: The batch plan saved beside every checkpoint (a resume checks it continues the same curriculum).
CHECKPOINT_PLAN = "curriculum_plan.json"


def rows_done(global_step: int, args: Any, prompts_per_generation: int) -> int:
    """Rows of the curriculum trained after ``global_step`` optimiser steps (where a resumed run continues):
    HF's Trainer skips ``global_step x gradient_accumulation_steps`` dataloader batches, and TRL's sampler yields
    each chunk of ``prompts_per_generation`` rows ``steps_per_generation x num_iterations`` times."""
    per_chunk = args.steps_per_generation * args.num_iterations
    return global_step * args.gradient_accumulation_steps // per_chunk * prompts_per_generation


@functools.cache
def curriculum_classes() -> tuple[type, type]:
    """TRL's GRPOTrainer with a hook that records the rows of each generation batch, and the callback that checks
    and logs them per step (made on first use, so importing this module imports neither)."""
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    class CurriculumGRPOTrainer(GRPOTrainer):
        """TRL's ``GRPOTrainer``; also hands the rows of every training generation batch (all processes, sampler
        order) to a :class:`StepRecorder` and logs their level and hops as ``curriculum/*`` metrics."""

        recorder: StepRecorder | None = None

        current_inputs: list | None = None  # the rows of the batch being generated (a rollout_func reads them)

        def _generate_and_score_completions(self, inputs):
            self.current_inputs = inputs
            if self.model.training and self.recorder is not None:
                rows = [{k: x.get(k) for k in ROW_KEYS if k in x} for x in inputs]
                if self.accelerator.num_processes > 1:
                    from accelerate.utils import gather_object

                    rows = gather_object(rows)
                self.recorder.add(rows)
                for key, value in row_stats(distinct_rows(rows)).items():
                    self._metrics["train"][f"curriculum/{key}"].append(value)
            return super()._generate_and_score_completions(inputs)

    class CurriculumCallback(TrainerCallback):
        """Per optimiser step: check the rows against the curriculum and write them to ``curriculum_steps.jsonl``;
        per checkpoint: save the batch plan beside it, so a resume can check it continues the same curriculum."""

        def __init__(self, recorder: StepRecorder, plan: Mapping[str, Any]) -> None:
            self.recorder = recorder
            self.plan = dict(plan)

        def on_train_begin(self, args, state, control, **kwargs):
            self.recorder.start(rows_done(state.global_step, args, self.plan["prompts_per_generation"]))

        def on_step_end(self, args, state, control, **kwargs):
            self.recorder.end_step(state.global_step)

        def on_save(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                ckpt = Path(args.output_dir) / f"checkpoint-{state.global_step}"
                if ckpt.is_dir():
                    write_json(ckpt / CHECKPOINT_PLAN, mask_secrets({
                        **self.plan, "global_step": state.global_step,
                        "rows_done": rows_done(state.global_step, args, self.plan["prompts_per_generation"])}))

    return CurriculumGRPOTrainer, CurriculumCallback
