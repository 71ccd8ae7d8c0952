"""The verl adapter of GlobalRAG's reward without verl (``compute_globalrag_score`` in ``rag_curriculum/verl/rewards.py``): the step t of w_t from
extra_info, a fixed step, or the curriculum index (epochs counted when the indices start again), an error when none
is given; the tool answers verl renders read as <information> blocks; the batch call equal to the single one; the
gold plan from the row or from a plan file by the row's id. tests/tier_verl/test_globalrag_verl.py drives it through
verl's own loader."""

from __future__ import annotations

import json
import math

import pytest

from rag_curriculum.errors import ConfigError
from rag_curriculum.methods.globalrag import plan_from_questions, write_plans
from rag_curriculum.verl.rewards import StepClock, compute_globalrag_score, training_step

GOLD = plan_from_questions([("Who directed Jaws?", "#1", "Steven Spielberg"), ("When was #1 born?", "#2", "1946")])
PLAN = json.dumps({"Q1": ["Who directed Jaws?", "#1"], "Q2": ["When was #1 born?", "#2"]})
TOOL = "\nuser\n<tool_response>\nDoc 1(Title: Jaws) text\n</tool_response>\nassistant\n"


def response(second: str = "1946", answer: str = "1946") -> str:
    return (f"<think>plan</think><plan>{PLAN}</plan><subPlan><search>Jaws director</search>{TOOL}"
            "<subAnswer>#1 = Steven Spielberg</subAnswer></subPlan><subPlan><search>Spielberg born</search>"
            f"{TOOL}<subAnswer>#2 = {second}</subAnswer></subPlan><answer>{answer}</answer>")


def w(t: float) -> float:
    return 1 / (1 + math.exp((t - 45) / 10))


def test_the_step_from_extra_info_a_fixed_step_or_the_curriculum_index():
    assert training_step({"global_step": 7}, step=3) == 7.0  # the row's own step wins
    assert training_step({"index": 5}, step=3, prompts_per_step=4) == 3.0  # then a fixed step
    clock = StepClock()
    # rows in curriculum order, 4 a step: indices 0-3 step 0, 8-11 step 2; a new epoch when they start again
    assert [clock(i, 4) for i in (0, 3, 5, 11, 9, 2, 1, 6)] == [0, 0, 1, 2, 2, 3, 3, 4]
    with pytest.raises(ConfigError, match="training step"):
        training_step({"index": 1})
    with pytest.raises(ConfigError, match="no 'index'"):
        training_step({}, prompts_per_step=4)
    with pytest.raises(ConfigError, match="prompts_per_step"):
        training_step({"index": 1}, prompts_per_step=0)


def test_a_response_as_verl_renders_it_scores_eq_7_by_hand():
    info = {"gold_plan": GOLD.to_dict(), "global_step": 45}
    got = compute_globalrag_score("musique", response(), {"answers": ["1946"]}, info, embedder="hash")
    # the gold plan itself, every sub-answer right: w_45 = 0.5; 0.5 x (0.1 + 0.5 + 0.5 + 0.5) + 1
    assert got["weight"] == 0.5 and got["train_step"] == 45.0
    assert (got["form"], got["structure"], got["sub_answers"], got["acc"], got["matched"]) == (1, 1, 1, 1, 2)
    assert got["score"] == pytest.approx(1.8, abs=1e-6)
    # a wrong second sub-answer and final answer: R_step = (1 + 0) / 2, R_answ = 0
    bad = compute_globalrag_score("musique", response("1950", "1950"), ["1946"], {**info, "global_step": 0},
                                  embedder="hash")
    assert bad["sub_answers"] == 0.5 and bad["acc"] == 0.0
    assert bad["score"] == pytest.approx(w(0) * (0.1 + 0.5 + 0.5 + 0.25), abs=1e-6)
    # the same without the tool answers still complies; a sub-plan without its search does not (require_search)
    raw = response().replace(TOOL, "")
    assert compute_globalrag_score("musique", raw, ["1946"], info, embedder="hash")["form"] == 1.0
    assert compute_globalrag_score("musique", raw.replace("<search>Jaws director</search>", ""), ["1946"], info,
                                   embedder="hash")["form"] == 0.0


def test_the_batch_call_and_a_plan_file_by_the_rows_id(tmp_path):
    plans = write_plans(tmp_path / "plans.jsonl", [{"id": "q1", **GOLD.to_dict()}])
    infos = [{"id": "q1", "index": 0}, {"id": "q1", "index": 1}]
    kw = {"embedder": "hash", "plans": str(plans), "prompts_per_step": 256}
    batch = compute_globalrag_score(data_sources=["musique"] * 2, solution_strs=[response(), "no plan"],
                                    ground_truths=[{"answers": ["1946"]}] * 2, extra_infos=infos, **kw)
    assert batch[0] == compute_globalrag_score("musique", response(), {"answers": ["1946"]}, infos[0], **kw)
    assert batch[0]["train_step"] == 0.0 and batch[0]["score"] == pytest.approx(w(0) * 1.6 + 1, abs=1e-6)
    assert batch[1]["score"] == 0.0 and batch[1]["has_gold_plan"] == 1.0
    with pytest.raises(ConfigError, match="no gold plan"):
        compute_globalrag_score("musique", response(), ["1946"], {"id": "other", "index": 0}, **kw)


def test_concurrent_calls_as_verls_reward_loop_makes_them():
    """verl's reward loop scores responses from an executor's threads: the same values as one at a time."""
    from concurrent.futures import ThreadPoolExecutor

    infos = [{"gold_plan": GOLD.to_dict(), "index": i} for i in range(16)]
    texts = [response("1946" if i % 2 else "1950", "1946") for i in range(16)]
    kw = {"embedder": "hash", "prompts_per_step": 8}
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda a: compute_globalrag_score("musique", a[0], ["1946"], a[1], **kw),
                            zip(texts, infos, strict=True)))
    assert [g["sub_answers"] for g in got] == [0.5, 1.0] * 8
    assert {g["train_step"] for g in got} <= {0.0, 1.0}
    assert got[1] == compute_globalrag_score("musique", texts[1], ["1946"], {**infos[1], "global_step": 0}, **kw)
