"""What verl 0.9.1 itself does with a prompt longer than ``data.max_prompt_length``, on the real curriculum.

Why the toolkit refuses an overlong curriculum before verl starts (``recipes/verl/run_grpo.sh``,
``rag_curriculum.verl.data``):

* ``data.truncation=error`` does not stop it: 0.9.1's ``RLHFDataset`` no longer tokenizes and never reads the
  setting, so the row reaches the rollout untouched;
* the single-turn agent loop then **left-truncates** the tokenized prompt to ``rollout.prompt_length`` (which is
  ``data.max_prompt_length``) with only a logged warning: the system prompt (the output format), the instructions
  and the first passages are cut, the question is kept;
* ``data.filter_overlong_prompts=True`` drops such rows without a word, and in a curriculum the long rows are the
  hard ones: at the longest level-1 length, every level-20 row of the min-max curriculum goes.

The limit is set to the longest level-1 prompt (tiny model's tokenizer), so every level-20 row is over it.
"""

from __future__ import annotations

import copy
import importlib.util
import logging

import pytest

# tests/ is on sys.path (pytest's pythonpath), so without verl installed `verl` would resolve to this folder as a
# namespace package: only a regular package (one with an __init__.py, an origin) is verl.
pytestmark = pytest.mark.skipif(getattr(importlib.util.find_spec("verl"), "origin", None) is None,
                                reason="verl is not installed here: run scripts/setup.sh verl and use .venv-verl")


@pytest.fixture(scope="module")
def lengths(dataset, chat_ids) -> list[int]:
    return [len(chat_ids(dataset.dataframe[i]["prompt"])) for i in range(len(dataset))]


@pytest.fixture(scope="module")
def limit(dataset, lengths) -> int:
    levels = dataset.dataframe["level"]
    easy = max(n for n, level in zip(lengths, levels, strict=True) if level == 1)
    assert min(n for n, level in zip(lengths, levels, strict=True) if level == 20) > easy
    return easy


def _config(verl_config, max_prompt_length: int, **data):
    cfg = copy.deepcopy(verl_config)
    cfg.data.max_prompt_length = max_prompt_length
    for key, value in data.items():
        cfg.data[key] = value
    assert cfg.data.truncation == "error"
    return cfg


def _dataset(cfg, tokenizer):
    from verl.trainer.ppo.utils import create_rl_dataset

    return create_rl_dataset(cfg.data.train_files, cfg.data, tokenizer, None, is_train=True)


class _Engine:
    """Stands in for the vLLM server: records the prompt token ids it is asked to continue, answers EOS."""

    def __init__(self, eos: int):
        self.eos, self.prompts = eos, []

    async def generate(self, *, request_id, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.prompts.append(list(prompt_ids))
        return TokenOutput(token_ids=[self.eos], log_probs=None)


def _rollout_prompt(cfg, item, tokenizer) -> list[int]:
    """Run verl's default agent loop (rollout.agent.default_agent_loop, instantiated as verl's AgentLoopWorker does)
    on one dataset item, and return the prompt ids that reached the engine."""
    import hydra
    import torch
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.utils.ray_utils import get_event_loop

    engine = _Engine(tokenizer.eos_token_id)
    name = cfg.actor_rollout_ref.rollout.agent.default_agent_loop
    assert name == "single_turn_agent"
    agent = hydra.utils.instantiate(
        config=_agent_loop_registry[name], trainer_config=DictConfigWrap(config=cfg), server_manager=engine,
        tokenizer=tokenizer, processor=None, hf_model_type="qwen2", dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(cfg.data), tools=ToolListWrap([]),
    )
    kwargs = {k: v for k, v in item.items() if not isinstance(v, torch.Tensor)}
    out = get_event_loop().run_until_complete(agent.run({"temperature": 1.0}, **kwargs))
    assert engine.prompts == [list(out.prompt_ids)]
    return engine.prompts[0]


def test_truncation_error_lets_overlong_rows_through(verl_config, tokenizer, lengths, limit):
    cfg = _config(verl_config, limit)
    assert cfg.actor_rollout_ref.rollout.prompt_length == limit  # follows data.max_prompt_length
    ds = _dataset(cfg, tokenizer)  # no error although most level-20 prompts are over the limit
    assert len(ds) == len(lengths) == 100
    overlong = [i for i, n in enumerate(lengths) if n > limit]
    assert len(overlong) == 50 and all(ds[i]["level"] == 20 for i in overlong)
    for i in overlong[:3]:
        assert list(ds[i]["raw_prompt"]) == list(ds.dataframe[i]["prompt"])  # not cut here either


def test_rollout_left_truncates_overlong_prompts(verl_config, tokenizer, chat_ids, lengths, limit, caplog):
    longest = max(range(len(lengths)), key=lengths.__getitem__)
    cfg = _config(verl_config, limit)
    item = _dataset(cfg, tokenizer)[longest]
    full = chat_ids(item["raw_prompt"])
    assert len(full) == lengths[longest] > 2 * limit

    # within the limit (the launch script's setting), the engine gets the whole chat-templated prompt
    assert _rollout_prompt(verl_config, item, tokenizer) == full

    with caplog.at_level(logging.WARNING):
        got = _rollout_prompt(cfg, item, tokenizer)
    assert got == full[-limit:]  # the last `limit` tokens: cut on the left
    assert f"Prompt of {len(full)} tokens exceeds rollout.prompt_length={limit}; left-truncating." in caplog.text
    system, user = item["raw_prompt"]
    text = tokenizer.decode(got, skip_special_tokens=False)
    lost = [system["content"].splitlines()[0], user["content"].splitlines()[0],
            f"Title: {item['passages'][0]['title']}"]
    assert [s in text for s in lost] == [False, False, False]  # format, instructions, first passage: gone
    assert "<|im_start|>system" not in text
    assert text.endswith(f"Question: {item['question']}<|im_end|>\n<|im_start|>assistant\n")  # the question stays


def test_filter_overlong_prompts_drops_the_hard_rows(verl_config, tokenizer, lengths, limit):
    ds = _dataset(_config(verl_config, limit, filter_overlong_prompts=True, filter_overlong_prompts_workers=1),
                  tokenizer)
    kept = list(ds.dataframe["curriculum_index"])
    assert kept == [i for i, n in enumerate(lengths) if n <= limit]
    assert kept == list(range(50)) and set(ds.dataframe["level"]) == {1}  # the whole of level 20 is gone


def test_launch_script_limit_fits_every_prompt_verl_builds(launched, verl_config, tokenizer):
    """The seam the toolkit's refusal relies on: the launch script (MAX_PROMPT=auto, its default) sets
    data.max_prompt_length to the longest prompt as the toolkit counts it; verl's agent loop, tokenizing each row
    itself, must then cut none of them."""
    limit = verl_config.actor_rollout_ref.rollout.prompt_length
    assert limit == verl_config.data.max_prompt_length and f"data.max_prompt_length={limit} " in launched.stderr
    ds = _dataset(verl_config, tokenizer)
    built = [len(_rollout_prompt(verl_config, ds[i], tokenizer)) for i in range(len(ds))]
    assert max(built) == limit  # the longest prompt fills the budget exactly: counted alike, nothing cut
