"""`curriculum eval --agent search-r1 --retriever DIR`: a scripted search agent (module-level policy, named by dotted
path as users name theirs) on real MuSiQue rows and a real index; EM / F1 recomputed here from the trajectories,
searches per question, gold recall, format errors by type, breakdowns; rerun reuses; other settings are refused."""

from __future__ import annotations

import json

import pytest
from conftest import MUSIQUE_TRAIN
from typer.testing import CliRunner

from rag_curriculum.cli import app

pytest.importorskip("bm25s")
runner = CliRunner()


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, shared_data):
    from rag_retriever import IndexConfig, build_index

    out = tmp_path_factory.mktemp("eval-agent-index") / "ix"
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(out), depth=10))
    return out


@pytest.mark.slow
def test_eval_agent_end_to_end(index_dir, min_max_shards, min_max_rows, tmp_path):
    from rag_retriever import load_index

    from rag_curriculum._metrics import answer_scores
    from rag_curriculum.agents import IndexRetriever

    out = tmp_path / "run"
    args = ["eval", "--agent", "search-r1", "--retriever", str(index_dir), "--backend", "scripted",
            "--model", "policy=support.agent_policies:search_then_answer", "--data", str(min_max_shards), "--samples", "2",
            "--limit", "12", "--max-turns", "3", "--top-k", "3", "--out", str(out), "--no-progress"]
    r = runner.invoke(app, args, catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert "search agent (search-r1)" in r.output
    summary = json.loads((out / "summary.json").read_text())
    (entry,) = summary["evals"]
    assert entry["questions"] == 12 and entry["samples"] == 2 and entry["model"] == "policy"
    trajs = [json.loads(line) for line in (out / "trajectories" / "policy" / f"{entry['set']}.jsonl").open()]
    assert len(trajs) == 24
    rows = min_max_rows[:12]
    # EM / F1 recomputed from the trajectories' answers
    em = [answer_scores(t["answer"], rows[i // 2]["answers"])[0] if t["answer"] is not None else 0.0
          for i, t in enumerate(trajs)]
    assert entry["overall"]["em"] == pytest.approx(100 * sum(em) / 24, abs=0.01)
    unclosed = sum(1 for r in rows if len(r["question"].strip()) % 3 == 0)
    assert 0 < unclosed < 12
    assert entry["format_errors"].get("unclosed_search") == 2 * unclosed
    ok = 12 - unclosed
    assert entry["overall"]["searches"] == pytest.approx(ok / 12, abs=1e-3)
    # gold recall: from the index's own ranking, recomputed
    ix = IndexRetriever(load_index(index_dir))
    recall = []
    for row in rows:
        q = row["question"].strip()
        if len(q) % 3 == 0:
            recall.append(0.0)
            continue
        gold = {(p["title"], p["text"]) for p in row["passages"] if p["is_gold"]}
        hits = ix.search([q], 3)[0]
        recall.append(min(sum((h.title, h.text) in gold for h in hits), len(gold)) / len(gold))
    assert entry["overall"]["gold_recall"] == pytest.approx(100 * sum(recall) / 12, abs=0.01)
    assert set(entry["by_level"]) == {"1"} and set(entry["by_hops"]) <= {"2", "3", "4"}
    assert (out / "table.md").read_text().startswith("# Search agent (search-r1)")
    # the same command again reuses the results; another setting is refused without --overwrite
    before = (out / "trajectories" / "policy" / f"{entry['set']}.jsonl").stat().st_mtime_ns
    assert runner.invoke(app, args).exit_code == 0
    assert (out / "trajectories" / "policy" / f"{entry['set']}.jsonl").stat().st_mtime_ns == before
    r = runner.invoke(app, [*args[:-3], "--top-k", "2", "--out", str(out), "--no-progress"])
    assert r.exit_code == 1 and "holds results made with other settings" in r.output
    # the one setting that differs, with its two values (it named none)
    assert "other settings (differs in: settings.top_k 3 -> 2)" in r.output, r.output
    assert "pass --overwrite" in r.output


def test_eval_agent_refusals(index_dir, min_max_shards, tmp_path):
    base = ["eval", "--backend", "scripted", "--model", "p=support.agent_policies:search_then_answer", "--data", str(min_max_shards),
            "--out", str(tmp_path / "o"), "--no-progress"]
    r = runner.invoke(app, [*base, "--agent", "search-r1"])
    assert r.exit_code == 2 and "--agent needs --retriever" in r.output
    r = runner.invoke(app, [*base, "--agent", "search-r1", "--retriever", str(tmp_path / "nope")])
    assert r.exit_code == 1 and "nope" in r.output and "Traceback" not in r.output
    r = runner.invoke(app, [*base, "--agent", "search-r2", "--retriever", str(index_dir)])
    assert r.exit_code != 0 and "search-r1" in r.output
    r = runner.invoke(app, [*base, "--agent", "search-r1", "--retriever", str(index_dir), "--stats", "x"])
    assert r.exit_code == 2 and "does not take --stats" in r.output

    r = runner.invoke(app, [*base, "--agent", "search-r1", "--retriever", str(index_dir), "--template", "search-r1",
                            "--template", "search-r1-original"])
    assert r.exit_code == 2 and "one --template" in r.output
    r = runner.invoke(app, ["eval", "--agent", "search-r1", "--retriever", str(index_dir), "--backend",
                            "transformers", "--model", str(tmp_path / "no-such-model"), "--data",
                            str(min_max_shards), "--out", str(tmp_path / "o2")])
    assert r.exit_code != 0 and "no-such-model" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "o2").exists()


@pytest.mark.slow
def test_eval_agent_writes_only_into_its_own_folders_and_one_run_at_a_time(index_dir, min_max_shards, tmp_path):
    from filelock import FileLock

    base = ["eval", "--agent", "search-r1", "--retriever", str(index_dir), "--backend", "scripted", "--model",
            "p=support.agent_policies:search_then_answer", "--data", str(min_max_shards), "--limit", "3", "--no-progress"]
    mine = tmp_path / "mine"
    (mine / "sub").mkdir(parents=True)
    (mine / "notes.txt").write_text("keep")
    r = runner.invoke(app, [*base, "--out", str(mine)])
    assert r.exit_code == 1 and "not the output of an agent evaluation" in r.output
    assert sorted(p.name for p in mine.rglob("*")) == ["notes.txt", "sub"]
    for flag in ([], ["--overwrite"]):
        r = runner.invoke(app, [*base, "--out", str(mine), *flag])
        assert r.exit_code == 1 and sorted(p.name for p in mine.rglob("*")) == ["notes.txt", "sub"]
    out = tmp_path / "run"
    assert runner.invoke(app, [*base, "--out", str(out)]).exit_code == 0
    (out / "notes.txt").write_text("mine")  # a file the user adds to a run folder stays
    with FileLock(str(out / ".eval.lock")):  # a run under way
        r = runner.invoke(app, [*base, "--out", str(out)])
    assert r.exit_code == 1 and "another `curriculum eval --agent` is writing" in r.output
    r = runner.invoke(app, [*base, "--out", str(out), "--samples", "2", "--overwrite"])
    assert r.exit_code == 0 and (out / "notes.txt").read_text() == "mine"
    assert json.loads((out / "summary.json").read_text())["evals"][0]["samples"] == 2
