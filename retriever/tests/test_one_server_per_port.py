"""One server a port, whatever the timing, and workers that never outlive their server.

Two servers started at the same instant on one port, many times over: each runs what ``serve`` runs before it
forks (the port's claim, then its ``SO_REUSEPORT`` sockets bound and listening), and every time exactly one serves
and the other is refused in one line naming the first. A stop signal while the workers are still being forked
stops every worker, those forked before it and after it; a parent killed by SIGKILL takes its workers with it.
Each trial forks real processes (``os.fork``) from one driver process, so the many trials take about a second.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forks, SO_REUSEPORT and /proc")

TRIALS = 16

#: Two servers a trial, released together by one write to a pipe they both wait on; each claims the port and binds
#: its two sockets as ``serve --workers 2`` does, and says what became of it. The one serving holds on until the
#: driver kills it (the claim goes with it: the next trial reuses the port).
RACE = r"""
import json, os, signal, sys
from rag_plumbing._ports import claim_port
from rag_retriever._prefork import listeners

port, trials = int(sys.argv[1]), int(sys.argv[2])
results = []
for trial in range(trials):
    go_r, go_w = os.pipe()
    said_r, said_w = os.pipe()
    pids = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:
            os.close(go_w)
            os.read(go_r, 1)
            problem = claim_port("127.0.0.1", port)
            if problem is None:
                socks, own = listeners("127.0.0.1", port, 2)
                what = "serving" if own and len(socks) == 2 else "no SO_REUSEPORT"
            else:
                what = problem
            os.write(said_w, (json.dumps([os.getpid(), what]) + "\n").encode())
            signal.pause()
            os._exit(0)
        pids.append(pid)
    os.write(go_w, b"xx")
    got = b""
    while got.count(b"\n") < 2:
        got += os.read(said_r, 4096)
    results.append([json.loads(line) for line in got.decode().splitlines()])
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    for fd in (go_r, go_w, said_r, said_w):
        os.close(fd)
print(json.dumps(results))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_servers_started_together_on_one_port_always_leave_one_refused_naming_the_other():
    port = _free_port()
    r = subprocess.run([sys.executable, "-c", RACE, str(port), str(TRIALS)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    trials = json.loads(r.stdout)
    assert len(trials) == TRIALS
    for pair in trials:
        outcomes = sorted(what for _, what in pair)
        serving = [pid for pid, what in pair if what == "serving"]
        assert len(serving) == 1, pair  # never two servers answering from one port, never none
        refused = outcomes[0]
        assert refused == (f"cannot listen on 127.0.0.1:{port}: another retriever server (process {serving[0]}) "
                           "serves that port (curriculum serve or rag-retriever serve; one server a port, whatever "
                           "its --host)"), pair


def test_a_port_held_by_another_program_is_refused_and_the_claim_let_go():
    from rag_plumbing import _ports

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        problem = _ports.claim_port("127.0.0.1", port)
    assert problem is not None and problem.startswith(f"cannot listen on 127.0.0.1:{port}: "), problem
    assert port not in _ports._CLAIMS  # refused: this process does not go on holding the port


#: A server's parent (``_prefork.run``, 8 workers) per trial; a stop signal comes while it is still forking them:
#: sent by the worker of slot ``k`` as it starts, or from outside once the first worker or two started. Every worker writes its
#: process id to a pipe, so the driver knows them all, those forked after the signal too.
STARTUP = r"""
import json, os, select, signal, sys, time
from rag_retriever._prefork import run

trials = int(sys.argv[1])
WORKERS = 8

def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False

def gone(pids, within):
    deadline = time.monotonic() + within
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.01)
    return [p for p in pids if alive(p)]

def server(k, out):
    def serve(slot):
        os.write(out, f"{os.getpid()}\n".encode())
        if slot == k:
            os.kill(os.getppid(), signal.SIGTERM)
        time.sleep(60)
    os._exit(run(serve, WORKERS))

def read_pids(fd, n=None, within=5.0):
    got, deadline = b"", time.monotonic() + within
    while time.monotonic() < deadline and (n is None or got.count(b"\n") < n):
        ready, _, _ = select.select([fd], [], [], 0.05)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            got += chunk
        elif n is None:
            break
    return [int(x) for x in got.split()]

out = {"signal": [], "kill": []}
for trial in range(trials):
    r, w = os.pipe()
    k = trial % WORKERS if trial % 2 == 0 else -1  # even trials: worker k signals; odd: a signal from outside
    pid = os.fork()
    if pid == 0:
        os.close(r)
        server(k, w)
    os.close(w)
    first = []
    if k < 0:  # from outside, once the first worker (or the first two) said it started
        first = read_pids(r, n=1 + trial % 4 // 2)
        os.kill(pid, signal.SIGTERM)
    deadline, status = time.monotonic() + 3, None
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.01)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        status = "hung"
    workers = first + read_pids(r, within=0.5)
    os.close(r)
    out["signal"].append({"k": k, "parent": status if status == "hung" else os.waitstatus_to_exitcode(status),
                          "workers": len(workers), "left": gone(workers, 3.0)})

for trial in range(4):  # the parent killed by SIGKILL once its workers are up
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        server(-1, w)
    os.close(w)
    workers = read_pids(r, n=2 if trial % 2 else WORKERS)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    os.close(r)
    out["kill"].append({"workers": len(workers), "left": gone(workers, 3.0)})
print(json.dumps(out))
"""


def test_a_stop_signal_during_start_up_or_a_killed_parent_leaves_no_worker_serving():
    r = subprocess.run([sys.executable, "-c", STARTUP, str(TRIALS)], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout)
    for trial in got["signal"]:
        assert trial["parent"] == 0, trial  # the parent stopped, and not by the signal's default action
        assert trial["workers"] >= 1 and trial["left"] == [], trial  # every worker it forked, stopped
    assert any(t["workers"] < 8 for t in got["signal"]), got["signal"]  # some stops came mid-way through the forks
    for trial in got["kill"]:
        assert trial["workers"] >= 2 and trial["left"] == [], trial
