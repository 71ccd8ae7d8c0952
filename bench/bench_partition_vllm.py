"""The whole partition against raw ``LLM.chat`` on the same prompts and seeds, with the real vLLM engine, in one run.

One engine is loaded once and serves both arms, which alternate ``--repeats`` times (the prefix cache is reset
before each, so no arm reuses the other's KV blocks):

- raw:       ``llm.chat(prompts, [SamplingParams(n=k, ..., seed=question_seed(seed, id)) ...])``: every prompt in one
             call, with the partition's own per-question seeds: the floor any vLLM pass@k script pays;
- partition: ``partition(...)`` end to end through the vllm backend: reading the shards, rendering and
             length-checking every prompt with the engine's tokenizer, chunked generation flushed to ``work/``,
             parsing and scoring every completion, stats.parquet, three shard directories with data cards and the
             pass-rate plot, partition.json.

The two arms must return the same completions (checked). Prints the ratio of the medians; target: at most 1.03.

    .venv-vllm/bin/python bench/bench_partition_vllm.py                         # tiny random Qwen2, vLLM's CPU build
    .venv-vllm/bin/python bench/bench_partition_vllm.py --model GEMMA.gguf --dataset hotpotqa --K 1 --max-tokens 32 \
        --questions 24 --eager    # a base model: raw LLM.generate on its completion-style text (no chat template)
    python bench/bench_partition_vllm.py --model Qwen/Qwen2.5-0.5B-Instruct --questions 500 --K 20   # a GPU
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from bench_partition import SHARED, build_input  # noqa: E402  (the same input as the transformers bench)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="model path or Hub id [default: a tiny random Qwen2 built on the spot]")
    ap.add_argument("--questions", type=int, default=100)
    ap.add_argument("--K", type=int, default=4, help="level of the rows (passages per prompt) [default: 4]")
    ap.add_argument("--dataset", choices=("musique", "hotpotqa"), help="[default: musique up to 100 questions]")
    ap.add_argument("--k", type=int, default=8, help="samples per question (RAG-RL: 8)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--chunk-size", type=int, default=256)
    ap.add_argument("--max-model-len", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--eager", action="store_true", help="enforce_eager (no torch.compile warm-up)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON too")
    args = ap.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")

    from rag_curriculum.generation import SamplingConfig
    from rag_curriculum.generation._vllm_backend import VLLMBackend
    from rag_curriculum.generation.runner import question_seed
    from rag_curriculum.partition import PartitionConfig, partition
    from rag_curriculum.shards import read_table

    work = Path(tempfile.mkdtemp(prefix="rag-curriculum-bench-partition-vllm-"))
    try:
        shards = build_input(work / "input", args.questions, args.K, args.dataset)
        model = args.model
        if model is None:
            sys.path.insert(0, str(ROOT / "tests"))
            from support.tiny_model import build_tiny_model

            model = str(build_tiny_model(work / "tiny-model", SHARED, hidden_size=128, heads=2))
        backend = VLLMBackend(model, max_model_len=args.max_model_len, enforce_eager=args.eager)
        llm = backend.llm
        table = read_table(shards, columns=["id", "prompt"])
        ids = table.column("id").to_pylist()
        prompts = table.column("prompt").to_pylist()
        sampling = SamplingConfig(n=args.k, temperature=1.0, top_p=1.0, max_tokens=args.max_tokens, seed=0)
        base = not getattr(llm.get_tokenizer(), "chat_template", None)
        if base:  # a base model: what a script of its own runs, LLM.generate on the completion-style text
            from rag_curriculum.prompts import completion_prompt

            rendered = [completion_prompt(p) for p in prompts]
            texts = [r.text for r in rendered]
            params = [backend.sampling_params(sampling, question_seed(0, i), r.stop)
                      for i, r in zip(ids, rendered, strict=True)]

            def raw_call(n):  # the first n prompts
                return llm.generate(texts[:n], params[:n], use_tqdm=False)
        else:
            params = [backend.sampling_params(sampling, question_seed(0, i)) for i in ids]

            def raw_call(n):
                return llm.chat(prompts[:n], params[:n], use_tqdm=False)
        raw_call(4)  # warm-up

        times: dict[str, list[float]] = {"raw": [], "partition": []}
        raw_texts = part_texts = None
        for r in range(args.repeats):
            for arm in (("raw", "partition") if r % 2 == 0 else ("partition", "raw")):
                llm.reset_prefix_cache()
                t = time.perf_counter()
                if arm == "raw":
                    outs = raw_call(len(prompts))
                    times[arm].append(time.perf_counter() - t)
                    raw_texts = [[(rendered[q].prefix if base else "") + c.text
                                  for c in sorted(o.outputs, key=lambda c: c.index)] for q, o in enumerate(outs)]
                else:
                    out = work / f"partition-{r}"
                    cfg = PartitionConfig(shards=str(shards), out=str(out), backend="vllm", model=model, samples=args.k,
                                          max_tokens=args.max_tokens, chunk_size=args.chunk_size, seed=0,
                                          keep_completions=True)
                    res = partition(cfg, backend=backend, command="bench")
                    times[arm].append(time.perf_counter() - t)
                    assert res.complete and res.counts["questions"] == len(ids), res.counts
                    import pyarrow.parquet as pq

                    part_texts = pq.read_table(out / "stats.parquet").column("base_completions").to_pylist()
                    shutil.rmtree(out)
        backend.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    same = raw_texts == part_texts
    med = {k: statistics.median(v) for k, v in times.items()}
    ratio = med["partition"] / med["raw"]
    n_comp = len(ids) * args.k
    import vllm

    print(f"vLLM {vllm.__version__} on {backend.platform}; model {model if args.model else 'tiny random Qwen2'}; "
          f"{len(ids)} questions x k={args.k}, max_tokens {args.max_tokens}, chunk {args.chunk_size}; "
          f"median of {args.repeats}")
    raw_name = "raw LLM.generate, one call" if base else "raw LLM.chat, one call"
    print(f"  {raw_name:25s}{med['raw']:7.2f} s  {n_comp / med['raw']:8.1f} completions/s")
    print(f"  partition end to end     {med['partition']:7.2f} s  {n_comp / med['partition']:8.1f} completions/s")
    print(f"  same completions in both arms: {same}")
    print(f"ratio partition / raw: {ratio:.3f} ({100 * (ratio - 1):+.1f}%; target <= 1.03)")
    if args.json:
        print(json.dumps({"times": times, "median": med, "ratio": ratio, "same": same}, indent=2))
    if not same:
        sys.exit("the partition's completions differ from raw LLM.chat's on the same prompts and seeds")


if __name__ == "__main__":
    main()
