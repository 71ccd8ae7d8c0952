"""A `curriculum partition --backend vllm` run on vLLM's CPU build, its engine in the calling process
(``--backend-arg in_process_engine=true``) against vLLM's own engine-core and worker processes (the default), the same
command alternating ``--repeats`` times. On a small run nearly all of the time is the engine's start: each extra
process imports torch and vLLM again. Both arms must write the same stats.parquet and shards (checked); prints the
ratio of the medians (in process / separate processes).

    .venv-vllm/bin/python bench/bench_vllm_start.py             # tiny random Qwen2, 12 MuSiQue questions x 4
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from bench_partition import SHARED, build_input  # noqa: E402


def digests(out: Path) -> dict[str, str]:
    """What the run computed: stats.parquet and the buckets' shard files (the records naming the command differ)."""
    files = [out / "stats.parquet", *sorted(out.glob("*/data/*.parquet"))]
    return {p.relative_to(out).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rag-curriculum-bench-vllm-start-"))
    try:
        shards = build_input(work / "input", args.questions, 3, "musique")
        sys.path.insert(0, str(ROOT / "tests"))
        from support.tiny_model import build_tiny_model

        model = build_tiny_model(work / "tiny-model", SHARED, hidden_size=128, heads=2)
        curriculum = str(Path(sys.executable).with_name("curriculum"))
        times: dict[str, list[float]] = {"in process": [], "separate processes": []}
        seen: dict[str, dict[str, str]] = {}
        for r in range(args.repeats):
            for arm in times:
                out = work / f"out-{arm.replace(' ', '-')}-{r}"
                env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
                env.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
                mode = ["--backend-arg", "in_process_engine=true"] if arm == "in process" else []
                t0 = time.perf_counter()
                subprocess.run([curriculum, "partition", str(shards), "-o", str(out), "--backend", "vllm", "-M",
                                str(model), "-k", "4", "--max-tokens", "24", "--no-progress", "--backend-arg",
                                "enforce_eager=true", *mode], check=True, env=env, capture_output=True)
                times[arm].append(time.perf_counter() - t0)
                got = digests(out)
                assert seen.setdefault(arm, got) == got and got == next(iter(seen.values())), "the arms differ"
                shutil.rmtree(out)
        med = {arm: statistics.median(t) for arm, t in times.items()}
        for arm, t in times.items():
            print(f"{arm:>20}: median {med[arm]:6.1f} s  ({', '.join(f'{x:.1f}' for x in t)})")  # noqa: T201
        print(f"ratio in process / separate processes: {med['in process'] / med['separate processes']:.2f} "  # noqa: T201
              f"(the same stats.parquet and shards, {args.questions} questions x 4 samples)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
