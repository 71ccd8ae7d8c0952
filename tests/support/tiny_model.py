"""Build a tiny Qwen2-style causal LM on the spot: random weights and a small BPE tokenizer trained on text
from ../shared/data, with a ChatML chat template. Nothing is downloaded."""

from __future__ import annotations

import json
from pathlib import Path

from rag_curriculum.train._warm import CHATML_TEMPLATE, SPECIAL, save_tiny_qwen2


def corpus_texts(data_dir: Path, limit: int = 400) -> list[str]:
    texts = [
        "<reasoning>\n...\n</reasoning>\n<answer>\nFinal answer: yes\nSupporting passages: a, b\n</answer>",
        "Respond in the following format: Answer the question using only the provided passages.",
    ]
    with open(data_dir / "musique" / "musique_ans_v1.0_train.sample100.jsonl", encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            texts.append(r["question"])
            texts.extend(p["title"] + "\n" + p["paragraph_text"] for p in r["paragraphs"][:5])
            if len(texts) > limit:
                break
    return texts


def build_tiny_model(out_dir: Path, data_dir: Path, *, hidden_size: int = 64, layers: int = 2,
                     vocab_size: int = 1024, seed: int = 0, heads: int = 4) -> Path:
    """``heads`` attention heads (head size ``hidden_size // heads``; vLLM's CPU attention needs a head size of
    at least 32, e.g. hidden_size=128, heads=2), with ``min(heads, 2)`` key/value heads."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus_texts(data_dir), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   bos_token=None, unk_token=None)
    return save_tiny_qwen2(fast, out_dir, hidden_size=hidden_size, layers=layers, heads=heads, seed=seed)


def build_wordlevel_model(out_dir: Path, data_dir: Path, *, hidden_size: int = 32, seed: int = 0) -> Path:
    """A tiny random Granite (Llama-style) model whose tokenizer is a WordLevel one (whitespace words of fixture
    text, the search protocol's tags as words): a tokenizer transformers' ``stop_strings`` cannot read. (Granite:
    ``AutoTokenizer`` loads a Granite model's ``tokenizer.json`` as it is, where a Qwen2 model's is re-read as
    Qwen2's byte-level BPE.)"""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import GraniteConfig, GraniteForCausalLM, PreTrainedTokenizerFast

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tags = ["<search>", "</search>", "<answer>", "</answer>", "<think>", "</think>", "<information>",
            "</information>"]
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # no decoder: the tokens decode joined by spaces (what breaks transformers' StopStringCriteria)
    trainer = trainers.WordLevelTrainer(vocab_size=600, special_tokens=["[UNK]", *SPECIAL], show_progress=False)
    tok.train_from_iterator([" ".join(tags)] * 50 + corpus_texts(data_dir, limit=200), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   unk_token="[UNK]", bos_token=None)
    fast.chat_template = CHATML_TEMPLATE
    fast.padding_side = "left"
    fast.save_pretrained(out_dir)
    torch.manual_seed(seed)
    config = GraniteConfig(vocab_size=len(fast), hidden_size=hidden_size, intermediate_size=hidden_size * 2,
                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
                         max_position_embeddings=4096, tie_word_embeddings=True,
                         eos_token_id=fast.convert_tokens_to_ids("<|im_end|>"),
                         pad_token_id=fast.convert_tokens_to_ids("<|endoftext|>"), bos_token_id=None)
    model = GraniteForCausalLM(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.save_pretrained(out_dir)
    return out_dir



def build_tiny_encoder(out_dir: Path, data_dir: Path, *, dim: int = 32, seed: int = 0,
                       prompts: dict[str, str] | None = None) -> Path:
    """A tiny sentence-transformers encoder made on the spot: a 2-layer BERT with random weights, a WordPiece
    tokenizer over fixture text's characters and most frequent words, mean pooling and normalisation (e5's layout,
    without its weights)."""
    import warnings
    from collections import Counter

    import torch
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers import models as tm
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    out_dir = Path(out_dir)
    # the vocabulary chosen here, not by tokenizers' trainer (whose ties fall differently from run to run, so each
    # session's encoder, and every recall measured with it, would differ): the special tokens, every character
    # seen (alone and as a continuation), then the most frequent words, ties by the word
    norm, pre = normalizers.BertNormalizer(lowercase=True), pre_tokenizers.BertPreTokenizer()
    counts: Counter[str] = Counter()
    for text in ["query: passage:"] * 20 + corpus_texts(data_dir, limit=300):
        counts.update(w for w, _ in pre.pre_tokenize_str(norm.normalize_str(text)))
    chars = sorted({c for w in counts for c in w})
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars + ["##" + c for c in chars]
    vocab += [w for w, _ in sorted(counts.items(), key=lambda x: (-x[1], x[0])) if len(w) > 1][:max(0, 800 - len(vocab))]
    tok = Tokenizer(tm.WordPiece({w: i for i, w in enumerate(vocab)}, unk_token="[UNK]"))
    tok.normalizer, tok.pre_tokenizer = norm, pre
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
                                                       special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                     sep_token="[SEP]", mask_token="[MASK]", model_max_length=512)
    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=tok.get_vocab_size(), hidden_size=dim, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=2 * dim, max_position_embeddings=512)
    raw = out_dir.with_name(out_dir.name + "-hf")
    BertModel(cfg).save_pretrained(raw)
    hf_tok.save_pretrained(raw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # sentence-transformers 6 moved its module classes: the old path warns
        from sentence_transformers import SentenceTransformer, models

        st = SentenceTransformer(modules=[models.Transformer(str(raw), max_seq_length=256),
                                          models.Pooling(dim, pooling_mode="mean"), models.Normalize()],
                                 device="cpu", prompts=prompts or {})
        st.save(str(out_dir))
    return out_dir


class ForceAt:
    """A logits processor for ``model.generate``: at the given new-token positions (counted from ``start``, the
    prompt's length), all the probability on one token: a real model made to sample a chosen token there."""

    def __init__(self, start: int, at: dict[int, int]) -> None:
        self.start, self.at = start, at

    def __call__(self, input_ids, scores):
        step = input_ids.shape[1] - self.start
        if step in self.at:
            scores[:] = float("-inf")
            scores[:, self.at[step]] = 0.0
        return scores



def without_chat_template(model_dir: Path, out_dir: Path) -> Path:
    """A copy of a model folder whose tokenizer has no chat template: a stand-in for a pretrained base model."""
    import shutil

    out_dir = Path(out_dir)
    shutil.copytree(model_dir, out_dir, dirs_exist_ok=True)
    (out_dir / "chat_template.jinja").unlink(missing_ok=True)
    config = out_dir / "tokenizer_config.json"
    data = json.loads(config.read_text())
    data.pop("chat_template", None)
    config.write_text(json.dumps(data))
    return out_dir
