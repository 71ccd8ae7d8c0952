"""The strict RAG-RL output parser: one table row per rule, citations with commas, best-effort extraction."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rag_curriculum.prompts import get_template
from rag_curriculum.rewards import (
    DEFAULT_MAX_CHARS,
    FORMATS,
    REASONS,
    OutputFormat,
    ParsedCompletion,
    find_non_english,
    get_format,
    parse_completion,
    register_format,
    split_citations,
)

OK = "<reasoning>\nThe passages say so.\n</reasoning>\n<answer>\nFinal answer: {a}\nSupporting passages: {c}\n</answer>"


def ok(a: str = "Paris", c: str = "France, Paris") -> str:
    return OK.format(a=a, c=c)


# (name, completion, valid, reason, answer, citations)
CASES = [
    ("well formed", ok(), True, None, "Paris", ("France", "Paris")),
    ("surrounding whitespace", "\n  " + ok() + "\n\n", True, None, "Paris", ("France", "Paris")),
    ("compact, one line each", "<reasoning>r</reasoning><answer>Final answer: 4\nSupporting passages: A</answer>",
     True, None, "4", ("A",)),
    ("empty reasoning", ok().replace("The passages say so.", ""), True, None, "Paris", ("France", "Paris")),
    ("no citations", ok(c=""), True, None, "Paris", ()),
    ("headings ignore case", ok().replace("Final answer", "FINAL ANSWER").replace("Supporting", "supporting"),
     True, None, "Paris", ("France", "Paris")),
    ("space before colon", ok().replace("Final answer:", "Final answer :"), True, None, "Paris", ("France", "Paris")),
    ("answer on the next line", ok(a="\nParis"), True, None, "Paris", ("France", "Paris")),
    ("accented answer", ok(a="Ålesund"), True, None, "Ålesund", ("France", "Paris")),
    ("en dash and curly quote", ok(a="1950–1953 ’till"), True, None, "1950–1953 ’till", ("France", "Paris")),
    ("no tags at all", "Final answer: Paris\nSupporting passages: France", False, "missing_tag", "Paris",
     ("France",)),
    ("no reasoning block", "<answer>\nFinal answer: Paris\nSupporting passages: France\n</answer>", False,
     "missing_tag", "Paris", ("France",)),
    ("closing tag without opening", ok().replace("<reasoning>", ""), False, "missing_tag", "Paris",
     ("France", "Paris")),
    ("truncated in the reasoning", "<reasoning>\nThe passages", False, "unclosed_tag", "", ()),
    ("truncated in the answer", ok()[:-len("</answer>")], False, "unclosed_tag", "Paris", ("France", "Paris")),
    ("two answer blocks", ok() + "\n<answer>\nFinal answer: Lyon\nSupporting passages: Lyon\n</answer>", False,
     "duplicate_tag", "Lyon", ("Lyon",)),
    ("tag named in the reasoning", ok().replace("say so.", "say so in <answer>."), False, "duplicate_tag",
     "Paris", ("France", "Paris")),
    ("answer first", "<answer>\nFinal answer: Paris\nSupporting passages: France\n</answer>\n"
     "<reasoning>r</reasoning>", False, "wrong_order", "Paris", ("France",)),
    ("preamble", "Sure! " + ok(), False, "text_outside_tags", "Paris", ("France", "Paris")),
    ("text between blocks", ok().replace("</reasoning>\n", "</reasoning>\nSo:\n"), False, "text_outside_tags",
     "Paris", ("France", "Paris")),
    ("trailing text", ok() + "\nHope this helps!", False, "text_outside_tags", "Paris", ("France", "Paris")),
    ("no final answer heading", ok().replace("Final answer:", "Answer:"), False, "missing_heading", "",
     ("France", "Paris")),
    ("no supporting heading", ok().replace("Supporting passages:", "Sources:"), False, "missing_heading", "Paris",
     ()),
    ("headings swapped", "<reasoning>r</reasoning>\n<answer>\nSupporting passages: France\nFinal answer: Paris\n"
     "</answer>", False, "misplaced_heading", "Paris", ("France",)),
    ("both headings on one line", ok().replace("Paris\nSupporting", "Paris Supporting"), False,
     "misplaced_heading", "Paris", ("France", "Paris")),
    ("text before final answer", ok().replace("<answer>\n", "<answer>\nHere it is.\n"), False, "extra_text",
     "Paris", ("France", "Paris")),
    ("answer over two lines", ok(a="Paris\nbecause it is the capital"), False, "extra_text", "Paris",
     ("France", "Paris")),
    ("text after the citations", ok(c="France\nThat is all."), False, "extra_text", "Paris", ("France",)),
    ("empty answer", ok(a=""), False, "empty_answer", "", ("France", "Paris")),
    ("Chinese in the reasoning", ok().replace("say so", "说明"), False, "non_english", "Paris", ("France", "Paris")),
    ("Cyrillic answer", ok(a="Париж"), False, "non_english", "Париж", ("France", "Paris")),
    ("emoji", ok(a="Paris 🙂"), False, "non_english", "Paris 🙂", ("France", "Paris")),
    ("too long", ok().replace("say so.", "say so. " * 600), False, "too_long", "Paris", ("France", "Paris")),
    ("empty string", "", False, "missing_tag", "", ()),
    ("upper-case tags are not tags", ok().replace("<answer>", "<Answer>"), False, "missing_tag", "Paris",
     ("France", "Paris")),
]


@pytest.mark.parametrize(("completion", "valid", "reason", "answer", "citations"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_parse_table(completion, valid, reason, answer, citations):
    p = parse_completion(completion)
    assert isinstance(p, ParsedCompletion)
    assert (p.valid, p.reason) == (valid, reason), p.detail
    assert p.answer == answer
    assert p.citations == citations
    assert (p.detail == "") == valid


def test_every_reason_has_a_case():
    assert {c[3] for c in CASES if c[3]} == set(REASONS)
    assert len(REASONS) == 11


def test_reasoning_is_returned():
    assert parse_completion(ok()).reasoning == "The passages say so."


def test_max_chars_is_configurable():
    text = ok()
    assert parse_completion(text, max_chars=len(text)).valid
    p = parse_completion(text, max_chars=len(text) - 1)
    assert p.reason == "too_long" and p.answer == "Paris"
    assert DEFAULT_MAX_CHARS == 4000


# (citation line, labels of the row, expected citations)
LABELS = ["Deh Bagh, Ravansar", "Deh Bagh", "Euro", "Euro (2)", "Washington, D.C.", "Richland County, South Carolina",
          "Kent", "A, B, C", "Brass Buttons", "Brass buttons"]
CITATION_LINES = [
    ("Deh Bagh, Ravansar, Kent", LABELS, ("Deh Bagh, Ravansar", "Kent")),
    ("Deh Bagh, Kent", LABELS, ("Deh Bagh", "Kent")),  # the shorter label exists too
    ("Kent, Deh Bagh,Ravansar", LABELS, ("Kent", "Deh Bagh, Ravansar")),  # no space after the comma
    ("deh bagh, ravansar", LABELS, ("Deh Bagh, Ravansar",)),  # canonical spelling back
    ("Brass buttons, brass Buttons", LABELS, ("Brass buttons", "brass Buttons")),  # exact, then ambiguous
    ("Brass Buttons, KENT", LABELS, ("Brass Buttons", "Kent")),
    ('"Euro (2)", Euro', LABELS, ("Euro (2)", "Euro")),
    ("Washington, D.C.", LABELS, ("Washington, D.C.",)),
    ("Kent.", LABELS, ("Kent",)),  # a sentence-final period
    ("Richland County, South Carolina, Euro", LABELS, ("Richland County, South Carolina", "Euro")),
    ("A, B, C, Kent", LABELS, ("A, B, C", "Kent")),
    ("A, B, Kent", LABELS, ("A", "B", "Kent")),  # a prefix of a label is not that label
    ("Kent, Kent, kent", LABELS, ("Kent",)),  # repeated citations once
    ("Unknown, Kent", LABELS, ("Unknown", "Kent")),  # unknown citations stay (they are incorrect citations)
    ("", LABELS, ()),
    (" , ,", LABELS, ()),
    ("Deh Bagh, Ravansar", None, ("Deh Bagh", "Ravansar")),  # without labels commas always split
    ("**Kent**, `Euro`", None, ("Kent", "Euro")),
]


@pytest.mark.parametrize(("line", "labels", "expected"), CITATION_LINES)
def test_split_citations(line, labels, expected):
    assert split_citations(line, labels) == expected
    if labels is not None:
        assert parse_completion(ok(c=line), labels).citations == expected


def test_labels_may_be_any_iterable():
    assert split_citations("Deh Bagh, Ravansar", iter(LABELS)) == ("Deh Bagh, Ravansar",)
    assert split_citations("Deh Bagh, Ravansar", tuple(LABELS)) == ("Deh Bagh, Ravansar",)


def test_find_non_english():
    assert find_non_english("plain ASCII") is None
    assert find_non_english("Ålesund Żołnierz Hawaiʻi Nguyễn α β Δ ½ ™ € → ≤ ﬁ") is None
    for ch in "北Пعא한あ🙂":
        assert find_non_english(f"x {ch} y") == ch


# --- properties ------------------------------------------------------------------------------------------------
line_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r<>,"),
                    min_size=1, max_size=30).map(str.strip).filter(bool)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_parser_never_raises(text):
    p = parse_completion(text, ["Euro", "Deh Bagh, Ravansar"])
    assert p.valid == (p.reason is None)
    assert p.reason is None or p.reason in REASONS


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(LABELS), max_size=5, unique=True), st.text(max_size=200))
def test_rendered_citations_round_trip(cited, noise):
    """Citing labels (commas and all) and parsing the line gives them back, whatever the reasoning says."""
    if any(a != b and (a.startswith(b + ",") or b.startswith(a + ",")) for a in cited for b in cited):
        return  # "A, B, C" next to "A" is genuinely ambiguous; greedy reads the longer label
    text = ok(a="x", c=", ".join(cited)).replace("The passages say so.", noise.replace("<", "").replace(">", ""))
    p = parse_completion(text, LABELS)
    assert p.citations == tuple(cited)
    assert p.answer == "x"


@settings(max_examples=200, deadline=None)
@given(line_text, st.lists(line_text, max_size=4))
def test_valid_completions_parse_back(answer, cited):
    text = ok(a=answer, c=", ".join(cited))
    p = parse_completion(text)
    if find_non_english(text) is None and "final answer" not in answer.lower() and \
            "supporting passages" not in answer.lower():
        assert p.valid, p.detail
        assert p.answer == answer


# --- the format registry ---------------------------------------------------------------------------------------
def test_rag_rl_format_pairs_template_and_parser():
    fmt = get_format("rag-rl")
    assert fmt.template is get_template("rag-rl")
    assert fmt.parse is parse_completion
    assert "Final answer: final answer" in fmt.template.system_prompt


def test_a_new_format_registers_without_touching_the_rest():
    def parse_boxed(text, labels=None, *, max_chars=DEFAULT_MAX_CHARS):
        inner = text.partition("\\boxed{")[2].partition("}")[0]
        return ParsedCompletion(inner, (), bool(inner), None if inner else "missing_tag")

    register_format(OutputFormat("test-boxed", parse_boxed, template_name="rag-rl"))
    try:
        fmt = get_format("test-boxed")
        assert fmt.template.name == "rag-rl"
        assert fmt.parse("so \\boxed{42}").answer == "42"
        with pytest.raises(ValueError, match="already registered"):
            register_format(OutputFormat("test-boxed", parse_boxed))
    finally:
        FORMATS._entries.pop("test-boxed")
    with pytest.raises(KeyError, match="did you mean 'rag-rl'"):
        get_format("rag_rl")
