"""Benchmark: dynamic sampling (DAPO) against unfiltered GRPO in the same run, on a reward whose groups are half
zero-variance.

    python bench/bench_dynamic.py                        # 6 steps x 4 prompts x 2 generations
    python bench/bench_dynamic.py --steps 10 --prompts 8
    python bench/bench_dynamic.py --refill missing       # or batch (DAPO's / verl's whole-batch refills)

Both runs train the same tiny Qwen2-style model (tests/support/tiny_model.py, built here, CPU) with TRL's GRPOTrainer
through the toolkit's ``train`` on the same real MuSiQue questions (a min-max curriculum, K = 3), with the same
scripted reward: half the rows (a seeded two of every four) get the same reward for every completion (a zero-variance group),
the others one right and one wrong. The unfiltered run trains every group it generates; the filtered run
(``dynamic.enabled=true``, the defaults: spread 0, up to 4 refills, ``--refill`` estimate, retire) drops the constant groups and refills in
curriculum order.

Measured, per run: the fraction of trained groups that are informative (target >= 90% filtered), the groups
generated per informative group trained (2.0 unfiltered on this reward), the wall time per informative group, and
the filter's own time outside generation (choosing the rows, reading the metric, merging TRL's outputs, the record)
as a share of the step time (target <= 3%), the first step left out (warm-up).
"""

from __future__ import annotations

import argparse
import logging
import random
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

DATA = ROOT.parent / "shared" / "data"
MUSIQUE = DATA / "musique" / "musique_ans_v1.0_train.sample100.jsonl"
G = 2


class HalfConstant:
    """A constant reward (1.0) for the rows in ``constant``, one right and one wrong completion for the others."""

    __name__ = "half_constant"

    def __init__(self, constant: set[int]):
        self.constant = constant

    def __call__(self, completions, curriculum_index, **kwargs):
        return [1.0 if idx in self.constant else float(i % 2) for i, idx in enumerate(curriculum_index)]


def run(kind: str, shards: Path, model: Path, out: Path, steps: int, prompts: int, refill: str) -> dict:
    from rag_curriculum.train import compose_train_config, train
    from rag_curriculum.train._dynamic import read_records

    shutil.rmtree(out, ignore_errors=True)
    cfg = compose_train_config("rag-rl-min-max", [
        f"model.name_or_path={model}", f"data.shards={shards}", f"run.output_dir={out}",
        f"batch.prompts_per_step={prompts}", f"batch.per_device_completions={prompts}", f"grpo.num_generations={G}",
        "grpo.max_completion_length=8", "grpo.use_vllm=false", "grpo.bf16=false", "grpo.beta=0",
        "grpo.activation_checkpointing=false", "grpo.report_to=none", "grpo.dataloader_pin_memory=false",
        f"grpo.max_steps={steps}", "grpo.save_strategy=no", "run.save_final=false", "grpo.logging_steps=1",
        "rewards=[{name: bench-half-constant}]", f"dynamic.enabled={kind == 'filtered'}", f"dynamic.refill={refill}"])
    result = train(cfg)
    logged = [h for h in result.log_history if "step_time" in h][1:]  # the first step: warm-up
    step = statistics.mean(h["step_time"] for h in logged)
    if kind == "filtered":
        recs = read_records(result.dynamic_file)[1:]
        trained = sum(len(r["trained"]) for r in recs)
        informative_trained = trained  # the filter trains informative groups only; masked slots are counted apart
        generated = sum(r["generated_groups"] for r in recs)
        filter_s = statistics.mean(r["filter_seconds"] for r in recs)
        slots = len(recs) * prompts
    else:
        zero = [h["frac_reward_zero_std"] for h in logged]
        slots = len(logged) * prompts
        informative_trained = round(sum((1 - z) * prompts for z in zero))
        generated = slots
        filter_s = 0.0
    return {"step": step, "informative_share": informative_trained / slots,
            "generated_per_informative": generated / max(informative_trained, 1),
            "seconds_per_informative": step * len(logged) / max(informative_trained, 1), "filter": filter_s,
            "steps": len(logged) + 1}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--refill", choices=("estimate", "missing", "batch"), default="estimate",
                    help="dynamic.refill of the filtered run")
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    import torch
    from support.tiny_model import build_tiny_model

    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
    from rag_curriculum.rewards import register_reward

    torch.set_num_threads(1)
    rows = min(args.steps * args.prompts * 3, 100)  # enough for the refills (about 2x at 50% constant)
    rng = random.Random(0)  # half of every 4 consecutive rows, so any stretch of the curriculum is half constant
    constant = {b + i for b in range(0, rows, 4) for i in rng.sample(range(4), 2) if b + i < rows}
    register_reward("bench-half-constant", lambda: HalfConstant(constant), overwrite=True)
    work = Path(tempfile.mkdtemp(prefix="bench-dynamic-"))
    try:
        model = build_tiny_model(work / "model", DATA)
        shards = work / "musique-min-max"
        build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE), n=rows)], schedule="min-max",
                                     K=3, out=str(shards), seed=0, tokenizer=str(model), workers=1))
        res = {kind: run(kind, shards, model, work / f"run-{kind}", args.steps, args.prompts, args.refill)
               for kind in ("unfiltered", "filtered")}
        print(f"{args.steps} steps x {args.prompts} prompts x {G} generations, tiny model, CPU; "
              f"{len(constant)} of {rows} rows constant (zero-variance groups)")
        print(f"{'':12s} {'informative/trained':>20s} {'generated/informative':>22s} {'s/informative':>14s} "
              f"{'step s':>8s} {'filter ms':>10s}")
        for kind, r in res.items():
            print(f"{kind:12s} {r['informative_share']:20.2%} {r['generated_per_informative']:22.2f} "
                  f"{r['seconds_per_informative']:14.3f} {r['step']:8.3f} {r['filter'] * 1000:10.2f}")
        f, u = res["filtered"], res["unfiltered"]
        print(f"\nfiltered: {f['informative_share']:.1%} of trained groups informative (target >= 90%); the "
              f"filter's own time {f['filter'] * 1000:.2f} ms per step = {f['filter'] / f['step']:.2%} of the step "
              f"(target <= 3%)")
        print(f"generation per informative group: {f['generated_per_informative']:.2f} groups filtered vs "
              f"{u['generated_per_informative']:.2f} unfiltered (ratio {f['generated_per_informative'] / u['generated_per_informative']:.2f}); "
              f"wall per informative group {f['seconds_per_informative'] / u['seconds_per_informative']:.2f}x")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
