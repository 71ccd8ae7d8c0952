"""``search-r1``: Search-R1's own reward (``qa_em.compute_score_em`` on the decoded prompt plus response), bit for bit.

The frozen table ``search_r1_table.json`` holds what the original function gave on the 216 trajectories of
``tests/support/search_r1_trajectories.py`` (``python scripts/search_r1_table.py --search-r1 PATH/TO/Search-R1`` made it, from
Search-R1 a14dc3a); the verl tier compares verl's copy of the function on the same trajectories."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest
from support.search_r1_trajectories import BEHAVIOURS, SETTINGS, TABLE, digest, strip_special, trajectories

from rag_curriculum._metrics import normalize_answer
from rag_curriculum.errors import ConfigError, DataError, RewardInputError
from rag_curriculum.methods.search_r1 import (
    SearchEmReward,
    SearchR1Reward,
    search_r1_score,
    search_r1_sequence,
    search_r1_target,
)
from rag_curriculum.rewards import get_reward


@pytest.fixture(scope="module")
def table():
    frozen = json.loads(TABLE.read_text())
    trajs = trajectories()
    assert [t["id"] for t in trajs] == [r["id"] for r in frozen["trajectories"]]
    assert [digest(t) for t in trajs] == [r["digest"] for r in frozen["trajectories"]]  # the same strings scored
    assert frozen["settings"] == list(SETTINGS)
    return trajs, [r["scores"] for r in frozen["trajectories"]]


def test_the_original_functions_scores_on_216_trajectories(table):
    trajs, expected = table
    assert len(trajs) >= 200
    assert set(BEHAVIOURS) <= {t["behaviour"] for t in trajs}  # every corner is among them
    assert len({t["template"] for t in trajs}) == 3
    got = [[search_r1_score(t["sequence"], t["target"], **s) for s in SETTINGS] for t in trajs]
    wrong = [(t["id"], g, e) for t, g, e in zip(trajs, got, expected, strict=True) if g != e]
    assert not wrong, wrong
    scores = Counter(x for row in expected for x in row)
    assert set(scores) == {0.0, 0.1, 1.0} and scores[1.0] > 100  # each outcome occurs (format_score too)


def test_the_corners_read_as_search_r1_reads_them(table):
    """The corners of Search-R1's reward, checked by name against the original's scores (format_score 0 / 0.1)."""
    trajs, expected = table
    by = {t["id"]: e for t, e in zip(trajs, expected, strict=True)}
    assert by["corner-example_is_gold_original"] == [1.0, 1.0]  # no answer: the prompt's "Beijing" is read
    assert by["corner-example_is_gold_toolkit"] == [1.0, 1.0]  # the toolkit's prompt: its "xxx"
    assert by["corner-plain_no_answer"] == [0.0, 0.0]  # no example in the prompt: nothing read, 0 not format_score
    assert by["corner-plain_one_answer"] == [0.0, 0.0]  # one <answer> in prompt + response: none is read
    assert by["corner-plain_two_answers"] == [1.0, 1.0]  # the last of two
    assert by["corner-empty_alias"] == [1.0, 1.0]  # "the" normalises to "", as the empty alias does
    assert by["corner-unclosed_in_prompt"] == [0.0, 0.0]  # one match across the chat template: none read
    for t, e in zip(trajs, expected, strict=True):
        if t["behaviour"] == "no_answer" and t["template"] != "plain":  # the prompt's example, wrong: format_score
            assert e == [0.0, 0.1], t["id"]
        if t["behaviour"] == "special_token_inside":  # "<|im_end|>" inside the answer: never a match
            assert e[0] == 0.0, t["id"]


def test_the_default_search_em_reads_more_strictly(table):
    """Where the toolkit's default (``search-em``, on the completion text as TRL hands it) and ``search-r1`` differ:
    exactly the cases docs/search-agents.md lists (single answer with no example in the prompt, an answer inside
    <think> or a forged <information>, the prompt's example, an empty alias, a special token inside the answer)."""
    trajs, expected = table
    em = SearchEmReward()
    differ = Counter()
    for t, e in zip(trajs, expected, strict=True):
        gold = [t["target"]] if isinstance(t["target"], str) else [a for a in t["target"] if a.strip()]
        default = em.score(strip_special(t["response"]), gold).exact_match
        if default != e[0]:
            differ[(t["behaviour"] if t["template"] != "plain" or t["behaviour"].startswith("plain")
                    else "plain prompt, one answer")] += 1
    assert set(differ) == {"plain prompt, one answer", "plain_one_answer", "answer_in_think", "forged_information",
                           "example_is_gold_original", "example_is_gold_toolkit", "empty_alias",
                           "special_token_inside"}, differ
    assert sum(differ.values()) == 51  # of 216


@pytest.mark.slow
def test_the_trl_reward_decodes_as_search_r1s_manager(table, tiny_model_dir):
    """Under TRL the completion text comes without special tokens; with the model's tokenizer (``curriculum
    train`` sets it) the reward decodes the rendered prompt and the completion's ids with them, as Search-R1's
    reward manager does, and gives the original's score on every trajectory. Without it, an answer holding a
    special token reads as the answer (10 trajectories), which Search-R1 never matches. A target the answer
    normalisation empties (``["?!"]``, against which Search-R1 scores ``<answer> ... </answer>`` 1.0) is refused by
    the reward, naming the completion; a target with an alias it empties (``["Paris", ""]``) keeps the others only,
    so the empty answer Search-R1 scores 1.0 scores as a miss (the one departure); the other trajectories score as
    the original."""
    from transformers import AutoTokenizer

    trajs, expected = table
    empty = [i for i, t in enumerate(trajs) if not any(normalize_answer(a) for a in t["target"])]
    assert [trajs[i]["behaviour"] for i in empty] == ["punctuation_only"]
    with pytest.raises(DataError, match=r"completion 0 of the batch, field 'reward_model.ground_truth.target': "
                       r"holds \['\?!'\]: no answer once normalised"):
        SearchR1Reward()([trajs[empty[0]]["response"]], [trajs[empty[0]]["user"]],
                         reward_model=[{"ground_truth": {"target": trajs[empty[0]]["target"]}}])
    trajs, expected = ([x for i, x in enumerate(seq) if i not in empty] for seq in (trajs, expected))
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    prompts = [[{"role": "user", "content": t["user"]}] for t in trajs]
    completions = [[{"role": "assistant", "content": strip_special(t["response"])}] for t in trajs]
    ids = [tok(t["response"], add_special_tokens=False)["input_ids"] for t in trajs]
    rm = [{"style": "rule", "ground_truth": {"target": t["target"]}} for t in trajs]
    logged = {}
    reward = get_reward("search-r1", tokenizer=str(tiny_model_dir))
    got = reward(completions, prompts, reward_model=rm, completion_ids=ids, log_metric=logged.__setitem__)
    departs = [i for i, t in enumerate(trajs) if t["behaviour"] == "empty_alias"]
    assert len(departs) == 1 and expected[departs[0]][0] == 1.0 and got[departs[0]] == 0.0
    expected = [[0.0, 0.1] if i in departs else e for i, e in enumerate(expected)]  # a miss: the format score
    assert got == [e[0] for e in expected]
    assert set(logged) == {"search_r1/score", "search_r1/exact_match", "search_r1/extracted", "search_r1/from_prompt"}
    assert 0 < logged["search_r1/from_prompt"] < logged["search_r1/extracted"]
    fs = SearchR1Reward(format_score=0.1, tokenizer=str(tiny_model_dir))(completions, prompts, reward_model=rm,
                                                                          completion_ids=ids)
    assert fs == [e[1] for e in expected]
    plain = SearchR1Reward()(completions, prompts, reward_model=rm)
    off = [t["behaviour"] for t, a, e in zip(trajs, plain, expected, strict=True) if a != e[0]]
    assert off and set(off) == {"special_token_inside"}, Counter(off)


def test_the_sequence_is_the_decoded_prompt_and_response(tiny_model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    messages = [{"role": "user", "content": "Q? For example, <answer> Beijing </answer>."}]
    seq, start = search_r1_sequence(messages, "<answer> Paris </answer>", tokenizer=tok,
                                    completion_ids=tok("<answer> Paris </answer><|im_end|>")["input_ids"])
    assert seq == ("<|im_start|>user\nQ? For example, <answer> Beijing </answer>.<|im_end|>\n<|im_start|>assistant\n"
                   "<answer> Paris </answer><|im_end|>")
    assert seq[start:] == "<answer> Paris </answer><|im_end|>"


def test_targets_and_bad_input():
    """Search-R1's ``target`` is read as it is (a string is one answer), less the aliases the answer normalisation
    empties (an empty answer would score 1.0 against them); a target that is empty or not a list of strings, and a
    row without any gold answer, are refused in one line naming the row and the field."""
    assert search_r1_target({"ground_truth": {"target": "Paris"}}) == "Paris"
    assert search_r1_target({"ground_truth": {"target": ("Paris", "", "the")}}) == ["Paris"]
    rm = [{"ground_truth": {"target": ["Paris", "the"]}}] * 2
    asked = "Answer inside <answer> and </answer>. For example, <answer> Beijing </answer>. Question: Q?\n"
    assert SearchR1Reward()(["<answer> a </answer>", "<answer> Paris </answer>"], [asked] * 2,
                            reward_model=rm) == [0.0, 1.0]
    assert search_r1_target({"ground_truth": {"answers": ["Lyon"]}}) == ["Lyon"]  # rows without target: the gold reader
    reward = SearchR1Reward()
    cases = [({"ground_truth": {"target": []}}, "target': holds []: no answer to compare with"),
             ({"ground_truth": {"target": ["", " "]}}, "no answer to compare with"),
             ({"ground_truth": {"target": ""}}, "target': an empty string"),
             ({"ground_truth": {"target": 7}}, "target': holds 7 (int), not a list of answers"),
             ({"ground_truth": {"target": ["Paris", 3]}}, "entry 1 is 3"),
             ({"ground_truth": {"target": ["the"]}}, "target': holds ['the']: no answer once normalised"),
             ({"ground_truth": {"target": "..."}}, "target': holds ['...']: no answer once normalised"),
             ({"ground_truth": {"gold_labels": ["a"]}}, "no gold answer under")]
    for rm, words in cases:
        with pytest.raises(DataError) as e:
            reward(["<answer>x</answer>"], ["<answer> a </answer>"], reward_model=[rm], id=["nq-train_6"])
        msg = str(e.value)
        assert words in msg and "completion 0 of the batch (row id 'nq-train_6')" in msg, msg
        assert "\n" not in msg.split(" hint")[0] and (e.value.field in (None, "reward_model.ground_truth.target"))
    with pytest.raises(RewardInputError, match="needs the gold answers"):
        reward(["<answer>x</answer>"], ["p"])
    for bad in ({"format_score": math.nan}, {"score": "1"}, {"tokenizer": ""}):
        with pytest.raises(ConfigError):
            SearchR1Reward(**bad)


def test_the_verl_function_needs_the_prompt_and_names_a_row_without_gold():
    from rag_curriculum.verl.rewards import compute_search_r1_score

    with pytest.raises(ConfigError, match="handed it the response alone"):
        compute_search_r1_score("nq", "<answer> Paris </answer>", {"target": ["Paris"]})
    with pytest.raises(DataError) as e:
        compute_search_r1_score("nq", "<answer> x </answer>", {"target": []}, {"index": 4}, prompt_str="p")
    assert str(e.value).startswith("data_source 'nq', extra_info.index 4, field 'reward_model.ground_truth.target'")
    with pytest.raises(DataError, match="no gold answer under"):
        compute_search_r1_score("nq", "<answer> x </answer>", {"gold_labels": ["a"]}, prompt_str="p")
    p = "Answer in <answer> and </answer>, e.g. <answer> Beijing </answer>. Q?"
    assert compute_search_r1_score("nq", "<answer> the Paris. </answer>", {"target": "Paris"}, prompt_str=p) == {
        "score": 1.0, "acc": 1.0, "extracted": 1.0, "from_prompt": 0.0}


def test_the_documented_original_behaviour_composes():
    """docs/search-agents.md's "Search-R1's behaviour, end to end": its train command's overrides make a run whose
    rewards are search-r1 alone, with the model's tokenizer (as `curriculum train` binds it), and its eval command's
    flags are the eval options."""
    import re
    import shlex
    from pathlib import Path

    from rag_curriculum.evaluation._agent import AgentEvalConfig
    from rag_curriculum.train import compose_train_config, reward_funcs_from_config
    from rag_curriculum.train._rewards import with_model_tokenizer

    text = (Path(__file__).resolve().parents[2] / "docs" / "search-agents.md").read_text()
    block = next(b for b in re.findall(r"```bash\n(.*?)```", text, re.S) if "--reward search-r1" in b)
    lines = [x.split("#")[0] for x in block.replace("\\\n", " ").splitlines()]
    train = shlex.split(next(x for x in lines if x.startswith("curriculum train")))[2:]
    cfg = compose_train_config(None, train)
    assert [r.name for r in cfg.rewards] == ["search-r1"] and cfg.agent.template == "search-r1-original"
    funcs, weights = reward_funcs_from_config([{"name": r.name, "weight": r.weight, "kwargs": r.kwargs}
                                               for r in cfg.rewards])
    (f,) = with_model_tokenizer(funcs, cfg.model.name_or_path)
    assert isinstance(f, SearchR1Reward) and f.tokenizer == cfg.model.name_or_path and weights == [1.0]
    verl = next(x for x in lines if "run_search_r1.sh" in x or x.startswith("REWARD="))
    assert "REWARD=search-r1" in verl and "TEMPLATE=search-r1-original" in verl
    ev = next(x for x in lines if x.startswith("curriculum eval"))
    assert {"--reward", "--template"} <= set(shlex.split(ev)) and "reward" in AgentEvalConfig.__dataclass_fields__
