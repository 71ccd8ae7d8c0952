"""The README's CPU walkthrough and its "Beyond the paper" example, run as written: the blocks between the
``walkthrough`` and ``beyond`` markers are extracted and executed with bash (``set -euo pipefail``) in a scratch checkout (``tests/`` and ``.venv`` linked, ``../shared``
beside it), then every output its table promises is checked. A README that drifts from the commands fails here."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import ROOT

pytestmark = pytest.mark.slow

README = ROOT / "README.md"


def snippet(name: str) -> str:
    text = README.read_text(encoding="utf-8")
    section = re.search(rf"--8<-- \[start:{name}\](.*?)--8<-- \[end:{name}\]", text, re.S)
    assert section, f"README.md lost its {name} markers"
    blocks = re.findall(r"```bash\n(.*?)```", section.group(1), re.S)
    assert len(blocks) == 1, f"the {name} section holds one bash block"
    return blocks[0]


@pytest.mark.timeout(2700)  # a hang's bound above the subprocess's own
def test_the_cpu_walkthrough_runs_as_written(tmp_path, shared_data):
    pytest.importorskip("trl")
    pytest.importorskip("ray")
    pytest.importorskip("bm25s")
    repo = tmp_path / "checkout"
    repo.mkdir()
    (repo / "tests").symlink_to(ROOT / "tests")
    (repo / ".venv").symlink_to(Path(sys.prefix))
    (tmp_path / "shared").symlink_to(shared_data.parent)
    script = "set -euo pipefail\n" + snippet("walkthrough") + snippet("beyond")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    r = subprocess.run(["bash", "-c", script], cwd=repo, env=env, capture_output=True, text=True, timeout=2400)
    assert r.returncode == 0, f"the README walkthrough failed:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    out = repo / "outputs"
    for path in ["hotpotqa-cpu/data/part-00000.parquet", "hotpotqa-cpu/manifest.json",
                 "hotpotqa-cpu/README.md", "hotpotqa-cpu/level_by_index.png",
                 "hotpotqa-partition/stats.parquet", "hotpotqa-partition/partition.json",
                 "train/cpu-gemma-hotpotqa/checkpoint-2", "train/cpu-gemma-hotpotqa/curriculum_steps.jsonl",
                 "train/cpu-gemma-hotpotqa/train_config.yaml", "train/cpu-gemma-hotpotqa/train_plan.json",
                 "eval-cpu/table.md", "eval-cpu/summary.json"]:
        assert (out / path).exists(), f"the README promises outputs/{path}"
    for bucket in ("answerable", "unanswerable", "learnable"):
        assert (out / "hotpotqa-partition" / bucket / "manifest.json").is_file()
    manifest = json.loads((out / "hotpotqa-cpu/manifest.json").read_text())
    assert manifest["num_rows"] == 4
    steps = [json.loads(x) for x in (out / "train/cpu-gemma-hotpotqa/curriculum_steps.jsonl").read_text().splitlines()]
    assert [x["curriculum_index"] for x in steps] == [[0, 1], [2, 3]], "2 GRPO steps in order"
    assert [x["levels"] for x in steps] == [{"1": 2}, {"3": 2}], "the training reaches every level it built"
    # the training moves something: the warm-started model's groups are mixed, so GRPO's gradient is not zero
    state = json.loads((out / "train/cpu-gemma-hotpotqa/checkpoint-2/trainer_state.json").read_text())
    logged = [h for h in state["log_history"] if "frac_reward_zero_std" in h]
    assert len(logged) == 2, state["log_history"]
    assert any(h["frac_reward_zero_std"] < 1 for h in logged), f"no mixed group in either step: {logged}"
    assert all(h["grad_norm"] > 0 for h in logged if h["frac_reward_zero_std"] < 1), logged
    # the warm start's next: line is the walkthrough's train command; its checkpoint keeps what eval reads
    train = re.search(r"^curriculum train .*?(?<!\\)$", snippet("walkthrough").replace("\\\n    ", ""), re.M)
    assert f"next: {train.group(0)}" in r.stdout, r.stdout[-3000:]
    checkpoint = out / "train/cpu-gemma-hotpotqa/checkpoint-2"
    assert (checkpoint / "model.safetensors").is_file() and not (checkpoint / "optimizer.pt").exists()
    plan = json.loads((out / "train/cpu-gemma-hotpotqa/train_plan.json").read_text())
    assert plan["prompt_style"]["style"] == "completion"
    warm = json.loads((out / "gemma-warm/warm_start.json").read_text())["settings"]
    assert (warm["plain"], warm["rows"], warm["batch_size"]) == (0.0, 2, 1)
    # the instrument on the way: the warm model's profile, the build made with it, each step's prediction checked
    profile = json.loads((out / "gemma-profile/profile.json").read_text())
    assert profile["datasets"] == ["hotpotqa"] and profile["levels"] == [1, 3] and profile["group_size"] == 2
    assert profile["questions"] == 4 and profile["samples_per_question"] == 4
    assert (out / "gemma-profile/profile.png").is_file()
    assert manifest["profile"]["path"] == "../gemma-profile" and manifest["profile"]["profiled_questions"] == 4
    assert plan["informative_profile"] == "outputs/gemma-profile"
    metrics = [json.loads(x) for x in (out / "train/cpu-gemma-hotpotqa/step_metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2] and all(0 <= m["predicted"] <= 1 for m in metrics), metrics
    # each step's line (not the run's closing summary, `step 2/2  train_loss ...`)
    lines = [x for x in re.findall(r"^step [12]/2 .*$", r.stdout + r.stderr, re.M) if " reward " in x]
    assert len(lines) == 2 and all(" informative " in x and " predicted " in x for x in lines), lines
    checked = json.loads((out / "train/cpu-gemma-hotpotqa/informative.json").read_text())
    assert checked["whole"]["groups"] == 4 and (out / "train/cpu-gemma-hotpotqa/informative.png").is_file()
    # no folder of this machine in what a user shares: the checkout, the home folder (the GGUF file, its conversion)
    shared = [out / "gemma-warm/warm_start.json", out / "train/cpu-gemma-hotpotqa/train_plan.json",
              out / "train/cpu-gemma-hotpotqa/README.md", out / "train/cpu-gemma-hotpotqa/informative.json",
              out / "hotpotqa-cpu/manifest.json", out / "hotpotqa-cpu/README.md",
              out / "hotpotqa-partition/partition.json", out / "gemma-profile/profile.json", out / "eval-cpu/summary.json"]
    for path in shared:
        text = path.read_text()
        assert str(tmp_path) not in text and str(Path.home()) not in text, f"{path} names a folder of this machine"
    model_file = json.loads((out / "gemma-warm/warm_start.json").read_text())["model_file"]
    assert not any(os.path.isabs(model_file[k]) for k in ("model", "converted_to")), model_file  # ~/.cache/...
    table = (out / "eval-cpu/table.md").read_text()
    assert all(name in table for name in ("base", "warm", "trained")) and "95% intervals" in table
    # the partition is a real model's: what it wrote, counted right (the official F1 on the recorded answers)
    from rag_curriculum._metrics import answer_f1
    from rag_curriculum.prompts import RAG_RL_RESPONSE_PREFIX
    from rag_curriculum.rewards import parse_completion

    stats = pq.read_table(out / "hotpotqa-partition/stats.parquet").to_pylist()
    built = {r["id"]: r for r in pq.read_table(out / "hotpotqa-partition/input/data").to_pylist()}
    assert len(stats) == 4
    for s in stats:
        assert all(c.startswith(RAG_RL_RESPONSE_PREFIX) for c in s["base_completions"])
        assert s["base_predictions"] == [parse_completion(c).answer for c in s["base_completions"]]
        assert s["c"] == sum(answer_f1(p, built[s["id"]]["answers"]) >= 1.0 for p in s["base_predictions"])
    record = json.loads((out / "hotpotqa-partition/partition.json").read_text())
    assert record["generation"]["backend"]["prompt_style"]["style"] == "completion"
    # "Beyond the paper", run after the walkthrough in the same checkout
    bm25 = json.loads((out / "hotpotqa-bm25/manifest.json").read_text())
    rows = pq.read_table(out / "hotpotqa-bm25/data").to_pylist()
    assert max(r["num_distractors"] for r in rows if r["answerable"]) == 14, "BM25 distractors pass HotpotQA's 8"
    assert {p["origin"] for r in rows for p in r["passages"] if not p["is_gold"]} == {"bm25"}
    assert 0 < sum(not r["answerable"] for r in rows) < len(rows), bm25.get("unanswerable")
    adaptive = pq.read_table(out / "musique-adaptive/data").to_pylist()
    assert len(adaptive) == 8 and {r["template"] for r in adaptive} == {"craft-v1"}
    assert (out / "musique-partition-ray/stats.parquet").is_file()
    ray_stats = pq.read_table(out / "musique-partition-ray/stats.parquet").to_pylist()
    assert len(ray_stats) == 4 and all(len(s["sample_f1"]) == 2 for s in ray_stats)
