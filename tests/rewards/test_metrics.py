"""Answer and citation metrics: tables of tricky real answers, properties, and agreement with the official code."""

from __future__ import annotations

import json
import math
import random
import string
from collections import Counter

import pytest
from conftest import HOTPOT_HUB, HOTPOT_TRAIN, MUSIQUE_DEV, MUSIQUE_TRAIN, TWOWIKI_TRAIN
from hypothesis import given, settings
from hypothesis import strategies as st
from support.oracles.official_eval import (  # noqa: E402  the official scripts, transcribed once (tests/official_eval.py)
    ref_em,
    ref_f1,
    ref_normalize_answer,
    ref_update_sp,
)

from rag_curriculum.rewards import (
    CitationScores,
    aggregate,
    answer_f1,
    answer_scores,
    citation_key,
    citation_scores,
    exact_match,
    joint_f1,
    normalize_answer,
)

# --- tables ----------------------------------------------------------------------------------------------------
NORMALIZE = [
    ("The Hateful Eight", "hateful eight"),
    ("A.P.J. Abdul Kalam", "apj abdul kalam"),
    ("A. P. J. Abdul Kalam", "p j abdul kalam"),  # the initial "A" is an article once the dot is gone
    ("U.S.", "us"),
    ("3 a.m.", "3 am"),
    ("$72,641", "72641"),
    ("11,900", "11900"),
    ("48%", "48"),
    ("6.8 inches", "68 inches"),
    ("1950–1953)", "1950–1953"),  # the en dash is not ASCII punctuation: it stays
    ("323–272 BC", "323–272 bc"),
    ("16th - century", "16th century"),
    ("Hewlett-Packard", "hewlettpackard"),
    ("Hudson's Bay", "hudsons bay"),
    ("Samuel Eto'o Fils", "samuel etoo fils"),
    ('Robert "Throb" Young', "robert throb young"),
    ("Ålesund", "ålesund"),
    ("Żołnierz Zwycięstwa", "żołnierz zwycięstwa"),
    ("Al-Masjid an-Nabawī", "almasjid annabawī"),
    ("Dead Man'S Evidence", "dead mans evidence"),
    ("Rock & Roll Hall of Fame", "rock roll hall of fame"),
    ("Teen Titans Go!", "teen titans go"),
    ("an American football quarterback", "american football quarterback"),
    ("Theatre", "theatre"),  # "the" inside a word is not an article
    ("  yes\n", "yes"),
    ("The", ""),
    ("", ""),
    ("Dec. 10, 1817", "dec 10 1817"),
    ("6.21 e6hL", "621 e6hl"),
    ("Nightwing / Dick Grayson", "nightwing dick grayson"),
    ("Las Vegas\u00a0Strip", "las vegas strip"),  # NBSP is whitespace to str.split
]


@pytest.mark.parametrize(("raw", "expected"), NORMALIZE)
def test_normalize_answer_table(raw, expected):
    assert normalize_answer(raw) == expected
    assert normalize_answer(raw) == ref_normalize_answer(raw)


# (prediction, gold answer + aliases, exact match, F1)
ANSWERS = [
    ("Hateful Eight", ["The Hateful Eight", "Hateful Eight"], 1.0, 1.0),
    ("the united states", ["U.S.", "the United States", "United States", "US"], 1.0, 1.0),
    ("USA", ["U.S.", "America"], 0.0, 0.0),
    ("U.S", ["U.S.", "America"], 1.0, 1.0),
    ("1952.", ["1952"], 1.0, 1.0),
    ("in 1952", ["1952"], 0.0, 2 / 3),
    ("1,952", ["1952"], 1.0, 1.0),  # the comma goes with the punctuation
    ("July 1, 2008", ["July 1, 2008"], 1.0, 1.0),
    ("1 July 2008", ["July 1, 2008"], 0.0, 1.0),  # same tokens, another order: F1 is a bag of tokens
    ("July 2008", ["July 1, 2008"], 0.0, 0.8),
    ("$72,641", ["$72,641"], 1.0, 1.0),
    ("72,641 dollars", ["$72,641"], 0.0, 2 / 3),
    ("48 %", ["48%"], 1.0, 1.0),
    ("Ålesund", ["Ålesund"], 1.0, 1.0),
    ("Alesund", ["Ålesund"], 0.0, 0.0),  # no accent folding in the official normalisation
    ("Żołnierz Zwycięstwa", ["Żołnierz Zwycięstwa"], 1.0, 1.0),
    ("yes", ["yes"], 1.0, 1.0),
    ("Yes.", ["yes"], 1.0, 1.0),
    ("no", ["yes"], 0.0, 0.0),
    ("yes, it is", ["yes"], 0.0, 0.0),  # gold is yes/no and the normalised strings differ: 0
    ("no", ["Norway", "NO", "NOR", "no"], 1.0, 1.0),  # an alias that happens to be "no"
    ("Norway no", ["Norway", "no"], 0.0, 2 / 3),  # the yes/no rule only bites on the "no" alias
    ("noanswer", ["Paris"], 0.0, 0.0),
    ("Sir Robert Peel", ["Sir Robert Peel, 1st Baronet"], 0.0, 0.75),
    ("Abdul Kalam", ["A.P.J. Abdul Kalam", "A. P. J. Abdul Kalam", "Abdul Kalam"], 1.0, 1.0),
    ("Kalam", ["A.P.J. Abdul Kalam"], 0.0, 0.5),
    ("Richland County, SC", ["Richland County", "Richland County, South Carolina"], 0.0, 0.8),
    ("The", ["The"], 1.0, 0.0),  # both normalise to "": EM 1, official F1 0
    ("", ["Paris"], 0.0, 0.0),
    ("Paris", [], 0.0, 0.0),
    ("the the the", ["the"], 1.0, 0.0),
    ("Rock and Roll Hall of Fame", ["Rock & Roll Hall of Fame"], 0.0, 10 / 11),
]


@pytest.mark.parametrize(("pred", "answers", "em", "f1"), ANSWERS)
def test_answer_metrics_table(pred, answers, em, f1):
    assert exact_match(pred, answers) == em
    assert answer_f1(pred, answers) == pytest.approx(f1)
    assert answer_scores(pred, answers) == (exact_match(pred, answers), answer_f1(pred, answers))
    if answers:
        assert answer_f1(pred, answers) == ref_f1(pred, answers)
        assert exact_match(pred, answers) == ref_em(pred, answers)


def test_a_single_string_is_one_gold_answer():
    assert exact_match("Paris", "paris") == 1.0
    assert answer_f1("Paris France", "Paris") == pytest.approx(2 / 3)


# (cited, gold, precision, recall, F1)
CITATIONS = [
    (["Euro", "Ohio"], ["Euro", "Ohio"], 1.0, 1.0, 1.0),
    ([" Euro ", "Ohio\n"], ["Euro", "Ohio"], 1.0, 1.0, 1.0),  # surrounding whitespace ignored
    (["Brass buttons"], ["Brass Buttons"], 0.0, 0.0, 0.0),  # case is kept: both titles occur in one 2Wiki row
    (['"Euro"', "*Ohio*"], ["Euro", "Ohio"], 1.0, 1.0, 1.0),  # quotes and markdown emphasis stripped
    (["Euro", "Euro", "Ohio"], ["Euro"], 0.5, 1.0, 2 / 3),  # a repeated citation counts once
    (["Euro (2)"], ["Euro"], 0.0, 0.0, 0.0),  # labels are otherwise exact
    (["Deh Bagh, Ravansar"], ["Deh Bagh, Ravansar", "Kent"], 1.0, 0.5, 2 / 3),
    (["Deh Bagh", "Ravansar"], ["Deh Bagh, Ravansar"], 0.0, 0.0, 0.0),
    ([], ["Kent"], 0.0, 0.0, 0.0),
    (["Kent"], [], 0.0, 0.0, 0.0),
    ([], [], 0.0, 0.0, 0.0),  # HotpotQA's convention for empty sides
    (["A", "B", "C", "D"], ["A", "E"], 0.25, 0.5, 1 / 3),
]


@pytest.mark.parametrize(("cited", "gold", "p", "r", "f"), CITATIONS)
def test_citation_scores_table(cited, gold, p, r, f):
    got = citation_scores(cited, gold)
    assert isinstance(got, CitationScores)
    assert got == pytest.approx((p, r, f))
    precision, recall, f1 = got
    assert (precision, recall, f1) == (got.precision, got.recall, got.f1)
    ref = ref_update_sp([citation_key(c) for c in cited], [citation_key(g) for g in gold])
    assert got == pytest.approx(ref)


def test_joint_f1_reproduces_the_paper_tables():
    # RAG-RL Table 4 (distractor setting): answer F1, citation F1 -> joint F1
    for a, c, j in [(61.31, 44.89, 51.83), (86.27, 83.21, 84.71), (71.73, 67.42, 69.51), (84.42, 76.53, 80.28)]:
        assert round(joint_f1(a, c), 2) == j
    assert joint_f1(0.0, 0.0) == 0.0
    assert joint_f1(1.0, 0.0) == 0.0


def test_aggregate_means_over_samples_then_questions():
    # q1 has 3 samples, q2 one: the question mean is not the sample mean
    values = [1.0, 1.0, 1.0, 0.0]
    assert aggregate(values, ["q1", "q1", "q1", "q2"]) == 0.5
    assert aggregate(values) == 0.75
    rows = [{"answer_f1": 1.0, "citation_f1": 0.0, "joint_f1": 0.0}, {"answer_f1": 0.0, "citation_f1": 1.0,
                                                                      "joint_f1": 0.0}]
    out = aggregate(rows, ["a", "b"])
    assert out == {"answer_f1": 0.5, "citation_f1": 0.5, "joint_f1": 0.5}  # joint of the means, as in the paper
    assert aggregate([{"em": 1.0}, {"em": 0.0}]) == {"em": 0.5}
    with pytest.raises(ValueError, match="at least one"):
        aggregate([])
    with pytest.raises(ValueError, match="groups"):
        aggregate([1.0, 2.0], ["q1"])


# --- properties ------------------------------------------------------------------------------------------------
WORDS = ["a", "an", "the", "The", "yes", "no", "noanswer", "Paris", "paris", "1952", "U.S.", "1,000", "Ålesund",
         "北京", "’s", "-", "—", ",", ".", "!", "Theatre", "another", "A.P.J.", "Kalam", " ", "\t", "\n", "\u00a0",
         "_", "\u0301", "½", "٣", "é", "\u2028", "An", "x"]  # (word characters or not, next to an article)
answer_text = st.one_of(
    st.lists(st.sampled_from(WORDS), max_size=8).map(" ".join),
    st.lists(st.sampled_from(WORDS), max_size=8).map("".join),
    st.text(max_size=30),
)


@settings(max_examples=300, deadline=None)
@given(answer_text)
def test_normalize_is_idempotent_and_official(s):
    n = normalize_answer(s)
    assert n == ref_normalize_answer(s)
    assert normalize_answer(n) == n
    assert n == n.strip()
    assert "  " not in n
    assert not set(n) & set(string.punctuation)
    assert not set(n.split()) & {"a", "an", "the"}


@settings(max_examples=300, deadline=None)
@given(answer_text, st.lists(answer_text, min_size=1, max_size=4))
def test_metric_bounds_and_agreement(pred, answers):
    em, f1 = exact_match(pred, answers), answer_f1(pred, answers)
    assert em in (0.0, 1.0)
    assert 0.0 <= f1 <= 1.0
    assert f1 == ref_f1(pred, answers)
    assert em == ref_em(pred, answers)
    if em == 1.0 and normalize_answer(pred):
        assert f1 == 1.0
    # adding an alias never lowers a score
    assert answer_f1(pred, [*answers, "extra alias"]) >= f1
    assert exact_match(pred, [*answers, "extra alias"]) >= em
    # a prediction equal to a gold answer is always an exact match
    assert exact_match(answers[0], answers) == 1.0


labels = st.lists(st.sampled_from(["Euro", "euro", "Ohio", "Kent", "Deh Bagh, Ravansar", "Euro (2)", " Kent ", '"Ohio"']),
                  max_size=6)


@settings(max_examples=200, deadline=None)
@given(labels, labels)
def test_citation_bounds(cited, gold):
    p, r, f = citation_scores(cited, gold)
    for x in (p, r, f):
        assert 0.0 <= x <= 1.0
    assert f <= max(p, r) + 1e-12
    assert (f > 0) == (p > 0 and r > 0)
    if gold and {citation_key(g) for g in gold} <= {citation_key(c) for c in cited}:
        assert r == 1.0
    assert joint_f1(p, r) <= max(p, r) + 1e-12


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=20), st.randoms(use_true_random=False))
def test_aggregate_bounds(values, rnd):
    groups = [rnd.randrange(4) for _ in values]
    agg = aggregate(values, groups)
    assert min(values) - 1e-12 <= agg <= max(values) + 1e-12
    assert aggregate(values) == pytest.approx(math.fsum(values) / len(values))


# --- agreement with the official formulas on pairs made from real answers ------------------------------------
def real_answer_lists(shared_data) -> list[list[str]]:
    lists: list[list[str]] = []
    for path in (MUSIQUE_TRAIN, MUSIQUE_DEV):
        with open(path, encoding="utf-8") as f:
            for line in f:
                r = json.loads(line)
                lists.append([r["answer"], *r.get("answer_aliases", [])])
    for path in (HOTPOT_TRAIN, TWOWIKI_TRAIN):
        with open(path, encoding="utf-8") as f:
            lists.extend([r["answer"]] for r in json.load(f))
    with open(HOTPOT_HUB, encoding="utf-8") as f:
        lists.extend([json.loads(line)["answer"]] for line in f)
    return lists


def perturb(rng: random.Random, answer: str, pool: list[str]) -> str:
    """A plausible model answer: the gold one edited the way generations differ from it."""
    tokens = answer.split()
    kind = rng.randrange(12)
    if kind == 0:
        return answer
    if kind == 1:
        return answer.upper() if rng.random() < 0.5 else answer.lower()
    if kind == 2:
        return f"{rng.choice(['The', 'a', 'An'])} {answer}{rng.choice(['.', '!', '', ' .'])}"
    if kind == 3 and tokens:
        return " ".join(rng.sample(tokens, len(tokens)))
    if kind == 4 and len(tokens) > 1:
        return " ".join(tokens[: rng.randrange(1, len(tokens))])
    if kind == 5:
        return f"{answer} {rng.choice(pool)}"
    if kind == 6:
        return rng.choice(pool)
    if kind == 7:
        return rng.choice(["yes", "no", "Yes.", "no answer", "noanswer", "", "the", "N/A"])
    if kind == 8:
        return answer.replace(" ", rng.choice(["-", "  ", "\n", ", "]))
    if kind == 9:
        return f"It was {answer}, according to the passages"
    if kind == 10 and tokens:
        return " ".join(t for t in tokens if rng.random() < 0.7) + " " + " ".join(rng.choice(pool).split()[:2])
    return "".join(c for c in answer if c not in ".,'-")


def test_metrics_agree_with_the_official_formulas_on_real_answers(shared_data):
    lists = real_answer_lists(shared_data)
    assert len(lists) == 1200  # 100 + 200 MuSiQue, 100 + 500 HotpotQA / 2Wiki files, 300 Hub rows
    pool = [a for lst in lists for a in lst]
    rng = random.Random(1234)
    checked = disagreements = 0
    kinds = Counter()
    for _ in range(600):
        answers = rng.choice(lists)
        pred = perturb(rng, rng.choice(answers), pool)
        em, f1 = exact_match(pred, answers), answer_f1(pred, answers)
        if (em, f1) != (ref_em(pred, answers), ref_f1(pred, answers)):
            disagreements += 1
        kinds["em"] += em == 1.0
        kinds["partial"] += 0.0 < f1 < 1.0
        kinds["zero"] += f1 == 0.0
        checked += 1
    assert checked == 600
    assert disagreements == 0
    # the generated pairs cover exact, partial and zero scores
    assert min(kinds.values()) >= 50, kinds
