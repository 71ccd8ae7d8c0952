"""`curriculum profile`'s cost over the backend's raw generation, on the same prompts, in the same run.

Both arms use one backend instance (loaded once), the same questions, levels, sampling and per-prompt seeds:

- raw:        ``backend.generate(prompts, sampling, seeds=...)`` on every (question, level) prompt, in one call;
- raw_chunks: the very calls the profile makes (one per chunk of ``--chunk-size`` prompts), without the profile;
- profile:    ``profile(...)`` end to end: reading the adaptive shards, rendering each question at each level,
              chunked generation (each chunk flushed to ``work/``), scoring every sample, ``profile.parquet``,
              the summary with its bootstrap intervals, and the plot.

The arms alternate ``--repeats`` times, the order rotated; the medians are compared. Target (issue: "as fast as the
partition, within 1.05x the raw engine on the same prompts"): profile / raw_chunks at most 1.05.

    python bench/bench_profile.py --threads 1 --repeats 3       # tiny random Qwen2 on the CPU (built on the spot)
    python bench/bench_profile.py --model GEMMA.gguf --questions 8 --samples 4 --max-tokens 32
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
MUSIQUE = SHARED / "musique" / "musique_ans_v1.0_train.sample100.jsonl"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="a model path (default: a tiny random Qwen2 built here)")
    ap.add_argument("--questions", type=int, default=12)
    ap.add_argument("--K", type=int, default=8)
    ap.add_argument("--levels", default="1,2,4,8")
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--chunk-size", type=int, default=64, help="the profile's default")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
    from rag_curriculum.curricula.adaptive import LevelRenderer
    from rag_curriculum.generation import get_backend
    from rag_curriculum.generation.runner import question_seed
    from rag_curriculum.partition import ProfileConfig, profile
    from rag_curriculum.partition._profile import LEVEL_MARK
    from rag_curriculum.shards import read_manifest, read_table

    work = Path(tempfile.mkdtemp(prefix="bench-profile-"))
    try:
        shards = work / "adaptive"
        build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE), args.questions, K=args.K)],
                                     schedule="adaptive", out=str(shards), seed=0), command="bench")
        if args.model:
            model = args.model
        else:
            sys.path.insert(0, str(ROOT / "tests"))
            from support.tiny_model import build_tiny_model

            model = str(build_tiny_model(work / "tiny-model", SHARED))
        backend = get_backend("transformers", model=model, device="cpu", batch_size=args.batch_size)
        levels = [int(x) for x in args.levels.split(",")]
        cfg = lambda out: ProfileConfig(shards=str(shards), out=str(out), backend="transformers",  # noqa: E731
                                        model=model, samples=args.samples, max_tokens=args.max_tokens,
                                        levels=args.levels, chunk_size=args.chunk_size, seed=0)
        sampling = cfg(work / "x").sampling()
        rows = read_table(shards).to_pylist()
        renderer = LevelRenderer(read_manifest(shards), where=str(shards))
        prompts, ids = [], []
        for row in rows:
            prompts += [r["prompt"] for r in renderer.render([row] * len(levels), levels)]
            ids += [f"{row['id']}{LEVEL_MARK}{lv}" for lv in levels]
        seeds = [question_seed(0, i) for i in ids]
        chunks = [range(i, min(i + args.chunk_size, len(ids))) for i in range(0, len(ids), args.chunk_size)]
        backend.generate(prompts[:args.batch_size], sampling, seeds=seeds[:args.batch_size])  # warm-up

        times: dict[str, list[float]] = {"raw": [], "raw_chunks": [], "profile": []}
        arms = list(times)
        for r in range(args.repeats):
            for arm in arms[r % len(arms):] + arms[:r % len(arms)]:  # rotated: no arm always runs first
                out = work / f"profile-{r}"
                t = time.perf_counter()
                if arm == "raw":
                    backend.generate(prompts, sampling, seeds=seeds)
                elif arm == "raw_chunks":
                    for c in chunks:
                        backend.generate([prompts[i] for i in c], sampling, seeds=[seeds[i] for i in c])
                else:
                    res = profile(cfg(out), backend=backend, command="bench")
                    assert res.complete, res
                times[arm].append(time.perf_counter() - t)
                shutil.rmtree(out, ignore_errors=True)
        med = {k: statistics.median(v) for k, v in times.items()}
        figures = {"model": Path(model).name, "questions": len(rows), "levels": levels, "samples": args.samples,
                   "prompts": len(prompts), "max_tokens": args.max_tokens, "median_s": med, "runs_s": times,
                   "profile_over_raw_chunks": med["profile"] / med["raw_chunks"],
                   "profile_over_raw": med["profile"] / med["raw"]}
        print(f"{len(rows)} questions x {len(levels)} levels x {args.samples} samples, {args.max_tokens} tokens "
              f"({figures['model']}, CPU), medians of {args.repeats}:")
        for k, v in med.items():
            print(f"  {k:>10}: {v:7.2f} s")
        print(f"profile / raw_chunks = {figures['profile_over_raw_chunks']:.3f}x   (target <= 1.05x)")
        print(f"profile / raw        = {figures['profile_over_raw']:.3f}x")
        if args.json:
            args.json.write_text(json.dumps(figures, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
