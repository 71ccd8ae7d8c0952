"""GlobalRAG trained for real: 3 GRPO steps of the tiny model through ``curriculum train``'s ``globalrag-cpu-tiny``
recipe (TRL's GRPOTrainer, the toolkit's rollout function, the BM25 index of the real MuSiQue sample, the globalrag
template), rewarded by the ``globalrag`` reward against gold plans built from MuSiQue's decompositions. The first
turn is scripted (a one-node plan and its search; a random model never writes one); the reward sees each step's
``trainer_state.global_step`` and logs its terms."""

from __future__ import annotations

import math

import pytest
from conftest import MUSIQUE_TRAIN

pytestmark = pytest.mark.slow
pytest.importorskip("trl", reason="the `train` extra is needed for training tests")
pytest.importorskip("bm25s")

CALLS: list[dict] = []


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_model_dir, min_max_shards):
    from rag_retriever import IndexConfig, build_index
    from support.cli_runs import run

    from rag_curriculum.methods.globalrag._reward import GlobalRagReward
    from rag_curriculum.train import compose_train_config, train

    tmp = tmp_path_factory.mktemp("globalrag-run")
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(tmp / "ix"), depth=20))
    r = run("globalrag", "plans", "--dataset", "musique", "--input", MUSIQUE_TRAIN, "--out", tmp / "plans.jsonl")
    assert r.exit_code == 0, r.output
    components = GlobalRagReward.components

    def record(self, completions, *args, **kwargs):
        got = components(self, completions, *args, **kwargs)
        CALLS.append({"step": kwargs.get("step"), "source_id": list(kwargs.get("source_id") or []), "scores": got,
                      "texts": ["".join(s["text"] for s in t["segments"]) for t in kwargs["trajectory"]]})
        return got

    mp = pytest.MonkeyPatch()
    mp.setattr(GlobalRagReward, "components", record)
    CALLS.clear()
    try:
        cfg = compose_train_config("globalrag-cpu-tiny", [
            f"model.name_or_path={tiny_model_dir}", f"data.shards={min_max_shards}", f"run.output_dir={tmp / 'run'}",
            f"agent.retriever={tmp / 'ix'}", "agent.max_turn_tokens=12", "grpo.report_to=none",
            f"rewards.0.kwargs.plans={tmp / 'plans.jsonl'}"])
        result = train(cfg, overrides=["recipe=globalrag-cpu-tiny"])
    finally:
        mp.undo()
    return result, list(CALLS)


def test_three_steps_with_the_globalrag_reward(trained):
    from rag_curriculum.methods.globalrag import parse_globalrag
    from rag_curriculum.methods.globalrag._reward import anneal_weight

    result, calls = trained
    assert result.global_step == 3
    losses = [h["loss"] for h in result.log_history if "loss" in h]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
    assert [c["step"] for c in calls] == [0.0, 1.0, 2.0]  # the trainer's global step reaches the reward
    for c in calls:
        assert len(c["scores"]) == 4  # 2 prompts x 2 generations
        for b, text in zip(c["scores"], c["texts"], strict=True):
            assert b.has_gold and b.weight == anneal_weight(c["step"])
            t = parse_globalrag(text)
            assert t.plan is not None and len(t.plan.nodes) == 1 and t.searches >= 1  # the scripted first turn
            # a one-node plan against a gold chain of n nodes (n - 1 edges): GED = (n - 1) + (n - 1)
            n = b.gold_nodes
            assert b.structure == pytest.approx(math.exp(-(2 * n - 2) / (2 * n - 1)))
            assert b.total == pytest.approx(b.weight * (0.1 * b.form + 0.5 * (b.structure + b.semantic + b.step))
                                            + b.answer)


def test_terms_logged_by_component(trained):
    result, calls = trained
    logged = {k for h in result.log_history for k in h}
    for key in ("rewards/globalrag/mean", "globalrag/form", "globalrag/structure", "globalrag/semantic",
                "globalrag/step", "globalrag/answer", "globalrag/weight", "globalrag/total", "rollout/searches"):
        assert key in logged, key
    weights = [h["globalrag/weight"] for h in result.log_history if "globalrag/weight" in h]
    assert weights and all(0.98 < w < 0.99 for w in weights)  # w_0, w_1, w_2 with T = 50


def test_the_globalrag_recipe_holds_the_papers_values(tmp_path):
    from rag_curriculum.train import compose_train_config
    from rag_curriculum.train._trl import check_recipe

    cfg = compose_train_config("globalrag", [f"data.shards={tmp_path}"])
    args, _ = check_recipe(cfg)
    assert (args.beta, args.epsilon, args.learning_rate, args.max_steps, args.num_generations) == (
        0.001, 0.2, 1e-6, 200, 5)
    assert cfg.batch.prompts_per_step == 256 and (args.temperature, args.top_p, args.save_steps) == (1.0, 1.0, 10)
    assert (cfg.agent.template, cfg.agent.top_k, cfg.agent.max_turns, cfg.agent.max_context_tokens) == (
        "globalrag", 3, 4, 4096)
    (spec,) = cfg.rewards
    assert spec.name == "globalrag" and {k: spec.kwargs[k] for k in ("alpha", "lam", "gamma", "delta", "T")} == {
        "alpha": 0.1, "lam": 0.5, "gamma": 0.5, "delta": 0.5, "T": 50}
    tiny = compose_train_config("globalrag-cpu-tiny", [f"data.shards={tmp_path}"])
    check_recipe(tiny)
    assert tiny.agent.first_turn.format(question="Who?").startswith('<think>I plan first.</think>\n<plan>{"Q1": ["Who?"')


def test_a_scripted_first_turn_may_write_literal_braces_twice(tmp_path):
    from rag_curriculum.errors import ConfigError
    from rag_curriculum.train import compose_train_config

    ok = compose_train_config("globalrag-cpu-tiny", [f"data.shards={tmp_path}"])
    ok.validate()  # the recipe's plan: {{"Q1": ["{question}", "#1"]}}
    for bad in ("<plan>{oops}</plan>", "<plan>{{\"Q1\": 1}</plan>", "<plan>}</plan>"):
        cfg = compose_train_config("globalrag-cpu-tiny", [f"data.shards={tmp_path}"])
        cfg.agent.first_turn = bad
        with pytest.raises(ConfigError, match="only field it may name is"):
            cfg.validate()
