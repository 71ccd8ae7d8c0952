"""Adaptive curricula on TRL's GRPOTrainer, on the CPU: a tiny Qwen2-style model, adaptive shards of real MuSiQue
rows (K = 3), scripted rewards. The level climbs to K when every completion is right, falls to 1 when none is,
settles where the success is the target, and a run resumed from a checkpoint continues the same levels; the rows
reach the reward rendered at the level the controller chose."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import MUSIQUE_TRAIN

pytestmark = pytest.mark.slow
pytest.importorskip("trl", reason="the `train` extra is needed for training tests")

K = 3
CALLS: list[dict] = []


class Scripted:
    """value: a constant reward; by_level: completion i of a group of 2 is right when i < 3 - level (level 1: both,
    2: one, 3: none)."""

    __name__ = "scripted"

    def __init__(self, value: float | None = None):
        self.value = value

    def __call__(self, completions, level, prompts, curriculum_index, **kwargs):
        CALLS.append({"step": kwargs["trainer_state"].global_step, "level": list(level),
                      "index": list(curriculum_index), "prompt": prompts[0][-1]["content"]})
        if self.value is not None:
            return [self.value] * len(completions)
        return [1.0 if i % 2 < 3 - lv else 0.0 for i, lv in enumerate(level)]


@pytest.fixture(scope="module")
def shards(tmp_path_factory, shared_data, tiny_model_dir) -> Path:
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
    from rag_curriculum.rewards import register_reward

    register_reward("test-scripted", Scripted, overwrite=True)
    out = tmp_path_factory.mktemp("adaptive-shards") / "musique-adaptive"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), n=8)], schedule="adaptive",
                                 K=K, out=str(out), seed=0, tokenizer=str(tiny_model_dir)))
    return out


def _run(model, shards, out, steps, *extra):
    from rag_curriculum.train import compose_train_config, train

    CALLS.clear()
    cfg = compose_train_config("rag-rl-adaptive", [
        f"model.name_or_path={model}", f"data.shards={shards}", f"run.output_dir={out}",
        "batch.prompts_per_step=1", "batch.per_device_completions=2", "grpo.num_generations=2",
        "grpo.max_completion_length=4", "grpo.use_vllm=false", "grpo.bf16=false", "grpo.beta=0",
        "grpo.activation_checkpointing=false", "grpo.report_to=none", "grpo.dataloader_pin_memory=false",
        f"grpo.max_steps={steps}", "run.save_final=false", *extra])
    return train(cfg), [dict(c) for c in CALLS]


def test_level_climbs_to_K_when_every_completion_is_right(tiny_model_dir, shards, tmp_path):
    from rag_curriculum.curricula.adaptive import LevelRenderer
    from rag_curriculum.shards import read_manifest, read_rows
    from rag_curriculum.train.adaptive import read_levels

    result, calls = _run(tiny_model_dir, shards, tmp_path / "run", 4, "grpo.save_strategy=no",
                         "rewards=[{name: test-scripted, kwargs: {value: 1.0}}]", "adaptive.success=reward")
    # AdaRFT with eta 1, alpha 2: T = 1, 1.76, 2.52, 3 -> levels 1, 2, 3, 3 (K reached in 3 steps)
    assert [c["level"] for c in calls] == [[1, 1], [2, 2], [3, 3], [3, 3]]
    assert [c["index"] for c in calls] == [[0, 0], [1, 1], [2, 2], [3, 3]]  # curriculum order and groups kept
    rows = read_rows(shards)
    renderer = LevelRenderer(read_manifest(shards))
    for c in calls:  # the prompt generated from is the row rendered at the chosen level
        i, level = c["index"][0], c["level"][0]
        assert c["prompt"] == renderer.render([rows[i]], [level])[0]["prompt"][-1]["content"]
    logged = [h for h in result.log_history if "loss" in h]
    assert [h["curriculum/level_mean"] for h in logged] == [1.0, 2.0, 3.0, 3.0]
    assert [round(h["curriculum/level_target"], 3) for h in logged] == [1.0, 1.762, 2.523, 3.0]
    assert [h["curriculum/success"] for h in logged] == [1.0] * 4
    assert [r["level_mean"] for r in read_levels(result.levels_file)] == [1.0, 2.0, 3.0, 3.0]
    png = result.output_dir / "curriculum_levels.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_level_falls_to_1_when_none_is_right(tiny_model_dir, shards, tmp_path):
    # mastery, success by exact match: the tiny random model never answers right
    result, calls = _run(tiny_model_dir, shards, tmp_path / "run", 3, "grpo.save_strategy=no",
                         "rewards=[{name: test-scripted, kwargs: {value: 0.0}}]", "adaptive.controller=mastery",
                         "adaptive.success=exact_match", "adaptive.kwargs.start=3", "adaptive.plot=false")
    assert [c["level"] for c in calls] == [[3, 3], [2, 2], [1, 1]]
    assert [h["curriculum/success"] for h in result.log_history if "loss" in h] == [0.0] * 3
    assert not (result.output_dir / "curriculum_levels.png").exists()


@pytest.fixture(scope="module")
def settling(tiny_model_dir, shards, tmp_path_factory):
    out = tmp_path_factory.mktemp("settle") / "run"
    return _run(tiny_model_dir, shards, out, 4, "grpo.save_steps=2", "rewards=[{name: test-scripted}]",
                "adaptive.success=reward", "adaptive.kwargs.start=3")


def test_target_half_settles_at_the_level_where_half_is_right(settling):
    result, calls = settling
    # level 3: none right -> T 2.24; level 2: half right -> T stays: the level where success = target
    assert [c["level"][0] for c in calls] == [3, 2, 2, 2]
    assert [h["curriculum/success"] for h in result.log_history if "loss" in h] == [0.0, 0.5, 0.5, 0.5]
    state = json.loads((result.output_dir / "checkpoint-2" / "curriculum_controller.json").read_text())
    assert state["name"] == "target-band" and state["batch"] == 2 and round(state["T"], 3) == 2.238


def test_resume_continues_the_level_sequence(settling, tiny_model_dir, shards, tmp_path):
    from rag_curriculum.train.adaptive import read_levels

    result, calls = settling
    out = tmp_path / "run"
    shutil.copytree(result.output_dir, out, ignore=shutil.ignore_patterns("checkpoint-4"))
    resumed, again = _run(tiny_model_dir, shards, out, 4, "grpo.save_steps=2", "rewards=[{name: test-scripted}]",
                          "adaptive.success=reward", "adaptive.kwargs.start=3")
    # steps 3 and 4 again, from the restored T (a fresh controller would start at level 3)
    assert [(c["step"], c["level"], c["index"]) for c in again] == [
        (c["step"], c["level"], c["index"]) for c in calls[2:]]
    assert read_levels(out / "curriculum_levels.jsonl") == read_levels(result.levels_file)


def test_fixed_shards_refused_for_a_controller(tiny_model_dir, tmp_path, min_max_shards):
    from rag_curriculum.errors import ShardError

    with pytest.raises(ShardError, match="'min-max' curriculum, not an adaptive one"):
        _run(tiny_model_dir, min_max_shards, tmp_path / "run", 1, "rewards=[{name: test-scripted}]")
    assert not list((tmp_path / "run").glob("checkpoint-*"))
