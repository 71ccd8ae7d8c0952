"""CRAFT's faithfulness judge (Algorithm 1) with the scripted generation backend as the judge: the prompt it gets,
the checks per variant, the mean / all aggregates on the paper's case study 1, batching, the disk cache (a second
audit never calls the backend; a changed prompt or judge model does), unreadable replies, and the reward's gate."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from rag_curriculum.errors import ConfigError, UnknownNameError
from rag_curriculum.generation._scripted import ScriptedBackend
from rag_curriculum.methods.craft._judge import DEFAULT_PROMPT, CraftJudge
from rag_curriculum.rewards import get_reward

from .test_craft import CASE1_BASE, CASE1_CRAFT, CASE2_CRAFT, v1

PASSAGES = [("1", "Desert Diamond West Valley Phoenix Grand Prix", "... won by Mario Andretti ..."),
            ("11", "Charles Mingus", "... born in Nogales, Arizona ..."), ("12", "Arizona", "... Phoenix ...")]
QUESTION = "Who won the Indy car race in the largest city of the state where the Oh Yeah album performer was born?"
SEEN: list[str] = []  # every prompt the scripted judge answered


def judge_script(messages, n, seed):
    """A judge that fails what the paper's judge failed in case 1 (Table 4): the base trace cites doc [1] outside
    its gold_docs and claims Ryan Hunter-Reay won."""
    prompt = messages[-1]["content"]
    SEEN.append(prompt)
    trace = prompt.split("Trace:\n", 1)[1].split("\n\nChecks", 1)[0]
    keys = [k for k in ("plan_reason", "citations", "reason_answer", "grounding") if f"- {k} (" in prompt]
    verdict = dict.fromkeys(keys, 1)
    if "Hunter-Reay" in trace:
        verdict.update(citations=0, grounding=0)
    if "UNREADABLE" in trace:
        return ["I think it is fine."] * n
    return ["Here is my audit: " + json.dumps({**verdict, "failures": []})] * n


def judge(tmp_path, **kw) -> CraftJudge:
    kw.setdefault("backend", "scripted")
    kw.setdefault("backend_args", {"script": judge_script})
    return CraftJudge(cache_dir=str(tmp_path / "cache"), **kw)


BASE = v1(gold="[5, 12, 14]", reason=CASE1_BASE, answer="Ryan Hunter-Reay")
CRAFT = v1(gold="[11, 12, 1]", reason=CASE1_CRAFT, answer="Mario Andretti")


def test_case_study_1_mean_and_all(tmp_path):
    SEEN.clear()
    mean = judge(tmp_path)
    vb, vc = mean.audit([(QUESTION, PASSAGES, BASE, "craft-v1"), (QUESTION, PASSAGES, CRAFT, "craft-v1")])
    assert vb.checks == {"plan_reason": 1, "citations": 0, "reason_answer": 1, "grounding": 0}
    assert vb.score == 0.5 and vb.failures == ("doc_outside_gold_docs", "evidence_not_supported")
    assert vc.score == 1.0 and vc.failures == () and vb.error is None
    # the paper's "Overall (R_faith) 0.0" for the base trace is the all-checks-pass aggregate
    every = judge(tmp_path, aggregate="all")
    assert [v.score for v in every.audit([(QUESTION, PASSAGES, BASE, "craft-v1")])] == [0.0]
    prompt = SEEN[0]
    assert QUESTION in prompt and "[11] Charles Mingus\n... born in Nogales, Arizona ..." in prompt
    assert "<gold_docs>\n[5, 12, 14]\n</gold_docs>" in prompt
    assert prompt.count("\n- ") == 4 and "D: Evidence -> Reason" in prompt


@pytest.mark.parametrize("variant,keys", [
    ("craft-v2", ["citations", "reason_answer", "grounding"]),
    ("craft-v3", ["plan_reason", "reason_answer", "grounding"]),
    ("craft-v4", ["reason_answer", "grounding"]),
])
def test_checks_per_variant(tmp_path, variant, keys):
    trace = {"craft-v2": "<gold_docs>[1]</gold_docs><reason>doc [1]</reason><answer>a</answer>",
             "craft-v3": "<plan>p</plan><reason>doc [1]</reason><answer>a</answer>",
             "craft-v4": "<reason>doc [1]</reason><answer>a</answer>"}[variant]
    (v,) = judge(tmp_path).audit([(QUESTION, PASSAGES, trace, variant)])
    assert list(v.checks) == keys and v.score == 1.0


def test_citation_check_by_rule(tmp_path):
    """Case 2: the paper's judge passed check B although <reason> cites doc [2] outside <gold_docs> [8, 4]."""
    trace = v1(gold="[8, 4]", reason=CASE2_CRAFT, answer="$72,641")
    SEEN.clear()
    (by_judge,) = judge(tmp_path).audit([(QUESTION, PASSAGES, trace, "craft-v1")])
    (by_rule,) = judge(tmp_path, citation_check="rule").audit([(QUESTION, PASSAGES, trace, "craft-v1")])
    assert by_judge.checks["citations"] == 1 and by_rule.checks["citations"] == 0
    assert list(by_rule.checks) == ["plan_reason", "citations", "reason_answer", "grounding"]
    assert by_rule.score == 0.75 and "- citations (" not in SEEN[-1]  # not asked


def test_batching_and_the_disk_cache(tmp_path):
    items = [(QUESTION, PASSAGES, BASE, "craft-v1"), (QUESTION, PASSAGES, CRAFT, "craft-v1"),
             (QUESTION, PASSAGES, BASE, "craft-v1")]
    backend = ScriptedBackend(script=judge_script)
    j = judge(tmp_path, backend=backend, backend_args={})
    first = j.audit(items)
    assert backend.calls == [2] and j.calls == 2  # one batched call, each distinct prompt once
    assert [v.cached for v in first] == [False, False, False]
    files = sorted((tmp_path / "cache").rglob("*.json"))
    assert len(files) == 2 and not [p for p in (tmp_path / "cache").rglob("*") if p.name.startswith(".")]
    entry = json.loads(files[0].read_text())
    assert {"key", "reply", "judge", "sampling", "prompt_sha256"} <= set(entry)
    # a second audit, in this judge or a fresh one on the same cache: the backend is not called
    assert [v.score for v in j.audit(items)] == [v.score for v in first] and backend.calls == [2]
    fresh = judge(tmp_path, backend=backend, backend_args={})
    again = fresh.audit(items)
    assert backend.calls == [2] and fresh.calls == 0 and all(v.cached for v in again)
    assert [v.checks for v in again] == [v.checks for v in first]
    # another judge prompt, or another judge model, is another key
    prompt = tmp_path / "prompt.txt"
    prompt.write_text(DEFAULT_PROMPT.read_text() + "\nBe strict.")
    judge(tmp_path, backend=backend, backend_args={}, prompt=str(prompt)).audit(items[:1])
    assert backend.calls == [2, 1]
    other = CraftJudge(backend="scripted", backend_args={"script": judge_script, "default": "x"},
                       cache_dir=str(tmp_path / "cache"))
    other.audit(items[:1])
    assert other.calls == 1


def test_unreadable_reply_fails_every_check(tmp_path):
    (v,) = judge(tmp_path).audit([(QUESTION, PASSAGES, v1(reason="UNREADABLE doc [2]"), "craft-v1")])
    assert v.score == 0.0 and set(v.checks.values()) == {0} and "no JSON object" in v.error


def test_judge_reward_is_gated_batched_and_picklable(tmp_path):
    SEEN.clear()
    spec = {"backend": "scripted", "backend_args": {"script": judge_script}, "cache_dir": str(tmp_path / "c")}
    total = get_reward("craft", judge=spec)
    assert total.terms == ("format", "answer", "evidence", "judge")
    rows = dict(answers=[["Mario Andretti"]] * 3, gold_labels=[["11", "12", "1"]] * 3,
                question=[QUESTION] * 3, passages=[[{"label": a, "title": b, "text": c} for a, b, c in PASSAGES]] * 3)
    texts = [BASE, CRAFT, CRAFT.replace("</answer>", "")]
    # BASE: fmt 1, evidence F1({5,12,14},{11,12,1}) = 1/3, answer 0, judge 0.5; CRAFT: 1 + 1 + 1 + 1; broken: 0
    assert total(texts, **rows) == pytest.approx([1 + 1 / 3 + 0 + 0.5, 4.0, 0.0])
    assert len(SEEN) == 2  # the broken trace never reaches the judge
    only = get_reward("craft-judge", judge={**spec, "aggregate": "all"})
    assert only(texts, **rows) == [0.0, 1.0, 0.0] and len(SEEN) == 2  # aggregate is not in the key: cached
    normal = get_reward("craft", judge=spec, normalize=True)
    assert normal(texts, **rows) == pytest.approx([(1 + 1 / 3 + 0.5) / 4, 1.0, 0.0])
    assert pickle.loads(pickle.dumps(total))(texts[1:2], **{k: v[1:2] for k, v in rows.items()}) == [4.0]
    with pytest.raises(ConfigError, match="question"):
        total(texts, answers=rows["answers"], gold_labels=rows["gold_labels"])


def test_judge_configuration_errors(tmp_path):
    with pytest.raises(ConfigError, match="no <reason>"):
        get_reward("craft", output_format="craft-v5", judge={"backend": "scripted"})
    with pytest.raises(ConfigError, match="one of mean, all"):
        CraftJudge(backend="scripted", aggregate="median")
    with pytest.raises(ConfigError, match="needs a model"):
        CraftJudge(backend="openai")
    with pytest.raises(UnknownNameError, match="did you mean 'openai'"):
        CraftJudge(backend="opanai", model="m")
    with pytest.raises(ConfigError, match="cannot read the judge prompt"):
        CraftJudge(backend="scripted", prompt=str(tmp_path / "missing.txt"))


@pytest.mark.slow
def test_a_real_model_as_the_judge(tmp_path, tiny_model_dir):
    """The transformers backend as the judge (a tiny random model: its reply is no verdict, so every check fails,
    with the reason); the verdict is cached like any other and a fresh judge does not load the model again."""
    spec = dict(backend="transformers", model=str(tiny_model_dir), backend_args={"device": "cpu", "dtype": "float32"},
                cache_dir=str(tmp_path / "cache"), max_tokens=8)
    j = CraftJudge(**spec)
    (v,) = j.audit([(QUESTION, PASSAGES, CRAFT, "craft-v1")])
    assert j.calls == 1 and v.score == 0.0 and v.error and not v.cached
    fresh = CraftJudge(**spec)
    (again,) = fresh.audit([(QUESTION, PASSAGES, CRAFT, "craft-v1")])
    assert again.cached and fresh.calls == 0 and fresh._built is None  # the model was never loaded
    assert json.loads(next((tmp_path / "cache").rglob("*.json")).read_text())["judge"]["backend"] == "transformers"


def test_rerender_numbers_from_zero_or_one():
    from rag_curriculum.evaluation._run import EvalSet
    from rag_curriculum.methods.craft import rerender

    row = {"id": "r", "question": "Q?", "template": "rag-rl", "gold_labels": ["B"], "extra_info": {"labels": ["A", "B"]},
           "passages": [{"label": "A", "title": "A", "text": "a", "is_gold": False},
                        {"label": "B", "title": "B", "text": "b", "is_gold": True}]}
    es = EvalSet(Path("."), "musique", "distractor", [row])
    for base, want in ((None, ["1", "2"]), (0, ["0", "1"])):
        out = rerender(es, "craft-v2", base)
        r = out.rows[0]
        assert [p["label"] for p in r["passages"]] == want == r["extra_info"]["labels"]
        assert r["gold_labels"] == [want[1]] and r["template"] == "craft-v2" and out.key.endswith("-craft-v2")
        assert f"[{want[0]}] A\na\n\n[{want[1]}] B\nb" in r["prompt"][-1]["content"]
        assert out.fingerprint() != es.fingerprint()
    assert row["passages"][0]["label"] == "A"  # the original row is left as it was
