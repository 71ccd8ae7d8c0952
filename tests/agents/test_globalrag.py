"""GlobalRAG's protocol: the Figure 7 prompt, the plan's dependency graph (cycles refused with a typed error), the
format of a whole trajectory, gold plan graphs from the real shared records of each dataset, the teacher path's
filters (appendix D) through the scripted backend and the real BM25 index, and the Table 1 layout."""

from __future__ import annotations

import json

import pytest
from conftest import HOTPOT_HUB, HOTPOT_TRAIN, MUSIQUE_TRAIN, TWOWIKI_TRAIN
from support.cli_runs import one_error, run

from rag_curriculum.agents import get_agent_template
from rag_curriculum.agents.globalrag import main
from rag_curriculum.errors import DataError
from rag_curriculum.loaders import load_examples
from rag_curriculum.methods.globalrag import (
    FORMAT_ERRORS,
    PLAN_ERRORS,
    Plan,
    PlanCycleError,
    PlanError,
    parse_globalrag,
    parse_plan,
    plan_from_questions,
    read_plans,
    teacher_plans,
    write_plans,
)
from rag_curriculum.methods.globalrag._agent import gold_plan, gold_plans, render_table1


# -- the prompt -----------------------------------------------------------------------------------------------
def test_figure_7_prompt_verbatim():
    text = get_agent_template("globalrag").render("  Who wrote Emma? ")[0]["content"]
    assert text.startswith("Answer the given question by following the steps below. You must conduct all reasoning "
                           "inside <think> and </think> before producing <plan>, <search>, <subAnswer> and "
                           "<answer>.\n\nStep 1: Explicitly generate one or more sub-questions within the <plan> "
                           "and </plan> block.\n- Each sub-question must contain both a question and a placeholder "
                           "(#1, #2, etc.) that represents the answer to that question.\n")
    for line in ("- Each sub-question should be as brief and precise as possible.",
                 "- If a sub-question depends on the answer to a previous one, use a placeholder (#1, #2, etc.) to "
                 "represent that dependency.",
                 "Step 2: For each sub-question, create a block enclosed in <subPlan> and </subPlan>.",
                 "- In sequential order, take one sub-question from <plan> and fill it between <search> and "
                 "</search>.",
                 "- Conclude the block with a <subAnswer> that binds the answer to the current sub-question.",
                 "Step 3: Provide the final result inside <answer> and </answer>, without detailed explanations."):
        assert f"\n{line}\n" in text
    assert text.endswith("Now, it's your turn! Please answer the following question!!!\nQuestion: Who wrote Emma?")
    released = get_agent_template("globalrag-released").render("Who wrote Emma?")[0]["content"]
    assert released.endswith("question!!!\n\nQuestion:Who wrote Emma?\n")  # template + "\n" + "Question:" + q + "\n"
    assert '{\n    "Q1": ["First sub-question", "#1"],' in released and "<subAnswer> #3 = Bob Kerr" in released


# -- the plan -------------------------------------------------------------------------------------------------
def test_plan_graph_edges_from_placeholders():
    p = parse_plan(' {"Q1": ["Who founded #12 Inc?", "#1"], "Q2": ["x", "#2"], "Q3": ["Where do #1 and #2 meet?",'
                   ' "#3"], "Q12": ["y", "#12"]} ')
    assert p.edges == ((0, 2), (1, 2), (3, 0))  # "#12" is not "#1"
    g = p.graph()
    assert sorted(g.edges) == [(0, 2), (1, 2), (3, 0)] and g.nodes[2]["placeholder"] == "#3"
    assert p.topological_order() == [1, 3, 0, 2]
    assert Plan.from_dict(json.loads(json.dumps(p.to_dict()))) == p


@pytest.mark.parametrize("text, kind", [
    ("not json", "plan_not_json"),
    ('["Q1", "#1"]', "plan_not_object"),
    ("{}", "plan_empty"),
    ('{"Q1": "Who?"}', "plan_bad_entry"),
    ('{"Q1": ["Who?", "#1", "extra"]}', "plan_bad_entry"),
    ('{"Q1": ["Who?", "1"]}', "plan_bad_placeholder"),
    ('{"Q1": ["Who?", "#1"], "Q2": ["What?", "#1"]}', "plan_duplicate_placeholder"),
    ('{"Q1": ["Who is #3?", "#1"]}', "plan_unknown_reference"),
    ('{"Q1": ["Who is #1?", "#1"]}', "plan_cycle"),
    ('{"Q1": ["A #3?", "#1"], "Q2": ["B #1?", "#2"], "Q3": ["C #2?", "#3"]}', "plan_cycle"),
])
def test_invalid_plans_are_typed_errors(text, kind):
    with pytest.raises(PlanError) as e:
        parse_plan(text)
    assert e.value.kind == kind and kind in PLAN_ERRORS


def test_a_cycle_names_its_placeholders():
    with pytest.raises(PlanCycleError) as e:
        parse_plan('{"Q1": ["A #3?", "#1"], "Q2": ["B #1?", "#2"], "Q3": ["C #2?", "#3"]}')
    assert e.value.cycle in (["#1", "#2", "#3", "#1"], ["#2", "#3", "#1", "#2"], ["#3", "#1", "#2", "#3"])
    assert isinstance(e.value, ValueError)


# -- a trajectory ---------------------------------------------------------------------------------------------
PLAN = '<plan> {"Q1": ["Who directed Up?", "#1"], "Q2": ["When was #1 born?", "#2"]} </plan>'
INFO = "\n\n<information>Doc 1(Title: Up) <answer>a tag in a passage</answer> is not the model's</information>\n\n"
GOOD = (f"<think>two hops</think>\n{PLAN}\n<subPlan><think>first</think><search> Up director </search>{INFO}"
        "<subAnswer> #1 = Pete Docter </subAnswer></subPlan>\n<subPlan><search> Pete Docter born </search>"
        f"{INFO}<think>ok</think><subAnswer>#2 = October 9, 1968</subAnswer></subPlan>\n<think>done</think>"
        "<answer> October 9, 1968 </answer>\n")


def test_a_compliant_trajectory():
    t = parse_globalrag(GOOD)
    assert t.valid and t.errors == []
    assert t.plan is not None and t.plan.edges == ((0, 1),)
    assert t.sub_answers == {"#1": "Pete Docter", "#2": "October 9, 1968"}
    assert t.answer == "October 9, 1968" and t.searches == 2
    assert [s.searches for s in t.subplans] == [["Up director"], ["Pete Docter born"]]


@pytest.mark.parametrize("text, errors", [
    (GOOD.replace(PLAN, ""), ["no_plan"]),
    (GOOD.replace("</subPlan>\n<subPlan>", "\n<subPlan>", 1), ["unbalanced_tags"]),
    (GOOD.replace("<subAnswer>#2 = October 9, 1968</subAnswer>", ""), ["subplan_without_subanswer",
                                                                        "missing_subanswer"]),
    (GOOD.replace("#2 = October 9, 1968", "October 9, 1968"), ["bad_subanswer", "subplan_without_subanswer",
                                                                "missing_subanswer"]),
    (GOOD.replace("#2 = October", "#7 = October"), ["unknown_subanswer", "missing_subanswer"]),
    (GOOD.replace("#2 = October", "#1 = October"), ["duplicate_subanswer", "missing_subanswer"]),
    (GOOD.replace("<search> Up director </search>", "").replace("<search> Pete Docter born </search>", ""),
     ["subplan_without_search"]),
    (GOOD + "(Note: sure)", ["text_after_answer"]),
    (GOOD.replace("<answer> October 9, 1968 </answer>", ""), ["no_answer"]),
    (GOOD.replace("<answer> October 9, 1968 </answer>", "<answer> x </answer><answer> y </answer>"),
     ["multiple_answers"]),
    (GOOD.replace("<answer> October 9, 1968 </answer>", "<answer>  </answer>"), ["empty_answer"]),
    (GOOD.replace("<think>done</think>", "<search> loose </search>"), ["tag_outside_subplan"]),
    (GOOD.replace('"#2"]}', '"#2"], "Q3": ["Who is #3?", "#3"]}'), ["plan_cycle"]),
    (GOOD + PLAN, ["plan_after_subplan", "multiple_plans", "text_after_answer"]),
    ("<answer>October 9, 1968</answer>", ["no_plan", "no_subplan"]),
    ("", ["no_plan", "no_subplan", "no_answer"]),
])
def test_malformed_trajectories_name_their_errors(text, errors):
    t = parse_globalrag(text)
    assert t.errors == errors and not t.valid
    assert set(errors) <= set(FORMAT_ERRORS) | set(PLAN_ERRORS)


def test_format_options():
    zero = GOOD.replace("<search> Up director </search>", "").replace("<search> Pete Docter born </search>", "")
    assert parse_globalrag(zero, require_search=False).valid
    missing = GOOD.replace("<subAnswer>#2 = October 9, 1968</subAnswer>", "")
    assert parse_globalrag(missing, require_all_subanswers=False).errors == ["subplan_without_subanswer"]
    assert parse_globalrag(GOOD + "trailing", strict_end=False).valid


# -- gold plans from the shared data --------------------------------------------------------------------------
def test_musique_gold_plans_from_question_decomposition():
    examples = list(load_examples("musique", MUSIQUE_TRAIN))
    recs, counts = gold_plans(examples)
    assert counts == {"planned": 100, "no_annotation": 0}
    by_id = {r["id"]: r for r in recs}
    r = by_id["2hop__150763_14904"]
    assert r["origin"] == "musique-decomposition" and r["edges"] == [[0, 1]]
    assert [n["question"] for n in r["nodes"]] == ["What company published Journal of Psychotherapy Integration?",
                                                   "Who was the first president of #1 ?"]
    assert [n["answer"] for n in r["nodes"]] == ["American Psychological Association", "G. Stanley Hall"]
    r = by_id["4hop1__709382_146811_31223_91015"]  # "Hello Love >> performer" rewritten; a chain of 4
    assert r["nodes"][0]["question"] == "What is the performer of Hello Love?"
    assert r["edges"] == [[0, 1], [1, 2], [2, 3]] and r["nodes"][3]["answer"] == "35"
    ex = next(e for e in examples if e.id == "4hop1__709382_146811_31223_91015")
    assert gold_plan(ex, musique_arrows="keep").nodes[0].question == "Hello Love >> performer"
    shapes = {(len(r["nodes"]), tuple(map(tuple, r["edges"]))) for r in recs}
    assert (3, ((0, 2), (1, 2))) in shapes  # two independent hops feeding a third
    for ex in examples:  # every plan's sub-questions, answers and graph agree with the record
        p = gold_plan(ex)
        assert [n.answer for n in p.nodes] == [s["answer"] for s in ex.decomposition]
        assert p.nodes[-1].answer == ex.answers[0] or ex.answers[0] in ex.answers


def test_2wiki_gold_plans_from_evidences():
    examples = list(load_examples("2wikimultihopqa", TWOWIKI_TRAIN))
    recs, counts = gold_plans(examples)
    assert counts == {"planned": 500, "no_annotation": 0}
    qtype = {e.id: e.qtype for e in examples}
    shapes: dict[str, set] = {}
    for r in recs:
        shapes.setdefault(qtype[r["id"]], set()).add((len(r["nodes"]), tuple(map(tuple, r["edges"]))))
    assert shapes == {"comparison": {(2, ())}, "compositional": {(2, ((0, 1),))}, "inference": {(2, ((0, 1),))},
                      "bridge_comparison": {(4, ((0, 2), (1, 3)))}}
    kanye = next(r for r in recs if r["nodes"][0]["question"] == "What is the performer of Dark Fantasy?")
    assert kanye["nodes"][1]["question"] == "What is the place of birth of #1?"  # "Kanye" is "Kanye West"
    first = next(r for r in recs if r["question"].startswith("What is the date of birth of the performer of song "
                                                              "Get Low"))
    assert [(n["question"], n["answer"]) for n in first["nodes"]] == [
        ("What is the performer of Get Low?", "Dillon Francis"), ("What is the date of birth of #1?", "October 5, 1987")]
    # "Gianfranco Rosi (director)" and "Émile Chautard" are the directors of the first two triples
    rosi = next(r for r in recs if r["nodes"][0]["question"] == "What is the director of Sacro GRA?")
    assert rosi["edges"] == [[0, 2], [1, 3]] and rosi["nodes"][2]["question"] == "What is the country of citizenship of #1?"


@pytest.mark.parametrize("path", [HOTPOT_TRAIN, HOTPOT_HUB], ids=["release", "hub"])
def test_hotpotqa_gold_plans_from_supporting_facts(path):
    examples = list(load_examples("hotpotqa", path))
    recs, counts = gold_plans(examples)
    assert counts["planned"] == len(examples) and len(recs) == len(examples)
    qtype = {e.id: e.qtype for e in examples}
    for r in recs:
        if qtype[r["id"]] == "bridge":
            assert r["origin"] == "hotpotqa-bridge" and r["edges"] == [[0, 1]]
            assert r["nodes"][1]["answer"] == r["answers"][0] and "#1" in r["nodes"][1]["question"]
        else:
            assert r["origin"] == "hotpotqa-comparison" and r["edges"] == []
            assert [n["answer"] for n in r["nodes"]] == [None, None]
    if path == HOTPOT_TRAIN:  # the bridge entity is the paragraph the other one names: Haymo -> Recovery of Aristotle
        r = next(r for r in recs if r["question"].startswith("What language were books being translated into"))
        assert r["nodes"][0]["answer"] == "Recovery of Aristotle"
        assert r["nodes"][0]["question"] == "Which entity connects Haymo of Faversham to the question?"


def test_plan_files_round_trip_and_bad_lines_are_located(tmp_path):
    out = tmp_path / "plans.jsonl"
    r = run("globalrag", "plans", "--dataset", "musique", "--input", MUSIQUE_TRAIN, "--out", out)
    assert r.exit_code == 0 and '"planned": 100' in r.output, r.output
    plans = read_plans(out)
    assert len(plans) == 100 and plans["2hop__150763_14904"].origin == "musique-decomposition"
    bad = tmp_path / "bad.jsonl"
    lines = out.read_text().splitlines()
    rec = json.loads(lines[1])
    rec["nodes"][0]["question"] = "Who is #2?"  # now a cycle
    write_plans(bad, [json.loads(lines[0]), rec])
    with pytest.raises(DataError) as e:
        read_plans(bad)
    assert e.value.kind == "plan_cycle" and "line 2" in str(e.value) and str(bad) in str(e.value)
    (tmp_path / "nojson.jsonl").write_text('{"id": "a", "nodes": []}\n{oops\n')
    with pytest.raises(DataError, match="line 1"):
        read_plans(tmp_path / "nojson.jsonl")


def test_commands_report_bad_input_in_one_line(tmp_path):
    missing = tmp_path / "nope.jsonl"
    line = one_error(run("globalrag", "plans", "--dataset", "musique", "--input", missing, "--out", tmp_path / "p"))
    assert str(missing) in line and not (tmp_path / "p").exists()
    (tmp_path / "summary.json").write_text('{"rows": []}')
    assert "not the summary.json of an agent evaluation" in one_error(run("globalrag", "table", tmp_path))
    r = run("globalrag", "plans", "--dataset", "nq")  # a usage error: click's exit 2
    assert r.exit_code == 2 and "nq" in r.output


def test_the_old_module_still_runs_and_says_where_the_commands_went(tmp_path, capsys):
    out = tmp_path / "plans.jsonl"
    with pytest.warns(DeprecationWarning, match="curriculum globalrag plans"):
        assert main(["plans", "--dataset", "musique", "--input", str(MUSIQUE_TRAIN), "--out", str(out)]) == 0
    got = capsys.readouterr()
    assert '"planned": 100' in got.out and "`curriculum globalrag plans`" in got.err
    (tmp_path / "summary.json").write_text('{"rows": []}')
    with pytest.warns(DeprecationWarning):
        assert main(["table", str(tmp_path)]) == 1
    assert "not the summary.json of an agent evaluation" in capsys.readouterr().err


# -- the teacher path -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, shared_data):
    pytest.importorskip("bm25s", reason="the retrieval extra is needed for the index")
    from rag_retriever import IndexConfig, build_index

    out = tmp_path_factory.mktemp("globalrag-index") / "musique"
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(out), depth=20))
    return out


@pytest.fixture(scope="module")
def index(index_dir):
    from rag_retriever import load_index

    return load_index(index_dir)


def _teacher(messages, n, seed):
    """A scripted teacher: the row's gold decomposition as its plan, one search per sub-question (the "budget" row
    searches three times for #1), the gold sub-answers; the "cycle" row writes a cyclic plan, the "wrong" row a
    wrong final answer, the "unanswered" row never answers its last sub-question."""
    from support.agent_policies import _question

    rec = TEACHER_ROWS[_question(messages)]
    kind, steps = rec["kind"], rec["steps"]
    done = messages[-1]["content"] if messages[-1]["role"] == "assistant" else ""
    if not done:
        plan = {f"Q{i + 1}": [s["question"], f"#{i + 1}"] for i, s in enumerate(steps)}
        if kind == "cycle":
            plan["Q1"] = [steps[0]["question"] + " of #2", "#1"]
        return f"<think>plan</think><plan>{json.dumps(plan)}</plan>\n<subPlan><search> {steps[0]['question']} </search>"
    k = done.count("<subAnswer>")
    if kind == "budget" and k == 0 and done.count("<search>") < 3:
        return f"<think>again</think><search> {steps[0]['question']} more </search>"
    if k < len(steps) - 1:
        return (f"<subAnswer> #{k + 1} = {steps[k]['answer']} </subAnswer></subPlan>\n"
                f"<subPlan><search> {steps[k + 1]['question']} </search>")
    last = "" if kind == "unanswered" else f"<subAnswer> #{len(steps)} = {steps[-1]['answer']} </subAnswer>"
    final = "nobody at all" if kind == "wrong" else rec["answer"]
    return f"{last}</subPlan>\n<answer> {final} </answer>"


TEACHER_ROWS: dict[str, dict] = {}


@pytest.mark.slow
def test_teacher_path_applies_appendix_d_filters(index, min_max_rows):
    from rag_curriculum.agents import IndexRetriever
    from rag_curriculum.generation import SamplingConfig
    from rag_curriculum.generation._scripted import ScriptedBackend

    examples = {e.id: e for e in load_examples("musique", MUSIQUE_TRAIN)}
    rows = [r for r in min_max_rows if len(examples[r["source_id"]].decomposition) == 2][:5]
    kinds = ["good", "budget", "cycle", "wrong", "unanswered"]
    TEACHER_ROWS.clear()
    for r, k in zip(rows, kinds, strict=True):
        ex = examples[r["source_id"]]
        TEACHER_ROWS[r["question"].strip()] = {"kind": k, "steps": ex.decomposition, "answer": ex.answers[0]}
    res = teacher_plans(rows, ScriptedBackend(script=_teacher), IndexRetriever(index),
                        SamplingConfig(n=1, max_tokens=64, seed=0), model="scripted-teacher", max_retrievals=2)
    assert [k["id"] for k in res.kept] == [rows[0]["id"]]
    assert res.rejected == {"topology": [rows[2]["id"]], "retrieval_budget": [rows[1]["id"], rows[4]["id"]],
                            "answer": [rows[3]["id"]]}
    kept = res.kept[0]
    ex = examples[rows[0]["source_id"]]
    assert kept["origin"] == "teacher:scripted-teacher" and kept["edges"] == [[0, 1]]
    assert [n["answer"] for n in kept["nodes"]] == [s["answer"] for s in ex.decomposition]
    assert Plan.from_dict(kept).origin == "teacher:scripted-teacher"
    # with the paper's budget of 15 retrievals, three searches for #1 pass
    res15 = teacher_plans(rows[:2], ScriptedBackend(script=_teacher), IndexRetriever(index),
                          SamplingConfig(n=1, max_tokens=64, seed=0), model="t")
    assert [k["id"] for k in res15.kept] == [rows[0]["id"], rows[1]["id"]]


# -- Table 1 --------------------------------------------------------------------------------------------------
def test_table_1_layout():
    summary = {"evals": [
        {"model": "grag", "dataset": "hotpotqa", "set": "hotpotqa-a", "overall": {"em": 30.0, "f1": 40.0,
                                                                                    "questions": 10}},
        {"model": "grag", "dataset": "hotpotqa", "set": "hotpotqa-b", "overall": {"em": 10.0, "f1": 20.0,
                                                                                    "questions": 30}},
        {"model": "grag", "dataset": "musique", "set": "musique-x", "overall": {"em": 5.0, "f1": 9.0,
                                                                                  "questions": 7}},
    ]}
    lines = render_table1(summary).splitlines()
    assert lines[0] == "| Method | HotpotQA | 2Wiki | MuSiQue | Bamboogle | WikiHop | Avg |"
    assert lines[2] == "| grag | 15.0 / 25.0 | - | 5.0 / 9.0 | - | - | 10.0 / 17.0 |"
    assert lines[3] == ("| GlobalRAG-instruct (Qwen2.5-3B, paper) | 32.9 / 44.2 | 42.3 / 47.8 | 10.8 / 18.6 | "
                        "37.6 / 49.3 | 12.9 / 20.7 | 27.3 / 36.1 |")  # Table 1's Avg column, recomputed
    assert len(render_table1(summary, paper_rows=False).splitlines()) == 3


def test_plan_from_questions_keeps_answers():
    p = plan_from_questions([("Who?", "#1", "A"), ("Where is #1?", "#2")])
    assert p.nodes[0].answer == "A" and p.nodes[1].answer is None and p.key == (2, ((0, 1),))


# -- evaluation: curriculum eval --agent search-r1 --template globalrag, then Table 1 ---------------------------
_DECOMPOSITIONS: dict[str, dict] = {}


def gold_planner(messages, n, seed):
    """A GlobalRAG agent that knows MuSiQue's decompositions: the gold plan, one search per sub-question, the gold
    sub-answers and answer (named by dotted path, as users name their scripts)."""
    if not _DECOMPOSITIONS:
        for line in MUSIQUE_TRAIN.read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            _DECOMPOSITIONS[r["question"].strip()] = r
    rec = _DECOMPOSITIONS[messages[0]["content"].rsplit("Question: ", 1)[1].strip()]
    steps = rec["question_decomposition"]
    done = messages[-1]["content"] if messages[-1]["role"] == "assistant" else ""
    if not done:
        plan = {f"Q{i + 1}": [s["question"], f"#{i + 1}"] for i, s in enumerate(steps)}
        return f"<plan>{json.dumps(plan)}</plan><subPlan><search> {steps[0]['question']} </search>"
    k = done.count("<subAnswer>")
    sub = f"<subAnswer> #{k + 1} = {steps[k]['answer']} </subAnswer></subPlan>"
    if k + 1 < len(steps):
        return f"{sub}<subPlan><search> {steps[k + 1]['question']} </search>"
    return f"{sub}<answer> {rec['answer']} </answer>"


def test_eval_with_the_globalrag_template_and_table_1(index_dir, min_max_shards, tmp_path, capsys):
    from typer.testing import CliRunner

    from rag_curriculum.cli import app

    out = tmp_path / "eval"
    r = CliRunner().invoke(app, [
        "eval", "--agent", "search-r1", "--template", "globalrag", "--retriever", str(index_dir), "--backend", "scripted",
        "--model", "grag=agents.test_globalrag:gold_planner",
        "--data", str(min_max_shards), "--limit", "6", "--max-turns", "5", "--out", str(out), "--no-progress"],
        catch_exceptions=False)
    assert r.exit_code == 0, r.output
    summary = json.loads((out / "summary.json").read_text())
    (entry,) = summary["evals"]
    assert entry["overall"]["em"] == 100.0 and entry["status"] == {"answer": 6}
    trajs = [json.loads(x) for x in (out / "trajectories" / "grag" / f"{entry['set']}.jsonl").open()]
    assert all(parse_globalrag("".join(s["text"] for s in t["segments"])).valid for t in trajs)
    assert "Step 1: Explicitly generate" in trajs[0]["prompt"][0]["content"]
    r = run("globalrag", "table", out)
    assert r.exit_code == 0, r.output
    table = r.output.splitlines()
    assert table[2] == "| grag | - | - | 100.0 / 100.0 | - | - | 100.0 / 100.0 |"
