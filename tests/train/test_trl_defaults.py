"""The GRPO a recipe runs does not change when TRL's defaults do: every setting that changes the algorithm is either
stated by the recipe or still has the default it had when the recipes were written (TRL 1.16, snapshotted here).
A failure names the setting: read TRL's changelog, then state it in the recipe (recipes/train/_base.yaml) and
update the snapshot."""

from __future__ import annotations

import dataclasses

import pytest

from rag_curriculum.train import compose_train_config, list_recipes

#: GRPOConfig's defaults (TRL 1.16) for every field that changes what is optimised: the loss, the ratio and its
#: clipping, the importance-sampling correction, the KL estimator, reward and advantage scaling, the sampling.
ALGORITHM_DEFAULTS = {
    "beta": 0.0, "epsilon": 0.2, "epsilon_high": None, "delta": None, "num_iterations": 1,
    "loss_type": "dapo", "scale_rewards": "group", "importance_sampling_level": "token",
    "multi_objective_aggregation": "sum_then_normalize", "reward_weights": None,
    "mask_truncated_completions": False, "top_entropy_quantile": 1.0,
    "entropy_coef": 0.0, "use_adaptive_entropy": False,
    "vllm_importance_sampling_correction": True, "vllm_importance_sampling_mode": "sequence_mask",
    "vllm_importance_sampling_clip_max": 3.0, "vllm_importance_sampling_clip_min": None,
    "vllm_importance_sampling_cap": None, "off_policy_mask_threshold": None, "use_bias_correction_kl": True,
    "sync_ref_model": False, "num_generations": 8, "max_completion_length": 512,
    "temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": None, "repetition_penalty": 1.0,
    "generation_kwargs": None, "shuffle_dataset": True, "disable_dropout": False,
    "cast_lm_head_to_fp32": False, "sapo_temperature_neg": 1.05, "sapo_temperature_pos": 1.0,
    "vespo_k_pos": 2.0, "vespo_lambda_pos": 3.0, "vespo_k_neg": 3.0, "vespo_lambda_neg": 2.0,
}
#: GRPOConfig fields that do not change the algorithm (where generation runs, logging, model loading); a field of
#: a newer TRL in neither list fails the test until it is placed.
NOT_ALGORITHM = {
    "model_init_kwargs", "trust_remote_code", "router_aux_loss_coef", "num_generations_eval",
    "ds3_gather_for_generation", "pad_to_multiple_of", "generation_batch_size", "steps_per_generation",
    "chat_template_kwargs", "cache_implementation", "use_vllm", "vllm_mode", "vllm_model_impl",
    "vllm_enable_sleep_mode", "vllm_structured_outputs_regex", "vllm_server_base_url", "vllm_server_host",
    "vllm_server_port", "vllm_server_timeout", "vllm_group_port", "vllm_gpu_memory_utilization",
    "vllm_max_model_length", "vllm_tensor_parallel_size", "ref_model_mixup_alpha", "ref_model_sync_steps",
    "entropy_coef_min", "entropy_coef_max", "entropy_coef_delta", "entropy_target", "max_tool_calling_iterations",
    "log_completions", "log_multimodal", "num_completions_to_print", "log_unique_prompts",
    "log_completions_hub_repo", "use_transformers_continuous_batching", "transformers_continuous_batching_config",
    "use_transformers_paged",
}
#: What the paper's recipes state explicitly (the issue of a silent TRL change is worst where TRL's default is not
#: the paper's choice).
PAPER_STATES = {"vllm_importance_sampling_correction": False, "loss_type": "grpo", "scale_rewards": "group",
                "use_bias_correction_kl": False, "beta": 0.01, "epsilon": 0.2, "epsilon_high": None,
                "importance_sampling_level": "token", "mask_truncated_completions": False,
                "top_entropy_quantile": 1.0, "num_iterations": 1}


def _grpo_fields():
    pytest.importorskip("torch")
    trl = pytest.importorskip("trl")
    from transformers import TrainingArguments

    base = {f.name for f in dataclasses.fields(TrainingArguments)}
    return {f.name: f for f in dataclasses.fields(trl.GRPOConfig) if f.name not in base}


def _default(field):
    if field.default is not dataclasses.MISSING:
        return field.default
    return field.default_factory() if field.default_factory is not dataclasses.MISSING else None


def test_every_grpo_setting_is_placed():
    fields = _grpo_fields()
    unplaced = sorted(set(fields) - set(ALGORITHM_DEFAULTS) - NOT_ALGORITHM)
    assert not unplaced, (f"TRL's GRPOConfig has new settings {unplaced}: say in this test whether each changes the "
                          "algorithm, and state those that do in recipes/train/_base.yaml")


@pytest.mark.parametrize("recipe", list_recipes())
def test_defaults_a_recipe_leaves_unset_are_unchanged(recipe):
    fields = _grpo_fields()
    stated = compose_train_config(recipe).grpo
    changed = {name: (_default(fields[name]), was) for name, was in ALGORITHM_DEFAULTS.items()
               if name in fields and name not in stated and _default(fields[name]) != was}
    gone = sorted(name for name in ALGORITHM_DEFAULTS if name not in fields and name in stated)
    assert not changed, (f"recipe {recipe} leaves these GRPOConfig settings to TRL, whose defaults changed "
                         f"(now, was): {changed}; state them in the recipe")
    assert not gone, f"recipe {recipe} sets {gone}, which this TRL's GRPOConfig no longer has"


@pytest.mark.parametrize("recipe", ["rag-rl-min-max", "rag-rl-linear", "rag-rl-max", "rag-rl-base-answerable",
                                    "rag-rl-adaptive"])
def test_paper_recipes_state_the_algorithm(recipe):
    stated = compose_train_config(recipe).grpo
    assert {k: stated.get(k, "UNSET") for k in PAPER_STATES} == PAPER_STATES
