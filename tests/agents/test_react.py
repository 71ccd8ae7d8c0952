"""ReAct's turn parser (typed errors, never a silent answer), its observations (Search's first sentences, Lookup's
cursor, invalid-action feedback) and the CRAG-inspired consistency score, best-of-N and self-consistency on
hand-made trajectories, against values worked out by hand from the definitions in methods/react_crag/_agent.py."""

from __future__ import annotations

import json
import math

import pytest

from rag_curriculum.agents import Hit, SearchCall, Trajectory
from rag_curriculum.grammar import Segment
from rag_curriculum.methods.react_crag import (
    REACT_ERRORS,
    CragWeights,
    ReActFormat,
    ReActStep,
    best_of_n,
    consistency_score,
    parse_react_turn,
    react_steps,
    self_consistency,
)
from rag_curriculum.methods.react_crag._agent import REACT_PROMPT, page_sentences, split_thought


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("Thought 1: I need X.\nAction 1: Search[Paris]\nObservation", ("search", "Paris", None)),
        ("Thought: hm\nAction: search[ Eiffel Tower ]", ("search", "Eiffel Tower", None)),
        ("Thought 2: look.\nAction 2: Lookup[born]", ("lookup", "born", None)),
        ("Thought 3: done.\nAction 3: Finish[Paris [France]]", ("answer", "Paris [France]", None)),
        ("Action 1: FINISH[yes]\n", ("answer", "yes", None)),
        # errors, in the table's order: nothing is executed, nothing is answered
        (
            "Thought 1: x\nObservation 1: Paris is big.\nAction 1: Finish[Paris]",
            (None, "", "forged_observation"),
        ),
        ("Thought 1: the answer is Paris.", (None, "", "no_action")),
        ("Thought 1: Finish[Paris]", (None, "", "no_action")),
        ("Action 1: Search[a]\nAction 2: Finish[b]", (None, "", "multiple_actions")),
        ("Action 1: Search[a]\nThought 2: so b", (None, "", "text_after_action")),
        ("Action 1: Search[Paris", (None, "", "malformed_action")),
        ("Action 1: Search Paris", (None, "", "malformed_action")),
        ("Action 1: Finish[Paris] because", (None, "", "malformed_action")),
        ("Action 1: Google[Paris]", (None, "", "unknown_action")),
        ("Action 1: Finish[ ]", (None, "", "empty_argument")),
        ("Action 1: Search[]", (None, "", "empty_argument")),
    ],
)
def test_parser(text, want):
    got = parse_react_turn(text)
    assert tuple(got) == want
    if got.error is not None:
        assert got.error in REACT_ERRORS and got.action is None and got.content == ""


def test_thought_and_sentences():
    assert split_thought("Thought 4: I should look.\nAction 4: Lookup[x]\nObservation") == "I should look."
    assert page_sentences(["A b. C d.\nE f"]) == ["A b.", "C d.", "E f."]
    assert REACT_PROMPT.startswith(
        "Solve a question answering task with interleaving Thought, Action, Observation"
    )
    assert REACT_PROMPT.endswith("finishes the task.\nQuestion: {question}\n")


def _traj(*segments):
    t = Trajectory("q", 0, [{"role": "user", "content": "?"}])
    t.segments.extend(Segment(*s) for s in segments)
    t.turns = sum(s[0] == "model" for s in segments)
    return t


def test_observations_search_lookup_invalid():
    fmt = ReActFormat(sentences=2)
    t = _traj(("model", "Thought 1: x\nAction 1: Search[Paris]\nObservation"))
    t.searches.append(SearchCall(1, "Paris", ["0", "1"], [True, False]))
    hits = [
        Hit("0", "Paris", "Paris is the capital. It has 2 million people. It is old.", 1.0),
        Hit("1", "Lyon", "Lyon is a city. Paris is north of it.", 0.5),
    ]
    assert fmt.observe(hits, t) == " 1: Paris: Paris is the capital. It has 2 million people.\n"
    t.segments.append(Segment("env", " 1: ...\n"))
    # Lookup walks the page's sentences that hold the keyword, one per call, then says there are no more
    t.segments.append(
        Segment("model", "Thought 2: y\nAction 2: Lookup[paris]")
    )  # ended without the stop string
    t.turns = 2
    lookup = parse_react_turn(t.segments[-1].text)
    assert fmt.act(lookup, t) == "\nObservation 2: (Result 1 / 2) Paris: Paris is the capital.\n"
    assert fmt.act(lookup, t) == "\nObservation 2: (Result 2 / 2) Paris is north of it.\n"
    assert fmt.act(lookup, t) == "\nObservation 2: No more results.\n"
    # a search without results, and an invalid action quoted back (ReAct's "Invalid action: {}")
    t.searches.append(SearchCall(2, "Nowhere", [], [], short=True))
    assert fmt.observe([], t) == "\nObservation 2: Could not find Nowhere.\n"
    assert fmt.act(lookup, t) == "\nObservation 2: No more results.\n"  # a new page: nothing holds "paris"
    t.segments.append(Segment("model", "Thought 3: z\nAction 3: Google[Paris]\nObservation"))
    t.turns = 3
    assert fmt.invalid(parse_react_turn(t.segments[-1].text), t) == " 3: Invalid action: Google[Paris]\n"


def _steps(*steps):
    return [ReActStep(*s) for s in steps]


def test_consistency_terms_by_hand():
    good = _steps(
        (
            "I need the capital of France.",
            "search",
            "capital of France",
            "Paris: Paris is the capital of France.",
        ),
        ("So the answer is Paris.", "answer", "Paris"),
    )
    c = consistency_score(good)
    assert c.terms == {
        "agreement": 1.0,
        "thought_action": 1.0,
        "loops": 0.0,
        "contradiction": 0.0,
        "early": 0.0,
        "errors": 0.0,
    }
    assert c.score == 2.0 and c.answer == "Paris"

    # a loop (the same search twice, 1 of 3 actions repeated; thoughts 1 of 3 repeated), an answer half in the
    # evidence ("the Louvre Museum": tokens louvre, museum; only louvre seen), a thought that searches for
    # something else (1 of 2 searches shares no token with its thought)
    loopy = _steps(
        ("Find the museum.", "search", "Louvre", "The Louvre is in Paris."),
        ("Find the museum.", "search", "Louvre", "The Louvre is in Paris."),
        ("Done.", "answer", "the Louvre Museum"),
    )
    c = consistency_score(loopy)
    assert c.terms["agreement"] == pytest.approx(0.5)
    assert c.terms["loops"] == pytest.approx(1 / 3)
    assert c.terms["thought_action"] == pytest.approx(0.0)  # "museum" vs "louvre": no shared token
    assert c.score == pytest.approx(0.5 + 0.0 - 1 / 3)

    # a contradiction: the last thought concludes London, Finish says Paris; and an early finish
    contra = _steps(("The answer is London.", "answer", "Paris"))
    c = consistency_score(contra)
    assert c.terms["contradiction"] == 1.0 and c.terms["early"] == 1.0 and c.terms["agreement"] == 0.0
    assert c.score == pytest.approx(1.0 - 1.0 - 1.0)  # thought_action 1 (no search), minus the two penalties
    # "the answer is Paris, France" vs Finish[Paris]: one contains the other, no contradiction
    assert (
        consistency_score(_steps(("The answer is Paris, France.", "answer", "Paris"))).terms["contradiction"]
        == 0
    )

    # format errors are a share of the turns; yes/no answers agree with any evidence seen
    errs = _steps(
        ("x", None, "", "Invalid action: Google[a]", "unknown_action"),
        ("Compare them.", "search", "them", "Both are cities."),
        ("", "answer", "yes"),
    )
    c = consistency_score(errs)
    assert c.terms["errors"] == pytest.approx(1 / 3) and c.terms["agreement"] == 1.0

    # no Finish: no score
    assert consistency_score(_steps(("x", "search", "x", "obs"))).score is None
    # weights are the configurable part
    w = CragWeights(agreement=2.0, loops=0.0)
    assert consistency_score(loopy, w).score == pytest.approx(2 * 0.5)


def test_steps_from_segments_and_best_of_n():
    segs = [
        {"source": "model", "text": "Thought 1: find Paris.\nAction 1: Search[Paris]\nObservation"},
        {"source": "env", "text": " 1: Paris: Paris is the capital of France.\n"},
        {"source": "model", "text": "Thought 2: The answer is Paris.\nAction 2: Finish[Paris]"},
    ]
    steps = react_steps(segs)
    assert [(s.thought, s.action, s.argument) for s in steps] == [
        ("find Paris.", "search", "Paris"),
        ("The answer is Paris.", "answer", "Paris"),
    ]
    assert steps[0].observation == "Paris: Paris is the capital of France."
    good = consistency_score(steps)
    bad = consistency_score(_steps(("The answer is Rome.", "answer", "Lyon")))
    none = consistency_score(_steps(("x", "search", "x", "y")))
    assert best_of_n([bad, none, good, good]) == 2  # the highest, the earliest of equals
    assert best_of_n([none, none]) is None
    assert best_of_n([bad, none]) == 0  # any answer beats none, however low its score


def test_self_consistency():
    r = self_consistency(["Paris", "Lyon", "paris", "The Paris", "Lyon", None])
    assert r["answer"] == "Paris" and r["votes"] == 3
    assert r["agreement"] == pytest.approx(3 / 5, abs=1e-4)
    assert r["entropy"] == pytest.approx(-(0.6 * math.log2(0.6) + 0.4 * math.log2(0.4)), abs=1e-4)
    tie = self_consistency(["Lyon", "Paris"])
    assert tie["answer"] == "Lyon" and tie["entropy"] == 1.0
    assert self_consistency([None, None]) == {"answer": None, "votes": 0, "agreement": 0.0, "entropy": 0.0}


@pytest.fixture
def fewshot_registry():
    """Templates a test registers are removed afterwards (the registry is the process's)."""
    from rag_curriculum.agents import AGENT_TEMPLATES

    before = set(AGENT_TEMPLATES.names())
    yield
    for name in set(AGENT_TEMPLATES.names()) - before:
        AGENT_TEMPLATES._entries.pop(name)


def test_react_fewshot_template_is_built_as_react_builds_it(tmp_path, fewshot_registry):
    from rag_curriculum.agents import get_agent_template
    from rag_curriculum.errors import ConfigError
    from rag_curriculum.methods.react_crag import react_fewshot_template
    from rag_curriculum.methods.react_crag._agent import REACT_INSTRUCTION

    # a hand-made file in the layout of ReAct's prompts/prompts_naive.json (its webthink_simple6 key)
    examples = (
        "\nQuestion: Which {city} is the capital of France?\nThought 1: I need to search France.\n"
        "Action 1: Search[France]\nObservation 1: France's capital is Paris.\nThought 2: So Paris.\n"
        "Action 2: Finish[Paris]\n"
    )
    path = tmp_path / "prompts_naive.json"
    path.write_text(json.dumps({"webthink_simple6": examples, "cotqa_simple6": "x"}))
    t = react_fewshot_template(path)
    assert get_agent_template("react-fewshot") is t
    want = REACT_INSTRUCTION + "Here are some examples.\n" + examples + "Question: Who?\n"
    assert t.render("Who?") == [{"role": "user", "content": want}]  # braces in the examples kept as written
    path.write_text(json.dumps({"webthink_simple": "no"}))
    with pytest.raises(ConfigError, match="no few-shot trajectories under 'webthink_simple6'"):
        react_fewshot_template(path)
    with pytest.raises(ConfigError, match="cannot read ReAct's prompts"):
        react_fewshot_template(tmp_path / "missing.json")
