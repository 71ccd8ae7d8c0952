"""The toolkit's ``GRPOTrainer`` and its callback: the one module that overrides TRL's private methods and reads
or builds its private structures.

TRL gives a run public hooks for what it hands the trainer (reward functions, ``rollout_func``,
``environment_factory``, callbacks), and the toolkit uses them wherever they reach: the rewards, the search agents'
rollouts and tools, and everything a checkpoint keeps (:class:`CurriculumCallback`, through transformers'
``on_train_begin`` / ``on_step_end`` / ``on_save``). Two needs of a curriculum no public hook meets, so
:class:`CurriculumGRPOTrainer` overrides two private methods, each a few lines that hand the work to the hooks a run
sets on the trainer (``recorder``: the rows of each step, :mod:`._ledger`; ``adaptive``: the levels of an
adaptive curriculum, :mod:`.adaptive` or :mod:`._agent_adaptive`; ``dynamic``: dynamic sampling, :mod:`._dynamic`):

* ``_generate_and_score_completions(inputs)``: the rows of a generation batch, before TRL generates them;
* ``_calculate_rewards(inputs, prompts, completions, completion_ids_list)``: the batch's rewards of every reward
  function, gathered from every process.

It also replaces TRL's public ``create_model_card`` (called at every checkpoint) with the run's own card
(``README.md``: base model, data, recipe, curriculum, steps; :func:`~rag_curriculum.train._recipes.model_card`).

On the CPU it also narrows what TRL's fused LM head scores (:func:`score_completions_only_on_cpu`): without Triton,
TRL 1.16 projects *every* position of a batch through the vocabulary (to keep tile shapes fixed for compiled
kernels on devices such as Neuron) and masks the prompt's positions out afterwards; on the CPU, which compiles
nothing, only the completion's positions are scored, as TRL does on a GPU. The completion's log-probabilities are
the same (tested); for a 262k-token vocabulary (Gemma 3 270M) with 550-token prompts and 24-token completions that
is about 20 times fewer positions through the output layer, forward and backward.

Besides them the trainer reads TRL's ``_metrics["train"]`` (the per-step metric lists TRL logs; a reward function's
``log_metric`` logs one function's values, not a batch's level or refills) and the public attributes
``accelerator``, ``num_generations``, ``reward_weights``, ``pad_to_multiple_of``, ``processing_class``,
``train_dataset`` and ``state``; and, for dynamic sampling, it builds the batch dictionary that
``_generate_and_score_completions`` returns from the groups of several generation calls (:func:`merge_outputs`,
:meth:`CurriculumGRPOTrainer.merge_generation_outputs`: prompts left-padded, completions right-padded, the loss
mask and advantage of a masked group zeroed, ``num_items_in_batch`` counted as TRL counts it).

TRL versions checked: 1.0.0 (the floor of the pin ``trl>=1.0,<2``; its source read) and 1.16.0 (the newest 1.x
release on PyPI, which the tests run on): both define the two methods with these signatures,
``_generate_and_score_completions`` calls ``_calculate_rewards`` once, which returns the rewards gathered from every
process, its output holds only tensors of one or two dimensions besides ``num_items_in_batch`` (a multimodal or
non-tensor field is refused by :func:`merge_outputs`), and ``_metrics`` is a dict of ``defaultdict(list)`` by mode.
``TIERS="trl-newest trl-oldest" bash scripts/test.sh`` runs the trainer's tests against the newest and the oldest TRL
the pin allows (docs/development.md).

TRL and transformers are imported at the top of this module: :func:`rag_curriculum.train.train` imports it inside
the function, so importing the package stays light.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from transformers import TrainerCallback
from trl import GRPOTrainer

from .._plumbing import atomic_write_bytes, mask_secrets
from ..errors import ConfigError
from ..prompts import completion_prompt
from ..shards import read_manifest, write_json
from . import _dynamic as dyn
from ._batching import plan_batches
from ._dynamic import dynamic_batch
from ._informative import STEP_METRICS_FILE, InformativeCheck, informative_callback, resolve_profile
from ._ledger import CHECKPOINT_PLAN, ROW_KEYS, StepLayout, StepRecorder, rows_done
from ._order import (
    TRAINER,
    check_index_order,
    curriculum_order,
    enforce,
    order_issues,
    report_tail,
    tail_rows,
)
from ._recipes import CARD_FILE
from ._resume import check_resume, read_checkpoint_plan, resume_point
from ._rewards import total_rewards
from .adaptive import LEVELS_FILE, feed_back, make_hook

__all__ = ["CurriculumCallback", "CurriculumGRPOTrainer", "merge_outputs"]

log = logging.getLogger(__name__)

#: The column the trainer adds to TRL's batch: each completion's serial number, which TRL shuffles and slices with
#: the completions, so the loss hands back exactly the rows it computed (:meth:`StepRecorder.trained`).
ROW_SERIAL = "curriculum_serial"


class CurriculumGRPOTrainer(GRPOTrainer):
    """TRL's ``GRPOTrainer`` that trains a curriculum in its order, for any training script: a drop-in for
    ``GRPOTrainer`` (the same arguments), with the curriculum's shards as ``train_dataset``.

    What it adds, whatever the ``GRPOConfig``:

    * **The order is kept.** ``shuffle_dataset=True`` (TRL's default) would shuffle the rows; it is switched off, said
      once in the log. Rows whose ``curriculum_index`` steps back are refused before training
      (``order_policy="refuse"``; ``"warn"`` logs and goes on).
    * **What the run will not reach is said before step 1**: the tail TRL's sampler drops (rows past the last whole
      generation batch) and the rows ``max_steps`` stops short of, with their ``curriculum_index`` range and levels.
    * **Every step is checked and shown**: the rows each optimiser step trained on, read from the completions its
      loss computed, are compared with the curriculum's rows for that step (``recorder.records``; written to
      ``steps_file`` as JSON lines when given) and logged as ``curriculum/*`` metrics (``curriculum/level_mean``,
      ``curriculum/in_order``, ...), beside TRL's. A generation batch trained over several optimiser steps
      (``steps_per_generation``), whose rows TRL shuffles across them, is refused before step 1.
    * **A resume is checked before anything is generated** (:meth:`train`): it continues exactly at the checkpoint's
      next row, said in one line, or it is refused with the numbers (the checkpoint's ``rows_done``, the new batch,
      the rows it would skip or repeat); a checkpoint keeps the steps recorded so far, so ``recorder.records``
      holds the whole run.
    * **Adaptive levels** (``adaptive``: an :class:`~rag_curriculum.train.AdaptiveConfig` whose ``controller`` is set,
      with ``shards``, the folder of an adaptive build): each generation batch is rendered at the controller's
      level, and the scored batch moves it.
    * **Online filtering** (``dynamic``: a :class:`~rag_curriculum.train.DynamicConfig` with ``enabled=True``): DAPO's
      dynamic sampling, groups that teach nothing dropped and the batch refilled with the next rows in order.
    * **Base models**: a model without a chat template is trained on the completion-style prompts
      (:func:`rag_curriculum.prompts.completion_prompt`) and rewarded on its whole response.

    Args:
        *args: what ``trl.GRPOTrainer`` takes, by position (``model``, ``reward_funcs``, ...).
        **kwargs: what ``trl.GRPOTrainer`` takes, by name (``args``, ``train_dataset``, ``callbacks``, ...).
        shards: the shard folder ``train_dataset`` was loaded from (needed by ``adaptive``).
        adaptive: an ``AdaptiveConfig`` (or None).
        dynamic: a ``DynamicConfig`` (or None).
        order_policy: ``"refuse"`` or ``"warn"``: what an out-of-order dataset, setting, resume or step does
            (``"warn"`` trains on, and records, counts and warns every step out of order).
        steps_file: where the record of every step goes (``curriculum_steps.jsonl``), or None; beside it,
            ``step_metrics.jsonl``: each step's informative fraction, reward, reward_std and grad_norm.
        profile: a level profile folder (``curriculum profile --out``) to check each step's informative fraction
            against (None: the one the shards' manifest records, with ``shards``); its summary,
            ``informative.json``, is written into ``output_dir`` at the end.

    Raises:
        CurriculumOrderError: rows or settings out of curriculum order (``order_policy="refuse"``); from
            :meth:`train`, a resume that would skip or repeat rows.
        ConfigError: ``adaptive`` without ``shards``, or on shards that are not an adaptive build.

    Examples:
        ```python
        from datasets import load_dataset
        from trl import GRPOConfig
        from rag_curriculum.rewards import RagRlReward
        from rag_curriculum.train import CurriculumGRPOTrainer

        rows = load_dataset("outputs/musique-min-max", split="train")  # the shards, in curriculum order
        trainer = CurriculumGRPOTrainer(model="Qwen/Qwen2.5-0.5B-Instruct", reward_funcs=[RagRlReward()],
                                        args=GRPOConfig(output_dir="out", num_generations=4), train_dataset=rows)
        trainer.train()
        trainer.recorder.records  # the rows of every step, checked against the curriculum
        ```
    """

    recorder: StepRecorder | None = None
    adaptive: Any = None  # an AdaptiveHook or a SearchCurriculumHook
    dynamic: Any = None  # a DynamicHook
    current_inputs: list | None = None  # the rows of the batch being generated (the search rollout reads them)
    scored: tuple | None = None  # (rewards per function, rows, completions) of the last batch scored
    card: Any = None  # the run's model card: a callable, the optimiser step -> README.md's text
    informative: Any = None  # an InformativeCheck: each group's informative or not, for the steps' check
    scoring_rows: list | None = None  # the rows (every process's) of the batch being scored
    completion_prompts: bool = False  # a base model: prompts rendered as completion text (prompts.completion_prompt)

    def __init__(self, *args: Any, shards: str | Path | None = None, adaptive: Any = None, dynamic: Any = None,
                 order_policy: str = "refuse", steps_file: str | Path | None = None,
                 recorder: StepRecorder | None = None, profile: str | Path | None = None, **kwargs: Any) -> None:
        score_completions_only_on_cpu()
        super().__init__(*args, **kwargs)
        if self.shuffle_dataset:
            log.warning("GRPOConfig(shuffle_dataset=True) would shuffle the curriculum: ignored, the rows are trained "
                        "in curriculum order")
            self.shuffle_dataset = False
        self.completion_prompts = not getattr(self.processing_class, "chat_template", None) and not getattr(
            getattr(self.processing_class, "tokenizer", None), "chat_template", None)
        self.curriculum_callback: CurriculumCallback | None = None
        self.order_policy = order_policy
        if recorder is not None:  # `curriculum train` wires the rest itself (train._trl.train)
            self.recorder = recorder
        else:
            self._wire(shards, adaptive, dynamic, order_policy, steps_file, profile)
        if self.recorder is not None:
            self.recorder.sink = self._log_train  # each step's curriculum/* metrics, from the rows its loss saw

    def _wire(self, shards: Any, adaptive: Any, dynamic: Any, order_policy: str, steps_file: Any,
              profile: Any = None) -> None:
        """The order checks, the tail, the recorder, the hooks and the callbacks of a trainer made in a user's
        script (:class:`CurriculumGRPOTrainer`)."""
        ds = self.train_dataset
        columns = getattr(ds, "column_names", None) or []
        if ds is None or not hasattr(ds, "__len__"):
            log.warning("the curriculum trainer needs a map-style dataset (the shards loaded with load_dataset): an "
                        "iterable one is trained in its stream order, unchecked")
            return
        indices = list(ds["curriculum_index"]) if "curriculum_index" in columns else None
        levels = list(ds["level"]) if "level" in columns else None
        if indices is None:
            log.warning("train_dataset has no curriculum_index column: its order is trained as given, unchecked (load "
                        "the shards of `curriculum build` to have it checked)")
        elif (problem := check_index_order(indices)) is not None:
            enforce([problem], order_policy, TRAINER)
        args = self.args
        batch = {k: getattr(args, k) for k in ("per_device_train_batch_size", "gradient_accumulation_steps",
                                               "num_generations", "steps_per_generation", "num_train_epochs",
                                               "max_steps", "num_iterations")}
        plan = plan_batches(batch, num_processes=self.accelerator.num_processes, num_rows=len(ds))
        settings = {**batch, "shuffle_dataset": False,  # switched off above
                    **{k: getattr(args, k, None) for k in ("group_by_length", "train_sampling_strategy",
                                                           "accelerator_config")}}
        enforce(order_issues({k: v for k, v in settings.items() if v is not None}, plan, vocab=TRAINER),
                order_policy, TRAINER)
        report_tail(tail_rows(plan, indices, levels), vocab=TRAINER)  # said before step 1
        main = self.accelerator.is_main_process
        out = Path(args.output_dir)
        hooks: list[Any] = []
        if adaptive is not None and getattr(adaptive, "controller", None):
            if shards is None:
                raise ConfigError("adaptive levels need shards=: the folder of the adaptive build train_dataset was "
                                  "loaded from (its manifest says how to render a row at each level)")
            data = SimpleNamespace(shards=str(shards), profile=str(profile) if profile else None)
            self.adaptive = make_hook(SimpleNamespace(adaptive=adaptive, data=data),
                                      read_manifest(shards), num_generations=self.num_generations, seed=args.seed,
                                      levels_file=out / LEVELS_FILE if main else None)
            hooks.append(self.adaptive)
        if dynamic is not None and getattr(dynamic, "enabled", False):
            if self.accelerator.num_processes > 1:
                raise ConfigError("dynamic sampling runs on one training process with this trainer",
                                  hint="train multi-GPU with verl's algorithm.filter_groups (docs/training.md)")
            names = list(self.reward_func_names)
            self.dynamic = dyn.make_hook(SimpleNamespace(dynamic=dynamic, rewards=[SimpleNamespace(name=n)
                                                                                   for n in names]),
                                         num_rows=len(ds), num_generations=self.num_generations,
                                         rows_file=out / dyn.ROWS_FILE if main else None)
            hooks.append(self.dynamic)
            self.add_callback(dyn.callback_class()(self.dynamic, plan.to_dict()))
        self.recorder = StepRecorder(curriculum_order(indices) if self.dynamic is None and indices else None,
                                     usable=len(ds) - (plan.unseen_rows or 0), policy=order_policy,
                                     path=steps_file if main else None, layout=StepLayout.from_plan(plan.to_dict()),
                                     words=TRAINER)
        self.curriculum_callback = CurriculumCallback(self.recorder, plan.to_dict(), hooks=hooks)
        self.add_callback(self.curriculum_callback)
        prof, source = resolve_profile(str(profile) if profile else None, shards or ".",
                                       read_manifest(shards) if shards is not None and profile is None else {})
        if prof is not None or steps_file is not None:  # what each step felt, beside the ledger
            metrics = Path(steps_file).parent / STEP_METRICS_FILE if steps_file is not None and main else None
            self.informative = InformativeCheck(prof, self.num_generations, path=metrics, source=source)
            self.recorder.check = self.informative
            self.add_callback(informative_callback(self.informative))

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any) -> Any:
        """TRL's ``train``; a resume is first checked against the checkpoint (before anything is generated): it
        continues exactly at the checkpoint's next row (said in one line), or it is refused under
        ``order_policy="refuse"`` with the numbers (the checkpoint's ``rows_done``, the new batch, the rows it
        would skip or repeat) and the setting to change."""
        callback = self.curriculum_callback
        check = self.informative
        if (check is not None and check.path is not None and resume_from_checkpoint in (None, False)
                and callback is not None and check.path.exists()):
            check.path.unlink()  # a fresh run: an earlier run's lines go (a resumed one reads them back)
        if callback is not None and resume_from_checkpoint not in (None, False):
            path = resume_from_checkpoint
            if path is True:
                from transformers.trainer_utils import get_last_checkpoint

                path = get_last_checkpoint(self.args.output_dir)
            if path:
                check_resume(path, self.args, callback.plan, policy=self.order_policy, order=self.recorder.order,
                             vocab=TRAINER)
                callback.resume = str(path)
        output = super().train(resume_from_checkpoint, *args, **kwargs)
        if self.informative is not None and self.is_world_process_zero():
            self.informative.finish(self.args.output_dir)
        return output

    def create_model_card(self, model_name=None, dataset_name=None, tags=None, **kwargs):
        # TRL writes its generic card into output_dir at every checkpoint ("a fine-tuned version of [None]" for a local
        # model, nothing of the curriculum); the toolkit's card (train._recipes.model_card) replaces it
        if self.card is None:
            return super().create_model_card(model_name=model_name, dataset_name=dataset_name, tags=tags, **kwargs)
        if self.is_world_process_zero():
            out = Path(self.args.output_dir)
            out.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(out / CARD_FILE, self.card(self.state.global_step).encode("utf-8"))
        return None

    def _generate_and_score_completions(self, inputs):
        # No public hook sees a generation batch's rows before TRL generates them (``rollout_func`` gets the prompts
        # only, and replaces generation), and none lets a batch be generated again: the curriculum records the rows,
        # renders them at the controller's levels, and dynamic sampling refills the batch.
        if self.dynamic is not None and self.model.training:
            batch, metrics = dynamic_batch(self, self.dynamic, len(inputs) // self.num_generations)
            self._log_train(metrics)
            return batch
        return self.generate_and_score(inputs)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        # No public hook sees a batch's rewards: each reward function sees its own scores of this process's
        # completions; the adaptive controller and dynamic sampling read every function's, from every process.
        if self.completion_prompts:  # a base model's response begins with the prompt's response prefix
            completions = [x.get(RESPONSE_PREFIX, "") + c for x, c in zip(inputs, completions, strict=True)]
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        if self.model.training and self.informative is not None and self.scoring_rows is not None:
            self.informative.scored(self.scoring_rows, total_rewards(rewards_per_func, self.reward_weights).tolist())
        if self.model.training:
            if self.adaptive is not None:
                metrics = feed_back(self, self.adaptive, rewards_per_func, inputs, prompts, completions)
                if self.recorder is not None:  # the recorder logs the level shown from the same rows
                    metrics.pop("curriculum/level_mean", None)
                self._log_train(metrics)
            if self.dynamic is not None:
                self.scored = (rewards_per_func.detach(), list(inputs), list(completions))
        return rewards_per_func

    def generate_and_score(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """TRL's generation and scoring of ``inputs`` (this process's rows, each prompt ``num_generations`` times in
        a row), after the adaptive hook renders them at its levels; a training batch's rows are recorded."""
        training = self.model.training
        if self.adaptive is not None and training:
            inputs = self.adaptive.render(inputs)
        if self.completion_prompts:
            inputs = [as_completion_row(x) for x in inputs]
        self.current_inputs = inputs
        first = None
        if training and self.recorder is not None:
            rows = [{k: x.get(k) for k in ROW_KEYS if k in x} for x in inputs]
            if self.accelerator.num_processes > 1:
                from accelerate.utils import gather_object

                rows = gather_object(rows)
            first = self.recorder.generated(rows) + self.accelerator.process_index * len(inputs)
            self.scoring_rows = rows
        output = super()._generate_and_score_completions(inputs)
        if first is not None:  # each completion's serial: TRL shuffles and slices it with the completions
            device = output["advantages"].device
            output[ROW_SERIAL] = torch.arange(first, first + len(inputs), dtype=torch.long, device=device)
        return output

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        # The completions this micro-batch's loss computes (every process's): the ledger of what trained.
        serials = inputs.get(ROW_SERIAL) if isinstance(inputs, Mapping) else None
        if serials is not None and self.recorder is not None and self.model.training:
            if self.accelerator.num_processes > 1:
                serials = self.accelerator.gather(serials)
            self.recorder.trained(serials.tolist())
        return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                    num_items_in_batch=num_items_in_batch)

    def merge_generation_outputs(self, selections: Sequence[tuple[Mapping[str, Any], Sequence[int]]], *,
                                 masked: Sequence[bool], extra: Mapping[str, Sequence[int]] | None = None
                                 ) -> dict[str, Any]:
        """One output of ``_generate_and_score_completions`` (TRL's batch dictionary) from completions chosen from
        several (:func:`merge_outputs`, with this trainer's pad token and padding multiple), ``extra`` integer
        columns added per completion (dynamic sampling's dataset positions), and ``num_items_in_batch`` counted
        from the loss mask over every process, as TRL counts it."""
        merged = merge_outputs(selections, pad_token_id=_pad_token_id(self), pad_to_multiple_of=self.pad_to_multiple_of,
                               masked=masked)
        for key, values in (extra or {}).items():
            merged[key] = torch.tensor(list(values), dtype=torch.long, device=merged["advantages"].device)
        loss_mask = merged["completion_mask"]
        if "tool_mask" in merged:
            loss_mask = loss_mask * merged["tool_mask"]
        merged["num_items_in_batch"] = self.accelerator.gather(loss_mask.sum()).sum()
        return merged

    def _log_train(self, metrics: Mapping[str, float]) -> None:
        for name, value in metrics.items():
            self._metrics["train"][name].append(value)


def score_completions_only_on_cpu() -> bool:
    """Make TRL's fused LM head score only the completion's positions on the CPU (see the module docstring): its
    ``trl.trainer.utils`` decides that with ``_use_triton(device)``, which this wraps to say yes for the CPU too (the
    kernel itself still takes its PyTorch path there: the kernel module keeps its own ``_use_triton``). Once per
    process; False when this TRL has no such switch (an older or newer layout: nothing is changed)."""
    try:
        import trl.trainer.utils as trl_utils
    except ImportError:  # pragma: no cover - TRL is a dependency of this module
        return False
    decide = getattr(trl_utils, "_use_triton", None)
    if decide is None:
        return False
    if getattr(decide, "completions_only_on_cpu", False):
        return True

    def compact(device: Any) -> bool:
        return getattr(device, "type", None) == "cpu" or bool(decide(device))

    compact.completions_only_on_cpu = True  # type: ignore[attr-defined]
    trl_utils._use_triton = compact
    return True


#: The column a base model's rows carry while they are generated: the response prefix their prompt ends with.
RESPONSE_PREFIX = "response_prefix"


def as_completion_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row for a base model: its chat prompt rendered as completion text (TRL then tokenizes it with the
    tokenizer's own BOS and generates after it), with the response prefix that text ends with."""
    prompt = row["prompt"]
    if isinstance(prompt, str):
        return dict(row)
    p = completion_prompt(prompt)
    return {**row, "prompt": p.text, RESPONSE_PREFIX: p.prefix}


def _pad_token_id(trainer: Any) -> int:
    """The pad token of the trainer's tokenizer (``processing_class``, or a processor's ``tokenizer``)."""
    pc = trainer.processing_class
    return int(getattr(pc, "tokenizer", pc).pad_token_id)


# --- TRL's generation outputs, merged (dynamic sampling) -------------------------------------------------------
_LEFT = {"prompt_ids", "prompt_mask"}
_PAD_ONE = {"tool_mask", "importance_sampling_ratio"}


def merge_outputs(selections: Sequence[tuple[Mapping[str, Any], Sequence[int]]], *, pad_token_id: int,
                  pad_to_multiple_of: int | None = None, masked: Sequence[bool] | None = None) -> dict[str, Any]:
    """One TRL generation output from completions chosen from several: ``selections`` are (an output of
    ``_generate_and_score_completions``, the indices of the completions taken from it), in batch order (an output
    may appear more than once). Prompt tensors are left-padded, completion tensors right-padded to the longest;
    ``masked[i]`` zeroes completion i's loss mask and advantage. ``num_items_in_batch`` is left to the caller (a
    count over all processes: :meth:`CurriculumGRPOTrainer.merge_generation_outputs`).

    >>> import torch
    >>> a = {"prompt_ids": torch.tensor([[5, 6], [7, 8]]), "prompt_mask": torch.ones(2, 2, dtype=torch.long),
    ...      "completion_ids": torch.tensor([[1], [2]]), "completion_mask": torch.ones(2, 1, dtype=torch.long),
    ...      "advantages": torch.tensor([1.0, -1.0]), "num_items_in_batch": torch.tensor(2)}
    >>> b = {"prompt_ids": torch.tensor([[9]]), "prompt_mask": torch.ones(1, 1, dtype=torch.long),
    ...      "completion_ids": torch.tensor([[3, 4]]), "completion_mask": torch.ones(1, 2, dtype=torch.long),
    ...      "advantages": torch.tensor([0.5]), "num_items_in_batch": torch.tensor(2)}
    >>> m = merge_outputs([(a, [1]), (b, [0])], pad_token_id=0, masked=[False, True])
    >>> m["prompt_ids"].tolist(), m["completion_ids"].tolist(), m["completion_mask"].tolist(), m["advantages"].tolist()
    ([[7, 8], [0, 9]], [[2, 0], [3, 4]], [[1, 0], [0, 0]], [-1.0, 0.0])
    """
    keys = [k for k in selections[0][0] if k != "num_items_in_batch"]
    for out, _ in selections[1:]:
        if [k for k in out if k != "num_items_in_batch"] != keys:
            raise ConfigError("dynamic sampling: two generation batches returned different fields "
                              f"({keys} and {[k for k in out if k != 'num_items_in_batch']})")
    merged: dict[str, Any] = {}
    for key in keys:
        parts = []
        for out, idx in selections:
            value = out[key]
            if not isinstance(value, torch.Tensor) or value.ndim not in (1, 2):
                raise ConfigError(f"dynamic sampling cannot merge TRL's {key!r} (multimodal inputs and "
                                  "non-tensor fields are not supported); set dynamic.enabled=false")
            parts.append(value.index_select(0, torch.as_tensor(list(idx), dtype=torch.long, device=value.device)))
        widths = {p.size(1) for p in parts if p.ndim == 2}
        if parts[0].ndim == 1 or len(widths) == 1:
            merged[key] = torch.cat(parts, 0)
            continue
        width = max(widths)
        if pad_to_multiple_of:
            width = -(-width // pad_to_multiple_of) * pad_to_multiple_of
        fill = pad_token_id if key in ("prompt_ids", "completion_ids") else 1 if key in _PAD_ONE else 0
        padded = []
        for p in parts:
            extra = p.new_full((p.size(0), width - p.size(1)), fill)
            padded.append(torch.cat([extra, p], 1) if key in _LEFT else torch.cat([p, extra], 1))
        merged[key] = torch.cat(padded, 0)
    if masked is not None and any(masked):
        m = torch.as_tensor(list(masked), dtype=torch.bool, device=merged["completion_mask"].device)
        merged["completion_mask"] = merged["completion_mask"].masked_fill(m.unsqueeze(1), 0)
        if "tool_mask" in merged:
            merged["tool_mask"] = merged["tool_mask"].masked_fill(m.unsqueeze(1), 0)
        adv = merged["advantages"]
        merged["advantages"] = adv.masked_fill(m.view(-1, *([1] * (adv.ndim - 1))), 0.0)
    return merged


class CurriculumCallback(TrainerCallback):
    """Per optimiser step: check the rows against the curriculum and write them to ``curriculum_steps.jsonl``;
    per checkpoint: save the batch plan beside it (a resume checks it continues the same curriculum) and the state of
    every hook (the adaptive controller, the dynamic filter); on resume, restore those states first.

    :class:`CurriculumGRPOTrainer` adds one itself (and ``curriculum train`` its own): a script makes one only when
    it wires the trainer's recorder and hooks by hand.

    Args:
        recorder: the trainer's :class:`StepRecorder` (the rows of every step, checked against the curriculum).
        plan: the batch plan (``plan_batches(...).to_dict()``: ``prompts_per_generation`` places a resumed run).
        hooks: the adaptive controller's and the dynamic filter's hooks (None entries are left out).
        resume: the checkpoint a resumed run starts from (its hooks' states are restored first), or None.
    """

    def __init__(self, recorder: StepRecorder, plan: Mapping[str, Any], *, hooks: Sequence[Any] = (),
                 resume: str | None = None) -> None:
        self.recorder = recorder
        self.plan = dict(plan)
        self.hooks = [h for h in hooks if h is not None]
        self.resume = resume

    def on_train_begin(self, args, state, control, **kwargs):
        layout, micro, shift = self.recorder.layout, None, 0
        if self.resume is not None:
            for hook in self.hooks:
                hook.load(Path(self.resume))
            self.recorder.load(self.resume, upto=state.global_step)  # the steps before: one ledger
            saved = read_checkpoint_plan(self.resume)
            point = resume_point(saved, self.plan, ignore_data_skip=bool(args.ignore_data_skip)) if saved else None
            if point is not None and point.usable:  # a resume that skips or repeats rows (warned): out of order
                shift = (point.checkpoint_rows - point.data_rows) % point.usable
        if layout is not None:
            micro = layout.resume_micro(state.global_step, ignore_data_skip=bool(args.ignore_data_skip))
        self.recorder.start(rows_done(state.global_step, args, self.plan["prompts_per_generation"]), micro=micro,
                            shift=shift)

    def on_step_end(self, args, state, control, **kwargs):
        self.recorder.end_step(state.global_step)

    def on_save(self, args, state, control, **kwargs):
        ckpt = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if not ckpt.is_dir():
            return
        if args.should_save:
            for hook in self.hooks:
                hook.save(ckpt)
        if state.is_world_process_zero:
            self.recorder.save(ckpt)  # the steps so far: a resumed run's ledger starts from them
            write_json(ckpt / CHECKPOINT_PLAN, mask_secrets({
                **self.plan, "global_step": state.global_step,
                "rows_done": rows_done(state.global_step, args, self.plan["prompts_per_generation"])}))
