"""GPU throughput of `curriculum train`: TRL's GRPOTrainer on a randomly initialised small Qwen2-style model,
generation by transformers (no vLLM), a real curriculum built by the toolkit, the RAG-RL reward.

    python bench/gpu_train_throughput.py                  # ~80M-parameter model, 8 steps (2 warm-up), bf16, CUDA
    python bench/gpu_train_throughput.py --hidden 2048 --layers 24 --heads 16 --kv-heads 4 --prompts 16 \\
        --generations 8 --max-completion 512 --per-device 4   # ~1.07B parameters. --per-device 16 ran out of
        # memory on an 80 GB H100 at level 6 (no activation checkpointing); 4 ran level 1, level 6 not yet tried
    python bench/gpu_train_throughput.py --device cpu --hidden 64 --layers 2 --heads 4 --kv-heads 2 --steps 3 \\
        --warmup 1 --prompts 2 --generations 2 --per-device 4 --max-completion 16 --no-baseline   # a CPU smoke run

--heads must divide --hidden (the default 12 heads suit the default 768), and --per-device must divide
--prompts x --generations.

Nothing is downloaded: the tokenizer is trained and the model initialised on the spot. The data are the MuSiQue
sample in ../shared/data when it is there (questions repeated with fresh ids as needed), else synthetic MuSiQue-
layout records, built into min-max curriculum shards (levels 1..--K) and trained on through the shipped recipe
``rag-rl-min-max`` with command-line overrides, exactly as ``curriculum train`` does.

Prints one JSON line per measured step and a summary: completions/s, completion tokens/s, tokens/s (prompt +
completion, TRL's ``num_tokens``), step time, peak GPU memory; and, as a baseline measured in the same run,
plain ``model.generate`` throughput on the same prompts (completions/s) with the ratio train/generate (GRPO's
generation, reward, reference and policy passes against generation alone).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))  # tiny_model: the tokenizer / model builder the tests use
SHARED_MUSIQUE = ROOT.parent / "shared" / "data" / "musique" / "musique_ans_v1.0_train.sample100.jsonl"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

WORDS = ("river city museum founded author album company river station born capital league film song island "
         "province bridge university painter award county war treaty language opera series network").split()


def _synthetic_record(i: int, rng: random.Random) -> dict:
    def sentence(n: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."

    paragraphs = []
    for j in range(20):
        text = " ".join(sentence(rng.randint(8, 16)) for _ in range(rng.randint(3, 6)))
        paragraphs.append({"idx": j, "title": f"{rng.choice(WORDS).title()} {i}-{j}", "paragraph_text": text,
                           "is_supporting": j in (3, 11)})
    answer = rng.choice(WORDS)
    return {"id": f"2hop__synthetic_{i}", "paragraphs": paragraphs, "question": sentence(10)[:-1] + "?",
            "question_decomposition": [
                {"id": 1, "question": sentence(6), "answer": rng.choice(WORDS), "paragraph_support_idx": 3},
                {"id": 2, "question": sentence(6), "answer": answer, "paragraph_support_idx": 11}],
            "answer": answer, "answer_aliases": [], "answerable": True}


def musique_file(n: int, out: Path, seed: int = 0) -> Path:
    """``n`` MuSiQue-layout records: the shared sample (fresh ids when repeated), else synthetic ones."""
    rng = random.Random(seed)
    real = []
    if SHARED_MUSIQUE.exists():
        real = [json.loads(line) for line in SHARED_MUSIQUE.read_text(encoding="utf-8").splitlines() if line.strip()]
    with open(out, "w", encoding="utf-8") as f:
        for i in range(n):
            if real:
                rec = dict(real[i % len(real)])
                if i >= len(real):
                    rec["id"] = f"{rec['id']}-r{i}"
                    rec["question"] = f"{rec['question']} ({i})"
            else:
                rec = _synthetic_record(i, rng)
            f.write(json.dumps(rec) + "\n")
    return out


def build_model(out: Path, data_file: Path, args) -> tuple[Path, int]:
    import torch
    from support.tiny_model import CHATML_TEMPLATE, SPECIAL
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    texts = ["<reasoning>\n...\n</reasoning>\n<answer>\nFinal answer: x\nSupporting passages: a, b\n</answer>"]
    for line in data_file.read_text(encoding="utf-8").splitlines()[:300]:
        r = json.loads(line)
        texts.append(r["question"])
        texts.extend(p["title"] + "\n" + p["paragraph_text"] for p in r["paragraphs"])
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainer=trainers.BpeTrainer(
        vocab_size=args.vocab, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHATML_TEMPLATE
    fast.padding_side = "left"
    fast.save_pretrained(out)
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(fast), hidden_size=args.hidden, intermediate_size=int(args.hidden * 8 / 3) // 64 * 64 or 128,
        num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
        max_position_embeddings=16384, tie_word_embeddings=True,
        eos_token_id=fast.convert_tokens_to_ids("<|im_end|>"), pad_token_id=fast.convert_tokens_to_ids("<|endoftext|>"),
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.save_pretrained(out)
    return out, sum(p.numel() for p in model.parameters())


def generate_baseline(model_dir: Path, prompts: list, args) -> dict:
    """Plain ``generate`` on the same prompts in the same batches (``--prompts`` x ``--generations``), same sampling
    and lengths, after one warm-up batch: completions/s and completion tokens/s."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.padding_side = "left"
    dtype = torch.bfloat16 if args.bf16 else torch.float32
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(args.device).eval()
    texts = [tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in prompts]
    chunks = [texts[i:i + args.prompts] for i in range(0, len(texts), args.prompts)]
    times, tokens, n = [], 0, 0
    for b, chunk in enumerate([chunks[0], *chunks]):  # the first batch warms up
        batch = [t for t in chunk for _ in range(args.generations)]
        enc = tok(batch, return_tensors="pt", padding=True).to(args.device)
        _sync(args.device)
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(**enc, do_sample=True, temperature=1.0, top_p=1.0,
                                 max_new_tokens=args.max_completion, pad_token_id=tok.pad_token_id)
        _sync(args.device)
        if b:
            times.append(time.perf_counter() - t0)
            gen = out[:, enc["input_ids"].shape[1]:]
            tokens += int((gen != tok.pad_token_id).sum())
            n += len(batch)
    return {"completions_per_s": n / sum(times), "completion_tokens_per_s": tokens / sum(times)}


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="cuda (the point) or cpu (a smoke run)")
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=8192, help="BPE vocabulary trained on the data text (at most)")
    p.add_argument("--steps", type=int, default=8, help="optimiser steps, warm-up included")
    p.add_argument("--warmup", type=int, default=2, help="first steps left out of the averages")
    p.add_argument("--prompts", type=int, default=8, help="prompts per step")
    p.add_argument("--generations", type=int, default=8, help="completions per prompt")
    p.add_argument("--per-device", type=int, default=16, help="completions per forward/backward pass")
    p.add_argument("--max-completion", type=int, default=256)
    p.add_argument("--K", type=int, default=6, help="top level of the min-max curriculum (passages ~ K + 1)")
    p.add_argument("--beta", type=float, default=0.01, help="KL coefficient (0 skips the reference model)")
    p.add_argument("--no-bf16", dest="bf16", action="store_false")
    p.add_argument("--no-baseline", dest="baseline", action="store_false")
    p.add_argument("--workdir", default=None)
    args = p.parse_args()
    if args.warmup >= args.steps:
        p.error("--warmup must be smaller than --steps")

    import torch

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("no CUDA device: this benchmark is for a GPU (pass --device cpu for a smoke run)")
    if args.device == "cpu":
        args.bf16 = False
    import logging

    logging.basicConfig(level=logging.WARNING)
    from rag_curriculum.curricula import BuildConfig, SourceSpec, build_curriculum
    from rag_curriculum.shards import read_rows
    from rag_curriculum.train import compose_train_config, train

    work = Path(args.workdir or tempfile.mkdtemp(prefix="rag-curriculum-gpu-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = args.prompts * args.steps
    data = musique_file(max(rows, 100), work / "musique.jsonl")
    model_dir, n_params = build_model(work / "model", data, args)
    shards = work / "shards"
    build_curriculum(BuildConfig(sources=[SourceSpec("musique", str(data), n=rows)], schedule="min-max", K=args.K,
                                 out=str(shards), seed=0, overwrite=True))
    overrides = [
        f"model.name_or_path={model_dir}", f"data.shards={shards}", f"run.output_dir={work / 'run'}",
        "run.resume=null", "run.save_final=false", "run.log_rows=true",
        f"batch.prompts_per_step={args.prompts}", f"batch.per_device_completions={args.per_device}",
        f"grpo.num_generations={args.generations}", f"grpo.max_completion_length={args.max_completion}",
        f"grpo.beta={args.beta}", "grpo.use_vllm=false", f"grpo.bf16={str(args.bf16).lower()}",
        "grpo.save_strategy=no", "grpo.report_to=none", "grpo.logging_steps=1", f"grpo.max_steps={args.steps}",
        f"grpo.use_cpu={str(args.device == 'cpu').lower()}", "grpo.activation_checkpointing=false",
        "grpo.dataloader_pin_memory=false",
    ]
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    if (work / "run").exists():
        import shutil

        shutil.rmtree(work / "run")
    cfg = compose_train_config("rag-rl-min-max", overrides)
    t0 = time.perf_counter()
    result = train(cfg)
    wall = time.perf_counter() - t0
    steps = [h for h in result.log_history if "step_time" in h]
    completions = args.prompts * args.generations
    measured = steps[args.warmup:]
    prev_tokens = steps[args.warmup - 1]["num_tokens"] if args.warmup else 0
    for h in measured:
        line = {"step": h["step"], "step_time_s": round(h["step_time"], 4),
                "completion_mean_length": h["completions/mean_length"], "level_mean": h.get("curriculum/level_mean"),
                "reward": h.get("reward"), "loss": h.get("loss")}
        print(json.dumps(line))
    t = sum(h["step_time"] for h in measured)
    comp_tokens = sum(h["completions/mean_length"] * completions for h in measured)
    all_tokens = measured[-1]["num_tokens"] - prev_tokens
    summary = {
        "device": torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu",
        "params_m": round(n_params / 1e6, 1), "steps_measured": len(measured),
        "prompts_per_step": args.prompts, "completions_per_step": completions,
        "per_device_train_batch_size": result.plan.per_device_train_batch_size,
        "gradient_accumulation_steps": result.plan.gradient_accumulation_steps,
        "max_completion_length": args.max_completion, "bf16": args.bf16, "beta": args.beta,
        "prompt_tokens_mean": round((all_tokens - comp_tokens) / (completions * len(measured)), 1),
        "step_time_s": round(t / len(measured), 3),
        "completions_per_s": round(completions * len(measured) / t, 2),
        "completion_tokens_per_s": round(comp_tokens / t, 1),
        "tokens_per_s": round(all_tokens / t, 1),
        "train_wall_s": round(wall, 1),
    }
    if args.device.startswith("cuda"):
        summary["peak_gpu_mem_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    if args.baseline:
        # The prompts of the measured steps, in the same batches, generated with the same settings.
        prompts = [r["prompt"] for r in read_rows(shards, verify=False)]
        measured_prompts = prompts[args.warmup * args.prompts:args.steps * args.prompts]
        base = generate_baseline(model_dir, measured_prompts, args)
        summary["generate_only_completions_per_s"] = round(base["completions_per_s"], 2)
        summary["generate_only_completion_tokens_per_s"] = round(base["completion_tokens_per_s"], 1)
        summary["train_over_generate_ratio"] = round(summary["completions_per_s"] / base["completions_per_s"], 3)
    print(json.dumps({"summary": summary}, indent=2))


if __name__ == "__main__":
    main()
