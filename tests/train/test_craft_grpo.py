"""CRAFT on the CPU: a tiny Qwen2-style model trains GRPO steps (TRL's GRPOTrainer) through the shipped craft-v1
recipe, on a MuSiQue + HotpotQA mixture built from ../shared/data in the craft-v1 format, with the CRAFT reward
(format gate, answer SoftF1, evidence F1, and a scripted judge): TRL trains on what the toolkit's reward returns,
the reward reads the numbered rows, and its terms are logged."""

from __future__ import annotations

import math

import pytest
from conftest import HOTPOT_TRAIN, MUSIQUE_TRAIN

pytestmark = pytest.mark.slow
pytest.importorskip("trl", reason="the `train` extra is needed for training tests")

CALLS: list[dict] = []
JUDGED: list[str] = []
VALID = ("<plan>Q1?</plan><gold_docs>[1]</gold_docs><reason>document [1] says so</reason><answer>x</answer>")


def judge_script(messages, n, seed):
    JUDGED.append(messages[-1]["content"])
    return ['{"plan_reason": 1, "citations": 1, "reason_answer": 1, "grounding": 0}'] * n


class RecordingCraft:
    """The toolkit's CRAFT reward with a scripted judge, recording what it is called with; the first completion
    of each batch is replaced by a format-valid trace, so the judge is exercised inside the trainer too."""

    def __init__(self, **kwargs):
        from rag_curriculum.generation._scripted import ScriptedBackend
        from rag_curriculum.methods.craft._judge import CraftJudge
        from rag_curriculum.rewards import get_reward

        self.inner = get_reward("craft", judge=CraftJudge(backend=ScriptedBackend(script=judge_script),
                                                          cache_dir=None), **kwargs)
        self.__name__ = self.inner.__name__

    def __call__(self, completions, **kwargs):
        completions = [[{"role": "assistant", "content": VALID}], *completions[1:]]
        rewards = self.inner(completions, **kwargs)
        CALLS.append({"completions": [c[0]["content"] for c in completions], "rewards": list(rewards),
                      **{k: list(kwargs[k]) for k in ("answers", "gold_labels", "template", "passages")}})
        return rewards


@pytest.fixture(scope="module")
def shards(tmp_path_factory, shared_data):
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    out = tmp_path_factory.mktemp("craft-shards") / "mixture-craft-v1"
    # K=2 keeps the prompts short (a tiny model on a CPU): the gold documents and at most one distractor
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 3),
                                          SourceSpec("hotpotqa", str(HOTPOT_TRAIN), 3)],
                                 schedule="max", order="shuffled", K=2, template="craft-v1", out=str(out), seed=0,
                                 workers=1))
    return out


def test_grpo_with_the_craft_reward(tmp_path, tiny_model_dir, shards):
    from rag_curriculum.methods.craft._reward import CraftReward
    from rag_curriculum.rewards import register_reward
    from rag_curriculum.train import compose_train_config, train

    register_reward("test-recording-craft", RecordingCraft, overwrite=True)
    CALLS.clear()
    JUDGED.clear()
    cfg = compose_train_config("craft-v1", [
        f"model.name_or_path={tiny_model_dir}", f"data.shards={shards}", f"run.output_dir={tmp_path / 'run'}",
        "batch.prompts_per_step=2", "batch.per_device_completions=2", "grpo.num_generations=2",
        "grpo.max_completion_length=16", "grpo.max_steps=2", "grpo.use_vllm=false", "grpo.bf16=false",
        "grpo.use_cpu=true", "grpo.activation_checkpointing=false", "grpo.save_steps=2", "grpo.report_to=none",
        "grpo.dataloader_pin_memory=false", "run.save_final=false",
        "rewards=[{name: test-recording-craft}]",
    ])
    assert cfg.grpo["learning_rate"] == 5e-6 and cfg.grpo["lr_scheduler_type"] == "cosine"
    result = train(cfg)
    assert result.global_step == 2 and math.isfinite(result.training_loss)
    assert len(CALLS) == 2 and len(JUDGED) == 2  # one valid trace per batch reached the judge
    reference = CraftReward("craft-v1", judge={"backend": "scripted", "backend_args": {"script": judge_script},
                                               "cache_dir": None})
    logged = [h for h in result.log_history if "loss" in h]
    for h, call in zip(logged, CALLS, strict=True):
        assert set(call["template"]) == {"craft-v1"}
        assert all(g.isdigit() for gold in call["gold_labels"] for g in gold)
        assert all(p["label"] == str(k) for ps in call["passages"] for k, p in enumerate(ps, 1))
        # TRL trained on what the CRAFT reward returned, and the reward's terms were logged
        assert h["rewards/craft/mean"] == pytest.approx(sum(call["rewards"]) / len(call["rewards"]))
        assert {"craft/format", "craft/answer", "craft/evidence", "craft/judge"} <= set(h)
        assert h["craft/format"] + h["craft/answer"] + h["craft/evidence"] + h["craft/judge"] == pytest.approx(
            h["rewards/craft/mean"])
        # each total is the CRAFT reward of that completion: the valid trace earns format 1 + judge 0.75 + its
        # evidence F1 against the row's gold numbers; the tiny model's own completions are gated to 0
        for text, answers, gold, r in zip(call["completions"], call["answers"], call["gold_labels"],
                                          call["rewards"], strict=True):
            want = reference.score(text, answers, gold, question="q", passages=[]).total
            assert r == pytest.approx(want)
        assert call["rewards"][0] == pytest.approx(1 + 0.75 + (2 / (1 + len(call["gold_labels"][0]))
                                                               if "1" in call["gold_labels"][0] else 0.0))
