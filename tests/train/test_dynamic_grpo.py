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


def _spy(monkeypatch, seen: list):
    """Record the rows (their loss mask and advantages) of every micro-batch TRL's loss is computed on."""
    from trl import GRPOTrainer

    from rag_curriculum.train._dynamic import POSITION_KEY

    inner = GRPOTrainer._compute_loss

    def spy(self, model, inputs):
        seen.append({"step": self.state.global_step, "position": inputs[POSITION_KEY].tolist(),
                     "tokens": inputs["completion_mask"].sum(1).tolist(), "advantages": inputs["advantages"].tolist()})
        return inner(self, model, inputs)

    monkeypatch.setattr(GRPOTrainer, "_compute_loss", spy)


def _run(model, shards, out, *extra):
    from rag_curriculum.train import compose_train_config, train

    CALLS.clear()
    # one refill at most, dropped rows retried one batch later: the run meets every case (see the first test)
    cfg = compose_train_config("rag-rl-min-max", [
        f"model.name_or_path={model}", f"data.shards={shards}", f"run.output_dir={out}",
        "batch.prompts_per_step=2", "batch.per_device_completions=2", "grpo.num_generations=2",
        "grpo.max_completion_length=4", "grpo.use_vllm=false", "grpo.bf16=false", "grpo.beta=0",
        "grpo.activation_checkpointing=false", "grpo.report_to=none", "grpo.dataloader_pin_memory=false",
        "grpo.max_steps=3", "grpo.save_steps=2", "run.save_final=false", "rewards=[{name: test-planned}]",
        "dynamic.enabled=true", "dynamic.max_refills=1", "dynamic.dropped=retry", "dynamic.retry_after=1", *extra])
    return train(cfg), [list(c) for c in CALLS]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_model_dir, shards):
    from _pytest.monkeypatch import MonkeyPatch

    mp, seen = MonkeyPatch(), []
    _spy(mp, seen)
    try:
        result, calls = _run(tiny_model_dir, shards, tmp_path_factory.mktemp("dynamic-run") / "run")
    finally:
        mp.undo()
    return result, calls, seen


def test_constant_groups_never_reach_the_loss(trained):
    result, calls, seen = trained
    # Batch 1: rows 0, 1 -> 1 constant: half informative, 1 missing group -> refill 2 rows: 2 (constant), 3.
    # Batch 2: 4, 5 (constant) -> refill 6, 7 (rate 3/6); 6 fills the batch, 7 is given back.
    # Batch 3: the retries of 1 and 2 (dropped in batch 1, due one batch later) -> refill 7, 8 (8 constant): the
    # one refill is spent with one slot short. Each call scores its rows' groups of 2, in curriculum order.
    assert calls == [[0, 0, 1, 1], [2, 2, 3, 3], [4, 4, 5, 5], [6, 6, 7, 7], [1, 1, 2, 2], [7, 7, 8, 8]]
    counted = {p for s in seen for p, t in zip(s["position"], s["tokens"], strict=True) if t > 0}
    assert counted == {0, 3, 4, 6, 7}  # the informative groups, each trained once
    assert not CONSTANT & counted
    by_step: dict[int, set] = {}
    for s in seen:
        by_step.setdefault(s["step"], set()).update(s["position"])
    # the slot left short holds a dropped group (row 1) whose tokens are all masked and whose advantage is 0
    assert by_step == {0: {0, 3}, 1: {4, 6}, 2: {7, 1}}
    masked = [(t, a) for s in seen for p, t, a in zip(s["position"], s["tokens"], s["advantages"], strict=True)
              if p == 1]
    assert masked == [(0, 0.0), (0, 0.0)]
    assert result.global_step == 3


def test_dropped_rows_recorded_and_metrics_logged(trained):
    from rag_curriculum.train import STEPS_FILE, read_steps
    from rag_curriculum.train._dynamic import PLOT_FILE, read_records

    result, _, _ = trained
    records = read_records(result.dynamic_file)
    assert [r["generated"] for r in records] == [[0, 1, 2, 3], [4, 5, 6, 7], [1, 2, 7, 8]]
    assert [r["trained"] for r in records] == [[0, 3], [4, 6], [7]]
    assert [r["dropped"] for r in records] == [[1, 2], [5], [1, 2, 8]]
    assert [r["requeued"] for r in records] == [[1, 2], [5], [8]]  # dropped: retry
    assert [r["retired"] for r in records] == [[], [], [1, 2]]  # retried once (max_retries 1), then retired
    assert [r["rewound"] for r in records] == [[], [7], []]
    assert [r["masked_groups"] for r in records] == [0, 0, 1]
    assert [r["refills"] for r in records] == [1, 1, 1]
    assert [r["generation_per_informative_group"] for r in records] == [2.0, 2.0, 4.0]
    assert [s["curriculum_index"] for s in read_steps(result.output_dir / STEPS_FILE)] == [[0, 3], [4, 6], [7]]
    logged = [h for h in result.log_history if "loss" in h]
    assert [h["dynamic/informative_fraction"] for h in logged] == [0.5, 0.75, 0.25]
    assert [h["dynamic/trained_informative_fraction"] for h in logged] == [1.0, 1.0, 0.5]
    assert [h["dynamic/refills"] for h in logged] == [1.0, 1.0, 1.0]
    assert [h["dynamic/retired_rows"] for h in logged] == [0.0, 0.0, 2.0]
    assert [h["dynamic/masked_groups"] for h in logged] == [0.0, 0.0, 1.0]
    assert (result.output_dir / PLOT_FILE).stat().st_size > 1000
    state = json.loads((result.output_dir / "checkpoint-2" / "curriculum_dynamic.json").read_text())
    assert state["cursor"] == 7 and state["retries"] == [[1, 2, 1], [2, 2, 1], [5, 3, 1]]


def test_resume_trains_the_same_rows(trained, tiny_model_dir, shards, tmp_path, monkeypatch):
    from rag_curriculum.train._dynamic import read_records

    result, _, _ = trained
    out = tmp_path / "run"
    shutil.copytree(result.output_dir, out, ignore=shutil.ignore_patterns("checkpoint-3"))
    seen: list = []
    _spy(monkeypatch, seen)
    resumed, calls = _run(tiny_model_dir, shards, out)
    assert resumed.global_step == 3
    # the filter's state continued: the retries first, then row 7 given back; not rows 4, 5 (the sampler's)
    assert calls == [[1, 1, 2, 2], [7, 7, 8, 8]]
    assert {p for s in seen for p, t in zip(s["position"], s["tokens"], strict=True) if t > 0} == {7}
    timing = ("filter_seconds", "generation_seconds")
    strip = lambda recs: [{k: v for k, v in r.items() if k not in timing} for r in recs]  # noqa: E731
    assert strip(read_records(resumed.dynamic_file)) == strip(read_records(result.dynamic_file))
