"""The VERITAS reward in a real TRL GRPO run: 3 steps of the tiny model through ``curriculum train``'s
``veritas-cpu-tiny`` recipe, the toolkit's rollout function driving the search environment against the real BM25
index of the MuSiQue sample (as tests/train/test_search_agent.py does for Search-R1's reward), the judge answered by
the scripted backend (``lexical_judge``). Every term is logged by component, and the logged means are the ones the
reward computes again from the trajectories TRL trained on."""

from __future__ import annotations

import math

import pytest
from conftest import MUSIQUE_TRAIN

pytestmark = pytest.mark.slow
pytest.importorskip("trl", reason="the `train` extra is needed for training tests")
pytest.importorskip("bm25s")

ROLLOUTS: list[dict] = []


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_model_dir, min_max_shards):
    from rag_retriever import IndexConfig, build_index

    from rag_curriculum.train import SearchRollout, compose_train_config, train

    index = tmp_path_factory.mktemp("veritas-index") / "ix"
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(index), depth=20))
    out = tmp_path_factory.mktemp("veritas-run") / "run"
    call = SearchRollout.__call__

    def record(self, prompts, trainer):
        got = call(self, prompts, trainer)
        ROLLOUTS.append(got)
        return got

    mp = pytest.MonkeyPatch()
    mp.setattr(SearchRollout, "__call__", record)
    ROLLOUTS.clear()
    try:
        cfg = compose_train_config(
            "veritas-cpu-tiny",
            [
                f"model.name_or_path={tiny_model_dir}",
                f"data.shards={min_max_shards}",
                f"run.output_dir={out}",
                f"agent.retriever={index}",
                "agent.max_turn_tokens=12",
                "grpo.report_to=none",
            ],
        )
        result = train(cfg, overrides=["recipe=veritas-cpu-tiny"])
    finally:
        mp.undo()
    return result, list(ROLLOUTS), cfg


def test_three_steps_logged_by_component(trained):
    from rag_curriculum.rewards import get_reward

    result, rollouts, cfg = trained
    assert result.global_step == 3 and len(rollouts) == 3
    losses = [h["loss"] for h in result.log_history if "loss" in h]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
    logs = [h for h in result.log_history if "rewards/veritas/mean" in h]
    assert len(logs) == 3
    for key in (
        "veritas/em",
        "veritas/info_think",
        "veritas/think_answer",
        "veritas/think_search",
        "veritas/info_think_pairs",
        "veritas/no_search",
        "veritas/judge_failures",
        "rewards/search_count/mean",
    ):
        assert all(key in h for h in logs), key
    # the same reward on the trajectories TRL trained on gives the logged means, term by term
    reward = get_reward("veritas", **cfg.rewards[0].kwargs)
    for log, rollout in zip(logs, rollouts, strict=True):
        trajs = rollout["trajectory"]
        texts = ["".join(s["text"] for s in t["segments"]) for t in trajs]
        # EM is checked through the total below; the faithfulness terms do not read the gold answers
        parts = reward.components(texts, [["-"]] * len(trajs), trajectory=trajs)
        n = len(parts)
        for term in ("info_think", "think_answer", "think_search"):
            assert log[f"veritas/{term}"] == pytest.approx(sum(getattr(b, term) for b in parts) / n)
        assert log["veritas/info_think_pairs"] == pytest.approx(sum(b.info_think_pairs for b in parts) / n)
        # the scripted first turn searches: every trajectory has a (think, search) pair and an information block
        assert all(b.think_search_pairs >= 1 for b in parts) and log["veritas/no_search"] == 0.0
        w = cfg.rewards[0].kwargs["weights"]
        assert log["rewards/veritas/mean"] == pytest.approx(
            w["em"] * log["veritas/em"]
            + w["info_think"] * log["veritas/info_think"]
            + w["think_answer"] * log["veritas/think_answer"],
            abs=1e-6,
        )


def test_dry_run_of_the_recipes(tmp_path):
    """Both recipes bind to TRL's GRPOConfig and build their reward: the paper's weights, the judge an
    OpenAI-compatible server (veritas) or lexical_judge on the scripted backend (veritas-cpu-tiny)."""
    from rag_curriculum.train import compose_train_config, reward_funcs_from_config
    from rag_curriculum.train._trl import check_recipe

    for recipe, backend in (("veritas", "openai"), ("veritas-cpu-tiny", "scripted")):
        cfg = compose_train_config(recipe, [f"data.shards={tmp_path}"])
        args, _ = check_recipe(cfg)
        assert not args.use_vllm and cfg.agent.retriever
        funcs, weights = reward_funcs_from_config(
            [{"name": r.name, "weight": r.weight, "kwargs": r.kwargs} for r in cfg.rewards]
        )
        veritas = funcs[0]
        assert veritas.__name__ == "veritas" and weights[0] == 1.0
        assert veritas.weights == {"em": 0.9, "info_think": 0.05, "think_answer": 0.02, "think_search": 0.0}
        assert veritas._judge.backend == backend and veritas.think_answer_scope == "last_think"
    cfg = compose_train_config("veritas", [f"data.shards={tmp_path}"])
    assert cfg.model.name_or_path == "Qwen/Qwen2.5-7B" and cfg.batch.prompts_per_step == 256
    assert args.learning_rate == 1e-6
