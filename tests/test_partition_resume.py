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

TESTS = Path(__file__).resolve().parent
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
    return PartitionConfig(shards=str(shards), out=str(out), backend="scripted", k=4, chunk_size=CHUNK,
                           balance=True, keep_completions=True, seed=11)


def run_partition(shards: str, out: str, delay: float) -> None:
    """The body of the child process (and of the reference run)."""
    from rag_curriculum.generation.scripted import ScriptedBackend

    partition(config(Path(shards), Path(out)), backend=ScriptedBackend(script=seeded_answers, delay=delay),
              command="curriculum partition (resume test)")


def spawn(shards: Path, out: Path, delay: float) -> subprocess.Popen:
    code = (f"import sys; sys.path.insert(0, {str(TESTS)!r}); from test_partition_resume import run_partition; "
            f"run_partition({str(shards)!r}, {str(out)!r}, {delay!r})")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS.parent / "src"), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


def tree(d: Path) -> dict[str, bytes]:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*"))
            if p.is_file() and p.name != ".lock"}


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


def test_a_crash_while_writing_the_outputs_is_repaired_by_running_again(shards, tmp_path, monkeypatch):
    out = tmp_path / "out"
    want = reference_at(shards, out)
    import rag_curriculum.partition as part

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
    assert not (out / "unanswerable").exists()
    monkeypatch.setattr(part, "write_shards", real)
    run_partition(str(shards), str(out), 0.0)
    assert tree(out) == want
