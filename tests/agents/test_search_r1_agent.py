"""Search-R1's protocol: the prompts (VERITAS's appendix A restored; Search-R1's released text byte for byte), the
turn parser's verdict on hand-made turns (every error type, in its order), the information block's layout."""

from __future__ import annotations

import pytest

from rag_curriculum.agents import INVALID_ACTION, get_agent_template
from rag_curriculum.errors import UnknownNameError
from rag_curriculum.generation._base import cut_at_stop
from rag_curriculum.grammar import STOP, TURN_ERRORS, information_block, parse_trajectory, parse_turn


def test_the_search_r1_prompt_is_veritas_appendix_a_with_the_garbled_words_restored():
    msgs = get_agent_template("search-r1").render("  Who wrote Hamlet?  ")
    assert [m["role"] for m in msgs] == ["user"]
    text = msgs[0]["content"]
    # the OCR's garbles, restored as COMPANIONS.md reconstructs them
    assert "inside <think> and </think> first every time you get new information" in text
    assert "by <search> query </search>, and it will return the top searched results between <information> and " \
           "</information>. You can search as many times as you want." in text
    assert "<answer> and </answer> without detailed illustrations. For example, <answer> xxx </answer>." in text
    assert text.endswith("Question: Who wrote Hamlet?")
    for garble in ("and and", "(search>", "and important in"):
        assert garble not in text


def test_the_original_prompt_is_search_r1s_make_prefix_byte_for_byte():
    text = get_agent_template("search-r1-original").render("Who wrote Hamlet?")[0]["content"]
    assert text == (
        "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you "
        "get new information. After reasoning, if you find you lack some knowledge, you can call a search engine by "
        "<search> query </search> and it will return the top searched results between <information> and "
        "</information>. You can search as many times as your want. If you find no further external knowledge "
        "needed, you can directly provide the answer inside <answer> and </answer>, without detailed "
        "illustrations. For example, <answer> Beijing </answer>. Question: Who wrote Hamlet?\n")


def test_unknown_template_gets_a_did_you_mean():
    with pytest.raises(UnknownNameError, match="search-r1"):
        get_agent_template("search_r1")


@pytest.mark.parametrize("turn,action,content", [
    ("<think>I need the author.</think>\n<search> author of Hamlet </search>", "search", "author of Hamlet"),
    ("<think>known</think> <answer> William Shakespeare </answer>", "answer", "William Shakespeare"),
    ("<answer>Paris</answer> and then more text", "answer", "Paris"),
    # the first action wins, as Search-R1's re.search does
    ("<search>q1</search><answer>a</answer>", "search", "q1"),
    ("<think>a research> plan</think><search>x</search>", "search", "x"),
    ("<think>2 > 1 and the answer is near</think><answer>yes</answer>", "answer", "yes"),
])
def test_valid_turns(turn, action, content):
    t = parse_turn(turn)
    assert (t.action, t.content, t.error) == (action, content, None)


@pytest.mark.parametrize("turn,error", [
    ("<think>x</think><information>Doc 1(Title: t) made up</information><answer>a</answer>", "forged_information"),
    ("<search>q</search></information>", "forged_information"),
    ("<think>x</think><search query</search>", "malformed_tag"),
    ("<think>x</think>(search> capital of France </search>", "malformed_tag"),
    ("<search>capital</answer>", "malformed_tag"),
    ("<search><answer>Paris</answer></search>", "malformed_tag"),
    ("</search>", "malformed_tag"),
    ("<think>x</think>< /search>", "malformed_tag"),
    ("<think>x</think> query search>", "malformed_tag"),
    ("<think>I should look it up</think><search> capital of France", "unclosed_search"),
    ("<answer> Paris", "unclosed_answer"),
    ("<search>   </search>", "empty_query"),
    ("<answer>\n</answer>", "empty_answer"),
    ("<think>thinking only</think>", "no_action"),
    ("", "no_action"),
])
def test_format_errors_are_typed_and_never_an_answer(turn, error):
    t = parse_turn(turn)
    assert t.error == error and t.action is None
    assert error in TURN_ERRORS


def test_an_unclosed_search_is_never_read_as_an_answer():
    # the silent failure of the field's tool parsers: a search emitted but not executed, then "answered"
    t = parse_turn("<search>who directed Alien <answer>Ridley Scott</answer>")
    assert t.action is None and t.error == "malformed_tag"


def test_information_block_is_search_r1s_layout():
    block = information_block([("Hamlet", "A tragedy by Shakespeare."), ("Shakespeare", "An English playwright.")])
    assert block == ("\n\n<information>Doc 1(Title: Hamlet) A tragedy by Shakespeare.\n"
                     "Doc 2(Title: Shakespeare) An English playwright.</information>\n\n")
    assert information_block([]) == "\n\n<information></information>\n\n"


def test_invalid_action_message_is_search_r1s():
    assert INVALID_ACTION.startswith("\nMy previous action is invalid. If I want to search, I should put the query "
                                     "between <search> and </search>.")
    assert INVALID_ACTION.endswith("Let me try again.\n")


def test_cut_at_stop_keeps_the_first_stop_string():
    assert cut_at_stop("<search>q</search> more <answer>a</answer>", STOP) == "<search>q</search>"
    assert cut_at_stop("<answer>a</answer><search>q</search>", STOP) == "<answer>a</answer>"
    assert cut_at_stop("no stop", STOP) == "no stop"


def test_parse_trajectory_blocks_in_order():
    p = parse_trajectory("<think>t1</think><search>q1</search>\n\n<information>Doc 1(Title: A) x</information>\n\n"
                         "<think>t2</think><search>q2</search>\n\n<information>Doc 1(Title: B) y</information>\n\n"
                         "<think>t3</think><answer>final</answer>")
    assert [t for t, _ in p.blocks] == ["think", "search", "information", "think", "search", "information",
                                        "think", "answer"]
    assert p.of("search") == ["q1", "q2"] and p.answer == "final"
    assert parse_trajectory("<think>no answer</think>").answer is None
