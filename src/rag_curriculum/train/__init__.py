"""GRPO training on a curriculum with TRL's ``GRPOTrainer``, configured by Hydra recipes, in curriculum order.

    cfg = compose_train_config("rag-rl-min-max", ["data.shards=outputs/musique-min-max"])
    result = train(cfg)

This package is the toolkit's TRL wing: what TRL calls is here, and nowhere else. :func:`reward_funcs_from_config`
makes a recipe's rewards into TRL's ``reward_funcs`` and ``reward_weights``; :class:`SearchRollout`
(:func:`rollout_from_config`) is a ``rollout_func`` running the Search-R1 tag protocol with the policy being
trained; :class:`SearchEnvironment` (:func:`environment_from_config`) an ``environment_factory`` for TRL's native
tool calling; and the toolkit's ``GRPOTrainer`` subclass, the one place that overrides TRL's private methods, is in
``_trainer``. verl's counterpart is :mod:`rag_curriculum.verl`.

Its private modules (their public names are exported here):

* :mod:`~rag_curriculum.train._config`: the typed schema of a run (model, data, rewards, batch, run, grpo);
* :mod:`~rag_curriculum.train._recipes`: the shipped recipes (``recipes/train``) and Hydra composition;
* :mod:`~rag_curriculum.train._batching`: the paper's 42 prompts x 7 generations mapped onto TRL's batch;
* :mod:`~rag_curriculum.train._order`: what would reorder the curriculum, and the tail rows a batch leaves unseen;
* :mod:`~rag_curriculum.train._ledger`: the rows of every step, checked and written to ``curriculum_steps.jsonl``;
* :mod:`~rag_curriculum.train._memory`: the memory estimate per GPU, the checkpoints' disk, and each training GPU's
  measured peak (``gpu_memory/rank-N.json``) judged against the estimate (:func:`judge_peak`);
* :mod:`~rag_curriculum.train._trl`: a run wired to TRL (:func:`train`; :func:`prepare`, what a dry run checks;
  :func:`grpo_kwargs`, the bound ``GRPOConfig``'s arguments; :func:`finished_message`); ``_rewards``,
  ``_rollout``, ``_tools``: the adapters above; ``_trainer``: the ``GRPOTrainer`` subclass and its callback;
* :mod:`~rag_curriculum.train.controllers` and :mod:`~rag_curriculum.train.adaptive`: adaptive curricula, the level
  of each batch chosen from the model's success (``adaptive.controller``, docs/adaptive.md).

Importing this package imports neither torch, transformers nor TRL; :func:`train` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._plumbing import lazy_exports
from ..errors import BatchError, CurriculumOrderError, RecipeError
from ._batching import BatchPlan, derive_accumulation, plan_batches
from ._config import (
    AdaptiveConfig,
    BatchConfig,
    DataConfig,
    DynamicConfig,
    ModelConfig,
    RewardSpec,
    RunConfig,
    TrainConfig,
)
from ._informative import PLOT_FILE as INFORMATIVE_PLOT
from ._informative import SUMMARY_FILE as INFORMATIVE_SUMMARY
from ._informative import summary_table as informative_table
from ._ledger import STEPS_FILE, StepRecorder, learning_summary, read_steps
from ._memory import disk_lines, judge_peak, memory_lines, read_peaks
from ._order import OrderIssue, check_index_order, order_issues
from ._recipes import DEFAULT_RECIPE, compose_train_config, config_yaml, list_recipes
from ._rewards import reward_funcs_from_config
from ._rollout import PolicyBackend, SearchRollout, TurnSampling, rollout_from_config, search_prompts
from ._tools import SearchEnvironment, environment_from_config
from ._trl import (
    TrainResult,
    bind_grpo_config,
    check_recipe,
    finished_message,
    grpo_kwargs,
    partial_history,
    prepare,
    train,
)
from ._warm import WarmStartConfig, WarmStartResult, make_tiny_model, warm_start
from .controllers import CONTROLLERS, Controller, GroupResult, make_controller, register_controller

# The curriculum trainer for a user's own TRL script, imported under TYPE_CHECKING below (it imports torch and TRL:
# loaded when first asked for).
__getattr__, __dir__ = lazy_exports(__name__, globals())

if TYPE_CHECKING:  # for type checkers and IDEs
    from ._trainer import CurriculumCallback, CurriculumGRPOTrainer

__all__ = [
    "CONTROLLERS",
    "DEFAULT_RECIPE",
    "STEPS_FILE",
    "AdaptiveConfig",
    "BatchConfig",
    "BatchError",
    "BatchPlan",
    "Controller",
    "CurriculumCallback",
    "CurriculumGRPOTrainer",
    "CurriculumOrderError",
    "DataConfig",
    "DynamicConfig",
    "GroupResult",
    "ModelConfig",
    "OrderIssue",
    "PolicyBackend",
    "RecipeError",
    "RewardSpec",
    "RunConfig",
    "SearchEnvironment",
    "SearchRollout",
    "StepRecorder",
    "WarmStartConfig",
    "WarmStartResult",
    "TrainConfig",
    "TrainResult",
    "TurnSampling",
    "bind_grpo_config",
    "check_index_order",
    "check_recipe",
    "compose_train_config",
    "config_yaml",
    "derive_accumulation",
    "environment_from_config",
    "finished_message",
    "grpo_kwargs",
    "INFORMATIVE_PLOT",
    "INFORMATIVE_SUMMARY",
    "informative_table",
    "learning_summary",
    "disk_lines",
    "judge_peak",
    "memory_lines",
    "read_peaks",
    "list_recipes",
    "make_controller",
    "make_tiny_model",
    "order_issues",
    "plan_batches",
    "partial_history",
    "prepare",
    "read_steps",
    "register_controller",
    "reward_funcs_from_config",
    "rollout_from_config",
    "search_prompts",
    "train",
    "warm_start",
]
