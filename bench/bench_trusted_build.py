"""What a build pays for checking what it reads from an index as ``curriculum validate`` does (each stored ranking
it uses ranked again, each passage key it compares recomputed from the passage): a BM25-distractor build over a
HotpotQA-layout file against the same build with those checks turned off, alternated round by round in one process.

    python bench/bench_trusted_build.py [--records 20000] [--rounds 3]

The input is the real HotpotQA sample repeated with fresh ids and questions (so its passages repeat: the index is
small, the questions many); the index is built once, outside the timing. Prints each round's seconds and the ratio.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

from _common import big_hotpot_file

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from rag_retriever import CorpusIndex, IndexConfig, build_index

    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    path = big_hotpot_file(args.records)
    work = Path(tempfile.mkdtemp(prefix="rag-curriculum-bench-trusted-"))
    try:
        t = time.perf_counter()
        build_index(IndexConfig(dataset="hotpotqa", input=str(path), out=str(work / "idx")))
        print(f"index: {args.records:,} questions in {time.perf_counter() - t:.1f} s")
        checks = (CorpusIndex.check_stored, CorpusIndex.check_keys)
        times: dict[str, list[float]] = {"checked": [], "unchecked": []}
        load = os.getloadavg()[0]
        for r in range(args.rounds):
            for how in ("checked", "unchecked"):
                if how == "unchecked":
                    CorpusIndex.check_stored = lambda self, rows: None
                    CorpusIndex.check_keys = lambda self, pids, keys=None: None
                else:
                    CorpusIndex.check_stored, CorpusIndex.check_keys = checks
                cfg = BuildConfig(sources=[SourceSpec("hotpotqa", str(path), None)], schedule="min-max",
                                  distractors="bm25", index=str(work / "idx"), out=str(work / f"c-{how}"),
                                  overwrite=True)
                t = time.perf_counter()
                build_curriculum(cfg, command="bench")
                times[how].append(time.perf_counter() - t)
                print(f"round {r + 1} {how:9s} {times[how][-1]:6.2f} s")
        CorpusIndex.check_stored, CorpusIndex.check_keys = checks
        best = {k: min(v) for k, v in times.items()}
        print(f"machine: {os.cpu_count()} CPUs, load average {load:.2f} before, {os.getloadavg()[0]:.2f} after")
        print(f"ratio: checked {best['checked']:.2f} s / unchecked {best['unchecked']:.2f} s = "
              f"{best['checked'] / best['unchecked']:.2f}x (best of {args.rounds})")
    finally:
        shutil.rmtree(work, ignore_errors=True)
