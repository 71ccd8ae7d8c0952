"""What a Ray cluster cannot give is refused, and a cluster a command started ends with it.

* Workers (or Serve replicas) that no node of the cluster can hold are refused in one line naming the request and
  what the nodes have (Ray would wait for them without end), by one check (``_plumbing.require_resources``) that
  every Ray path calls; the partition's and the dense encoding's are in their own test files.
* A command that started its own local cluster leaves no Ray process behind when it ends, is stopped by SIGTERM, or
  is killed outright (SIGKILL): every process it started (gcs_server, the raylet, its agents, the workers) is gone
  within seconds. Each case starts a real local cluster in a subprocess; the processes are followed by their ids
  (the command's descendants), never by name, so other Ray clusters on the machine are left alone."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import MUSIQUE_TRAIN

from rag_curriculum.errors import EngineError

TESTS = Path(__file__).resolve().parents[1]


class FakeRay:
    def __init__(self, *nodes: dict[str, float]) -> None:
        self._nodes = [{"Alive": True, "Resources": r} for r in nodes] + [{"Alive": False, "Resources": {"CPU": 99}}]

    def nodes(self):
        return self._nodes


def test_a_worker_must_fit_on_one_node_by_its_totals(caplog):
    """Two 4-CPU nodes hold two 4-CPU workers, not one 6-CPU worker (8 CPUs in all); a dead node does not count."""
    from rag_curriculum._plumbing import require_resources

    ray = FakeRay({"CPU": 4.0, "GPU": 1.0}, {"CPU": 4.0})
    with pytest.raises(EngineError) as e:
        require_resources(ray, cpus=6, gpus=0, error=EngineError)
    assert str(e.value) == ("each Ray worker needs 6 CPU and 0 GPU on one node (--cpus-per-worker 6, --gpus-per-worker "
                            "0), but no node of the Ray cluster has that many: the largest have 4 CPU and 1 GPU (2 "
                            "nodes, 8 CPU and 1 GPU in all)")
    assert e.value.hint.startswith("lower --cpus-per-worker, or use a cluster with larger nodes (--ray-address or "
                                   "RAY_ADDRESS)")
    with pytest.raises(EngineError, match=r"needs 1 CPU and 2 GPU on one node") as e:
        require_resources(ray, cpus=1, gpus=2, error=EngineError)
    assert e.value.hint.startswith("lower --gpus-per-worker,")
    assert require_resources(ray, cpus=2, gpus=1, error=EngineError) == 1  # the GPU node only
    with caplog.at_level(logging.WARNING):
        assert require_resources(ray, cpus=4, gpus=0, error=EngineError, count=3, log=logging.getLogger("t")) == 2
    assert "3 workers asked, but the Ray cluster's nodes hold 2" in caplog.text
    with pytest.raises(EngineError, match=r"^each Ray Serve replica needs 1 CPU and 2 GPU .*--replica-gpus 2\)") as e:
        require_resources(ray, cpus=1, gpus=2, error=EngineError, what="each Ray Serve replica",
                          flags=("--replica-cpus", "--replica-gpus"))
    assert e.value.hint.startswith("lower --replica-gpus,")


@pytest.mark.timeout(120)
def test_serve_refuses_replicas_no_node_can_hold(ray_cluster, tmp_path):
    """`curriculum serve --engine ray --replica-cpus 100` on the 2-CPU cluster: refused before Ray Serve starts
    (it would wait for the replica without end); the cluster it joined is left running."""
    pytest.importorskip("ray.serve", reason="the ray extra (ray[serve]) is needed")
    from rag_retriever._ray_serve import run
    from rag_retriever.errors import EngineError as RetrieverEngineError

    t = time.monotonic()
    with pytest.raises(RetrieverEngineError) as e:
        run(str(tmp_path / "ix"), {}, host="127.0.0.1", port=1, replicas=2, num_cpus=100)
    assert str(e.value).startswith("each Ray Serve replica needs 100 CPU and 0 GPU on one node (--replica-cpus 100, "
                                   "--replica-gpus 0), but no node of the Ray cluster has that many: the largest "
                                   "have 2 CPU and 0 GPU (1 node, 2 CPU and 0 GPU in all)"), str(e.value)
    assert time.monotonic() - t < 30 and ray_cluster.is_initialized()


# -- a cluster the command started ends with it --------------------------------------------------------------------
@pytest.fixture(scope="module")
def script_shards(tmp_path_factory, shared_data):
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    out = tmp_path_factory.mktemp("ray-exit") / "max"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 8, K=2)], schedule="max",
                                 out=str(out), seed=0), command="curriculum build (test)")
    return out


def _alive(procs) -> list:
    import psutil

    alive = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:  # is_running: the same process, not its pid
                alive.append(p)
        except psutil.Error:
            pass
    return alive


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize("end", ["exit", "SIGTERM", "SIGKILL"])
def test_a_local_cluster_ends_with_the_command(script_shards, tmp_path, end):
    """`curriculum partition --engine ray` starting its own local cluster: the command's descendants while it
    runs (gcs_server, the raylet, the agents, the workers) are all gone within seconds after it finished, after a
    SIGTERM, and after a SIGKILL (where Ray's own fate-sharing leaves the raylet's agents for about a minute)."""
    psutil = pytest.importorskip("psutil")
    pytest.importorskip("ray", reason="the `ray` extra is needed for --engine ray")
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS.parent / "src"), str(TESTS), env.get("PYTHONPATH")) if p)
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "rag_curriculum.cli", "partition", str(script_shards), "--backend", "scripted",
         "--model", "scaling._scripts:slow_answers", "--pass-at", "2", "--chunk-size", "1", "--engine", "ray",
         "--num-workers", "1", "--cpus-per-worker", "1", "--out", str(out), "--no-progress"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    procs: list = []
    try:
        deadline = time.monotonic() + 150
        while not list((out / "work").glob("chunk-*.parquet")):  # its cluster is up and working
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.1)
        procs = psutil.Process(proc.pid).children(recursive=True)
        names = " ".join(p.name() for p in _alive(procs))
        assert "raylet" in names and "gcs_server" in names, names
        if end != "exit":
            proc.send_signal(getattr(signal, end))
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    if end == "exit":
        assert proc.returncode == 0, err
        assert json.loads((out / "partition.json").read_text())["counts"]["questions"] == 8
    else:
        assert proc.returncode != 0
    deadline = time.monotonic() + 20
    while _alive(procs) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = [(p.pid, p.name()) for p in _alive(procs)]
    for p in _alive(procs):  # not to leak them into the rest of the session
        p.kill()
    assert not left, f"Ray processes left behind after {end}: {left}"


def test_more_cpus_a_worker_than_this_machine_has_is_refused_before_a_local_cluster_starts(monkeypatch):
    """No --ray-address and no RAY_ADDRESS: the run would start a local cluster of this machine's CPUs, so a worker
    asking more is refused at once (not after the cluster started: half a minute)."""
    pytest.importorskip("ray")
    from rag_curriculum.generation import EngineConfig
    from rag_curriculum.generation._ray_engine import RayEngine

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    engine = RayEngine(EngineConfig(engine="ray", cpus_per_worker=(os.cpu_count() or 1) + 98))
    engine.ray = type("NotStarted", (), {"is_initialized": staticmethod(lambda: False),
                                         "init": lambda *a, **k: pytest.fail("a cluster was started")})
    t = time.monotonic()
    with pytest.raises(EngineError, match=r"needs \d+ CPU on one node \(--cpus-per-worker \d+\), but the local Ray "
                                          r"cluster this run would start has at most \d+"):
        engine.connect()
    assert time.monotonic() - t < 1
