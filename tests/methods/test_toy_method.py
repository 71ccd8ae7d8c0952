"""A method written as one folder (tests/methods/toy_method/, shown in docs/extending.md, "A new method") and
declared by one entry point of ``rag_curriculum.methods``, as an installed package declares it, is found by the
toolkit's registries in a fresh process: its reward by name (scoring real curriculum rows against their gold
answers) and its output format; a declared method that cannot be imported is named in a warning and left out.
Nothing in the toolkit names the toy method."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

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
