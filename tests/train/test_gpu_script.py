"""scripts/gpu_paper_run.sh, the paper's min-max run for a few steps on GPUs, is known to work before a GPU is at
hand: its smoke mode runs the same four steps (build with the model's tokenizer, dry run, GRPO, the checks) on a
CPU with the tiny model, and its checks pass on what the run wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MUSIQUE_TRAIN

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_the_gpu_script_runs_in_smoke_mode(tiny_model_dir, tmp_path):
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "SMOKE": "1", "MODEL": str(tiny_model_dir), "INPUT": str(MUSIQUE_TRAIN), "STEPS": "2",
           "CURRICULUM": str(bin_dir / "curriculum"), "PYTHON": sys.executable, "HF_HUB_OFFLINE": "1"}
    res = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_paper_run.sh"), str(tmp_path / "run")], env=env,
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["ok"] and all(summary["checks"].values()), summary
    assert summary["steps_asked"] == 2 and summary["longest_prompt_checked"] > 0
    assert set(summary["longest_prompt_by_level"]) == {"1", "20"}  # min-max: every level's longest, reported
    assert "longest prompt per level: 1: " in (tmp_path / "run" / "build.log").read_text()
    assert "memory per GPU, estimated" in (tmp_path / "run" / "dry-run.log").read_text()
    steps = (tmp_path / "run" / "train" / "curriculum_steps.jsonl").read_text().splitlines()
    assert [json.loads(s)["curriculum_index"] for s in steps] == [[0, 1], [2, 3]]
