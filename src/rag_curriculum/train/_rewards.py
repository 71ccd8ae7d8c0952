"""The rewards of a recipe as TRL's ``GRPOTrainer(reward_funcs=..., args=GRPOConfig(reward_weights=...))``.

Every reward the toolkit registers (:data:`rag_curriculum.rewards.REWARDS`) is what TRL takes as it is: batched
(``completions`` in standard or conversational form, one float back per completion), reading the shard columns TRL
passes as keyword arguments (``answers``, ``gold_labels``, ``passages``, or ``reward_model`` / ``extra_info``),
ignoring the others (``prompts``, ``completion_ids``, ``trainer_state``, ...), a picklable class instance (workers
and vLLM cross process boundaries), and logging its components through TRL's ``log_metric`` when the trainer
provides it. Nothing here imports TRL.

From a recipe, name the rewards and their weights and hand both lists to TRL::

    funcs, weights = reward_funcs_from_config(cfg.rewards)
    trainer = GRPOTrainer(model, reward_funcs=funcs, args=GRPOConfig(reward_weights=weights, ...), ...)

with, in YAML, either the paper's total ``rewards: [rag-rl]`` or its components weighted separately::

    rewards:
      - {name: rag-rl-answer, weight: 1.0}
      - {name: rag-rl-citation, weight: 1.0}
      - {name: rag-rl-format, weight: 1.0, kwargs: {gamma_format: 1.0, format_penalty: 1.0}}

>>> funcs, weights = reward_funcs_from_config([{"name": "rag-rl-answer", "weight": 2.0}, "rag-rl-format"])
>>> [f.__name__ for f in funcs], weights
(['rag_rl_answer', 'rag_rl_format'], [2.0, 1.0])
>>> done = [{"role": "assistant", "content": "<reasoning></reasoning><answer>Final answer: 4\\nSupporting passages: B</answer>"}]
>>> [f(completions=[done], answers=[["four"]], gold_labels=[["B"]], trainer_state=None) for f in funcs]
[[0.0], [1.0]]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..rewards import get_reward, reward_entries, with_model_tokenizer

__all__ = ["reward_funcs_from_config", "with_model_tokenizer"]


def reward_funcs_from_config(
    specs: str | Mapping[str, float] | Sequence[str | Mapping[str, Any]],
) -> tuple[list[Callable], list[float]]:
    """Build reward functions and their weights (for ``GRPOConfig.reward_weights``) from a recipe's list.

    ``specs`` is a reward name, a mapping ``{name: weight}``, or a list of names and mappings
    ``{name, weight=1.0, kwargs={...}}`` (other keys of such a mapping are passed as keyword arguments too).

    Args:
        specs: the rewards, as a recipe's ``rewards`` lists them (see above).

    Returns:
        The reward functions (``GRPOTrainer(reward_funcs=...)``) and their weights
        (``GRPOConfig(reward_weights=...)``), in order.

    Raises:
        ConfigError: no reward, a mapping without ``name``, a weight that is not a finite number in -1e6..1e6 (the
            weighted sum would be NaN, infinite or overflow), or keyword arguments a reward refuses.
        UnknownNameError: a reward that is not registered (with a "did you mean").

    Examples:
        >>> from rag_curriculum.train import reward_funcs_from_config
        >>> reward_funcs_from_config({"rag-rl": 1.0})[0]
        [RagRlReward(gamma_answer=5.0, gamma_correct=5.0, gamma_incorrect=2.0, gamma_format=1.0, format_penalty=1.0, max_chars=4000, output_format='rag-rl', log_components=True, abstention_answer='unanswerable', abstain_penalty=0.0)]
    """
    entries = reward_entries(specs)  # each weight a finite number in -1e6..1e6, each kwarg's number finite
    funcs = [get_reward(name, **kwargs) for name, _, kwargs in entries]
    return funcs, [weight for _, weight, _ in entries]


def total_rewards(rewards_per_func: Any, weights: Any) -> Any:
    """Each completion's weighted total reward as TRL's advantages use it (torch tensors in, one out): the weighted
    sum over the reward functions, NaN where every function left the completion unscored.

    >>> import torch
    >>> total_rewards(torch.tensor([[1.0, 2.0], [float("nan"), float("nan")]]), torch.tensor([1.0, 0.5])).tolist()
    [2.0, nan]
    """
    total = (rewards_per_func * weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
    total[rewards_per_func.isnan().all(dim=1)] = float("nan")
    return total
