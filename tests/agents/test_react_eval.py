"""`curriculum eval --agent react --best-of N --retriever DIR` end to end on the real MuSiQue rows and a real BM25
index of the same file: a scripted ReAct agent (named by dotted path, as users name theirs) and the real tiny
transformers model. Observations are the index's ranking cut to the page's first sentences, malformed actions are
typed and never executed, and the mean / best-of-N / self-consistency rows are recomputed here by hand."""

from __future__ import annotations

import json

import pytest
from conftest import MUSIQUE_TRAIN
from typer.testing import CliRunner

from rag_curriculum._metrics import answer_scores, normalize_answer
from rag_curriculum.agents import STATUSES
from rag_curriculum.cli import app
from rag_curriculum.methods.react_crag import REACT_ERRORS
from rag_curriculum.methods.react_crag._agent import page_sentences

pytest.importorskip("bm25s")
runner = CliRunner()
N, LIMIT = 4, 10


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, shared_data):
    from rag_retriever import IndexConfig, build_index

    out = tmp_path_factory.mktemp("react-index") / "ix"
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(out), depth=10))
    return out


def _mean(xs):
    return sum(xs) / len(xs)


@pytest.mark.slow
def test_eval_react_best_of_end_to_end(index_dir, min_max_shards, min_max_rows, tmp_path):
    from rag_retriever import load_index

    out = tmp_path / "run"
    args = [
        "eval",
        "--agent",
        "react",
        "--best-of",
        str(N),
        "--retriever",
        str(index_dir),
        "--backend",
        "scripted",
        "--model",
        "p=support.agent_policies:react_search_then_finish",
        "--data",
        str(min_max_shards),
        "--limit",
        str(LIMIT),
        "--max-turns",
        "4",
        "--top-k",
        "1",
        "--out",
        str(out),
        "--no-progress",
    ]
    r = runner.invoke(app, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "ReAct+CRAG-inspired (best of 4)" in r.output and "self-consistency (4)" in r.output
    (entry,) = json.loads((out / "summary.json").read_text())["evals"]
    assert entry["samples"] == N and entry["questions"] == LIMIT
    trajs = [json.loads(line) for line in (out / "trajectories" / "p" / f"{entry['set']}.jsonl").open()]
    assert len(trajs) == N * LIMIT
    rows = min_max_rows[:LIMIT]
    index = load_index(index_dir)

    malformed = [len(r["question"].strip()) % 3 == 0 for r in rows]
    assert 0 < sum(malformed) < LIMIT
    assert entry["format_errors"] == {"malformed_action": N * sum(malformed)}
    assert entry["status"] == {"answer": N * LIMIT}
    for i, t in enumerate(trajs):
        row = rows[i // N]
        q = row["question"].strip()
        # the observation of the search: the index's top passage, its first 5 sentences, as ReAct's page
        (call,) = t["searches"]
        ((pid, _),) = index.retrieve(q, 1)
        assert call["query"] == q and call["ids"] == [str(pid)]
        title, text = index.passage(pid)
        obs = [s["text"] for s in t["segments"] if s["source"] == "env"][-1]
        assert obs.endswith(" ".join(page_sentences([f"{title}: {text}"])[:5]) + "\n")
        if malformed[i // N]:  # never executed: answered "Invalid action", then searched properly
            assert t["segments"][1]["text"] == f" 1: Invalid action: Search[{q}\n"
            assert t["turns"] == 3 and t["searches"][0]["turn"] == 2
        else:
            assert t["turns"] == 2 and t["segments"][0]["text"].endswith("]\nObservation")
        assert t["answer"] in (title, "something else")
        assert set(t["consistency"]["terms"]) == {
            "agreement",
            "thought_action",
            "loops",
            "contradiction",
            "early",
            "errors",
        }

    # the ReAct baseline: EM / F1 averaged over the N samples; recomputed
    per_q = [
        _mean([answer_scores(t["answer"], rows[q]["answers"])[1] for t in trajs[q * N : (q + 1) * N]])
        for q in range(LIMIT)
    ]
    assert entry["overall"]["f1"] == pytest.approx(100 * _mean(per_q), abs=0.01)
    # best of N by hand: a consistent sample (Finish = the title its thought states) beats every contradicting one;
    # among equals the earliest; with none, the first sample
    react = entry["react"]
    picked = []
    for q in range(LIMIT):
        ts = trajs[q * N : (q + 1) * N]
        good = [t for t in ts if t["answer"] != "something else"]
        picked.append((good or ts)[0])
    assert react["best_of"]["f1"] == pytest.approx(
        100 * _mean([answer_scores(t["answer"], rows[q]["answers"])[1] for q, t in enumerate(picked)]),
        abs=0.01,
    )
    assert react["best_of"]["searches"] == 1.0 and react["best_of"]["answered"] == 100.0
    assert any(t["answer"] != "something else" for t in picked)
    for t in picked:  # a consistent choice scores agreement 1, no contradiction
        if t["answer"] != "something else":
            assert (
                t["consistency"]["terms"]["agreement"] == 1.0
                and t["consistency"]["terms"]["contradiction"] == 0
            )
    # self-consistency by hand: the majority of the normalised answers, ties to the one written first
    votes = []
    for q in range(LIMIT):
        answers = [normalize_answer(t["answer"]) for t in trajs[q * N : (q + 1) * N]]
        top = max(answers.count(a) for a in answers)
        votes.append(next(a for a in answers if answers.count(a) == top))
    assert react["self_consistency"]["f1"] == pytest.approx(
        100 * _mean([answer_scores(v, rows[q]["answers"])[1] for q, v in enumerate(votes)]), abs=0.01
    )
    assert react["oracle"]["f1"] >= max(react["best_of"]["f1"], entry["overall"]["f1"]) - 1e-9
    assert react["score"] == "crag-inspired" and react["weights"]["loops"] == 1.0
    table = (out / "table.md").read_text()
    assert table.startswith("# Search agent (react)")
    assert "| p · ReAct (mean of 4) |" in table and "| p · ReAct+CRAG-inspired (best of 4) |" in table
    assert "| p · self-consistency (4) |" in table
    # the same command again reuses the results; another weight is another setting
    assert runner.invoke(app, args).exit_code == 0
    r = runner.invoke(app, [*args, "--crag-weight", "loops=2"])
    assert r.exit_code == 1 and "holds results made with other settings" in r.output


def test_eval_react_refusals(index_dir, min_max_shards, tmp_path):
    base = [
        "eval",
        "--retriever",
        str(index_dir),
        "--backend",
        "scripted",
        "--model",
        "p=support.agent_policies:react_search_then_finish",
        "--data",
        str(min_max_shards),
        "--out",
        str(tmp_path / "o"),
        "--no-progress",
    ]
    for extra, message in (
        (["--agent", "search-r1", "--best-of", "3"], "rank ReAct trajectories"),
        (["--best-of", "3"], "rank ReAct trajectories"),
        (["--agent", "react", "--best-of", "5", "--samples", "3"], "--samples 3 says otherwise"),
        (["--agent", "react", "--crag-weight", "vibes=1"], "no such term"),
        (["--agent", "react", "--crag-weight", "loops=much"], "KEY=NUMBER"),
        (["--agent", "react", "--template", "search-r1-original"], "Search-R1's prompt"),
        (["--agent", "search-r1", "--template", "react"], "pass --agent react"),
    ):
        r = runner.invoke(app, [*base, *extra])
        assert r.exit_code == 2 and message in r.output, (extra, r.output)
        assert "Traceback" not in r.output
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_eval_react_tiny_transformers_model(index_dir, min_max_shards, tiny_model_dir, tmp_path):
    """The real tiny model under the ReAct format: whatever it writes is stopped, classified by type and answered
    as the format says; nothing is taken as an answer unless it is a well-formed Finish."""
    pytest.importorskip("transformers")
    out = tmp_path / "tiny"
    r = runner.invoke(
        app,
        [
            "eval",
            "--agent",
            "react",
            "--best-of",
            "2",
            "--retriever",
            str(index_dir),
            "--backend",
            "transformers",
            "--device",
            "cpu",
            "--model",
            f"tiny={tiny_model_dir}",
            "--data",
            str(min_max_shards),
            "--limit",
            "2",
            "--max-turns",
            "2",
            "--max-tokens",
            "12",
            "--out",
            str(out),
            "--no-progress",
        ],
        catch_exceptions=False,
    )
    assert r.exit_code == 0, r.output
    (entry,) = json.loads((out / "summary.json").read_text())["evals"]
    trajs = [json.loads(line) for line in (out / "trajectories" / "tiny" / f"{entry['set']}.jsonl").open()]
    assert len(trajs) == 4 and sum(entry["status"].values()) == 4
    assert set(entry["status"]) <= set(STATUSES) and set(entry["format_errors"]) <= set(REACT_ERRORS)
    for t in trajs:
        assert t["prompt"][0]["content"].startswith(
            "Solve a question answering task with interleaving Thought"
        )
        model = [s["text"] for s in t["segments"] if s["source"] == "model"]
        assert 1 <= len(model) == t["turns"] <= 2
        assert all("\nObservation" not in m[: -len("\nObservation")] for m in model)  # stopped at the first
        if t["answer"] is None:
            assert t["consistency"]["score"] is None
        for env in (s["text"] for s in t["segments"] if s["source"] == "env"):
            assert env.startswith((" 1: ", "\nObservation 1: "))
    assert entry["react"]["best_of"]["answered"] == 100 * _mean(
        [float(any(t["answer"] is not None for t in trajs[q * 2 : (q + 1) * 2])) for q in range(2)]
    )


def test_react_over_a_real_retriever_server_is_the_in_process_run(index_dir, min_max_rows):
    """The same ReAct trajectories with `curriculum serve`'s app on a real uvicorn server (HTTP retriever) as with
    the index in process: the format is the retriever's client only through the loop."""
    import threading
    import time

    import uvicorn
    from rag_retriever import load_index
    from rag_retriever._server import make_app
    from support.agent_policies import react_search_then_finish
    from support.servers import free_port

    from rag_curriculum.agents import HttpRetriever, IndexRetriever, RolloutConfig, run_rollouts
    from rag_curriculum.generation import SamplingConfig
    from rag_curriculum.generation._scripted import ScriptedBackend
    from rag_curriculum.methods.react_crag import ReActFormat

    ix = load_index(index_dir)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(make_app(ix), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.started
        rows = min_max_rows[:5]
        cfg = RolloutConfig(template="react", top_k=2, max_turns=4)
        sampling = SamplingConfig(max_tokens=64)

        def run(retriever):
            return run_rollouts(
                ScriptedBackend(script=react_search_then_finish),
                rows,
                retriever,
                sampling,
                n=2,
                config=cfg,
                fmt=ReActFormat(),
            )

        over_http = run(HttpRetriever(f"http://127.0.0.1:{port}", retries=0))
        in_process = run(IndexRetriever(ix))
        assert [t.to_dict() for t in over_http] == [t.to_dict() for t in in_process]
        assert all(len(t.searches) == 1 and t.answer is not None for t in over_http)
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def test_eval_react_with_react_fewshot_prompt_file(index_dir, min_max_shards, min_max_rows, tmp_path):
    """`--template prompts_naive.json` (a copy of ReAct's file; here a hand-made one in its layout): every
    trajectory's prompt is ReAct's few-shot prompt, built as its notebook builds it."""
    from rag_curriculum.agents import AGENT_TEMPLATES
    from rag_curriculum.methods.react_crag._agent import REACT_INSTRUCTION

    examples = "\nQuestion: Q?\nThought 1: t\nAction 1: Finish[A]\n"
    path = tmp_path / "prompts_naive.json"
    path.write_text(json.dumps({"webthink_simple6": examples}))
    out = tmp_path / "fewshot"
    try:
        r = runner.invoke(
            app,
            [
                "eval",
                "--agent",
                "react",
                "--template",
                str(path),
                "--retriever",
                str(index_dir),
                "--backend",
                "scripted",
                "--model",
                "p=support.agent_policies:react_search_then_finish",
                "--data",
                str(min_max_shards),
                "--limit",
                "2",
                "--out",
                str(out),
                "--no-progress",
            ],
        )
    finally:
        AGENT_TEMPLATES._entries.pop("react-fewshot", None)
    assert r.exit_code == 0, r.output
    (entry,) = json.loads((out / "summary.json").read_text())["evals"]
    trajs = [json.loads(line) for line in (out / "trajectories" / "p" / f"{entry['set']}.jsonl").open()]
    for t, row in zip(trajs, min_max_rows[:2], strict=True):
        want = (
            REACT_INSTRUCTION
            + "Here are some examples.\n"
            + examples
            + f"Question: {row['question'].strip()}\n"
        )
        assert t["prompt"] == [{"role": "user", "content": want}]
