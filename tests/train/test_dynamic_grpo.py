"""Dynamic sampling on TRL's GRPOTrainer, on the CPU: a tiny Qwen2-style model, a min-max curriculum of real MuSiQue
rows, a planned reward under which some rows' groups are constant. Those groups never reach the loss (what TRL's
loss saw is recorded), the refills are the next rows in curriculum order, and a run resumed from a checkpoint trains
the same rows as the uninterrupted one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import MUSIQUE_TRAIN

pytestmark = pytest.mark.slow
pytest.importorskip("trl", reason="the `train` extra is needed for training tests")

ROWS = 12
CONSTANT = {1, 2, 5, 8}  # rows whose every completion gets the same reward
CALLS: list[list[int]] = []  # curriculum_index of each completion scored, per reward call
LOSS: list[dict] = []  # what TRL's loss saw, per micro-batch


class Planned:
    """1.0 for every completion of a CONSTANT row; 0, 1, 0, 1... (each group of 2: one right, one wrong) else."""

    __name__ = "planned"

    def __call__(self, completions, curriculum_index, **kwargs):
        CALLS.append(list(curriculum_index))
        return [1.0 if idx in CONSTANT else float(i % 2) for i, idx in enumerate(curriculum_index)]


@pytest.fixture(scope="module")
def shards(tmp_path_factory, shared_data, tiny_model_dir) -> Path:
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
    from rag_curriculum.rewards import register_reward

    register_reward("test-planned", Planned, overwrite=True)
    out = tmp_path_factory.mktemp("dynamic-shards") / "musique-min-max"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), n=ROWS)], schedule="min-max",
                                 K=3, out=str(out), seed=0, tokenizer=str(tiny_model_dir)))
    return out


@pytest.fixture
def loss_spy(monkeypatch):
    """Record the rows (and their loss mask) of every micro-batch TRL's loss is computed on."""
    from trl import GRPOTrainer

    from rag_curriculum.train.dynamic import POSITION_KEY

    inner = GRPOTrainer._compute_loss

    def spy(self, model, inputs):
        LOSS.append({"step": self.state.global_step, "position": inputs[POSITION_KEY].tolist(),
                     "tokens": inputs["completion_mask"].sum(1).tolist(), "advantages": inputs["advantages"].tolist()})
        return inner(self, model, inputs)

    monkeypatch.setattr(GRPOTrainer, "_compute_loss", spy)
    LOSS.clear()
    return LOSS


def _run(model, shards, out, *extra):
    from rag_curriculum.train import compose_train_config, train

    CALLS.clear()
    cfg = compose_train_config("rag-rl-min-max", [
        f"model.name_or_path={model}", f"data.shards={shards}", f"run.output_dir={out}",
        "batch.prompts_per_step=2", "batch.per_device_completions=2", "grpo.num_generations=2",
        "grpo.max_completion_length=4", "grpo.use_vllm=false", "grpo.bf16=false", "grpo.beta=0",
        "grpo.activation_checkpointing=false", "grpo.report_to=none", "grpo.dataloader_pin_memory=false",
        "grpo.max_steps=3", "grpo.save_steps=2", "run.save_final=false", "rewards=[{name: test-planned}]",
        "dynamic.enabled=true", *extra])
    return train(cfg), [list(c) for c in CALLS]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_model_dir, shards):
    from _pytest.monkeypatch import MonkeyPatch

    mp = MonkeyPatch()
    from trl import GRPOTrainer

    from rag_curriculum.train.dynamic import POSITION_KEY

    inner = GRPOTrainer._compute_loss
    seen: list[dict] = []

    def spy(self, model, inputs):
        seen.append({"step": self.state.global_step, "position": inputs[POSITION_KEY].tolist(),
                     "tokens": inputs["completion_mask"].sum(1).tolist()})
        return inner(self, model, inputs)

    mp.setattr(GRPOTrainer, "_compute_loss", spy)
    try:
        result, calls = _run(tiny_model_dir, shards, tmp_path_factory.mktemp("dynamic-run") / "run")
    finally:
        mp.undo()
    return result, calls, seen


def test_constant_groups_never_reach_the_loss(trained):
    result, calls, seen = trained
    # batch 1: rows 0, 1 -> 1 constant; half informative so far: 1 missing group -> refill 2 rows, 2 (constant),
    # 3. Batch 2: 4, 5 (constant) -> refill 6, 7 (informative rate 3/6); 6 fills the batch, 7 is given back.
    # Batch 3: 7, 8 (constant) -> refill 9, 10 (rate 6/10); 10 given back. Each call scores its rows' groups of
    # 2, in curriculum order.
    assert calls == [[0, 0, 1, 1], [2, 2, 3, 3], [4, 4, 5, 5], [6, 6, 7, 7], [7, 7, 8, 8], [9, 9, 10, 10]]
    trained_rows = sorted({p for s in seen for p in s["position"]})
    assert trained_rows == [0, 3, 4, 6, 7, 9]
    assert not CONSTANT & set(trained_rows)
    assert all(t > 0 for s in seen for t in s["tokens"])  # nothing masked: every slot holds an informative group
    by_step: dict[int, set] = {}
    for s in seen:
        by_step.setdefault(s["step"], set()).update(s["position"])
    assert by_step == {0: {0, 3}, 1: {4, 6}, 2: {7, 9}}
    assert result.global_step == 3


def test_dropped_rows_recorded_and_metrics_logged(trained):
    from rag_curriculum.train import STEPS_FILE, read_steps
    from rag_curriculum.train.dynamic import PLOT_FILE, read_records

    result, _, _ = trained
    records = read_records(result.dynamic_file)
    assert [r["generated"] for r in records] == [[0, 1, 2, 3], [4, 5, 6, 7], [7, 8, 9, 10]]
    assert [r["rewound"] for r in records] == [[], [7], [10]]
    assert [r["trained"] for r in records] == [[0, 3], [4, 6], [7, 9]]
    assert [r["dropped"] for r in records] == [[1, 2], [5], [8]]
    assert [r["retired"] for r in records] == [[1, 2], [5], [8]]  # dropped: retire (the default)
    assert [r["refills"] for r in records] == [1, 1, 1]
    assert [r["generation_per_informative_group"] for r in records] == [2.0, 2.0, 2.0]
    assert [s["curriculum_index"] for s in read_steps(result.output_dir / STEPS_FILE)] == [[0, 3], [4, 6], [7, 9]]
    logged = [h for h in result.log_history if "loss" in h]
    assert [h["dynamic/informative_fraction"] for h in logged] == [0.5, 0.75, 0.75]
    assert [h["dynamic/trained_informative_fraction"] for h in logged] == [1.0, 1.0, 1.0]
    assert [h["dynamic/refills"] for h in logged] == [1.0, 1.0, 1.0]
    assert [h["dynamic/retired_rows"] for h in logged] == [2.0, 3.0, 4.0]
    assert (result.output_dir / PLOT_FILE).stat().st_size > 1000
    state = json.loads((result.output_dir / "checkpoint-2" / "curriculum_dynamic.json").read_text())
    assert state["cursor"] == 7 and state["totals"]["retired_rows"] == 3


def test_resume_trains_the_same_rows(trained, tiny_model_dir, shards, tmp_path, loss_spy):
    from rag_curriculum.train.dynamic import read_records

    result, _, _ = trained
    out = tmp_path / "run"
    shutil.copytree(result.output_dir, out, ignore=shutil.ignore_patterns("checkpoint-3"))
    resumed, calls = _run(tiny_model_dir, shards, out)
    assert resumed.global_step == 3
    assert calls == [[7, 7, 8, 8], [9, 9, 10, 10]]  # the filter's cursor continued: not rows 4, 5 (the sampler's)
    assert sorted({p for s in loss_spy for p in s["position"]}) == [7, 9]
    assert read_records(resumed.dynamic_file) == read_records(result.dynamic_file)[:2] + [
        {**read_records(result.dynamic_file)[2], **{k: read_records(resumed.dynamic_file)[2][k] for k in
                                                     ("filter_seconds", "generation_seconds")}}]


def test_short_batch_masks_the_dropped_groups(tiny_model_dir, shards, tmp_path, loss_spy):
    """max_refills=0: a batch with a constant group trains it with a zero loss mask; dropped rows are retried."""
    from rag_curriculum.train.dynamic import read_records

    result, calls = _run(tiny_model_dir, shards, tmp_path / "run", "dynamic.max_refills=0", "grpo.max_steps=2",
                         "grpo.save_strategy=no", "dynamic.dropped=retry", "dynamic.retry_after=0")
    assert calls == [[0, 0, 1, 1], [1, 1, 2, 2]]  # row 1 dropped, retried first in the next batch
    first = [s for s in loss_spy if s["step"] == 0]
    tokens = {p: t for s in first for p, t in zip(s["position"], s["tokens"], strict=True)}
    assert tokens[1] == 0 and tokens[0] > 0  # the constant group is in the batch, but none of its tokens count
    assert all(a == 0.0 for s in first for p, a in zip(s["position"], s["advantages"], strict=True) if p == 1)
    records = read_records(result.dynamic_file)
    assert [r["masked_groups"] for r in records] == [1, 2]
    assert [r["requeued"] for r in records] == [[1], [2]]
    assert [r["retired"] for r in records] == [[], [1]]  # retried once (max_retries 1), then retired
