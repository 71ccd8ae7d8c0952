"""Every layout a refusal offers is accepted by the same check: TRL's processes 1..64 and verl's nodes 1..8 x GPUs
per node 1..8, at the paper's batch (42 prompts x 7) and at others, each suggestion run through the check again
(pure function calls: no process is started); what keeps the batch is offered first, and an offer that changes
it says so with its number."""

from __future__ import annotations

import pytest

from rag_curriculum.errors import BatchError, ConfigError
from rag_curriculum.train import derive_accumulation
from rag_curriculum.verl.data import verl_layout

#: (prompts per step, generations, completions per device): the paper's, and others a user may choose.
BATCHES = [(42, 7, 7), (42, 7, 14), (64, 8, 8), (32, 5, 4), (42, 7, 1)]


def _trl_ok(prompts: int, generations: int, per_device: int, processes: int) -> bool:
    try:
        derive_accumulation(prompts_per_step=prompts, num_generations=generations, per_device=per_device,
                            num_processes=processes)
    except BatchError:
        return False
    return True


@pytest.mark.parametrize("prompts, generations, per_device", BATCHES)
def test_every_trl_offer_is_accepted(prompts, generations, per_device):
    refused = 0
    for processes in range(1, 65):
        try:
            derive_accumulation(prompts_per_step=prompts, num_generations=generations, per_device=per_device,
                                num_processes=processes)
            continue
        except BatchError as e:
            offered, message = e.offered, str(e)
        refused += 1
        assert offered["batch.prompts_per_step"], message  # a multiple of the pass always fits
        for p in offered["batch.prompts_per_step"]:
            assert _trl_ok(p, generations, per_device, processes), (processes, "prompts", p)
            # an offer that changes the batch says so in the same line, with the number
            assert f"{p} ({p * generations} completions a step instead of {prompts * generations})" in message
        if offered["num_processes"] or offered["batch.per_device_completions"]:  # what keeps the batch comes first
            assert message.index(f"Keeping the {prompts * generations} completions") < message.index(
                "Changing the batch")
        for d in offered["batch.per_device_completions"]:
            assert _trl_ok(prompts, generations, d, processes), (processes, "per_device", d)
        for n in offered["num_processes"]:
            assert _trl_ok(prompts, generations, per_device, n), (processes, "processes", n)
        assert "[]" not in message
    assert refused  # the sweep reaches refusals


def test_trl_offers_at_scale():
    # 4 nodes x 7 GPUs: the paper's batch cannot split; 28 prompts (one per process) and 56 can
    with pytest.raises(BatchError) as e:
        derive_accumulation(prompts_per_step=42, num_generations=7, per_device=7, num_processes=28)
    assert e.value.offered["batch.prompts_per_step"] == [28, 56, 84]
    assert derive_accumulation(prompts_per_step=28, num_generations=7, per_device=7, num_processes=28) == 1
    # 8 processes: 40 and 48 both fit (5 and 6 accumulation steps)
    with pytest.raises(BatchError, match=r"batch.prompts_per_step=32 \(224 completions a step instead of 294\), "
                                          r"40 \(280 completions a step instead of 294\), 48 \("):
        derive_accumulation(prompts_per_step=42, num_generations=7, per_device=7, num_processes=8)


@pytest.mark.parametrize("processes", [28, 32])
def test_trl_offers_keep_the_papers_batch_first(processes):
    """4 nodes: 7 or 8 GPUs each. 21 processes (3 nodes x 7) keep 294 completions a step: offered first, before
    the prompts per step that change it (each with its completions)."""
    with pytest.raises(BatchError) as e:
        derive_accumulation(prompts_per_step=42, num_generations=7, per_device=7, num_processes=processes)
    message, offered = str(e.value), e.value.offered
    assert offered["num_processes"][0] == 21
    assert derive_accumulation(prompts_per_step=42, num_generations=7, per_device=7, num_processes=21) == 2
    keep = message.index("Keeping the 294 completions a step: 21 (3 nodes x 7)")
    change = message.index(f"Changing the batch: batch.prompts_per_step={offered['batch.prompts_per_step'][0]} (")
    assert keep < change


def _verl_ok(*args: int) -> bool:
    try:
        verl_layout(*args)
    except ConfigError:
        return False
    return True


@pytest.mark.parametrize("prompts, rollouts", [(42, 7), (64, 8), (32, 5), (512, 5)])
def test_every_verl_offer_is_accepted(prompts, rollouts):
    refused = 0
    for nnodes in range(1, 9):
        for gpus_per_node in range(1, 9):
            try:
                verl_layout(prompts, rollouts, nnodes, gpus_per_node)
                continue
            except ConfigError as e:
                offered, e_ = e.offered, e  # type: ignore[attr-defined]
            refused += 1
            assert offered["PROMPTS_PER_STEP"]
            for p in offered["PROMPTS_PER_STEP"]:
                assert _verl_ok(p, rollouts, nnodes, gpus_per_node), (nnodes, gpus_per_node, "prompts", p)
            for g in offered["GPUS_PER_NODE"]:
                assert _verl_ok(prompts, rollouts, nnodes, g), (nnodes, gpus_per_node, "gpus", g)
            for n in offered["NNODES"]:
                assert _verl_ok(prompts, rollouts, n, gpus_per_node), (nnodes, gpus_per_node, "nodes", n)
            for n, g in offered["LAYOUTS"]:
                assert n <= nnodes and g <= gpus_per_node and _verl_ok(prompts, rollouts, n, g), (nnodes, g)
            for p in offered["PROMPTS_PER_STEP"]:
                assert f"{p} ({p * rollouts} sequences a step instead of {prompts * rollouts})" in str(e_)
    assert refused


def test_verl_32_gpus_offers_21_gpus_first_then_32_prompts():
    with pytest.raises(ConfigError) as e:
        verl_layout(42, 7, 4, 8)
    offered, message = e.value.offered, str(e.value)  # type: ignore[attr-defined]
    assert offered["PROMPTS_PER_STEP"] == [32, 64] and offered["LAYOUTS"][0] == [3, 7]
    assert verl_layout(42, 7, 3, 7) == 14
    assert message.index("Keeping the 294 sequences a step: NNODES=3 GPUS_PER_NODE=7 (21 GPUs)") < message.index(
        "Changing the batch: PROMPTS_PER_STEP=32 (224 sequences a step instead of 294), 64 (448 sequences")
    assert verl_layout(32, 7, 4, 8) == 7
    assert verl_layout(42, 7, 1, 7) == 42 and verl_layout(42, 7, 6, 7) == 7
