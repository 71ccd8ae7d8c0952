"""End to end on the CPU: a tiny Qwen2-style model built here trains a few GRPO steps (TRL's GRPOTrainer) on shards
built from ../shared/data, through a shipped recipe, with the toolkit's rewards; the rows reach the reward
function in exactly curriculum order; checkpoints are written and a resumed run continues where it stopped."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from conftest import MUSIQUE_TRAIN

from rag_curriculum.shards import shared_path

pytestmark = pytest.mark.slow
pytest.importorskip("trl", reason="the `train` extra is needed for training tests")

ROWS = 7  # 3 steps of 2 prompts, and 1 tail row TRL's sampler never reaches
PROMPTS = 2
GENERATIONS = 2
CALLS: list[dict] = []  # what reached the reward function: (global step, curriculum_index of each completion)


class RecordingRagRl:
    """The toolkit's RAG-RL reward, recording the rows it is called with (registered under a test name)."""

    def __init__(self, **kwargs):
        from rag_curriculum.rewards import get_reward

        self.inner = get_reward("rag-rl", **kwargs)
        self.__name__ = self.inner.__name__

    def __call__(self, completions, **kwargs):
        rewards = self.inner(completions, **kwargs)
        CALLS.append({"step": kwargs["trainer_state"].global_step, "index": list(kwargs["curriculum_index"]),
                      "level": list(kwargs["level"]), "rewards": list(rewards)})
        return rewards


@pytest.fixture(scope="module")
def shards(tmp_path_factory, shared_data, tiny_model_dir) -> Path:
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    out = tmp_path_factory.mktemp("train-shards") / "musique-min-max"
    # K=3 keeps the prompts short (a tiny model on a CPU); min-max: levels 1 then 3. The prompt_tokens column (the
    # model's tokenizer) reaches TRL and the rewards as one more column, and the length check reads it.
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), n=ROWS)], schedule="min-max",
                                 K=3, out=str(out), seed=0, tokenizer=str(tiny_model_dir)))
    return out


def _overrides(model: Path, shards: Path, out: Path, *extra: str) -> list[str]:
    return [
        f"model.name_or_path={model}", f"data.shards={shards}", f"run.output_dir={out}",
        f"batch.prompts_per_step={PROMPTS}", "batch.per_device_completions=2",  # -> gradient accumulation 2
        f"grpo.num_generations={GENERATIONS}", "grpo.max_completion_length=16", "grpo.use_vllm=false",
        "grpo.bf16=false", "grpo.activation_checkpointing=false", "grpo.save_steps=1", "grpo.report_to=none",
        "grpo.dataloader_pin_memory=false", "rewards=[{name: test-recording-rag-rl}]", *extra,
    ]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_model_dir, shards):
    from rag_curriculum.rewards import register_reward
    from rag_curriculum.train import compose_train_config, train

    register_reward("test-recording-rag-rl", RecordingRagRl, overwrite=True)
    out = tmp_path_factory.mktemp("train-run") / "run"
    CALLS.clear()
    cfg = compose_train_config("rag-rl-min-max", _overrides(tiny_model_dir, shards, out))
    result = train(cfg, overrides=["recipe=rag-rl-min-max"])
    return result, [dict(c) for c in CALLS], cfg


def test_trains_with_finite_loss(trained):
    result, calls, _ = trained
    assert result.global_step == 3
    assert math.isfinite(result.training_loss)
    losses = [h["loss"] for h in result.log_history if "loss" in h]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)


def test_rows_reach_the_reward_in_curriculum_order(trained, shards):
    from rag_curriculum.shards import read_rows

    _, calls, _ = trained
    order = [r["curriculum_index"] for r in read_rows(shards)]
    assert order == list(range(ROWS))
    assert [c["step"] for c in calls] == [0, 1, 2]  # one generation batch per optimiser step
    for step, call in enumerate(calls):
        want = order[step * PROMPTS:(step + 1) * PROMPTS]
        assert call["index"] == [i for i in want for _ in range(GENERATIONS)]
    seen = [i for c in calls for i in c["index"][::GENERATIONS]]
    assert seen == order[:ROWS - ROWS % PROMPTS]  # exactly in order; the tail row is never seen
    assert [c["level"][0] for c in calls] == [1, 1, 3]  # min-max with K=3: easy half first


def test_rewards_computed_by_the_toolkit(trained):
    result, calls, _ = trained
    logged = [h for h in result.log_history if "loss" in h]
    for h, call in zip(logged, calls, strict=True):
        # TRL trained on what the toolkit's RAG-RL reward returned ...
        assert h["rewards/rag_rl/mean"] == pytest.approx(sum(call["rewards"]) / len(call["rewards"]))
        # ... and the reward logged its components through TRL's log_metric.
        assert {"rag_rl/answer", "rag_rl/citation", "rag_rl/format", "rag_rl/exact_match"} <= set(h)
        assert h["rag_rl/answer"] + h["rag_rl/citation"] + h["rag_rl/format"] == pytest.approx(
            h["rewards/rag_rl/mean"])


def test_level_of_each_step_logged(trained):
    from rag_curriculum.train import STEPS_FILE, read_steps

    result, _, _ = trained
    logged = [h for h in result.log_history if "loss" in h]
    assert [h["curriculum/level_mean"] for h in logged] == [1.0, 2.0, 3.0]
    assert [h["curriculum/index_first"] for h in logged] == [0.0, 2.0, 4.0]
    steps = read_steps(result.output_dir / STEPS_FILE)
    assert [(s["step"], s["curriculum_index"], s["in_order"]) for s in steps] == [
        (1, [0, 1], True), (2, [2, 3], True), (3, [4, 5], True)]
    assert steps[2]["levels"] == {"3": 2} and "hops_mean" in steps[0]


def test_checkpoints_config_and_plan_saved(trained):
    result, _, cfg = trained
    out = result.output_dir
    assert [p.name for p in result.checkpoints] == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]
    for ckpt in result.checkpoints:
        assert (ckpt / "model.safetensors").exists() and (ckpt / "trainer_state.json").exists()
        assert json.loads((ckpt / "curriculum_plan.json").read_text())["prompts_per_generation"] == PROMPTS
    assert (out / "model.safetensors").exists()  # the final model
    saved = (out / "train_config.yaml").read_text()
    assert "recipe: rag-rl-min-max" in saved and "shuffle_dataset: false" in saved
    plan = json.loads((out / "train_plan.json").read_text())
    assert plan["gradient_accumulation_steps"] == 2 and plan["per_device_train_batch_size"] == 2
    assert plan["tail"]["unseen_rows"] == 1 and plan["tail"]["unseen_curriculum_index"] == [6, 6]
    assert plan["steps_per_epoch"] == 3
    manifest = json.loads((Path(cfg.data.shards) / "manifest.json").read_text())
    assert plan["longest_prompt_tokens"] == manifest["prompt_tokens"]["longest"]["tokens"]
    card = (out / "README.md").read_text()  # the toolkit's card, not TRL's "fine-tuned version of [None]"
    assert "[None]" not in card and "generated_from_trainer" not in card
    for line in (f"| base model | `{shared_path(cfg.model.name_or_path)}` (a local folder) |", "| steps | 3 of 3 |",
                 "| recipe | `rag-rl-min-max`", f"{ROWS} rows of musique (K = 3), built with the `min-max` schedule",
                 "2 prompts x 2 generations per step", "| rewards | `test-recording-rag-rl` (1) |"):
        assert line in card, (line, card)


def test_resume_continues_the_curriculum(trained, tiny_model_dir, shards, tmp_path):
    """Resuming from checkpoint-2 trains step 3 on rows 4, 5: not from the start, not shuffled."""
    from rag_curriculum.train import STEPS_FILE, compose_train_config, read_steps, train

    result, _, _ = trained
    out = tmp_path / "run"
    shutil.copytree(result.output_dir, out, ignore=shutil.ignore_patterns("checkpoint-3"))
    CALLS.clear()
    cfg = compose_train_config("rag-rl-min-max", _overrides(tiny_model_dir, shards, out))
    resumed = train(cfg)
    assert resumed.global_step == 3
    assert [(c["step"], c["index"]) for c in CALLS] == [(2, [4, 4, 5, 5])]
    assert [s["curriculum_index"] for s in read_steps(out / STEPS_FILE)] == [[0, 1], [2, 3], [4, 5]]
    assert json.loads((out / "train_plan.json").read_text())["resume_from"].endswith("checkpoint-2")


def test_resume_with_another_batch_is_refused(trained, tiny_model_dir, shards, tmp_path):
    from types import SimpleNamespace

    from rag_curriculum.train import CurriculumOrderError, compose_train_config, train
    from rag_curriculum.train._ledger import rows_done

    result, _, _ = trained
    out = tmp_path / "run"
    shutil.copytree(result.output_dir, out, ignore=shutil.ignore_patterns("checkpoint-3"))
    # 1 prompt per step: step 2 would end after row 2, and rows 2, 3 would be trained twice.
    cfg = compose_train_config("rag-rl-min-max", _overrides(tiny_model_dir, shards, out, "batch.prompts_per_step=1"))
    with pytest.raises(CurriculumOrderError) as e:
        train(cfg)
    msg = str(e.value)
    assert "checkpoint-2 trained 4 rows (rows_done 4: 2 steps of 2 prompts" in msg, msg
    assert "batch.prompts_per_step=1" in msg and "continue at row 2" in msg, msg
    assert "train rows 2..3 (curriculum_index 2..3) again" in msg and "Resume with batch.prompts_per_step=2" in msg
    assert "GRPOConfig(" not in msg
    # Another batch that still continues after row 4 (3 generations of 2 prompts per step) is accepted.
    args = SimpleNamespace(gradient_accumulation_steps=3, steps_per_generation=3, num_iterations=1)
    assert rows_done(2, args, PROMPTS) == 4


def test_a_finished_run_says_so_and_trains_nothing(trained, tiny_model_dir, shards, tmp_path):
    """Run again after it reached its steps: nothing is trained, no step 4, checkpoint-3 is kept
    as it was, and the run says it is finished (the library's result, the command's last line and its dry run)."""
    from support.cli_runs import run
    from support.cli_runs import tree as files

    from rag_curriculum.train import compose_train_config, train

    result, _, _ = trained
    out = tmp_path / "run"
    shutil.copytree(result.output_dir, out)
    before = files(out)
    overrides = _overrides(tiny_model_dir, shards, out)
    again = train(compose_train_config("rag-rl-min-max", overrides))
    assert again.finished and again.global_step == 3
    assert [p.name for p in again.checkpoints] == ["checkpoint-1", "checkpoint-2", "checkpoint-3"]
    assert files(out) == before  # nothing written, nothing replaced
    for more in ([], ["--dry-run"]):
        r = run("train", "recipe=rag-rl-min-max", *overrides, *more)
        assert r.exit_code == 0, r.output
        text = " ".join(r.output.split())
        assert "is a finished run: checkpoint-3 is step 3 of its 3; nothing to train" in text or (
            "nothing trained" in text and "already reached its 3 steps" in text), text
        assert "run.name=NEW" in text and "ok: binds" not in text
    assert files(out) == before
    r = run("train", "recipe=rag-rl-min-max", *overrides, "grpo.max_steps=4", "--dry-run")  # more steps asked for
    assert r.exit_code == 0 and "resumes from" in r.output and "is a finished run" not in r.output, r.output


def test_resuming_onto_other_data_names_the_way_to_start_fresh(trained, tiny_model_dir, shards, tmp_path):
    from support.cli_runs import one_error, run

    result, _, _ = trained
    out = tmp_path / "run"
    shutil.copytree(result.output_dir, out, ignore=shutil.ignore_patterns("checkpoint-3"))
    r = run("train", "recipe=rag-rl-min-max", *_overrides(tiny_model_dir, shards, out, "data.max_rows=6"))
    assert "num_rows was 7, now 6" in one_error(r)
    assert "run.name=NEW" in r.output and "run.resume=PATH" in r.output


def test_shuffle_refused_before_loading_anything(tiny_model_dir, shards, tmp_path):
    from rag_curriculum.train import CurriculumOrderError, compose_train_config, train

    cfg = compose_train_config("rag-rl-min-max", _overrides(tiny_model_dir, shards, tmp_path / "run",
                                                            "grpo.shuffle_dataset=true"))
    with pytest.raises(CurriculumOrderError, match="shuffle_dataset"):
        train(cfg)
    assert not (tmp_path / "run").exists()


def test_shuffle_dataset_true_is_overridden_and_said(tiny_model_dir, shards, tmp_path, caplog):
    """grpo.shuffle_dataset=true under data.order_policy=warn: the trainer keeps the curriculum order anyway (TRL's
    sampler would shuffle it), says so, and each step's rows are checked and found in order."""
    import logging

    from rag_curriculum.rewards import register_reward
    from rag_curriculum.train import STEPS_FILE, compose_train_config, read_steps, train

    register_reward("test-recording-rag-rl", RecordingRagRl, overwrite=True)
    cfg = compose_train_config("rag-rl-min-max", _overrides(
        tiny_model_dir, shards, tmp_path / "run", "grpo.shuffle_dataset=true", "data.order_policy=warn",
        "grpo.max_steps=1", "run.save_final=false", "grpo.save_strategy=no"))
    with caplog.at_level(logging.WARNING):
        train(cfg)
    steps = read_steps(tmp_path / "run" / STEPS_FILE)
    assert len(steps) == 1 and steps[0]["in_order"] is True and steps[0]["curriculum_index"] == [0, 1]
    assert "would shuffle the curriculum: ignored" in caplog.text and "CURRICULUM ORDER LOST" not in caplog.text
