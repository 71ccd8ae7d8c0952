"""verl loads ``rag_curriculum/verl/rewards.py`` by path in every reward worker: the file loads the scoring code only,
never a generation backend, the shard reader, a retriever, pyarrow, numpy or torch (before the rewards were leaves it
loaded 330 modules, pyarrow and numpy among them), nor the agents (the rewards read trajectories through the grammar). Measured in a fresh interpreter, loaded as verl loads it."""

from __future__ import annotations

import json
import subprocess
import sys

from rag_curriculum.verl.data import reward_path

#: Modules the import added, at most (about 140 today, with Python 3.11; pyarrow alone would add over 100).
BOUND = 200

NEVER = ("pyarrow", "numpy", "torch", "transformers", "trl", "vllm", "ray", "openai", "bm25s", "pandas", "datasets",
         "rag_curriculum.shards", "rag_curriculum.generation.runner", "rag_curriculum.generation._engine",
         "rag_curriculum.retrieval", "rag_curriculum.agents", "rag_curriculum.loaders", "rag_curriculum.curricula",
         "rag_curriculum.train")

CODE = """
import importlib.util, json, sys
before = set(sys.modules)
spec = importlib.util.spec_from_file_location("custom_module", sys.argv[1])  # as verl's reward loader does
module = importlib.util.module_from_spec(spec)
sys.modules["custom_module"] = module
spec.loader.exec_module(module)
names = ["compute_score", "compute_craft_score", "compute_search_score", "compute_globalrag_score",
         "compute_veritas_score", "compute_search_r1_score"]
print(json.dumps({"added": sorted(set(sys.modules) - before), "callable": [callable(getattr(module, n)) for n in names],
                  "score": module.compute_search_score("nq", "<answer>Paris</answer>", ["Paris"])["score"]}))
"""


def test_the_verl_reward_file_loads_the_scoring_code_only():
    out = subprocess.run([sys.executable, "-c", CODE, reward_path()], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)
    added = set(got["added"])
    assert got["callable"] == [True] * 6 and got["score"] == 1.0
    assert "rag_curriculum.rewards._rag_rl" in added and "rag_curriculum.grammar._search_r1" in added  # it was measured
    loaded = sorted(m for m in added if m in NEVER or m.split(".")[0] in NEVER)
    assert not loaded, f"loading the verl reward file imported {loaded}"
    assert len(added) < BOUND, f"loading the verl reward file imported {len(added)} modules (bound {BOUND})"
