"""A miniature of RAG-RL's curriculum comparison (Table 3, section 5.4) on a CPU: the same warm-started tiny model
trained with GRPO on min-max, max, linear and shuffled curricula of the same questions, the same budget (one pass
over the rows) and several seeds, then evaluated on held-apart rows (MuSiQue dev, distractor setting) by
`curriculum eval`: answer, citation and joint F1 and the share of valid formats, mean and 95% confidence interval
over seeds, beside the warm-started model untrained.

    python bench/bench_curricula.py [--seeds 3] [--n 24] [--eval-rows 20] [--out outputs/bench-curricula]

Reported, not asserted. The limits of a miniature, plainly: a 2-layer, width-128 model made on the spot, warm-started
on 8 rows, trained for one pass over 24 questions; what it can learn in that time is the output format and the
citation habit, not multi-hop reading, so the comparison says how the schedules move a model's format and citations
on new questions, not how they move a 7B model's answers. The paper's setting: Qwen2.5-7B, thousands of rows, K = 20.

Writes OUT/table.md, OUT/curricula.png and OUT/results.json; prints the table and the wall time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
SCHEDULES = {  # name: curriculum build arguments
    "min-max": ["--schedule", "min-max"],
    "max": ["--schedule", "max"],
    "linear": ["--schedule", "linear"],
    "shuffled": ["--schedule", "linear", "--order", "shuffled"],
}
METRICS = ("answer_f1", "citation_f1", "joint_f1", "format_valid")
T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}  # two-sided t, df


def curriculum(*args: object) -> None:
    cli = Path(sys.executable).parent / "curriculum"
    r = subprocess.run([str(cli), *map(str, args)], capture_output=True, text=True)
    if r.returncode:
        sys.exit(f"curriculum {' '.join(map(str, args))} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")


def mean_ci(values: list[float]) -> tuple[float, float]:
    m = statistics.mean(values)
    if len(values) < 2:
        return m, float("nan")
    return m, T95.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--n", type=int, default=24, help="training questions per curriculum (one pass: n / 2 steps)")
    ap.add_argument("--K", type=int, default=3)
    ap.add_argument("--eval-rows", type=int, default=20)
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    ap.add_argument("--out", type=Path, default=ROOT / "outputs" / "bench-curricula")
    a = ap.parse_args()
    from rag_curriculum.train import compose_train_config, train

    start = time.perf_counter()
    out = a.out
    out.mkdir(parents=True, exist_ok=True)
    train_file = a.data / "musique" / "musique_ans_v1.0_train.sample100.jsonl"
    dev_file = a.data / "musique" / "musique_ans_v1.0_dev.sample200.jsonl"
    warm_rows, warm = out / "warm-rows", out / "tiny-warm"
    if not (warm / "warm_start.json").exists():
        curriculum("build", "--dataset", "musique", "--input", train_file, "--schedule", "min-max", "--K", 3, "--n", 48,
                   "--out", warm_rows, "--overwrite", "--no-progress")
        curriculum("warm-start", warm_rows, "--out", warm, "--overwrite")
    evalset = out / "eval" / "musique-distractor"
    curriculum("build", "--setting", "distractor", "--dataset", "musique", "--input", dev_file, "--n", a.eval_rows,
               "--out", evalset, "--overwrite", "--no-progress")
    models = [f"base={warm}"]
    budget = a.n // 2
    for name, args in SCHEDULES.items():
        rows = out / f"rows-{name}"
        curriculum("build", "--dataset", "musique", "--input", train_file, "--K", a.K, "--n", a.n, *args,
                   "--out", rows, "--overwrite", "--no-progress")
        for seed in range(a.seeds):
            run_dir = out / "train" / f"{name}-seed{seed}"
            if not (run_dir / "model.safetensors").exists():
                cfg = compose_train_config("cpu-learn", [
                    f"model.name_or_path={warm}", f"data.shards={rows}", "data.max_rows=null",
                    f"run.output_dir={run_dir}", f"grpo.seed={seed}", f"grpo.max_steps={budget}",
                    "grpo.save_strategy=no", "run.save_final=true"])
                train(cfg)
            models.append(f"{name}-seed{seed}={run_dir}")
    trained = time.perf_counter() - start
    run = out / "eval-run"
    curriculum("eval", "--backend", "transformers", *[x for m in models for x in ("--model", m)], "--data", evalset,
               "--samples", a.samples, "--max-tokens", 128, "--out", run, "--overwrite", "--no-progress")
    summary = json.loads((run / "summary.json").read_text())
    by_model = {e["model"]: e["overall"] for e in summary["evals"]}
    rows_out = []
    for name in ["base", *SCHEDULES]:
        names = ["base"] if name == "base" else [f"{name}-seed{s}" for s in range(a.seeds)]
        cells = {k: mean_ci([float(by_model[n][k]) for n in names]) for k in METRICS}
        rows_out.append({"curriculum": name if name != "base" else "warm start, untrained", "seeds": len(names),
                         **{k: {"mean": m, "ci95": ci} for k, (m, ci) in cells.items()}})
    wall = time.perf_counter() - start
    header = ("| curriculum | seeds | " + " | ".join(METRICS) + " |\n|---|---:|" + "---:|" * len(METRICS))
    lines = [header] + [
        f"| {r['curriculum']} | {r['seeds']} | " + " | ".join(
            f"{100 * r[k]['mean']:.1f}" + ("" if math.isnan(r[k]["ci95"]) else f" ± {100 * r[k]['ci95']:.1f}")
            for k in METRICS) + " |" for r in rows_out]
    note = (f"\n{a.n} training questions (MuSiQue train sample), K = {a.K}, {budget} GRPO steps of 2 prompts x 4 "
            f"generations each; {a.eval_rows} held-apart MuSiQue dev questions, distractor setting, {a.samples} "
            f"samples each; scores in %, ± the 95% confidence interval over seeds (t). Wall time {wall:.0f} s "
            f"(training and warm start {trained:.0f} s).\n")
    table = "\n".join(lines) + "\n" + note
    (out / "table.md").write_text(table)
    (out / "results.json").write_text(json.dumps({"rows": rows_out, "wall_s": wall, "args": {
        k: str(v) for k, v in vars(a).items()}}, indent=2) + "\n")
    _plot(rows_out, out / "curricula.png")
    print(table)
    print(f"wrote {out / 'table.md'}, {out / 'curricula.png'}")


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(METRICS), figsize=(3.2 * len(METRICS), 3.4), sharey=False)
    names = [r["curriculum"].replace("warm start, untrained", "untrained") for r in rows]
    for ax, k in zip(axes, METRICS, strict=True):
        means = [100 * r[k]["mean"] for r in rows]
        errs = [0 if math.isnan(r[k]["ci95"]) else 100 * r[k]["ci95"] for r in rows]
        bars = ax.bar(names, means, yerr=errs, capsize=4, color=["#999"] + ["#4878a8"] * (len(rows) - 1))
        ax.bar_label(bars, fmt="%.1f", fontsize=7)
        ax.set_ylim(0, max(1.0, *(m + e for m, e in zip(means, errs, strict=True))) * 1.15)  # scores are >= 0
        ax.set_title(k.replace("_", " "))
        ax.tick_params(axis="x", rotation=45, labelsize=8)
    axes[0].set_ylabel("% (95% CI over seeds)")
    fig.suptitle("Curricula, miniature: held-apart MuSiQue dev, distractor setting")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
