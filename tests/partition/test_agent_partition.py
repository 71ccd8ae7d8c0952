"""`curriculum partition --agent search-r1 --retriever DIR`: pass@k of a search agent through the shared rollout loop,
split into answerable-without-search / answerable-with-search / unanswerable (and learnable): the split rule alone;
end to end on the real MuSiQue rows and their BM25 index with a scripted agent whose buckets are known in advance
(every bucket's ids, every question's searches, per-sample statuses); an interrupted run resumed gives the same bytes;
and a real tiny transformers model drives the same path."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import MUSIQUE_TRAIN
from typer.testing import CliRunner

from rag_curriculum._plumbing import derive_seed
from rag_curriculum.cli import app
from rag_curriculum.partition import PartitionConfig
from rag_curriculum.partition._agent import score_trajectories, split_bucket

pytest.importorskip("bm25s")
runner = CliRunner()
NO, WITH, UNANS = "answerable-without-search", "answerable-with-search", "unanswerable"


# -- the split rule --------------------------------------------------------------------------------------------------


def traj(answer, searches=0, status="answer", errors=()):
    return {
        "segments": [],
        "answer": answer,
        "status": status,
        "errors": list(errors),
        "searches": [{"query": "q", "ids": ["1"], "gold": [i == 0]} for i in range(searches)],
    }


def test_split_rule():
    assert split_bucket([True, True], [0, 2]) == NO  # one success without a search is enough
    assert split_bucket([False, True], [0, 1]) == WITH  # the sample that made no search was wrong
    assert split_bucket([True, True, False], [1, 3, 0]) == WITH
    assert split_bucket([False, False], [0, 0]) == UNANS
    assert split_bucket([], []) == UNANS
    with pytest.raises(ValueError):
        split_bucket([True], [0, 1])


def test_a_question_scored_from_its_trajectories():
    cfg = PartitionConfig(agent="search-r1", retriever="ix", model="m")
    s = score_trajectories(
        [traj("Paris", 2), traj("paris", 1), traj("Lyon", 0), traj(None, 3, "turn_budget")], ["Paris"], cfg
    )
    assert (s["n"], s["c"], s["bucket"], s["learnable"]) == (4, 2, WITH, True)
    assert s["sample_searches"] == [2, 1, 0, 3] and s["sample_em"] == [1.0, 1.0, 0.0, 0.0]
    assert s["searches_per_success"] == 1.5 and s["min_searches_success"] == 1 and s["c_without_search"] == 0
    assert s["sample_gold_found"] == [True, True, False, True] and s["gold_found_rate"] == 0.75
    assert s["sample_status"] == ["answer"] * 3 + ["turn_budget"] and s["num_valid_format"] == 3
    assert s["pass_at_k"][-1] == 1.0 and s["pass_rate"] == 0.5
    # the threshold is the closed-context partition's --correct-f1: "Paris France" has F1 2/3
    loose = PartitionConfig(agent="search-r1", retriever="ix", model="m", correct_f1=0.6)
    assert score_trajectories([traj("Paris France")], ["Paris"], loose)["bucket"] == NO
    assert score_trajectories([traj("Paris France")], ["Paris"], cfg)["bucket"] == UNANS
    # --strict-format: a right answer after a format error does not count
    strict = PartitionConfig(agent="search-r1", retriever="ix", model="m", strict_format=True)
    bad = [traj("Paris", 0, errors=["no_action"]), traj("Paris", 1)]
    assert score_trajectories(bad, ["Paris"], strict)["bucket"] == WITH
    assert score_trajectories(bad, ["Paris"], cfg)["bucket"] == NO


# -- end to end ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, shared_data):
    from rag_retriever import IndexConfig, build_index

    out = tmp_path_factory.mktemp("partition-agent-index") / "ix"
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(out), depth=10))
    return out


def tree(d: Path) -> dict[str, bytes]:
    return {
        p.relative_to(d).as_posix(): p.read_bytes()
        for p in sorted(d.rglob("*"))
        if p.is_file() and not p.name.endswith(".lock")
    }


def bucket_ids(out: Path, name: str) -> list[str]:
    return [
        r["id"] for f in sorted((out / name / "data").glob("*.parquet")) for r in pq.read_table(f).to_pylist()
    ]


def expected(rows, k, seed=0):
    """What agent_policies.knows_some does (see its docstring), question by question: searches per sample, correct
    per sample, bucket."""
    out = {}
    for r in rows:
        q = r["question"].strip()
        kind = len(q) % 4
        searches, correct = [], []
        for s in range(k):
            first_even = derive_seed(seed, r["id"], s, 0, bits=63) % 2 == 0
            answer_even = derive_seed(seed, r["id"], s, 1, bits=63) % 2 == 0
            no_search = kind == 0 or (kind == 3 and first_even)
            searches.append(0 if no_search else 1)
            correct.append(no_search or kind != 2 or answer_even)
        bucket = (
            NO
            if any(c and n == 0 for c, n in zip(correct, searches, strict=True))
            else WITH
            if any(correct)
            else UNANS
        )
        out[r["id"]] = (searches, correct, bucket)
    return out


@pytest.mark.slow
def test_partition_agent_end_to_end_and_resume(index_dir, min_max_shards, min_max_rows, tmp_path):
    out = tmp_path / "run"
    args = [
        "partition",
        str(min_max_shards),
        "--agent",
        "search-r1",
        "--retriever",
        str(index_dir),
        "--backend",
        "scripted",
        "--model",
        "support.agent_policies:knows_some",
        "--pass-at",
        "2",
        "--max-turns",
        "3",
        "--top-k",
        "3",
        "--chunk-size",
        "16",
        "--out",
        str(out),
        "--no-progress",
    ]
    r = runner.invoke(app, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "answerable without search" in r.output and "searches per success" in r.output
    want = expected(min_max_rows, 2)
    for name in (NO, WITH, UNANS):
        assert bucket_ids(out, name) == [row["id"] for row in min_max_rows if want[row["id"]][2] == name], (
            name
        )
    learnable = [row["id"] for row in min_max_rows if 0 < sum(want[row["id"]][1]) < 2]
    assert bucket_ids(out, "learnable") == learnable
    assert all(
        len(bucket_ids(out, b)) > 3 for b in (NO, WITH, UNANS, "learnable")
    )  # every bucket is exercised
    assert not (out / "answerable").exists()
    stats = {s["id"]: s for s in pq.read_table(out / "stats.parquet").to_pylist()}
    for rid, (searches, correct, bucket) in want.items():
        s = stats[rid]
        assert (s["sample_searches"], s["bucket"], s["c"]) == (searches, bucket, sum(correct)), rid
        hits = [n for n, c in zip(searches, correct, strict=True) if c]
        assert s["searches_per_success"] == (sum(hits) / len(hits) if hits else None)
        assert s["sample_status"] == ["answer", "answer"] and s["sample_format_errors"] == [[], []]
        assert s["c_without_search"] == sum(1 for n, c in zip(searches, correct, strict=True) if c and n == 0)
    # a search returned a gold passage exactly when the index ranks one in the question's top 3
    from rag_retriever import load_index

    from rag_curriculum.agents import IndexRetriever

    ix = IndexRetriever(load_index(index_dir))
    row = next(r for r in min_max_rows if want[r["id"]][0] == [1, 1])
    gold = {(p["title"], p["text"]) for p in row["passages"] if p["is_gold"]}
    found = any((h.title, h.text) in gold for h in ix.search([row["question"].strip()], 3)[0])
    assert stats[row["id"]]["sample_gold_found"] == [found, found]
    # the buckets are shard directories: the input's columns plus the statistics, manifests and cards
    m = json.loads((out / WITH / "manifest.json").read_text())
    assert m["partition"]["bucket"] == WITH and "searched at least once" in m["partition"]["rule"]
    assert m["generation"]["fingerprint"]["task"] == "partition-agent"
    assert m["generation"]["fingerprint"]["agent"]["rollout"]["top_k"] == 3
    assert "settings" not in m["generation"]["fingerprint"]["agent"]  # as before ReAct: earlier folders resume
    card = (out / WITH / "README.md").read_text()
    assert "answerable with search" in card
    # the card's dataset_info (rows, Parquet bytes) keys datasets' cache by the data, as the other buckets' cards
    assert f"num_examples: {m['num_rows']}" in card and f"download_size: {sum(s['bytes'] for s in m['shards'])}" in card
    summary = json.loads((out / "partition.json").read_text())
    assert summary["counts"][NO] + summary["counts"][WITH] + summary["counts"][UNANS] == 100
    assert summary["counts"]["status"] == {"answer": 200}
    assert runner.invoke(app, ["validate", str(out / NO)]).exit_code == 0

    # interrupted after 2 chunks, then the same command again: the same bytes as the uninterrupted run
    ref = tree(out)
    shutil.rmtree(out)
    r = runner.invoke(app, [*args, "--max-chunks", "2"])
    assert r.exit_code == 0 and len(list((out / "work").glob("chunk-*.parquet"))) == 2
    assert not (out / "partition.json").exists()
    assert runner.invoke(app, args).exit_code == 0
    assert tree(out) == ref
    # other agent settings over the same folder are refused without --overwrite
    r = runner.invoke(
        app, [*args[:-7], "--top-k", "2", "--chunk-size", "16", "--out", str(out), "--no-progress"]
    )
    assert r.exit_code == 1 and "other settings" in r.output


@pytest.mark.slow
def test_partition_agent_refusals(index_dir, min_max_shards, tmp_path):
    base = [
        "partition",
        str(min_max_shards),
        "--backend",
        "scripted",
        "--model",
        "support.agent_policies:knows_some",
        "--out",
        str(tmp_path / "o"),
        "--no-progress",
    ]
    r = runner.invoke(app, [*base, "--agent", "search-r1"])
    assert r.exit_code == 2 and "--agent needs --retriever" in r.output
    r = runner.invoke(app, [*base, "--retriever", str(index_dir)])
    assert r.exit_code == 2 and "add --agent search-r1" in r.output
    r = runner.invoke(app, [*base, "--agent", "search-r1", "--retriever", str(index_dir), "--balance"])
    assert r.exit_code == 2 and "--balance" in r.output
    r = runner.invoke(app, [*base, "--agent", "search-r2", "--retriever", str(index_dir)])
    assert r.exit_code == 2 and "search-r1" in r.output
    r = runner.invoke(app, [*base, "--agent", "search-r1", "--retriever", str(tmp_path / "nope")])
    assert r.exit_code == 1 and "nope" in r.output and "Traceback" not in r.output


@pytest.mark.slow
@pytest.mark.parametrize("agent", ["search-r1", "react"])
def test_partition_agent_with_a_real_tiny_model(index_dir, tiny_model_dir, tmp_path, shared_data, agent):
    """The transformers backend behind the search environment, in each protocol: every turn generated by the real
    model; what it writes (a random model: no valid action) is classified and counted, never taken as an answer."""
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    rows = tmp_path / "rows"
    build_curriculum(
        BuildConfig(
            sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), n=3, K=2)],
            schedule="max",
            out=str(rows),
            seed=0,
        ),
        command="t",
    )
    out = tmp_path / "run"
    r = runner.invoke(
        app,
        [
            "partition",
            str(rows),
            "--agent",
            agent,
            "--retriever",
            str(index_dir),
            "--backend",
            "transformers",
            "--model",
            str(tiny_model_dir),
            "--device",
            "cpu",
            "--pass-at",
            "2",
            "--max-tokens",
            "8",
            "--max-turns",
            "2",
            "--out",
            str(out),
            "--no-progress",
        ],
    )
    assert r.exit_code == 0, r.output
    stats = pq.read_table(out / "stats.parquet").to_pylist()
    assert len(stats) == 3
    work = [
        row for f in sorted((out / "work").glob("chunk-*.parquet")) for row in pq.read_table(f).to_pylist()
    ]
    by_id = {row["id"]: [json.loads(t) for t in row["completions"]] for row in work}
    trajs = [t for ts in by_id.values() for t in ts]
    assert len(trajs) == 6 and all(t["segments"][0]["source"] == "model" for t in trajs)
    assert len({t["segments"][0]["text"] for t in trajs}) > 1  # sampled, not one string replayed
    for s in stats:  # every sample's record is its trajectory's
        ts = by_id[s["id"]]
        assert s["sample_status"] == [t["status"] for t in ts]
        assert s["sample_searches"] == [len(t["searches"]) for t in ts]
        assert s["sample_format_errors"] == [t["errors"] for t in ts]
        assert s["base_predictions"] == [t["answer"] for t in ts]
    summary = json.loads((out / "partition.json").read_text())
    c = summary["counts"]
    assert c[NO] + c[WITH] + c[UNANS] == 3 and sum(c["status"].values()) == 6
    # a random model keeps no protocol's format: said in the agent's terms, not the closed-context citation line
    assert c["format_valid_rate"] == 0
    flat = " ".join(r.output.split())
    assert "no trajectory kept the agent protocol's format" in flat and "Supporting passages" not in flat
    assert all(f"{k} {v}" in flat for k, v in c["status"].items())
    assert summary["generation"]["fingerprint"]["generation"]["backend"] == "transformers"
    assert summary["generation"]["fingerprint"]["agent"]["rollout"]["template"] == agent


@pytest.mark.slow
def test_over_a_retriever_server_and_in_shards_the_statistics_are_the_same(
    index_dir, min_max_shards, tmp_path
):
    """--retriever URL (`curriculum serve`'s app on a real uvicorn server) and a run split over --num-shards 2 give
    the statistics of the in-process single run, byte for byte."""
    import threading
    import time

    import uvicorn
    from rag_retriever import load_index
    from rag_retriever._server import make_app
    from support.servers import free_port

    def args(retriever, out, *extra):
        return [
            "partition",
            str(min_max_shards),
            "--agent",
            "search-r1",
            "--retriever",
            retriever,
            "--backend",
            "scripted",
            "--model",
            "support.agent_policies:knows_some",
            "--pass-at",
            "2",
            "--max-turns",
            "3",
            "--chunk-size",
            "16",
            "--out",
            str(out),
            "--no-progress",
            *extra,
        ]

    assert runner.invoke(app, args(str(index_dir), tmp_path / "ref")).exit_code == 0
    ref = (tmp_path / "ref" / "stats.parquet").read_bytes()
    for i in (0, 1):
        r = runner.invoke(
            app, args(str(index_dir), tmp_path / "sharded", "--num-shards", "2", "--shard-index", str(i))
        )
        assert r.exit_code == 0, r.output
    assert (tmp_path / "sharded" / "stats.parquet").read_bytes() == ref
    for i in (0, 1):  # shards on separate machines, joined by partition-merge
        r = runner.invoke(
            app, args(str(index_dir), tmp_path / f"node{i}", "--num-shards", "2", "--shard-index", str(i))
        )
        assert r.exit_code == 0, r.output
    r = runner.invoke(
        app,
        [
            "partition-merge",
            str(tmp_path / "node0"),
            str(tmp_path / "node1"),
            "--out",
            str(tmp_path / "merged"),
        ],
    )
    assert r.exit_code == 0, r.output
    assert (tmp_path / "merged" / "stats.parquet").read_bytes() == ref
    assert (tmp_path / "merged" / WITH / "manifest.json").is_file()
    r = runner.invoke(app, ["partition-merge", str(tmp_path / "merged"), "--balance"])
    assert r.exit_code == 2 and "--balance" in r.output
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(make_app(load_index(index_dir)), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.started
        r = runner.invoke(app, args(f"http://127.0.0.1:{port}/retrieve", tmp_path / "http"))
        assert r.exit_code == 0, r.output
    finally:
        server.should_exit = True
        thread.join(timeout=30)
    assert (tmp_path / "http" / "stats.parquet").read_bytes() == ref
    run = json.loads((tmp_path / "http" / "work" / "run.json").read_text())
    assert run["fingerprint"]["agent"]["retriever"]["kind"] == "http"


@pytest.mark.slow
def test_overwrite_with_the_other_kind_of_partition_retires_the_old_buckets(
    index_dir, min_max_shards, tmp_path, caplog
):
    """A closed-context partition's answerable/ goes when a search agent's set replaces it (--overwrite), and back;
    an old bucket holding a file of the user's stays, unreadable, and a warning says so."""
    out = tmp_path / "sw"
    closed = [
        "partition",
        str(min_max_shards),
        "--backend",
        "scripted",
        "--model",
        "support.agent_policies:closed_book_x",
        "--pass-at",
        "2",
        "--out",
        str(out),
        "--no-progress",
    ]
    agent = [
        *closed[:5],
        "support.agent_policies:knows_some",
        *closed[6:],
        "--agent",
        "search-r1",
        "--retriever",
        str(index_dir),
        "--overwrite",
    ]
    assert runner.invoke(app, closed).exit_code == 0 and (out / "answerable" / "manifest.json").is_file()
    r = runner.invoke(app, agent)
    assert r.exit_code == 0, r.output
    assert not (out / "answerable").exists() and (out / NO / "manifest.json").is_file()
    (out / WITH / "notes.txt").write_text("mine")
    assert runner.invoke(app, [*closed, "--overwrite"]).exit_code == 0
    assert not (out / NO).exists() and (out / "answerable" / "manifest.json").is_file()
    assert (out / WITH / "notes.txt").read_text() == "mine" and not (out / WITH / "manifest.json").exists()
    assert any("holds files the toolkit did not write" in m for m in caplog.messages)
    assert runner.invoke(app, ["validate", str(out / WITH)]).exit_code != 0


@pytest.mark.slow
def test_search_difficulty_shapes_what_the_searches_return(index_dir, min_max_shards, tmp_path):
    """--search-difficulty withhold --withhold-p 1: no search returns a gold passage (the same questions without it
    do find some); the setting is part of the run's identity."""

    def run(out, *extra):
        r = runner.invoke(
            app,
            [
                "partition",
                str(min_max_shards),
                "--agent",
                "search-r1",
                "--retriever",
                str(index_dir),
                "--backend",
                "scripted",
                "--model",
                "support.agent_policies:knows_some",
                "--pass-at",
                "1",
                "--chunk-size",
                "50",
                "--out",
                str(out),
                "--no-progress",
                *extra,
            ],
        )
        assert r.exit_code == 0, r.output
        return pq.read_table(out / "stats.parquet").to_pylist()

    plain = run(tmp_path / "plain")
    withheld = run(tmp_path / "withheld", "--search-difficulty", "withhold", "--withhold-p", "1")
    assert any(any(s["sample_gold_found"]) for s in plain)
    assert not any(any(s["sample_gold_found"]) for s in withheld)
    assert [s["sample_searches"] for s in withheld] == [s["sample_searches"] for s in plain]
    run_json = json.loads((tmp_path / "withheld" / "work" / "run.json").read_text())
    assert run_json["fingerprint"]["agent"]["difficulty"] == {"mode": "withhold", "p": 1.0, "seed": 0}


def test_partition_react_agent_through_reacts_turn_format(index_dir, min_max_shards, min_max_rows, tmp_path):
    """``--agent react``: the trajectories are ReAct's (Thought / Action / Observation turns, a malformed action
    typed and answered "Invalid action", the answer from Finish[...]), every question searched before it answered
    (so none is answerable without search), the pass counts recomputed from the recorded answers with answer F1,
    and the protocol's own setting (react_sentences) in the run's fingerprint."""
    from rag_curriculum._metrics import answer_scores

    out = tmp_path / "run"
    args = ["partition", str(min_max_shards), "--agent", "react", "--retriever", str(index_dir), "--backend",
            "scripted", "--model", "support.agent_policies:react_search_then_finish", "--pass-at", "2",
            "--max-turns", "4", "--top-k", "1", "--out", str(out), "--no-progress"]
    r = runner.invoke(app, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    work = [row for f in sorted((out / "work").glob("chunk-*.parquet")) for row in pq.read_table(f).to_pylist()]
    by_id = {row["id"]: [json.loads(t) for t in row["completions"]] for row in work}
    assert len(by_id) == len(min_max_rows) == 100
    rows = {row["id"]: row for row in min_max_rows}
    stats = {s["id"]: s for s in pq.read_table(out / "stats.parquet").to_pylist()}
    malformed = 0
    for rid, ts in by_id.items():
        for t in ts:
            assert t["status"] == "answer" and len(t["searches"]) == 1
            assert t["segments"][0]["text"].startswith("Thought 1: ")
            if t["errors"]:
                assert t["errors"] == ["malformed_action"] and "Invalid action" in t["segments"][1]["text"]
                malformed += 1
        correct = [answer_scores(t["answer"], rows[rid]["answers"])[1] >= 1 for t in ts]
        assert stats[rid]["c"] == sum(correct) and stats[rid]["base_predictions"] == [t["answer"] for t in ts]
    assert 0 < malformed < 200
    summary = json.loads((out / "partition.json").read_text())
    assert summary["counts"][NO] == 0 and summary["counts"][WITH] + summary["counts"][UNANS] == 100
    agent = summary["generation"]["fingerprint"]["agent"]
    assert (agent["agent"], agent["rollout"]["template"], agent["settings"]) == ("react", "react",
                                                                               {"react_sentences": 5})
    # the protocol's own setting is part of the run: another value over the same folder is refused, nothing lost
    from rag_curriculum.errors import RunMismatchError
    from rag_curriculum.partition import partition

    before = tree(out)
    cfg = PartitionConfig(shards=str(min_max_shards), agent="react", retriever=str(index_dir), backend="scripted",
                          model="support.agent_policies:react_search_then_finish", samples=2, max_turns=4, top_k=1,
                          react_sentences=2, out=str(out))
    with pytest.raises(RunMismatchError, match="other settings"):
        partition(cfg)
    assert tree(out) == before


def test_partition_agent_protocol_settings_are_refused_with_the_other_protocol(index_dir, min_max_shards, tmp_path):
    base = ["partition", str(min_max_shards), "--retriever", str(index_dir), "--backend", "scripted", "--model",
            "support.agent_policies:knows_some", "--out", str(tmp_path / "o"), "--no-progress"]
    r = runner.invoke(app, [*base, "--agent", "search-r1", "--template", "react"])
    assert r.exit_code == 2 and "pass --agent react" in r.output
    r = runner.invoke(app, [*base, "--agent", "react", "--template", "search-r1-original"])
    assert r.exit_code == 2 and "is Search-R1's prompt" in r.output
    assert not (tmp_path / "o").exists()
