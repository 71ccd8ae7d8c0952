"""The command-line conventions users expect: `curriculum --version`, `-q/--quiet` beside
`-v/--verbose`, shell completion, and exit statuses: 2 for a usage error (as click's own), 1 for a failure while
the command ran."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import MUSIQUE_TRAIN, ROOT
from typer.testing import CliRunner

from rag_curriculum import __version__
from rag_curriculum.cli import app

runner = CliRunner()


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def curriculum(*args, cwd=None, env=None):
    """The installed `curriculum` command, in a process of its own (its real stderr and logging)."""
    exe = Path(sys.executable).parent / "curriculum"
    argv = [str(exe)] if exe.exists() else [sys.executable, "-m", "rag_curriculum.cli"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200", **(env or {})}
    return subprocess.run([*argv, *map(str, args)], capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


def test_version():
    r = run("--version")
    assert r.exit_code == 0 and r.output == f"rag-curriculum {__version__}\n"


@pytest.mark.slow
def test_quiet_logs_warnings_and_errors_only(shared_data, tmp_path):
    out = tmp_path / "idx"
    index = ["index", "-d", "musique", "-i", MUSIQUE_TRAIN, "-o", out, "--depth", 5, "--no-progress"]
    loud = curriculum(*index)
    assert loud.returncode == 0, loud.stderr
    assert "INFO rag_retriever" in loud.stderr  # the index is the retriever's (its own distribution) log lines
    (out / "notes.txt").write_text("mine")
    quiet = curriculum("-q", *index, "--overwrite")
    assert quiet.returncode == 0, quiet.stderr
    assert "INFO" not in quiet.stderr
    assert "WARNING rag_" in quiet.stderr and "notes.txt" in quiet.stderr  # warnings still shown
    assert "indexed" in quiet.stdout  # the command's result is still printed
    r = run("-v", "-q", "recipes")
    assert r.exit_code == 2 and "contradict" in r.output


@pytest.mark.slow
def test_shell_completion_is_offered():
    r = run("--help")
    assert r.exit_code == 0 and "--install-completion" in r.output and "--show-completion" in r.output
    # typer reads the shell from the process tree (shellingham); a test run without a shell above it (CI under
    # nohup or a detached session) names it instead, as typer's own tests do
    done = curriculum("--show-completion", "bash", env={"_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"})
    assert done.returncode == 0, done.stderr
    assert "complete" in done.stdout and "_CURRICULUM_COMPLETE" in done.stdout.upper()


@pytest.mark.parametrize("args", [
    ["build", "-d", "musique", "-i", MUSIQUE_TRAIN, "--K", "abc"],  # click's own: does not parse
    ["build", "-d", "musique", "-i", MUSIQUE_TRAIN, "--n", "-5"],  # out of range
    ["build", "-d", "musique", "-i", MUSIQUE_TRAIN, "--setting", "distracter"],  # not one of the choices
    ["build", "-d", "nosuch", "-i", MUSIQUE_TRAIN],  # an unknown name
    ["build", "recipe=musique-linar"],  # an unknown recipe
    ["build", "recipe=musique-max", f"input={MUSIQUE_TRAIN}", "sead=1"],  # an unknown option
    ["build", "seed=1", "-d", "musique", "-i", MUSIQUE_TRAIN],  # overrides without a recipe
    ["index", "-i", MUSIQUE_TRAIN],  # a missing required option
    ["inspect", MUSIQUE_TRAIN, "--on-error", "ignore"],
    ["partition", "a", "b", "--backend", "scripted"],  # an unexpected argument
    ["partition", "x", "--backend", "scripted", "--backend-arg", "novalue"],
    ["eval", "--data", "x"],  # no model
    ["train", "recipe=rag-rl-min-max", "rewards.0.name=rag-rl-anwser", "--print-config"],
    ["nosuchcommand"],
])
def test_usage_errors_exit_2(shared_data, tmp_path, args):
    r = run(*args, *(["-o", tmp_path / "o"] if args[0] in ("build", "index") else []))
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("args", [
    ["build", "-d", "musique", "-i", "/nonexistent/musique.jsonl", "--n", 5],  # a missing file
    ["build", "-d", "hotpotqa", "-i", MUSIQUE_TRAIN, "--n", 5],  # the wrong dataset's file
    ["validate", "/nonexistent"],
])
def test_failures_while_running_exit_1(shared_data, tmp_path, args):
    r = run(*args, *(["-o", tmp_path / "o"] if args[0] == "build" else []))
    assert r.exit_code == 1, r.output
    assert [line for line in r.output.splitlines() if line.startswith("error:")]


def test_the_docs_name_the_exit_codes():
    text = (ROOT / "docs" / "configuration.md").read_text()
    assert "## Exit codes" in text and "| 2 | a usage error" in text and "| 1 | it failed while it ran" in text
    assert "configuration.md#exit-codes" in (ROOT / "docs" / "getting-started.md").read_text()


def test_lines_are_not_wrapped_at_80_columns_when_the_output_is_not_a_terminal(capsys, monkeypatch):
    """rich takes a file or a pipe to be 80 columns wide and wrapped the commands' lines there: a training run's
    closing lines, logged to a file, came in two. Off a terminal a line is one line (tables keep their layout)."""
    from rag_curriculum._cli.common import console, out
    from rag_curriculum._cli.train import _print_change

    monkeypatch.delenv("COLUMNS", raising=False)
    history = [{"reward": i / 24, "search/exact_match": 0.25 + i / 48, "step": i} for i in range(24)]
    _print_change(history)
    console.print("[yellow]note:[/] " + "word " * 30)
    got = capsys.readouterr()
    lines = got.out.splitlines()
    em = [x for x in lines if x.startswith("search/exact_match: ")]
    assert len(em) == 1 and em[0].endswith(")") and len(em[0]) > 80 and len(lines) == 2, got.out
    assert got.err.count("\n") == 1 and got.err.startswith("note: word"), got.err
    assert out.soft_wrap and console.soft_wrap  # off a terminal
