"""The Search agents page's CPU commands, run as written with bash in a scratch checkout (``.venv`` linked,
``../shared`` beside it, the README walkthrough's tiny model in ``outputs/tiny-model``): its first block (index,
build, ``eval --agent``) and its CPU training block; then what the page says they leave behind is checked."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

pytestmark = pytest.mark.slow


def bash_blocks() -> list[str]:
    return re.findall(r"```bash\n(.*?)```", (ROOT / "docs" / "search-agents.md").read_text(encoding="utf-8"), re.S)


def test_the_search_agents_pages_cpu_commands_run_as_written(tmp_path, shared_data, tiny_model_dir):
    pytest.importorskip("trl")
    pytest.importorskip("bm25s")
    blocks = bash_blocks()
    assert "eval --agent" in blocks[0], "the page's first block moved"
    (train_block,) = [b for b in blocks if "recipe=search-r1-cpu-tiny" in b]
    assert "curriculum serve" in train_block and "agent.retriever=http://127.0.0.1:8765/retrieve" in train_block
    repo = tmp_path / "checkout"
    repo.mkdir()
    (repo / ".venv").symlink_to(Path(sys.prefix))
    (tmp_path / "shared").symlink_to(shared_data.parent)
    shutil.copytree(tiny_model_dir, repo / "outputs" / "tiny-model")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    script = "set -euo pipefail\n" + blocks[0] + train_block
    r = subprocess.run(["bash", "-c", script], cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"the page's commands failed:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    summary = json.loads((repo / "outputs/eval-agent/summary.json").read_text())
    (entry,) = summary["evals"]
    assert entry["questions"] == 20 and entry["samples"] == 2
    # as the page says: a random model writes no valid action, every trajectory ends at the turn budget
    assert entry["status"] == {"turn_budget": 40} and sum(entry["format_errors"].values()) == 120
    # the partition step: 5 questions, 2 trajectories each, none answered by the random model
    part = json.loads((repo / "outputs/partition-agent/partition.json").read_text())
    assert part["counts"]["questions"] == 5 and part["counts"]["unanswerable"] == 5
    assert sum(part["counts"]["status"].values()) == 10
    assert (repo / "outputs/partition-agent/answerable-with-search/manifest.json").is_file()
    run = repo / "outputs/train/search-r1-cpu-tiny-musique"
    steps = (run / "curriculum_steps.jsonl").read_text().splitlines()
    assert len(steps) == 3, "3 GRPO steps"
    # trained against the server the block started (and stopped): its URL in the run's config
    import yaml

    config = yaml.safe_load((run / "train_config.yaml").read_text())
    assert config["agent"]["retriever"] == "http://127.0.0.1:8765/retrieve"
    assert "serving" in (repo / "outputs/serve.log").read_text()
