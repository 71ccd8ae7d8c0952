"""A method written as one folder (tests/methods/toy_method/, shown in docs/extending.md, "A new method") and
declared by one entry point of ``rag_curriculum.methods``, as an installed package declares it, is found by the
toolkit's registries in a fresh process: its reward by name (scoring real curriculum rows against their gold
answers) and its output format, and its part of the search-agent evaluation (``curriculum eval --reward
toy-final-em``: every trajectory scored by it beside EM); a declared method that cannot be imported is named in a
warning and left out. Nothing in the toolkit names the toy method."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MUSIQUE_TRAIN, ROOT

HERE = Path(__file__).resolve().parent

#: What the fresh process checks: the names the registries list, the reward's scores, the format's parse.
PROBE = """import json, sys
from rag_curriculum.rewards import FORMATS, REWARDS, get_format, get_reward
answers = json.loads(sys.argv[1])
right = [f"Two hops.\\nFinal: {a[0]}" for a in answers]
wrong = ["Final: certainly not the answer" for _ in answers]
reward = get_reward("toy-final-em")
print(json.dumps({"rewards": REWARDS.names(), "formats": FORMATS.names(),
                  "right": reward(right, answers=answers), "wrong": reward(wrong, answers=answers),
                  "module": type(reward).__module__, "parsed": get_format("toy-final").parse("x\\nFinal: Rome").answer,
                  "broken": get_format("toy-final").parse("no final line").reason}))
"""


@pytest.fixture(scope="module")
def method_env(tmp_path_factory) -> dict[str, str]:
    """A Python whose installed packages declare the toy method (and one that cannot be imported): their
    ``*.dist-info`` folders as pip writes them for ``[project.entry-points."rag_curriculum.methods"]``."""
    site = tmp_path_factory.mktemp("site")
    for dist, entry in (("toy_method-1.0", "toy = toy_method"), ("broken_method-1.0", "broken = no_such_module")):
        info = site / f"{dist}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist.split('-')[0]}\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text(f"[rag_curriculum.methods]\n{entry}\n")
    path = os.pathsep.join([str(site), str(HERE), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "HF_HUB_OFFLINE": "1"}


@pytest.mark.slow
def test_a_method_folder_with_an_entry_point_is_found_and_scores_real_rows(method_env, min_max_rows):
    rows = min_max_rows[:6]
    answers = [list(r["answers"]) for r in rows]
    r = subprocess.run([sys.executable, "-c", PROBE, json.dumps(answers)], env=method_env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert "toy-final-em" in got["rewards"] and "rag-rl" in got["rewards"] and "veritas" in got["rewards"]
    assert "toy-final" in got["formats"]
    assert got["module"] == "toy_method"
    assert got["right"] == [1.0] * len(rows) and got["wrong"] == [0.0] * len(rows)
    assert got["parsed"] == "Rome" and got["broken"] == "missing_tag"
    assert "method 'broken'" in r.stderr and "no_such_module" in r.stderr  # named, left out, the rest works


def test_the_toolkit_names_no_toy_method():
    named = [p for p in (ROOT / "src").rglob("*.py") if "toy_method" in p.read_text(encoding="utf-8")
             or "toy-final" in p.read_text(encoding="utf-8")]
    assert named == []


#: The search-agent evaluation in a fresh process: ``curriculum eval --agent search-r1 --reward toy-final-em``.
EVAL = """import sys
from rag_curriculum.cli import app
app(sys.argv[1:])
"""


@pytest.mark.slow
def test_a_method_folder_adds_its_reward_to_the_search_agent_evaluation(method_env, min_max_shards, tmp_path):
    pytest.importorskip("bm25s")
    from rag_retriever import IndexConfig, build_index

    index = tmp_path / "ix"
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE_TRAIN), out=str(index), depth=10))
    out = tmp_path / "run"
    env = {**method_env, "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), method_env["PYTHONPATH"]])}
    args = ["eval", "--agent", "search-r1", "--retriever", str(index), "--backend", "scripted", "--model",
            "policy=support.agent_policies:search_then_gold", "--data", str(min_max_shards), "--limit", "8",
            "--samples", "2", "--reward", "toy-final-em", "--out", str(out), "--no-progress"]
    r = subprocess.run([sys.executable, "-c", EVAL, *args], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    (entry,) = json.loads((out / "summary.json").read_text())["evals"]
    trajs = [json.loads(x) for x in (out / "trajectories" / "policy" / f"{entry['set']}.jsonl").open()]
    assert len(trajs) == 16 and all(t["toy_final_em"] in (0.0, 1.0) for t in trajs)
    # its mean beside EM: the same reading of the same answers (each a mean over questions of the mean over samples)
    assert entry["overall"]["toy_final_em"] == entry["overall"]["em"] > 0
    mean = 100 * sum(t["toy_final_em"] for t in trajs) / 16
    assert entry["overall"]["toy_final_em"] == pytest.approx(mean, abs=0.01)
    assert all("toy_final_em" in g for by in ("by_hops", "by_level") for g in entry[by].values())
    assert "toy EM" in r.stderr + r.stdout  # the set's log line names it
    # the command's table gives it a column headed by its label, its mean in it (no other method's column)
    head = next(x for x in r.stdout.splitlines() if "gold recall" in x)
    assert [c.strip() for c in head.strip("┃").split("┃")][-2:] == ["gold recall", "toy EM"], head
    row = next(x for x in r.stdout.splitlines() if x.startswith("│ policy"))
    assert row.strip("│").split("│")[-1].strip() == f"{entry['overall']['toy_final_em']:.1f}", row
    assert "Search-R1" not in r.stdout
    # a run without it leaves its scores out, and an unknown reward is refused with the registered ones named
    r = subprocess.run([sys.executable, "-c", EVAL, *args[:-5], "--reward", "toy-final", "--out", str(tmp_path / "o"),
                        "--no-progress"], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "search-r1, toy-final-em" in " ".join((r.stdout + r.stderr).split()), r.stderr
