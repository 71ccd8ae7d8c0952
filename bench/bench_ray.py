"""``--engine ray`` against the local engine, in one run: the scripted backend with a fixed delay per prompt (a model
whose cost is the same wherever it runs), the same partition three ways:

- local:  ``--engine local`` (the baseline);
- ray-1:  ``--engine ray --num-workers 1`` (the engine's own cost: calls shipped to an actor, results shipped back);
- ray-2:  ``--engine ray --num-workers 2`` (the scaling).

Each arm's generation time is the runner's (``RunReport.seconds``: from the first call to the last chunk written;
like a local run's model loading, starting the workers comes before it); the wall time of the whole command is
printed beside it. The arms' chunk files are checked to be byte-identical. Targets: ray-2 at least 1.8x ray-1's
throughput; ray-1 at most 5% slower than local.

    python bench/bench_ray.py                        # 96 MuSiQue questions at level 20, 0.25 s per prompt
    python bench/bench_ray.py --delay 0.1 --repeats 2
"""

from __future__ import annotations

import argparse
import logging
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUSIQUE = ROOT.parent / "shared" / "data" / "musique" / "musique_ans_v1.0_train.sample100.jsonl"


def seeded_answers(messages, n, seed):
    r = random.Random(seed)
    return [f"<reasoning>\n{r.random():.6f}\n</reasoning>\n<answer>\nFinal answer: "
            f"{r.choice(['Renfield', 'June 6', 'zzzq'])}\nSupporting passages: x\n</answer>" for _ in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=96)
    ap.add_argument("--chunk-size", type=int, default=4)
    ap.add_argument("--delay", type=float, default=0.25, help="seconds per prompt")
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()

    import ray

    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
    from rag_curriculum.generation._engine import EngineConfig
    from rag_curriculum.generation._scripted import ScriptedBackend
    from rag_curriculum.partition import PartitionConfig, partition

    work = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    shards = work / "max"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE), args.questions)], schedule="max",
                                 out=str(shards), seed=0), command="bench")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    arms = {"local": None, "ray-1": EngineConfig(engine="ray", num_workers=1),
            "ray-2": EngineConfig(engine="ray", num_workers=2)}
    gen: dict[str, list[float]] = {a: [] for a in arms}
    wall: dict[str, list[float]] = {a: [] for a in arms}
    chunks: dict[str, dict[str, bytes]] = {}
    completions = 0
    for r in range(args.repeats):
        order = list(arms)[r % 3:] + list(arms)[:r % 3]
        for arm in order:
            out = work / f"{arm}-{r}" / "out"
            cfg = PartitionConfig(shards=str(shards), out=str(out), backend="scripted", samples=args.k,
                                  chunk_size=args.chunk_size, seed=0)
            t = time.perf_counter()
            res = partition(cfg, backend=ScriptedBackend(script=seeded_answers, delay=args.delay),
                            command="bench", engine=arms[arm])
            wall[arm].append(time.perf_counter() - t)
            gen[arm].append(res.run.seconds)
            completions = res.run.completions
            files = {p.name: p.read_bytes() for p in sorted((out / "work").glob("chunk-*.parquet"))}
            if chunks.setdefault(arm, files) != files:
                sys.exit(f"{arm}: chunk files differ between repeats")
    ray.shutdown()
    if any(chunks[a] != chunks["local"] for a in chunks):
        sys.exit("the engines' chunk files differ")
    med = {a: statistics.median(v) for a, v in gen.items()}
    print(f"{args.questions} questions x k={args.k}, chunks of {args.chunk_size}, {args.delay} s per prompt "
          f"(ideal: {args.questions * args.delay:.1f} s on one worker); medians of {args.repeats} run(s)")
    print(f"{'arm':8} {'generation s':>13} {'wall s':>8} {'completions/s':>14}")
    for a in arms:
        print(f"{a:8} {med[a]:13.2f} {statistics.median(wall[a]):8.2f} {completions / med[a]:14.1f}")
    print(f"chunk files identical across the three arms: {len(chunks['local'])} files")
    print(f"throughput ray-2 / ray-1: {med['ray-1'] / med['ray-2']:.2f}x (target >= 1.8x)")
    print(f"time ray-1 / local: {med['ray-1'] / med['local']:.3f} ({100 * (med['ray-1'] / med['local'] - 1):+.1f}%, "
          "target <= +5%)")


if __name__ == "__main__":
    main()
