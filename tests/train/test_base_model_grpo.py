"""A base model (a tokenizer without a chat template) through GRPO: TRL generates from the completion-style text
of each prompt (rag_curriculum.prompts.completion_prompt, never a borrowed chat template), the rewards score the
response prefix and the completion together (what the trainer trains on), and the run records the prompt style.
A tiny random model stands in for the base model; the real one (Gemma 3 270M) is bench/bench_learning_real.py's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import MUSIQUE_TRAIN

pytestmark = pytest.mark.slow
pytest.importorskip("trl", reason="the `train` extra is needed for training tests")

SEEN: list[dict] = []


class RecordingRagRl:
    """The RAG-RL reward, recording the prompts and completions it is called with."""

    def __init__(self, **kwargs):
        from rag_curriculum.rewards import get_reward

        self.inner = get_reward("rag-rl", **kwargs)
        self.__name__ = self.inner.__name__

    def __call__(self, completions, **kwargs):
        SEEN.append({"prompts": list(kwargs["prompts"]), "completions": list(completions)})
        return self.inner(completions, **kwargs)


@pytest.fixture(scope="module")
def base_model(tmp_path_factory, tiny_model_dir) -> Path:
    from support.tiny_model import without_chat_template

    return without_chat_template(tiny_model_dir, tmp_path_factory.mktemp("tiny-base") / "model")


def test_a_base_model_trains_on_completion_prompts_and_is_rewarded_on_its_whole_response(tmp_path, base_model):
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
    from rag_curriculum.prompts import RAG_RL_RESPONSE_PREFIX, completion_prompt
    from rag_curriculum.rewards import register_reward
    from rag_curriculum.shards import read_rows
    from rag_curriculum.train import compose_train_config, train

    shards = tmp_path / "shards"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), n=4)], schedule="min-max", K=2,
                                 out=str(shards), seed=0))
    register_reward("test-recording-base", RecordingRagRl, overwrite=True)
    SEEN.clear()
    out = tmp_path / "run"
    cfg = compose_train_config("cpu-tiny", [
        f"model.name_or_path={base_model}", f"data.shards={shards}", f"run.output_dir={out}",
        "batch.prompts_per_step=2", "grpo.num_generations=2", "grpo.max_completion_length=8", "grpo.max_steps=1",
        "rewards=[{name: test-recording-base}]", "model.freeze_embeddings=true"])
    result = train(cfg)
    assert result.global_step == 1
    rows = read_rows(shards)[:2]
    want = [completion_prompt(r["prompt"]).text for r in rows for _ in range(2)]
    assert SEEN[0]["prompts"] == want  # the completion-style text, the response prefix at its end
    assert all(p.endswith(RAG_RL_RESPONSE_PREFIX) for p in SEEN[0]["prompts"])
    assert all(c.startswith(RAG_RL_RESPONSE_PREFIX) for c in SEEN[0]["completions"])  # scored with its prefix
    plan = json.loads((out / "train_plan.json").read_text())
    assert plan["prompt_style"]["style"] == "completion"
    assert plan["prompt_style"]["response_prefixes"]["rag-rl"] == RAG_RL_RESPONSE_PREFIX
    config = json.loads((Path(base_model) / "config.json").read_text())  # the model that trained, read from it
    assert (plan["model_settings"]["hidden_size"], plan["model_settings"]["layers"],
            plan["model_settings"]["vocab_size"]) == (config["hidden_size"], config["num_hidden_layers"],
                                                      config["vocab_size"])


def test_a_base_model_with_a_chat_only_setting_is_refused_in_one_line(tmp_path, base_model, min_max_shards):
    from rag_curriculum.errors import ConfigError
    from rag_curriculum.train import compose_train_config, prepare

    cfg = compose_train_config("cpu-tiny", [
        f"model.name_or_path={base_model}", f"data.shards={min_max_shards}", f"run.output_dir={tmp_path / 'run'}",
        "+grpo.chat_template_kwargs={enable_thinking: false}"])
    with pytest.raises(ConfigError, match="has no chat template to pass them to") as e:
        prepare(cfg)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "run").exists()
