"""A model that can learn on a CPU: a tiny Qwen2-style model made offline, warm-started by supervised fine-tuning.

A randomly initialised model scores the same on every completion of a GRPO group (every sample is noise), so every
advantage is zero and nothing is learnt: the loss and the gradient norm are 0 at every step. A short supervised warm
start on completions written from training rows (TRL's ``SFTTrainer``, the loss on the completion tokens only) gives
a model whose groups are mixed, so GRPO has something to learn.

What it teaches, per row (``copies`` examples, ``plain`` of them plain): the paper's format (appendix D) with the
row's gold answer and its gold passages cited (:func:`rag_rl_completion`), or the same answer in a plain sentence
(:func:`plain_completion`), which the RAG-RL reward scores as a format error with no answer or citation term. The
model so comes out writing the format on some samples and not on others, and imperfectly: what GRPO is then seen
teaching first is the format and the citations, as in the first steps of a real run.

* :func:`make_tiny_model`: a tokenizer trained on the rows' own text (the format's tags as single tokens) and a
  few-layer Qwen2 model with random, seeded weights; nothing is downloaded;
* :func:`warm_start`: both, seeded, written atomically (``OUT.partial`` renamed when done) with ``warm_start.json``.
"""

from __future__ import annotations

import json
import math
import random
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, UsageError
from ..shards import read_rows

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# The formats' tags, each one token: a tiny model learns a format in fewer steps when a tag is one choice, not five
TAGS = ["<reasoning>", "</reasoning>", "<answer>", "</answer>", "Final answer:", "Supporting passages:",
        "<think>", "</think>", "<search>", "</search>", "<information>", "</information>"]
WARM_CARD = "warm_start.json"


def _row_texts(rows: Iterable[dict[str, Any]]) -> list[str]:
    texts: list[str] = []
    for row in rows:
        texts.extend(m["content"] for m in row["prompt"])
        texts.extend(str(a) for a in row.get("answers") or [])
        for p in row.get("passages") or []:
            texts.append(f"{p.get('label', '')}\n{p.get('text', '')}")
    return texts


def make_tiny_model(out: str | Path, texts: Sequence[str], *, hidden_size: int = 128, layers: int = 2,
                    heads: int = 4, vocab_size: int = 2048, seed: int = 0) -> Path:
    """A few-layer Qwen2-style causal LM with random weights (seeded) and a byte-level BPE tokenizer trained on
    ``texts``, with a ChatML chat template and :data:`TAGS` as single tokens, saved to ``out``."""
    import torch
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(list(texts), trainer=trainer)
    tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in TAGS])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, unk_token=None)
    fast.chat_template = CHATML_TEMPLATE
    fast.padding_side = "left"
    fast.save_pretrained(out)
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(fast), hidden_size=hidden_size, intermediate_size=hidden_size * 2,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=min(heads, 2),
        max_position_embeddings=8192, tie_word_embeddings=True,
        eos_token_id=fast.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=fast.convert_tokens_to_ids("<|endoftext|>"), bos_token_id=None,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.save_pretrained(out)
    return out


def rag_rl_completion(row: dict[str, Any]) -> str:
    """The paper's format (appendix D) with the row's first gold answer and its gold passages cited."""
    labels = ", ".join(row["gold_labels"])
    return (f"<reasoning>\nThe answer is in {labels}.\n</reasoning>\n<answer>\nFinal answer: {row['answers'][0]}\n"
            f"Supporting passages: {labels}\n</answer>")


def plain_completion(row: dict[str, Any]) -> str:
    """The same answer without the format's tags (what a model that has not learnt the format writes): it parses
    as nothing, so the RAG-RL reward gives it the format penalty and no answer or citation term."""
    return f"The answer is {row['answers'][0]}."


@dataclass
class WarmStartConfig:
    """``curriculum warm-start``: ``shards`` the training rows (a curriculum build); ``model`` the model to
    fine-tune (empty: a tiny model made here from the shards' text, ``hidden_size`` x ``layers``, a ``vocab_size``
    tokenizer); ``rows`` how many of the shards' rows (a prefix, in curriculum order; keep evaluation rows out);
    ``epochs`` passes over their ``rows * copies`` examples, ``plain`` the fraction of a row's copies written
    without the format."""

    shards: str
    out: str
    model: str = ""
    rows: int = 8
    epochs: float = 20.0
    copies: int = 4
    plain: float = 0.5
    learning_rate: float = 3e-3
    batch_size: int = 4
    seed: int = 0
    hidden_size: int = 128
    layers: int = 2
    vocab_size: int = 2048
    overwrite: bool = False

    def validate(self) -> None:
        limits = {"rows": 10**7, "copies": 1000, "batch_size": 4096, "hidden_size": 8192, "layers": 128,
                  "vocab_size": 10**6}
        for name, most in limits.items():
            value = getattr(self, name)
            if not 1 <= int(value) <= most:
                raise UsageError(f"--{name.replace('_', '-')} {value}: must be between 1 and {most:,}")
        if not 0 <= int(self.seed) < 2**32:
            raise UsageError(f"--seed {self.seed}: must be between 0 and 2**32 - 1")
        for name in ("epochs", "learning_rate"):
            value = float(getattr(self, name))
            if not (math.isfinite(value) and value > 0):
                raise UsageError(f"--{name.replace('_', '-')} {value}: must be a positive number")
        if not 0 <= self.plain < 1:
            raise UsageError(f"--plain {self.plain}: a fraction in [0, 1) (1 would never show the format)")
        if self.model and not (Path(self.model) / "config.json").is_file():
            raise ConfigError(f"--model {self.model}: not a local model folder (no config.json)",
                              hint="give a folder saved with save_pretrained, or leave --model out to make a tiny "
                                   "model here")


def _examples(cfg: WarmStartConfig, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Conversational prompt-completion examples (TRL's format: the loss on the completion only)."""
    plain = round(cfg.copies * cfg.plain)
    return [{"prompt": row["prompt"], "completion": [{"role": "assistant", "content": text}]}
            for row in rows
            for text in [plain_completion(row)] * plain + [rag_rl_completion(row)] * (cfg.copies - plain)]


@dataclass
class WarmStartResult:
    out: Path
    examples: int
    loss_first: float
    loss_last: float
    seconds: float


def warm_start(cfg: WarmStartConfig) -> WarmStartResult:
    """Make (or load) the model, fine-tune it on the completions of ``cfg.rows`` training rows, save it to
    ``cfg.out`` with ``warm_start.json`` (the settings and the loss curve)."""
    import time

    cfg.validate()
    out = Path(cfg.out)
    if out.exists() and any(out.iterdir()) and not cfg.overwrite:
        raise ConfigError(f"--out {out}: exists and is not empty", hint="choose another --out, or --overwrite")
    every = read_rows(cfg.shards)
    rows = every[: cfg.rows]
    if not rows:
        raise ConfigError(f"{cfg.shards}: no rows", hint="give a curriculum build (curriculum build ... --out DIR)")
    start = time.perf_counter()
    work = out.with_name(out.name + ".partial")
    shutil.rmtree(work, ignore_errors=True)
    model_dir = cfg.model
    if not model_dir:
        model_dir = str(make_tiny_model(work / "init", _row_texts(every),
                                        hidden_size=cfg.hidden_size, layers=cfg.layers,
                                        vocab_size=cfg.vocab_size, seed=cfg.seed))
    examples = _examples(cfg, rows)
    random.Random(cfg.seed).shuffle(examples)
    history = _sft(model_dir, examples, work / "sft", cfg)
    losses = [h["loss"] for h in history if "loss" in h]
    (work / "sft" / WARM_CARD).write_text(json.dumps({
        "settings": asdict(cfg), "examples": len(examples), "loss": losses}, indent=2) + "\n")
    if out.exists():
        shutil.rmtree(out)
    (work / "sft").rename(out)
    shutil.rmtree(work, ignore_errors=True)
    return WarmStartResult(out, len(examples), losses[0] if losses else float("nan"),
                           losses[-1] if losses else float("nan"), time.perf_counter() - start)


def _sft(model_dir: str, examples: list[dict[str, Any]], out: Path, cfg: WarmStartConfig) -> list[dict[str, Any]]:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    args = SFTConfig(
        output_dir=str(out), num_train_epochs=cfg.epochs, learning_rate=cfg.learning_rate,
        per_device_train_batch_size=cfg.batch_size, gradient_accumulation_steps=1, lr_scheduler_type="constant",
        warmup_steps=0, logging_steps=max(1, int(len(examples) * cfg.epochs / cfg.batch_size) // 20), save_strategy="no", report_to="none", seed=cfg.seed, data_seed=cfg.seed,
        use_cpu=True, bf16=False, max_length=None, completion_only_loss=True, dataloader_pin_memory=False,
    )
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(examples), processing_class=tok)
    trainer.train()
    trainer.save_model(str(out))
    tok.save_pretrained(str(out))
    return trainer.state.log_history
