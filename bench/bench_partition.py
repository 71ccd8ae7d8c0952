"""The partition's overhead over the backend's raw generation, on the same prompts, in the same run.

Both arms use one backend instance (loaded once) and the same questions, sampling and per-question seeds:

- raw_engine: transformers itself, no toolkit: each prompt rendered as a script would (the chat template, or for
             a base model the completion-style text), then ``model.generate`` on batches of ``--batch-size`` prompts
             (sorted by length, as the backend batches them) with the same sampling and stop strings;
- raw:       ``backend.generate(prompts, sampling, seeds=...)``, every prompt in one call (the strictest baseline);
- partition: ``partition(...)`` end to end: reading the shards, chunked generation (one call per chunk, each chunk
             flushed to ``work/``), parsing and scoring every completion, stats.parquet, three shard directories
             with data cards and the pass-rate plot, partition.json.

The arms alternate ``--repeats`` times; the medians are compared. Target: overhead at most 5%. A second part
times the partition with an instant (scripted) backend on a larger input, which isolates its own cost per
question, and shows what it amounts to next to GPU generation speeds.

    python bench/bench_partition.py --threads 1 --repeats 5   # tiny random Qwen2 on the CPU (built on the spot)
    python bench/bench_partition.py --model Qwen/Qwen2.5-0.5B-Instruct --device cuda --questions 256 --k 8
    python bench/bench_partition.py --model GEMMA.gguf --dataset hotpotqa --K 1 --questions 16 --k 4 --max-tokens 32
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
MUSIQUE = SHARED / "musique" / "musique_ans_v1.0_train.sample100.jsonl"
HOTPOT = SHARED / "hotpotqa" / "hub_distractor_validation.sample300.jsonl"


def build_input(out: Path, questions: int, K: int, dataset: str | None = None) -> Path:
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum

    if dataset is None:
        dataset = "musique" if questions <= 100 else "hotpotqa"
    src = MUSIQUE if dataset == "musique" else HOTPOT
    build_curriculum(BuildConfig(sources=[SourceSpec(dataset, str(src), questions, K=K)], schedule="max",
                                 out=str(out), seed=0, setting="curriculum", allow_split_mismatch=True),
                     command="bench")
    return out


def tiny_model(out: Path) -> Path:
    sys.path.insert(0, str(ROOT / "tests"))
    from support.tiny_model import build_tiny_model

    return build_tiny_model(out, SHARED)


def bench_generation(args: argparse.Namespace, work: Path) -> dict:
    from rag_curriculum.generation import SamplingConfig, get_backend
    from rag_curriculum.generation.runner import question_seed
    from rag_curriculum.partition import PartitionConfig, partition
    from rag_curriculum.shards import read_table

    shards = build_input(work / "input", args.questions, args.K, args.dataset)
    model = args.model or str(tiny_model(work / "tiny-model"))
    backend = get_backend("transformers", model=model, device=args.device, batch_size=args.batch_size)
    table = read_table(shards, columns=["id", "prompt"])
    ids = table.column("id").to_pylist()
    prompts = table.column("prompt").to_pylist()
    sampling = SamplingConfig(n=args.k, temperature=1.0, top_p=1.0, max_tokens=args.max_tokens, seed=0)
    seeds = [question_seed(0, i) for i in ids]
    backend.generate(prompts[: args.batch_size], sampling, seeds=seeds[: args.batch_size])  # warm-up

    chunks = [list(range(i, min(i + args.chunk_size, len(ids)))) for i in range(0, len(ids), args.chunk_size)]
    times: dict[str, list[float]] = {"raw_engine": [], "raw": [], "raw_chunks": [], "partition": []}
    raw_engine = raw_engine_arm(backend, prompts, sampling, seeds, args.batch_size)
    inside: list[float] = []
    outside: list[float] = []  # partition time not spent in the backend, per run
    arms = list(times)
    for r in range(args.repeats):
        for arm in arms[r % len(arms):] + arms[:r % len(arms)]:  # rotate the order: no arm always runs first
            t = time.perf_counter()
            if arm == "raw_engine":
                raw_engine()
            elif arm == "raw":
                backend.generate(prompts, sampling, seeds=seeds)
            elif arm == "raw_chunks":  # the very calls the partition makes, without the partition
                for c in chunks:
                    backend.generate([prompts[i] for i in c], sampling, seeds=[seeds[i] for i in c])
            else:
                out = work / f"partition-{r}"
                cfg = PartitionConfig(shards=str(shards), out=str(out), backend="transformers", model=model,
                                      samples=args.k, max_tokens=args.max_tokens, chunk_size=args.chunk_size, seed=0,
                                      balance=True)
                res = partition(cfg, backend=backend, command="bench")
                inside.append(res.run.backend_seconds)
                assert res.complete and res.counts["questions"] == len(ids)
            times[arm].append(time.perf_counter() - t)
            if arm == "partition":
                outside.append(times[arm][-1] - res.run.backend_seconds)
                shutil.rmtree(out)
    best = {k: min(v) for k, v in times.items()}
    return {"model": model, "device": str(backend.device), "questions": len(ids), "k": args.k,
            "max_tokens": args.max_tokens, "chunk_size": args.chunk_size, "batch_size": args.batch_size,
            "best": best, "median": {k: statistics.median(v) for k, v in times.items()}, "runs": times,
            "partition_inside_backend": min(inside), "partition_outside_backend": min(outside)}


def raw_engine_arm(backend, prompts, sampling, seeds, batch_size):
    """transformers without the toolkit: what a script of its own would run on the same prompts (rendered the way
    the model expects: its chat template, or the completion-style text for a base model), the same batches, sampling
    and stop strings. Returns a function that runs it once."""
    import torch

    from rag_curriculum.prompts import completion_prompt

    tok, model = backend.tokenizer, backend.model
    texts, stops, special = [], set(), not getattr(tok, "chat_template", None)
    for p in prompts:
        if special:
            c = completion_prompt(p)
            texts.append(c.text)
            stops.update(c.stop)
        else:
            texts.append(tok.apply_chat_template(p, add_generation_prompt=True, tokenize=False))
    ids = [tok(t, add_special_tokens=special)["input_ids"] for t in texts]
    order = sorted(range(len(ids)), key=lambda i: (len(ids[i]), i))
    pad = tok.pad_token_id
    kw = dict(max_new_tokens=sampling.max_tokens, do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p,
              top_k=0, num_return_sequences=sampling.n, pad_token_id=pad)
    if stops:
        kw.update(stop_strings=sorted(stops), tokenizer=tok)

    def run() -> None:
        for start in range(0, len(order), batch_size):
            batch = order[start:start + batch_size]
            width = max(len(ids[i]) for i in batch)
            input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for r, i in enumerate(batch):
                input_ids[r, width - len(ids[i]):] = torch.tensor(ids[i])
                mask[r, width - len(ids[i]):] = 1
            torch.manual_seed(seeds[batch[0]] % (2**63))
            with torch.no_grad():
                out = model.generate(input_ids=input_ids, attention_mask=mask, **kw)
            tok.batch_decode(out[:, width:], skip_special_tokens=True)

    return run


def bench_own_cost(args: argparse.Namespace, work: Path) -> dict:
    """The partition with an instant backend: everything but generation. Timed at two input sizes, so the fixed
    cost (plot, cards, files) and the cost per question (prompts, chunks, parsing and F1 of k completions, rows)
    are told apart."""
    from rag_curriculum.generation._scripted import ScriptedBackend
    from rag_curriculum.partition import PartitionConfig, partition

    filler = "The passages say several things about this. " * 20  # ~900 characters of reasoning

    def script(messages, n, seed):
        rnd = random.Random(seed)
        return [f"<reasoning>\n{filler}\n</reasoning>\n<answer>\nFinal answer: {rnd.choice(['yes', 'no', 'x'])}\n"
                f"Supporting passages: a, b\n</answer>" for _ in range(n)]

    def once(shards: Path, tag: str) -> float:
        out = work / f"own-{tag}"
        t = time.perf_counter()
        partition(PartitionConfig(shards=str(shards), out=str(out), backend="scripted", samples=8, chunk_size=64,
                                  balance=True), backend=ScriptedBackend(script=script), command="bench")
        took = time.perf_counter() - t
        shutil.rmtree(out)
        return took

    small, large = build_input(work / "in-100", 100, 10), build_input(work / "in-300", 300, 10)
    once(small, "warm-up")
    t_small = min(once(small, f"s{r}") for r in range(args.repeats))
    t_large = min(once(large, f"l{r}") for r in range(args.repeats))
    per_q = (t_large - t_small) / 200
    return {"k": 8, "t_100": t_small, "t_300": t_large, "ms_per_question": per_q * 1e3,
            "fixed_s": t_small - 100 * per_q}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="model path or Hub id [default: a tiny random Qwen2 built on the spot]")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--questions", type=int, default=64)
    ap.add_argument("--K", type=int, default=3, help="level of the rows (passages per prompt) [default: 3]")
    ap.add_argument("--dataset", choices=("musique", "hotpotqa"), help="[default: musique up to 100 questions]")
    ap.add_argument("--skip-own-cost", action="store_true", help="only the generation arms")
    ap.add_argument("--k", type=int, default=4, help="samples per question")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--chunk-size", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads [default: torch's]")
    ap.add_argument("--json", action="store_true", help="print the results as JSON too")
    args = ap.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="rag-curriculum-bench-partition-"))
    try:
        g = bench_generation(args, work)
        o = None if args.skip_own_cost else bench_own_cost(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    b, m = g["best"], g["median"]
    n_comp = g["questions"] * g["k"]
    print(f"model: {g['model']} on {g['device']}; {g['questions']} questions x k={g['k']}, max_tokens "
          f"{g['max_tokens']}, chunk {g['chunk_size']}, batch {g['batch_size']}; best (median) of {args.repeats}")
    for key, label in (("raw_engine", "transformers generate, no toolkit"), ("raw", "backend, one call"),
                       ("raw_chunks", "backend, the partition's calls"), ("partition", "partition end to end")):
        print(f"  {label:36s} {b[key]:7.2f} s ({m[key]:7.2f})  {n_comp / b[key]:8.1f} completions/s")
    outside = g["partition_outside_backend"]
    print(f"  partition, of which inside backend  {g['partition_inside_backend']:7.2f} s; outside: {outside:.2f} s "
          f"({100 * outside / b['partition']:.1f}%: reading, seeds, chunk files, scoring, outputs)")
    print(f"partition / transformers generate: {b['partition'] / b['raw_engine']:.3f} (target <= 1.05)")
    print(f"overhead vs the same calls:  {100 * (b['partition'] / b['raw_chunks'] - 1):+5.1f}% (target <= 5%)")
    print(f"overhead vs one single call: {100 * (b['partition'] / b['raw'] - 1):+5.1f}% (includes the cost of "
          "chunking: fewer prompts to sort by length per call)")
    if o is None:
        return
    print(f"partition's own cost (instant backend, k=8, ~1 KB completions): {o['fixed_s']:.2f} s fixed + "
          f"{o['ms_per_question']:.3f} ms per question (100 questions: {o['t_100']:.2f} s, 300: {o['t_300']:.2f} s)")
    q40k = o["fixed_s"] + 40_000 * o["ms_per_question"] / 1e3
    print(f"  for 40,000 questions: {q40k:.0f} s; next to generation at 10 / 50 / 200 completions/s per process "
          f"(7B-class models): " + " / ".join(f"{100 * q40k / (40_000 * 8 / r):.2f}%" for r in (10, 50, 200)))
    if args.json:
        print(json.dumps({"generation": g, "own_cost": o}, indent=2))


if __name__ == "__main__":
    main()
