"""Every page's CPU commands, run as written (issue 37 item 14): the ``bash`` blocks marked ``<!-- cpu -->`` of
search-agents.md, veritas.md, globalrag.md and react-crag.md are extracted from the Markdown and run in order with
bash (``set -euo pipefail``), each page in a scratch checkout of its own (``.venv`` and ``tests/`` there,
``../shared`` beside it, nothing else: each walkthrough makes what it uses), then what the page says they leave
behind is checked. Whatever a block holds (another engineer may change how the tiny model is made) is what runs.

``.venv`` is a folder whose ``python`` and ``curriculum`` run this interpreter on this checkout's ``src`` (the
tree under test, even where a command sets ``PYTHONPATH`` itself)."""

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

#: The pages and how many CPU blocks each holds (a page that loses or gains one fails here first).
PAGES = {"search-agents.md": 3, "veritas.md": 1, "globalrag.md": 1, "react-crag.md": 1}


def cpu_blocks(page: str) -> list[str]:
    """The ``bash`` blocks of ``docs/PAGE`` marked ``<!-- cpu -->`` (the line before the fence), in page order."""
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    return re.findall(r"<!-- cpu -->\n```bash\n(.*?)```", text, re.S)


def test_every_page_marks_its_cpu_blocks_and_starts_from_nothing():
    for page, count in PAGES.items():
        blocks = cpu_blocks(page)
        assert len(blocks) == count, (page, len(blocks))
        first = blocks[0]
        assert first.startswith("source .venv/bin/activate"), page  # from a fresh shell, in the checkout
        made = "\n".join(blocks)
        if "outputs/tiny-model" in made:  # the page makes its model before using it
            assert made.index("outputs/tiny-model") == made.index("outputs/tiny-model')"), page
    assert sum(PAGES.values()) == 6


def _venv(repo: Path) -> None:
    """``repo/.venv``: ``activate`` puts its ``bin`` first on PATH; ``python`` and ``curriculum`` run this
    interpreter with this checkout's ``src`` ahead of any PYTHONPATH a command sets."""
    bin_ = repo / ".venv" / "bin"
    bin_.mkdir(parents=True)
    (bin_ / "activate").write_text(f'export PATH="{bin_}:$PATH"\n')
    src = ROOT / "src"
    for name, tail in (("python", '"$@"'), ("curriculum", '-m rag_curriculum.cli "$@"')):
        (bin_ / name).write_text(f'#!/bin/sh\nPYTHONPATH="{src}${{PYTHONPATH:+:$PYTHONPATH}}" exec {sys.executable} '
                                 f"{tail}\n")
        (bin_ / name).chmod(0o755)


def _run_page(page: str, tmp_path: Path, shared_data: Path) -> tuple[Path, str]:
    repo = tmp_path / "checkout"
    repo.mkdir()
    _venv(repo)
    (repo / "tests").symlink_to(ROOT / "tests")
    (tmp_path / "shared").symlink_to(shared_data.parent)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", TRL_EXPERIMENTAL_SILENCE="1")
    script = "set -euo pipefail\n" + "\n".join(cpu_blocks(page))
    r = subprocess.run(["bash", "-c", script], cwd=repo, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"{page}'s commands failed:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    return repo, r.stdout + r.stderr


def _check_search_agents(repo: Path, output: str) -> None:
    import yaml

    summary = json.loads((repo / "outputs/eval-agent/summary.json").read_text())
    (entry,) = summary["evals"]
    assert entry["questions"] == 20 and entry["samples"] == 2 and entry["set"] == "musique-agent-rows"
    assert sum(entry["status"].values()) == 40
    part = json.loads((repo / "outputs/partition-agent/partition.json").read_text())
    assert part["counts"]["questions"] == 5 and sum(part["counts"]["status"].values()) == 10
    assert (repo / "outputs/partition-agent/answerable-with-search/manifest.json").is_file()
    run = repo / "outputs/train/search-learn-musique"
    assert len((run / "curriculum_steps.jsonl").read_text().splitlines()) == 48, "48 GRPO steps"
    config = yaml.safe_load((run / "train_config.yaml").read_text())  # trained against the server the block ran
    assert config["agent"]["retriever"] == "http://127.0.0.1:8765/retrieve"
    assert config["model"]["name_or_path"] == "outputs/tiny-search-warm"
    assert "serving" in (repo / "outputs/serve.log").read_text()
    # the warm-started agent learnt (the page quotes the measured lines; tests/train/test_search_learning.py holds
    # the margin)
    got = re.search(r"search/exact_match:\s+([\d.]+)\s+over\s+the\s+first\s+12\s+steps,\s+([\d.]+)\s+over", output)
    assert got and float(got.group(2)) > float(got.group(1)), output[-3000:]
    # the tool route searched (the environment's first search), as its step line shows
    assert re.search(r"step 1/1 .* searches 1  gold_found [\d.]+  tool_calls 0", output), output[-3000:]
    assert (repo / "outputs/train/search-tools-cpu-tiny/train_config.yaml").is_file()


def _check_veritas(repo: Path, output: str) -> None:
    run = repo / "outputs/train/veritas-cpu-tiny-musique"
    assert len((run / "curriculum_steps.jsonl").read_text().splitlines()) == 1
    assert re.search(r"step 1/1 .*loss", output)
    table = (repo / "outputs/eval-veritas-cpu/veritas.md").read_text()
    assert "Info-Think" in table and "Think-Ans" in table
    summary = json.loads((repo / "outputs/eval-veritas-cpu/summary.json").read_text())
    assert summary["evals"][0]["veritas"]["trajectories"] == 6


def _check_globalrag(repo: Path, output: str) -> None:
    run = repo / "outputs/train/globalrag-cpu-tiny-musique"
    assert len((run / "curriculum_steps.jsonl").read_text().splitlines()) == 1
    assert (repo / "plans/musique-train.jsonl").stat().st_size > 0


def _check_react(repo: Path, output: str) -> None:
    summary = json.loads((repo / "outputs/eval-react-cpu/summary.json").read_text())
    (entry,) = summary["evals"]
    assert entry["set"] == "musique-train-distractor" and entry["samples"] == 5
    react = entry["react"]  # the page's numbers (x 100, as table.md prints them): F1 from 0.6 (mean) to 1.0
    assert entry["overall"]["f1"] == pytest.approx(0.6, abs=0.05) and react["best_of"]["f1"] == 1.0
    assert "| scripted · ReAct (mean of 5) | 0.0 | 0.6 |" in (repo / "outputs/eval-react-cpu/table.md").read_text()


CHECKS = {"search-agents.md": _check_search_agents, "veritas.md": _check_veritas, "globalrag.md": _check_globalrag,
          "react-crag.md": _check_react}


@pytest.mark.parametrize("page", list(PAGES))
def test_a_pages_cpu_commands_run_as_written(page, tmp_path, shared_data):
    pytest.importorskip("bm25s")
    if page != "react-crag.md":
        pytest.importorskip("trl")
    CHECKS[page](*_run_page(page, tmp_path, shared_data))
