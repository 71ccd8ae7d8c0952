"""The README's CPU walkthrough, run as written: the block between the ``walkthrough`` markers is extracted and
executed with bash (``set -euo pipefail``) in a scratch checkout (``tests/`` and ``.venv`` linked, ``../shared``
beside it), then every output its table promises is checked. A README that drifts from the commands fails here."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

pytestmark = pytest.mark.slow

README = ROOT / "README.md"


def walkthrough() -> str:
    text = README.read_text(encoding="utf-8")
    section = re.search(r"--8<-- \[start:walkthrough\](.*?)--8<-- \[end:walkthrough\]", text, re.S)
    assert section, "README.md lost its walkthrough markers"
    blocks = re.findall(r"```bash\n(.*?)```", section.group(1), re.S)
    assert len(blocks) == 1, "the walkthrough holds one bash block"
    return blocks[0]


def test_the_cpu_walkthrough_runs_as_written(tmp_path, shared_data):
    pytest.importorskip("trl")
    repo = tmp_path / "checkout"
    repo.mkdir()
    (repo / "tests").symlink_to(ROOT / "tests")
    (repo / ".venv").symlink_to(Path(sys.prefix))
    (tmp_path / "shared").symlink_to(shared_data.parent)
    script = "set -euo pipefail\n" + walkthrough()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    r = subprocess.run(["bash", "-c", script], cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"the README walkthrough failed:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    out = repo / "outputs"
    for path in ["musique-cpu-tiny/data/part-00000.parquet", "musique-cpu-tiny/manifest.json",
                 "musique-cpu-tiny/README.md", "musique-cpu-tiny/level_by_index.png",
                 "musique-partition/stats.parquet", "musique-partition/partition.json",
                 "train/cpu-tiny-musique/checkpoint-3", "train/cpu-tiny-musique/curriculum_steps.jsonl",
                 "train/cpu-tiny-musique/train_config.yaml", "train/cpu-tiny-musique/train_plan.json",
                 "eval-cpu-tiny/table.md", "eval-cpu-tiny/summary.json"]:
        assert (out / path).exists(), f"the README promises outputs/{path}"
    for bucket in ("answerable", "unanswerable", "learnable"):
        assert (out / "musique-partition" / bucket / "manifest.json").is_file()
    manifest = json.loads((out / "musique-cpu-tiny/manifest.json").read_text())
    assert manifest["num_rows"] == 6
    steps = (out / "train/cpu-tiny-musique/curriculum_steps.jsonl").read_text().splitlines()
    assert len(steps) == 3, "3 GRPO steps"
    table = (out / "eval-cpu-tiny/table.md").read_text()
    assert "base" in table and "trained" in table
