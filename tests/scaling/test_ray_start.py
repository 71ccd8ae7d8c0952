"""`--engine ray --ray-address ADDR` against a real cluster made by `ray start --head`.

Ray 2.52+ authenticates with a token. The cluster here is started as docs/scaling.md says ("Token authentication":
one token on both sides, `ray get-auth-token --generate` then `RAY_AUTH_MODE=token ray start --head`); the command
run with the same token partitions on it, and the command run without it (`RAY_AUTH_MODE=disabled`, the mismatch
users hit) fails in one line naming Ray's token authentication, where it used to blame the toolkit's install.

The cluster lives in its own temporary folder (its HOME for the token, its --temp-dir, free ports) and is stopped
by the ids of its own processes, never with `ray stop` (which stops every Ray on the machine)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import MUSIQUE_TRAIN

from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
from rag_curriculum.shards import read_manifest, read_rows

BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(tag: str) -> None:
    """Stop the processes of the cluster whose session lives under ``tag`` (and their children), by id."""
    import psutil  # Ray's own dependency

    me = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    procs: dict[int, psutil.Process] = {}
    for p in psutil.process_iter(["cmdline"]):
        try:
            if p.pid not in me and tag in " ".join(p.info["cmdline"] or []):
                procs[p.pid] = p
                procs.update({c.pid: c for c in p.children(recursive=True)})
        except psutil.Error:
            pass
    for p in procs.values():
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(list(procs.values()), timeout=3)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass


@pytest.fixture(scope="module")
def cluster():
    pytest.importorskip("ray", reason="the `ray` extra is needed for --engine ray")
    root = Path(tempfile.mkdtemp(prefix="rs", dir="/tmp"))  # short: Ray's socket paths must fit 107 characters
    home = root / "home"
    home.mkdir()
    env = {**os.environ, "HOME": str(home), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    env.pop("RAY_AUTH_TOKEN", None)
    env.setdefault("MPLCONFIGDIR", str(Path.home() / ".config" / "matplotlib"))  # not a font cache per HOME
    (home / ".ray").mkdir()  # what `ray get-auth-token --generate` writes: 32 random bytes as hex
    (home / ".ray" / "auth_token").write_text(secrets.token_hex(32))
    temp = root / "t"
    try:
        start = subprocess.run(
            [str(BIN / "ray"), "start", "--head", "--port", str(_free_port()), "--num-cpus", "1",
             "--include-dashboard=false", "--dashboard-port", str(_free_port()), "--disable-usage-stats",
             "--temp-dir", str(temp)], env={**env, "RAY_AUTH_MODE": "token"}, capture_output=True, text=True,
            timeout=120)
        assert start.returncode == 0, start.stdout + start.stderr
        address = (temp / "ray_current_cluster").read_text().strip()
        yield address, env, root
    finally:
        _stop(f"{temp}/session")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def built(cluster):
    _, _, root = cluster
    out = root / "max"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE_TRAIN), 6, K=2)], schedule="max",
                                 out=str(out), seed=0), command="curriculum build (test)")
    script = {r["prompt"][-1]["content"]: "<answer>\nFinal answer: x\n</answer>" for r in read_rows(out)}
    (root / "script.json").write_text(json.dumps(script))  # an absolute path: the workers run elsewhere
    return out, root / "script.json"


def _partition(address: str, env: dict, built, out: Path, **extra_env: str) -> subprocess.CompletedProcess:
    shards, script = built
    return subprocess.run([str(BIN / "curriculum"), "partition", str(shards), "--backend", "scripted", "--model",
                           str(script), "--pass-at", "2", "--out", str(out), "--no-progress", "--engine", "ray",
                           "--ray-address", address], env={**env, **extra_env}, capture_output=True, text=True,
                          timeout=180)


@pytest.mark.slow
def test_a_ray_start_cluster_with_one_token_partitions(cluster, built):
    address, env, root = cluster
    r = _partition(address, env, built, root / "p", RAY_AUTH_MODE="token")
    assert r.returncode == 0, r.stderr
    counts = json.loads((root / "p" / "partition.json").read_text())["counts"]
    assert counts["questions"] == counts["scored"] == 6 and counts["samples_per_question"] == 2
    assert sum(read_manifest(root / "p" / b)["num_rows"] for b in ("answerable", "unanswerable")) == 6
    assert f"connecting to the Ray cluster at {address}" in r.stderr and "Ray worker 0: scripted" in r.stderr


@pytest.mark.slow
def test_a_command_without_the_clusters_token_names_the_cause_in_one_line(cluster, built):
    address, env, root = cluster
    t = time.monotonic()
    # RAY_gcs_server_port_wait_time_s=1: Ray retries the refused connection once instead of for ~20 s
    r = _partition(address, env, built, root / "q", RAY_AUTH_MODE="disabled", RAY_gcs_server_port_wait_time_s="1")
    assert r.returncode == 1, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in r.stderr, r.stderr
    assert "Ray's token authentication refused it" in errors[0] and "InvalidAuthToken" in errors[0], errors[0]
    assert "RAY_AUTH_MODE=disabled when you run `ray start`" in r.stderr  # the hint: both ways out
    assert "has the toolkit" not in r.stderr
    assert not (root / "q").exists()  # nothing generated, nothing left
    assert time.monotonic() - t < 60


@pytest.mark.slow
def test_the_auth_cause_is_read_from_the_connection_errors_cause():
    """``ray.init(address=...)`` raises a bare ``Failed to connect`` whose cause holds Ray's paragraph."""
    from rag_curriculum.generation._ray_engine import auth_cause, is_auth_error

    try:
        try:
            raise RuntimeError("Failed to connect to GCS. Last connection error: Traceback ...\nray.exceptions."
                               "AuthenticationError: RPC error: InvalidAuthToken: Authentication token is missing or "
                               "incorrect. Note: RAY_AUTH_MODE is currently 'disabled' (not 'token'). Ensure that ...")
        except RuntimeError as inner:
            raise ConnectionError("Failed to connect to Ray cluster at 10.0.0.1:6379") from inner
    except ConnectionError as e:
        assert is_auth_error(e)
        assert auth_cause(e) == ("AuthenticationError: RPC error: InvalidAuthToken: Authentication token is missing "
                                 "or incorrect; RAY_AUTH_MODE is currently 'disabled' (not 'token')")
    assert not is_auth_error(ConnectionError("Failed to connect to Ray cluster at 10.0.0.1:6379"))
