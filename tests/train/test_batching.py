"""The paper's batch mapped onto TRL's (checked against TRL's own arithmetic and sampler), the order checks, and
the per-step row recorder."""

from __future__ import annotations

import logging

import pytest

from rag_curriculum.train import (
    BatchError,
    CurriculumOrderError,
    StepRecorder,
    check_index_order,
    derive_accumulation,
    order_issues,
    plan_batches,
)
from rag_curriculum.train._batching import apply_batch
from rag_curriculum.train._order import enforce, tail_rows


@pytest.mark.parametrize(("num_processes", "per_device", "ga"), [(1, 7, 42), (1, 14, 21), (7, 7, 6), (7, 6, 7),
                                                                 (7, 14, 3), (2, 7, 21), (3, 7, 14), (6, 7, 7)])
def test_paper_batch_mapping(num_processes, per_device, ga):
    assert derive_accumulation(prompts_per_step=42, num_generations=7, per_device=per_device,
                               num_processes=num_processes) == ga
    plan = plan_batches({"per_device_train_batch_size": per_device, "gradient_accumulation_steps": ga,
                         "num_generations": 7, "num_train_epochs": 1}, num_processes=num_processes, num_rows=5000)
    assert plan.completions_per_step == 294 and plan.prompts_per_step == 42
    assert plan.generation_batch_size == 294 and plan.prompts_per_generation == 42
    assert plan.steps_per_generation == ga
    assert plan.steps_per_epoch == 5000 // 42 and plan.unseen_rows == 5000 % 42 == 2
    assert plan.total_steps == 119


@pytest.mark.parametrize("num_processes", [4, 8, 16])
def test_paper_batch_impossible(num_processes):
    with pytest.raises(BatchError, match="294 completions"):
        derive_accumulation(prompts_per_step=42, num_generations=7, per_device=7, num_processes=num_processes)


def test_apply_batch_refuses_contradictions():
    with pytest.raises(BatchError, match="disagree"):
        apply_batch({"per_device_train_batch_size": 4}, prompts_per_step=42, per_device=7, num_processes=1)
    with pytest.raises(BatchError, match="gradient_accumulation_steps=5"):
        apply_batch({"num_generations": 7, "gradient_accumulation_steps": 5}, prompts_per_step=42, per_device=7,
                    num_processes=1)
    kw = apply_batch({"num_generations": 7}, prompts_per_step=None, per_device=7, num_processes=1)
    assert kw == {"num_generations": 7, "per_device_train_batch_size": 7}


@pytest.mark.parametrize("grpo", [
    {"per_device_train_batch_size": 7, "gradient_accumulation_steps": 42, "num_generations": 7},
    {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 3, "num_generations": 2},
    {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2, "num_generations": 4,
     "steps_per_generation": 4},
    {"per_device_train_batch_size": 6, "gradient_accumulation_steps": 1, "num_generations": 3,
     "generation_batch_size": 24},
    {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 2, "num_generations": 2, "num_iterations": 2},
])
def test_plan_matches_trl(tmp_path, grpo):
    """The plan reproduces GRPOConfig's batch arithmetic, and TRL's RepeatSampler (unshuffled) walks the rows in
    order, dropping exactly the tail the plan reports."""
    pytest.importorskip("trl")
    from trl import GRPOConfig
    from trl.trainer.utils import RepeatSampler

    args = GRPOConfig(output_dir=str(tmp_path), bf16=False, use_cpu=True, report_to="none", **grpo)
    n = 53
    plan = plan_batches(grpo, num_processes=1, num_rows=n)
    assert plan.generation_batch_size == args.generation_batch_size
    assert plan.steps_per_generation == args.steps_per_generation
    sampler = RepeatSampler(list(range(n)), mini_repeat_count=args.num_generations,
                            batch_size=args.generation_batch_size // args.num_generations,
                            repeat_count=args.num_iterations * args.steps_per_generation, shuffle=False, seed=0)
    flat = list(sampler)
    gbs = args.generation_batch_size
    batches = [flat[i:i + gbs] for i in range(0, len(flat), gbs)]
    # The trainer generates on the first of every steps_per_generation x num_iterations batches (the others are
    # repeats of it); the rows it generates for, in order, must be the curriculum minus the dropped tail.
    generated = batches[::args.steps_per_generation * args.num_iterations]
    rows = [i for batch in generated for i in batch[::args.num_generations]]
    assert all(batch == [i for i in batch[::args.num_generations] for _ in range(args.num_generations)]
               for batch in generated)
    assert rows == list(range(n - plan.unseen_rows))
    # HF's Trainer: ceil(batches / gradient_accumulation_steps) optimiser steps per epoch.
    batches = len(sampler) // (args.per_device_train_batch_size * args.steps_per_generation)
    assert plan.steps_per_epoch == -(-batches // args.gradient_accumulation_steps)


def test_tail_rows_reports_unseen_indices_and_levels():
    plan = plan_batches({"per_device_train_batch_size": 4, "gradient_accumulation_steps": 1, "num_generations": 2},
                        num_processes=1, num_rows=7)
    tail = tail_rows(plan, indices=[0, 1, 2, 3, 4, 5, 6], levels=[1, 1, 1, 9, 9, 9, 9])
    assert tail["unseen_rows"] == 1 and tail["unseen_curriculum_index"] == [6, 6]
    assert tail["unseen_levels"] == {"9": 1} and tail["steps_per_epoch"] == 3


def test_order_issues():
    ok = {"shuffle_dataset": False, "num_train_epochs": 1}
    assert order_issues(ok) == []
    assert order_issues({"num_train_epochs": 1})[0].setting == "shuffle_dataset"  # TRL's default is True
    issues = {i.setting: i.severity for i in order_issues(
        {"shuffle_dataset": False, "num_train_epochs": 3, "train_sampling_strategy": "group_by_length",
         "ignore_data_skip": True}, resuming=True)}
    assert issues == {"num_train_epochs": "warning", "train_sampling_strategy": "error", "ignore_data_skip": "error"}
    split = order_issues({**ok, "accelerator_config": {"split_batches": True, "dispatch_batches": None}})
    assert [(i.setting, i.severity) for i in split] == [("accelerator_config.split_batches", "error")]
    assert order_issues({**ok, "accelerator_config": {"split_batches": False}}) == []
    plan = plan_batches({"per_device_train_batch_size": 2, "gradient_accumulation_steps": 1, "num_generations": 2,
                         "steps_per_generation": 2}, num_processes=1, num_rows=10)
    issues = {i.setting for i in order_issues({**ok, "max_steps": 50}, plan)}
    assert issues == {"max_steps", "steps_per_generation"}


def test_enforce_refuses_or_warns(caplog):
    issues = order_issues({"shuffle_dataset": True, "num_train_epochs": 1})
    with pytest.raises(CurriculumOrderError, match="order_policy=warn"):
        enforce(issues, "refuse")
    with caplog.at_level(logging.WARNING):
        enforce(issues, "warn")
    assert "CURRICULUM ORDER WILL BE LOST" in caplog.text


def test_check_index_order():
    assert check_index_order([0, 3, 4, 10]) is None  # partitions leave gaps
    assert check_index_order([0, 1, 1]).severity == "error"
    assert check_index_order([0, None]).severity == "warning"


def test_step_recorder(tmp_path, caplog):
    path = tmp_path / "steps.jsonl"
    rec = StepRecorder([0, 1, 2, 3, 4, 5], usable=4, path=path)
    rec.start(0)
    for step, rows in enumerate([[0, 0, 1, 1], [2, 2, 3, 3], [0, 0, 1, 1]], start=1):  # epoch 2 starts over
        rec.add([{"curriculum_index": i, "level": 1 + i, "hops": 2, "prompt": "x"} for i in rows])
        record = rec.end_step(step)
        assert record["in_order"] and record["curriculum_index"] == sorted(set(rows))
    assert rec.end_step(4) is None  # a step that generated nothing (steps_per_generation > accumulation)
    assert len(path.read_text().splitlines()) == 3
    rec.start(2)  # resumed at row 2
    rec.add([{"curriculum_index": 4}])
    with pytest.raises(CurriculumOrderError, match=r"\[4\] where the curriculum has \[2\]"):
        rec.end_step(5)
    warn = StepRecorder([0, 1], usable=2, policy="warn")
    warn.add([{"curriculum_index": 1}, {"curriculum_index": 0}])
    with caplog.at_level(logging.WARNING):
        assert warn.end_step(1)["in_order"] is False
    assert "CURRICULUM ORDER LOST" in caplog.text and warn.out_of_order == 1


@pytest.mark.parametrize(("extra", "steps", "reached"), [
    ({"max_steps": 3}, 3, 6),                       # 3 steps of 2 prompts: rows 0..5 of 20
    ({"num_train_epochs": 0.5}, 5, 10),             # half an epoch: ceil(0.5 x 10) = 5 steps
    ({"max_steps": 3, "num_iterations": 2}, 3, 4),  # 2 steps per generation batch: 2 batches of 2 prompts
    ({"max_steps": 10}, 10, 20),                    # exactly one pass: every row
    ({"max_steps": 25}, 25, 20),                    # more than one pass: every row (and a replay, warned)
])
def test_rows_a_short_run_never_reaches(extra, steps, reached):
    """A run that stops before the end of the curriculum (grpo.max_steps, num_train_epochs < 1) never trains on
    the rows after the last step it takes: in a min-max curriculum, the whole hard half. The plan, the tail
    report and the order checks must say so, not report only the sampler's dropped tail."""
    grpo = {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 2, "num_generations": 2,
            "shuffle_dataset": False, "num_train_epochs": 1, **extra}
    plan = plan_batches(grpo, num_processes=1, num_rows=21)
    assert plan.total_steps == steps and plan.unseen_rows == 1
    assert plan.rows_reached == reached
    levels = [1] * 10 + [9] * 11  # min-max: easy half, then hard half
    tail = tail_rows(plan, indices=list(range(100, 121)), levels=levels)
    assert tail["rows_reached"] == reached and tail["unreached_rows"] == 20 - reached
    short = [i for i in order_issues(grpo, plan) if "only rows" in i.message]
    if reached < 20:
        assert tail["unreached_curriculum_index"] == [100 + reached, 119]
        assert sum(tail["unreached_levels"].values()) == 20 - reached and "9" in tail["unreached_levels"]
        assert len(short) == 1 and short[0].severity == "warning"
        assert short[0].setting == ("max_steps" if "max_steps" in extra else "num_train_epochs")
        assert f"only rows 0..{reached - 1} of the {20} it could" in short[0].message
    else:
        assert "unreached_curriculum_index" not in tail and short == []


def test_rows_reached_matches_what_trl_samples(tmp_path):
    """rows_reached is what TRL's sampler hands the trainer in total_steps optimiser steps."""
    pytest.importorskip("trl")
    from trl import GRPOConfig
    from trl.trainer.utils import RepeatSampler

    for grpo in ({"per_device_train_batch_size": 2, "gradient_accumulation_steps": 2, "num_generations": 2,
                  "max_steps": 3},
                 {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 1, "num_generations": 2,
                  "steps_per_generation": 3, "max_steps": 4},
                 {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 3, "num_generations": 2,
                  "num_iterations": 2, "max_steps": 5}):
        args = GRPOConfig(output_dir=str(tmp_path), bf16=False, use_cpu=True, report_to="none", **grpo)
        n = 41
        plan = plan_batches(grpo, num_processes=1, num_rows=n)
        sampler = RepeatSampler(list(range(n)), mini_repeat_count=args.num_generations,
                                batch_size=args.generation_batch_size // args.num_generations,
                                repeat_count=args.num_iterations * args.steps_per_generation, shuffle=False)
        per_batch = args.per_device_train_batch_size * args.steps_per_generation
        flat = list(sampler)[:plan.total_steps * args.gradient_accumulation_steps * per_batch]
        assert plan.rows_reached == len(set(flat)), grpo


@pytest.mark.parametrize(("step", "ni", "spg", "inside"), [(3, 2, 2, True), (4, 2, 2, False), (3, 1, 2, False),
                                                           (1, 1, 4, True), (2, 1, 4, False)])
def test_resume_inside_a_generation_batch_is_refused(tmp_path, caplog, step, ni, spg, inside):
    """TRL's step counter restarts at 0 on resume: a checkpoint taken inside a generation batch (num_iterations > 1
    or steps_per_generation > gradient_accumulation_steps) regenerates that batch, out of phase, and trains its rows
    again. Refused before anything is generated (warned under the warn policy); a checkpoint at a whole generation
    batch continues exactly."""
    import json
    from types import SimpleNamespace

    from rag_curriculum.train._ledger import rows_done
    from rag_curriculum.train._resume import check_resume

    grpo = {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 2, "num_generations": 2,
            "num_iterations": ni, "steps_per_generation": spg}
    plan = plan_batches(grpo, num_processes=1, num_rows=40).to_dict()
    args = SimpleNamespace(**grpo, ignore_data_skip=False)
    ckpt = tmp_path / f"checkpoint-{step}"
    ckpt.mkdir()
    (ckpt / "curriculum_plan.json").write_text(json.dumps(
        {**plan, "global_step": step, "rows_done": rows_done(step, args, plan["prompts_per_generation"])}))
    if not inside:
        assert check_resume(ckpt, args, plan, policy="refuse").exact
        return
    with pytest.raises(CurriculumOrderError, match="passes into a generation batch, and TRL generates that batch "
                                                   "again on resume") as e:
        check_resume(ckpt, args, plan, policy="refuse", order=list(range(40)))
    assert f"rows_done {rows_done(step, args, plan['prompts_per_generation'])}" in str(e.value)
    assert "trained again" in str(e.value) and "checkpoint-" in str(e.value)
    with caplog.at_level(logging.WARNING):
        assert not check_resume(ckpt, args, plan, policy="warn").exact
    assert "passes into a generation batch" in caplog.text


@pytest.mark.parametrize("grpo", [
    {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 1, "num_generations": 2},
    {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 2, "num_generations": 2},
    {"per_device_train_batch_size": 3, "gradient_accumulation_steps": 2, "num_generations": 2},
    {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 1, "num_generations": 2,
     "steps_per_generation": 2},
    {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 2, "num_generations": 2, "num_iterations": 2},
])
def test_step_layout_matches_trls_sampler_and_slices(tmp_path, grpo):
    """StepLayout.positions(m) is the rows of micro-batch m as TRL makes it (unshuffled): its RepeatSampler's
    batches, generated on the first of every steps_per_generation x num_iterations, cut into steps_per_generation
    slices of per_device_train_batch_size completions."""
    pytest.importorskip("trl")
    from trl import GRPOConfig
    from trl.trainer.utils import RepeatSampler

    from rag_curriculum.train._ledger import StepLayout

    args = GRPOConfig(output_dir=str(tmp_path), bf16=False, use_cpu=True, report_to="none", **grpo)
    n = 24
    layout = StepLayout.from_plan(plan_batches(grpo, num_processes=1, num_rows=n).to_dict())
    sampler = list(RepeatSampler(list(range(n)), mini_repeat_count=args.num_generations,
                                 batch_size=args.generation_batch_size // args.num_generations,
                                 repeat_count=args.num_iterations * args.steps_per_generation, shuffle=False))
    per_batch = args.per_device_train_batch_size * args.steps_per_generation
    batches = [sampler[i:i + per_batch] for i in range(0, len(sampler), per_batch)]
    assert layout.batches_per_epoch == len(batches)
    buffered: list[list[int]] = []
    for m, batch in enumerate(batches):
        if m % (args.steps_per_generation * args.num_iterations) == 0:
            pd = args.per_device_train_batch_size
            buffered = [batch[j * pd:(j + 1) * pd] for j in range(args.steps_per_generation)]
        assert layout.positions(m) == sorted(set(buffered[m % args.steps_per_generation])), (m, grpo)
