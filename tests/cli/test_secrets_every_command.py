"""Every command of both distributions, given a URL that holds a password and a token where it takes a path or a
URL, prints neither: ``curriculum``'s and ``rag-retriever``'s, their errors, hints, results and log lines alike,
masked by the one rule (:mod:`rag_plumbing._secrets`, every line either command prints passes it); and a value
echoed in an error (``--reward URL``, split at its first ``:``) is masked whole."""

from __future__ import annotations

import json
import logging

import pytest
from click.testing import CliRunner
from conftest import MUSIQUE_TRAIN
from support.cli_runs import run

PASSWORD, TOKEN = "PW-9x7Secret", "TOK-5q3Secret"
URL = f"http://u:{PASSWORD}@h.example/x?token={TOKEN}"
#: Where a command takes a folder before its ``KEY=VALUE`` overrides, a value holding ``=`` is an override: there,
#: the URL with its password alone.
NO_QUERY = f"http://u:{PASSWORD}@h.example/x"


def _leaks(text: str) -> bool:
    return PASSWORD in text or TOKEN in text


#: Each leaf command of ``curriculum``, with the URL where it takes a path or a URL (``{o}``: a folder of the test's).
CURRICULUM = {
    "build": ["build", "--dataset", "musique", "--input", URL, "--out", "{o}"],
    "index": ["index", "--corpus", URL, "--out", "{o}"],
    "serve": ["serve", "--index", URL],
    "inspect": ["inspect", URL],
    "validate": ["validate", URL],
    "push": ["push", URL, "me/repo"],
    "partition": ["partition", "--dataset", "musique", "--input", URL, "--backend", "scripted", "--model", "m",
                  "--out", "{o}"],
    "partition-merge": ["partition-merge", URL, URL, "--out", "{o}"],
    "profile": ["profile", URL, "--backend", "scripted", "--out", "{o}"],
    "profile --reward": ["profile", "--dataset", "musique", "--input", str(MUSIQUE_TRAIN), "--reward", URL,
                         "--backend", "scripted", "--out", "{o}"],
    "train": ["train", f"data.shards={URL}", "--dry-run"],
    "warm-start": ["warm-start", URL, "--out", "{o}"],
    "recipes": ["recipes", URL],
    "eval run": ["eval", "run", "--data", URL, "--model", "m", "--backend", "scripted", "--out", "{o}"],
    "eval agreement": ["eval", "agreement", URL, URL],
    "eval compare": ["eval", "compare", URL],
    "globalrag plans": ["globalrag", "plans", "--dataset", "musique", "--input", URL, "--out", "{o}"],
    "globalrag table": ["globalrag", "table", URL],
    "verl train-files": ["verl", "train-files", URL],
    "verl lengths": ["verl", "lengths", NO_QUERY],
    "verl check-lengths": ["verl", "check-lengths", NO_QUERY, "--prompt-length", "8", "--response-length", "8"],
    "verl steps": ["verl", "steps", NO_QUERY, "--train-batch-size", "8"],
    "verl agent-data": ["verl", "agent-data", URL, "{o}"],
}


def _leaf_commands() -> set[str]:
    import typer

    from rag_curriculum.cli import app

    out = set()

    def walk(cmd, prefix):
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                walk(sub, [*prefix, name])
        else:
            out.add(" ".join(prefix))

    walk(typer.main.get_command(app), [])
    return out


def test_the_list_covers_every_command_that_takes_a_path_or_a_url():
    takes_none = {"verl reward-path", "verl reward-manager-path", "verl layout"}
    assert _leaf_commands() - takes_none == {k.removesuffix(" --reward") for k in CURRICULUM}


@pytest.mark.parametrize("name", list(CURRICULUM))
def test_no_curriculum_command_prints_the_password_or_the_token(name, tmp_path, caplog):
    args = [a.replace("{o}", str(tmp_path / "o")) for a in CURRICULUM[name]]
    with caplog.at_level(logging.INFO):
        r = run(*args)
    assert r.exit_code != 0, r.output  # refused: nothing is at that URL
    shown = r.output + caplog.text
    assert not _leaks(shown), shown
    assert "***" in r.output, r.output  # the URL was echoed, masked


def test_the_reward_flag_masks_a_url_split_at_its_first_colon(tmp_path):
    r = run(*[a.replace("{o}", str(tmp_path / "o")) for a in CURRICULUM["profile --reward"]])
    errors = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert r.exit_code == 2 and len(errors) == 1, r.output
    assert not _leaks(r.output), r.output
    assert errors == ["error: --reward 'http://***@h.example/x?token=***': the weight '//***@h.example/x?token=***' "
                      "of http is not a number"], errors


#: Each command of ``rag-retriever``, the same way.
RETRIEVER = {
    "index": ["index", "--corpus", URL, "--out", "{o}", "--no-progress"],
    "index --out": ["index", "--corpus", "{corpus}", "--out", URL, "--no-progress"],
    "validate": ["validate", URL],
    "serve": ["serve", "--index", URL],
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.slow] if n == "index --out" else [])
                                  for n in RETRIEVER])  # (that one builds an index: seconds)
def test_no_retriever_command_prints_the_password_or_the_token(name, tmp_path, monkeypatch):
    from rag_retriever.cli import main

    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": str(i), "contents": f'"T{i}"\nword{i} text'}) + "\n" for i in range(3)))
    monkeypatch.chdir(tmp_path)  # (--out URL: a folder made under here)
    args = [a.replace("{o}", str(tmp_path / "o")).replace("{corpus}", str(corpus)) for a in RETRIEVER[name]]
    r = CliRunner().invoke(main, args)
    assert not _leaks(r.output), r.output
    assert "***" in r.output, r.output
    if name == "index --out":  # built: its result line names where, masked
        assert r.exit_code == 0 and "indexed 3 passages into http://***@h.example/x?token=***" in r.output, r.output
    else:
        assert r.exit_code != 0 and "error: http:/***@h.example/x?token=***: " in r.output, r.output
