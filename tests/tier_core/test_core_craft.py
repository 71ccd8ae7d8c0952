"""The CRAFT reward verl loads (``compute_craft_score``) from a core install: scoring real craft-v1 rows, loaded by
path as verl loads it, without torch, transformers, TRL or vLLM (nor the judge's backends) imported."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
from conftest import MUSIQUE_TRAIN

from .test_core_reward import HEAVY, ML_STACK, _installed

pytestmark = pytest.mark.skipif(any(_installed(m) for m in ML_STACK),
                                reason="torch / transformers / trl / vllm are installed here: the core tier runs in "
                                       ".venv-core (scripts/setup.sh core)")


def test_compute_craft_score_on_real_craft_rows(tmp_path):
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
    from rag_curriculum.rewards import CraftReward
    from rag_curriculum.shards import read_rows
    from rag_curriculum.verl.data import reward_path

    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 20)], schedule="max",
                                 template="craft-v1", out=str(tmp_path / "v1"), workers=1))
    spec = importlib.util.spec_from_file_location("custom_module_craft", reward_path())
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    reward = CraftReward("craft-v1", log_components=False)
    for row in read_rows(tmp_path / "v1"):
        gold = row["gold_labels"]
        text = (f"<plan>p</plan><gold_docs>[{', '.join(gold)}]</gold_docs><reason>document [{gold[0]}]</reason>"
                f"<answer>{row['answers'][0]}</answer>")
        got = module.compute_craft_score(row["data_source"], text, row["reward_model"]["ground_truth"],
                                         row["extra_info"])
        assert got["score"] == reward.score(text, row["answers"], gold).total == 3.0
        assert got["evidence"] == got["boundary"] == got["acc"] == 1.0


def test_craft_reward_imports_no_ml_stack():
    code = (
        "import json, sys\n"
        "from rag_curriculum.verl.rewards import compute_craft_score\n"
        "out = compute_craft_score('m', '<reason>doc [1]</reason><answer>Paris</answer>', "
        "{'answers': ['Paris'], 'gold_labels': ['1']}, output_format='craft-v4')\n"
        f"print(json.dumps([out['score'], sorted(m for m in sys.modules if m.split('.')[0] in {list(HEAVY)!r})]))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(res.stdout) == [2.0, []]
