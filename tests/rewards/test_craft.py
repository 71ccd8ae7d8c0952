"""CRAFT's trace formats, parsers and deterministic rewards, checked on the paper's own examples (Table 3, the case
studies of appendix A, Table 12's error taxonomy) and on reward tables computed by hand."""

from __future__ import annotations

import pickle

import pytest

from rag_curriculum.errors import ConfigError
from rag_curriculum.methods.craft._format import CRAFT_REASONS, CRAFT_VARIANTS, cited_documents, parse_craft
from rag_curriculum.methods.craft._reward import CraftReward, boundary_check
from rag_curriculum.prompts import Passage, get_template
from rag_curriculum.rewards import get_format, get_parser, get_reward, score_completion
from rag_curriculum.train import reward_funcs_from_config
from rag_curriculum.verl.rewards import compute_craft_score

# Table 3 (HotpotQA, CRAFT_v1), verbatim, in the tags the paper names.
TABLE3 = """<plan>
Subquestion1: Which research project was conducted by the Creation Research Society and the Institute for Creation Research between 1997 and 2005?
Subquestion2: Who was Kevin R. Henke most critical of in [ANSWER..0]?
</plan>
<gold_docs>
[2, 7]
</gold_docs>
<reason>
Subquestion1: From document [2], it is clear that the RATE project was conducted by the Creation Research Society and the Institute for Creation Research between 1997 and 2005.
Subquestion2: Document [7] states that Kevin R. Henke has been critical of the RATE project's results, specifically mentioning that he has argued that Russell Humphreys, a young-earth creationist involved in the project, has made errors in his research.
</reason>
<answer>
Russell Humphreys
</answer>"""

# Appendix A, Table 4 (case 1) and Table 5 (case 2): the reasons, verbatim, with their gold_docs.
CASE1_BASE = ("[Answer1] Charles Mingus, the creator of the Oh Yeah album, was born in Nogales, Arizona (doc [5]). "
              "[Answer2] The largest city and capital of Arizona is Phoenix (doc [12]). [Answer3] The Desert Diamond "
              "West Valley Phoenix Grand Prix was held in Phoenix, and the winner of the Indy car race there in 2016 "
              "was Ryan Hunter-Reay (doc [1]).")
CASE1_CRAFT = ("Doc [11] indicates that the Oh Yeah performer, Charles Mingus, is from Nogales, Arizona. Doc [12] "
               "states that the capital and largest city of Arizona is Phoenix. Doc [1] mentions that the Desert "
               "Diamond West Valley Phoenix Grand Prix was held in Phoenix, and it is an Indy car race where Mario "
               "Andretti won.")
CASE2_BASE = ("[Answer1]: From document 4, we learn that the creator of MacGruder and Loud is Aaron Spelling. Document "
              "5 tells us that Lorraine Crosby, known as \"Mrs. Loud,\" is English. Therefore, the nationality of the "
              "creator of MacGruder and Loud is English. Document 2 provides the average yearly income for Americans, "
              "which is the closest nationality we have data for. The mean household income in the United States was "
              "$72,641.")
CASE2_CRAFT = ("Doc [8] states that MacGruder and Loud was one of the few failures from Aaron Spelling's production "
               "company. Doc [4] provides information about Aaron Spelling, indicating that he was an American film "
               "and television producer. Therefore, the creator of MacGruder and Loud is American. The average yearly "
               "income for an American, as mentioned in doc [2], is $72,641.")


def v1(plan="Q1?", gold="[2, 7]", reason="doc [2] and doc [7]", answer="Russell Humphreys"):
    return (f"<plan>\n{plan}\n</plan>\n<gold_docs>\n{gold}\n</gold_docs>\n<reason>\n{reason}\n</reason>\n"
            f"<answer>\n{answer}\n</answer>")


# --- templates ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(CRAFT_VARIANTS))
def test_templates_ask_for_exactly_their_tags(name):
    t = get_template(name)
    system = t.render("Q?", [Passage("1", "A", "a", True)])[0]["content"]
    tags = [tag for tag in ("plan", "gold_docs", "reason", "answer") if f"<{tag}>" in system]
    assert tuple(tags) == CRAFT_VARIANTS[name]
    assert [system.index(f"<{x}>") for x in tags] == sorted(system.index(f"<{x}>") for x in tags)
    assert t.numbered and t.index_base == 1 and get_format(name).template is t


def test_passages_are_numbered_from_one_or_zero():
    passages = [Passage("", "Euro", "The euro.", False), Passage("", "Euro", "A coin.", True)]
    t = get_template("craft-v2")
    for base, want in ((1, ["1", "2"]), (0, ["0", "1"])):
        tb = t.with_index_base(base)
        labels = tb.labels([p.title for p in passages])
        assert labels == want
        user = tb.render("Q?", [p._replace(label=lb) for p, lb in zip(passages, labels, strict=True)])[1]["content"]
        assert f"[{want[0]}] Euro\nThe euro.\n\n[{want[1]}] Euro\nA coin.\n\nQuestion: Q?" in user
    with pytest.raises(ConfigError, match="0 or 1"):
        t.with_index_base(2)
    with pytest.raises(ConfigError, match="cites passages by title"):
        get_template("rag-rl").with_index_base(0)


# --- the parser on the paper's examples ---------------------------------------------------------------------------
def test_table3_trace_is_valid():
    p = parse_craft(TABLE3, variant="craft-v1")
    assert p.valid and p.reason is None
    assert p.answer == "Russell Humphreys" and p.gold_docs == (2, 7) and p.citations == ("2", "7")
    assert p.cited == (2, 7) and p.plan.startswith("Subquestion1: Which research project")
    s = score_completion(TABLE3, ["Russell Humphreys"], ["2", "7"], parse=get_parser("craft-v1"))
    assert (s.exact_match, s.answer_f1, s.citation_f1, s.valid) == (1.0, 1.0, 1.0, True)


@pytest.mark.parametrize("reason,gold,cited,inside", [
    (CASE1_BASE, (5, 12, 14), (5, 12, 1), 0.0),  # judge: "Cites doc [1] not in gold_docs [5,12,14]" -> 0
    (CASE1_CRAFT, (11, 12, 1), (11, 12, 1), 1.0),  # judge: "All cited docs [11,12,1] in gold_docs" -> 1
    (CASE2_BASE, (4, 5, 2), (4, 5, 2), 1.0),  # every number cited is declared (the judge's 0 is semantic)
    # The paper's judge passes this one ("All cited docs [8,4] in gold_docs"), but <reason> also cites doc [2]:
    # Algorithm 1's predicate, R within E, is false, and the rule says so.
    (CASE2_CRAFT, (8, 4), (8, 4, 2), 0.0),
])
def test_case_studies_citation_boundary(reason, gold, cited, inside):
    y = v1(gold=str(list(gold)), reason=reason)
    p = parse_craft(y, variant="craft-v1")
    assert p.valid and p.gold_docs == gold and p.cited == cited
    assert boundary_check(p.cited, p.gold_docs) == inside


def test_cited_documents_forms():
    assert cited_documents("see [7]; docs [11, 12, 1] and Document 3, documents 4 and 5, passage #6") == (
        7, 11, 12, 1, 3, 4, 5, 6)
    assert cited_documents("[ANSWER..0] and [Answer1] are placeholders, not documents") == ()


# Table 12, one case per row (the completions reconstructed around the printed fragments).
OK_PLAN = "<plan>Q1?</plan>\n<gold_docs>[1]</gold_docs>\n<reason>doc [1]</reason>\n"
TABLE12 = [
    ("craft-v1", OK_PLAN + "<answer>1958 Award", "missing_closing_tag"),
    ("craft-v1", "<plan>Q1?</plan>\n<gold_docs>[3]</gold_docs>\n<reason>...grandmother of Henry St John (",
     "truncated"),
    ("craft-v1", OK_PLAN + "<answer>", "empty_answer"),
    ("craft-v2", "<gold_docs>[1]</gold_docs><reason>r</reason><answer>[Edwin Schlossberg]", "missing_closing_tag"),
    ("craft-v2", "<gold_docs>[1]</gold_docs><reason>...Michael Rubbo</answer>", "tag_mismatch"),
    ("craft-v2", "None", "wrong_format"),
    ("craft-v3", "<plan>Q1?</plan><reason>...answer is American.</reason>", "missing_answer"),
    ("craft-v3", "<plan>Q1?</plan><reason>...cannot determine based on", "truncated"),
    ("craft-v3", "<plan>Q1?</plan><reason>r</reason><answer>Infanta Maria", "missing_closing_tag"),
    ("craft-v3", "<plan>Q1?</plan><reason>r</reason><answer>The Woman in Fifth</>", "missing_closing_tag"),
    ("craft-v4", "<reason>r</reason><answer>Russell Humphreys", "missing_closing_tag"),
    ("craft-v4", "<reason>r</reason><answer>No</answer> (Note: The reasoning...)", "extra_text"),
    ("craft-v5", "A Bug's Life", "wrong_format"),
    ("craft-v5", "[Beaumont, Texas]", "wrong_format"),
    ("craft-v5", "[No]", "wrong_format"),
]


@pytest.mark.parametrize("variant,text,reason", TABLE12)
def test_table12_error_taxonomy(variant, text, reason):
    p = parse_craft(text, variant=variant)
    assert not p.valid and p.reason == reason and p.detail
    assert reason in CRAFT_REASONS


@pytest.mark.parametrize("variant,text,reason,detail", [
    ("craft-v1", "<gold_docs>[1]</gold_docs><reason>r</reason><answer>a</answer>", "wrong_format", "no <plan>"),
    ("craft-v4", "<plan>p</plan><reason>r</reason><answer>a</answer>", "wrong_format", "not a tag of this format"),
    ("craft-v4", "<answer>a</answer><reason>r</reason>", "wrong_format", "order"),
    ("craft-v4", "<reason>r</reason><reason>s</reason><answer>a</answer>", "wrong_format", "2 times"),
    ("craft-v2", "<gold_docs>documents two and five</gold_docs><reason>r</reason><answer>a</answer>",
     "wrong_format", "document numbers"),
    ("craft-v2", "<gold_docs>[2, 5</gold_docs><reason>r</reason><answer>a</answer>", "wrong_format",
     "document numbers"),
    ("craft-v4", "Sure! <reason>r</reason><answer>a</answer>", "extra_text", "before the first tag"),
    ("craft-v4", "<reason>r</reason> so <answer>a</answer>", "extra_text", "between blocks"),
    ("craft-v4", "<reason>r</reason><answer>  </answer>", "empty_answer", "nothing"),
    ("craft-v4", "<reason>r<answer>a</answer>", "missing_closing_tag", "<reason> is not closed"),
    ("craft-v4", "r</reason><answer>a</answer>", "wrong_format", "without <reason>"),
])
def test_other_broken_formats(variant, text, reason, detail):
    p = parse_craft(text, variant=variant)
    assert (p.valid, p.reason) == (False, reason) and detail in p.detail


@pytest.mark.parametrize("gold", ["[2, 5]", "2, 5", "[ 2 ,5 ]", "[]", "", "[7]"])
def test_gold_docs_lists_that_keep_the_format(gold):
    assert parse_craft(f"<gold_docs>{gold}</gold_docs><reason>r</reason><answer>a</answer>", variant="craft-v2").valid


def test_valid_variants_and_extraction():
    assert parse_craft("<answer> Paris </answer>\n", variant="craft-v5").answer == "Paris"
    p = parse_craft("<reason>r</reason>\n\n<answer>a</answer>", variant="craft-v4")
    assert p.valid and p.gold_docs is None and p.citations == ()
    # extraction still works on a broken trace: the last answer block, the declared numbers
    p = parse_craft("<plan>p</plan><gold_docs>[3, 3, 1]</gold_docs><reason>r</reason><answer>x</answer> note",
                    variant="craft-v1")
    assert (p.valid, p.answer, p.gold_docs) == (False, "x", (3, 1))


# --- rewards: hand-computed tables ------------------------------------------------------------------------------
GOLD = ["2", "7"]
ANSWERS = ["Russell Humphreys"]
ROWS = [
    # completion, format, evidence, answer, boundary
    (TABLE3, 1.0, 1.0, 1.0, 1.0),
    # <gold_docs> [2, 5]: P = R = 1/2, F1 0.5; "Humphreys" vs "Russell Humphreys": P 1, R 1/2, F1 2/3
    (v1(gold="[2, 5]", reason="document [2], then [5]", answer="Humphreys"), 1.0, 0.5, 2 / 3, 1.0),
    # cites [9] outside its gold_docs: boundary 0, the rest as declared
    (v1(reason="doc [2], doc [9]"), 1.0, 1.0, 1.0, 0.0),
    # declares nothing it cites ... and answers wrong
    (v1(gold="[]", reason="no citation", answer="Henke"), 1.0, 0.0, 0.0, 0.0),
    # the gate: a missing </answer> zeroes everything
    (TABLE3.replace("</answer>", ""), 0.0, 0.0, 0.0, 0.0),
    (TABLE3 + "\n(Note: checked.)", 0.0, 0.0, 0.0, 0.0),
]


@pytest.mark.parametrize("text,fmt,evidence,answer,boundary", ROWS)
def test_reward_table_v1(text, fmt, evidence, answer, boundary):
    b = CraftReward("craft-v1").score(text, ANSWERS, GOLD)
    assert (b.format, b.evidence, b.boundary) == (fmt, evidence, boundary)
    assert b.answer == pytest.approx(answer)
    assert b.total == pytest.approx(fmt + evidence + answer)  # appendix B's terms, summed (weights 1.0)
    assert CraftReward("craft-v1", normalize=True).score(text, ANSWERS, GOLD).total == pytest.approx(
        (fmt + evidence + answer) / 3)
    every = CraftReward("craft-v1", terms=("format", "answer", "evidence", "boundary"),
                        weights={"boundary": 2.0}).score(text, ANSWERS, GOLD)
    assert every.total == pytest.approx(fmt + evidence + answer + 2 * boundary)


def test_reward_on_variants_without_gold_docs():
    r = CraftReward("craft-v4")
    b = r.score("<reason>doc [1]</reason><answer>Russell</answer>", ANSWERS, GOLD)
    assert (b.format, b.evidence, b.boundary, b.judge) == (1.0, None, None, None)
    assert b.answer == pytest.approx(2 / 3) and b.total == pytest.approx(1 + 2 / 3)
    assert r.terms == ("format", "answer")
    b5 = CraftReward("craft-v5").score("Russell Humphreys", ANSWERS, GOLD)  # bare text: wrong format, gated
    assert (b5.total, b5.answer, b5.answer_f1, b5.format_reason) == (0.0, 0.0, 1.0, "wrong_format")
    with pytest.raises(ConfigError, match="no <gold_docs>: craft-evidence does not apply"):
        get_reward("craft-evidence", output_format="craft-v3")
    with pytest.raises(ConfigError, match="no <gold_docs>: craft-boundary does not apply"):
        get_reward("craft-boundary", output_format="craft-v5")
    with pytest.raises(ConfigError, match="no <gold_docs>"):
        CraftReward("craft-v4", terms=("format", "boundary"))
    with pytest.raises(ConfigError, match="did you mean 'craft-v1'"):
        CraftReward("craft-v11")
    with pytest.raises(ConfigError, match="needs a judge"):
        get_reward("craft-judge")


def test_trl_call_components_and_logging():
    funcs, weights = reward_funcs_from_config(["craft-format", "craft-evidence", {"name": "craft-answer"}])
    texts = [TABLE3, v1(gold="[2, 5]", answer="Humphreys"), "nothing"]
    kwargs = dict(answers=[ANSWERS] * 3, gold_labels=[GOLD] * 3, trainer_state=None, prompts=[[]] * 3)
    got = [f(completions=[[{"role": "assistant", "content": t}] for t in texts], **kwargs) for f in funcs]
    assert got[0] == [1.0, 1.0, 0.0] and got[1] == [1.0, 0.5, 0.0]
    assert got[2] == pytest.approx([1.0, 2 / 3, 0.0]) and weights == [1.0, 1.0, 1.0]
    logged: dict = {}
    total = get_reward("craft")(texts, log_metric=logged.__setitem__,
                                log_extra=lambda k, v: logged.__setitem__(k, v), **kwargs)
    assert total == pytest.approx([3.0, 1 + 0.5 + 2 / 3, 0.0])
    assert logged["craft/format"] == pytest.approx(2 / 3) and logged["craft/evidence"] == pytest.approx(0.5)
    assert "craft/judge" not in logged and logged["craft/format_reason"] == ["", "", "wrong_format"]
    # the columns may come from reward_model (verl-style rows)
    rm = [{"ground_truth": {"answers": ANSWERS, "gold_labels": GOLD}}]
    assert get_reward("craft")([TABLE3], reward_model=rm) == [3.0]
    r = get_reward("craft", output_format="craft-v2", normalize=True)
    assert pickle.loads(pickle.dumps(r)) == r


def test_verl_compute_craft_score():
    gt = {"answers": ANSWERS, "gold_labels": GOLD}
    out = compute_craft_score("hotpotqa", TABLE3, gt)
    assert (out["score"], out["evidence"], out["boundary"], out["acc"]) == (3.0, 1.0, 1.0, 1.0)
    out = compute_craft_score("hotpotqa", TABLE3, gt, normalize=True, terms=["format", "answer"],
                              weights={"answer": 3.0}, reward_router_address=None)
    assert out["score"] == pytest.approx((1 + 3) / 4)
    with pytest.raises(ConfigError, match="no judge"):
        compute_craft_score("hotpotqa", TABLE3, gt, judge={"backend": "scripted"})
