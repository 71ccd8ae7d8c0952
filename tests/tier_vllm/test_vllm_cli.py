"""`curriculum partition --backend vllm` end to end on the real engine, on real MuSiQue rows: a run SIGKILLed
mid-generation and run again ends with exactly the files of an uninterrupted run, and the per-platform choices are
recorded in the outputs. The three partition runs take one option, ``enforce_eager=true``, else each would spend half
its ~90 s start on torch.compile's warm-up (the platform defaults still apply and are checked). (`curriculum eval
--backend vllm`: test_vllm_eval_cli.py, a file of its own so that the two long runs go to two pytest workers.)"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="the vLLM tier runs in .venv-vllm (bash scripts/test.sh makes it)")

from conftest import MUSIQUE_TRAIN  # noqa: E402

N_QUESTIONS = 12
CHUNK = 2


@pytest.fixture(scope="module")
def shards(tmp_path_factory, shared_data) -> Path:
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    d = tmp_path_factory.mktemp("vllm-cli") / "max"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), N_QUESTIONS, K=3)],
                                 schedule="max", out=str(d), seed=0), command="t")
    return d


def partition_args(shards: Path, out: Path, model: Path) -> list[str]:
    return [str(Path(sys.executable).with_name("curriculum")), "partition", str(shards), "-o", str(out),
            "--backend", "vllm", "-M", str(model), "-k", "4", "--max-tokens", "24", "--chunk-size", str(CHUNK),
            "--chunks-per-call", "1", "--keep-completions", "--no-progress", "--backend-arg", "enforce_eager=true",
            "--backend-arg", "in_process_engine=true"]  # one engine a command: in process, half the start


def tree(d: Path) -> dict[str, bytes]:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*"))
            if p.is_file() and not p.name.endswith(".lock")}  # locks (filelock) stay


def chunks_done(out: Path) -> int:
    return len(list((out / "work").glob("chunk-*.parquet"))) if (out / "work").is_dir() else 0


@pytest.mark.timeout(900)
def test_partition_then_sigkill_and_resume_gives_identical_outputs(shards, vllm_model_dir, tmp_path):
    out = tmp_path / "out"
    args = partition_args(shards, out, vllm_model_dir)
    ref = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert ref.returncode == 0, ref.stderr[-3000:]
    engine = json.loads((out / "partition.json").read_text())["generation"]["backend"]  # as the engine resolved it
    assert engine["backend"] == "vllm" and engine["engine"]["enable_prefix_caching"] is True
    assert engine["engine"]["enforce_eager"] is True  # the option given, recorded
    from vllm.platforms import current_platform

    if current_platform.is_cpu():  # the per-platform choice, recorded
        from rag_curriculum.generation._vllm_backend import platform_defaults

        assert engine["platform"] == "cpu" and engine["platform_defaults"] == platform_defaults(current_platform)
        assert engine["engine"]["enable_chunked_prefill"] is False
    want = tree(out)
    stats_rows = want["stats.parquet"]
    shutil.rmtree(out)

    # the same command, killed (with its engine process) once some chunks are on disk, then run again
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 600
    while chunks_done(out) < 2 and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert p.poll() is None, p.stderr.read().decode()[-3000:]
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    done = chunks_done(out)
    assert 2 <= done < N_QUESTIONS // CHUNK and not (out / "partition.json").exists()  # really interrupted
    res = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    got = tree(out)
    assert sorted(got) == sorted(want)
    for name in sorted(want):
        assert got[name] == want[name], name
    assert got["stats.parquet"] == stats_rows

    import pyarrow.parquet as pq

    comps = pq.read_table(out / "stats.parquet").column("base_completions").to_pylist()
    assert len(comps) == N_QUESTIONS and all(len(c) == 4 and len(set(c)) > 1 for c in comps)
