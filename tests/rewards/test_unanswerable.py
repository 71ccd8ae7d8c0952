"""The RAG-RL reward on unanswerable rows: hand-computed tables, the abstention penalty, the columns the
reward reads `answerable` from (TRL columns, verl's ground_truth, absent = answerable), and the agreement check
between the reward's abstention answer and the row's."""

from __future__ import annotations

import pytest

from rag_curriculum.errors import ConfigError
from rag_curriculum.rewards import RagRlReward, is_abstention, score_completion
from rag_curriculum.train import reward_funcs_from_config
from rag_curriculum.verl.rewards import compute_score


def completion(answer: str, cites: str = "") -> str:
    return f"<reasoning>\nI looked.\n</reasoning>\n<answer>\nFinal answer: {answer}\nSupporting passages: {cites}\n</answer>"


LABELS = ["Lyon", "Euro", "Ohio"]  # an unanswerable row's passages: every one a distractor
ABSTAIN = ["unanswerable"]

# Unanswerable row, gamma 5 / 5 / 2, gamma_format = p = 1. (name, completion, answer, citation, format)
UNANSWERABLE = [
    ("abstains, cites nothing", completion("unanswerable"), 5.0, 5.0, 1.0),
    ("abstains, normalised (case, punctuation, article)", completion("The Unanswerable."), 5.0, 5.0, 1.0),
    ("abstains, cites one passage", completion("unanswerable", "Lyon"), 5.0, -2.0, 1.0),
    ("abstains, cites two passages", completion("unanswerable", "Lyon, Euro"), 5.0, -4.0, 1.0),
    ("abstains, cites an unknown label", completion("unanswerable", "Paris"), 5.0, -2.0, 1.0),
    ("guesses, cites nothing", completion("Paris"), 0.0, 5.0, 1.0),
    ("guesses, cites one passage", completion("Paris", "Lyon"), 0.0, -2.0, 1.0),
    ("a sentence that mentions it is no abstention", completion("it is unanswerable from these"), 0.0, 5.0, 1.0),
    ("empty answer: no citation credit", completion(""), 0.0, 0.0, -1.0),
    ("no tags: nothing extracted, no citation credit", "I cannot tell.", 0.0, 0.0, -1.0),
    ("abstains out of format", "Sure. " + completion("unanswerable"), 5.0, 5.0, -1.0),
]


@pytest.mark.parametrize(("text", "answer", "citation", "fmt"), [t[1:] for t in UNANSWERABLE],
                         ids=[t[0] for t in UNANSWERABLE])
def test_unanswerable_row_table(text, answer, citation, fmt):
    b = RagRlReward().score(text, ABSTAIN, [], LABELS, answerable=False)
    assert (b.answer, b.citation, b.format) == pytest.approx((answer, citation, fmt))
    assert b.total == pytest.approx(answer + citation + fmt)
    assert b.answerable is False
    assert b.abstained == (answer == 5.0)
    assert b.num_incorrect == b.num_cited  # nothing is gold: every citation is incorrect


# Answerable row (gold "Paris", gold passage "France"); (name, completion, abstain_penalty, answer, citation, format)
ANSWERABLE = [
    ("abstains, default penalty 0: the paper's reward", completion("unanswerable"), 0.0, 0.0, 0.0, 1.0),
    ("abstains, penalty 1", completion("unanswerable"), 1.0, -1.0, 0.0, 1.0),
    ("abstains citing the gold, penalty 2.5", completion("Unanswerable", "France"), 2.5, -2.5, 5.0, 1.0),
    ("wrong guess, penalty 1 does not apply", completion("Lyon"), 1.0, 0.0, 0.0, 1.0),
    ("right answer, penalty 1 does not apply", completion("Paris", "France"), 1.0, 5.0, 5.0, 1.0),
]


@pytest.mark.parametrize(("text", "penalty", "answer", "citation", "fmt"), [t[1:] for t in ANSWERABLE],
                         ids=[t[0] for t in ANSWERABLE])
def test_answerable_row_table(text, penalty, answer, citation, fmt):
    b = RagRlReward(abstain_penalty=penalty).score(text, ["Paris"], ["France"], ["France", "Lyon"])
    assert (b.answer, b.citation, b.format, b.total) == pytest.approx((answer, citation, fmt, answer + citation + fmt))
    assert b.answerable is True


def test_abstaining_never_beats_a_guess_that_cites_nothing_on_an_answerable_row():
    """Why the default penalty can be 0: on an answerable row an abstention scores as a wrong answer citing
    nothing, so it is never better than guessing without citations, at any penalty >= 0."""
    for penalty in (0.0, 0.5, 1.0):
        r = RagRlReward(abstain_penalty=penalty)
        abstain = r.score(completion("unanswerable"), ["Paris"], ["France"]).total
        guess = r.score(completion("Lyon"), ["Paris"], ["France"]).total
        assert abstain == guess - penalty


def test_the_abstention_answer_is_configurable_and_must_agree_with_the_row():
    r = RagRlReward(abstention_answer="insufficient information")
    rows = ["insufficient information"]
    assert r.score(completion("Insufficient information."), rows, [], answerable=False).total == 11.0
    assert r.score(completion("unanswerable"), rows, [], answerable=False).answer == 0.0
    with pytest.raises(ConfigError, match="abstention_answer is 'unanswerable'") as e:
        RagRlReward().score(completion("unanswerable"), rows, [], answerable=False)
    assert "manifest" in e.value.hint
    for bad in ("", "the", "!!", 3):
        with pytest.raises(ConfigError, match="abstention answer"):
            RagRlReward(abstention_answer=bad)
    with pytest.raises(ConfigError, match="abstain_penalty"):
        RagRlReward(abstain_penalty=-1)


def test_is_abstention_is_the_official_normalisation():
    assert is_abstention("  UNANSWERABLE!! ") and is_abstention("an unanswerable")
    assert not is_abstention("unanswerable question") and not is_abstention("")
    assert is_abstention("Not enough information.", "not enough information")


def test_the_scorer_on_unanswerable_rows():
    s = score_completion(completion("unanswerable"), ABSTAIN, [], LABELS, answerable=False)
    assert (s.citation_precision, s.citation_recall, s.citation_f1, s.num_incorrect) == (1.0, 1.0, 1.0, 0)
    s = score_completion(completion("unanswerable", "Lyon, Ohio"), ABSTAIN, [], LABELS, answerable=False)
    assert (s.citation_precision, s.citation_recall, s.citation_f1, s.num_incorrect) == (0.0, 0.0, 0.0, 2)
    # the same empty gold list on an answerable row keeps the old scores (recall 0)
    s = score_completion(completion("unanswerable"), ABSTAIN, [], LABELS)
    assert (s.citation_recall, s.num_incorrect) == (0.0, 0)


def test_trl_reads_the_answerable_column_and_ground_truth():
    """The TRL calling convention: `answerable` as a column, else in reward_model.ground_truth, else answerable."""
    funcs, _ = reward_funcs_from_config(["rag-rl", "rag-rl-answer", "rag-rl-citation"])
    total, answer, citation = funcs
    comps = [[{"role": "assistant", "content": completion("unanswerable")}]] * 3
    answers = [ABSTAIN, ABSTAIN, ["Paris"]]
    gold = [[], [], ["France"]]
    logged: dict = {}
    kw = dict(answers=answers, gold_labels=gold, answerable=[False, False, True], prompts=None, trainer_state=None,
              log_metric=lambda k, v: logged.__setitem__(k, v))
    assert total(completions=comps, **kw) == [11.0, 11.0, 1.0]
    assert answer(completions=comps, **kw) == [5.0, 5.0, 0.0]
    assert citation(completions=comps, **kw) == [5.0, 5.0, 0.0]
    assert logged["rag_rl/abstained"] == 1.0
    rm = [{"style": "rule", "ground_truth": {"answers": a, "gold_labels": g, "answerable": ok}}
          for a, g, ok in zip(answers, gold, [False, False, True], strict=True)]
    assert total(completions=comps, reward_model=rm) == [11.0, 11.0, 1.0]
    # old shards: no answerable anywhere -> answerable; the empty gold list then earns no citation reward
    assert total(completions=comps, answers=answers, gold_labels=gold) == [6.0, 6.0, 1.0]
    with pytest.raises(ConfigError, match="3 completions but 2 entries in column 'answerable'"):
        total(completions=comps, answers=answers, gold_labels=gold, answerable=[False, True])


def test_verl_compute_score_on_an_unanswerable_row():
    gt = {"answers": ABSTAIN, "gold_labels": [], "answerable": False}
    out = compute_score("musique", completion("unanswerable"), gt, {"labels": LABELS})
    assert (out["score"], out["answer"], out["citation"], out["acc"], out["abstained"]) == (11.0, 5.0, 5.0, 1.0, 1.0)
    out = compute_score("musique", completion("Paris", "Lyon"), gt, {"labels": LABELS})
    assert (out["score"], out["citation"], out["num_incorrect"], out["abstained"]) == (-1.0, -2.0, 1.0, 0.0)
    # reward_kwargs reach the new constants
    gt2 = {"answers": ["Paris"], "gold_labels": ["France"], "answerable": True}
    assert compute_score("musique", completion("unanswerable"), gt2, abstain_penalty=1.0)["score"] == 0.0
    # a ground truth without `answerable` (an old shard) is answerable
    old = compute_score("musique", completion("unanswerable"), {"answers": ABSTAIN, "gold_labels": []})
    assert (old["score"], old["citation"]) == (6.0, 0.0)


@pytest.mark.slow
def test_grpo_trainer_passes_the_answerable_column(tiny_model_dir, tmp_path):
    """One GRPO step of the tiny model on real rows half of which are unanswerable: TRL hands the `answerable`
    column to the reward as it is, and the reward logs the abstention rate."""
    trl = pytest.importorskip("trl")
    datasets = pytest.importorskip("datasets")
    from conftest import MUSIQUE_TRAIN

    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
    from rag_curriculum.shards import shard_files

    out = tmp_path / "u"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 4)], schedule="max", K=2,
                                 unanswerable_fraction=0.5, seed=1, out=str(out)), command="test")
    ds = datasets.load_dataset("parquet", data_files={"train": [str(f) for f in shard_files(out)]}, split="train")
    assert sorted(ds["answerable"]) == [False, False, True, True]
    seen: list = []

    class Spy(RagRlReward):
        def components(self, *args, **kwargs):
            seen.append(kwargs.get("answerable"))
            return super().components(*args, **kwargs)

    args = trl.GRPOConfig(
        output_dir=str(tmp_path / "grpo"), max_steps=1, per_device_train_batch_size=4, num_generations=2,
        max_completion_length=8, shuffle_dataset=False, report_to="none", logging_steps=1, use_cpu=True,
        save_strategy="no", bf16=False, seed=0,
    )
    trainer = trl.GRPOTrainer(model=str(tiny_model_dir), reward_funcs=[Spy()], args=args, train_dataset=ds)
    trainer.train()
    assert seen and sorted(seen[0]) == [False, False, True, True]
    assert "rag_rl/abstained" in {k for entry in trainer.state.log_history for k in entry}
