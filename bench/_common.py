"""Shared bench helpers: the HotpotQA-train-sized input, and timing / peak memory of a child process."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
HOTPOT_SAMPLE = SHARED / "hotpotqa" / "hotpot_train_v1.1.sample100.json"
HOTPOT_TRAIN_RECORDS = 90_447  # the official hotpot_train_v1.1.json


def big_hotpot_file(records: int = HOTPOT_TRAIN_RECORDS, path: Path | None = None) -> Path:
    """The real HotpotQA samples repeated with fresh ids to a train-sized official-layout JSON list."""
    path = path or Path(tempfile.gettempdir()) / f"rag-curriculum-bench-hotpot-{records}.json"
    if path.exists():
        return path
    sample = json.loads(HOTPOT_SAMPLE.read_text(encoding="utf-8"))
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("[")
        for i in range(records):
            rec = dict(sample[i % len(sample)])
            rec["_id"] = f"{rec['_id']}-{i:06d}"
            rec["question"] = f"{rec['question']} ({i})"
            if i:
                f.write(", ")
            json.dump(rec, f, ensure_ascii=False)
        f.write("]")
    os.replace(tmp, path)
    return path


CHILD = r"""
import resource, sys, time, json
t = time.perf_counter()
{body}
wall = time.perf_counter() - t
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({{"wall": wall, "peak_mb": me.ru_maxrss / 1024,
                  "cpu": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime}}))
"""


def _cpu_ticks() -> tuple[int, int] | None:
    """(steal, total) jiffies of the machine from /proc/stat (Linux), or None."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    return (fields[7] if len(fields) > 7 else 0), sum(fields)


def run_child(body: str, env: dict | None = None) -> dict:
    """Run ``body`` in a fresh interpreter: its wall time, peak RSS, CPU time (its own and its children's), and
    the share of the machine's CPU time the hypervisor stole meanwhile (``steal``: a virtual machine's noise)."""
    code = CHILD.format(body=body)
    before = _cpu_ticks()
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, **(env or {})})
    out = json.loads(res.stdout.strip().splitlines()[-1])
    after = _cpu_ticks()
    if before and after and after[1] > before[1]:
        out["steal"] = (after[0] - before[0]) / (after[1] - before[1])
    return out


def compare(name_a: str, body_a: str, name_b: str, body_b: str, repeats: int = 3) -> dict:
    """Alternate the two bodies ``repeats`` times in fresh processes; median wall time and peak RSS of each."""
    a, b = [], []
    for _ in range(repeats):
        a.append(run_child(body_a))
        b.append(run_child(body_b))
    def summary(runs: list[dict]) -> dict:
        return {k: statistics.median(x[k] for x in runs) for k in ("wall", "peak_mb", "cpu", "steal")
                if all(k in x for x in runs)}

    return {name_a: summary(a), name_b: summary(b)}


def seconds_to_healthy(argv: list[str], port: int, env: dict | None = None) -> float:
    """Start a server (``argv``, listening on ``port``), poll its ``/health`` until it answers 200, stop it; the
    seconds from start to healthy."""
    return healthy_times(argv, port, env)[0]


def _cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system, its threads included) a running process has used, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def healthy_times(argv: list[str], port: int, env: dict | None = None) -> tuple[float, float | None]:
    """Like :func:`seconds_to_healthy`, and the CPU seconds the server had used when it answered (None where /proc
    cannot tell): on a machine shared with other work the wall time grows with the load, the CPU time hardly."""
    import time
    import urllib.request

    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, **(env or {})})
    t = time.perf_counter()
    try:
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                    if r.status == 200:
                        wall = time.perf_counter() - t
                        try:
                            cpu = _cpu_seconds(proc.pid)
                        except (OSError, ValueError, IndexError):
                            cpu = None
                        return wall, cpu
            except OSError:
                time.sleep(0.1)
            if proc.poll() is not None:
                raise RuntimeError(f"{' '.join(argv[:4])} ... exited before it was healthy")
    finally:
        proc.terminate()
        proc.wait(timeout=60)



def runtime_startups(serve: list[str], port: int, rounds: int) -> str:
    """A dense server's start-up to healthy, its encoder's ONNX export (what the index serves) against loading the
    encoder with sentence-transformers (asked for by ``RAG_CURRICULUM_ENCODER_RUNTIME``), alternated, ``rounds``
    start-ups each: one line with the medians (wall and CPU seconds), the ratio and every run."""
    import statistics

    env = {"HF_HUB_OFFLINE": "1"}
    light, st = [], []
    for _ in range(rounds):
        st.append(healthy_times(serve, port, {**env, "RAG_CURRICULUM_ENCODER_RUNTIME": "sentence-transformers"}))
        light.append(healthy_times(serve, port, env))
    a, b = statistics.median(w for w, _ in light), statistics.median(w for w, _ in st)
    ca, cb = (statistics.median(c for _, c in runs) if all(c is not None for _, c in runs) else float("nan")
              for runs in (light, st))
    return (f"{a:.2f} s ({ca:.2f} CPU-s) serving the encoder's ONNX export, {b:.2f} s ({cb:.2f} CPU-s) loading it "
            f"with sentence-transformers: {b / a:.2f}x sooner (medians of {rounds}, alternated: "
            f"{', '.join(f'{w:.2f}' for w, _ in light)} against {', '.join(f'{w:.2f}' for w, _ in st)}); load average "
            f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
