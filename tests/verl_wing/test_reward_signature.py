"""verl's reward functions share one signature: every ``compute_*`` of
``rag_curriculum/verl/rewards.py`` is made by ``verl_reward`` around a scorer of the call's ``Responses``, so each
takes verl's one-response call and a batch manager's call alike."""

from __future__ import annotations

import inspect

import pytest

from rag_curriculum.errors import ConfigError
from rag_curriculum.verl import rewards


def test_every_compute_function_has_verls_one_signature():
    names = sorted(n for n in rewards.__all__ if n.startswith("compute_"))
    assert names == ["compute_craft_score", "compute_globalrag_score", "compute_score", "compute_search_r1_score",
                     "compute_search_score", "compute_veritas_score"]
    signatures = {str(inspect.signature(getattr(rewards, n))) for n in names}
    assert len(signatures) == 1, signatures
    assert list(inspect.signature(rewards.compute_score).parameters)[:4] == [
        "data_source", "solution_str", "ground_truth", "extra_info"]
    assert all(getattr(rewards, n).__name__ == n and "verl" in getattr(rewards, n).__doc__ for n in names)


def test_one_response_gives_its_dict_and_a_batch_gives_a_list():
    one = rewards.compute_search_score("nq", "<answer>Paris</answer>", ["Paris"])
    batch = rewards.compute_search_score(data_sources=["nq", "nq"], solution_strs=["<answer>Paris</answer>",
                                         "<answer>Rome</answer>"], ground_truths=[["Paris"], ["Paris"]])
    assert one == batch[0] and [b["score"] for b in batch] == [1.0, 0.0]
    gt = {"answers": ["Paris"], "gold_labels": ["France"]}
    y = "<reasoning></reasoning><answer>Final answer: Paris\nSupporting passages: France</answer>"
    assert rewards.compute_score(data_sources=["musique"], solution_strs=[y], ground_truths=[gt]) == [
        rewards.compute_score("musique", y, gt)]


def test_search_r1_scores_one_response_at_a_time():
    with pytest.raises(ConfigError, match="one response at a time"):
        rewards.compute_search_r1_score(data_sources=["nq"], solution_strs=["<answer>x</answer>"],
                                        ground_truths=[{"target": ["x"]}], prompt_str="p")
