"""The check of the set of outputs a shard directory belongs to is handed down to ``validate_shards`` (passed by a
reader, or registered by the command that writes such sets under its manifest section): ``shards`` never imports
the commands above it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from rag_curriculum import shards
from rag_curriculum.shards import ROW_SCHEMA, ShardError, register_set_check, validate_shards, write_shards


def bucket(path: Path, **sections) -> Path:
    write_shards(ROW_SCHEMA.empty_table(), path, manifest=dict(sections))
    return path


def unfinished(d: Path, manifest) -> str | None:
    done = (d.parent / "done").read_text() if (d.parent / "done").is_file() else None
    return None if done == manifest["my-set"]["set"] else f"{d} belongs to the unfinished set {manifest['my-set']['set']}"


def test_a_passed_check_refuses_a_directory_of_an_unfinished_set_and_reads_it_once_complete(tmp_path):
    d = bucket(tmp_path / "out" / "a", **{"my-set": {"set": "s1"}})
    validate_shards(d)  # nothing registered for "my-set": read on its own
    with pytest.raises(ShardError, match=r"belongs to the unfinished set s1") as e:
        validate_shards(d, set_check=unfinished)
    assert str(e.value).startswith(f"{d}: ")
    (tmp_path / "out" / "done").write_text("s1")
    assert validate_shards(d, set_check=unfinished)["num_rows"] == 0


def test_a_registered_check_runs_for_the_manifests_holding_its_section(tmp_path, monkeypatch):
    monkeypatch.setattr(shards, "_SET_CHECKS", dict(shards._SET_CHECKS))
    register_set_check("my-set", unfinished)
    member = bucket(tmp_path / "out" / "a", **{"my-set": {"set": "s1"}})
    other = bucket(tmp_path / "out" / "b", other={"set": "s1"})
    with pytest.raises(ShardError, match="unfinished set s1"):
        validate_shards(member)
    with pytest.raises(ShardError, match="unfinished set s1"):
        shards.read_table(member)  # every reader that verifies asks it
    assert validate_shards(other)["num_rows"] == 0  # no "my-set" section: not its business
    assert validate_shards(member, set_check=lambda d, m: None)["num_rows"] == 0  # a reader's own check wins
    (tmp_path / "out" / "done").write_text("s1")
    assert validate_shards(member)["num_rows"] == 0


def test_shards_imports_no_command_module():
    tree = ast.parse(Path(shards.__file__).read_text(encoding="utf-8"))
    imported = {(n.module or "").removeprefix("rag_curriculum.") for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name.removeprefix("rag_curriculum.") for n in ast.walk(tree) if isinstance(n, ast.Import)
                 for a in n.names}
    assert not {m for m in imported if m.split(".")[0] in ("partition", "evaluation", "train", "curricula")}


@pytest.mark.slow
def test_a_bucket_of_an_unfinished_partition_is_refused_by_a_process_that_never_imports_partition(tmp_path):
    """The partition's own check sits below shards and is its default: a library reader (or a verl worker) that
    imports only ``shards`` refuses a bucket of an interrupted partition too."""
    import subprocess
    import sys

    out = tmp_path / "part"
    b = bucket(out / "answerable", partition={"set": "s1"})
    (out / "work").mkdir()  # the partition's OUT, its partition.json not yet written
    code = ("import sys; from rag_curriculum import shards\n"
            "try:\n    shards.validate_shards(sys.argv[1])\nexcept shards.ShardError as e:\n    print('REFUSED', e)\n"
            "print(sorted(m for m in sys.modules if m.startswith('rag_curriculum.partition')))")
    run = subprocess.run([sys.executable, "-c", code, str(b)], capture_output=True, text=True, check=True)
    assert "REFUSED" in run.stdout and "no partition.json" in run.stdout, run.stdout + run.stderr
    assert run.stdout.strip().endswith("[]")  # partition never imported
    (out / "partition.json").write_text('{"set": "s1"}')
    run = subprocess.run([sys.executable, "-c", code, str(b)], capture_output=True, text=True, check=True)
    assert "REFUSED" not in run.stdout
