"""A training process's start with each module's bytecode cached against without it, the same command alternating
``--rounds`` times: what ``scripts/test.sh`` gains by unsetting ``PYTHONDONTWRITEBYTECODE`` (set on CI's machines),
under which every process of a run compiled torch's, transformers' and TRL's sources again.

Both arms import what ``curriculum train`` imports before its first step (the toolkit's trainer, TRL's
GRPOTrainer, transformers' Qwen2). The baseline runs with ``PYTHONDONTWRITEBYTECODE=1`` and an empty
``PYTHONPYCACHEPREFIX`` (nothing cached, nothing written: what each process paid); the other with a cache prefix
written by one untimed process first. Prints each arm's median seconds (wall and CPU) and the ratio.

    python bench/bench_bytecode.py --rounds 3
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

CODE = ("import rag_curriculum.train, trl, transformers; from trl import GRPOTrainer; "
        "from transformers import Qwen2ForCausalLM")


def timed(env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one process importing :data:`CODE`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", CODE], env=env, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="timed processes per arm, alternating")
    args = ap.parse_args()
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    with tempfile.TemporaryDirectory() as empty, tempfile.TemporaryDirectory() as cached:
        arms = {"no bytecode": {**base, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": empty},
                "bytecode cached": {**base, "PYTHONPYCACHEPREFIX": cached}}
        timed(arms["bytecode cached"])  # writes the cache (untimed)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in arms}
        for _ in range(args.rounds):
            for name, env in arms.items():
                times[name].append(timed(env))
    med = {name: (statistics.median(w for w, _ in t), statistics.median(c for _, c in t)) for name, t in times.items()}
    for name, (wall, cpu) in med.items():
        print(f"{name:16s} wall {wall:6.2f} s  CPU {cpu:6.2f} s  (median of {args.rounds})")
    ratio = med["bytecode cached"][0] / med["no bytecode"][0]
    print(f"bytecode cached / none: {ratio:.2f}x wall, {med['bytecode cached'][1] / med['no bytecode'][1]:.2f}x CPU")


if __name__ == "__main__":
    main()
