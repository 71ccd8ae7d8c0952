"""GlobalRAG's GRPO run on verl (``recipes/verl/globalrag_grpo.sh``): the launch command composes under verl 0.9.1's
own config (GRPO, 5 rollouts, β 0.001, ε 0.2, lr 1e-6, 200 steps, top-3, 4 turns, the GlobalRAG prompt, the naive
reward manager of verl's reward loop, the reward function and its options), the agent rows it writes carry the
GlobalRAG prompt, and verl's own loader brings ``compute_globalrag_score`` in by path; called as verl's reward loop
calls it (one response, the row's ``ground_truth`` and ``extra_info`` as verl's dataset gives them) on responses
rendered as verl renders a tool's answer, it gives the values computed by hand from Eq. 7 at the step derived from
the row's curriculum index."""

from __future__ import annotations

import importlib.util
import math
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    getattr(importlib.util.find_spec("verl"), "origin", None) is None,
    reason="verl is not installed here: run scripts/setup.sh verl and use .venv-verl",
)

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "recipes" / "verl" / "globalrag_grpo.sh"
KW = "+reward.custom_reward_function.reward_kwargs"
MUSIQUE_TRAIN = ROOT.parent / "shared" / "data" / "musique" / "musique_ans_v1.0_train.sample100.jsonl"


@pytest.fixture(scope="module")
def run(shards, tiny_model_dir, tmp_path_factory):
    from rag_curriculum import load_examples
    from rag_curriculum.methods.globalrag import write_plans
    from rag_curriculum.methods.globalrag._agent import gold_plans

    out = tmp_path_factory.mktemp("globalrag-verl")
    records, counts = gold_plans(load_examples("musique", MUSIQUE_TRAIN))
    assert counts["planned"] == 100
    plans = write_plans(out / "plans.jsonl", records)
    env = {**os.environ, "SHARDS": str(shards), "MODEL": str(tiny_model_dir), "DRY_RUN": "1", "OUT": str(out),
           "PYTHON": sys.executable, "PLANS": str(plans), "PROMPTS_PER_STEP": "4", "MINI_BATCH": "4",
           "GPUS_PER_NODE": "4",  # 4 prompts x 5 rollouts split over 4 GPUs (the layout check), not 8
           "MAX_PROMPT": "2048", "EMBEDDER": "hash"}
    res = subprocess.run(["bash", str(SCRIPT), "data.dataloader_num_workers=0"],
                         capture_output=True, text=True, env=env, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    args = shlex.split(res.stdout)
    assert args[1:3] == ["-m", "verl.trainer.main_ppo"], args[:3]
    return {"overrides": args[3:], "out": out, "records": {r["id"]: r for r in records}}


def test_the_grpo_command_composes_under_verls_config(run, compose_verl_config, tiny_model_dir):
    cfg = compose_verl_config(run["overrides"])
    actor, rollout = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    assert cfg.algorithm.adv_estimator == "grpo" and rollout.n == 5 and rollout.temperature == 1.0
    assert actor.use_kl_loss is True and actor.kl_loss_coef == 0.001 and actor.optim.lr == 1e-6
    assert actor.clip_ratio_low == 0.2 and actor.clip_ratio_high == 0.2
    assert cfg.trainer.total_training_steps == 200 and cfg.trainer.save_freq == 10 and cfg.trainer.test_freq == -1
    assert cfg.data.shuffle is False and cfg.data.train_batch_size == 4
    assert rollout.multi_turn.max_assistant_turns == 4 and rollout.multi_turn.format == "search-r1"
    assert cfg.reward.reward_manager.name == "naive"
    assert cfg.reward.custom_reward_function.name == "compute_globalrag_score"
    assert cfg.reward.custom_reward_function.path.endswith("rag_curriculum/verl/rewards.py")
    kw = cfg.reward.custom_reward_function.reward_kwargs
    assert kw.prompts_per_step == 4 and kw.T == 50 and kw.alpha == 0.1 and kw.lam == kw.gamma == kw.delta == 0.5
    assert kw.prefix == "query: " and kw.embedder == "hash" and kw.plans == str(run["out"] / "plans.jsonl")
    import yaml

    tool = yaml.safe_load((run["out"] / "search_tool.yaml").read_text())["tools"][0]["config"]
    assert tool["topk"] == 3


def test_verls_loader_scores_a_row_as_the_reward_loop_does(run, compose_verl_config):
    import pyarrow.parquet as pq
    from verl.trainer.ppo.reward import get_custom_reward_fn

    rows = pq.read_table(run["out"] / "agent.parquet").to_pylist()
    assert rows[0]["prompt"][0]["content"].startswith("Answer the given question by following the steps below.")
    fn = get_custom_reward_fn(compose_verl_config(run["overrides"]))
    row = rows[9]  # curriculum index 9, 4 prompts a step: step 2
    assert row["extra_info"]["index"] == 9
    gold = run["records"][row["extra_info"]["id"]]  # the example id: the plan file's key
    nodes = gold["nodes"]
    plan = "{" + ", ".join(f'"Q{k + 1}": ["{n["question"]}", "{n["placeholder"]}"]' for k, n in enumerate(nodes)) + "}"
    sub = "".join(f"<subPlan><think>go</think><search> {n['question']} </search>\nuser\n<tool_response>\nDoc 1"
                  f"(Title: T) text\n</tool_response>\nassistant\n<subAnswer> {n['placeholder']} = {n['answer']} "
                  "</subAnswer></subPlan>\n" for n in nodes)
    perfect = f"<think>plan</think><plan>{plan}</plan>\n{sub}<answer> {gold['answers'][0]} </answer>"
    truth = row["reward_model"]["ground_truth"]
    got = fn(row["data_source"], perfect, truth, dict(row["extra_info"]))
    w = 1 / (1 + math.exp((2 - 45) / 10))
    # the gold plan itself: R_form = R_str = R_sem = R_step = 1, R_answ = 1
    assert got["train_step"] == 2.0 and got["weight"] == pytest.approx(w)
    assert (got["form"], got["structure"], got["sub_answers"], got["acc"]) == (1.0, 1.0, 1.0, 1.0)
    assert got["semantic"] == pytest.approx(1.0, abs=1e-6)
    assert got["score"] == pytest.approx(w * (0.1 + 0.5 + 0.5 + 0.5) + 1.0, abs=1e-6)
    # no plan: only the answer term is left
    bare = fn(row["data_source"], f"<answer> {gold['answers'][0]} </answer>", truth, dict(row["extra_info"]))
    assert (bare["form"], bare["structure"], bare["semantic"], bare["score"]) == (0.0, 0.0, 0.0, 1.0)
    # the batch call gives the same values
    both = fn(data_sources=[row["data_source"]] * 2, solution_strs=[perfect, "nothing"], ground_truths=[truth] * 2,
              extra_infos=[dict(row["extra_info"])] * 2)
    assert both[0] == got and both[1]["score"] == 0.0
