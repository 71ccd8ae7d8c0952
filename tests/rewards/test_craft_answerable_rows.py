"""CRAFT's rewards follow the row's ``answerable``: an unanswerable row is scored by the reward as the evaluation
scores it."""

from __future__ import annotations

import pytest
from conftest import MUSIQUE_TRAIN


def test_craft_rewards_score_an_unanswerable_row_as_the_eval_does(shared_data, tmp_path):
    """A craft-v1 build with unanswerable rows, read as a trainer reads it: `<gold_docs>[]` on an unanswerable row
    gets the evidence the evaluation gives it (1), citing a distractor there gets 0, and answerable rows are
    unchanged; through TRL's keyword columns, the verl entry point and the registry's craft-evidence."""
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
    from rag_curriculum.evaluation._scoring import score_row
    from rag_curriculum.methods.craft._format import parse_craft
    from rag_curriculum.rewards import get_reward
    from rag_curriculum.shards import load_hf_dataset
    from rag_curriculum.verl.rewards import compute_craft_score

    out = tmp_path / "craft"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 8, K=2)], schedule="max",
                                 template="craft-v1", unanswerable_fraction=0.5, out=str(out), seed=0),
                     command="t")
    ds = load_hf_dataset(out)
    rows = list(ds)
    assert {r["answerable"] for r in rows} == {True, False}
    total, evidence = get_reward("craft"), get_reward("craft-evidence")
    for r in rows:
        gold = r["gold_labels"]
        answer = r["answers"][0]
        cite = "[]" if not r["answerable"] else "[" + ", ".join(gold) + "]"
        wrong = next(p["label"] for p in r["passages"] if p["label"] not in gold)
        for docs, expected in ((cite, 1.0), (f"[{wrong}]", None)):
            y = f"<plan>p</plan><gold_docs>{docs}</gold_docs><reason>doc says</reason><answer>{answer}</answer>"
            assert parse_craft(y, variant="craft-v1").valid
            eval_f1 = score_row(r, [y])["citation_f1"]  # the eval's scorer, by the row's template
            cols = {k: [r[k]] for k in ("answers", "gold_labels", "passages", "question", "reward_model",
                                       "extra_info", "answerable")}
            got = evidence([[{"role": "assistant", "content": y}]], **cols)[0]
            assert got == pytest.approx(eval_f1), (r["id"], r["answerable"], docs)
            if expected is not None:
                assert got == expected, (r["id"], docs)
            elif not r["answerable"]:
                assert got == 0.0
            verl = compute_craft_score("musique", y, r["reward_model"]["ground_truth"])
            assert verl["evidence"] == pytest.approx(eval_f1)
            assert total([[{"role": "assistant", "content": y}]], **cols)[0] == pytest.approx(verl["score"])
