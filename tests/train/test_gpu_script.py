"""scripts/gpu_paper_run.sh, the GPU pre-flight of the paper's min-max run, is known to work before a GPU is at hand:
its smoke mode runs the same steps on a CPU with the tiny model (build with the model's tokenizer, dry run, GRPO on
the curriculum's longest rows first, a checkpoint saved and resumed from, the checks), and compares a planted peak
with the estimate the run recorded: a peak over it fails the pre-flight, on that check alone.

Its input is 20 real MuSiQue rows with every passage cut to its first 40 characters: the same curriculum (min-max
puts level 20's 20 passages a row in the second half), its longest prompts about 1k tokens in the tiny model's
tokenizer instead of 5k, so a step costs seconds, not minutes, on a CPU. What is left is mostly the script's
processes starting (the build imports transformers; the dry run and both trainings, TRL)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MUSIQUE_TRAIN

ROOT = Path(__file__).resolve().parents[2]


def short_passages(path: Path, rows: int = 20, chars: int = 40) -> Path:
    """The first ``rows`` rows of the MuSiQue sample, every passage's text cut to its first ``chars`` characters."""
    with open(MUSIQUE_TRAIN, encoding="utf-8") as f:
        records = [json.loads(line) for line in itertools.islice(f, rows)]
    for record in records:
        for passage in record["paragraphs"]:
            passage["paragraph_text"] = passage["paragraph_text"][:chars]
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def run_script(env: dict[str, str], out: Path) -> subprocess.CompletedProcess:
    """The script in a session of its own: past the time limit, its trainers are stopped with it, not left running."""
    proc = subprocess.Popen(["bash", str(ROOT / "scripts" / "gpu_paper_run.sh"), str(out)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=900)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.mark.slow
def test_the_preflight_trains_the_longest_rows_and_fails_on_a_peak_over_the_estimate(tiny_model_dir, tmp_path):
    import pyarrow.parquet as pq

    from rag_curriculum.shards import shard_files

    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "SMOKE": "1", "MODEL": str(tiny_model_dir),
           "INPUT": str(short_passages(tmp_path / "musique-short.jsonl")), "N": "20", "STEPS": "2",
           "PLANTED_PEAK_GIB": "5", "CURRICULUM": str(bin_dir / "curriculum"), "PYTHON": sys.executable,
           "HF_HUB_OFFLINE": "1"}
    out = tmp_path / "run"
    res = run_script(env, out)
    # the planted 5 GiB is over the tiny model's estimate (its CUDA context, 1 GiB, and little else): refused
    assert res.returncode == 1 and (out / "summary.json").is_file(), res.stdout[-3000:] + res.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["peak_gib"] == 5.0 and summary["estimate"]["total_gib"] < 5 and summary["peaks"][0]["planted"]
    assert summary["checks"].pop("peak memory within the estimate") is False
    assert "over the estimate" in summary["peak_verdict"]
    assert all(summary["checks"].values()), summary["checks"]  # every other check holds
    # the longest rows first, in curriculum order: level 20's (min-max puts it in the second half, rows 10..19)
    plan = json.loads((out / "train" / "train_plan.json").read_text())
    chosen = plan["longest_rows"]["curriculum_index"]
    assert len(chosen) == 4 and min(chosen) >= 10 and summary["longest_rows"]["levels"] == [20]
    rows = [r for f in shard_files(out / "musique-min-max") for r in pq.read_table(f).to_pylist()]
    longest = sorted(rows, key=lambda r: (-r["prompt_tokens"], r["curriculum_index"]))[:4]
    assert chosen == sorted(r["curriculum_index"] for r in longest)  # the 4 longest prompts of the 20, no others
    steps = [json.loads(s) for s in (out / "train" / "curriculum_steps.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2] and [i for s in steps for i in s["curriculum_index"]] == chosen
    assert summary["completions_per_step"] == 4  # the smoke's real batch: 2 prompts x 2
    # a checkpoint after step 1, resumed from for step 2, as large as the dry run said
    assert "checkpoint-1" in (out / "train-resume.log").read_text()
    dry = (out / "dry-run.log").read_text()
    assert "memory per GPU, estimated" in dry and "checkpoint: about" in dry and "GiB needed" in dry
    assert summary["checkpoint_gib"]["measured"] > 0
