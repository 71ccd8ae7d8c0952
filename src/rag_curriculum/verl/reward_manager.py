"""A verl reward manager that builds the string it scores as Search-R1's does, for ``search-r1`` bit for bit.

Search-R1's ``RewardManager`` (``verl/trainer/main_ppo.py`` of PeterGriffinJin/Search-R1) decodes each sample's
valid prompt tokens and valid response tokens *together*, special tokens kept (``tokenizer.decode(torch.cat(
(valid_prompt_ids, valid_response_ids)))``), and scores that string with ``qa_em.compute_score_em``. verl 0.9.1's
``naive`` manager hands a reward the response alone, decoded with ``skip_special_tokens=True``; its own
``search_r1_like_qa_em`` was adapted to that (one ``<answer>`` match is enough there, and more than ten ``<answer>``
tags divide the score by 4), so it is not Search-R1's function (docs/search-agents.md).

:class:`SearchR1RewardManager` decodes as Search-R1 does and calls the reward function with ``solution_str`` (the
response, special tokens kept) and ``prompt_str`` (the decoded prompt; the two concatenated are exactly the decoded
sequence), by default :func:`rag_curriculum.verl.rewards.compute_search_r1_score`; a
``reward.custom_reward_function`` that is configured is called instead (with its ``reward_kwargs``). Point verl at
it by path::

    reward.reward_manager.source=importlib \\
    reward.reward_manager.name=SearchR1RewardManager \\
    reward.reward_manager.module.path=$(python -m rag_curriculum.verl reward-manager-path) \\
    reward.custom_reward_function.path=$(python -m rag_curriculum.verl reward-path) \\
    reward.custom_reward_function.name=compute_search_r1_score

(``REWARD=search-r1 bash recipes/verl/run_search_r1.sh`` sets them). The score is placed on the last valid response
token, as both Search-R1's manager and verl's do.
"""

from __future__ import annotations

from typing import Any

from verl import DataProto
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase
from verl.utils.reward_score import default_compute_score

from rag_curriculum.verl.rewards import compute_search_r1_score

__all__ = ["SearchR1RewardManager", "search_r1_strings"]


def search_r1_strings(tokenizer: Any, item: Any) -> tuple[str, str]:
    """``(prompt_str, solution_str)`` of one sample (a ``DataProtoItem``), decoded as Search-R1's ``RewardManager``
    decodes it: the valid prompt ids (left-padded) and the valid response ids (right-padded), special tokens kept;
    ``prompt_str + solution_str`` is exactly ``tokenizer.decode(prompt_ids + response_ids)``."""
    prompt_ids = item.batch["prompts"]
    prompt_length = prompt_ids.shape[-1]
    mask = item.batch["attention_mask"]
    valid_prompt_ids = prompt_ids[prompt_length - int(mask[:prompt_length].sum()):]
    valid_response_ids = item.batch["responses"][:int(mask[prompt_length:].sum())]
    ids = [int(i) for i in valid_prompt_ids.tolist()] + [int(i) for i in valid_response_ids.tolist()]
    sequence = tokenizer.decode(ids)
    prompt_str = tokenizer.decode([int(i) for i in valid_prompt_ids.tolist()])
    if not sequence.startswith(prompt_str):  # never seen; the whole sequence is still what is scored
        return sequence, ""
    return prompt_str, sequence[len(prompt_str):]


class SearchR1RewardManager(RewardManagerBase):
    """verl's reward-loop manager (``RewardManagerBase``) with Search-R1's decoding; see the module docstring."""

    def __init__(self, config: Any, tokenizer: Any, compute_score: Any = None, reward_router_address: Any = None,
                 reward_model_tokenizer: Any = None, **kwargs: Any) -> None:
        super().__init__(config, tokenizer, compute_score)
        # verl hands its own default (routing by data_source) when no custom function is configured
        self.compute_score = (compute_search_r1_score if compute_score is None
                              or compute_score is default_compute_score else compute_score)

    async def run_single(self, data: DataProto) -> dict:
        item = data[-1:][0]  # for multi-sequence outputs, the last sequence (as verl's own managers)
        prompt_str, solution_str = await self.loop.run_in_executor(None, search_r1_strings, self.tokenizer, item)
        extra_info = dict(item.non_tensor_batch.get("extra_info", None) or {})
        result = await self.loop.run_in_executor(None, lambda: self.compute_score(
            data_source=item.non_tensor_batch["data_source"], solution_str=solution_str,
            ground_truth=item.non_tensor_batch["reward_model"]["ground_truth"], extra_info=extra_info,
            prompt_str=prompt_str))
        if isinstance(result, dict):
            return {"reward_score": result["score"], "reward_extra_info": dict(result)}
        return {"reward_score": result, "reward_extra_info": {"acc": result}}
