"""Every ``next:`` line a command prints is a command that runs: run as printed (with ``--dry-run``, the real run
being long), it is accepted; and the warm start of the README's walkthrough prints the walkthrough's next command."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from conftest import HOTPOT_TRAIN, ROOT
from support.cli_runs import run

from rag_curriculum._cli.warm import next_train_command


def _readme_command(name: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(rf"^curriculum {name} (.*?)(?<!\\)$", text.replace("\\\n    ", ""), re.M)
    assert found, f"the README lost its curriculum {name} line"
    return found.group(0)


def test_the_walkthroughs_warm_start_names_the_walkthroughs_next_command(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    warm = shlex.split(_readme_command("warm-start"))
    build = shlex.split(_readme_command("build"))
    shards = Path(warm[2])  # the walkthrough's build, as its manifest says it: 4 HotpotQA rows
    assert build[build.index("--out") + 1] == warm[2] and build[build.index("--n") + 1] == "4"
    shards.mkdir(parents=True)
    (shards / "manifest.json").write_text(json.dumps({"num_rows": 4, "sources": [{"dataset": "hotpotqa"}]}))

    def option(name):
        return warm[warm.index(name) + 1]

    hint = next_train_command(Path(warm[2]), Path(option("--out")), model=option("--model"), rows=int(option("--rows")))
    assert hint == _readme_command("train")


def _accepted(hint_line: str) -> None:
    assert hint_line.startswith("next: curriculum train "), hint_line
    r = run(*shlex.split(hint_line.removeprefix("next: curriculum "))[0:], "--dry-run")
    assert r.exit_code == 0, r.output
    assert "ok: binds to trl.GRPOConfig" in r.output, r.output


@pytest.mark.slow
@pytest.mark.parametrize("given", [False, True], ids=["tiny", "given-model"])
def test_the_warm_starts_next_line_runs_as_printed(tmp_path, monkeypatch, tiny_model_dir, given):
    pytest.importorskip("trl", reason="the `train` extra is needed for the warm start")
    monkeypatch.chdir(tmp_path)
    assert run("build", "--dataset", "hotpotqa", "--input", HOTPOT_TRAIN, "--schedule", "min-max", "--K", 3, "--n", 4,
               "--out", "outputs/rows").exit_code == 0
    model = ["--model", tiny_model_dir] if given else ["--hidden-size", 16, "--layers", 1]
    r = run("warm-start", "outputs/rows", "--out", "outputs/warm", "--rows", 2, "--copies", 1, "--epochs", 1, *model)
    assert r.exit_code == 0, r.output
    hint = [line for line in r.output.splitlines() if line.startswith("next: ")]
    assert len(hint) == 1, r.output
    assert f"recipe={'cpu-gemma' if given else 'cpu-learn'} " in hint[0]
    assert "model.name_or_path=outputs/warm data.shards=outputs/rows" in hint[0]
    _accepted(hint[0])
