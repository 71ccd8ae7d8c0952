"""verl 0.9.1's own data path on the toolkit's shards, configured by the toolkit's launch script: its Hydra config,
``create_rl_dataset`` / ``RLHFDataset``, ``create_rl_sampler`` with ``data.shuffle=False`` and the
``StatefulDataLoader`` that verl's (v1, sync) trainer builds. The rows must come out in ``curriculum_index`` order,
untouched, with the last partial batch dropped as the launch script announces."""

from __future__ import annotations

import copy
import importlib.util
import json
from types import SimpleNamespace

import pytest

from rag_curriculum.verl.data import hydra_list, reward_path, train_files

# tests/ is on sys.path (pytest's pythonpath), so without verl installed `verl` would resolve to this folder as a
# namespace package: only a regular package (one with an __init__.py, an origin) is verl.
pytestmark = pytest.mark.skipif(getattr(importlib.util.find_spec("verl"), "origin", None) is None,
                                reason="verl is not installed here: run scripts/setup.sh verl and use .venv-verl")

PROMPTS_PER_STEP = 42  # the launch script's default data.train_batch_size (the paper's 42 prompts a step)
ROWS = 100
STEPS, TAIL = divmod(ROWS, PROMPTS_PER_STEP)  # 2 steps of 42 prompts, 16 rows dropped


def test_launch_command_composes_under_verls_config(shards, launch_overrides, verl_config):
    """Every override of the launch script is a key of verl 0.9.1's own config (Hydra refuses unknown keys), and
    verl's validate_config accepts the result."""
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    cfg = verl_config
    assert list(cfg.data.train_files) == train_files(shards)
    assert cfg.data.shuffle is False and cfg.data.prompt_key == "prompt" and cfg.data.reward_fn_key == "data_source"
    assert cfg.data.truncation == "error" and cfg.data.filter_overlong_prompts is False
    assert cfg.data.train_batch_size == PROMPTS_PER_STEP and cfg.actor_rollout_ref.rollout.n == 7
    # the rollout's prompt budget is data.max_prompt_length (an interpolation in verl's rollout.yaml)
    assert cfg.actor_rollout_ref.rollout.prompt_length == cfg.data.max_prompt_length
    assert cfg.reward.custom_reward_function.path == reward_path()
    assert cfg.reward.custom_reward_function.name == "compute_score"
    assert cfg.reward.reward_manager.name == "naive"
    # the trainer main_ppo runs by default, whose data loader the tests below build
    assert cfg.trainer.use_v1 is True and cfg.trainer.v1.trainer_mode == "sync"
    assert not cfg.algorithm.filter_groups.enable  # DAPO filtering would switch the loader to one prompt a fetch
    validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    # the list the script passes is the toolkit's own Hydra list of the shard files in manifest order
    assert f"data.train_files={hydra_list(train_files(shards))}" in launch_overrides


def test_dataset_reads_the_shards_in_curriculum_order(shards, dataset, shard_rows):
    from verl.utils.dataset.rl_dataset import RLHFDataset

    manifest = json.loads((shards / "manifest.json").read_text())
    # verl's RLHFDataset, as the toolkit's checked subclass the launch script names (data.custom_cls)
    assert isinstance(dataset, RLHFDataset) and type(dataset).__name__ == "CurriculumRLHFDataset"
    assert len(dataset) == manifest["num_rows"] == len(shard_rows) == ROWS
    items = [dataset[i] for i in range(len(dataset))]
    assert [it["curriculum_index"] for it in items] == list(range(ROWS))
    # verl's own `index` (from extra_info.index) is the curriculum index too
    assert [it["index"] for it in items] == list(range(ROWS))
    # min-max: the 50 easiest rows (level 1) first, then the 50 hardest (level K=20)
    assert [it["level"] for it in items] == [1] * 50 + [20] * 50
    for it, row in zip(items, shard_rows, strict=True):
        assert it["id"] == row["id"] and it["data_source"] == "musique" == row["data_source"]
        # the chat messages reach the rollout unchanged: verl 0.9.1's dataset does not tokenize them
        assert list(it["raw_prompt"]) == row["prompt"]
        assert [m["role"] for m in it["raw_prompt"]] == ["system", "user"]
        assert it["reward_model"] == row["reward_model"]
        assert it["extra_info"]["labels"] == row["extra_info"]["labels"]


def test_sampler_is_sequential_without_shuffle(verl_config, dataset):
    from torch.utils.data import SequentialSampler
    from verl.trainer.ppo.utils import create_rl_sampler

    sampler = create_rl_sampler(verl_config.data, dataset)
    assert type(sampler) is SequentialSampler
    assert list(sampler) == list(range(ROWS))
    # what data.shuffle=True (verl's default) would do to the curriculum
    shuffled = copy.deepcopy(verl_config.data)
    shuffled.shuffle = True
    shuffled.seed = 0
    assert sorted(create_rl_sampler(shuffled, dataset)) == list(range(ROWS))
    assert list(create_rl_sampler(shuffled, dataset)) != list(range(ROWS))


def _trainer_dataloader(cfg, tokenizer):
    """The train loader exactly as verl 0.9.1's PPOTrainer._init_dataloader builds it (its own method, run on a
    stand-in trainer that carries only what the method reads)."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    trainer = SimpleNamespace(config=copy.deepcopy(cfg), tokenizer=tokenizer, processor=None,
                              trainer_mode=cfg.trainer.v1.trainer_mode, parameter_sync_step=1)
    PPOTrainer._init_dataloader(trainer)
    return trainer


def test_trainer_dataloader_keeps_the_order_and_drops_the_tail(launched, verl_config, tokenizer):
    from torch.utils.data import SequentialSampler
    from torchdata.stateful_dataloader import StatefulDataLoader

    trainer = _trainer_dataloader(verl_config, tokenizer)
    loader = trainer.train_dataloader
    assert type(loader) is StatefulDataLoader and type(loader.sampler) is SequentialSampler
    assert loader.batch_size == PROMPTS_PER_STEP and loader.drop_last is True
    batches = [list(b["curriculum_index"]) for b in loader]
    assert batches == [list(range(s * PROMPTS_PER_STEP, (s + 1) * PROMPTS_PER_STEP)) for s in range(STEPS)]
    assert trainer.steps_per_epoch == trainer.total_training_steps == STEPS  # trainer.total_epochs=1
    seen = {i for b in batches for i in b}
    assert sorted(set(range(ROWS)) - seen) == list(range(STEPS * PROMPTS_PER_STEP, ROWS))  # the tail, never trained
    # ... which is what the launch script announces
    assert f"({ROWS} rows, {STEPS} steps; the last {TAIL} rows are dropped" in launched.stderr


def test_trainer_dataloader_resumes_where_it_stopped(verl_config, tokenizer):
    """verl checkpoints the loader's state (trainer.resume_mode=auto in the launch script): a loader restored from
    it goes on with the next rows of the curriculum, not from the start."""
    first = _trainer_dataloader(verl_config, tokenizer).train_dataloader
    it = iter(first)
    assert list(next(it)["curriculum_index"]) == list(range(PROMPTS_PER_STEP))
    state = first.state_dict()

    resumed = _trainer_dataloader(verl_config, tokenizer).train_dataloader
    resumed.load_state_dict(state)
    assert [list(b["curriculum_index"]) for b in resumed] == [list(range(PROMPTS_PER_STEP, 2 * PROMPTS_PER_STEP))]
