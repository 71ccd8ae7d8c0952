"""The adaptive page's first example runs as written on the shared sample (it asked --n 5000 of
100 rows), and the README's own output folders (outputs/, indexes/) are ignored by git."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess

import pytest
from conftest import ROOT
from typer.testing import CliRunner

from rag_curriculum.cli import app
from rag_curriculum.shards import read_manifest


def first_bash_block(page: str) -> list[list[str]]:
    """The commands of the first ```bash block of ``docs/PAGE`` (comments dropped, continuations joined)."""
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert block, f"docs/{page} has no bash block"
    lines = [line for line in block.group(1).replace("\\\n", " ").splitlines() if line.strip()]
    return [shlex.split(line) for line in lines if not line.lstrip().startswith("#")]


def test_the_adaptive_pages_first_example_runs_on_the_shared_sample(shared_data, tmp_path, monkeypatch):
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (tmp_path / "shared").symlink_to(shared_data.parent)  # ../shared beside the checkout, as in the README
    monkeypatch.chdir(checkout)
    commands = first_bash_block("adaptive.md")
    assert len(commands) == 1 and commands[0][:2] == ["curriculum", "build"], commands
    r = CliRunner().invoke(app, [*commands[0][1:], "--no-progress"])
    assert r.exit_code == 0, r.output
    m = read_manifest(checkout / "outputs" / "musique-adaptive")
    assert m["num_rows"] == 100 and m["config"]["schedule"] == "adaptive"


@pytest.mark.parametrize("folder", ["outputs", "indexes"])
def test_the_readmes_output_folders_are_ignored_by_git(folder):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    assert f"-o {folder}/" in (ROOT / "README.md").read_text() or folder == "outputs"
    r = subprocess.run(["git", "check-ignore", "-q", f"{folder}/x/manifest.json"], cwd=ROOT)
    assert r.returncode == 0, f"{folder}/ is not ignored by git"
