"""The rewards' bad-input corpus: every reward (RAG-RL, CRAFT, VERITAS, GlobalRAG, search-em /
search-f1) and verl's entry points, called with an argument it cannot score, raise one of the toolkit's errors
(:class:`~rag_curriculum.errors.RewardInputError` or ``NoGoldAnswerError``, both :class:`DataError`; a bad option
at construction a :class:`ConfigError`) that names the argument and carries a hint: never a raw AttributeError /
TypeError / NotADirectoryError, never ``nan``, never a silent 0. A trajectory read back with pandas (NumPy arrays
for its lists) scores as the dicts it was written from."""

from __future__ import annotations

import math

import pytest

from rag_curriculum.errors import ConfigError, CurriculumError, DataError
from rag_curriculum.rewards import get_reward

ANSWER = "<think>t</think><search>q</search><information>i</information><think>Paris it is</think><answer>Paris</answer>"
DONE = {"rag-rl": "<reasoning>r</reasoning>\n<answer>\nFinal answer: Paris\nSupporting passages: France\n</answer>",
        "craft": "<plan>p</plan><gold_docs>[1]</gold_docs><reason>[1] Paris</reason><answer>Paris</answer>"}
JUDGE = {"backend": "scripted", "model": "rag_curriculum.methods.veritas:lexical_judge", "cache_dir": None}
OPTIONS = {"rag-rl": {}, "craft": {}, "veritas": {"judge": JUDGE}, "search-em": {}, "search-f1": {},
           "globalrag": {"embedder": "hash", "missing_plan": "zero"}}
TRAJ = {"answer": "Paris", "errors": [], "segments": [{"source": "model", "text": ANSWER}],
        "searches": [{"turn": 0, "query": "q", "ids": ["a"], "gold": [True]}]}
#: (case, keyword arguments of the call, the argument the error must name)
CALLS = [
    ("answers=[[5]]", {"completions": ["<answer>Paris</answer>"], "answers": [[5]]}, "answers"),
    ("answers=[[]]", {"completions": ["<answer>Paris</answer>"], "answers": [[]]}, "gold answer"),
    ("answers=[5]", {"completions": ["<answer>Paris</answer>"], "answers": [5]}, "answers"),
    ("answers=[None]", {"completions": ["<answer>Paris</answer>"], "answers": [None]}, "gold answer"),
    ("no answers column", {"completions": ["<answer>Paris</answer>"]}, "answers"),
    ("answers too short", {"completions": ["a", "b"], "answers": [["Paris"]]}, "answers"),
    ("integer completion", {"completions": [5], "answers": [["Paris"]]}, "completions"),
    ("None completion", {"completions": [None], "answers": [["Paris"]]}, "completions"),
    ("list of strings completion", {"completions": [["Paris"]], "answers": [["Paris"]]}, "completions"),
    ("message content a number", {"completions": [[{"role": "assistant", "content": 5}]], "answers": [["Paris"]]},
     "completions"),
    ("completions one string", {"completions": "<answer>Paris</answer>", "answers": [["Paris"]]}, "completions"),
]
#: Cases of the rewards that read the ``trajectory`` column (search-em/f1, VERITAS, GlobalRAG).
TRAJ_CALLS = [
    ("trajectory a string", ["x"], "trajectory"),
    ("trajectory turn not a dict", [{"segments": ["x"]}], "trajectory.segments[0]"),
    ("segment without a source", [{"segments": [{"text": "<answer>Paris</answer>"}]}], "segments[0].source"),
    ("segment source unknown", [{"segments": [{"source": "user", "text": "x"}]}], "segments[0].source"),
    ("segment text a number", [{"segments": [{"source": "model", "text": 7}]}], "segments[0].text"),
    ("segments a string", [{"segments": "<answer>Paris</answer>"}], "trajectory.segments"),
    ("search not a dict", [{"answer": "Paris", "searches": ["x", 3]}], "searches[0]"),
    ("search gold not flags", [{"answer": "Paris", "searches": [{"gold": "yes"}]}], "searches[0].gold"),
    ("errors a string", [{"answer": "Paris", "errors": "no_action"}], "trajectory.errors"),
    ("answer a number", [{"answer": 5}], "trajectory.answer"),
    ("trajectory column too long", [TRAJ, TRAJ], "trajectory"),
]
READS_TRAJECTORY = ("veritas", "globalrag", "search-em", "search-f1")


def _cases():
    out = []
    for name in OPTIONS:
        for case, kw, names in CALLS:
            out.append(pytest.param(name, kw, names, id=f"{name}: {case}"))
        if name in READS_TRAJECTORY:
            for case, traj, names in TRAJ_CALLS:
                kw = {"completions": [DONE.get(name, ANSWER)], "answers": [["Paris"]], "trajectory": traj}
                out.append(pytest.param(name, kw, names, id=f"{name}: {case}"))
    out.append(pytest.param("globalrag", {"completions": [ANSWER], "answers": [["Paris"]],
                                          "gold_plan": ["not a plan"]}, "gold_plan", id="globalrag: gold_plan a string"))
    out.append(pytest.param("globalrag", {"completions": [ANSWER], "answers": [["Paris"]],
                                          "gold_plan": [{"nodes": []}]}, "gold_plan", id="globalrag: gold_plan empty"))
    out.append(pytest.param("globalrag", {"completions": [ANSWER], "answers": [["Paris"]],
                                          "gold_plan": [{"nodes": [{"question": "q"}]}]}, "gold_plan",
                            id="globalrag: gold_plan node without placeholder"))
    return out


CASES = _cases()
#: Options refused at construction: (reward, options, the option the error must name).
OPTION_CASES = [
    ("globalrag", {"alpha": float("nan")}, "alpha"),
    ("globalrag", {"lam": float("inf")}, "lam"),
    ("globalrag", {"gamma": -1.0}, "gamma"),
    ("globalrag", {"delta": "0.5"}, "delta"),
    ("globalrag", {"T": float("nan")}, "T"),
    ("globalrag", {"temperature": 0}, "temperature"),
    ("globalrag", {"midpoint_ratio": float("nan")}, "midpoint_ratio"),
    ("globalrag", {"ged_timeout": -1}, "ged_timeout"),
    ("globalrag", {"batch_size": 0}, "batch_size"),
    ("rag-rl", {"gamma_answer": float("nan")}, "gamma_answer"),
    ("craft", {"weights": {"answer": float("nan")}}, "answer"),
    ("veritas", {"weights": {"em": float("nan")}, "judge": JUDGE}, "weights.em"),
    ("veritas", {"no_search_value": float("nan"), "judge": JUDGE}, "no_search_value"),
    ("veritas", {"judge": {**JUDGE, "temperature": float("nan")}}, "temperature"),
    ("veritas", {"judge": {**JUDGE, "max_tokens": 0}}, "max_tokens"),
    ("craft", {"judge": {**JUDGE, "max_tokens": "abc"}}, "max_tokens"),
]


def test_the_corpus_counts_its_cases():
    assert len(CASES) == 6 * len(CALLS) + 4 * len(TRAJ_CALLS) + 3 == 113
    assert len(OPTION_CASES) == 16


def _refused(fn, names: str) -> CurriculumError:
    with pytest.raises(Exception) as ei:  # noqa: PT011 - the class is checked below, with its message
        fn()
    e = ei.value
    assert isinstance(e, CurriculumError) and isinstance(e, ValueError), (type(e).__name__, e)
    assert names in str(e), (names, str(e))
    assert e.hint, f"no hint: {e}"
    return e


@pytest.mark.parametrize("name, kw, names", CASES)
def test_a_bad_argument_is_one_error_naming_it(name, kw, names):
    reward = get_reward(name, **OPTIONS[name])
    e = _refused(lambda: reward(**kw), names)
    assert isinstance(e, DataError)
    if not isinstance(kw["completions"], str) and names != "completions":
        assert "completion 0 of the batch" in str(e) or e.kind == "wrong_length" or e.field == "answers", str(e)


@pytest.mark.parametrize("name, options, names", OPTION_CASES, ids=[f"{n}: {o}" for n, o, _ in OPTION_CASES])
def test_a_bad_option_is_refused_at_construction(name, options, names):
    e = _refused(lambda: get_reward(name, **{**OPTIONS[name], **options}), names)
    assert isinstance(e, ConfigError)


@pytest.mark.parametrize("reward", ["craft", "veritas"])
def test_a_judge_cache_dir_that_is_a_file_is_refused_at_construction(reward, tmp_path):
    f = tmp_path / "cache.txt"
    f.write_text("mine")
    judge = {**JUDGE, "cache_dir": str(f)}
    e = _refused(lambda: get_reward(reward, judge=judge), "cache_dir")
    assert isinstance(e, ConfigError) and "is a file" in str(e) and "cache_dir=null" in e.hint
    inside = {**JUDGE, "cache_dir": str(f / "sub")}  # a folder whose parent is a file
    assert "is inside" in str(_refused(lambda: get_reward(reward, judge=inside), "cache_dir"))
    assert f.read_text() == "mine"


def test_nan_is_never_a_score():
    """The options that gave ``[nan]`` are refused; the defaults score finite numbers."""
    r = get_reward("globalrag", **OPTIONS["globalrag"])
    assert all(math.isfinite(x) for x in r([ANSWER], answers=[["Paris"]]))


def test_verl_entry_points_refuse_the_same_inputs():
    from rag_curriculum.verl.rewards import compute_globalrag_score, compute_score, compute_search_score

    for fn in (compute_score, compute_search_score):
        _refused(lambda fn=fn: fn("musique", "<answer>Paris</answer>", {"answers": [5]}), "answers")
        _refused(lambda fn=fn: fn("musique", "<answer>Paris</answer>", {"answers": []}), "gold answer")
    _refused(lambda: compute_globalrag_score("musique", ANSWER, {"answers": ["Paris"]}, {"gold_plan": "not a plan"},
                                             embedder="hash", step=0), "gold_plan")


def test_a_trajectory_read_back_with_pandas_scores_as_written(tmp_path):
    """pandas hands lists back as NumPy arrays (``gold`` flags as numpy bools): the rewards read them as lists."""
    import pandas as pd

    path = tmp_path / "t.parquet"
    pd.DataFrame({"trajectory": [TRAJ]}).to_parquet(path)
    back = pd.read_parquet(path)["trajectory"].tolist()
    assert type(back[0]["searches"]).__name__ == "ndarray"
    for name in READS_TRAJECTORY:
        reward = get_reward(name, **OPTIONS[name])
        assert reward([ANSWER], answers=[["Paris"]], trajectory=back) == reward(
            [ANSWER], answers=[["Paris"]], trajectory=[TRAJ]), name
    em = get_reward("search-em", log_components=False)
    assert em.score(ANSWER, ["Paris"], back[0]).gold_found == 1.0
