"""``curriculum verl`` (``python -m rag_curriculum.verl``) under the main command's rules: an output never inside
the command's own input, secrets masked in every line it says, a bad path or value one ``error:`` line with exit
status 2 (no traceback), and an option it does not take refused rather than passed over."""

from __future__ import annotations

import pytest

from rag_curriculum.shards import validate_shards
from rag_curriculum.verl.data import main


def _err(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert len([line for line in err.splitlines() if line.startswith("error:")]) == 1, err
    return err


def test_agent_data_never_writes_into_its_own_input(min_max_shards, capsys):
    shard = min_max_shards / "data" / "part-00000.parquet"
    before = shard.read_bytes()
    assert main(["agent-data", str(min_max_shards), str(shard), "--overwrite"]) == 2
    err = _err(capsys)
    assert f"{shard} is inside the input shard directory {min_max_shards}" in err, err
    assert shard.read_bytes() == before
    validate_shards(min_max_shards)


@pytest.mark.parametrize("args", [
    ["steps", "{d}", "data.train_batch_size=http://u:PW-SECRET@h"],
    ["lengths", "{d}", "actor_rollout_ref.model.path=http://h/m?token=PW-SECRET"],
    ["check-lengths", "{d}", "--model", "http://u:PW-SECRET@h/m", "--prompt-length", "10", "--response-length", "5"],
])
def test_secrets_are_masked_in_every_line(min_max_shards, capsys, args):
    assert main([a.format(d=min_max_shards) for a in args]) == 2
    err = _err(capsys)
    assert "PW-SECRET" not in err and "***" in err, err


@pytest.mark.parametrize("args, said", [
    (["train-files", "{d}/missing"], "missing: no such shard directory"),
    (["steps", "{d}/missing", "--train-batch-size", "4"], "missing: no such shard directory"),
    (["agent-data", "{d}", "{d}/../no/such/folder/a.parquet"], "folder/a.parquet: its folder"),
    (["agent-data", "{d}/missing", "{d}/../a.parquet"], "missing: no such shard directory"),
    (["check-lengths", "{d}", "data.max_prompt_length=nan", "--prompt-length", "10", "--response-length", "5"],
     "data.max_prompt_length='nan' is not a number of tokens"),
    (["check-lengths", "{d}", "--prompt-length", "1e9x", "--response-length", "5"],
     "--prompt-length='1e9x' is not a number of tokens or auto"),
    (["steps", "{d}", "--train-batch-size", "4", "--topk", "3"], "--topk: not an option of this command"),
    (["lengths", "{d}", "--prompt-length", "3"], "--prompt-length: not an option of this command"),
])
def test_a_bad_path_value_or_option_is_one_line_with_exit_2(min_max_shards, capsys, args, said):
    assert main([a.format(d=min_max_shards) for a in args]) == 2
    err = _err(capsys)
    assert said in err and "invalid literal" not in err, err
