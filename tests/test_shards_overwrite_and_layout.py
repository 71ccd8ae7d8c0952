"""What a build writes and replaces: ``--overwrite`` removes only the toolkit's files, dead
builds leave nothing behind, shard order is verified, no absolute local paths are published, and a shard
directory reads as a Parquet dataset (the Hugging Face ``data/`` layout) with curriculum order kept."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import MUSIQUE_DEV, MUSIQUE_TRAIN, ROOT
from typer.testing import CliRunner

from rag_curriculum.cli import app
from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
from rag_curriculum.shards import (
    ShardError,
    load_hf_dataset,
    read_manifest,
    read_rows,
    read_table,
    shard_files,
    validate_shards,
    write_shards,
)

runner = CliRunner()


def build(out: Path, n: int | None = 30, *, input: Path = MUSIQUE_TRAIN, **kw) -> dict:
    cfg = BuildConfig(sources=[SourceSpec("musique", str(input), n)], out=str(out), **kw)
    return build_curriculum(cfg, command="test").manifest


def cli(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


# -- 1. --overwrite removes only what the toolkit wrote ---------------------------------------------------------
def test_overwrite_refuses_a_folder_whose_manifest_is_not_the_toolkits(shared_data, tmp_path):
    app_dir = tmp_path / "webapp"
    app_dir.mkdir()
    files = {"manifest.json": '{"name": "My App", "start_url": "/index.html", "icons": []}',
             "index.html": "<html></html>", "app.js": "console.log(1)"}
    for name, text in files.items():
        (app_dir / name).write_text(text)
    with pytest.raises(ShardError, match=r"webapp holds a manifest.json that rag-curriculum did not write"):
        build(app_dir, overwrite=True)
    r = cli("build", "-d", "musique", "-i", MUSIQUE_TRAIN, "--n", 5, "-o", app_dir, "--overwrite", "--no-progress")
    assert r.exit_code == 1
    error = [line for line in r.output.splitlines() if "error" in line]
    assert len(error) == 1 and "did not write" in error[0] and "choose another --out" in error[0], r.output
    assert {p.name: p.read_text() for p in app_dir.iterdir()} == files, "nothing of the web app was touched"
    # the same rule for every writer of shard directories (partition writes its buckets with write_shards)
    build(tmp_path / "real", 5)
    rows = read_table(tmp_path / "real")
    with pytest.raises(ShardError, match="did not write"):
        write_shards(rows, app_dir, manifest={"kind": "curriculum"}, overwrite=True)
    (app_dir / "manifest.json").write_text("{not json")
    with pytest.raises(ShardError, match="cannot be read"):
        build(app_dir, overwrite=True)


@pytest.mark.slow
def test_a_crafted_manifest_makes_build_overwrite_delete_neither_a_users_file_nor_a_link(shared_data, tmp_path):
    """A build's manifest.json with ``precious.txt`` (with its true SHA-256) and a symbolic link ``linkdir``
    appended to its ``files``: `curriculum build --overwrite` removes neither (neither is a name a build writes),
    touches nothing through the link, and its warning names both."""
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    build(out, 5)
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("theirs")
    (out / "precious.txt").write_text("precious")
    (out / "linkdir").symlink_to(elsewhere, target_is_directory=True)
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["files"] += ["precious.txt", "linkdir"]
    manifest["file_sha256"].update({"precious.txt": hashlib.sha256(b"precious").hexdigest(), "linkdir": "0" * 64})
    (out / "manifest.json").write_text(json.dumps(manifest))
    done = subprocess.run([sys.executable, "-m", "rag_curriculum.cli", "build", "-d", "musique", "-i",
                           str(MUSIQUE_TRAIN), "--n", "6", "-o", str(out), "--overwrite", "--no-progress"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src"),
                                                               "COLUMNS": "300"}, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (out / "precious.txt").read_text() == "precious" and (out / "linkdir").is_symlink()
    assert (elsewhere / "keep.txt").read_text() == "theirs"
    assert read_manifest(out)["num_rows"] == 6 and "precious.txt" not in read_manifest(out)["files"]
    said = " ".join((done.stdout + done.stderr).split())
    assert "kept 2 the toolkit did not write: linkdir, precious.txt" in said, said


def test_a_file_under_a_layout_name_listed_with_its_digest_is_the_builds_to_replace(shared_data, tmp_path):
    """The rule's documented limit (docs/outputs.md): a shard directory's layout names (``data/part-NNNNN.parquet``,
    ``manifest.json``, the ``.md`` and ``.png`` files at its top) belong to the build. A user's file placed at
    ``data/part-00001.parquet`` in an output whose manifest lists it with its true SHA-256 cannot be told from the
    build's own shard: ``--overwrite`` removes it. The same file under a name outside the layout is kept."""
    out = tmp_path / "out"
    build(out, 5)
    assert sorted(p.name for p in (out / "data").iterdir()) == ["part-00000.parquet"]
    (out / "data" / "part-00001.parquet").write_bytes(b"mine")
    (out / "notes.txt").write_bytes(b"mine")
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["files"] += ["data/part-00001.parquet", "notes.txt"]
    manifest["file_sha256"].update(dict.fromkeys(["data/part-00001.parquet", "notes.txt"],
                                                 hashlib.sha256(b"mine").hexdigest()))
    (out / "manifest.json").write_text(json.dumps(manifest))
    build(out, 6, overwrite=True)
    assert not (out / "data" / "part-00001.parquet").exists()  # a layout name: the build's
    assert (out / "notes.txt").read_bytes() == b"mine"  # not a layout name: kept, whatever the record says
    assert read_manifest(out)["num_rows"] == 6


def test_overwrite_keeps_the_files_a_user_added_and_says_so(shared_data, tmp_path, caplog):
    out = tmp_path / "out"
    build(out, 30, rows_per_shard=10)
    assert len(shard_files(out)) == 3
    (out / "notes.txt").write_text("my notes")
    (out / "experiments").mkdir()
    (out / "experiments" / "run1.json").write_text("{}")
    (out / "data" / "mine.csv").write_text("a,b")  # even beside the shards
    with caplog.at_level(logging.WARNING, logger="rag_curriculum"):
        m = build(out, 12, rows_per_shard=10, overwrite=True)
    assert (out / "notes.txt").read_text() == "my notes"
    assert (out / "experiments" / "run1.json").read_text() == "{}"
    assert (out / "data" / "mine.csv").read_text() == "a,b"
    assert sorted(p.name for p in (out / "data").iterdir()) == ["mine.csv", "part-00000.parquet",
                                                                "part-00001.parquet"], "the old third shard is gone"
    assert m["num_rows"] == 12 and len(read_rows(out)) == 12
    validate_shards(out)
    kept = [r.getMessage() for r in caplog.records if "kept" in r.getMessage()]
    assert len(kept) == 1 and "data/mine.csv, experiments/, notes.txt" in kept[0], kept
    assert sorted(m["files"]) == ["README.md", "level_by_index.png"]


def test_overwrite_of_an_output_in_the_old_flat_layout(shared_data, tmp_path):
    out = tmp_path / "old"
    to_flat_layout(out, build(out, 20, rows_per_shard=10))
    (out / "notes.txt").write_text("keep me")
    assert [f.name for f in shard_files(out)] == ["part-00000.parquet", "part-00001.parquet"]
    assert [r["curriculum_index"] for r in read_rows(out)] == list(range(20)), "old directories still read"
    build(out, 10, rows_per_shard=10, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "data", "level_by_index.png", "manifest.json",
                                                     "notes.txt"]
    validate_shards(out)


def to_flat_layout(out: Path, manifest: dict) -> None:
    """Rewrite a directory as builds wrote it before the data/ layout: shards at the top, no ``files`` list."""
    for s in manifest["shards"]:
        (out / s["file"]).rename(out / Path(s["file"]).name)
        s["file"] = Path(s["file"]).name
    (out / "data").rmdir()
    del manifest["files"]
    (out / "manifest.json").write_text(json.dumps(manifest))
    validate_shards(out)


# -- 2. nothing is left behind by a killed build -----------------------------------------------------------------
SLOW_BUILD = """
import os, sys, time
from pathlib import Path
import rag_curriculum.curricula._render as b  # the shard writers' module
from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

out, pids, source = sys.argv[1:4]
write = b.write_one_shard

def slow(part, directory, k):  # every worker writes its first shard, then waits to be killed
    entry = write(part, directory, k)
    (Path(pids) / str(os.getpid())).write_text("")
    time.sleep(300)
    return entry

b.write_one_shard = slow
build_curriculum(BuildConfig(sources=[SourceSpec("musique", source, None)], rows_per_shard=10, workers=2, out=out),
                 command="test")
"""


def _dead(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in (b"Z", b"X")


def _wait(what, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while not what():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc to watch the processes")
def test_a_sigkilled_build_leaves_no_workers_and_its_partial_folder_is_removed_next_time(shared_data, tmp_path):
    out, pids = tmp_path / "out", tmp_path / "pids"
    pids.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-c", SLOW_BUILD, str(out), str(pids), str(MUSIQUE_TRAIN)], env=env)
    try:
        _wait(lambda: len(list(pids.iterdir())) == 2 or proc.poll() is not None)
        assert proc.poll() is None, "the build ended before it could be killed"
        workers = [int(p.name) for p in pids.iterdir()]
        assert all(not _dead(w) for w in workers)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    _wait(lambda: all(_dead(w) for w in workers), timeout=20)  # the workers died with their parent
    partial = [p for p in tmp_path.iterdir() if p.name.startswith(".out.partial-")]
    assert len(partial) == 1 and (partial[0] / "data").is_dir() and not out.exists()
    # an older-style folder of a dead process goes too; a live build's folder (this process) stays
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    legacy = tmp_path / f".out.partial-{int(dead.stdout)}-123"
    legacy.mkdir()
    live = tmp_path / f".out.partial-{os.getpid()}-1-{'0' * 8}-0"
    live.mkdir()
    from rag_curriculum._commit import owner_tag

    live_here = tmp_path / f".out.partial-{owner_tag()}"
    live_here.mkdir()
    build(out, 10)
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".out."))
    assert left == sorted([live.name, live_here.name]), "only the dead builds' folders were removed"
    assert len(read_rows(out)) == 10


# -- 3. shard order is verified -----------------------------------------------------------------------------------
def test_a_reordered_manifest_is_refused_by_validate_and_every_reader(shared_data, tmp_path):
    out = tmp_path / "out"
    build(out, 30, rows_per_shard=10)
    m = read_manifest(out)
    m["shards"] = [m["shards"][2], m["shards"][0], m["shards"][1]]
    (out / "manifest.json").write_text(json.dumps(m))
    message = (r"shards out of curriculum order: data/part-00000.parquet \(curriculum_index 0..9\) is listed after "
               r"data/part-00002.parquet \(20..29\)")
    for read in (validate_shards, shard_files, lambda d: read_table(d, verify=False),
                 lambda d: load_hf_dataset(d, verify=False), read_table, load_hf_dataset):
        with pytest.raises(ShardError, match=message):
            read(out)
    from rag_curriculum.verl.data import train_files

    with pytest.raises(ShardError, match="out of curriculum order"):
        train_files(out, verify=False)
    r = cli("validate", out)
    assert r.exit_code == 1 and "out of curriculum order" in r.output


# -- 4. no absolute local paths in what is published --------------------------------------------------------------
def _strings(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)
    elif isinstance(obj, str):
        yield obj


@pytest.mark.slow
def test_manifest_and_card_hold_no_absolute_paths(shared_data, tmp_path, monkeypatch):
    src = tmp_path / "musique_ans_v1.0_train.sample100.jsonl"  # beside the output: recorded relative to it
    src.write_bytes(MUSIQUE_TRAIN.read_bytes())
    dev = tmp_path / "dev-eval"
    build(dev, 20, input=MUSIQUE_DEV, setting="distractor")
    monkeypatch.chdir(ROOT)
    out = tmp_path / "out"
    args = ["build", "-d", "musique", "-i", src, "--n", 20, "-o", out, "--eval-set", dev, "--leakage", "warn",
            "--no-progress"]
    # the command line as recorded names the output and the inputs by absolute paths
    monkeypatch.setattr(sys, "argv", [str(ROOT / ".venv/bin/curriculum"), *map(str, args[:-1]), f"--out={out}"])
    r = cli(*args)
    r2 = cli("build", "-d", "musique", "-i", MUSIQUE_TRAIN, "--n", 20, "-o", tmp_path / "far", "--no-progress")
    assert r.exit_code == 0 and r2.exit_code == 0, r.output + r2.output
    for d in (out, tmp_path / "far", dev):
        m = read_manifest(d)
        text = json.dumps(m) + (d / "README.md").read_text()
        for local in (str(tmp_path), str(shared_data), str(ROOT)):
            assert local not in text, (d, local)
        assert not [s for s in _strings(m) if s.startswith("/")], d
    m = read_manifest(out)
    source = m["sources"][0]
    assert source["input"] == src.name and source["path"] == f"../{src.name}"
    assert source["sha256"] and len(source["sha256"]) == 64
    assert m["config"]["sources"][0]["input"] == f"../{src.name}" and m["config"]["eval_sets"] == ["../dev-eval"]
    assert m["config"]["out"] == "out" and m["leakage"]["eval_sets"] == ["../dev-eval"]
    assert m["command"] == (f"curriculum build -d musique -i ../{src.name} --n 20 -o out --eval-set ../dev-eval "
                            "--leakage warn --out=out")
    far = read_manifest(tmp_path / "far")["sources"][0]
    assert far["input"] == MUSIQUE_TRAIN.name and far["path"] is None, "a file far away: its name and checksum"
    card = (out / "README.md").read_text()
    assert "source_datasets:\n- dgslibisey/MuSiQue\n" in card


# -- 5. the Hugging Face layout: a directory reads as a Parquet dataset, in curriculum order ------------------------
@pytest.mark.slow
def test_a_shard_directory_reads_as_a_parquet_dataset_in_curriculum_order(shared_data, tmp_path):
    import datasets
    import pandas as pd
    import polars as pl

    out = tmp_path / "out"
    build(out, 60, rows_per_shard=7)  # 9 shards: data/part-00000.parquet ... data/part-00008.parquet
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "data", "level_by_index.png", "manifest.json"]
    assert [f.relative_to(out).as_posix() for f in shard_files(out)] == [
        f"data/part-{k:05d}.parquet" for k in range(9)]
    order = list(range(60))
    assert pq.read_table(out / "data").column("curriculum_index").to_pylist() == order
    assert pd.read_parquet(out / "data")["curriculum_index"].tolist() == order
    assert pl.read_parquet(out / "data" / "*.parquet")["curriculum_index"].to_list() == order
    assert pl.scan_parquet(out / "data").collect()["curriculum_index"].to_list() == order
    assert datasets.load_dataset(str(out), split="train")["curriculum_index"] == order
    files = sorted(str(f) for f in (out / "data").glob("*.parquet"))
    assert datasets.load_dataset("parquet", data_files=files, split="train")["curriculum_index"] == order
    assert load_hf_dataset(out)["curriculum_index"] == order


@pytest.mark.slow
def test_every_consumer_reads_the_data_layout(shared_data, tmp_path):
    from rag_curriculum.verl.data import train_files

    out = tmp_path / "out"
    build(out, 25, rows_per_shard=10)
    assert train_files(out) == [str((out / "data" / f"part-0000{k}.parquet").resolve()) for k in range(3)]
    r = subprocess.run([sys.executable, "-m", "rag_curriculum.verl", "train-files", str(out)],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert r.returncode == 0 and "data/part-00002.parquet" in r.stdout, r.stderr
    for args in (("validate", out), ("inspect", out)):
        r = cli(*args)
        assert r.exit_code == 0, r.output
    ev = tmp_path / "eval"
    build(ev, 12, input=MUSIQUE_DEV, setting="ideal", rows_per_shard=5)
    from rag_curriculum.evaluation._run import load_eval_sets

    assert [len(s.rows) for s in load_eval_sets(ev)] == [12]


def test_remove_output_follows_the_same_rule(shared_data, tmp_path):
    from rag_curriculum._commit import remove_output

    out = tmp_path / "out"
    build(out, 20, rows_per_shard=10)
    (out / "notes.txt").write_text("mine")
    assert remove_output(out) == ["notes.txt"]
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    (out / "manifest.json").write_text('{"name": "app"}')
    with pytest.raises(ShardError, match="did not write"):
        remove_output(out)
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "notes.txt"]
    build(tmp_path / "clean", 5)
    assert remove_output(tmp_path / "clean") == [] and not (tmp_path / "clean").exists()


def test_overwrite_never_changes_files_through_a_symbolic_link(tmp_path):
    """A shard folder that is a link to somewhere else (data -> /datasets/shared) is refused by --overwrite: the
    files behind the link are not the toolkit's to delete or replace."""
    import shutil

    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
    from rag_curriculum.shards import ShardError

    out = tmp_path / "c"
    cfg = BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 12)], schedule="max", out=str(out), seed=0,
                      rows_per_shard=5)
    build_curriculum(cfg, command="t")
    (out / "notes.txt").write_text("mine")  # a user's file: the overwrite replaces in place, not by renaming
    shared = tmp_path / "shared"
    shutil.move(str(out / "data"), shared)
    (out / "data").symlink_to(shared, target_is_directory=True)
    before = {p.name: p.read_bytes() for p in shared.iterdir()}
    with pytest.raises(ShardError, match="symbolic link"):
        build_curriculum(BuildConfig(**{**cfg.__dict__, "overwrite": True, "seed": 1}), command="t")
    assert {p.name: p.read_bytes() for p in shared.iterdir()} == before


@pytest.mark.slow
def test_a_crash_during_an_in_place_overwrite_never_leaves_a_manifest_over_mixed_files(shared_data, tmp_path,
                                                                                        monkeypatch):
    """An output holding a user's files is replaced file by file. A crash half-way used to leave the old
    manifest describing a mix of old and new shards; now the folder has no manifest until the new one lands,
    every reader refuses it with the way out, and the next --overwrite finishes the job."""
    import rag_curriculum.shards as shards

    out = tmp_path / "out"
    build(out, 30, rows_per_shard=10)
    (out / "notes.txt").write_text("my notes")
    real_replace, calls = os.replace, []

    def crash_on_the_second_shard(src, dst):
        calls.append(dst)
        if str(dst).endswith("part-00001.parquet"):
            raise OSError("simulated crash")
        return real_replace(src, dst)

    monkeypatch.setattr(shards.os, "replace", crash_on_the_second_shard)
    with pytest.raises(OSError, match="simulated crash"):
        build(out, 12, rows_per_shard=10, overwrite=True, seed=7)
    monkeypatch.setattr(shards.os, "replace", real_replace)
    assert any(str(c).endswith("part-00000.parquet") for c in calls), "the crash came after a shard was swapped"
    assert not (out / "manifest.json").exists()
    for reader in (read_manifest, validate_shards, read_rows):
        with pytest.raises(ShardError, match="did not finish") as e:
            reader(out)
        assert "--overwrite" in e.value.hint
    with pytest.raises(ShardError, match="already exists"):  # still refused without --overwrite
        build(out, 12, rows_per_shard=10, seed=7)
    m = build(out, 12, rows_per_shard=10, overwrite=True, seed=7)
    validate_shards(out)
    assert m["num_rows"] == 12 and len(read_rows(out)) == 12
    assert (out / "notes.txt").read_text() == "my notes"
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "data", "level_by_index.png", "manifest.json",
                                                      "notes.txt"]
    assert sorted(p.name for p in (out / "data").iterdir()) == ["part-00000.parquet", "part-00001.parquet"]
