"""The search environment's overhead: multi-turn rollouts (`rag_curriculum.agents.run_rollouts`) against plain
generation of the very same prompts, seeds and token counts with the same backend (target: at most 10%).

The rollout runs through a recording wrapper that keeps every backend call (the conversations of a turn, their
seeds, the stop strings); the baseline then replays exactly those calls on the same backend, with nothing around
them. Same seeds, same prompts: the same tokens are generated, so the difference is the loop's own work (parsing
turns, retrieval on the real BM25 index, building the information blocks, re-rendering the conversations is part
of the backend call in both arms). Each round alternates the two arms; the median of the rounds is printed.

    python bench/bench_rollout.py                       # transformers, the tiny random model, 24 questions x 2
    python bench/bench_rollout.py --model Qwen/Qwen2.5-0.5B-Instruct --questions 64 --max-tokens 128

The first turn of each trajectory searches the question (scripted, so a random model searches too); later turns
are the model's own. With a tiny model, generation is fast, so the ratio here is an upper bound on the overhead a
real model sees.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
SHARED = ROOT.parent / "shared" / "data"
MUSIQUE = SHARED / "musique" / "musique_ans_v1.0_train.sample100.jsonl"


class Recording:
    """The real backend, each call recorded; the first turn (no assistant message yet) a scripted search."""

    name = "recording"

    def __init__(self, real):
        self.real = real
        self.tokenizer = real.tokenizer
        self.calls = []

    def generate(self, prompts, sampling, *, seeds=None, stop=None):
        out = [None] * len(prompts)
        later = [i for i, p in enumerate(prompts) if p[-1]["role"] == "assistant"]
        for i, p in enumerate(prompts):
            if p[-1]["role"] == "user":
                out[i] = [f"<think>search</think><search> {p[0]['content'].rsplit('Question: ', 1)[1]} </search>"]
        if later:
            call = ([prompts[i] for i in later], sampling, [seeds[i] for i in later], stop)
            self.calls.append(call)
            for i, g in zip(later, self.real.generate(call[0], sampling, seeds=call[2], stop=stop), strict=True):
                out[i] = g
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="a local model or Hub id (default: the tests' tiny random model)")
    ap.add_argument("--questions", type=int, default=24)
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=48, help="tokens per turn")
    ap.add_argument("--max-turns", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    from rag_retriever import IndexConfig, build_index, load_index

    from rag_curriculum.agents import IndexRetriever, RolloutConfig, run_rollouts
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
    from rag_curriculum.generation import SamplingConfig
    from rag_curriculum.generation._hf_backend import TransformersBackend
    from rag_curriculum.shards import read_rows

    work = Path(tempfile.mkdtemp(prefix="bench-rollout-"))
    model = args.model
    if model is None:
        from support.tiny_model import build_tiny_model

        model = str(build_tiny_model(work / "tiny", SHARED))
    build_index(IndexConfig(dataset="musique", input=str(MUSIQUE), out=str(work / "ix"), depth=20))
    retriever = IndexRetriever(load_index(work / "ix"))
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE), n=args.questions)],
                                 schedule="min-max", out=str(work / "rows"), workers=1))
    rows = read_rows(work / "rows")
    real = TransformersBackend(model, device="cpu", batch_size=16)
    sampling = SamplingConfig(temperature=1.0, max_tokens=args.max_tokens, seed=0)
    cfg = RolloutConfig(top_k=3, max_turns=args.max_turns)

    loop_s, plain_s = [], []
    stats = None
    for _ in range(args.rounds):
        rec = Recording(real)
        t = time.perf_counter()
        trajs = run_rollouts(rec, rows, retriever, sampling, n=args.samples, config=cfg)
        loop_s.append(time.perf_counter() - t)
        t = time.perf_counter()
        for prompts, s, seeds, stop in rec.calls:  # the same calls, nothing around them
            real.generate(prompts, s, seeds=seeds, stop=stop)
        plain_s.append(time.perf_counter() - t)
        stats = (len(trajs), sum(len(x.searches) for x in trajs), sum(x.turns for x in trajs), len(rec.calls))
    loop, plain = statistics.median(loop_s), statistics.median(plain_s)
    print(f"{stats[0]} trajectories, {stats[1]} searches, {stats[2]} model turns ({stats[3]} backend calls after "
          f"the scripted first turn); {args.rounds} rounds, medians")
    print(f"rollout loop       {loop:8.2f} s")
    print(f"plain generation   {plain:8.2f} s   (the same calls replayed)")
    print(f"overhead           {100 * (loop / plain - 1):+7.1f} %   (target: at most +10 %)")


if __name__ == "__main__":
    main()
