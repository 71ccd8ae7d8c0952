"""`curriculum eval --template craft-vN` end to end through the real command: a MuSiQue evaluation set built once
(RAG-RL format) is re-rendered in craft-v1 and craft-v4, a scripted policy answers each question in the format it
is asked for, a scripted judge audits the traces; EM, F1, evidence F1, format compliance, the citation boundary
and faithfulness are checked against values computed by hand, the report has the Table 2 layout, and a rerun
reuses the completions and the judge's cache."""

from __future__ import annotations

import json
import re
import sys
import textwrap

import pyarrow.parquet as pq
import pytest
from conftest import MUSIQUE_DEV
from typer.testing import CliRunner

from rag_curriculum.cli import app
from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
from rag_curriculum.evaluation import load_summary

POLICY = textwrap.dedent('''
    import json, re

    GOLD = {}      # question -> (answer, gold titles), filled by the test
    JUDGED = []    # every judge prompt

    def policy(messages, n, seed):
        system, user = messages[0]["content"], messages[-1]["content"]
        question = user.rsplit("Question: ", 1)[1]
        answer, gold_titles = GOLD[question]
        numbers = dict((t, k) for k, t in re.findall(r"^\\[(\\d+)\\] (.*)$", user, re.M))
        gold = [numbers[t] for t in gold_titles]
        other = [k for t, k in numbers.items() if t not in gold_titles]
        case = sorted(GOLD).index(question)
        declared, cited, said = gold, gold, answer
        if case == 1:    # declares one gold and one distractor, cites another distractor: boundary broken
            declared, cited = [gold[0], other[0]], [gold[0], other[1]]
        if case == 3:    # a wrong answer
            said = "WRONG"
        reason = " ".join(f"Document [{k}] says so." for k in cited) + (" UNSUPPORTED" if case == 1 else "")
        blocks = {"plan": "Subquestion 1: ...", "gold_docs": "[" + ", ".join(declared) + "]", "reason": reason,
                  "answer": said}
        tags = [t for t in ("plan", "gold_docs", "reason", "answer") if "<" + t + ">" in system]
        text = "\\n".join(f"<{t}>\\n{blocks[t]}\\n</{t}>" for t in tags)
        if case == 2:    # the closing tag is missing
            text = text[: -len("</answer>")]
        return [text] * n

    def judge(messages, n, seed):
        prompt = messages[-1]["content"]
        JUDGED.append(prompt)
        keys = re.findall(r"^- (\\w+) \\(", prompt, re.M)
        trace = prompt.split("Trace:", 1)[1].split("Checks", 1)[0]
        bad = "UNSUPPORTED" in trace or "WRONG" in trace
        return [json.dumps({k: int(not (bad and k == "grounding")) for k in keys})] * n
''')


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    d = tmp_path_factory.mktemp("policy")
    (d / "craft_eval_policy.py").write_text(POLICY)
    sys.path.insert(0, str(d))
    import craft_eval_policy

    yield craft_eval_policy
    sys.path.remove(str(d))


@pytest.mark.slow
def test_eval_craft_variants_end_to_end(tmp_path, policy, shared_data):
    data = tmp_path / "musique-distractor"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_DEV), n=4)], setting="distractor",
                                 max_distractors=4, out=str(data), seed=2), command="test")
    from rag_curriculum.shards import read_rows

    rows = read_rows(data)
    for r in rows:
        policy.GOLD[r["question"]] = (r["answers"][0], [p["title"] for p in r["passages"] if p["is_gold"]])
    hops = {sorted(policy.GOLD).index(r["question"]): r["hops"] for r in rows}
    out = tmp_path / "eval"
    args = ["eval", "--model", "policy=craft_eval_policy:policy", "--data", str(data), "--backend", "scripted",
            "--samples", "1", "--template", "craft-v1", "--template", "craft-v4",
            "--judge", "scripted:craft_eval_policy:judge", "--out", str(out), "--no-plots"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    summary = load_summary(out)
    entries = {e["template"]: e for e in summary["evals"]}
    assert [(e["model"], e["model_name"], e["template"]) for e in summary["evals"]] == [
        ("policy (craft-v1)", "policy", "craft-v1"), ("policy (craft-v4)", "policy", "craft-v4")]

    # hand-computed: q0 perfect; q1 evidence P 1/2, R 1/hops, boundary 0, judge fails grounding; q2 no </answer>
    # (format 0, scored on what is extracted); q3 answers WRONG (judge fails grounding)
    p, r = 0.5, 1 / hops[1]
    f1_q1 = 2 * p * r / (p + r)
    o1, o4 = entries["craft-v1"]["overall"], entries["craft-v4"]["overall"]
    assert (o1["exact_match"], o1["answer_f1"], o1["format_valid"]) == (0.75, 0.75, 0.75)
    assert o1["evidence_f1"] == pytest.approx((3 + f1_q1) / 4) == pytest.approx(o1["citation_f1"])
    assert o1["boundary"] == 0.75
    assert o1["faithfulness"] == 0.5 and o1["faithfulness_mean"] == pytest.approx((1 + 0.75 + 1 + 0.75) / 4)
    assert (o4["exact_match"], o4["format_valid"], o4["evidence_f1"], o4["boundary"]) == (0.75, 0.75, None, None)
    assert o4["faithfulness"] == 0.5 and o4["faithfulness_mean"] == pytest.approx((1 + 0.5 + 1 + 0.5) / 4)
    assert entries["craft-v1"]["format_reasons"] == {"missing_closing_tag": 1}

    # per question: re-rendered rows (numbered passages, gold numbers) and the sample scores
    recs = pq.read_table(out / entries["craft-v1"]["results"]).to_pylist()
    assert entries["craft-v1"]["results"] == "results/policy/musique-distractor-craft-v1.parquet"
    by_q = {sorted(policy.GOLD).index(x["question"]): x for x in recs}
    assert all(x["template"] == "craft-v1" and all(g.isdigit() for g in x["gold_labels"]) for x in recs)
    assert [by_q[q]["sample_boundary"] for q in range(4)] == [[1.0], [0.0], [1.0], [1.0]]
    assert [by_q[q]["sample_faithfulness"] for q in range(4)] == [[1.0], [0.0], [1.0], [0.0]]
    assert json.loads(by_q[1]["sample_judge"][0])["failures"] == ["evidence_not_supported"]
    assert by_q[2]["sample_reason"] == ["missing_closing_tag"]

    table = (out / "table.md").read_text()
    assert "## CRAFT trace formats" in table
    section = table.split("## CRAFT trace formats", 1)[1].split("\n## ", 1)[0]
    assert "| MuSiQue EM | MuSiQue F1 | MuSiQue Evidence F1 | MuSiQue Format | MuSiQue Faithfulness |" in section
    v1 = next(line for line in section.splitlines() if "CRAFT_v1" in line)
    v4 = next(line for line in section.splitlines() if "CRAFT_v4" in line)
    assert re.sub(r"\s+", "", v1) == f"||CRAFT_v1|75.00|75.00|{100 * (3 + f1_q1) / 4:.2f}|75.00|50.00|"
    assert re.sub(r"\s+", "", v4) == "||CRAFT_v4|75.00|75.00|–|75.00|50.00|"
    cfg = json.loads((out / "eval_config.json").read_text())["config"]
    assert cfg["templates"] == ["craft-v1", "craft-v4"] and cfg["judge"] == "scripted:craft_eval_policy:judge"

    # a rerun reuses the completions and every verdict (the judge is not called again)
    judged = len(policy.JUDGED)
    assert judged == 8 and len(list((out / "judge-cache").rglob("*.json"))) == 8
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "reused every completion" in res.output
    assert len(policy.JUDGED) == judged
    assert load_summary(out)["evals"] == summary["evals"]

    # --strict-format: q2 (no </answer>) scores 0 on everything, the boundary and faithfulness included, unjudged
    strict = tmp_path / "strict"
    res = CliRunner().invoke(app, [*args[:-3], "--out", str(strict), "--no-plots", "--strict-format"])
    assert res.exit_code == 0, res.output
    o = next(e for e in load_summary(strict)["evals"] if e["template"] == "craft-v1")["overall"]
    assert (o["exact_match"], o["boundary"], o["faithfulness"]) == (0.5, 0.5, 0.25)
    assert len(policy.JUDGED) == judged + 6  # 3 valid traces per template, q2's left out


def test_eval_template_errors(tmp_path, shared_data):
    args = ["eval", "--model", "m=x.json", "--data", str(tmp_path), "--backend", "scripted", "--out",
            str(tmp_path / "o")]
    res = CliRunner().invoke(app, [*args, "--template", "craft-v9"])
    assert res.exit_code != 0 and "did you mean" in res.output
    res = CliRunner().invoke(app, [*args, "--index-base", "0"])
    assert res.exit_code != 0 and "--template craft-vN" in res.output
    data = tmp_path / "set"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_DEV), n=2)], setting="distractor",
                                 max_distractors=2, out=str(data)), command="test")
    res = CliRunner().invoke(app, ["eval", "--model", "m=x.json", "--data", str(data), "--backend", "scripted",
                                   "--judge", "scripted:x:y", "--out", str(tmp_path / "o2")])
    assert res.exit_code != 0 and "no evaluation set here is in its format" in res.output


def test_variants_table_of_compared_runs():
    """`eval compare` of a base run and a trained run, each in two variants: one block per model (runs that share a
    model name are told apart by their run), one row per variant, the datasets side by side."""
    from rag_curriculum.methods.craft import render_variants_table

    def entry(run, model, template, dataset, em, faith=None):
        overall = {"exact_match": em, "answer_f1": em, "evidence_f1": None if template == "craft-v4" else 0.5,
                   "format_valid": 1.0, "faithfulness": faith}
        return {"run": run, "model": f"{run}/{model}", "model_name": model, "template": template,
                "dataset": dataset, "setting": "distractor", "overall": overall}

    evals = [entry(run, "qwen", t, d, em) for run, em in (("base", 0.25), ("grpo", 0.5))
             for t in ("craft-v4", "craft-v1") for d in ("hotpotqa", "musique")]
    evals.append(entry("grpo", "other", "craft-v1", "musique", 1.0, faith=0.75))
    table = render_variants_table({"evals": evals})
    lines = [line for line in table.splitlines() if line.startswith("|")]
    assert lines[0].startswith("| Model | Version | HotpotQA EM |") and "MuSiQue Faithfulness |" in lines[0]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
    assert [c[:2] for c in cells] == [["*base/qwen*", ""], ["", "CRAFT_v1"], ["", "CRAFT_v4"], ["*grpo/qwen*", ""],
                                      ["", "CRAFT_v1"], ["", "CRAFT_v4"], ["*other*", ""], ["", "CRAFT_v1"]]
    assert cells[1][2:] == ["25.00", "25.00", "50.00", "100.00", "–"] * 2
    assert cells[5][2:7] == ["50.00", "50.00", "–", "100.00", "–"]
    assert cells[7][2:] == ["–"] * 5 + ["100.00", "100.00", "50.00", "100.00", "75.00"]
    assert render_variants_table({"evals": [{**evals[0], "template": "rag-rl"}]}) is None
