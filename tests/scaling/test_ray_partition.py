"""`--engine ray` for the partition on a real local Ray cluster: the same chunk files and outputs, byte for byte, as
the local engine; a worker killed mid-call (ray.kill) has its chunks run again elsewhere with the same outputs; a
call that keeps failing stops the run naming its chunks; the toolkit's own refusals stop it at once; the CLI."""

from __future__ import annotations

import logging
import os
from functools import partial
from pathlib import Path

import pytest
from conftest import MUSIQUE_TRAIN
from scaling import _scripts
from scaling._scripts import inside, tree

from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
from rag_curriculum.errors import ConfigError, EngineError
from rag_curriculum.generation._engine import EngineConfig
from rag_curriculum.generation._scripted import ScriptedBackend
from rag_curriculum.generation.runner import question_seed
from rag_curriculum.partition import PartitionConfig, partition
from rag_curriculum.shards import read_table

pytestmark = pytest.mark.timeout(180)

N_QUESTIONS = 12
CHUNK = 2
COMMAND = "curriculum partition (ray test)"


def config(shards: Path, out: Path, **kw) -> PartitionConfig:
    return PartitionConfig(shards=str(shards), out=str(out), backend="scripted", samples=4, chunk_size=CHUNK,
                           balance=True, keep_completions=True, seed=11, **kw)


def ray_engine(**kw) -> EngineConfig:
    return EngineConfig(engine="ray", num_workers=2, **kw)


@pytest.fixture(scope="module")
def shards(tmp_path_factory, shared_data) -> Path:
    d = tmp_path_factory.mktemp("ray-partition") / "max"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), N_QUESTIONS, K=3)],
                                 schedule="max", out=str(d), seed=0), command="curriculum build")
    return d


@pytest.fixture(scope="module")
def local_run(shards, tmp_path_factory) -> dict[str, bytes]:
    """The reference: the local engine, same settings; every file it writes (work/ included)."""
    with inside(tmp_path_factory.mktemp("local")) as out:
        partition(config(shards, out), backend=ScriptedBackend(script=_scripts.seeded_answers), command=COMMAND)
        files = tree(out)
    assert sum(k.startswith("work/chunk-") for k in files) == N_QUESTIONS // CHUNK
    return files


@pytest.mark.slow
def test_cli_ray_run_writes_the_local_runs_files(ray_cluster, shards, tmp_path):
    """`curriculum partition --engine ray` (on the running cluster) and the same command with the local engine:
    the same files, byte for byte (the recorded command leaves the engine options out)."""
    from typer.testing import CliRunner

    from rag_curriculum.cli import app

    trees = {}
    for engine in ("local", "ray"):
        with inside(tmp_path / engine) as out:
            args = ["partition", str(shards), "--backend", "scripted", "--model", "scaling._scripts:seeded_answers",
                    "--pass-at", "4", "--chunk-size", str(CHUNK), "--seed", "11", "--balance", "--out", str(out),
                    "--no-progress"]
            if engine == "ray":
                args += ["--engine", "ray", "--num-workers", "2", "--cpus-per-worker", "1", "--chunk-retries", "2"]
            res = CliRunner().invoke(app, args)
            assert res.exit_code == 0, res.output
            trees[engine] = tree(out)
    assert sum(k.startswith("work/chunk-") for k in trees["ray"]) == N_QUESTIONS // CHUNK
    assert trees["ray"] == trees["local"]
    assert b"--engine" not in trees["ray"]["partition.json"]


@pytest.mark.timeout(120)
def test_workers_no_node_can_hold_are_refused_in_seconds(ray_cluster, shards, tmp_path):
    """`--cpus-per-worker 100` (or a GPU) on the 2-CPU cluster is one line naming the request and
    what the nodes have (the actor would wait for resources without end); the cluster it joined keeps running."""
    import time

    for engine, flags in ((ray_engine(cpus_per_worker=100), "100 CPU and 0 GPU on one node (--cpus-per-worker 100, "
                                                              "--gpus-per-worker 0)"),
                          (ray_engine(gpus_per_worker=1), "1 CPU and 1 GPU on one node (--cpus-per-worker 1, "
                                                          "--gpus-per-worker 1)")):
        t = time.monotonic()
        with pytest.raises(EngineError) as e:
            partition(config(shards, tmp_path / "out"), backend=ScriptedBackend(script=_scripts.seeded_answers),
                      command=COMMAND, engine=engine)
        assert str(e.value) == (f"each Ray worker needs {flags}, but no node of the Ray cluster has that many: the "
                                "largest have 2 CPU and 0 GPU (1 node, 2 CPU and 0 GPU in all)")
        assert time.monotonic() - t < 30
    assert ray_cluster.is_initialized()


@pytest.mark.slow
def test_a_killed_worker_has_its_chunks_run_again(ray_cluster, shards, local_run, tmp_path, monkeypatch, caplog):
    """ray.kill of a worker in the middle of a call: the call runs again on another worker (a fresh one replaces
    the dead), and the run ends with exactly the local engine's files."""
    from rag_curriculum.generation._ray_engine import RayPool

    killed: list[int] = []
    original = RayPool.generate_calls

    def kill_one(self, calls, *, total=None):
        for i, item in enumerate(original(self, calls, total=total)):
            if i == 0:  # every worker has a call under way now (the freed one got the next before this came back)
                victim = max(self.workers)
                ray_cluster.kill(self.workers[victim], no_restart=True)
                killed.append(victim)
            yield item

    monkeypatch.setattr(RayPool, "generate_calls", kill_one)
    with caplog.at_level(logging.WARNING, logger="rag_curriculum.generation._ray_engine"), inside(tmp_path) as out:
        result = partition(config(shards, out), backend=ScriptedBackend(script=_scripts.slow_answers),
                           command=COMMAND, engine=ray_engine())
        assert killed and result.complete and result.run.generated_chunks == N_QUESTIONS // CHUNK
        assert any(f"worker {killed[0]} died during chunk" in r.getMessage() for r in caplog.records), caplog.text
        assert tree(out) == local_run


@pytest.mark.slow
def test_a_chunk_that_keeps_failing_stops_the_run_naming_it(ray_cluster, shards, tmp_path):
    ids = read_table(shards, columns=["id"]).column("id").to_pylist()
    bad = 7  # question 7: chunk 3
    script = partial(_scripts.failing_answers, bad_seed=question_seed(11, ids[bad]))
    out = tmp_path / "out"
    with pytest.raises(EngineError) as e:
        partition(config(shards, out), backend=ScriptedBackend(script=script), command=COMMAND,
                  engine=ray_engine(chunk_retries=1))
    msg = str(e.value)
    assert "chunk 3 (questions 6..7) failed 2 time(s)" in msg and "RuntimeError: simulated engine failure" in msg
    assert "run the same command again" in e.value.hint
    done = {p.name for p in (out / "work").glob("chunk-*.parquet")}
    assert "chunk-000003.parquet" not in done  # nothing half-made is on disk; the others that finished are kept
    assert not (out / "partition.json").exists()


@pytest.mark.slow
def test_the_toolkits_own_refusal_stops_at_once(ray_cluster, shards, tmp_path):
    """A script giving too few completions is a ConfigError in a local run; on Ray it is the same error, not
    retried."""
    backend = ScriptedBackend(script={}, default=["only one"])
    with pytest.raises(ConfigError, match="returned 1 completion"):
        partition(config(shards, tmp_path / "local"), backend=backend, command=COMMAND)
    with pytest.raises(ConfigError, match="returned 1 completion"):
        partition(config(shards, tmp_path / "ray"), backend=backend, command=COMMAND,
                  engine=EngineConfig(engine="ray", num_workers=1))


@pytest.mark.slow
def test_ctrl_c_kills_the_workers_and_keeps_finished_chunks(ray_cluster, shards, local_run, tmp_path, monkeypatch):
    """Ctrl-C (KeyboardInterrupt in the driver) while calls are under way: every worker is killed, the chunks
    written before it stay, and the run resumed (by the local engine) ends with the local engine's files.

    The KeyboardInterrupt is raised where a real Ctrl-C finds the driver, waiting on its workers (``ray.wait``), at
    the first wait after a chunk is on disk: deterministic (a timer's ``interrupt_main`` could land after the run
    ended, or inside a finalizer that swallows it, on a loaded machine)."""
    import ray

    from rag_curriculum.generation._ray_engine import RayPool

    pools: list[RayPool] = []
    original = RayPool.generate_calls
    real_wait = ray.wait

    def recording(self, calls, *, total=None):
        pools.append(self)
        yield from original(self, calls, total=total)

    monkeypatch.setattr(RayPool, "generate_calls", recording)
    with inside(tmp_path) as out:
        fired = []

        def wait(refs, **kw):
            if not fired and refs and any((out / "work").glob("chunk-*.parquet")):
                fired.append(len(refs))  # the workers are busy with these calls
                raise KeyboardInterrupt
            return real_wait(refs, **kw)

        monkeypatch.setattr(ray, "wait", wait)
        with pytest.raises(KeyboardInterrupt):
            partition(config(shards, out), backend=ScriptedBackend(script=_scripts.slow_answers), command=COMMAND,
                      engine=ray_engine())
        monkeypatch.setattr(ray, "wait", real_wait)
        assert fired and fired[0] >= 1
        (pool,) = pools
        assert pool._closed and not pool.workers  # every worker killed
        written = len(list((out / "work").glob("chunk-*.parquet")))
        assert 1 <= written < N_QUESTIONS // CHUNK
        # resumed here with the local engine: the chunk files do not depend on the engine that wrote them
        result = partition(config(shards, out), backend=ScriptedBackend(script=_scripts.seeded_answers),
                           command=COMMAND)
        assert result.run.done_before == written and result.complete
        assert tree(out) == local_run


@pytest.mark.slow
def test_transformers_on_ray_writes_the_local_runs_files(ray_cluster, tiny_model_dir, tmp_path):
    """A real model (the tiny Qwen2-style one) loaded by a Ray worker: the same samples as the local engine (one
    worker: placement is the scripted tests' subject; this one is about the model running in an actor)."""
    shards = tmp_path / "level-1"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 4, K=1)], schedule="max",
                                 out=str(shards), seed=0), command="curriculum build")
    trees = {}
    for engine in (None, EngineConfig(engine="ray", num_workers=1)):
        with inside(tmp_path / ("ray" if engine else "local")) as out:
            cfg = config(shards, out, max_tokens=8)
            cfg.backend, cfg.model = "transformers", str(tiny_model_dir)
            cfg.backend_args = {"device": "cpu", "batch_size": 4}
            result = partition(cfg, command=COMMAND, engine=engine)
            assert result.complete
            trees["ray" if engine else "local"] = tree(out)
    assert trees["ray"] == trees["local"]


@pytest.mark.slow
def test_ctrl_c_on_the_command_shuts_down_the_cluster_it_started(shards, tmp_path):
    """A real SIGINT to `curriculum partition --engine ray` that started its own local cluster: it exits (130)
    within seconds, keeps the chunks it wrote, and leaves no Ray process behind."""
    pytest.importorskip("ray", reason="the `ray` extra is needed for --engine ray")
    psutil = pytest.importorskip("psutil")
    import signal
    import subprocess
    import sys
    import time

    tests = Path(__file__).resolve().parents[1]

    def alive(procs: list) -> list:  # still running (the same processes, not their pids), not zombies
        out = []
        for p in procs:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except psutil.Error:
                pass
        return out

    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tests.parent / "src"), str(tests), env.get("PYTHONPATH")) if p)
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rag_curriculum.cli", "partition", str(shards), "--backend", "scripted", "--model",
         "scaling._scripts:slow_answers", "--pass-at", "4", "--chunk-size", str(CHUNK), "--engine", "ray",
         "--num-workers", "2", "--cpus-per-worker", "0.5", "--out", str(out), "--no-progress"],
        env=env, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # a shell's background job ignores it
    try:
        deadline = time.monotonic() + 90
        while not list((out / "work").glob("chunk-*.parquet")):
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.1)
        # its cluster, as the command's own descendants (a test in another pytest worker may run a cluster too)
        cluster = psutil.Process(proc.pid).children(recursive=True)
        names = " ".join(p.name() for p in alive(cluster))
        assert "raylet" in names and "gcs_server" in names, names
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "shutting down the local Ray cluster" in err
    written = len(list((out / "work").glob("chunk-*.parquet")))
    assert 1 <= written < N_QUESTIONS // CHUNK
    deadline = time.monotonic() + 15  # the raylet's workers exit after it; a loaded machine takes a few seconds
    while alive(cluster) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = [(p.pid, p.name()) for p in alive(cluster)]
    for p in alive(cluster):  # not to leak them into the rest of the session
        p.kill()
    assert not left, f"Ray processes left behind: {left}"
