"""One reader of gold answers: the toolkit's ``answers``, Search-R1's
``reward_model.ground_truth.target`` (list or string) and FlashRAG's ``golden_answers`` (a column, or inside the
ground truth) score the same in every reward (verl's ``compute_*``, TRL's rewards, the toolkit's own) and in the
evaluation; a row with none is an error naming it, never a silent 0."""

from __future__ import annotations

import numpy as np
import pytest
from support.search_r1_files import write_search_r1_parquet

from rag_curriculum._gold import GOLD_KEYS, NoGoldAnswerError, gold_answers
from rag_curriculum.errors import CurriculumError
from rag_curriculum.rewards import get_reward
from rag_curriculum.verl.rewards import (
    compute_craft_score,
    compute_globalrag_score,
    compute_score,
    compute_search_score,
    compute_veritas_score,
)

SEARCH = "<think>t</think><search> capital of France </search><answer> Paris </answer>"
RAG_RL = "<reasoning>r</reasoning><answer>Final answer: Paris\nSupporting passages: France</answer>"

#: Every way a row may hold the answer "Paris" (verl hands the reward the row's ground_truth).
GROUND_TRUTHS = [
    {"answers": ["Paris"]},
    {"target": ["Paris"]},                        # Search-R1's nq_search.py
    {"target": "Paris"},                          # a target that is one string
    {"target": np.array(["Paris"], dtype=object)},  # what pandas hands verl for a list column
    {"golden_answers": ["Paris", "City of Light"]},
    ["Paris"],
    "Paris",
]


@pytest.mark.parametrize("gt", GROUND_TRUTHS, ids=lambda g: str(g)[:30])
def test_every_layout_scores_the_right_answer(gt):
    assert compute_search_score("nq", SEARCH, gt)["score"] == 1.0
    assert compute_search_score("nq", SEARCH, gt, metric="f1")["score"] == 1.0
    assert compute_score("musique", RAG_RL, gt)["answer"] == 5.0
    assert compute_craft_score("musique", "<plan>p</plan><gold_docs>[]</gold_docs><reason>r</reason>"
                               "<answer>Paris</answer>", gt)["acc"] == 1.0


def test_the_issue_reproduction_now_agrees():
    """compute_search_score('nq', ..., {'target': ['Paris']}) gave 0.0 where {'answers': ['Paris']} gave 1.0."""
    y = "<search> q </search><answer> Paris </answer>"
    assert compute_search_score("nq", y, {"target": ["Paris"]}) == compute_search_score("nq", y, {"answers": ["Paris"]})
    assert compute_search_score("nq", y, {"target": ["Paris"]})["score"] == 1.0


@pytest.mark.parametrize("gt", [{}, {"gold_labels": ["A"]}, {"target": []}, {"target": ["", "  "]}, None, []],
                         ids=str)
def test_no_gold_answer_is_an_error_naming_the_row_and_the_keys(gt):
    with pytest.raises(NoGoldAnswerError) as e:
        compute_search_score("nq", SEARCH, gt, {"index": 17, "split": "train"})
    msg = str(e.value)
    assert "data_source 'nq', extra_info.index 17" in msg
    for key in GOLD_KEYS:
        assert key in msg
    with pytest.raises(NoGoldAnswerError, match="data_source 'musique'"):
        compute_score("musique", RAG_RL, gt)
    with pytest.raises(NoGoldAnswerError):
        compute_veritas_score("nq", SEARCH, gt, weights={"info_think": 0.0})
    with pytest.raises(NoGoldAnswerError):
        compute_globalrag_score("nq", SEARCH, gt, {}, step=1)


@pytest.mark.parametrize("bad, field", [({"target": [5]}, "reward_model.ground_truth.target"),
                                        ({"answers": [["Paris"]]}, "reward_model.ground_truth.answers"),
                                        ({"target": {"a": 1}}, "reward_model.ground_truth.target")])
def test_answers_that_are_not_text_are_refused_by_name(bad, field):
    with pytest.raises(NoGoldAnswerError) as e:
        compute_search_score("nq", SEARCH, bad)
    assert e.value.field == field and isinstance(e.value, CurriculumError)


def test_the_reader_order_and_layouts():
    assert gold_answers(["a"], {"ground_truth": {"target": ["b"]}}, ["c"]) == ["a"]  # the toolkit's column first
    assert gold_answers(None, {"ground_truth": {"target": ["b"]}}, ["c"]) == ["c"]  # then FlashRAG's column
    assert gold_answers([], {"ground_truth": {"target": ["b"]}}) == ["b"]  # an empty column is no answer
    assert gold_answers(reward_model={"ground_truth": {"golden_answers": ("x", "y")}}) == ["x", "y"]


@pytest.mark.parametrize("name", ["search-em", "search-f1", "rag-rl-answer", "veritas-em", "craft-answer"])
def test_trl_rewards_read_search_r1_columns(name):
    """TRL hands every dataset column to a reward as a keyword: Search-R1's rows have golden_answers and
    reward_model.ground_truth.target, no answers."""
    reward = get_reward(name, **({"weights": {"info_think": 0.0}} if name == "veritas-em" else {}))
    completions = {"search-em": SEARCH, "search-f1": SEARCH, "veritas-em": SEARCH,
                   "rag-rl-answer": RAG_RL,
                   "craft-answer": "<plan>p</plan><gold_docs>[]</gold_docs><reason>r</reason><answer>Paris</answer>"}
    c = completions[name]
    rm = {"style": "rule", "ground_truth": {"target": ["Paris"]}}
    by_target = reward([c, c], reward_model=[rm, rm], data_source=["nq", "nq"], id=["a", "b"])
    by_golden = reward([c], golden_answers=[["Paris"]])
    assert by_target[0] == by_target[1] == by_golden[0] > 0
    with pytest.raises(NoGoldAnswerError, match=r"completion 1 of the batch \(row id 'b'\)"):
        reward([c, c], reward_model=[rm, {"style": "rule", "ground_truth": {}}], id=["a", "b"])
    with pytest.raises(CurriculumError, match="needs the gold answers"):
        reward([c], question=["q"])


@pytest.mark.slow
def test_trl_passes_search_r1_parquet_columns_to_the_rewards(tmp_path, tiny_model_dir):
    """The real seam: rows of a Search-R1 data file loaded by datasets, handed by TRL's GRPOTrainer to the search
    rewards (its own _calculate_rewards: every column as a keyword argument). The right answer scores 1."""
    datasets = pytest.importorskip("datasets")
    trl = pytest.importorskip("trl")
    path = write_search_r1_parquet(tmp_path / "train.parquet", [("hotpotqa", 2), ("musique", 2)])
    ds = datasets.load_dataset("parquet", data_files=str(path), split="train")
    assert "answers" not in ds.column_names
    em, f1 = get_reward("search-em"), get_reward("search-f1")
    args = trl.GRPOConfig(output_dir=str(tmp_path / "o"), per_device_train_batch_size=2, num_generations=2,
                          max_completion_length=4, report_to="none", use_cpu=True, save_strategy="no",
                          bf16=False, shuffle_dataset=False)
    trainer = trl.GRPOTrainer(model=str(tiny_model_dir), reward_funcs=[em, f1], args=args, train_dataset=ds)
    rows = [dict(r) for r in ds]
    completions = [f"<search> q </search><answer> {r['golden_answers'][0]} </answer>" for r in rows]
    completions[1] = "<answer> nobody </answer>"
    got = trainer._calculate_rewards(rows, [r["prompt"] for r in rows], completions, [[1]] * len(rows))
    assert got[:, 0].tolist() == [1.0, 0.0, 1.0, 1.0]
    assert got[:, 1].tolist() == [1.0, 0.0, 1.0, 1.0]
