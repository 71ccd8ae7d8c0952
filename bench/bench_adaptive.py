"""Benchmark: the step time of an adaptive-curriculum run against the same run on a fixed min-max curriculum.

    python bench/bench_adaptive.py                       # 6 steps x 2 prompts x 2 generations, 3 interleaved repeats
    python bench/bench_adaptive.py --steps 12 --repeats 5

Both runs train the same tiny Qwen2-style model (tests/support/tiny_model.py, built here, CPU) with TRL's GRPOTrainer
through the toolkit's ``train`` on the same real MuSiQue questions (K = 3), with the same scripted reward, and show
the same levels at every step, so they do the same model work: the fixed run is the min-max curriculum (half the
steps at level 1, then K); the adaptive run stores its rows at K and lets the target-band controller choose, which
the scripted reward steers onto the same levels (half right while the run is in its first half: T stays at 1; all
right after: T jumps to K). The difference is the adaptive machinery: rendering every row at its level with the
builder's renderer, scoring each completion's success, the controller update, its log line and checkpoint state.
The adaptive run also scores every completion's exact match with the one scorer (the recipe's default success),
so that cost is in the measurement too. The target is a ratio of at most 1.03.

Step time is measured two ways around TRL's ``training_step`` (generation, rewards, loss and backward of one
optimiser step), the first step left out (warm-up): wall time (TRL's own ``step_time``) and the process's CPU time
(``time.process_time``, one torch thread), which other jobs on a shared machine disturb far less. The medians over
the repeats are compared, and the time spent inside the adaptive machinery is timed directly.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

DATA = ROOT.parent / "shared" / "data"
MUSIQUE = DATA / "musique" / "musique_ans_v1.0_train.sample100.jsonl"
K = 3
PROMPTS = 2
G = 2


class SteeredReward:
    """Half the completions right at first (target-band keeps T at 1: tanh(0) = 0), all right from step ``turn``
    on (T moves to K in one batch with eta = K, so the steps after ``turn`` are at K, as min-max's second half)."""

    __name__ = "steered"

    def __init__(self, turn: int):
        self.turn = turn

    def __call__(self, completions, trainer_state, **kwargs):
        if trainer_state.global_step + 1 >= self.turn:
            return [1.0] * len(completions)
        return [float(i % 2 == 0) for i in range(len(completions))]


def build(work: Path, model: Path, steps: int) -> tuple[Path, Path]:
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    n = steps * PROMPTS
    out = {}
    for schedule in ("adaptive", "min-max"):
        out[schedule] = work / f"musique-{schedule}"
        build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE), n=n)], schedule=schedule, K=K,
                                     out=str(out[schedule]), seed=0, tokenizer=str(model), workers=1))
    return out["adaptive"], out["min-max"]


def run(kind: str, shards: Path, model: Path, out: Path, steps: int) -> tuple[list[float], list[int], float]:
    from rag_curriculum.train import compose_train_config, train
    from rag_curriculum.train.adaptive import AdaptiveHook

    shutil.rmtree(out, ignore_errors=True)
    extra = ["adaptive.controller=target-band", "adaptive.success=reward", f"adaptive.kwargs.eta={K}",
             "adaptive.plot=true"] if kind == "adaptive" else []
    cfg = compose_train_config("rag-rl-adaptive" if kind == "adaptive" else "rag-rl-min-max", [
        f"model.name_or_path={model}", f"data.shards={shards}", f"run.output_dir={out}",
        f"batch.prompts_per_step={PROMPTS}", "batch.per_device_completions=2", f"grpo.num_generations={G}",
        "grpo.max_completion_length=8", "grpo.use_vllm=false", "grpo.bf16=false", "grpo.beta=0",
        "grpo.activation_checkpointing=false", "grpo.report_to=none", "grpo.dataloader_pin_memory=false",
        f"grpo.max_steps={steps}", "grpo.save_steps=4", "run.save_final=false", "grpo.logging_steps=1",
        "rewards=[{name: bench-steered}]", *extra])
    hook_time = [0.0]
    originals = {name: getattr(AdaptiveHook, name) for name in ("render", "scores", "update")}

    def timed(name):
        fn = originals[name]

        def wrapper(self, *a, **kw):
            t = time.perf_counter()
            try:
                if name == "scores":  # the exact-match success too (the recipe's default), computed and timed
                    self.success = "exact_match"
                    fn(self, *a, **kw)
                    self.success = "reward"
                return fn(self, *a, **kw)
            finally:
                hook_time[0] += time.perf_counter() - t
        return wrapper

    from trl import GRPOTrainer

    cpu: list[float] = []
    step_fn = GRPOTrainer.training_step

    def cpu_timed(self, *a, **kw):
        t = time.process_time()
        try:
            return step_fn(self, *a, **kw)
        finally:
            cpu.append(time.process_time() - t)

    for name in originals:
        setattr(AdaptiveHook, name, timed(name))
    GRPOTrainer.training_step = cpu_timed
    try:
        result = train(cfg)
    finally:
        for name, fn in originals.items():
            setattr(AdaptiveHook, name, fn)
        GRPOTrainer.training_step = step_fn
    logged = [h for h in result.log_history if "step_time" in h]
    levels = [int(h["curriculum/level_mean"]) for h in result.log_history if "curriculum/level_mean" in h]
    per_step = len(cpu) // steps  # training_step runs once per accumulation micro-batch
    cpu_steps = [sum(cpu[i:i + per_step]) for i in range(0, len(cpu), per_step)]
    return [h["step_time"] for h in logged], cpu_steps, levels, hook_time[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    import torch
    from support.tiny_model import build_tiny_model

    from rag_curriculum.rewards import register_reward

    torch.set_num_threads(1)  # a shared CPU: one thread per run keeps the two runs comparable

    work = Path(tempfile.mkdtemp(prefix="bench-adaptive-"))
    try:
        model = build_tiny_model(work / "model", DATA)
        adaptive, min_max = build(work, model, args.steps)
        register_reward("bench-steered", lambda: SteeredReward(args.steps // 2), overwrite=True)
        times: dict[str, list[float]] = {"adaptive": [], "min-max": []}
        cpu: dict[str, list[float]] = {"adaptive": [], "min-max": []}
        hook: list[float] = []
        for r in range(args.repeats):
            for kind, shards in (("min-max", min_max), ("adaptive", adaptive)) if r % 2 == 0 else (
                    ("adaptive", adaptive), ("min-max", min_max)):
                steps, cpu_steps, levels, hook_s = run(kind, shards, model, work / f"run-{kind}", args.steps)
                per_step, cpu_step = statistics.mean(steps[1:]), statistics.mean(cpu_steps[1:])
                times[kind].append(per_step)
                cpu[kind].append(cpu_step)
                if kind == "adaptive":
                    hook.append(hook_s / args.steps)
                print(f"repeat {r + 1} {kind:8s} step: wall {per_step * 1000:8.1f} ms, CPU {cpu_step * 1000:8.1f} ms"
                      f"  levels {levels}")
        a, f = statistics.median(times["adaptive"]), statistics.median(times["min-max"])
        ca, cf = statistics.median(cpu["adaptive"]), statistics.median(cpu["min-max"])
        print(f"\nmedian step: adaptive wall {a * 1000:.1f} ms / CPU {ca * 1000:.1f} ms, fixed min-max wall "
              f"{f * 1000:.1f} ms / CPU {cf * 1000:.1f} ms ({args.steps} steps of {PROMPTS} prompts x {G} generations, "
              f"tiny model, CPU)")
        print(f"adaptive machinery (render + success + update, exact match scored too): "
              f"{statistics.median(hook) * 1000:.2f} ms per step = {statistics.median(hook) / cf * 100:.2f}% of a "
              f"step's CPU time")
        print(f"overhead ratio adaptive / fixed: CPU {ca / cf:.3f}, wall {a / f:.3f} (target <= 1.03)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
