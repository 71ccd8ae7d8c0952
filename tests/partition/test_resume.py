"""Resumption: a partition killed with SIGKILL at several moments (mid-generation, mid-write of the outputs) and run
again ends with exactly the files of an uninterrupted run, byte for byte: nothing duplicated, nothing lost."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import MUSIQUE_TRAIN

from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
from rag_curriculum.partition import PartitionConfig, partition
from rag_curriculum.shards import ShardError, read_manifest, validate_shards

TESTS = Path(__file__).resolve().parents[1]
N_QUESTIONS = 12
CHUNK = 2


def seeded_answers(messages, n, seed):
    """A deterministic stand-in for a sampled model: some samples right (the question's own answer is not
    known here, so 'right' means a fixed answer that happens to match some questions), most wrong."""
    r = random.Random(seed)
    return [f"<reasoning>\n{r.random():.6f}\n</reasoning>\n<answer>\nFinal answer: "
            f"{r.choice(['Renfield', 'June 6', 'zzzq', 'Dodge County', 'qqq'])}\nSupporting passages: x\n</answer>"
            for _ in range(n)]


def config(shards: Path, out: Path) -> PartitionConfig:
    return PartitionConfig(shards=str(shards), out=str(out), backend="scripted", samples=4, chunk_size=CHUNK,
                           balance=True, keep_completions=True, seed=11)


def run_partition(shards: str, out: str, delay: float) -> None:
    """The body of the child process (and of the reference run)."""
    from rag_curriculum.generation._scripted import ScriptedBackend

    partition(config(Path(shards), Path(out)), backend=ScriptedBackend(script=seeded_answers, delay=delay),
              command="curriculum partition (resume test)")


def spawn(shards: Path, out: Path, delay: float) -> subprocess.Popen:
    code = (f"import sys; sys.path.insert(0, {str(TESTS)!r}); from partition.test_resume import run_partition; "
            f"run_partition({str(shards)!r}, {str(out)!r}, {delay!r})")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS.parent / "src"), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


def tree(d: Path) -> dict[str, bytes]:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*"))
            if p.is_file() and not p.name.endswith(".lock")}  # locks (filelock) stay


def crash_before(monkeypatch, step: str) -> None:
    """Make the next partition die (KeyboardInterrupt) just before ``step`` of moving its set of outputs in."""
    import rag_curriculum._commit as commit  # where the commit steps run (commit_set)

    def crash(name):
        if name == step:
            raise KeyboardInterrupt(f"killed before {name}")

    monkeypatch.setattr(commit, "_commit_step", crash)


def chunks_done(out: Path) -> int:
    return len(list((out / "work").glob("chunk-*.parquet"))) if (out / "work").is_dir() else 0


@pytest.fixture(scope="module")
def shards(tmp_path_factory, shared_data) -> Path:
    d = tmp_path_factory.mktemp("resume") / "max"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), N_QUESTIONS, K=3)],
                                 schedule="max", out=str(d), seed=0), command="t")
    return d


def reference_at(shards: Path, out: Path) -> dict[str, bytes]:
    """The files of an uninterrupted run at ``out`` (outputs record their own path, so compare at one path)."""
    run_partition(str(shards), str(out), 0.0)
    ref = tree(out)
    shutil.rmtree(out)
    return ref


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sigkill_at_several_moments_then_resume_gives_identical_outputs(shards, tmp_path):
    out = tmp_path / "out"
    want = reference_at(shards, out)
    total_chunks = N_QUESTIONS // CHUNK
    kills = []
    for stop_at in (1, 3, total_chunks):  # mid-generation twice, then as the last chunk lands (finalize)
        p = spawn(shards, out, delay=0.05)
        deadline = time.monotonic() + 120
        while chunks_done(out) < stop_at and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            kills.append(chunks_done(out))
        p.wait()
        assert p.returncode in (0, -signal.SIGKILL), p.stderr.read().decode()[-2000:]
    print("kills at chunk counts", kills, "partition.json before the last run:", (out / "partition.json").exists())
    assert kills and kills[0] < total_chunks  # really interrupted before the end at least once
    p = spawn(shards, out, delay=0.0)
    p.wait(timeout=120)
    assert p.returncode == 0, p.stderr.read().decode()[-2000:]
    got = tree(out)
    assert not [k for k in got if "/." in k or k.startswith(".")], "temporary files left behind"
    assert sorted(got) == sorted(want)
    for name in sorted(want):
        assert got[name] == want[name], name
    stats = pq.read_table(out / "stats.parquet")
    ids = stats.column("id").to_pylist()
    assert len(ids) == len(set(ids)) == N_QUESTIONS  # nothing duplicated, nothing lost


@pytest.mark.slow
def test_a_crash_while_writing_the_outputs_is_repaired_by_running_again(shards, tmp_path, monkeypatch):
    out = tmp_path / "out"
    want = reference_at(shards, out)
    import rag_curriculum.partition._outputs as part  # where the buckets are written

    real = part.write_shards
    written = []

    def crash_on_unanswerable(table, out_dir, **kw):
        if Path(out_dir).name == "unanswerable":
            raise KeyboardInterrupt("killed while writing the outputs")
        written.append(Path(out_dir).name)
        return real(table, out_dir, **kw)

    monkeypatch.setattr(part, "write_shards", crash_on_unanswerable)
    with pytest.raises(KeyboardInterrupt):
        run_partition(str(shards), str(out), 0.0)
    assert written == ["answerable"] and not (out / "partition.json").exists()
    assert not (out / "unanswerable").exists() and not (out / "answerable").exists()  # none of the set appears
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]  # nor its staging folder
    monkeypatch.setattr(part, "write_shards", real)
    run_partition(str(shards), str(out), 0.0)
    assert tree(out) == want


# -- the outputs appear as a set -----------------------------------------------------------------------------------
BUCKETS = ("answerable", "unanswerable", "learnable")


def readable_buckets(out: Path) -> list[str]:
    """The buckets a reader would accept: a valid shard directory whose set is complete."""
    from rag_curriculum.partition import output_set_problem
    from rag_curriculum.shards import ShardError, validate_shards

    ok = []
    for b in BUCKETS:
        try:
            validate_shards(out / b)
        except ShardError:
            continue
        if output_set_problem(out / b) is None:
            ok.append(b)
    return ok


def assert_all_or_nothing(out: Path) -> None:
    readable = readable_buckets(out)
    complete = (out / "partition.json").exists()
    assert readable in ([], list(BUCKETS)), readable
    assert complete == bool(readable), (complete, readable)


COMMIT_STEPS = ["invalidate", "answerable", "unanswerable", "learnable", "stats.parquet", "answerable/manifest.json",
                "learnable/manifest.json", "partition.json"]


@pytest.mark.slow
@pytest.mark.parametrize("step", COMMIT_STEPS)
@pytest.mark.parametrize("fresh", [True, False], ids=["first-write", "replacing-a-set"])
def test_a_crash_between_outputs_leaves_no_partial_set_and_running_again_repairs_it(shards, tmp_path, monkeypatch,
                                                                                    step, fresh):
    """Killed while the set moves into place (first write, or replacing an earlier set): no bucket reads as
    finished without the rest of its set and partition.json; the same command again gives the same bytes."""
    out = tmp_path / "out"
    want = reference_at(shards, out)
    if not fresh:
        run_partition(str(shards), str(out), 0.0)
    crash_before(monkeypatch, step)
    with pytest.raises(KeyboardInterrupt):
        run_partition(str(shards), str(out), 0.0)
    assert_all_or_nothing(out)
    if not fresh and step == "invalidate":
        assert tree(out) == want  # killed before touching the earlier set: it is whole
    else:
        assert not (out / "partition.json").exists() and readable_buckets(out) == []
    monkeypatch.undo()
    run_partition(str(shards), str(out), 0.0)
    assert tree(out) == want


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sigkill_between_outputs_then_resume_gives_identical_outputs(shards, tmp_path):
    """A real SIGKILL with answerable/ moved into place and unanswerable/ not yet."""
    out = tmp_path / "out"
    want = reference_at(shards, out)
    code = (f"import sys, time; sys.path.insert(0, {str(TESTS)!r}); import rag_curriculum._commit as commit; "
            "commit._commit_step = lambda name: time.sleep(600) if name == 'unanswerable' else None; "
            f"from partition.test_resume import run_partition; run_partition({str(shards)!r}, {str(out)!r}, 0.0)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS.parent / "src"), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    pending = out / "answerable" / ".manifest.json.pending"
    deadline = time.monotonic() + 120
    while not pending.exists() and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert p.poll() is None, p.stderr.read().decode()[-2000:]
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert (out / "answerable").is_dir() and not (out / "unanswerable").exists()
    assert_all_or_nothing(out)
    assert readable_buckets(out) == []
    p = spawn(shards, out, delay=0.0)
    p.wait(timeout=120)
    assert p.returncode == 0, p.stderr.read().decode()[-2000:]
    assert tree(out) == want


@pytest.mark.slow
def test_a_full_disk_writes_none_of_the_set_and_keeps_the_previous_one(shards, tmp_path, monkeypatch):
    """No space left while writing unanswerable/: one clear error, nothing of the new set in OUT, the previous set
    (from an earlier run) untouched; the same command again, with space, writes the set."""
    import errno

    import rag_curriculum.partition._outputs as part  # where the buckets are written
    from rag_curriculum.partition import PartitionError

    out = tmp_path / "out"
    want = reference_at(shards, out)
    real = part.write_shards

    def full_disk(table, out_dir, **kw):
        if Path(out_dir).name == "unanswerable":
            raise OSError(errno.ENOSPC, "No space left on device", str(out_dir))
        return real(table, out_dir, **kw)

    monkeypatch.setattr(part, "write_shards", full_disk)
    with pytest.raises(PartitionError) as e:
        run_partition(str(shards), str(out), 0.0)
    msg = str(e.value)
    assert "No space left on device" in msg and "run the same command again" in msg and "\n" not in msg
    assert sorted(p.name for p in out.iterdir()) == ["partition_config.json", "work"]  # nothing of the set
    monkeypatch.setattr(part, "write_shards", real)
    run_partition(str(shards), str(out), 0.0)  # with space: the set appears
    assert tree(out) == want
    monkeypatch.setattr(part, "write_shards", full_disk)
    with pytest.raises(PartitionError):  # rewriting it on a full disk keeps the earlier set whole
        run_partition(str(shards), str(out), 0.0)
    assert tree(out) == want


def test_readers_refuse_a_bucket_of_an_unfinished_set(shards, tmp_path):
    """A bucket left in OUT without its partition.json is refused by the toolkit's readers of partition outputs
    (`partition --shards`, eval's --stats), saying to run the same command again; a bucket copied elsewhere reads
    on its own."""
    from rag_curriculum.evaluation import load_buckets
    from rag_curriculum.partition import PartitionError, output_set_problem

    out = tmp_path / "out"
    run_partition(str(shards), str(out), 0.0)
    assert output_set_problem(out / "answerable") is None
    copy = tmp_path / "elsewhere" / "answerable"
    shutil.copytree(out / "answerable", copy)
    (out / "partition.json").unlink()  # what an interrupted write leaves (with manifests, in the worst case)
    problem = output_set_problem(out / "answerable")
    assert problem and "run the same `curriculum partition` command again" in problem
    assert output_set_problem(copy) is None
    with pytest.raises(PartitionError, match="command again"):
        partition(PartitionConfig(shards=str(out / "answerable"), out=str(tmp_path / "again"), backend="scripted",
                                  samples=2), command="t")
    with pytest.raises(Exception, match="command again"):
        load_buckets([out])
    with pytest.raises(ShardError, match="command again"):  # every reader: validate_shards asks partition's check
        validate_shards(out / "answerable")
    assert validate_shards(copy)["num_rows"] == read_manifest(copy)["num_rows"]


@pytest.mark.slow
@pytest.mark.parametrize("step", [None, "answerable", "unanswerable", "stats.parquet"])
def test_files_a_user_added_to_the_buckets_survive_a_new_set_and_a_crash(shards, tmp_path, monkeypatch, step):
    """Writing a new set replaces only the toolkit's files in each bucket (the --overwrite rule): a user's notes
    and folders stay, also when the run is killed while the set moves in and is run again."""
    out = tmp_path / "out"
    run_partition(str(shards), str(out), 0.0)
    (out / "answerable" / "notes.txt").write_text("mine")
    (out / "unanswerable" / "experiments").mkdir()
    (out / "unanswerable" / "experiments" / "a.csv").write_text("1,2")
    if step is not None:
        crash_before(monkeypatch, step)
        with pytest.raises(KeyboardInterrupt):
            run_partition(str(shards), str(out), 0.0)
        monkeypatch.undo()
    run_partition(str(shards), str(out), 0.0)
    assert (out / "answerable" / "notes.txt").read_text() == "mine"
    assert (out / "unanswerable" / "experiments" / "a.csv").read_text() == "1,2"
    assert not [p for p in out.iterdir() if p.name.startswith(".")], "staging or replaced folders left behind"
    from rag_curriculum.shards import validate_shards

    for name in ("answerable", "unanswerable", "learnable"):
        validate_shards(out / name)


@pytest.mark.slow
def test_overwrite_keeps_a_users_files_in_the_buckets(shards, tmp_path):
    """--overwrite retires the previous set; the buckets' own files are replaced, a user's are carried over."""
    import dataclasses

    from rag_curriculum.generation._scripted import ScriptedBackend

    out = tmp_path / "out"
    run_partition(str(shards), str(out), 0.0)
    (out / "answerable" / "notes.txt").write_text("mine")
    cfg = dataclasses.replace(config(shards, out), overwrite=True, balance=False)
    partition(cfg, backend=ScriptedBackend(script=seeded_answers), command="curriculum partition (resume test)")
    assert (out / "answerable" / "notes.txt").read_text() == "mine"
    from rag_curriculum.shards import validate_shards

    validate_shards(out / "answerable")


def test_a_bucket_folder_without_a_manifest_is_refused_not_emptied(shards, tmp_path):
    """A folder named like a bucket that holds files but no record of what the toolkit wrote (the user's own) is
    refused before anything is touched: its files cannot be told apart from the toolkit's."""
    import rag_curriculum.partition as part

    out = tmp_path / "out"
    (out / "answerable").mkdir(parents=True)
    (out / "answerable" / "notes.txt").write_text("mine")
    with pytest.raises(part.PartitionError, match="holds files and is not the output of a partition"):
        run_partition(str(shards), str(out), 0.0)
    assert (out / "answerable" / "notes.txt").read_text() == "mine"
