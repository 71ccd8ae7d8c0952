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

A search agent (``agent="search-r1"``) is taught the same way, in Search-R1's tags: per row, a first turn that
searches for the question's first entity (:func:`search_r1_turns`) followed by the answer turn taught after the very
``<information>`` block the retriever returns for it, or (``plain`` of the copies) a first turn with no action
(:func:`plain_search_turn`), which Search-R1's environment answers with its invalid-action text. GRPO then teaches it
to search (``recipe=search-learn``).

* :func:`make_tiny_model`: a tokenizer trained on the rows' own text (the format's tags as single tokens) and a
  few-layer Qwen2 model with random, seeded weights; nothing is downloaded;
* :func:`warm_start`: both, seeded, written atomically (a hidden ``.OUT.partial-OWNER`` folder moved into place when
  done) with ``warm_start.json``.
"""

from __future__ import annotations

import json
import logging
import math
import random
import re
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from .._commit import (
    FILE_DIGESTS,
    OutputKind,
    check_output,
    commit_output,
    exclusive,
    files_under,
    lock_beside,
    prepare_output,
)
from .._plumbing import atomic_write_text, file_sha256, mask_secrets, renamed_keywords
from .._settings import retriever_retries_rule
from ..agents import get_agent_template, open_retriever
from ..errors import ConfigError, DataError, UsageError
from ..grammar import information_block
from ..models import is_gguf, model_settings, resolve_model
from ..prompts import completion_prompt, completion_style
from ..shards import read_rows, shared_path
from ._ledger import compact_progress_callback, non_finite_callback

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
SEARCH_TEMPLATES = ("search-r1", "search-r1-original")  # the tag protocol's prompts
log = logging.getLogger(__name__)


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
    ``texts``, with a ChatML chat template and :data:`TAGS` as single tokens, saved to ``out``.

    Needs the train extra (transformers, tokenizers, torch).

    Args:
        out: the folder to save the model and tokenizer to (created when missing).
        texts: the texts the tokenizer is trained on (a curriculum's prompts and answers, say).
        hidden_size: the model's hidden size.
        layers: its decoder layers.
        heads: its attention heads.
        vocab_size: the tokenizer's vocabulary size.
        seed: the seed of the random weights.

    Returns:
        ``out``, a model folder ``from_pretrained`` and the trainers load.

    Examples:
        ```python
        from rag_curriculum.shards import read_rows
        from rag_curriculum.train import make_tiny_model

        rows = read_rows("outputs/musique-min-max")
        model = make_tiny_model("outputs/tiny", [r["question"] for r in rows] + [a for r in rows for a in r["answers"]])
        ```
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

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
    return save_tiny_qwen2(fast, out, hidden_size=hidden_size, layers=layers, heads=heads, seed=seed)


def save_tiny_qwen2(tokenizer: Any, out: str | Path, *, hidden_size: int, layers: int, heads: int,
                    seed: int) -> Path:
    """Save ``tokenizer`` (a ``PreTrainedTokenizerFast`` whose eos is ``<|im_end|>`` and pad ``<|endoftext|>``)
    with the ChatML template and left padding, and a Qwen2 causal LM of its vocabulary with random weights drawn
    under ``seed`` (``heads`` attention heads, ``min(heads, 2)`` key/value heads), to ``out``."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    out = Path(out)
    tokenizer.chat_template = CHATML_TEMPLATE
    tokenizer.padding_side = "left"
    tokenizer.save_pretrained(out)
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=hidden_size * 2,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=min(heads, 2),
        max_position_embeddings=8192, tie_word_embeddings=True,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"), bos_token_id=None,
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


def search_query(row: dict[str, Any]) -> str:
    """The taught query: the question's first entity, the title of its first gold passage."""
    return str(row["gold_labels"][0])


def search_r1_turns(row: dict[str, Any]) -> tuple[str, str]:
    """A search agent's two turns (Search-R1's tags) for ``row``: a search whose query names the question's first
    entity (:func:`search_query`), then, after the ``<information>`` block, the gold answer."""
    entity = search_query(row)
    return (f"<think>I need to search.</think>\n<search> {entity} </search>",
            f"<think>The answer is in the information.</think>\n<answer> {row['answers'][0]} </answer>")


def plain_search_turn(row: dict[str, Any]) -> str:
    """An agent that neither searches nor answers in tags: a turn with no action (the environment says so, and the
    search reward gives 0)."""
    return f"<think>I know this.</think>\nThe answer is {row['answers'][0]}."


def base_completion(row: dict[str, Any], prefix: str) -> str:
    """What a base model is taught to write after its prompt's response ``prefix`` (RAG-RL's, which opens the
    answer block at ``Final answer:``): the row's first gold answer, its gold passages cited, the block closed.

    >>> from rag_curriculum.prompts import RAG_RL_RESPONSE_PREFIX as P
    >>> print(P + base_completion({"answers": ["Paris"], "gold_labels": ["France", "Paris"]}, P))
    <reasoning>
    </reasoning>
    <answer>
    Final answer: Paris
    Supporting passages: France, Paris
    </answer>
    """
    full = (f"<reasoning>\n</reasoning>\n<answer>\nFinal answer: {row['answers'][0]}\n"
            f"Supporting passages: {', '.join(row['gold_labels'])}\n</answer>")
    if not full.startswith(prefix):
        raise ConfigError(f"a base model's warm start teaches RAG-RL's format after its response prefix, and the "
                          f"prompts' template gives {prefix!r}", hint="warm-start a base model on a rag-rl build")
    return full[len(prefix):]


def plain_base_completion(row: dict[str, Any], prefix: str) -> str:
    """A base model's answer without the citation line (the format broken: the format penalty, no citation term)."""
    return base_completion(row, prefix).split("\nSupporting passages:")[0] + "\n</answer>"


def plain_completion(row: dict[str, Any]) -> str:
    """The same answer without the format's tags (what a model that has not learnt the format writes): it parses
    as nothing, so the RAG-RL reward gives it the format penalty and no answer or citation term."""
    return f"The answer is {row['answers'][0]}."


@renamed_keywords(topk="top_k")
@dataclass
class WarmStartConfig:
    """``curriculum warm-start``: ``shards`` the training rows (a curriculum build); ``model`` the model to
    fine-tune (empty: a tiny model made here from the shards' text, ``hidden_size`` x ``layers``, a ``vocab_size``
    tokenizer); ``rows`` how many of the shards' rows (a prefix, in curriculum order; keep evaluation rows out);
    ``epochs`` passes over their ``rows * copies`` examples, ``plain`` the fraction of a row's copies written
    without the format. ``agent``: empty, the closed-context route (RAG-RL's format); ``search-r1``, a search agent
    (its ``template``'s prompt, a search then the answer, each answer turn after what ``retriever``, an index
    directory or a ``curriculum serve`` URL, returns for the search, ``top_k`` passages, as the training rollout
    will show it)."""

    shards: str
    out: str
    model: str = ""
    rows: int = 8
    epochs: float | None = None  # None: 20 (closed-context), 40 (a search agent's longer, two-turn examples)
    copies: int = 4
    plain: float | None = None  # None: 0.5 (closed-context), 0.75 (a search agent: more room to learn to search)
    learning_rate: float = 3e-3
    batch_size: int = 4
    seed: int = 0
    hidden_size: int = 128
    layers: int = 2
    vocab_size: int = 2048
    agent: str = ""
    retriever: str = ""
    retriever_retries: int = retriever_retries_rule()  # a server's request sent again after a connection error
    top_k: int | None = None  # None: 3 with ``agent`` (Search-R1's top_k)
    template: str | None = None  # None: search-r1 with ``agent``
    freeze_embeddings: bool = False  # the token embeddings (and a tied output layer) left as they are
    overwrite: bool = False

    def validate(self) -> None:
        if self.epochs is None:
            self.epochs = 40.0 if self.agent else 20.0
        if self.plain is None:
            self.plain = 0.75 if self.agent else 0.5
        limits = {"rows": 10**7, "copies": 1000, "batch_size": 4096, "hidden_size": 8192, "layers": 128,
                  "vocab_size": 10**6}
        for name, most in limits.items():
            value = getattr(self, name)
            if not 1 <= int(value) <= most:
                raise UsageError(f"--{name.replace('_', '-')} {value}: must be between 1 and {most:,}")
        if not 0 <= int(self.retriever_retries) <= 100:
            raise UsageError(f"--retriever-retries {self.retriever_retries}: must be between 0 and 100")
        if not 0 <= int(self.seed) < 2**32:
            raise UsageError(f"--seed {self.seed}: must be between 0 and 2**32 - 1")
        for name in ("epochs", "learning_rate"):
            value = float(getattr(self, name))
            if not (math.isfinite(value) and value > 0):
                raise UsageError(f"--{name.replace('_', '-')} {value}: must be a positive number")
        if float(self.epochs) > MAX_EPOCHS:
            raise UsageError(f"--epochs {self.epochs:g}: must be at most {MAX_EPOCHS:,} (passes over the rows' "
                             f"examples; the default is {40 if self.agent else 20})")
        if self.agent not in ("", "search-r1"):
            raise UsageError(f"--agent {self.agent}: choose search-r1 (or leave it out: RAG-RL's closed-context "
                             "format)")
        if self.agent and not self.retriever:
            raise UsageError("--agent search-r1 needs --retriever DIR|URL: the answer turns are taught after what "
                             "it returns", hint="curriculum index ... --out DIR, or the URL of `curriculum serve`")
        if not self.agent:
            given = [f"--{n.replace('_', '-')}" for n in ("retriever", "top_k", "template")
                     if getattr(self, n) not in (None, "")]
            if self.retriever_retries != next(f.default for f in fields(self) if f.name == "retriever_retries"):
                given.append("--retriever-retries")
            if given:
                raise UsageError(f"{', '.join(given)}: for --agent search-r1 only (the closed-context warm start "
                                 "searches nothing)")
        else:
            self.top_k = 3 if self.top_k is None else self.top_k
            self.template = self.template or "search-r1"
        if self.top_k is not None and not 1 <= int(self.top_k) <= 100:
            raise UsageError(f"--top-k {self.top_k}: must be between 1 and 100")
        if self.agent and self.template not in SEARCH_TEMPLATES:
            raise UsageError(f"--template {self.template}: choose one of {', '.join(SEARCH_TEMPLATES)}")
        if not 0 <= self.plain < 1:
            raise UsageError(f"--plain {self.plain}: a fraction in [0, 1) (1 would never show the format)")
        folder = resolve_model(self.model).path if is_gguf(self.model) else self.model  # a .gguf: converted once
        if self.model and not (Path(folder) / "config.json").is_file():
            raise ConfigError(f"--model {self.model}: not a local model folder (no config.json)",
                              hint="give a folder saved with save_pretrained, or leave --model out to make a tiny "
                                   "model here")


def _examples(cfg: WarmStartConfig, rows: list[dict[str, Any]], tokenizer: Any = None) -> list[dict[str, Any]]:
    """Conversational prompt-completion examples (TRL's format: the loss on the completion only); for a base model
    (``tokenizer`` without a chat template), text examples: the completion-style prompt (its response prefix at
    the end) and what follows the prefix (:func:`base_completion`, or :func:`plain_base_completion` for the
    ``plain`` copies)."""
    plain = round(cfg.copies * cfg.plain)
    if tokenizer is not None and not getattr(tokenizer, "chat_template", None):
        out = []
        for row in rows:
            p = completion_prompt(row["prompt"])
            texts = ([plain_base_completion(row, p.prefix)] * plain
                     + [base_completion(row, p.prefix)] * (cfg.copies - plain))
            out += [{"prompt": p.text, "completion": t} for t in texts]
        return out
    return [{"prompt": row["prompt"], "completion": [{"role": "assistant", "content": text}]}
            for row in rows
            for text in [plain_completion(row)] * plain + [rag_rl_completion(row)] * (cfg.copies - plain)]


def _check_rows(cfg: WarmStartConfig, rows: list[dict[str, Any]]) -> None:
    """Every taught row has a gold answer (and, for a search agent, a gold passage whose title is the query):
    refused naming the row and the field, before anything is written."""
    need = ("answers", "gold_labels") if cfg.agent else ("answers",)
    for i, row in enumerate(rows):
        for name in need:
            values = row.get(name)
            if not values or not str(values[0]).strip():
                what = "a gold answer" if name == "answers" else "a search for the first gold passage's title"
                raise DataError(f"empty: the warm start teaches {what} per row", kind="no_gold", path=str(cfg.shards),
                                record=f"row {i} (id {row.get('id')!r})", field=name,
                                hint="warm-start on answerable rows (a build with --unanswerable-fraction 0), or "
                                     "lower --rows")


def _information(cfg: WarmStartConfig, retriever: Any, rows: list[dict[str, Any]]) -> list[str]:
    """The ``<information>`` block the environment appends after each row's taught search (the same retriever,
    ``top_k`` and layout as the training rollout)."""
    try:
        hits = retriever.search([search_query(r) for r in rows], cfg.top_k)
    finally:
        close = getattr(retriever, "close", None)
        if close is not None:
            close()
    return [information_block([h.shown() for h in found]) for found in hits]


def _search_examples(cfg: WarmStartConfig, rows: list[dict[str, Any]], information: list[str],
                     tokenizer: Any) -> list[dict[str, Any]]:
    """Text prompt-completion examples of a search agent's turns (one trajectory is one assistant message, so its
    second turn is taught after the first and the ``<information>`` block, both in the prompt, out of the loss):
    per row, ``copies`` first turns (``plain`` of them with no action, the others a search) and, for each search,
    the answer turn after what the search returns."""
    tmpl = get_agent_template(cfg.template)
    plain = round(cfg.copies * cfg.plain)
    out = []
    for row, info in zip(rows, information, strict=True):
        head = tokenizer.apply_chat_template(tmpl.render(str(row["question"])), add_generation_prompt=True,
                                             tokenize=False)
        search, answer = search_r1_turns(row)
        out += [{"prompt": head, "completion": plain_search_turn(row)}] * plain
        out += [{"prompt": head, "completion": search}, {"prompt": head + search + info, "completion": answer}] * (
            cfg.copies - plain)
    return out


@dataclass
class WarmStartResult:
    """What :func:`warm_start` made.

    Attributes:
        out: the model folder (with ``warm_start.json``).
        examples: the fine-tuning examples (rows times copies).
        loss_first: the loss of the first step.
        loss_last: the loss of the last step.
        seconds: the fine-tuning's wall time.
    """

    out: Path
    examples: int
    loss_first: float
    loss_last: float
    seconds: float


def warm_start(cfg: WarmStartConfig) -> WarmStartResult:
    """Make (or load) the model, fine-tune it on the completions of ``cfg.rows`` training rows, save it to
    ``cfg.out`` with ``warm_start.json`` (the settings, the loss curve and the files written).

    The output follows the toolkit's rules: written in a hidden ``.OUT.partial-OWNER`` folder beside it and moved
    into place at the end (a killed run leaves no folder that looks complete; the next run removes what a dead one
    left); a second run to the same ``--out`` is refused at once; ``--overwrite`` replaces only an earlier warm
    start's files (those its ``warm_start.json`` lists) and keeps every file it did not write.

    ``curriculum warm-start`` calls this; needs the train extra.

    Args:
        cfg: the warm start's settings (shards, output folder, model, rows, epochs, ...).

    Returns:
        The model folder, the examples it was fine-tuned on, the first and last loss, and the time taken.

    Raises:
        ConfigError: settings out of range or of another route (a :class:`UsageError`), a ``model`` that is not a
            local model folder, shards without rows, or an ``out`` that is not a warm start's (or, without
            ``overwrite``, not empty) or is being written by another run.
        ShardError: shards that are missing or do not match their manifest.
        DataError: a row without the answer or gold passages the warm start teaches.
        RetrieverError: ``agent="search-r1"`` with a retriever that cannot answer.

    Examples:
        ```python
        from rag_curriculum.train import WarmStartConfig, warm_start

        res = warm_start(WarmStartConfig(shards="outputs/musique-min-max", out="outputs/warm", rows=8))
        res.out, res.loss_first, res.loss_last   # train from res.out: model.name_or_path=outputs/warm
        ```
    """
    import time

    cfg.validate()
    out = Path(cfg.out)
    check_output(out, overwrite=cfg.overwrite, kind=OUTPUT)
    every = read_rows(cfg.shards)
    rows = every[: cfg.rows]
    if not rows:
        raise ConfigError(f"{cfg.shards}: no rows", hint="give a curriculum build (curriculum build ... --out DIR)")
    if len(rows) < cfg.rows:  # recorded as used: the card says the rows it was made from
        log.warning("--rows %d: %s holds %d row(s); the warm start uses those %d", cfg.rows, cfg.shards, len(rows),
                    len(rows))
        cfg = replace(cfg, rows=len(rows))
    _check_rows(cfg, rows)
    information: list[str] = []
    if cfg.agent:  # the retriever is asked before anything is written
        information = _information(cfg, open_retriever(cfg.retriever, retries=cfg.retriever_retries), rows)
    start = time.perf_counter()
    with exclusive(lock_beside(out, "warm"), out, "warm-start", ConfigError, remove=True):
        work = prepare_output(out, overwrite=cfg.overwrite, kind=OUTPUT)
        try:
            texts = _row_texts(every)
            if cfg.agent:
                tmpl = get_agent_template(cfg.template)
                texts += [tmpl.render(str(r["question"]))[0]["content"] for r in every] + information
            source = resolve_model(cfg.model) if cfg.model else None
            model_dir = source.path if source is not None else str(make_tiny_model(
                work / INIT, texts, hidden_size=cfg.hidden_size, layers=cfg.layers, vocab_size=cfg.vocab_size,
                seed=cfg.seed))
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(model_dir)
            if cfg.agent:
                examples = _search_examples(cfg, rows, information, tokenizer)
            else:
                examples = _examples(cfg, rows, tokenizer)
            random.Random(cfg.seed).shuffle(examples)
            history = _sft(model_dir, examples, work, cfg)
            shutil.rmtree(work / INIT, ignore_errors=True)  # the model it started from is not the output
            losses = [h["loss"] for h in history if "loss" in h]
            files = [f for f in files_under(work) if f != WARM_CARD]
            settings = mask_secrets(asdict(cfg))
            for key in ("shards", "out", "model", "retriever"):  # no machine path in a record meant to be shared
                settings[key] = shared_path(settings[key]) if settings[key] else settings[key]
            if cfg.model:  # the tiny model's settings are not this model's: its own are recorded under "model"
                for name in ("hidden_size", "layers", "vocab_size"):
                    settings.pop(name)
            card = {"settings": settings, "model": model_settings(work), "examples": len(examples), "loss": losses,
                    "files": files, FILE_DIGESTS: {f: file_sha256(work / f) for f in files}}
            if source is not None and source.converted:
                card["model_file"] = {k: shared_path(v) if k in ("model", "converted_to") else v
                                      for k, v in source.record().items()}
            if not getattr(tokenizer, "chat_template", None):
                card["prompt_style"] = completion_style()
            atomic_write_text(work / WARM_CARD, json.dumps(card, indent=2) + "\n")
            commit_output(work, out, overwrite=cfg.overwrite, kind=OUTPUT)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return WarmStartResult(out, len(examples), losses[0] if losses else float("nan"),
                           losses[-1] if losses else float("nan"), time.perf_counter() - start)


#: The most passes over the examples ``--epochs`` takes (the defaults are 20 and 40; more is a typo, not a run).
MAX_EPOCHS = 10_000

#: Inside the partial folder while the model is made: the tiny model the fine-tune starts from (removed before
#: the commit).
INIT = ".init"


def _mismatch(card: Any) -> str | None:
    files = card.get("files") if isinstance(card, dict) else None
    return None if isinstance(files, list) else "that lists no files"


def _owned(directory: Path, card: dict[str, Any]) -> set[str]:
    return {str(f) for f in card["files"] if ".." not in Path(str(f)).parts and not Path(str(f)).is_absolute()
            and _layout(str(f))}


#: The names of the files ``save_pretrained`` writes for a model and its tokenizer (a warm start's layout): a card
#: that lists any other file does not make it the toolkit's.
LAYOUT = re.compile(r"(?:config|generation_config|tokenizer|tokenizer_config|special_tokens_map|added_tokens|vocab"
                    r"|chat_template|preprocessor_config|model\.safetensors\.index|pytorch_model\.bin\.index)\.json"
                    r"|model(?:-\d+-of-\d+)?\.safetensors|pytorch_model(?:-\d+-of-\d+)?\.bin|training_args\.bin|merges\.txt|vocab\.txt"
                    r"|(?:tokenizer|spiece|sentencepiece\.bpe)\.model|chat_template\.jinja|[^/]*\.tiktoken")


def _layout(name: str) -> bool:
    return LAYOUT.fullmatch(name) is not None


#: A warm start's model folder as the commit protocol sees it (:mod:`rag_curriculum._commit`): ``warm_start.json``
#: (written last) lists the files the warm start wrote.
OUTPUT = OutputKind("a warm start's output", _mismatch, _owned, record=WARM_CARD, error=ConfigError,
                    layout=_layout)


def _sft(model_dir: str, examples: list[dict[str, Any]], out: Path, cfg: WarmStartConfig) -> list[dict[str, Any]]:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTTrainer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    if cfg.freeze_embeddings:
        model.get_input_embeddings().weight.requires_grad_(False)
    args = sft_args(out, cfg, len(examples))
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(examples), processing_class=tok)
    trainer.add_callback(non_finite_callback())  # a diverged step stops it before the weights are saved
    from transformers.trainer_callback import ProgressCallback

    if trainer.pop_callback(ProgressCallback) is not None:  # one compact line per step (as train's), not a dict
        trainer.add_callback(compact_progress_callback())
    trainer.train()
    trainer.save_model(str(out))
    tok.save_pretrained(str(out))
    return trainer.state.log_history


def sft_args(out: Path, cfg: WarmStartConfig, examples: int) -> Any:
    """The warm start's ``trl.SFTConfig``. Activation checkpointing off, said by its current name: a tiny model
    needs no memory saved, and TRL's default (``gradient_checkpointing=True``, the old name) makes transformers warn
    that the name is deprecated; the losses are the same to the last digit either way (measured). On the GPU when
    there is one (bf16 autocast over float32 weights where the card has bf16), else on the CPU in float32."""
    import dataclasses

    import torch
    from trl import SFTConfig

    gpu = torch.cuda.is_available()

    # transformers 5 names it activation_checkpointing; older releases know gradient_checkpointing only
    name = ("activation_checkpointing" if "activation_checkpointing" in {f.name for f in dataclasses.fields(SFTConfig)}
            else "gradient_checkpointing")
    return SFTConfig(
        output_dir=str(out), num_train_epochs=cfg.epochs, learning_rate=cfg.learning_rate,
        per_device_train_batch_size=cfg.batch_size, gradient_accumulation_steps=1, lr_scheduler_type="constant",
        warmup_steps=0, logging_steps=max(1, int(examples * cfg.epochs / cfg.batch_size) // 20), save_strategy="no",
        report_to="none", seed=cfg.seed, data_seed=cfg.seed, use_cpu=not gpu, bf16=gpu and torch.cuda.is_bf16_supported(), max_length=None,
        completion_only_loss=True, dataloader_pin_memory=gpu, **{name: False},
    )
