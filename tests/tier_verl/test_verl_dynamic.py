"""verl's own dynamic sampling (``algorithm.filter_groups``, DAPO) on the toolkit's recipe: ``DYNAMIC=1`` composes
into verl's config, verl's V1 trainer accepts the metric, the toolkit's reward carries it, and verl's own refill
path (``_add_prompts_to_generate`` -> ``_next_train_batch``) takes the next rows of the curriculum, in order."""

from __future__ import annotations

import importlib.util
import shlex
from types import SimpleNamespace

import pytest

pytestmark = pytest.mark.skipif(getattr(importlib.util.find_spec("verl"), "origin", None) is None,
                                reason="verl is not installed here: run scripts/setup.sh verl and use .venv-verl")


@pytest.fixture(scope="module")
def dynamic_config(launch, compose_verl_config, shards):
    res = launch(shards, "data.dataloader_num_workers=0", "data.train_batch_size=4", DYNAMIC="1",
                 DYNAMIC_METRIC="acc")
    assert res.returncode == 0, res.stderr
    assert "refills take the next rows in curriculum order" in res.stderr
    return compose_verl_config(shlex.split(res.stdout)[3:])


def test_filter_groups_compose_and_verl_accepts_the_metric(dynamic_config):
    from verl.trainer.config import FilterGroupsConfig
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer
    from verl.utils.config import omega_conf_to_dataclass

    fg = omega_conf_to_dataclass(dynamic_config.algorithm.filter_groups)
    assert isinstance(fg, FilterGroupsConfig) and fg.enable and fg.metric == "acc"
    assert dynamic_config.data.gen_batch_size == 1 and dynamic_config.data.shuffle is False
    assert dynamic_config.trainer.use_v1  # filter_groups lives in verl's V1 replay buffer
    assert PPOTrainer._resolve_filter_groups_metric(SimpleNamespace(config=dynamic_config)) == "acc"


def test_the_toolkits_reward_carries_the_metric(shard_rows):
    from rag_curriculum.verl.rewards import compute_score

    row = shard_rows[0]
    answer = row["answers"][0]
    text = (f"<reasoning>\nx\n</reasoning>\n<answer>\nFinal answer: {answer}\nSupporting passages: x\n</answer>")
    out = compute_score(row["data_source"], text, row["reward_model"]["ground_truth"], row["extra_info"])
    assert out["acc"] == 1.0  # verl reads reward_extra_info["acc"] per trajectory to find zero-variance groups


def test_refills_come_in_curriculum_order(dynamic_config, tokenizer, shard_rows):
    """verl's first batch and two refills of 1 and 3 prompts (what its replay buffer asks for after dropping
    groups) are rows 0..3, 4, 5..7 of the curriculum."""
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    trainer = SimpleNamespace(config=dynamic_config, tokenizer=tokenizer, processor=None, global_steps=1,
                              trainer_mode=dynamic_config.trainer.v1.trainer_mode, parameter_sync_step=1,
                              train_dataloader_it=None)
    PPOTrainer._init_dataloader(trainer)
    trainer._fetch_one_gen_batch = lambda: PPOTrainer._fetch_one_gen_batch(trainer)
    batches = [PPOTrainer._next_train_batch(trainer), PPOTrainer._next_train_batch(trainer, 1),
               PPOTrainer._next_train_batch(trainer, 3)]
    got = [[int(x) for x in b["curriculum_index"]] for b in batches]
    want = [r["curriculum_index"] for r in shard_rows[:8]]
    assert got == [want[:4], want[4:5], want[5:8]]
    assert len({u for b in batches for u in b["uid"]}) == 8  # one group (uid) per prompt
