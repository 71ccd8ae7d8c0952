"""Pass-rate-aware training: the stats.parquet of a real `curriculum partition` run (a scripted base model on real
MuSiQue rows) orders the curriculum (questions outside the learnable band deferred or skipped) and warm-starts the
adaptive controller; a real TRL run on the tiny model trains the rows in that order, at the warm-started level."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import MUSIQUE_TRAIN

from rag_curriculum.errors import ConfigError
from rag_curriculum.train._pass_rates import PassRate, band_order, read_pass_rates, warm_start
from rag_curriculum.train.controllers import make_controller

#: Correct samples of 4 per question (curriculum position): pass rates 1, 0, .5, .25, 1, .75, 0, .5.
C = [4, 0, 2, 1, 4, 3, 0, 2]
CALLS: list[dict] = []


def test_band_defers_or_skips_and_keeps_unmeasured_rows_in_place():
    rates = {k: PassRate(k, 1, 4, c) for k, c in zip("abcde", [4, 0, 2, 1, 3], strict=True)}
    ids = ["a", "x", "b", "c", "d", "e"]
    d = band_order(ids, rates, pass_min=0.25, pass_max=0.75)
    assert d.order == [1, 3, 4, 5, 0, 2] and d.deferred == ["a", "b"] and d.unmeasured == ["x"] and d.in_band == 3
    s = band_order(ids, rates, pass_min=0.25, pass_max=0.75, outside="skip")
    assert s.order == [1, 3, 4, 5] and s.skipped == ["a", "b"]
    assert band_order(ids, rates, pass_max=0.5).order == [1, 2, 3, 4, 0, 5]  # pass_min null: 0
    with pytest.raises(ConfigError, match="band is empty"):
        band_order(ids, rates, pass_min=0.8, pass_max=0.2)


def test_read_refuses_what_is_not_a_partition_stats_file(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        read_pass_rates(tmp_path)
    pq.write_table(pa.table({"id": ["a"], "n": [4]}), tmp_path / "stats.parquet")
    with pytest.raises(ConfigError, match="no column level, c, pass_rate"):
        read_pass_rates(tmp_path)
    pq.write_table(pa.table({"id": ["a", "b"], "level": [1, 1], "n": [4, None], "c": [5, None],
                             "pass_rate": [1.0, None]}), tmp_path / "stats.parquet")
    with pytest.raises(ConfigError, match=r"row 0 \(id a\): c = 5 of n = 4"):
        read_pass_rates(tmp_path / "stats.parquet")


def test_warm_start_moves_the_controllers_from_the_measured_samples():
    rates = {"a": PassRate("a", 2, 4, 4), "b": PassRate("b", 2, 4, 0), "c": PassRate("c", 2, 4, 2)}
    tb = make_controller("target-band", K=3, eta=3.0, alpha=2.0, target=0.25)
    info = warm_start(tb, [("a", 3), ("b", 3), ("c", 3), ("z", 3)], rates)
    assert info["questions"] == 3 and info["success"] == 0.5  # 6 of 12 samples
    assert tb.levels([("q", 3)]) == [2] and tb.batch == 1  # T = 1 + 3 tanh(0.5) = 2.39, not level 1
    m = make_controller("mastery", K=3, new="start")
    warm_start(m, [("a", 3), ("b", 3), ("c", 3)], rates)
    assert m.levels([("a", 3), ("b", 3), ("c", 3), ("new", 3)]) == [3, 1, 2, 1]  # up, down, kept; unseen: start
    with pytest.raises(ConfigError, match="none of the curriculum's questions"):
        warm_start(make_controller("mastery", K=3), [("z", 3)], rates)


def test_settings_need_the_pass_rates(tmp_path):
    from rag_curriculum.train import TrainConfig

    base = {"curriculum": "max", "data": {"shards": "x"}, "model": {"name_or_path": "m"}}
    with pytest.raises(ConfigError, match="data.pass_rates, which is not set"):
        TrainConfig.from_dict({**base, "data": {"shards": "x", "pass_min": 0.1}}).validate()
    with pytest.raises(ConfigError, match="data.pass_rates=.*nope: no such file"):  # before any model is loaded
        TrainConfig.from_dict({**base, "data": {"shards": "x", "pass_rates": str(tmp_path / "nope")}}).validate()
    (tmp_path / "stats.parquet").write_bytes(b"")
    with pytest.raises(ConfigError, match="success=exact_match"):
        TrainConfig.from_dict({**base, "data": {"shards": "x", "pass_rates": str(tmp_path)},
                               "adaptive": {"controller": "mastery", "from_pass_rates": True,
                                            "success": "reward"}}).validate()


class Script:
    """The scripted base model of the partition: question i is right in its first C[i] samples."""

    def __init__(self, rows):
        self.by_prompt = {r["prompt"][-1]["content"]: (i, r["answers"][0]) for i, r in enumerate(rows)}

    def __call__(self, messages, n, seed):
        i, answer = self.by_prompt[messages[-1]["content"]]
        return [f"<reasoning>\nx\n</reasoning>\n<answer>\nFinal answer: {answer if j < C[i] else 'zzzq'}\n"
                "Supporting passages: x\n</answer>" for j in range(n)]


class Recording:
    """One right and one wrong completion per group, except row 3: every completion the same (a group dynamic
    sampling drops)."""

    __name__ = "recording"

    def __call__(self, completions, curriculum_index, level, **kwargs):
        CALLS.append({"index": list(curriculum_index), "level": list(level)})
        return [1.0 if idx == 3 else float(i % 2) for i, idx in enumerate(curriculum_index)]


@pytest.fixture(scope="module")
def measured(tmp_path_factory, shared_data, tiny_model_dir):
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
    from rag_curriculum.generation._scripted import ScriptedBackend
    from rag_curriculum.partition import PartitionConfig, partition
    from rag_curriculum.rewards import register_reward
    from rag_curriculum.shards import read_rows

    register_reward("test-pass-recording", Recording, overwrite=True)
    work = tmp_path_factory.mktemp("pass-rates")
    shards = work / "musique-adaptive"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), n=len(C))], schedule="adaptive",
                                 K=3, out=str(shards), seed=0, tokenizer=str(tiny_model_dir)))
    rows = read_rows(shards)
    res = partition(PartitionConfig(shards=str(shards), out=str(work / "part"), backend="scripted", samples=4,
                                    chunk_size=8), backend=ScriptedBackend(script=Script(rows)), command="test")
    assert res.complete
    return shards, work / "part"


@pytest.mark.slow
def test_real_run_trains_the_band_first_at_the_warm_started_level(measured, tiny_model_dir, tmp_path):
    """With dynamic sampling too: the controller scores every generation call, the dropped group's included, and
    the refill is rendered at the level it moved to."""
    from rag_curriculum.train import compose_train_config, train

    shards, part = measured
    from rag_curriculum.shards import read_rows

    rates = read_pass_rates(part)  # joined on the rows' id: the partition keeps them
    assert [rates[r["id"]].rate for r in read_rows(shards)] == [c / 4 for c in C]
    CALLS.clear()
    cfg = compose_train_config("rag-rl-adaptive", [
        f"model.name_or_path={tiny_model_dir}", f"data.shards={shards}", f"run.output_dir={tmp_path / 'run'}",
        "batch.prompts_per_step=2", "batch.per_device_completions=2", "grpo.num_generations=2",
        "grpo.max_completion_length=4", "grpo.use_vllm=false", "grpo.bf16=false", "grpo.beta=0",
        "grpo.activation_checkpointing=false", "grpo.report_to=none", "grpo.dataloader_pin_memory=false",
        "grpo.max_steps=2", "grpo.save_strategy=no", "run.save_final=false", "adaptive.plot=false",
        "rewards=[{name: test-pass-recording}]", f"data.pass_rates={part}", "data.pass_min=0.1",
        "data.pass_max=0.9", "adaptive.from_pass_rates=true", "adaptive.kwargs.eta=3.0",
        "adaptive.kwargs.target=0.25", "dynamic.enabled=true"])
    train(cfg)
    # in band (0.1..0.9): positions 2, 3, 5, 7 first; 0, 1, 4, 6 deferred behind them. Row 3's group is constant:
    # dropped, refilled with 5 and 7 (half informative so far); 5 fills the batch, 7 is given back and comes first
    # in the next batch, then the first deferred row.
    assert [c["index"] for c in CALLS] == [[2, 2, 3, 3], [5, 5, 7, 7], [7, 7, 0, 0]]
    # the partition's 16 of 32 samples right as the first batch: T = 1 + 3 tanh(2 (0.5 - 0.25)) = 2.39 -> level 2;
    # the tiny model answers nothing right, so after that call T falls to 1 and the refill is shown at level 1
    assert [c["level"] for c in CALLS] == [[2, 2, 2, 2], [1, 1, 1, 1], [1, 1, 1, 1]]
    plan = json.loads((tmp_path / "run" / "train_plan.json").read_text())
    assert plan["pass_rates"]["deferred"] == 4 and plan["pass_rates"]["in_band"] == 4
    assert plan["warm_start"]["questions"] == 8 and plan["warm_start"]["success"] == 0.5
