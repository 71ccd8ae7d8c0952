"""scripts/gpu_paper_run.sh, the GPU pre-flight of the paper's min-max run, is known to work before a GPU is at hand:
its smoke mode runs the same steps on a CPU with the tiny model (build with the model's tokenizer, dry run, GRPO on
the curriculum's longest rows first, a checkpoint saved and resumed from, the checks), and compares a planted peak
with the estimate the run recorded: a peak over it fails the pre-flight, on that check alone."""

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
def test_the_preflight_trains_the_longest_rows_and_fails_on_a_peak_over_the_estimate(tiny_model_dir, tmp_path):
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "SMOKE": "1", "MODEL": str(tiny_model_dir), "INPUT": str(MUSIQUE_TRAIN), "N": "20",
           "STEPS": "2", "PLANTED_PEAK_GIB": "5", "CURRICULUM": str(bin_dir / "curriculum"),
           "PYTHON": sys.executable, "HF_HUB_OFFLINE": "1"}
    res = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_paper_run.sh"), str(tmp_path / "run")], env=env,
                         capture_output=True, text=True, timeout=900)
    out = tmp_path / "run"
    summary = json.loads((out / "summary.json").read_text())
    # the planted 5 GiB is over the tiny model's estimate (its CUDA context, 1 GiB, and little else): refused
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]
    assert summary["peak_gib"] == 5.0 and summary["estimate"]["total_gib"] < 5 and summary["peaks"][0]["planted"]
    assert summary["checks"].pop("peak memory within the estimate") is False
    assert "over the estimate" in summary["peak_verdict"]
    assert all(summary["checks"].values()), summary["checks"]  # every other check holds
    # the longest rows first, in curriculum order: level 20's (min-max puts it in the second half, rows 10..19)
    plan = json.loads((out / "train" / "train_plan.json").read_text())
    chosen = plan["longest_rows"]["curriculum_index"]
    assert len(chosen) == 4 and min(chosen) >= 10 and summary["longest_rows"]["levels"] == [20]
    steps = [json.loads(s) for s in (out / "train" / "curriculum_steps.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2] and [i for s in steps for i in s["curriculum_index"]] == chosen
    assert summary["completions_per_step"] == 4  # the smoke's real batch: 2 prompts x 2
    # a checkpoint after step 1, resumed from for step 2, as large as the dry run said
    assert "checkpoint-1" in (out / "train-resume.log").read_text()
    dry = (out / "dry-run.log").read_text()
    assert "memory per GPU, estimated" in dry and "checkpoint: about" in dry and "GiB needed" in dry
    assert summary["checkpoint_gib"]["measured"] > 0
