"""Does GRPO teach the warm-started tiny model, and would the learning test see a broken trainer? On a CPU.

One warm start (``curriculum warm-start``, seed 0) of the tiny model on the first 8 rows of a min-max MuSiQue build,
then ``recipe=cpu-learn`` (32 GRPO steps of 2 prompts x 4 generations over those rows) run; with ``--route
search-r1``, a search agent's warm start (``--agent search-r1`` against the BM25 index of the same train file, top
2) and ``recipe=search-learn`` (48 steps of 2 prompts x 4 trajectories, Search-R1's exact-match reward):

1. with ``--seeds`` GRPO seeds (0, 1, 2; ``--seed 42 ...`` names them): the gain of the mean reward of the last
   quarter of the steps (8 of 32, 12 of 48) over the first, its mean and its spread across seeds (the learning
   test, tests/train/test_learning.py, asserts a margin set from these);
2. with a bug planted in TRL's GRPO step, the first seed (what Search-R1 PR#21, RAGEN#71, TRL#4974,
   verl#3720/#3960 found in the field): the advantages zeroed; the rewards shuffled across the batch's samples
   (each completion scored with another's reward); the completion loss mask inverted (the loss on the padding after
   each completion, none on the completion); with ``--route search-r1``, also the retrieved tokens trained (every
   ``<information>`` token given mask 1, Search-R1 PR#21). Each should gain nothing: the learning test must fail
   on each;
3. with ``--control``, each seed again at learning rate 0 (nothing learnt): its "gain" is what the schedule alone
   moves between the first and the last steps (other rows, other levels), the baseline a gain is read against.

``--rows dev`` builds from the MuSiQue dev sample instead of the train sample the recipes were tuned on (held-out
rows: the warm start, the index and the training all on them).

    python bench/bench_learning.py [--route rag-rl|search-r1] [--seeds 3 | --seed 42 ...] [--rows train|dev]
                                   [--control] [--bugs ''] [--data ../shared/data]

Prints a line as each run ends, then one row per run (gain, first and last mean reward and exact match, wall
time), the controls' gain and each seed's gain over its control, and the ratio of the smallest healthy gain to the
largest gain of a planted bug. No timed assertion: these machines are noisy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]


ROWS = {"train": "musique_ans_v1.0_train.sample100.jsonl", "dev": "musique_ans_v1.0_dev.sample200.jsonl"}


def build_and_warm(tmp: Path, data: Path, route: str, rows_from: str = "train") -> tuple[Path, Path, Path | None]:
    from rag_retriever import IndexConfig, build_index

    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
    from rag_curriculum.train import WarmStartConfig, warm_start

    train = data / "musique" / ROWS[rows_from]
    rows = tmp / "musique-learn"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(train), n=48, K=3)], schedule="min-max",
                                 out=str(rows), seed=0, allow_split_mismatch=rows_from != "train"), command="bench")
    index = None
    if route == "search-r1":
        index = tmp / "index"
        build_index(IndexConfig(dataset="musique", input=str(train), out=str(index)))
        cfg = WarmStartConfig(shards=str(rows), out=str(tmp / "tiny-warm"), agent="search-r1", retriever=str(index),
                              topk=2)
    else:
        cfg = WarmStartConfig(shards=str(rows), out=str(tmp / "tiny-warm"))
    return rows, warm_start(cfg).out, index


def run(rows: Path, model: Path, index: Path | None, out: Path, seed: int, bug: str | None = None) -> dict:
    """One cpu-learn (or, with an ``index``, search-learn) run; ``bug`` planted in TRL's GRPOTrainer (or the
    rollout) for its duration."""
    import torch
    from trl import GRPOTrainer

    from rag_curriculum.train import SearchRollout, compose_train_config, learning_summary, train

    original = GRPOTrainer._generate_and_score_completions

    def planted(self, inputs):
        batch = original(self, inputs)
        if bug == "advantages zeroed":
            batch["advantages"] = torch.zeros_like(batch["advantages"])
        elif bug == "rewards shuffled":  # each completion credited with another's advantage
            g = torch.Generator().manual_seed(int(self.state.global_step))
            batch["advantages"] = batch["advantages"][torch.randperm(len(batch["advantages"]), generator=g)]
        elif bug == "loss mask inverted":
            batch["completion_mask"] = 1 - batch["completion_mask"]
        return batch

    rollout = SearchRollout.__call__

    def information_trained(self, prompts, trainer):  # every token of the trajectory in the loss
        got = rollout(self, prompts, trainer)
        got["env_mask"] = [[1] * len(m) for m in got["env_mask"]]
        return got

    recipe, em = ("search-learn", "search/exact_match") if index else ("cpu-learn", "rag_rl/exact_match")
    overrides = [f"model.name_or_path={model}", f"data.shards={rows}", f"run.output_dir={out}", f"grpo.seed={seed}",
                 "grpo.save_strategy=no"] + ([f"agent.retriever={index}"] if index else [])
    if bug == "learning rate 0":  # the control: the same run, nothing learnt
        overrides.append("grpo.learning_rate=0")
        bug = None
        control = True
    else:
        control = False
    cfg = compose_train_config(recipe, overrides)
    GRPOTrainer._generate_and_score_completions = planted if bug else original
    if bug == "retrieved tokens trained":
        SearchRollout.__call__ = information_trained
    try:
        start = time.perf_counter()
        result = train(cfg)
        seconds = time.perf_counter() - start
    finally:
        GRPOTrainer._generate_and_score_completions = original
        SearchRollout.__call__ = rollout
    s = learning_summary(result.log_history, keys=["reward", em])  # a quarter of the steps, as the run prints
    return {"seed": seed, "bug": "learning rate 0" if control else bug or "-",
            "gain": s["reward"]["last"] - s["reward"]["first"],
            "first": s["reward"]["first"], "last": s["reward"]["last"],
            "em_first": s[em]["first"], "em_last": s[em]["last"],
            "seconds": seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3, help="GRPO seeds 0 to N-1")
    ap.add_argument("--seed", type=int, action="append", help="these GRPO seeds instead (repeatable; 42: the recipe's)")
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--route", choices=["rag-rl", "search-r1"], default="rag-rl")
    ap.add_argument("--bugs", default=None, help="comma-separated; default: all of the route's")
    ap.add_argument("--rows", choices=sorted(ROWS), default="train", help="the MuSiQue sample the rows come from")
    ap.add_argument("--control", action="store_true", help="each seed again at learning rate 0")
    a = ap.parse_args()
    bugs = ["advantages zeroed", "rewards shuffled", "loss mask inverted"]
    if a.route == "search-r1":
        bugs.append("retrieved tokens trained")
    if a.bugs is not None:
        bugs = [b for b in a.bugs.split(",") if b]
    from rich.console import Console
    from rich.table import Table

    with tempfile.TemporaryDirectory(prefix="bench-learning-") as t:
        tmp = Path(t)
        start = time.perf_counter()
        rows, model, index = build_and_warm(tmp, a.data, a.route, a.rows)
        warm = time.perf_counter() - start
        seeds = a.seed or list(range(a.seeds))
        runs = [(tmp / f"seed{s}", s, None) for s in seeds]
        if a.control:
            runs += [(tmp / f"control{s}", s, "learning rate 0") for s in seeds]
        runs += [(tmp / f"bug{i}", seeds[0], bug) for i, bug in enumerate(bugs)]
        results = []
        for out, seed, bug in runs:  # each run's line as it ends: a bench stopped midway keeps what it measured
            results.append(r := run(rows, model, index, out, seed, bug))
            print(f"bench run: seed {seed}, {r['bug']}: gain {r['gain']:+.3f} (reward {r['first']:.3f} -> "
                  f"{r['last']:.3f}, EM {r['em_first']:.3f} -> {r['em_last']:.3f}), {r['seconds']:.0f} s", flush=True)
    recipe = "search-learn" if a.route == "search-r1" else "cpu-learn"
    table = Table(title=f"{recipe} on the {a.rows} sample's rows: mean reward of the last quarter of the steps minus "
                        f"the first quarter (warm start {warm:.0f} s)", title_justify="left")
    for col in ("seed", "planted bug", "gain", "reward first", "reward last", "EM first", "EM last", "seconds"):
        table.add_column(col, justify="right")
    for r in results:
        table.add_row(str(r["seed"]), r["bug"], f"{r['gain']:+.2f}", f"{r['first']:.2f}", f"{r['last']:.2f}",
                      f"{r['em_first']:.2f}", f"{r['em_last']:.2f}", f"{r['seconds']:.0f}")
    Console(width=120).print(table)
    healthy = [r["gain"] for r in results if r["bug"] == "-"]
    controls = [r["gain"] for r in results if r["bug"] == "learning rate 0"]
    broken = [r["gain"] for r in results if r["bug"] not in ("-", "learning rate 0")]
    if len(healthy) > 1:
        print(f"healthy gain {statistics.mean(healthy):.2f} +- {statistics.stdev(healthy):.2f} (sd over "
              f"{len(healthy)} seeds), smallest {min(healthy):.2f}")
    if controls:
        over = [h - c for h, c in zip(healthy, controls, strict=False)]
        print(f"learning rate 0 (the control): gain {statistics.mean(controls):.2f}; healthy minus control, seed by "
              f"seed: {', '.join(f'{x:+.2f}' for x in over)} (mean {statistics.mean(over):.2f})")
    if broken:
        print(f"largest gain with a planted bug {max(broken):.2f}; smallest healthy / largest broken: "
              f"{min(healthy) / max(max(broken), 1e-9):.1f}x" if max(broken) > 0 else
              f"largest gain with a planted bug {max(broken):.2f} (none positive)")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
