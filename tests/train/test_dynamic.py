"""The dynamic-sampling filter's logic (rows taken, informative groups, retry / retire, its state), the merge of
TRL's generation outputs (the trainer's, beside the other code that reads TRL's private structures), the metric a
group is judged on, and the settings."""

from __future__ import annotations

import math

import pytest

from rag_curriculum.errors import ConfigError, UsageError
from rag_curriculum.train._dynamic import DynamicFilter, DynamicHook, metric_column


def test_take_hands_out_rows_in_curriculum_order_until_used_up():
    f = DynamicFilter(num_rows=5)
    assert f.take(2) == [0, 1]
    assert f.take(2) == [2, 3]
    assert f.take(2) == [4]
    assert f.take(2) == [] and f.remaining() == 0


@pytest.mark.parametrize(("groups", "spread", "want"), [
    ([[1.0, 1.0], [0.0, 1.0], [0.5, 0.5, 0.5]], 0.0, [False, True, False]),
    ([[0.93, 0.95], [0.2, 0.9]], 0.05, [False, True]),  # F1 0.93 / 0.95: not informative at spread 0.05
    ([[0.93, 0.95]], 0.0, [True]),
    ([[1.0, math.nan], [math.nan, math.nan], [0.0, math.nan, 1.0]], 0.0, [False, False, True]),  # NaN: unscored
])
def test_informative_is_a_spread_above_the_threshold(groups, spread, want):
    assert DynamicFilter(num_rows=1, max_spread=spread).informative(groups) == want


def test_retire_records_and_never_shows_again():
    f = DynamicFilter(num_rows=4, dropped="retire")
    f.take(2)
    assert f.drop(1) == "retired"
    f.batch += 1
    assert f.take(2) == [2, 3]
    assert f.totals["retired_rows"] == 1 and f.remaining() == 0


def test_retry_comes_back_after_the_delay_ahead_of_new_rows_then_retires():
    f = DynamicFilter(num_rows=10, dropped="retry", retry_after=1, max_retries=1)
    assert f.take(2) == [0, 1]
    assert f.drop(1) == "retry"
    f.batch = 1
    assert f.take(2) == [2, 3]  # due at batch 2 (one batch of delay)
    f.batch = 2
    assert f.take(2) == [1, 4]  # the retry first, then the next new row
    assert f.drop(1) == "retired"  # dropped again: max_retries spent
    f.batch = 3
    assert f.take(2) == [5, 6]
    assert f.remaining() == 3


def test_state_round_trip_continues_exactly():
    a = DynamicFilter(num_rows=10, dropped="retry", retry_after=0)
    a.take(3)
    a.drop(2)
    a.batch = 1
    b = DynamicFilter(num_rows=10, dropped="retry", retry_after=0)
    b.load_state_dict(a.state_dict())
    assert b.take(3) == a.take(3) == [2, 3, 4]
    assert b.state_dict() == a.state_dict()
    with pytest.raises(ConfigError, match="saved for 10 rows, this run has 9"):
        DynamicFilter(num_rows=9).load_state_dict(a.state_dict())


def test_refill_sizes_and_rows_given_back():
    f = DynamicFilter(num_rows=20, refill="estimate")
    f.totals.update(informative_groups=3, generated_groups=12)  # a quarter informative so far
    assert f.refill_size(2, 8) == 8  # 2 / 0.25, at most a batch
    assert f.refill_size(1, 8, informative=3, generated=4) == 3  # 16 groups, 6 informative: ceil(1 * 16 / 6) = 3
    assert DynamicFilter(num_rows=1, refill="missing").refill_size(3, 8) == 3
    assert DynamicFilter(num_rows=1, refill="batch").refill_size(3, 8) == 8
    g = DynamicFilter(num_rows=10, dropped="retry", retry_after=0)
    g.take(2)
    g.drop(0)
    g.batch = 1
    assert g.take(4) == [0, 2, 3, 4]  # the retry, then new rows
    g.give_back([0, 3, 4])  # past the need: they come next, in the same order
    assert g.take(4) == [0, 3, 4, 5]


def test_unknown_policy_refused():
    with pytest.raises(ConfigError, match="dynamic.dropped='keep'"):
        DynamicFilter(num_rows=1, dropped="keep")


def _merge_outputs():
    pytest.importorskip("trl")
    from rag_curriculum.train._trainer import merge_outputs

    return merge_outputs


def test_merge_pads_prompts_left_completions_right_and_masks():
    torch = pytest.importorskip("torch")
    merge_outputs = _merge_outputs()
    a = {"prompt_ids": torch.tensor([[5, 6], [7, 8]]), "prompt_mask": torch.ones(2, 2, dtype=torch.long),
         "completion_ids": torch.tensor([[1, 9], [2, 0]]), "completion_mask": torch.tensor([[1, 1], [1, 0]]),
         "old_per_token_logps": torch.tensor([[-1.0, -2.0], [-3.0, 0.0]]), "advantages": torch.tensor([1.0, -1.0]),
         "importance_sampling_ratio": torch.tensor([[0.9], [1.1]]), "num_items_in_batch": torch.tensor(3)}
    b = {"prompt_ids": torch.tensor([[4, 4, 4]]), "prompt_mask": torch.ones(1, 3, dtype=torch.long),
         "completion_ids": torch.tensor([[3, 3, 3]]), "completion_mask": torch.ones(1, 3, dtype=torch.long),
         "old_per_token_logps": torch.tensor([[-0.5, -0.5, -0.5]]), "advantages": torch.tensor([0.5]),
         "importance_sampling_ratio": torch.tensor([[1.0]]), "num_items_in_batch": torch.tensor(3)}
    m = merge_outputs([(a, [1, 0]), (b, [0]), (a, [0])], pad_token_id=0, pad_to_multiple_of=4,
                      masked=[False, False, False, True])
    assert m["prompt_ids"].tolist() == [[0, 0, 7, 8], [0, 0, 5, 6], [0, 4, 4, 4], [0, 0, 5, 6]]
    assert m["prompt_mask"].tolist() == [[0, 0, 1, 1], [0, 0, 1, 1], [0, 1, 1, 1], [0, 0, 1, 1]]
    assert m["completion_ids"].tolist() == [[2, 0, 0, 0], [1, 9, 0, 0], [3, 3, 3, 0], [1, 9, 0, 0]]
    assert m["completion_mask"].tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [0, 0, 0, 0]]
    assert m["old_per_token_logps"][2].tolist() == [-0.5, -0.5, -0.5, 0.0]
    assert m["advantages"].tolist() == [-1.0, 1.0, 0.5, 0.0]
    assert m["importance_sampling_ratio"].flatten().tolist() == pytest.approx([1.1, 0.9, 1.0, 0.9])
    assert "num_items_in_batch" not in m


def test_merge_refuses_what_it_cannot_merge():
    torch = pytest.importorskip("torch")
    merge_outputs = _merge_outputs()
    out = {"prompt_ids": torch.ones(1, 1), "completion_ids": torch.ones(1, 1), "advantages": torch.ones(1),
           "num_images": [1]}
    with pytest.raises(ConfigError, match="cannot merge TRL's 'num_images'"):
        merge_outputs([(out, [0])], pad_token_id=0)


def test_metric_column_names_a_reward_of_the_run():
    assert metric_column("reward", ["rag-rl"]) is None
    assert metric_column("exact_match", ["rag-rl"]) is None
    assert metric_column("rag-rl-answer", ["rag-rl", "rag-rl-answer"]) == 1
    with pytest.raises(ConfigError, match="add it to rewards with weight 0"):
        metric_column("f1", ["rag-rl"])


def test_metric_values_total_column_and_exact_match():
    torch = pytest.importorskip("torch")
    rewards = torch.tensor([[1.0, 0.0], [2.0, 1.0], [math.nan, math.nan]])
    weights = torch.tensor([1.0, 0.0])
    total = DynamicHook(DynamicFilter(num_rows=1), metric="reward", reward_names=["a", "b"], num_generations=2)
    values = total.values(rewards, weights, [], [])
    assert values[:2] == [1.0, 2.0] and math.isnan(values[2])  # unscorable stays NaN, not 0
    column = DynamicHook(DynamicFilter(num_rows=1), metric="b", reward_names=["a", "b"], num_generations=2)
    assert column.values(rewards, weights, [], [])[:2] == [0.0, 1.0]
    em = DynamicHook(DynamicFilter(num_rows=1), metric="exact_match", reward_names=["a"], num_generations=2)
    rows = [{"answers": ["Paris"], "template": "rag-rl"}] * 2
    completions = [f"<reasoning></reasoning><answer>Final answer: {a}\nSupporting passages: </answer>"
                   for a in ("Paris", "Lyon")]
    assert em.values(rewards[:2], weights, rows, completions) == [1.0, 0.0]


def test_settings_checked():
    from rag_curriculum.train import TrainConfig

    base = {"curriculum": "max", "data": {"shards": "x"}, "model": {"name_or_path": "m"}}
    with pytest.raises(UsageError, match="dynamic.metric='f1'"):
        TrainConfig.from_dict({**base, "dynamic": {"enabled": True, "metric": "f1"}}).validate()
    with pytest.raises(ConfigError, match="one training process"):
        TrainConfig.from_dict({**base, "dynamic": {"enabled": True}, "batch": {"num_processes": 2}}).validate()
    TrainConfig.from_dict({**base, "dynamic": {"enabled": True, "metric": "rag-rl"}}).validate()
    with pytest.raises(UsageError, match="max_spread"):
        TrainConfig.from_dict({**base, "dynamic": {"max_spread": -1}}).validate()


def test_the_run_stops_once_every_row_is_shown_at_a_generation_boundary():
    pytest.importorskip("transformers")
    from types import SimpleNamespace

    from rag_curriculum.train._dynamic import callback_class

    hook = DynamicHook(DynamicFilter(num_rows=3), metric="reward", reward_names=["r"], num_generations=2)
    stop = callback_class()(hook, {"steps_per_generation": 4, "num_iterations": 1})
    args = SimpleNamespace(gradient_accumulation_steps=2)  # a generation batch spans 2 optimiser steps
    control = SimpleNamespace(should_training_stop=False)
    hook.filter.take(3)
    stop.on_step_end(args, SimpleNamespace(global_step=1), control)
    assert not control.should_training_stop  # inside a generation batch: its second half is still to train
    stop.on_step_end(args, SimpleNamespace(global_step=2), control)
    assert control.should_training_stop
    hook.filter.drop(0)  # retire: nothing comes back
    again = SimpleNamespace(should_training_stop=False)
    retry = DynamicHook(DynamicFilter(num_rows=3, dropped="retry"), metric="reward", reward_names=["r"],
                        num_generations=2)
    retry.filter.take(3)
    retry.filter.drop(1)  # a row waiting for its retry: the run goes on
    callback_class()(retry, {"steps_per_generation": 2, "num_iterations": 1}).on_step_end(
        args, SimpleNamespace(global_step=2), again)
    assert not again.should_training_stop
