"""Throughput of the transformers backend on a larger randomly initialised model: CUDA when available, else the CPU
(with a smaller default model so it finishes).

The model is a Qwen2-architecture decoder with random weights (nothing is downloaded) and the small BPE tokenizer of
the test fixture; prompts are real partition prompts (MuSiQue at its hardest level by default). The script times
``TransformersBackend.generate`` on every prompt (n samples each), then the whole ``partition`` on the same
prompts, then ``generate`` again (the faster of the two is the baseline; ``--raw-once``: the first only), and prints
prompts/s, completions/s, generated tokens/s, peak GPU memory and the partition's overhead.
Random weights rarely emit the end token, so nearly every completion runs to ``--max-tokens``: the numbers are
those of full-length decoding.

    python bench/gpu_transformers_throughput.py                          # 1.3B (Qwen2.5-1.5B layers) on a GPU
    python bench/gpu_transformers_throughput.py --hidden 3584 --layers 28 --heads 28 --kv-heads 4 \\
        --intermediate 18944 --batch-size 4                             # 7B-shaped (not yet run)
    python bench/gpu_transformers_throughput.py --model Qwen/Qwen2.5-7B-Instruct   # a real local model
    python bench/gpu_transformers_throughput.py --json-out $OUT/throughput.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
MUSIQUE = SHARED / "musique" / "musique_ans_v1.0_train.sample100.jsonl"

# Qwen2.5-1.5B-shaped. Batch 8 prompts (64 sequences): batch 16 (128 sequences of up to 8k prompt tokens at level
# 20) ran out of memory on an 80 GB H100 (the prompt is prefilled once per sample).
GPU_DEFAULTS = dict(hidden=1536, layers=28, heads=12, kv_heads=2, intermediate=8960, questions=64, k=8,
                    max_tokens=256, batch_size=8)
CPU_DEFAULTS = dict(hidden=256, layers=4, heads=4, kv_heads=2, intermediate=768, questions=8, k=4, max_tokens=32,
                    batch_size=4)


def random_model(out: Path, args: argparse.Namespace, dtype) -> Path:
    """Qwen2 with random weights and the test fixture's tokenizer (trained on ../shared/data)."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    sys.path.insert(0, str(ROOT / "tests"))
    from support.tiny_model import build_tiny_model

    build_tiny_model(out, SHARED)  # the tokenizer and chat template
    tok = AutoTokenizer.from_pretrained(out)
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tok), hidden_size=args.hidden, intermediate_size=args.intermediate,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        max_position_embeddings=32768, tie_word_embeddings=True,
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"), pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        bos_token_id=None)
    with torch.device("cpu"):
        model = Qwen2ForCausalLM(config).to(dtype)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.save_pretrained(out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="a real model instead of a random one")
    for k in ("hidden", "layers", "heads", "kv_heads", "intermediate", "questions", "k", "max_tokens",
              "batch_size"):
        ap.add_argument(f"--{k.replace('_', '-')}", type=int, default=None)
    ap.add_argument("--K", type=int, default=20, help="level of the MuSiQue rows (20: the hardest, RAG-RL's) ")
    ap.add_argument("--chunk-size", type=int, default=None, help="[default: 4 x --batch-size]")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--raw-once", dest="raw_again", action="store_false",
                    help="time the plain generate once, before the partition (default: again after it too, the faster "
                         "of the two the baseline: on an H200 the first arm took 75 s, the same calls 50 s after)")
    ap.add_argument("--json-out", type=Path, help="also write the results here as JSON")
    args = ap.parse_args()

    import torch

    cuda = torch.cuda.is_available() and args.device in ("auto", "cuda") or args.device.startswith("cuda")
    defaults = GPU_DEFAULTS if cuda else CPU_DEFAULTS
    for k, v in defaults.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    args.chunk_size = args.chunk_size or 4 * args.batch_size
    device = "cuda" if cuda and args.device == "auto" else args.device
    dtype = (torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16) if cuda else torch.float32

    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
    from rag_curriculum.generation import SamplingConfig
    from rag_curriculum.generation._hf_backend import TransformersBackend
    from rag_curriculum.generation.runner import question_seed
    from rag_curriculum.partition import PartitionConfig, partition
    from rag_curriculum.shards import read_table

    work = Path(tempfile.mkdtemp(prefix="rag-curriculum-gpu-bench-"))
    try:
        model = args.model or str(random_model(work / "model", args, dtype))
        shards = work / "input"
        build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(MUSIQUE), args.questions, K=args.K)],
                                     schedule="max", out=str(shards), seed=0), command="bench")
        t = time.perf_counter()
        backend = TransformersBackend(model, device=device, batch_size=args.batch_size)
        load_s = time.perf_counter() - t
        params = sum(p.numel() for p in backend.model.parameters())
        table = read_table(shards, columns=["id", "prompt"])
        ids, prompts = table.column("id").to_pylist(), table.column("prompt").to_pylist()
        prompt_lens = [len(backend.render(p)) for p in prompts]
        s = SamplingConfig(n=args.k, temperature=1.0, top_p=1.0, max_tokens=args.max_tokens, seed=0)
        seeds = [question_seed(0, i) for i in ids]
        # Warm-up at the timed arms' largest shapes: the longest prompts, a full batch, all k samples, a few
        # tokens (a 2-prompt warm-up left the first timed arm paying for the allocator's growth and the kernels'
        # first runs at full size: raw generate measured 1.6x slower than the same calls inside the partition).
        longest = sorted(range(len(ids)), key=lambda i: -prompt_lens[i])[:args.batch_size]
        backend.generate([prompts[i] for i in longest], SamplingConfig(n=args.k, max_tokens=8),
                         seeds=[seeds[i] for i in longest])
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        backend.generated_tokens = backend.prompt_tokens = 0
        t = time.perf_counter()
        backend.generate(prompts, s, seeds=seeds)
        if cuda:
            torch.cuda.synchronize()
        raw_s = time.perf_counter() - t
        gen_tokens = backend.generated_tokens
        t = time.perf_counter()
        res = partition(PartitionConfig(shards=str(shards), out=str(work / "partition"), backend="transformers",
                                        model=model, samples=args.k, max_tokens=args.max_tokens,
                                        chunk_size=args.chunk_size), backend=backend, command="bench")
        part_s = time.perf_counter() - t
        print(f"raw generate {raw_s:.1f} s, then the partition {part_s:.1f} s", flush=True)
        raw_first_s, raw_again_s = raw_s, None
        if args.raw_again:  # the baseline timed again after the partition: a first arm slower only for coming first
            t = time.perf_counter()
            backend.generate(prompts, s, seeds=seeds)
            if cuda:
                torch.cuda.synchronize()
            raw_again_s = time.perf_counter() - t
            raw_s = min(raw_s, raw_again_s)
            print(f"raw generate again {raw_again_s:.1f} s", flush=True)
        n_comp = len(ids) * args.k
        result = {
            "device": torch.cuda.get_device_name(0) if cuda else "cpu", "dtype": str(dtype).replace("torch.", ""),
            "model": args.model or f"random Qwen2 hidden {args.hidden}, {args.layers} layers, {args.heads} heads "
                                   f"({args.kv_heads} kv), intermediate {args.intermediate}",
            "parameters": params, "load_s": round(load_s, 2), "questions": len(ids), "k": args.k,
            "max_tokens": args.max_tokens, "batch_size": args.batch_size, "chunk_size": args.chunk_size,
            "prompt_tokens_mean": round(sum(prompt_lens) / len(prompt_lens), 1), "prompt_tokens_max": max(prompt_lens),
            "raw_first_s": round(raw_first_s, 2),
            "raw_again_s": None if raw_again_s is None else round(raw_again_s, 2),
            "raw_baseline": "the faster of the two" if raw_again_s is not None else "the first",
            "raw_s": round(raw_s, 2), "raw_prompts_per_s": round(len(ids) / raw_s, 3),
            "raw_completions_per_s": round(n_comp / raw_s, 2), "raw_generated_tokens_per_s": round(gen_tokens / raw_s, 1),
            "partition_s": round(part_s, 2), "partition_completions_per_s": round(n_comp / part_s, 2),
            "partition_overhead": round(part_s / raw_s - 1, 4),
            "partition_outside_backend_s": round(part_s - res.run.backend_seconds, 3),
            "peak_gpu_memory_gb": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{result['model']} ({result['parameters'] / 1e6:,.0f}M parameters, {result['dtype']}) on "
          f"{result['device']}")
    print(f"{result['questions']} prompts (mean {result['prompt_tokens_mean']:.0f} tokens, max "
          f"{result['prompt_tokens_max']}) x {result['k']} samples x {result['max_tokens']} new tokens, batch "
          f"{result['batch_size']} prompts ({result['batch_size'] * result['k']} sequences)")
    print(f"backend.generate ({result['raw_baseline']}): {result['raw_s']:.1f} s = {result['raw_prompts_per_s']:.2f} prompts/s, "
          f"{result['raw_completions_per_s']:.1f} completions/s, {result['raw_generated_tokens_per_s']:,.0f} new "
          f"tokens/s" + (f"; peak GPU memory {result['peak_gpu_memory_gb']} GB" if cuda else ""))
    print(f"partition end to end: {result['partition_s']:.1f} s = {result['partition_completions_per_s']:.1f} "
          f"completions/s; overhead {100 * result['partition_overhead']:+.1f}% "
          f"({result['partition_outside_backend_s']:.2f} s outside the backend)")
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
