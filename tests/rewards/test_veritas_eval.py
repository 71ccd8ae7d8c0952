"""`curriculum eval --agent search-r1 --faithfulness veritas --judge BACKEND:MODEL`: a scripted search agent (named by
dotted path) on real MuSiQue rows and the real BM25 index, judged by ``lexical_judge`` on the scripted backend;
the table in the layout of VERITAS's Table 6, each trajectory's scores, the judge pairs with their labels, and the
per-set means recomputed here from the written trajectories by the paper's definitions."""

from __future__ import annotations

import json

import pytest
from conftest import MUSIQUE_TRAIN
from typer.testing import CliRunner

from rag_curriculum.cli import app

pytest.importorskip("bm25s")
runner = CliRunner()
JUDGE = "scripted:rag_curriculum.methods.veritas._reward:lexical_judge"


def policy(messages, n, seed):
    """Search the question; then answer with the first retrieved title, with a think that names it (odd-length
    questions) or a think that says nothing (even); questions whose length is a multiple of 5 are answered at once,
    without a search."""
    q = messages[0]["content"].rsplit("Question: ", 1)[1].strip()
    if messages[-1]["role"] == "user":
        if len(q) % 5 == 0:
            return "<think>I know.</think><answer> nothing </answer>"
        return f"<think>What is {q}?</think><search> {q} </search>"
    last = messages[-1]["content"]
    title = last.rsplit("<information>Doc 1(Title: ", 1)[1].split(")", 1)[0]
    think = f"The first result is {title}." if len(q) % 2 else "Hmm."
    return f"<think>{think}</think><answer> {title} </answer>"


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, shared_data):
    from rag_retriever import IndexConfig, build_index

    out = tmp_path_factory.mktemp("veritas-eval-index") / "ix"
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(out), depth=10))
    return out


def base(index_dir, shards) -> list[str]:
    return [
        "eval",
        "--agent",
        "search-r1",
        "--retriever",
        str(index_dir),
        "--backend",
        "scripted",
        "--model",
        "agent=rewards.test_veritas_eval:policy",
        "--data",
        str(shards),
        "--limit",
        "12",
        "--samples",
        "2",
        "--no-progress",
    ]


@pytest.mark.slow
def test_eval_with_veritas_faithfulness(index_dir, min_max_shards, tmp_path):
    from rag_curriculum.methods.veritas._reward import think_answer, trajectory_pairs

    out = tmp_path / "run"
    args = [
        *base(index_dir, min_max_shards),
        "--faithfulness",
        "veritas",
        "--judge",
        JUDGE,
        "--judge-arg",
        "votes=1",
        "--out",
        str(out),
    ]
    r = runner.invoke(app, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "veritas.md" in r.output
    assert "VERITAS faithfulness (fractions)" in r.output and "Think-Ans Faithfulness" in r.output
    summary = json.loads((out / "summary.json").read_text())
    (entry,) = summary["evals"]
    v = entry["veritas"]
    trajs = [
        json.loads(x)
        for x in (out / "trajectories" / "agent" / f"{entry['set']}.jsonl").read_text().splitlines()
    ]
    assert len(trajs) == v["trajectories"] == 24
    # recomputed by hand from the definitions: Info-Think is 1 exactly when the think names the first title
    # (lexical_judge: a shared word), Think-Answer when the last think holds the answer
    it, ta, ts = [], [], []
    for t in trajs:
        text = "".join(s["text"] for s in t["segments"])
        pairs = trajectory_pairs(text, t)
        assert t["veritas"]["info_think_pairs"] == sum(p.kind == "info_think" for p in pairs)
        if any(p.kind == "info_think" for p in pairs):
            named = "The first result is" in text
            it.append(1.0 if named else 0.0)
            assert t["veritas"]["info_think"] == it[-1]
        if t["answer"] is not None:
            ta.append(think_answer(text, t))
        if any(p.kind == "think_search" for p in pairs):
            ts.append(t["veritas"]["think_search"])
    assert 0 < len(it) < 24 and 0 < sum(it) < len(it)  # both kinds of agent turn occur
    assert v["info_think"] == round(sum(it) / len(it), 4) and v["with_info_think"] == len(it)
    assert v["think_answer"] == round(sum(ta) / len(ta), 4) and v["answered"] == len(ta)
    assert v["think_search"] == round(sum(ts) / len(ts), 4) and v["no_search"] == 24 - len(it)
    assert v["em"] == round(entry["overall"]["em"] / 100, 4)
    # the judge pairs, labelled, as JSONL
    recs = [
        json.loads(x) for x in (out / "pairs" / "agent" / f"{entry['set']}.jsonl").read_text().splitlines()
    ]
    assert len(recs) == v["pairs"] == 2 * len(it)  # one (think, search) and one (information, think) each
    assert {r["kind"] for r in recs} == {"info_think", "think_search"}
    assert all(r["label"] in (0, 1) and r["prompt"].endswith(".") for r in recs)
    assert sum(r["label"] for r in recs if r["kind"] == "info_think") == sum(it)
    # Table 6's layout: a block per measure, models as rows, the dataset and the average as columns
    table = (out / "veritas.md").read_text()
    lines = table.splitlines()
    assert lines[2] == "| Method | musique | Average |"
    for title, key in (
        ("Exact Match (EM)", "em"),
        ("Info-Think Faithfulness", "info_think"),
        ("Think-Ans Faithfulness", "think_answer"),
        ("Think-Search Faithfulness", "think_search"),
    ):
        i = lines.index(f"| **{title}** | | |")
        assert lines[i + 1] == f"| agent | {v[key]:.3f} | {v[key]:.3f} |"
    # the same command again reuses the results; another judge option is another setting
    assert runner.invoke(app, args).exit_code == 0
    r = runner.invoke(app, [*args[:-2], "--judge-arg", "think_answer_scope=trajectory", "--out", str(out)])
    assert r.exit_code == 1 and "other settings" in r.output


@pytest.mark.slow
def test_eval_without_a_judge_scores_think_answer_only(index_dir, min_max_shards, tmp_path):
    out = tmp_path / "run"
    r = runner.invoke(app, [*base(index_dir, min_max_shards), "--faithfulness", "veritas", "--out", str(out)])
    assert r.exit_code == 0, r.output
    (entry,) = json.loads((out / "summary.json").read_text())["evals"]
    v = entry["veritas"]
    assert v["info_think"] is None and v["think_search"] is None and v["think_answer"] is not None
    table = (out / "veritas.md").read_text()
    assert "| **Info-Think Faithfulness** | | |\n| agent | - | - |" in table and "Think-Search" not in table
    recs = (out / "pairs" / "agent" / f"{entry['set']}.jsonl").read_text().splitlines()
    assert recs and all("label" not in json.loads(x) for x in recs)  # pairs to label


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--faithfulness", "verity"], "--faithfulness 'verity' is not known"),
        (["--judge", JUDGE], "pass --faithfulness veritas"),
        (["--faithfulness", "veritas", "--judge-arg", "votes=3"], "without --judge"),
        (["--faithfulness", "veritas", "--judge", "opanai:m"], "did you mean 'openai'"),
        (
            ["--faithfulness", "veritas", "--judge", JUDGE, "--judge-arg", "votes=0"],
            "votes must be an integer >= 1",
        ),
        (
            ["--faithfulness", "veritas", "--judge", JUDGE, "--judge-arg", "aggregate=median"],
            "aggregate must be one",
        ),
    ],
)
def test_eval_refusals(index_dir, min_max_shards, tmp_path, extra, message):
    r = runner.invoke(app, [*base(index_dir, min_max_shards), *extra, "--out", str(tmp_path / "o")])
    assert r.exit_code == 2, r.output
    assert message in " ".join(r.output.split())
    assert not (tmp_path / "o").exists()


def test_eval_agreement_command(tmp_path):
    ours, ref = tmp_path / "pairs.jsonl", tmp_path / "ref.jsonl"
    ours.write_text(
        "".join(json.dumps({"id": f"p{i}", "label": x}) + "\n" for i, x in enumerate([1, 1, 1, 0, 0, 1]))
    )
    ref.write_text(
        "".join(json.dumps({"id": f"p{i}", "human": x}) + "\n" for i, x in enumerate([1, 1, 0, 0, 0, 1]))
    )
    r = runner.invoke(app, ["eval", "agreement", str(ours), str(ref), "--reference-field", "human", "--json"])
    assert r.exit_code == 0, r.output
    # 5 of 6 agree; ours four 1s, ref three 1s: p_e = (4*3 + 2*3) / 36 = 0.5, kappa = (5/6 - 0.5) / 0.5
    got = json.loads(r.output)
    assert (
        got["n"] == 6
        and got["consistency"] == round(5 / 6, 4)
        and got["kappa"] == round((5 / 6 - 0.5) / 0.5, 4)
    )
    r = runner.invoke(app, ["eval", "agreement", str(ours), str(ref), "--reference-field", "human"])
    assert r.exit_code == 0 and "consistency 0.833, Cohen's kappa 0.667" in " ".join(r.output.split())
    ref.write_text('{"id": "p0", "human": "yes"}\n')
    r = runner.invoke(app, ["eval", "agreement", str(ours), str(ref), "--reference-field", "human"])
    assert r.exit_code == 1 and "line 1 (id 'p0'): field 'human' is 'yes'" in " ".join(r.output.split())
    assert "Traceback" not in r.output
